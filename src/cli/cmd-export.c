/* tracepad export: convert a trace for other tools: Chrome trace-event JSON (Perfetto UI,
 * chrome://tracing) with function calls as complete slices, or folded stacks for flame
 * graphs.  Calls come from func_entry/func_exit events paired per thread by nesting. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/trace-read.h"
#include "base/text.h"

static const char usage_text[] =
    "usage: tracepad export [OPTIONS] DIR\n"
    "\n"
    "Convert the trace in DIR.  Function calls are func_entry/func_exit events (a func\n"
    "string field, or an addr field resolved with DIR/.maps), paired per thread.\n"
    "\n"
    "  --format F      chrome: Chrome trace-event JSON for Perfetto UI and\n"
    "                  chrome://tracing (default); folded: folded stacks with the\n"
    "                  self time in ns, for flame graphs\n"
    "  -o OUT          write to OUT instead of standard output\n"
    "  -h, --help      show this help\n";

enum format { FMT_CHROME, FMT_FOLDED };

struct frame {
	uint32_t name; /* interned */
	uint32_t node; /* folded: calling-context node of this call */
	uint64_t start, child_ns;
	char *args; /* chrome: the entry's fields as a JSON object */
};

struct thread {
	int64_t pid, tid;
	bool used;
	uint64_t last_ts;
	struct frame *st;
	size_t n, cap;
};

/* A calling context: @name called from @parent (node 0 is the root). */
struct node {
	uint32_t parent, name;
	uint64_t self;
};

struct export
{
	struct tp_cli_trace t;
	enum format fmt;
	FILE *out;
	uint64_t t0;
	bool any_out;
	char **names;
	uint32_t nr_names, *name_hash; /* index + 1, 0 for empty */
	size_t name_hcap;
	struct node *nodes;
	uint32_t nr_nodes, *node_hash;
	size_t node_hcap, cap_nodes;
	struct thread *th;
	size_t nr_th, cap_th;
	uint64_t calls, dropped_exits, closed_early, closed_at_end;
	bool oom;
};

static uint64_t hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

static uint64_t hash_u64(uint64_t v)
{
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdull;
	v ^= v >> 33;
	return v;
}

/* ---- interned names ---- */

static bool names_grow(struct export *e)
{
	size_t ncap = e->name_hcap ? e->name_hcap * 2 : 256;
	uint32_t *nh = calloc(ncap, sizeof(*nh));
	char **nn = realloc(e->names, ncap / 2 * sizeof(*nn));

	if (nn)
		e->names = nn;
	if (!nh || !nn) {
		free(nh);
		return false;
	}
	for (uint32_t i = 0; i < e->nr_names; i++) {
		size_t j = hash_str(e->names[i]) & (ncap - 1);

		while (nh[j])
			j = (j + 1) & (ncap - 1);
		nh[j] = i + 1;
	}
	free(e->name_hash);
	e->name_hash = nh;
	e->name_hcap = ncap;
	return true;
}

static uint32_t intern(struct export *e, const char *s)
{
	size_t j;

	if ((e->nr_names + 1u) * 2 > e->name_hcap && !names_grow(e)) {
		e->oom = true;
		return 0;
	}
	j = hash_str(s) & (e->name_hcap - 1);
	while (e->name_hash[j]) {
		if (!strcmp(e->names[e->name_hash[j] - 1], s))
			return e->name_hash[j] - 1;
		j = (j + 1) & (e->name_hcap - 1);
	}
	e->names[e->nr_names] = strdup(s);
	if (!e->names[e->nr_names]) {
		e->oom = true;
		return 0;
	}
	e->name_hash[j] = e->nr_names + 1;
	return e->nr_names++;
}

/* ---- the calling-context tree (folded) ---- */

static uint64_t node_key(uint32_t parent, uint32_t name)
{
	return hash_u64((uint64_t)parent << 32 | name);
}

