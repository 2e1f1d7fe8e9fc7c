/* tracepad export's converter: Chrome trace-event JSON (Perfetto UI, chrome://tracing) with
 * function calls as complete slices, or folded stacks for flame graphs.  Calls come from
 * func_entry/func_exit events paired per thread by nesting. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/text.h"
#include "trace/read/export.h"
#include "trace/read/trace-read.h"

struct frame {
	uint32_t name; /* interned */
	uint32_t node; /* folded: calling-context node of this call */
	uint64_t start, child_ns;
	char *args; /* chrome: the entry's fields as a JSON object */
};

struct thread {
	int64_t pid, tid;
	uint64_t last_ts;
	struct frame *st;
	size_t n, cap;
};

/* A calling context: @name called from @parent (node 0 is the root). */
struct node {
	uint32_t parent, name;
	uint64_t self;
};

struct tp_export {
	struct tp_symtab *syms; /* to name addresses; may be NULL */
	enum tp_export_format fmt;
	FILE *out;
	uint64_t t0, nr_events;
	bool any_out;
	char **names;
	uint32_t nr_names;
	size_t cap_names;
	struct tp_hash name_index; /* name -> its index in names */
	struct node *nodes;
	uint32_t nr_nodes;
	size_t cap_nodes;
	struct tp_hash node_index; /* parent << 32 | name -> its index in nodes */
	struct thread *th;
	size_t nr_th, cap_th;
	struct tp_hash th_index; /* pid << 32 | tid -> its index in th */
	uint64_t calls, dropped_exits, closed_early, closed_at_end;
	bool oom;
};

/* Room for one more element in the array *@v of *@cap elements of @size bytes holding @n. */
static bool room(void *v, size_t *cap, size_t n, size_t size)
{
	void **p = v, *nv;
	size_t ncap;

	if (n < *cap)
		return true;
	ncap = *cap ? *cap * 2 : 64;
	nv = realloc(*p, ncap * size);
	if (!nv)
		return false;
	*p = nv;
	*cap = ncap;
	return true;
}

/* ---- interned names ---- */

static bool name_is(void *arg, uint64_t i, const void *s)
{
	return !strcmp(((struct tp_export *)arg)->names[i], s);
}

static uint32_t intern(struct tp_export *e, const char *s)
{
	uint64_t key, *i = tp_hash_get_str(&e->name_index, s, name_is, e, &key);

	if (i)
		return (uint32_t)*i;
	if (!room(&e->names, &e->cap_names, e->nr_names, sizeof(*e->names)) ||
	    !(e->names[e->nr_names] = strdup(s))) {
		e->oom = true;
		return 0;
	}
	if (tp_hash_put(&e->name_index, key, e->nr_names)) {
		free(e->names[e->nr_names]);
		e->oom = true;
		return 0;
	}
	return e->nr_names++;
}

/* ---- the calling-context tree (folded) ---- */

static uint32_t node_child(struct tp_export *e, uint32_t parent, uint32_t name)
{
	uint64_t key = (uint64_t)parent << 32 | name, *i;

	if (!e->nr_nodes) {
		if (!room(&e->nodes, &e->cap_nodes, 0, sizeof(*e->nodes))) {
			e->oom = true;
			return 0;
		}
		e->nodes[e->nr_nodes++] = (struct node){.parent = 0, .name = UINT32_MAX};
	}
	i = tp_hash_get(&e->node_index, key);
	if (i)
		return (uint32_t)*i;
	if (!room(&e->nodes, &e->cap_nodes, e->nr_nodes, sizeof(*e->nodes)) ||
	    tp_hash_put(&e->node_index, key, e->nr_nodes)) {
		e->oom = true;
		return 0;
	}
	e->nodes[e->nr_nodes] = (struct node){.parent = parent, .name = name};
	return e->nr_nodes++;
}

/* ---- threads ---- */

static struct thread *thread_get(struct tp_export *e, int64_t pid, int64_t tid)
{
	uint64_t key = (uint64_t)(uint32_t)pid << 32 | (uint32_t)tid, *i;

