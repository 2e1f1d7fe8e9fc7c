/* `tracepad calls --trace DIR`: each call's entry and return, and the process events (exec,
 * exit, signals), as events of a CTF trace (the trace store's tracer-side producer), read by
 * tracepad dump/report/export. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "calls/engine.h"
#include "trace/trace.h"

/* What every event of a function starts with (object, function, address), encoded once:
 * a direct-mapped cache by the function's record (the agent engine writes millions of
 * events a second, and strlen and copies of each name were a fifth of an event). */
#define HEADS 256
#define HEAD_MAX 512

struct head {
	const struct func *f;
	uint32_t len;
	uint8_t b[HEAD_MAX];
};

struct calls_trace {
	struct head *heads; /* HEADS, allocated at the first event */
	struct tp_trace_writer *w;
	struct tp_trace_producer prod;
	int id_entry, id_return, id_exec, id_exit, id_killed, id_signal;
	int err;
	uint64_t last_ns; /* the stream's latest time stamp: events never go back before it */
};

static const struct tp_trace_field_desc entry_fields[] = {
    {"object", TP_TRACE_STRING},
    {"function", TP_TRACE_STRING},
    {"address", TP_TRACE_INT, 64, false, 16},
    {"args", TP_TRACE_STRING},
    {"depth", TP_TRACE_INT, 32},
};

static const struct tp_trace_field_desc return_fields[] = {
    {"object", TP_TRACE_STRING},
    {"function", TP_TRACE_STRING},
    {"address", TP_TRACE_INT, 64, false, 16},
    {"retval", TP_TRACE_STRING},
    {"duration_ns", TP_TRACE_INT, 64},
    {"depth", TP_TRACE_INT, 32},
};

static const struct tp_trace_field_desc exec_fields[] = {
    {"program", TP_TRACE_STRING},
    {"argv", TP_TRACE_STRING},
};

static const struct tp_trace_field_desc exit_fields[] = {
    {"status", TP_TRACE_INT, 32, true},
};

static const struct tp_trace_field_desc killed_fields[] = {
    {"signal", TP_TRACE_STRING},
    {"core_dumped", TP_TRACE_INT, 8},
};

static const struct tp_trace_field_desc signal_fields[] = {
    {"signal", TP_TRACE_STRING},
    {"siginfo", TP_TRACE_STRING},
};

int tp_calls_trace_open(struct session *s, const char *dir, struct calls_trace **out)
{
	struct calls_trace *t = calloc(1, sizeof(*t));
	int r;

	(void)s;
	if (!t)
		return -ENOMEM;
	r = tp_trace_writer_new(dir, NULL, &t->w);
	if (r)
		goto err_free;
	t->id_entry = tp_trace_writer_add_class(t->w, "call_entry", entry_fields, 5);
	t->id_return = tp_trace_writer_add_class(t->w, "call_return", return_fields, 6);
	t->id_exec = tp_trace_writer_add_class(t->w, "process_exec", exec_fields, 2);
	t->id_exit = tp_trace_writer_add_class(t->w, "process_exit", exit_fields, 1);
	t->id_killed = tp_trace_writer_add_class(t->w, "process_killed", killed_fields, 2);
	t->id_signal = tp_trace_writer_add_class(t->w, "signal", signal_fields, 2);
	{
		const int ids[] = {t->id_entry,	 t->id_exec,   t->id_exit,
				   t->id_return, t->id_killed, t->id_signal};

		r = 0;
		for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
			if (ids[i] < 0)
				r = ids[i];
	}
	if (!r)
		r = tp_trace_writer_producer_init(t->w, &t->prod);
	if (r)
		goto err_writer;
	*out = t;
	return 0;

err_writer:
	tp_trace_writer_free(t->w);
err_free:
	free(t);
	return r;
}

/* The bytes of string @s a string field holds: 600 at most. */
static size_t str_len(const char *s)
{
	size_t n = strlen(s);

	return n > 600 ? 600 : n;
}

static uint8_t *put_s(uint8_t *q, const char *s)
{
	return tp_trace_put_str(q, s, str_len(s));
}

/* The fields object, function and address of @f's events, encoded: from the cache, else
 * into it; NULL when they do not fit there. */
static const struct head *head_of(struct calls_trace *t, const struct func *f)
{
	struct head *h;
	uint8_t b[HEAD_MAX + 2 * 601 + 8], *e;

	if (!t->heads)
		t->heads = calloc(HEADS, sizeof(*t->heads));
	h = t->heads ? &t->heads[((uintptr_t)f >> 4) % HEADS] : NULL;
	if (!h || h->f == f)
		return h;
	e = put_s(b, f->obj->base);
	e = put_s(e, f->name);
	e = tp_trace_put_u64(e, f->addr);
	if (e - b > HEAD_MAX)
		return NULL;
	h->f = f;
	h->len = (uint32_t)(e - b);
	memcpy(h->b, b, h->len);
	return h;
}

/* The fields object, function and address of @f's events, at @q. */
static uint8_t *put_head(struct calls_trace *t, uint8_t *q, const struct func *f)
{
	const struct head *h = head_of(t, f);

	if (h) {
		memcpy(q, h->b, h->len);
		return q + h->len;
	}
	q = put_s(q, f->obj->base);
	q = put_s(q, f->name);
	return tp_trace_put_u64(q, f->addr);
}

/* The time stamp an event of @ns (0: now) gets: the stream's times never go back, and an
 * estimate (a call's start) may come out before an event already written. */