static bool nodes_grow(struct export *e)
{
	size_t ncap = e->node_hcap ? e->node_hcap * 2 : 1024;
	uint32_t *nh = calloc(ncap, sizeof(*nh));
	struct node *nn = realloc(e->nodes, ncap / 2 * sizeof(*nn));

	if (nn)
		e->nodes = nn;
	if (!nh || !nn) {
		free(nh);
		return false;
	}
	for (uint32_t i = 1; i < e->nr_nodes; i++) {
		size_t j = node_key(e->nodes[i].parent, e->nodes[i].name) & (ncap - 1);

		while (nh[j])
			j = (j + 1) & (ncap - 1);
		nh[j] = i + 1;
	}
	free(e->node_hash);
	e->node_hash = nh;
	e->node_hcap = ncap;
	return true;
}

static uint32_t node_child(struct export *e, uint32_t parent, uint32_t name)
{
	size_t j;

	if ((e->nr_nodes + 1u) * 2 > e->node_hcap && !nodes_grow(e)) {
		e->oom = true;
		return 0;
	}
	if (!e->nr_nodes)
		e->nodes[e->nr_nodes++] = (struct node){.parent = 0, .name = UINT32_MAX};
	j = node_key(parent, name) & (e->node_hcap - 1);
	while (e->node_hash[j]) {
		const struct node *n = &e->nodes[e->node_hash[j] - 1];

		if (n->parent == parent && n->name == name)
			return e->node_hash[j] - 1;
		j = (j + 1) & (e->node_hcap - 1);
	}
	e->nodes[e->nr_nodes] = (struct node){.parent = parent, .name = name};
	e->node_hash[j] = e->nr_nodes + 1;
	return e->nr_nodes++;
}

/* ---- threads ---- */

static struct thread *thread_get(struct export *e, int64_t pid, int64_t tid)
{
	size_t j;

	if ((e->nr_th + 1) * 2 > e->cap_th) {
		size_t ncap = e->cap_th ? e->cap_th * 2 : 64;
		struct thread *nt = calloc(ncap, sizeof(*nt));

		if (!nt) {
			e->oom = true;
			return NULL;
		}
		for (size_t i = 0; i < e->cap_th; i++) {
			if (!e->th[i].used)
				continue;
			j = hash_u64((uint64_t)e->th[i].pid * 31 + (uint64_t)e->th[i].tid) &
			    (ncap - 1);
			while (nt[j].used)
				j = (j + 1) & (ncap - 1);
			nt[j] = e->th[i];
		}
		free(e->th);
		e->th = nt;
		e->cap_th = ncap;
	}
	j = hash_u64((uint64_t)pid * 31 + (uint64_t)tid) & (e->cap_th - 1);
	while (e->th[j].used && (e->th[j].pid != pid || e->th[j].tid != tid))
		j = (j + 1) & (e->cap_th - 1);
	if (!e->th[j].used) {
		e->th[j] = (struct thread){.pid = pid, .tid = tid, .used = true};
		e->nr_th++;
	}
	return &e->th[j];
}

/* ---- Chrome JSON ---- */

static void put_us(FILE *f, uint64_t ns)
{
	fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned int)(ns % 1000));
}

static void put_id(FILE *f, int64_t v)
{
	fprintf(f, "%" PRId64, v < 0 ? 0 : v);
}

