/* tracepad count: count every executed instruction of a program, or of a region of it,
 * with the ptrace engine (single-stepping from the tracer) or the trapflag engine (the agent
 * steps the program from inside). */
#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/count.h"
#include "cli/trace-read.h"
#include "elf/file.h"
#include "elf/symbols.h"
#include "base/paths.h"
#include "base/text.h"
#include "proc/proc.h"
#include "trace/trace.h"

int count_attach_ptrace(struct count_ctx *c);

static const char usage_text[] =
    "usage: tracepad count [OPTIONS] -- PROGRAM [ARGS]\n"
    "       tracepad count [OPTIONS] -p PID\n"
    "\n"
    "Count every instruction the program executes, exactly.\n"
    "\n"
    "  --engine E      ptrace (single-step from tracepad) or trapflag (the agent steps the\n"
    "                  program from inside; default when launching)\n"
    "  --start SYM     count from each thread's first entry of SYM to that call's return\n"
    "  --stop SYM      ... or to the entry of SYM\n"
    "  --by KEY        histogram by mnemonic, function, object or address\n"
    "  --top N         show the N largest histogram entries (default: 20 in text, all in\n"
    "                  JSON; 0 for all)\n"
    "  --json          write the report as one JSON object\n"
    "  -o FILE         write the report to FILE instead of stderr\n"
    "  --trace DIR     also record the results as events of a CTF trace in DIR\n"
    "  --no-startup    trapflag: do not step the start-up before the agent takes control\n"
    "  -p PID          count a running process (ptrace engine) until it exits or Ctrl-C\n"
    "  -h, --help      show this help\n"
    "\n"
    "Without --start, the whole program is counted, or only the regions between\n"
    "tp_step_begin() and tp_step_end() when the program uses <tracepad/step.h>.\n";

/* ---- results ---- */

double count_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void count_progress(struct count_ctx *c, uint64_t total)
{
	double t = count_now();

	if (!c->progress || t - c->last_progress < 0.5)
		return;
	c->last_progress = t;
	fprintf(stderr, "\rtracepad count: %llu instructions, %.0f/s ", (unsigned long long)total,
		t > c->t_start ? (double)total / (t - c->t_start) : 0.0);
}

void count_progress_end(struct count_ctx *c)
{
	if (c->progress && c->last_progress > c->t_start)
		fputs("\r\033[K", stderr);
}

void count_add_thread(struct count_result *r, pid_t tid, uint64_t n)
{
	for (int i = 0; i < r->nthreads; i++) {
		if (r->threads[i].tid == tid) {
			r->threads[i].count += n;
			return;
		}
	}
	if (r->nthreads == r->cap_threads) {
		int ncap = r->cap_threads ? r->cap_threads * 2 : 16;
		struct count_thread *t = realloc(r->threads, (size_t)ncap * sizeof(*t));

		if (!t)
			return;
		r->threads = t;
		r->cap_threads = ncap;
	}
	r->threads[r->nthreads].tid = tid;
	r->threads[r->nthreads].count = n;
	r->nthreads++;
}

static void addr_hist_grow(struct addr_hist *h)
{
	size_t ncap = h->cap ? h->cap * 2 : 4096;
	uint64_t *pc = calloc(ncap, sizeof(*pc)), *cnt = calloc(ncap, sizeof(*cnt));

	if (!pc || !cnt) {
		free(pc);
		free(cnt);
		return;
	}
	for (size_t i = 0; i < h->cap; i++) {
		size_t j;

		if (!h->pc[i])
			continue;
		j = (size_t)((h->pc[i] * 0x9e3779b97f4a7c15ull) >> 20) & (ncap - 1);
		while (pc[j])
			j = (j + 1) & (ncap - 1);
		pc[j] = h->pc[i];
		cnt[j] = h->count[i];
	}
	free(h->pc);
	free(h->count);
	h->pc = pc;
	h->count = cnt;
	h->cap = ncap;
}

void addr_hist_add(struct addr_hist *h, uint64_t pc, uint64_t n)
{
	size_t j;

	if (!pc)
		return;
	if ((h->n + 1) * 2 > h->cap)
		addr_hist_grow(h);
	if (!h->cap)
		return;
	j = (size_t)((pc * 0x9e3779b97f4a7c15ull) >> 20) & (h->cap - 1);
	while (h->pc[j] && h->pc[j] != pc)
		j = (j + 1) & (h->cap - 1);
	if (!h->pc[j]) {
		h->pc[j] = pc;
		h->n++;
	}
	h->count[j] += n;
}

