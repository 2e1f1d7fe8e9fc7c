/* Event filters shared by the trace readers of the CLI (see filter.h). */
#include "cli/filter.h"

#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const char *const opt_name[] = {"--class", "--pid", "--tid", "--from", "--to"};

static int add_ids(struct tp_cli_filter *f, const char *cmd, enum tp_cli_filter_kind kind,
		   const char *arg)
{
	const char *p = arg;

	do {
		char *end;
		long long v;
		int64_t *n;

		errno = 0;
		v = strtoll(p, &end, 10);
		if (errno || end == p || (*end && *end != ',') || v < 0) {
			tp_cli_error(cmd, "%s '%s': not a list of ids", opt_name[kind], arg);
			return 2;
		}
		n = realloc(f->ids, (f->nr_pids + f->nr_tids + 1) * sizeof(*n));
		if (!n) {
			tp_cli_error(cmd, "out of memory");
			return 1;
		}
		f->ids = n;
		if (kind == TP_FILTER_PID) {
			/* pids come first: make room at the end of them */
			memmove(n + f->nr_pids + 1, n + f->nr_pids, f->nr_tids * sizeof(*n));
			n[f->nr_pids++] = v;
		} else {
			n[f->nr_pids + f->nr_tids++] = v;
		}
		p = *end ? end + 1 : end;
	} while (*p);
	return 0;
}

static int add_classes(struct tp_cli_filter *f, const char *cmd, const char *arg)
{
	const char *p = arg;

	while (*p) {
		size_t len = strcspn(p, ",");
		char **n;

		if (!len || (len == 1 && *p == '!')) {
			tp_cli_error(cmd, "--class '%s': an empty pattern", arg);
			return 2;
		}
		n = realloc(f->classes, (f->nr_classes + 1) * sizeof(*n));
		if (!n || !(n[f->nr_classes] = strndup(p, len))) {
			if (n)
				f->classes = n;
			tp_cli_error(cmd, "out of memory");
			return 1;
		}
		f->classes = n;
		f->nr_classes++;
		p += len + (p[len] == ',');
	}
	if (!f->nr_classes) {
		tp_cli_error(cmd, "--class '%s': an empty pattern", arg);
		return 2;
	}
	return 0;
}

int tp_cli_filter_add(struct tp_cli_filter *f, const char *cmd, enum tp_cli_filter_kind kind,
		      const char *arg)
{
	char *end;
	double s;

	if (!f->any)
		f->to_ns = UINT64_MAX;
	f->any = true;
	switch (kind) {
	case TP_FILTER_CLASS:
		return add_classes(f, cmd, arg);
	case TP_FILTER_PID:
	case TP_FILTER_TID:
		return add_ids(f, cmd, kind, arg);
	case TP_FILTER_FROM:
	case TP_FILTER_TO:
		errno = 0;
		s = strtod(arg, &end);
		if (errno || end == arg || *end || !isfinite(s) || s < 0 || s > 1e9) {
			tp_cli_error(cmd, "%s '%s': not a number of seconds since the first event",
				     opt_name[kind], arg);
			return 2;
		}
		*(kind == TP_FILTER_FROM ? &f->from_ns : &f->to_ns) = (uint64_t)(s * 1e9 + 0.5);
		return 0;
	}
	return 2;
}

static bool in(const int64_t *ids, size_t n, int64_t v)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == v)
			return true;
	return false;
}

bool tp_cli_filter_match(const struct tp_cli_filter *f, const struct tp_trace_event *ev,
			 uint64_t t0)
{
	bool pos = false, hit = false;
	uint64_t rel = ev->ts - t0;

	if (!f->any)
		return true;
	if (rel < f->from_ns || rel > f->to_ns)
		return false;
	if (f->nr_pids && !in(f->ids, f->nr_pids, ev->pid))
		return false;
	if (f->nr_tids && !in(f->ids + f->nr_pids, f->nr_tids, ev->tid))
		return false;
	for (size_t i = 0; i < f->nr_classes; i++) {
		const char *g = f->classes[i];

		if (g[0] == '!') {
			if (!fnmatch(g + 1, ev->name, 0))
				return false;
		} else {
			pos = true;
			hit = hit || !fnmatch(g, ev->name, 0);
		}
	}
	return !pos || hit;
}

void tp_cli_filter_free(struct tp_cli_filter *f)
{
	for (size_t i = 0; i < f->nr_classes; i++)
		free(f->classes[i]);
	free(f->classes);
	free(f->ids);
	*f = (struct tp_cli_filter){0};
}