/* The fields as "args": addresses and hex integers as strings, as a UI shows them. */
static void put_args(struct export *e, FILE *f, const struct tp_trace_event *ev, bool skip_func)
{
	char sym[512];
	bool any = false;

	fputc('{', f);
	for (uint32_t i = 0; i < ev->nr_fields; i++) {
		const struct tp_trace_field *fld = &ev->fields[i];

		if (tp_cli_field_hidden(ev, i) ||
		    (skip_func && fld->type == TP_TRACE_STRING && !strcmp(fld->name, "func")))
			continue;
		if (any)
			fputs(", ", f);
		any = true;
		tp_json_str(f, fld->name, strlen(fld->name));
		fputs(": ", f);
		if (fld->type == TP_TRACE_INT && tp_cli_is_addr_field(fld->name)) {
			int n = snprintf(sym, sizeof(sym), "0x%" PRIx64 " ", fld->u);

			if (tp_cli_resolve(e->t.syms, fld->u, sym + n, sizeof(sym) - (size_t)n))
				sym[n - 1] = 0;
			tp_json_str(f, sym, strlen(sym));
		} else if (fld->type == TP_TRACE_INT && fld->base == 16) {
			fputc('"', f);
			tp_cli_put_int(f, fld, fld->u);
			fputc('"', f);
		} else {
			tp_cli_put_value_json(f, fld);
		}
	}
	fputc('}', f);
}

static void chrome_begin(struct export *e, const char *name, const char *ph, uint64_t ts,
			 const struct thread *th)
{
	fputs(e->any_out ? ",\n" : "\n", e->out);
	e->any_out = true;
	fputs("{\"name\": ", e->out);
	tp_json_str(e->out, name, strlen(name));
	fprintf(e->out, ", \"cat\": \"%s\", \"ph\": \"%s\", ", *ph == 'X' ? "function" : "event",
		ph);
	if (*ph == 'i')
		fputs("\"s\": \"t\", ", e->out);
	fputs("\"ts\": ", e->out);
	put_us(e->out, ts - e->t0);
	fputs(", \"pid\": ", e->out);
	put_id(e->out, th->pid);
	fputs(", \"tid\": ", e->out);
	put_id(e->out, th->tid);
}

/* ---- calls ---- */

static void pop(struct export *e, struct thread *th, uint64_t ts)
{
	struct frame *f = &th->st[--th->n];
	uint64_t dur = ts > f->start ? ts - f->start : 0;

	if (th->n)
		th->st[th->n - 1].child_ns += dur;
	if (e->fmt == FMT_CHROME) {
		chrome_begin(e, e->names[f->name], "X", f->start, th);
		fputs(", \"dur\": ", e->out);
		put_us(e->out, dur);
		fprintf(e->out, ", \"args\": %s}", f->args ? f->args : "{}");
	} else {
		e->nodes[f->node].self += dur > f->child_ns ? dur - f->child_ns : 0;
	}
	free(f->args);
	e->calls++;
}

/* func_entry, func_exit, or (0) neither: the class name or its last ':' component. */
static int call_kind(const char *name)
{
	const char *c = strrchr(name, ':');

	name = c ? c + 1 : name;
	if (!strcmp(name, "func_entry"))
		return 1;
	if (!strcmp(name, "func_exit"))
		return -1;
	return 0;
}

static bool call_name(struct export *e, const struct tp_trace_event *ev, char *buf, size_t len)
{
	const struct tp_trace_field *f = tp_trace_event_field(ev, "func");

	if (f && f->type == TP_TRACE_STRING && f->count) {
		snprintf(buf, len, "%.*s", (int)(f->count < len ? f->count : len - 1), f->str);
		return true;
	}
	f = tp_trace_event_field(ev, "addr");
	if (f && f->type == TP_TRACE_INT) {
		tp_cli_func_name(e->t.syms, f->u, buf, len);
		return true;
	}
	return false;
}

static void on_entry(struct export *e, struct thread *th, const struct tp_trace_event *ev)
{
	char name[512];
	struct frame *f;

	if (!call_name(e, ev, name, sizeof(name)))
		snprintf(name, sizeof(name), "?");
	if (th->n == th->cap) {
		size_t ncap = th->cap ? th->cap * 2 : 16;
		struct frame *ns = realloc(th->st, ncap * sizeof(*ns));

		if (!ns) {
			e->oom = true;
			return;
		}
		th->st = ns;
		th->cap = ncap;
	}
	f = &th->st[th->n];
	*f = (struct frame){.name = intern(e, name), .start = ev->ts};
	if (e->oom)
		return;
	if (e->fmt == FMT_FOLDED) {
		f->node = node_child(e, th->n ? th->st[th->n - 1].node : 0, f->name);
	} else {
		size_t len;
		FILE *m = open_memstream(&f->args, &len);

		if (!m) {
			e->oom = true;
			return;
		}
		put_args(e, m, ev, true);
		if (fclose(m)) {
			free(f->args);
			f->args = NULL;
		}
	}
	th->n++;
}

