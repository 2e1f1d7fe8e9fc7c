/* `tracepad trace -x SCRIPT`: tracepoints in a syntax close to gdb's,
 *	trace|ftrace LOCATION [if COND]	condition N COND	passcount COUNT [N]
 *	actions [N] / collect EXPR, ... / while-stepping COUNT / collect ... / end / end
 * turned into the same specs as the command line's -t/-a options. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "tracept/tracept.h"

struct tp_tracept_script {
	char **strs; /* everything the specs point to */
	int nstrs;
	struct tp_tracept_spec *specs;
	int nspecs;
};

static char *keep(struct tp_tracept_script *s, const char *str)
{
	char **v = realloc(s->strs, (s->nstrs + 1) * sizeof(*v));

	if (!v)
		return NULL;
	s->strs = v;
	v[s->nstrs] = strdup(str);
	return v[s->nstrs] ? v[s->nstrs++] : NULL;
}

static int add_text(struct tp_tracept_script *s, struct tp_tracept_text **v, int *n,
		    const char *text, const char *where, int col0)
{
	struct tp_tracept_text *nv = realloc(*v, (*n + 1) * sizeof(*nv));

	if (!nv)
		return -ENOMEM;
	*v = nv;
	nv[*n] = (struct tp_tracept_text){keep(s, text), keep(s, where), col0};
	if (!nv[*n].text || !nv[*n].where)
		return -ENOMEM;
	(*n)++;
	return 0;
}

static bool word(const char *p, const char *w, const char **rest)
{
	size_t n = strlen(w);

	if (strncmp(p, w, n) || (p[n] && p[n] != ' ' && p[n] != '\t'))
		return false;
	p += n;
	while (*p == ' ' || *p == '\t')
		p++;
	*rest = p;
	return true;
}

/* Tracepoint @num (1-based) or, for @num 0, the last one. */
static struct tp_tracept_spec *spec_of(struct tp_tracept_script *s, const char *arg,
				       const char **rest)
{
	char *end;
	long n = strtol(arg, &end, 10);

	if (end == arg) {
		*rest = arg;
		return s->nspecs ? &s->specs[s->nspecs - 1] : NULL;
	}
	while (*end == ' ' || *end == '\t')
		end++;
	*rest = end;
	return n >= 1 && n <= s->nspecs ? &s->specs[n - 1] : NULL;
}

int tp_tracept_script_load(const char *path, struct tp_tracept_script **out,
			   struct tp_tracept_spec **specs, int *nspecs)
{
	struct tp_tracept_script *s = calloc(1, sizeof(*s));
	struct tp_tracept_spec *in = NULL; /* inside "actions" */
	int depth = 0, lineno = 0, r = 0;
	char *line = NULL, where[4200];
	size_t cap = 0;
	ssize_t len;
	FILE *f;

	if (!s)
		return -ENOMEM;
	f = fopen(path, "r");
	if (!f) {
		r = -errno;
		tp_err("cannot read %s: %s", path, strerror(errno));
		free(s);
		return r == -ENOENT || r == -EACCES ? -EINVAL : r;
	}
	while (!r && (len = getline(&line, &cap, f)) > 0) {
		const char *p = line, *rest;
		struct tp_tracept_spec *sp;

		lineno++;
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		while (*p == ' ' || *p == '\t')
			p++;
		snprintf(where, sizeof(where), "%s:%d", path, lineno);
		if (!*p || *p == '#')
			continue;
		if (in) {
			if (word(p, "end", &rest)) {
				if (depth == 2)
					depth = 1;
				else
					in = NULL;
			} else if (word(p, "collect", &rest) || word(p, "teval", &rest)) {
				if (depth == 2)
					r = add_text(s, &in->step_collect, &in->nstep_collect, rest,
						     where, (int)(rest - line));
				else
					r = add_text(s, &in->collect, &in->ncollect, rest, where,
						     (int)(rest - line));
			} else if ((word(p, "while-stepping", &rest) ||
				    word(p, "stepping", &rest) || word(p, "ws", &rest)) &&
				   depth == 1) {
				long n = strtol(rest, NULL, 10);

				if (n < 1 || n > 1000000) {
					tp_err("%s: while-stepping needs a count of 1 to 1000000",
					       where);
					r = -EINVAL;
				}
				in->while_stepping = (unsigned)n;
				depth = 2;
			} else {
				tp_err("%s: expected collect, while-stepping or end", where);
				r = -EINVAL;
			}
			continue;
		}
		if (word(p, "trace", &rest) || word(p, "tr", &rest) || word(p, "ftrace", &rest)) {
			struct tp_tracept_spec *v;

			v = realloc(s->specs, (s->nspecs + 1) * sizeof(*v));
			if (!v) {
				r = -ENOMEM;
				continue;
			}
			s->specs = v;
			memset(&v[s->nspecs], 0, sizeof(*v));
			v[s->nspecs].loc = (struct tp_tracept_text){keep(s, rest), keep(s, where),
								    (int)(rest - line)};
			v[s->nspecs].fast = !strncmp(p, "ftrace", 6);
			s->nspecs++;
		} else if (word(p, "condition", &rest)) {
			sp = spec_of(s, rest, &rest);
			if (!sp) {
				tp_err("%s: condition of no such tracepoint", where);
				r = -EINVAL;
				continue;
			}
			sp->cond = (struct tp_tracept_text){keep(s, rest), keep(s, where),
							    (int)(rest - line)};
		} else if (word(p, "passcount", &rest)) {
			char *end;
			unsigned long long n = strtoull(rest, &end, 10);

			sp = end == rest ? NULL : spec_of(s, end, &rest);
			if (!sp || *rest) {
				tp_err("%s: expected passcount COUNT [TRACEPOINT]", where);
				r = -EINVAL;
				continue;
			}
			sp->pass_count = n;
		} else if (word(p, "actions", &rest)) {
			in = spec_of(s, rest, &rest);
			depth = 1;
			if (!in || *rest) {
				tp_err("%s: actions of no such tracepoint", where);
				r = -EINVAL;
			}
		} else {
			tp_err("%s: unknown command '%.*s'", where, (int)strcspn(p, " \t"), p);
			r = -EINVAL;
		}
	}
	free(line);
	fclose(f);
	if (!r && in) {
		tp_err("%s: 'actions' without its 'end'", path);
		r = -EINVAL;
	}
	if (!r && !s->nspecs) {
		tp_err("%s: no tracepoint", path);
		r = -EINVAL;
	}
	if (r) {
		tp_tracept_script_free(s);
		return r;
	}
	*out = s;
	*specs = s->specs;
	*nspecs = s->nspecs;
	return 0;
}

void tp_tracept_script_free(struct tp_tracept_script *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->nspecs; i++) {
		free(s->specs[i].collect);
		free(s->specs[i].step_collect);
	}
	free(s->specs);
	while (s->nstrs)
		free(s->strs[--s->nstrs]);
	free(s->strs);
	free(s);
}
