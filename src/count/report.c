/* The results of `tracepad count`: per-thread counts, the address table the engines fill,
 * the histogram built from it (mnemonics, or addresses resolved to functions and objects),
 * and the report as text, as JSON, or as events of a CTF trace (--trace). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "base/text.h"
#include "count/count-priv.h"
#include "elf/symbols.h"
#include "trace/trace.h"

static const char *const by_names[] = {"", "mnemonic", "function", "object", "address"};

/* ---- results ---- */

double tp_count_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void tp_count_progress(struct tp_count_ctx *c, uint64_t total)
{
	double t = tp_count_now();

	if (!c->progress || t - c->last_progress < 0.5)
		return;
	c->last_progress = t;
	c->progress(total, t > c->t_start ? (double)total / (t - c->t_start) : 0.0, false);
}

void tp_count_progress_end(struct tp_count_ctx *c)
{
	if (c->progress && c->last_progress > c->t_start)
		c->progress(0, 0.0, true);
}

void tp_count_add_thread(struct tp_count_result *r, pid_t tid, uint64_t n)
{
	for (int i = 0; i < r->nthreads; i++) {
		if (r->threads[i].tid == tid) {
			r->threads[i].count += n;
			return;
		}
	}
	if (r->nthreads == r->cap_threads) {
		int ncap = r->cap_threads ? r->cap_threads * 2 : 16;
		struct tp_count_thread *t = realloc(r->threads, (size_t)ncap * sizeof(*t));

		if (!t)
			return;
		r->threads = t;
		r->cap_threads = ncap;
	}
	r->threads[r->nthreads].tid = tid;
	r->threads[r->nthreads].count = n;
	r->nthreads++;
}

void tp_count_addrs_add(struct tp_count_addrs *h, uint64_t pc, uint64_t n)
{
	uint64_t *v;

	if (!pc)
		return;
	v = tp_hash_get(&h->pcs, pc);
	if (v)
		*v += n;
	else if (tp_hash_put(&h->pcs, pc, n))
		h->dropped += n;
}

/* ---- the histogram: key -> count, built from mnemonics or resolved addresses ---- */

struct hentry {
	char *key;
	uint64_t count;
};

struct hist {
	struct hentry *e;
	size_t n, cap;
	struct tp_hash index; /* key string -> its entry */
};

static bool hentry_same(void *arg, uint64_t i, const void *key)
{
	return !strcmp(((struct hist *)arg)->e[i].key, key);
}

/* Out of memory, a key is left out of the histogram (the total stays exact). */
static void hist_add(struct hist *h, const char *key, uint64_t n)
{
	uint64_t hk, *i = tp_hash_get_str(&h->index, key, hentry_same, h, &hk);

	if (i) {
		h->e[*i].count += n;
		return;
	}
	if (h->n == h->cap) {
		size_t ncap = h->cap ? h->cap * 2 : 256;
		struct hentry *e = realloc(h->e, ncap * sizeof(*e));

		if (!e)
			return;
		h->e = e;
		h->cap = ncap;
	}
	h->e[h->n].key = strdup(key);
	h->e[h->n].count = n;
	if (!h->e[h->n].key)
		return;
	if (tp_hash_put(&h->index, hk, h->n)) {
		free(h->e[h->n].key);
		return;
	}
	h->n++;
}