/* Pop to the innermost call of the same function: calls above it lost their exit (longjmp,
 * exception) and end here.  An exit that matches no call is dropped. */
static void on_exit_ev(struct export *e, struct thread *th, const struct tp_trace_event *ev)
{
	char name[512];
	size_t k;
	uint32_t id;

	if (!call_name(e, ev, name, sizeof(name))) {
		if (th->n)
			pop(e, th, ev->ts);
		else
			e->dropped_exits++;
		return;
	}
	id = intern(e, name);
	for (k = th->n; k > 0 && th->st[k - 1].name != id; k--)
		;
	if (!k) {
		e->dropped_exits++;
		return;
	}
	while (th->n > k) {
		pop(e, th, ev->ts);
		e->closed_early++;
	}
	pop(e, th, ev->ts);
}

/* ---- folded ---- */

struct fline {
	char *stack;
	uint64_t self;
};

static int cmp_flines(const void *a, const void *b)
{
	return strcmp(((const struct fline *)a)->stack, ((const struct fline *)b)->stack);
}

static int put_folded(struct export *e)
{
	struct fline *lines = calloc(e->nr_nodes ? e->nr_nodes : 1, sizeof(*lines));
	uint32_t *path = calloc(e->nr_nodes ? e->nr_nodes : 1, sizeof(*path));
	size_t nl = 0;
	int err = 0;

	if (!lines || !path)
		err = -ENOMEM;
	for (uint32_t i = 1; !err && i < e->nr_nodes; i++) {
		size_t depth = 0, len;
		FILE *m;

		if (!e->nodes[i].self)
			continue;
		for (uint32_t n = i; n; n = e->nodes[n].parent)
			path[depth++] = e->nodes[n].name;
		m = open_memstream(&lines[nl].stack, &len);
		if (!m) {
			err = -ENOMEM;
			break;
		}
		while (depth--) {
			tp_cli_put_name(m, e->names[path[depth]], true);
			if (depth)
				fputc(';', m);
		}
		if (fclose(m)) {
			err = -ENOMEM;
			break;
		}
		lines[nl++].self = e->nodes[i].self;
	}
	if (!err) {
		if (nl)
			qsort(lines, nl, sizeof(*lines), cmp_flines);
		for (size_t i = 0; i < nl; i++)
			fprintf(e->out, "%s %" PRIu64 "\n", lines[i].stack, lines[i].self);
	}
	for (size_t i = 0; lines && i <= nl && i < e->nr_nodes; i++)
		free(lines[i].stack);
	free(lines);
	free(path);
	return err;
}

/* ---- the command ---- */

static void export_free(struct export *e)
{
	for (size_t i = 0; i < e->cap_th; i++) {
		for (size_t k = 0; k < e->th[i].n; k++)
			free(e->th[i].st[k].args);
		free(e->th[i].st);
	}
	free(e->th);
	for (uint32_t i = 0; i < e->nr_names; i++)
		free(e->names[i]);
	free(e->names);
	free(e->name_hash);
	free(e->nodes);
	free(e->node_hash);
	tp_cli_trace_close(&e->t);
}