/* ---- the histogram: key -> count, built from mnemonics or resolved addresses ---- */

struct hentry {
	char *key;
	uint64_t count;
};

struct hist {
	struct hentry *e;
	size_t n, cap;
};

static void hist_add(struct hist *h, const char *key, uint64_t n)
{
	for (size_t i = 0; i < h->n; i++) {
		if (!strcmp(h->e[i].key, key)) {
			h->e[i].count += n;
			return;
		}
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
	if (h->e[h->n].key)
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

static void addr_key(struct count_ctx *c, uint64_t pc, enum count_by by, char *key, size_t len)
{
	struct tp_symloc loc;

	if (tp_symtab_lookup(c->syms, pc, false, &loc)) {
		if (by == BY_ADDRESS)
			snprintf(key, len, "%#llx", (unsigned long long)pc);
		else
			snprintf(key, len, "?");
		return;
	}
	switch (by) {
	case BY_OBJECT:
		snprintf(key, len, "%s", base_name(loc.object));
		break;
	case BY_FUNCTION:
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

static void build_hist(struct count_ctx *c, struct hist *h)
{
	struct count_result *r = c->r;
	char key[512];

	if (c->o->by == BY_MNEMONIC) {
		for (unsigned m = 0; m < TP_AGENT_MNEMONICS; m++)
			if (r->mnemonic[m])
				hist_add(h, tp_arch_mnemonic_name(m), r->mnemonic[m]);
	} else {
		for (size_t i = 0; i < r->addrs.cap; i++) {
			if (!r->addrs.pc[i] || !r->addrs.count[i])
				continue;
			addr_key(c, r->addrs.pc[i], c->o->by, key, sizeof(key));
			hist_add(h, key, r->addrs.count[i]);
		}
	}
	qsort(h->e, h->n, sizeof(*h->e), hentry_cmp);
}

/* ---- report ---- */

static const char *const by_names[] = {"", "mnemonic", "function", "object", "address"};

static void jstr(FILE *f, const char *s)
{
	tp_json_str(f, s, strlen(s));
}

static void where(struct count_ctx *c, uint64_t pc, char *buf, size_t len)
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

static void report_json(struct count_ctx *c, FILE *f, struct hist *h, const char *engine)
{
	struct count_result *r = c->r;
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
	fprintf(f, ", \"exec\": %s, \"forked\": %s", r->exec_seen ? "true" : "false",
		r->forked ? "true" : "false");
	if (r->warning[0]) {
		fputs(", \"warning\": ", f);
		jstr(f, r->warning);
	}
	if (c->o->by != BY_NONE) {
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

static void report_text(struct count_ctx *c, FILE *f, struct hist *h, const char *engine)
{
	struct count_result *r = c->r;
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
	if (r->forked)
		fprintf(f, "  note          the program forked: children are not counted\n");
	if (r->overflow)
		fprintf(f,
			"  note          %llu instructions of threads beyond the agent's slots "
			"(total only)\n",
			(unsigned long long)r->overflow);
	if (r->addr_dropped)
		fprintf(f,
			"  note          %llu instructions missing from the address histogram "
			"(table full)\n",
			(unsigned long long)r->addr_dropped);
	if (r->warning[0])
		fprintf(f, "  warning       %s\n", r->warning);
	if (c->o->by == BY_NONE)
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

static int record_trace(struct count_ctx *c, struct tp_trace_writer *w, struct hist *h,
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
	struct count_result *r = c->r;
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

/* The agent records, in rings that tracepad drains, when each thread begins and ends being
 * counted; the class ids are fixed by agent-abi.h. */
static int agent_trace_init(struct count_ctx *c, struct tp_trace_writer *w)
{
	static const struct tp_trace_field_desc f[] = {
	    {"pc", TP_TRACE_INT, 64, false, 16},
	    {"instructions", TP_TRACE_INT, 64},
	};
	struct tp_trace_ring_opts ro = {.nr_rings = 64, .nr_subbufs = 4};

	if (tp_trace_writer_add_class(w, "counting_begin", f, 2) != TP_AGENT_EV_COUNTING_BEGIN ||
	    tp_trace_writer_add_class(w, "counting_end", f, 2) != TP_AGENT_EV_COUNTING_END)
		return -EINVAL;
	return tp_trace_consumer_new(w, &ro, &c->cons);
}

/* ---- set-up ---- */

static int make_ctl(struct count_ctx *c)
{
	uint32_t threads = 256, maps = 1024;
	uint64_t slots = c->o->by >= BY_FUNCTION ? 1u << 20 : 0;
	size_t size, toff, moff, aoff;
	struct tp_agent_ctl *ctl;

	toff = (sizeof(*ctl) + 4095) & ~(size_t)4095;
	moff = toff + threads * sizeof(struct tp_agent_thread);
	aoff = moff + maps * sizeof(struct tp_agent_map);
	size = aoff + slots * sizeof(struct tp_agent_addr);
	size = (size + 4095) & ~(size_t)4095;
	c->ctl_fd = memfd_create("tracepad-ctl", MFD_CLOEXEC);
	if (c->ctl_fd < 0)
		return -errno;
	if (ftruncate(c->ctl_fd, (off_t)size))
		return -errno;
	ctl = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, c->ctl_fd, 0);
	if (ctl == MAP_FAILED)
		return -errno;
	/* the fd must not be 0-2 or collide with the program's expectations: move it high */
	if (c->ctl_fd < 100) {
		int hi = fcntl(c->ctl_fd, F_DUPFD_CLOEXEC, 100);

		if (hi >= 0) {
			close(c->ctl_fd);
			c->ctl_fd = hi;
		}
	}
	c->ctl = ctl;
	c->ctl_size = size;
	ctl->magic = TP_AGENT_MAGIC;
	ctl->abi = TP_AGENT_ABI;
	ctl->mode = TP_AGENT_PASSIVE;
	ctl->size = size;
	ctl->threads_off = toff;
	ctl->max_threads = threads;
	ctl->maps_off = moff;
	ctl->max_maps = maps;
	ctl->addrs_off = aoff;
	ctl->addr_slots = slots;
	ctl->start_vaddr = c->main_dynamic ? 0 : c->start_vaddr;
	ctl->stop_vaddr = c->stop_vaddr;
	if (c->whole)
		ctl->flags |= TP_CTL_WHOLE;
	if (c->api)
		ctl->flags |= TP_CTL_API;
	if (c->main_dynamic)
		ctl->flags |= TP_CTL_MAIN_DYNAMIC;
	if (c->o->by == BY_MNEMONIC)
		ctl->flags |= TP_CTL_BY_MNEMONIC;
	if (slots)
		ctl->flags |= TP_CTL_BY_ADDRESS;
	return 0;
}

static int parse_by(const char *s, enum count_by *by)
{
	for (int i = 1; i <= BY_ADDRESS; i++) {
		if (!strcmp(s, by_names[i])) {
			*by = (enum count_by)i;
			return 0;
		}
	}
	return -1;
}

static int resolve_symbol(struct count_ctx *c, const char *opt, const char *name, uint64_t *v)
{
	int err = tp_elf_lookup(c->path, name, v, NULL);

	if (err == -ENOENT && !strcmp(name, "main") && opt[2] == 's' && opt[3] == 't' &&
	    opt[4] == 'a') {
		/* stripped: main is found at run time from __libc_start_main's first argument */
		c->main_dynamic = true;
		return 0;
	}
	if (err == -ENOENT)
		tp_cli_error("count", "%s: no symbol '%s' in %s", opt, name, c->path);
	else if (err)
		tp_cli_error("count", "%s: cannot read %s: %s", opt, c->path, strerror(-err));
	return err;
}

int cmd_count(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"engine", required_argument, NULL, 'E'}, {"start", required_argument, NULL, 'S'},
	    {"stop", required_argument, NULL, 'T'},   {"by", required_argument, NULL, 'B'},
	    {"top", required_argument, NULL, 'N'},    {"json", no_argument, NULL, 'J'},
	    {"no-startup", no_argument, NULL, 'U'},   {"help", no_argument, NULL, 'h'},
	    {"trace", required_argument, NULL, 'D'},  {NULL, 0, NULL, 0},
	};
	struct count_opts o = {.top = -1};
	static struct count_result res;
	struct count_result *r = &res;
	struct count_ctx c = {.o = &o, .r = r, .ctl_fd = -1};
	char path[PATH_MAX];
	struct tp_elf_info info;
	struct hist h = {0};
	struct tp_trace_writer *tw = NULL;
	const char *engine;
	FILE *out = stderr;
	int opt, err, status;
	char *end;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "+o:p:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'E':
			if (!strcmp(optarg, "ptrace"))
				o.engine = ENGINE_PTRACE;
			else if (!strcmp(optarg, "trapflag"))
				o.engine = ENGINE_TRAPFLAG;
			else {
				tp_cli_error("count", "unknown engine '%s' (ptrace, trapflag)",
					     optarg);
				return 2;
			}
			break;
		case 'S':
			o.start = optarg;
			break;
		case 'T':
			o.stop = optarg;
			break;
		case 'B':
			if (parse_by(optarg, &o.by)) {
				tp_cli_error("count",
					     "unknown --by key '%s' (mnemonic, function, object, "
					     "address)",
					     optarg);
				return 2;
			}
			break;
		case 'N':
			o.top = (int)strtol(optarg, &end, 10);
			if (*end || o.top < 0) {
				tp_cli_error("count", "--top: '%s' is not a count", optarg);
				return 2;
			}
			break;
		case 'J':
			o.json = true;
			break;
		case 'U':
			o.no_startup = true;
			break;
		case 'o':
			o.outfile = optarg;
			break;
		case 'D':
			o.trace_dir = optarg;
			break;
		case 'p':
			o.pid = (pid_t)strtol(optarg, &end, 10);
			if (*end || o.pid <= 0) {
				tp_cli_error("count", "-p: '%s' is not a process id", optarg);
				return 2;
			}
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	o.argv = argv + optind;
	if (!o.pid == !o.argv[0]) {
		tp_cli_error("count", o.pid ? "give either -p PID or a program, not both"
					    : "no program to count (tracepad count -- PROGRAM)");
		return 2;
	}
	if (o.pid && o.engine == ENGINE_TRAPFLAG) {
		tp_cli_error("count", "-p: the trapflag engine cannot attach yet; use --engine "
				      "ptrace");
		return 2;
	}
	if (o.engine == ENGINE_DEFAULT)
		o.engine = o.pid ? ENGINE_PTRACE : ENGINE_TRAPFLAG;
	engine = o.engine == ENGINE_PTRACE ? "ptrace" : "trapflag";
	c.syms = tp_symtab_new();
	if (!c.syms)
		return 1;

	if (o.pid) {
		char exe[64];

		snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)o.pid);
		if (kill(o.pid, 0) && errno == ESRCH) {
			tp_cli_error("count", "-p %d: no such process", (int)o.pid);
			status = 2;
			goto done;
		}
		c.pid = o.pid;
		c.path = realpath(exe, path) ? path : NULL;
		c.whole = !o.start;
	} else {
		err = tp_path_find_program(o.argv[0], path, sizeof(path));
		if (err) {
			tp_cli_error("count", "%s: no such program", o.argv[0]);
			status = 2;
			goto done;
		}
		c.path = path;
		err = tp_elf_probe(path, &info);
		if (err == -ENOEXEC || err == -EINVAL) {
			tp_cli_error("count", "%s: %s", path,
				     err == -ENOEXEC ? "not an ELF file"
						     : "not an x86-64 executable");
			status = 2;
			goto done;
		}
		if (err) {
			tp_cli_error("count", "%s: %s", path, strerror(-err));
			status = 2;
			goto done;
		}
		c.is_static = info.is_static;
		c.entry_vaddr = info.entry;
		if (o.start && resolve_symbol(&c, "--start", o.start, &c.start_vaddr)) {
			status = 2;
			goto done;
		}
		if (o.stop && resolve_symbol(&c, "--stop", o.stop, &c.stop_vaddr)) {
			status = 2;
			goto done;
		}
		if (o.stop && c.main_dynamic && !c.start_vaddr && !o.start) {
			tp_cli_error("count", "--stop main needs main's symbol");
			status = 2;
			goto done;
		}
		c.api = !o.start && tp_elf_imports(path, "tracepad_step_begin");
		c.whole = !o.start && !c.api;
		o.agent = tp_cli_agent_path();
		if (!o.agent && !c.is_static) {
			tp_cli_error("count", "cannot find libtracepad-agent.so next to tracepad "
					      "(set TRACEPAD_AGENT)");
			status = 1;
			goto done;
		}
		err = make_ctl(&c);
		if (err) {
			tp_cli_error("count", "cannot create the shared control block: %s",
				     strerror(-err));
			status = 1;
			goto done;
		}
	}
	if (o.outfile) {
		out = fopen(o.outfile, "w");
		if (!out) {
			tp_cli_error("count", "-o %s: %s", o.outfile, strerror(errno));
			status = 2;
			goto done;
		}
	}
	if (o.trace_dir) {
		/* refused now rather than after a long run: an existing trace, no permission */
		err = tp_trace_writer_new(o.trace_dir, NULL, &tw);
		if (err) {
			tp_cli_error("count", "--trace %s: %s", o.trace_dir,
				     err == -EEXIST ? "already holds a trace" : strerror(-err));
			status = 2;
			goto done;
		}
		if (o.engine == ENGINE_TRAPFLAG && !o.pid) {
			err = agent_trace_init(&c, tw);
			if (err) {
				tp_cli_error("count", "--trace %s: %s", o.trace_dir,
					     strerror(-err));
				status = 1;
				goto done;
			}
		}
	}
	tp_cli_catch_signals(o.pid != 0);
	c.progress = isatty(STDERR_FILENO) && !getenv("CI");
	c.t_start = c.last_progress = count_now();
	/* Like gdb, run the program without address-space randomisation: string functions
	 * take other paths for other alignments, and counts should repeat exactly. */
	if (!o.pid)
		personality((unsigned long)personality(0xffffffff) | ADDR_NO_RANDOMIZE);

	if (o.pid)
		err = count_attach_ptrace(&c);
	else if (o.engine == ENGINE_PTRACE)
		err = count_run_ptrace(&c);
	else
		err = count_run_trapflag(&c);
	if (err) {
		if (err == -EPERM && o.pid) {
			char why[256];

			if (tp_proc_perm_reason(o.pid, why, sizeof(why)))
				snprintf(why, sizeof(why), "ptrace refused: permission denied");
			tp_cli_error("count", "-p %d: %s", (int)o.pid, why);
		} else if (err == -ESRCH && o.pid)
			tp_cli_error("count", "-p %d: no such process", (int)o.pid);
		else if (err == -ENOENT || err == -EACCES || err == -ENOEXEC)
			tp_cli_error("count", "%s: %s", o.argv[0], strerror(-err));
		else if (err != -EINVAL)
			tp_cli_error("count", "%s", strerror(-err));
		tp_trace_writer_free(tw);
		status = 2;
		goto done;
	}
	count_progress_end(&c);
	if (o.by == BY_FUNCTION || o.by == BY_OBJECT || o.by == BY_ADDRESS)
		tp_symtab_load_pid(c.syms, c.pid); /* fails harmlessly once the program is gone */
	if (o.by != BY_NONE)
		build_hist(&c, &h);
	if (o.json)
		report_json(&c, out, &h, engine);
	else
		report_text(&c, out, &h, engine);
	if (tw) {
		err = record_trace(&c, tw, &h, engine);
		if (err)
			tp_cli_error("count", "--trace %s: %s", o.trace_dir, strerror(-err));
	}
	if (out != stderr)
		fclose(out);
	out = stderr;
	status = r->detached		       ? 0
		 : WIFSIGNALED(r->wait_status) ? 128 + WTERMSIG(r->wait_status)
					       : WEXITSTATUS(r->wait_status);
done:
	if (out && out != stderr)
		fclose(out);
	for (size_t i = 0; i < h.n; i++)
		free(h.e[i].key);
	free(h.e);
	free(r->addrs.pc);
	free(r->addrs.count);
	free(r->threads);
	tp_symtab_free(c.syms);
	tp_trace_consumer_free(c.cons);
	if (c.ctl)
		munmap(c.ctl, c.ctl_size);
	if (c.ctl_fd >= 0)
		close(c.ctl_fd);
	return status;
}