static uint64_t stamp(struct calls_trace *t, uint64_t ns)
{
	if (!ns)
		ns = tp_trace_clock_now(t->prod.clock);
	if (ns < t->last_ns)
		ns = t->last_ns;
	return ns;
}

/* Room for an event of @len bytes as of @ns on the trace's clock (CLOCK_MONOTONIC, as
 * tp_calls_now_ns), 0: now; NULL when it cannot be written.  tp_trace_commit() writes it. */
static uint8_t *reserve(struct calls_trace *t, int id, pid_t pid, pid_t tid, size_t len,
			uint64_t ns)
{
	uint8_t *e;

	if (t->err)
		return NULL;
	t->last_ns = stamp(t, ns);
	e = tp_trace_reserve_at(&t->prod, (uint16_t)id, (uint32_t)len, t->last_ns, pid, tid);
	if (!e)
		t->err = -ENOSPC;
	return e;
}

/* An event of the @len bytes at @buf as of @ns (0: now). */
static void put_at(struct calls_trace *t, int id, pid_t pid, pid_t tid, const uint8_t *buf,
		   size_t len, uint64_t ns)
{
	uint8_t *e = reserve(t, id, pid, tid, len, ns);

	if (e) {
		memcpy(e, buf, len);
		tp_trace_commit(&t->prod);
	}
}

static void put(struct calls_trace *t, int id, pid_t pid, pid_t tid, const uint8_t *buf, size_t len)
{
	put_at(t, id, pid, tid, buf, len, 0);
}

void tp_calls_trace_call(struct calls_trace *t, struct rec *r)
{
	const struct head *h = head_of(t, r->f);
	size_t n = str_len(r->args);
	uint8_t buf[2048], *q;

	r->c.entry_ns = stamp(t, r->c.entry_ns); /* its duration counts from the stamp written */
	if (h) {
		/* encoded where it goes: through a buffer, its copy cost as much as the rest */
		q = reserve(t, t->id_entry, r->c.pid, r->c.tid, h->len + n + 1 + 4, r->c.entry_ns);
		if (!q)
			return;
		memcpy(q, h->b, h->len);
		q = tp_trace_put_str(q + h->len, r->args, n);
		tp_trace_put_u32(q, r->c.depth);
		tp_trace_commit(&t->prod);
		return;
	}
	q = put_head(t, buf, r->f);
	q = put_s(q, r->args);
	q = tp_trace_put_u32(q, r->c.depth);
	put_at(t, t->id_entry, r->c.pid, r->c.tid, buf, (size_t)(q - buf), r->c.entry_ns);
}

void tp_calls_trace_return(struct calls_trace *t, const struct rec *r, const char *ret)
{
	const struct head *h = head_of(t, r->f);
	size_t n = str_len(ret);
	uint8_t buf[2048], *q;
	uint64_t ts = stamp(t, r->c.return_ns > r->c.entry_ns ? r->c.return_ns : r->c.entry_ns);
	uint64_t d = ts - r->c.entry_ns; /* exactly the difference of the two time stamps */

	if (h) {
		q = reserve(t, t->id_return, r->c.pid, r->c.tid, h->len + n + 1 + 8 + 4, ts);
		if (!q)
			return;
		memcpy(q, h->b, h->len);
		q = tp_trace_put_str(q + h->len, ret, n);
		q = tp_trace_put_u64(q, d);
		tp_trace_put_u32(q, r->c.depth);
		tp_trace_commit(&t->prod);
		return;
	}
	q = put_head(t, buf, r->f);
	q = put_s(q, ret);
	q = tp_trace_put_u64(q, d);
	q = tp_trace_put_u32(q, r->c.depth);
	put_at(t, t->id_return, r->c.pid, r->c.tid, buf, (size_t)(q - buf), ts);
}

void tp_calls_trace_exec(struct calls_trace *t, pid_t pid, pid_t tid, const char *path,
			 const char *argv)
{
	uint8_t buf[2048], *q;

	q = put_s(buf, path);
	q = put_s(q, argv);
	put(t, t->id_exec, pid, tid, buf, (size_t)(q - buf));
}

void tp_calls_trace_exit(struct calls_trace *t, pid_t pid, pid_t tid, int code, const char *signame,
			 bool core)
{
	uint8_t buf[64], *q;

	if (!signame) {
		q = tp_trace_put_u32(buf, (uint32_t)code);
		put(t, t->id_exit, pid, tid, buf, (size_t)(q - buf));
		return;
	}
	q = tp_trace_put_str(buf, signame, strnlen(signame, 32));
	q = tp_trace_put_u8(q, core);
	put(t, t->id_killed, pid, tid, buf, (size_t)(q - buf));
}

void tp_calls_trace_signal(struct calls_trace *t, pid_t pid, pid_t tid, const char *signame,
			   const char *info)
{
	uint8_t buf[2048], *q;

	q = put_s(buf, signame);
	q = put_s(q, info);
	put(t, t->id_signal, pid, tid, buf, (size_t)(q - buf));
}

int tp_calls_trace_close(struct calls_trace *t)
{
	int r, r2;

	if (!t)
		return 0;
	r = t->err;
	r2 = tp_trace_producer_fini(&t->prod);
	free(t->heads);
	if (r || r2) {
		tp_trace_writer_free(t->w);
		free(t);
		return r ? r : r2;
	}
	r = tp_trace_writer_close(t->w);
	free(t);
	return r;
}