/* Read every event; 0, or the exit status after a one-line error. */
static int convert(struct export *e)
{
	const struct tp_trace_event *ev;
	int err;

	while ((err = tp_cli_trace_next(&e->t, &ev)) > 0 && !e->oom) {
		struct thread *th = thread_get(e, ev->pid, ev->tid);
		int kind = call_kind(ev->name);

		if (!th)
			break;
		if (e->t.nr_events == 1)
			e->t0 = ev->ts;
		th->last_ts = ev->ts;
		if (kind > 0) {
			on_entry(e, th, ev);
		} else if (kind < 0) {
			on_exit_ev(e, th, ev);
		} else if (e->fmt == FMT_CHROME) {
			chrome_begin(e, ev->name, "i", ev->ts, th);
			fputs(", \"args\": ", e->out);
			put_args(e, e->out, ev, false);
			fputc('}', e->out);
		}
	}
	if (err < 0)
		return 2;
	/* Calls still open when the trace ends end with their thread's last event. */
	for (size_t i = 0; i < e->cap_th && !e->oom; i++) {
		struct thread *th = &e->th[i];

		while (th->used && th->n) {
			pop(e, th, th->last_ts);
			e->closed_at_end++;
		}
	}
	if (e->oom) {
		tp_cli_error("export", "out of memory");
		return 1;
	}
	return 0;
}

int cmd_export(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"format", required_argument, NULL, 'F'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct export e = {.fmt = FMT_CHROME};
	const char *outfile = NULL;
	uint64_t discarded;
	int opt, status;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'F':
			if (!strcmp(optarg, "chrome")) {
				e.fmt = FMT_CHROME;
			} else if (!strcmp(optarg, "folded")) {
				e.fmt = FMT_FOLDED;
			} else {
				tp_cli_error("export", "unknown --format '%s' (chrome, folded)",
					     optarg);
				return 2;
			}
			break;
		case 'o':
			outfile = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		tp_cli_error("export", optind == argc ? "no trace directory (tracepad export DIR)"
						      : "one trace directory at a time");
		return 2;
	}
	status = tp_cli_trace_open(&e.t, "export", argv[optind], true);
	if (status)
		return status;
	/* Chrome JSON is written as the trace is read; folded stacks only at the end, so that
	 * a trace without calls leaves no output file behind. */
	if (e.fmt == FMT_CHROME) {
		e.out = tp_cli_out_open("export", outfile);
		if (!e.out) {
			export_free(&e);
			return 2;
		}
		fputs("{\"displayTimeUnit\": \"ns\", \"traceEvents\": [", e.out);
	}
	status = convert(&e);
	discarded = tp_trace_reader_discarded(e.t.r);
	if (!status && e.fmt == FMT_FOLDED) {
		if (!e.calls) {
			tp_cli_error("export",
				     "%s: no func_entry/func_exit events: no stacks to fold",
				     e.t.dir);
			status = 2;
		} else if (!(e.out = tp_cli_out_open("export", outfile))) {
			status = 2;
		} else if (put_folded(&e)) {
			tp_cli_error("export", "out of memory");
			status = 1;
		}
	} else if (!status) {
		fputs("\n], \"otherData\": {\"tracer\": \"tracepad\", \"trace\": ", e.out);
		tp_json_str(e.out, e.t.dir, strlen(e.t.dir));
		fprintf(e.out,
			", \"events\": %" PRIu64 ", \"calls\": %" PRIu64 ", \"discarded\": %" PRIu64
			", \"unmatched_exits\": %" PRIu64 ", \"calls_closed_at_end\": %" PRIu64
			", \"calls_without_exit\": %" PRIu64 "}}\n",
			e.t.nr_events, e.calls, discarded, e.dropped_exits, e.closed_at_end,
			e.closed_early);
	}
	/* no half-written file that looks like a result: an existing one is kept as it was */
	if (e.out && tp_cli_out_close("export", e.out, outfile, !status) && !status)
		status = 1;
	if (!status && discarded)
		tp_cli_error("export",
			     "warning: the producers discarded %" PRIu64
			     " events: calls may be cut short or missing",
			     discarded);
	export_free(&e);
	return status;
}