static int hentry_cmp(const void *a, const void *b)
{
	const struct hentry *x = a, *y = b;

	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	return strcmp(x->key, y->key);
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

static void addr_key(struct tp_count_ctx *c, uint64_t pc, enum tp_count_by by, char *key,
		     size_t len)
{
	struct tp_symloc loc;

	if (tp_symtab_lookup(c->syms, pc, false, &loc)) {
		if (by == TP_COUNT_BY_ADDRESS)
			snprintf(key, len, "%#llx", (unsigned long long)pc);
		else
			snprintf(key, len, "?");
		return;
	}
	switch (by) {
	case TP_COUNT_BY_OBJECT:
		snprintf(key, len, "%s", base_name(loc.object));
		break;
	case TP_COUNT_BY_FUNCTION:
		if (loc.function)
			snprintf(key, len, "%s:%s", base_name(loc.object), loc.function);
		else
			snprintf(key, len, "%s:?", base_name(loc.object));
		break;
	default:
		if (loc.function)
			snprintf(key, len, "%#llx %s:%s+%#llx", (unsigned long long)pc,
				 base_name(loc.object), loc.function,
				 (unsigned long long)loc.offset);
		else
			snprintf(key, len, "%#llx %s+%#llx", (unsigned long long)pc,
				 base_name(loc.object), (unsigned long long)loc.offset);
		break;
	}
}

struct addr_walk {
	struct tp_count_ctx *c;
	struct hist *h;
};

static int add_addr(void *arg, uint64_t pc, uint64_t *n)
{
	struct addr_walk *w = arg;
	char key[512];

	if (*n) {
		addr_key(w->c, pc, w->c->o->by, key, sizeof(key));
		hist_add(w->h, key, *n);
	}
	return 0;
}

static void build_hist(struct tp_count_ctx *c, struct hist *h)
{
	struct tp_count_result *r = c->r;

	if (c->o->by == TP_COUNT_BY_MNEMONIC) {
		for (unsigned m = 0; m < TP_AGENT_MNEMONICS; m++)
			if (r->mnemonic[m])
				hist_add(h, tp_arch_mnemonic_name(m), r->mnemonic[m]);
	} else {
		struct addr_walk w = {c, h};

		tp_hash_foreach(&r->addrs.pcs, add_addr, &w);
	}
	tp_hash_release(&h->index);
	qsort(h->e, h->n, sizeof(*h->e), hentry_cmp);
}

/* ---- report ---- */

static void jstr(FILE *f, const char *s)
{
	tp_json_str(f, s, strlen(s));
}

static void where(struct tp_count_ctx *c, uint64_t pc, char *buf, size_t len)
{
	struct tp_symloc loc;

	if (!tp_symtab_lookup(c->syms, pc, false, &loc) && loc.function)
		snprintf(buf, len, "%s:%s+%#llx", base_name(loc.object), loc.function,
			 (unsigned long long)loc.offset);
	else if (!tp_symtab_lookup(c->syms, pc, false, &loc))
		snprintf(buf, len, "%s+%#llx", base_name(loc.object),
			 (unsigned long long)loc.offset);
	else
		snprintf(buf, len, "%#llx", (unsigned long long)pc);
}

static const char *trap_code_name(int code)
{
	switch (code) {
	case 0:
		return "SI_USER";
	case -1:
		return "SI_QUEUE";
	case -6:
		return "SI_TKILL";
	case 0x80:
		return "SI_KERNEL";
	case 1:
		return "TRAP_BRKPT";
	case 2:
		return "TRAP_TRACE";
	case 3:
		return "TRAP_BRANCH";
	case 4:
		return "TRAP_HWBKPT";
	case 5:
		return "TRAP_UNK";
	case 6:
		return "TRAP_PERF";
	}
	return "?";
}

/* The SIGTRAP the agent gave to the program's default action, in one line: what its siginfo
 * said, where the thread was, and the bytes around that pc ("[" marks the pc). */
static void fatal_text(struct tp_count_ctx *c, char *buf, size_t len)
{
	const struct tp_count_fatal *ft = &c->r->fatal;
	char at[256], bytes[16 * 3 + 4], *b = bytes;
	size_t o;

	where(c, ft->pc, at, sizeof(at));
	for (unsigned i = 0; i < sizeof(ft->bytes); i++) {
		if (ft->readable & (1u << i))
			b += sprintf(b, "%s%02x", i == 8 ? " [" : i ? " " : "", ft->bytes[i]);
		else
			b += sprintf(b, "%s??", i == 8 ? " [" : i ? " " : "");
	}
	o = (size_t)snprintf(buf, len, "signal %d si_code %d (%s), ", ft->signo, ft->code,
			     trap_code_name(ft->code));
	if (o < len && ft->code <= 0)
		o += (size_t)snprintf(buf + o, len - o, "si_pid %u si_uid %u",
				      (unsigned)(ft->addr & 0xffffffffu),
				      (unsigned)(ft->addr >> 32));
	else if (o < len)
		o += (size_t)snprintf(buf + o, len - o, "si_addr %#llx",
				      (unsigned long long)ft->addr);
	if (o < len)
		snprintf(buf + o, len - o,
			 ", thread %d at %#llx (%s), rflags %#llx (TF %s), bytes from pc-8: %s; "
			 "given to the program's default action (%u such trap%s)",
			 (int)ft->tid, (unsigned long long)ft->pc, at,
			 (unsigned long long)ft->rflags, ft->rflags & 0x100 ? "set" : "clear",
			 bytes, ft->traps, ft->traps == 1 ? "" : "s");
}

static void report_json(struct tp_count_ctx *c, FILE *f, struct hist *h, const char *engine)
{
	struct tp_count_result *r = c->r;
	size_t shown = h->n;
	char ctl_at[256];

	fprintf(f, "{\"engine\": \"%s\", \"program\": ", engine);
	jstr(f, c->path ? c->path : "");
	fprintf(f, ", \"pid\": %d, \"instructions\": %llu, \"threads\": [", (int)c->pid,
		(unsigned long long)r->total);
	for (int i = 0; i < r->nthreads; i++)
		fprintf(f, "%s{\"tid\": %d, \"instructions\": %llu}", i ? ", " : "",
			(int)r->threads[i].tid, (unsigned long long)r->threads[i].count);
	fprintf(f, "], \"seconds\": %.6f, \"instructions_per_second\": %.1f", r->seconds,
		r->seconds > 0 ? (double)r->total / r->seconds : 0.0);
	if (c->o->start) {
		fprintf(f, ", \"region\": {\"start\": ");
		jstr(f, c->o->start);
		fprintf(f, ", \"stop\": ");
		if (c->o->stop)
			jstr(f, c->o->stop);
		else
			fputs("null", f);
		fputs("}", f);
	} else if (c->api) {
		fputs(", \"region\": {\"start\": \"tp_step_begin\", \"stop\": \"tp_step_end\"}", f);
	} else {
		fputs(", \"region\": null", f);
	}
	if (r->have_startup) {
		where(c, r->control_pc, ctl_at, sizeof(ctl_at));
		fprintf(f, ", \"startup\": {\"instructions\": %llu, \"where\": ",
			(unsigned long long)r->startup);
		jstr(f, ctl_at);
		fputs(", \"counted_by\": \"ptrace\"}", f);
	} else {
		fputs(", \"startup\": null", f);
	}
	fputs(", \"start\": ", f);
	jstr(f, r->start_note);
	if (r->detached)
		fputs(", \"exit\": null", f);
	else if (WIFSIGNALED(r->wait_status))
		fprintf(f, ", \"exit\": {\"signal\": %d}", WTERMSIG(r->wait_status));
	else
		fprintf(f, ", \"exit\": {\"status\": %d}", WEXITSTATUS(r->wait_status));
	fprintf(f, ", \"exec\": %s, \"exec_followed\": %s, \"forked\": %s",
		r->exec_seen ? "true" : "false", r->exec_followed ? "true" : "false",
		r->forked ? "true" : "false");
	if (r->warning[0]) {
		fputs(", \"warning\": ", f);
		jstr(f, r->warning);
	}
	if (r->fatal.traps) {
		char ft[640];

		fatal_text(c, ft, sizeof(ft));
		fprintf(
		    f,
		    ", \"fatal_trap\": {\"tid\": %d, \"signo\": %d, \"si_code\": %d, "
		    "\"si_addr\": %llu, \"pc\": %llu, \"rflags\": %llu, \"traps\": %u, \"text\": ",
		    (int)r->fatal.tid, r->fatal.signo, r->fatal.code,
		    (unsigned long long)r->fatal.addr, (unsigned long long)r->fatal.pc,
		    (unsigned long long)r->fatal.rflags, r->fatal.traps);
		jstr(f, ft);
		fputs("}", f);
	}
	if (c->o->by != TP_COUNT_BY_NONE) {
		if (c->o->top > 0 && (size_t)c->o->top < shown)
			shown = (size_t)c->o->top;
		fprintf(f, ", \"histogram\": {\"by\": \"%s\", \"entries\": [", by_names[c->o->by]);
		for (size_t i = 0; i < shown; i++) {
			fputs(i ? ", {\"key\": " : "{\"key\": ", f);
			jstr(f, h->e[i].key);
			fprintf(f, ", \"count\": %llu}", (unsigned long long)h->e[i].count);
		}
		fputs("]}", f);
	}
	fputs("}\n", f);
}

static void report_text(struct tp_count_ctx *c, FILE *f, struct hist *h, const char *engine)
{
	struct tp_count_result *r = c->r;
	size_t shown = h->n;
	char ctl_at[256];

	fprintf(f, "tracepad count: %s (pid %d), engine %s", c->path ? c->path : "?", (int)c->pid,
		engine);
	if (c->o->start)
		fprintf(f, ", region %s .. %s", c->o->start,
			c->o->stop ? c->o->stop : "its return");
	else if (c->api)
		fprintf(f, ", regions tp_step_begin() .. tp_step_end()");
	fprintf(f, "\n  instructions  %llu\n  threads       %d\n", (unsigned long long)r->total,
		r->nthreads);
	for (int i = 0; i < r->nthreads; i++)
		fprintf(f, "    tid %-8d  %llu\n", (int)r->threads[i].tid,
			(unsigned long long)r->threads[i].count);
	if (r->have_startup) {
		where(c, r->control_pc, ctl_at, sizeof(ctl_at));
		fprintf(f,
			"  start-up      %llu instructions before the agent took control at %s "
			"(counted by ptrace stepping)\n",
			(unsigned long long)r->startup, ctl_at);
	}
	if (r->start_note[0] && !c->o->start && !c->api)
		fprintf(f, "  start         %s\n", r->start_note);
	fprintf(f, "  elapsed       %.3f s\n  rate          %.0f instructions/s\n", r->seconds,
		r->seconds > 0 ? (double)r->total / r->seconds : 0.0);
	if (r->detached)
		fprintf(f, "  exit          (detached; the program goes on)\n");
	else if (WIFSIGNALED(r->wait_status))
		fprintf(f, "  exit          killed by signal %d\n", WTERMSIG(r->wait_status));
	else
		fprintf(f, "  exit          status %d\n", WEXITSTATUS(r->wait_status));
	if (r->exec_seen)
		fprintf(f, "  note          the program called execve: the new image is not "
			   "counted\n");
	else if (r->exec_followed)
		fprintf(f, "  note          the program called execve: its new image is counted "
			   "too\n");
	if (r->forked)
		fprintf(f, "  note          the program forked: children are not counted\n");
	if (r->overflow)
		fprintf(f,
			"  note          %llu instructions of threads beyond the agent's slots "
			"(total only)\n",
			(unsigned long long)r->overflow);
	if (r->addr_dropped + r->addrs.dropped)
		fprintf(f,
			"  note          %llu instructions missing from the address histogram "
			"(table full)\n",
			(unsigned long long)(r->addr_dropped + r->addrs.dropped));
	if (r->warning[0])
		fprintf(f, "  warning       %s\n", r->warning);
	if (r->fatal.traps) {
		char ft[640];

		fatal_text(c, ft, sizeof(ft));
		fprintf(f, "  fatal trap    %s\n", ft);
	}
	if (c->o->by == TP_COUNT_BY_NONE)
		return;
	if (c->o->top != 0 && (size_t)(c->o->top < 0 ? 20 : c->o->top) < shown)
		shown = (size_t)(c->o->top < 0 ? 20 : c->o->top);
	fprintf(f, "  histogram by %s (%zu of %zu)\n  %14s  %6s  %s\n", by_names[c->o->by], shown,
		h->n, "count", "%", by_names[c->o->by]);
	for (size_t i = 0; i < shown; i++)
		fprintf(f, "  %14llu  %5.1f%%  %s\n", (unsigned long long)h->e[i].count,
			r->total ? 100.0 * (double)h->e[i].count / (double)r->total : 0.0,
			h->e[i].key);
}

/* ---- --trace DIR: the results as events of a CTF trace ---- */

static int put_event(struct tp_trace_producer *p, int id, int32_t pid, int32_t tid,
		     const uint8_t *payload, size_t len)
{
	uint8_t *e = tp_trace_reserve_at(p, (uint16_t)id, (uint32_t)len,
					 tp_trace_clock_now(p->clock), pid, tid);

	if (!e)
		return -ENOSPC;
	memcpy(e, payload, len);
	tp_trace_commit(p);
	return 0;
}

static int record_trace(struct tp_count_ctx *c, struct tp_trace_writer *w, struct hist *h,
			const char *engine)
{
	static const struct tp_trace_field_desc summary[] = {
	    {"engine", TP_TRACE_STRING},
	    {"instructions", TP_TRACE_INT, 64},
	    {"startup", TP_TRACE_INT, 64},
	    {"seconds_ns", TP_TRACE_INT, 64},
	    {"exit_status", TP_TRACE_INT, 32, true},
	};
	static const struct tp_trace_field_desc thread[] = {
	    {"instructions", TP_TRACE_INT, 64},
	};
	static const struct tp_trace_field_desc histo[] = {
	    {"by", TP_TRACE_STRING},
	    {"key", TP_TRACE_STRING},
	    {"count", TP_TRACE_INT, 64},
	};
	struct tp_count_result *r = c->r;
	struct tp_trace_producer prod;
	int ids[3], err, st;
	uint8_t buf[1200], *q;

	ids[0] = tp_trace_writer_add_class(w, "count_summary", summary, 5);
	ids[1] = tp_trace_writer_add_class(w, "count_thread", thread, 1);
	ids[2] = tp_trace_writer_add_class(w, "count_histogram", histo, 3);
	if (ids[0] < 0 || ids[1] < 0 || ids[2] < 0) {
		tp_trace_writer_free(w);
		return ids[0] < 0 ? ids[0] : ids[1] < 0 ? ids[1] : ids[2];
	}
	err = tp_trace_writer_producer_init(w, &prod);
	if (err) {
		tp_trace_writer_free(w);
		return err;
	}
	st = r->detached		   ? 0
	     : WIFSIGNALED(r->wait_status) ? -WTERMSIG(r->wait_status)
					   : WEXITSTATUS(r->wait_status);
	q = tp_trace_put_str(buf, engine, strlen(engine));
	q = tp_trace_put_u64(q, r->total);
	q = tp_trace_put_u64(q, r->startup);
	q = tp_trace_put_u64(q, (uint64_t)(r->seconds * 1e9));
	q = tp_trace_put_u32(q, (uint32_t)st);
	err = put_event(&prod, ids[0], c->pid, c->pid, buf, (size_t)(q - buf));
	for (int i = 0; !err && i < r->nthreads; i++) {
		q = tp_trace_put_u64(buf, r->threads[i].count);
		err = put_event(&prod, ids[1], c->pid, r->threads[i].tid, buf, (size_t)(q - buf));
	}
	for (size_t i = 0; !err && i < h->n; i++) {
		const char *by = by_names[c->o->by];
		size_t kl = strlen(h->e[i].key);

		if (kl > 1024)
			kl = 1024;
		q = tp_trace_put_str(buf, by, strlen(by));
		q = tp_trace_put_str(q, h->e[i].key, kl);
		q = tp_trace_put_u64(q, h->e[i].count);
		err = put_event(&prod, ids[2], c->pid, c->pid, buf, (size_t)(q - buf));
	}
	if (!err)
		err = tp_trace_producer_fini(&prod);
	else
		tp_trace_producer_fini(&prod);
	if (err) {
		tp_trace_writer_free(w);
		return err;
	}
	return tp_trace_writer_close(w);
}

int tp_count_parse_by(const char *s, enum tp_count_by *by)
{
	for (int i = 1; i <= TP_COUNT_BY_ADDRESS; i++) {
		if (!strcmp(s, by_names[i])) {
			*by = (enum tp_count_by)i;
			return 0;
		}
	}
	return -EINVAL;
}

int tp_count_exit_status(const struct tp_count_result *r)
{
	return r->detached		     ? 0
	       : WIFSIGNALED(r->wait_status) ? 128 + WTERMSIG(r->wait_status)
					     : WEXITSTATUS(r->wait_status);
}

int tp_count_report(struct tp_count_ctx *c, FILE *out, struct tp_trace_writer *w)
{
	const char *engine = c->o->engine == TP_COUNT_ENGINE_PTRACE ? "ptrace"
			     : c->o->engine == TP_COUNT_ENGINE_DBT  ? "dbt"
								    : "trapflag";
	struct hist h = {0};
	int err = 0;

	if (c->o->by == TP_COUNT_BY_FUNCTION || c->o->by == TP_COUNT_BY_OBJECT ||
	    c->o->by == TP_COUNT_BY_ADDRESS)
		tp_symtab_load_pid(c->syms, c->pid); /* fails harmlessly once the program is gone */
	if (c->o->by != TP_COUNT_BY_NONE)
		build_hist(c, &h);
	if (c->o->json)
		report_json(c, out, &h, engine);
	else
		report_text(c, out, &h, engine);
	if (w)
		err = record_trace(c, w, &h, engine);
	for (size_t i = 0; i < h.n; i++)
		free(h.e[i].key);
	free(h.e);
	return err;
}