	i = tp_hash_get(&e->th_index, key);
	if (i)
		return &e->th[*i];
	if (!room(&e->th, &e->cap_th, e->nr_th, sizeof(*e->th)) ||
	    tp_hash_put(&e->th_index, key, e->nr_th)) {
		e->oom = true;
		return NULL;
	}
	e->th[e->nr_th] = (struct thread){.pid = pid, .tid = tid};
	return &e->th[e->nr_th++];
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
static void put_args(struct tp_export *e, FILE *f, const struct tp_trace_event *ev, bool skip_func)
{
	char sym[512];
	bool any = false;

	fputc('{', f);
	for (uint32_t i = 0; i < ev->nr_fields; i++) {
		const struct tp_trace_field *fld = &ev->fields[i];

		if (tp_trace_field_hidden(ev, i) ||
		    (skip_func && fld->type == TP_TRACE_STRING && !strcmp(fld->name, "func")))
			continue;
		if (any)
			fputs(", ", f);
		any = true;
		tp_json_str(f, fld->name, strlen(fld->name));
		fputs(": ", f);
		if (fld->type == TP_TRACE_INT && tp_trace_is_addr_field(fld->name)) {
			int n = snprintf(sym, sizeof(sym), "0x%" PRIx64 " ", fld->u);

			if (tp_trace_resolve_addr(e->syms, fld->u, sym + n,
						  sizeof(sym) - (size_t)n))
				sym[n - 1] = 0;
			tp_json_str(f, sym, strlen(sym));
		} else if (fld->type == TP_TRACE_INT && fld->base == 16) {
			fputc('"', f);
			tp_trace_print_int(f, fld, fld->u);
			fputc('"', f);
		} else {
			tp_trace_print_json(f, fld);
		}
	}
	fputc('}', f);
}

static void chrome_begin(struct tp_export *e, const char *name, const char *ph, uint64_t ts,
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

static void pop(struct tp_export *e, struct thread *th, uint64_t ts)
{
	struct frame *f = &th->st[--th->n];
	uint64_t dur = ts > f->start ? ts - f->start : 0;

	if (th->n)
		th->st[th->n - 1].child_ns += dur;
	if (e->fmt == TP_EXPORT_CHROME) {
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

static bool call_name(struct tp_export *e, const struct tp_trace_event *ev, char *buf, size_t len)
{
	const struct tp_trace_field *f = tp_trace_event_field(ev, "func");

	if (f && f->type == TP_TRACE_STRING && f->count) {
		snprintf(buf, len, "%.*s", (int)(f->count < len ? f->count : len - 1), f->str);
		return true;
	}
	f = tp_trace_event_field(ev, "addr");
	if (f && f->type == TP_TRACE_INT) {
		tp_trace_func_name(e->syms, f->u, buf, len);
		return true;
	}
	return false;
}

static void on_entry(struct tp_export *e, struct thread *th, const struct tp_trace_event *ev)
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
	if (e->fmt == TP_EXPORT_FOLDED) {
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
static void on_exit_ev(struct tp_export *e, struct thread *th, const struct tp_trace_event *ev)
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

int tp_export_folded(struct tp_export *e, FILE *out)
{
	e->out = out;
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
			tp_trace_print_name(m, e->names[path[depth]], true);
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

void tp_export_free(struct tp_export *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < e->nr_th; i++) {
		for (size_t k = 0; k < e->th[i].n; k++)
			free(e->th[i].st[k].args);
		free(e->th[i].st);
	}
	free(e->th);
	tp_hash_release(&e->th_index);
	for (uint32_t i = 0; i < e->nr_names; i++)
		free(e->names[i]);
	free(e->names);
	tp_hash_release(&e->name_index);
	free(e->nodes);
	tp_hash_release(&e->node_index);
	free(e);
}

int tp_export_event(struct tp_export *e, const struct tp_trace_event *ev)
{
	struct thread *th = e->oom ? NULL : thread_get(e, ev->pid, ev->tid);
	int kind = call_kind(ev->name);

	if (!th)
		return -ENOMEM;
	if (!e->nr_events++)
		e->t0 = ev->ts;
	th->last_ts = ev->ts;
	if (kind > 0) {
		on_entry(e, th, ev);
	} else if (kind < 0) {
		on_exit_ev(e, th, ev);
	} else if (e->fmt == TP_EXPORT_CHROME) {
		chrome_begin(e, ev->name, "i", ev->ts, th);
		fputs(", \"args\": ", e->out);
		put_args(e, e->out, ev, false);
		fputc('}', e->out);
	}
	return e->oom ? -ENOMEM : 0;
}

int tp_export_finish(struct tp_export *e)
{
	/* Calls still open when the trace ends end with their thread's last event. */
	for (size_t i = 0; i < e->nr_th && !e->oom; i++) {
		struct thread *th = &e->th[i];

		while (th->n) {
			pop(e, th, th->last_ts);
			e->closed_at_end++;
		}
	}
	return e->oom ? -ENOMEM : 0;
}

struct tp_export *tp_export_new(enum tp_export_format fmt, struct tp_symtab *syms, FILE *out)
{
	struct tp_export *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->fmt = fmt;
	e->syms = syms;
	e->out = out;
	if (fmt == TP_EXPORT_CHROME)
		fputs("{\"displayTimeUnit\": \"ns\", \"traceEvents\": [", out);
	return e;
}

uint64_t tp_export_calls(const struct tp_export *e)
{
	return e->calls;
}

void tp_export_chrome_end(struct tp_export *e, const char *dir, uint64_t discarded)
{
	fputs("\n], \"otherData\": {\"tracer\": \"tracepad\", \"trace\": ", e->out);
	tp_json_str(e->out, dir, strlen(dir));
	fprintf(e->out,
		", \"events\": %" PRIu64 ", \"calls\": %" PRIu64 ", \"discarded\": %" PRIu64
		", \"unmatched_exits\": %" PRIu64 ", \"calls_closed_at_end\": %" PRIu64
		", \"calls_without_exit\": %" PRIu64 "}}\n",
		e->nr_events, e->calls, discarded, e->dropped_exits, e->closed_at_end,
		e->closed_early);
}
