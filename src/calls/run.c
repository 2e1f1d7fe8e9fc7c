/* `tracepad calls`: the job (start, the event loop over the traced processes, detaching
 * cleanly on every way out), the host plugins see, and the summary.  The stops are
 * handled in stops.c. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "calls/engine.h"
#include "proc/guard.h"
#include "base/log.h"
#include "base/text.h"
#include "plugins/plugins.h"

volatile sig_atomic_t tp_calls_ticked;

/* The event loop's clock, every TICK_MS, only ever delivered while the loop sleeps in a wait:
 * returns made without a stop are reported, the output flushed, --duration checked. */
#define TICK_MS 50

static void on_tick(int sig)
{
	(void)sig;
	tp_calls_ticked = 1;
}

void tp_calls_tick(struct tp_proc *p, unsigned us)
{
	struct itimerval it = {{0, us}, {0, us}};
	struct sigaction sa = {.sa_handler = on_tick};
	sigset_t set;

	if (us) {
		sigemptyset(&set);
		sigaddset(&set, SIGALRM);
		sigprocmask(SIG_BLOCK, &set, NULL);
		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, NULL);
		tp_proc_set_wait_signal(p, SIGALRM);
	}
	setitimer(ITIMER_REAL, &it, NULL);
}

/* ---- plugins' host ---- */

static long host_read(void *ctx, int pid, uint64_t addr, void *buf, size_t len)
{
	struct session *s = ctx;
	ssize_t n = s->agent ? tp_calls_agent_read(s, pid, addr, buf, len) : -ENOENT;

	return n >= 0 ? n : tp_proc_read(pid, addr, buf, len);
}

static int host_select(void *ctx, const char *pattern)
{
	struct session *s = ctx;
	char err[256];
	int r = tp_select_add(s->sel, pattern, err, sizeof(err));

	if (r)
		tp_err("%s", err);
	return r;
}

static int host_exit_call(void *ctx, const char *function)
{
	struct session *s = ctx;
	char *f;

	if (s->nexit_calls == TP_CALLS_EXIT_CALLS)
		return -ENOSPC;
	f = strdup(function);
	if (!f)
		return -ENOMEM;
	s->exit_calls[s->nexit_calls++] = f;
	return 0;
}

static bool subst_return(void *arg, pid_t tid, uint64_t addr, uint64_t *val)
{
	struct image *im = arg;

	return tp_bp_real_return(im->bps, tid, addr, val);
}

int tp_calls_backtrace(struct session *s, struct thread *t, struct user_regs_struct *regs,
		       uint64_t *pcs, int max)
{
	struct image *im = t->img;

	if (!im->uw) {
		im->uw = tp_unwinder_new(im->pid);
		if (!im->uw)
			return -errno;
	}
	(void)s;
	return tp_unwinder_backtrace(im->uw, t->tid, regs, subst_return, im, pcs, max);
}

static int host_backtrace(void *ctx, int tid, uint64_t *pcs, int max)
{
	struct session *s = ctx;
	struct thread *t = tp_calls_thread_of(s, tid);
	struct user_regs_struct regs;

	if (s->agent)
		return tp_calls_agent_backtrace(s, tid, pcs, max);
	if (!t)
		return -ESRCH;
	if (t == s->cur) {
		regs = s->cur_regs;
	} else if (tp_proc_get_regs(tid, &regs)) {
		return -ESRCH;
	}
	return tp_calls_backtrace(s, t, &regs, pcs, max);
}

static struct tp_symtab *symtab_of(struct session *s, pid_t pid)
{
	if (!s->symtab) {
		s->symtab = tp_symtab_new();
		if (!s->symtab)
			return NULL;
	}
	if (s->symtab_pid != pid || s->symtab_gen != s->objects_gen) {
		/* Through a stopped thread's tid: a zombie leader's maps are empty. */
		tp_symtab_load_pid(s->symtab, s->cur && s->cur->pid == pid ? s->cur->tid : pid);
		s->symtab_pid = pid;
		s->symtab_gen = s->objects_gen;
	}
	return s->symtab;
}

/* @ret: @pc is a return address; its call is the instruction before (for the line). */
int tp_calls_symbolize(struct session *s, int pid, uint64_t pc, bool ret, char *buf, size_t len)
{
	struct tp_symtab *st = symtab_of(s, pid);
	struct tp_symloc loc;
	char *dn;
	int n;

	if (!st || tp_symtab_lookup(st, pc - ret, true, &loc))
		return snprintf(buf, len, "0x%" PRIx64, pc);
	loc.offset += ret;
	/* Frames named as the calls are (--demangle). */
	dn = loc.function && !s->o->mangled ? tp_calls_demangle(loc.function) : NULL;
	if (loc.function)
		n = snprintf(buf, len, "%s:%s+0x%" PRIx64, tp_select_base(loc.object),
			     dn ? dn : loc.function, loc.offset);
	else
		n = snprintf(buf, len, "%s+0x%" PRIx64, tp_select_base(loc.object), loc.offset);
	if (loc.file && n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - n, " (%s:%d)", tp_select_base(loc.file), loc.line);
	free(dn);
	return n;
}

static int host_symbolize(void *ctx, int pid, uint64_t pc, char *buf, size_t len)
{
	return tp_calls_symbolize(ctx, pid, pc, false, buf, len) < 0 ? -EIO : 0;
}

static int host_regs(void *ctx, int tid, uint64_t *regs, size_t nregs)
{
	struct user_regs_struct r;
	size_t n = sizeof(r) / sizeof(uint64_t);
	int e;

	(void)ctx;
	e = tp_proc_get_regs(tid, &r);
	if (e)
		return e;
	memcpy(regs, &r, (nregs < n ? nregs : n) * sizeof(uint64_t));
	return 0;
}

static int host_threads(void *ctx, int pid, int *tids, int max)
{
	struct session *s = ctx;
	pid_t buf[1024];
	int n = tp_proc_tasks_of(s->p, pid, buf, 1024);

	for (int i = 0; i < n && i < max && i < 1024; i++)
		tids[i] = buf[i];
	return n;
}

/* ---- summary ---- */

static uint64_t avg_of(const struct stat_ent *e)
{
	return e->returns ? e->total / e->returns : 0;
}

/* -c's order (--sort): the key, largest first (names in alphabetical order), then the
 * total time, the calls and the name. */
static int cmp_stat(const void *a, const void *b, void *arg)
{
	const struct stat_ent *x = *(struct stat_ent *const *)a, *y = *(struct stat_ent *const *)b;
	enum tp_calls_sort key = *(const enum tp_calls_sort *)arg;
	uint64_t kx = 0, ky = 0;
	int c;

	switch (key) {
	case TP_CALLS_SORT_NAME:
		c = strcmp(x->function, y->function);
		if (c)
			return c;
		c = strcmp(x->object, y->object);
		if (c)
			return c;
		break;
	case TP_CALLS_SORT_CALLS:
		kx = x->calls, ky = y->calls;
		break;
	case TP_CALLS_SORT_AVG:
		kx = avg_of(x), ky = avg_of(y);
		break;
	case TP_CALLS_SORT_MIN:
		kx = x->returns ? x->min : 0, ky = y->returns ? y->min : 0;
		break;
	case TP_CALLS_SORT_MAX:
		kx = x->max, ky = y->max;
		break;
	case TP_CALLS_SORT_ERRORS:
		kx = x->errors, ky = y->errors;
		break;
	case TP_CALLS_SORT_TOTAL:
		break;
	}
	if (kx != ky)
		return kx < ky ? 1 : -1;
	if (x->total != y->total)
		return x->total < y->total ? 1 : -1;
	if (x->calls != y->calls)
		return x->calls < y->calls ? 1 : -1;
	c = strcmp(x->function, y->function);
	return c ? c : (x->pid > y->pid) - (x->pid < y->pid);
}

/* Add @e's figures to @to. */
static void stat_merge(struct stat_ent *to, const struct stat_ent *e)
{
	to->calls += e->calls;
	to->returns += e->returns;
	to->errors += e->errors;
	to->total += e->total;
	if (e->returns && e->min < to->min)
		to->min = e->min;
	if (e->max > to->max)
		to->max = e->max;
}

static void json_functions(FILE *f, struct stat_ent **v, int n)
{
	for (int i = 0; i < n; i++) {
		const struct stat_ent *e = v[i];

		fputs(i ? ",\n  {\"object\": " : "\n  {\"object\": ", f);
		tp_json_str(f, e->object, strlen(e->object));
		fputs(", \"function\": ", f);
		tp_json_str(f, e->function, strlen(e->function));
		fprintf(f,
			", \"calls\": %" PRIu64 ", \"returns\": %" PRIu64 ", \"errors\": %" PRIu64
			", \"total_ns\": %" PRIu64 ", \"avg_ns\": %" PRIu64 ", \"min_ns\": %" PRIu64
			", \"max_ns\": %" PRIu64 "}",
			e->calls, e->returns, e->errors, e->total, avg_of(e),
			e->returns ? e->min : 0, e->max);
	}
}

static void text_functions(FILE *f, struct stat_ent **v, int n)
{
	fprintf(f, "%10s %8s %12s %10s %10s %10s  %s\n", "calls", "errors", "total s", "avg us",
		"min us", "max us", "function");
	for (int i = 0; i < n; i++) {
		const struct stat_ent *e = v[i];

		fprintf(f, "%10" PRIu64 " %8" PRIu64 " %12.6f %10.2f %10.2f %10.2f  %s:%s\n",
			e->calls, e->errors, e->total / 1e9, avg_of(e) / 1e3,
			e->returns ? e->min / 1e3 : 0.0, e->max / 1e3, e->object, e->function);
	}
}

/* The summary: every process's figures together, then, when several processes made
 * calls, each one's. */
static void print_summary(struct session *s)
{
	struct stat_ent **v = NULL, **own = NULL, *all = NULL, *e;
	enum tp_calls_sort key = s->o->sort;
	FILE *f = s->o->out;
	int n = 0, nall = 0, nown, nproc = 0;

	for (e = s->stats; e; e = e->next)
		n++;
	v = calloc(n ? n : 1, sizeof(*v));
	own = calloc(n ? n : 1, sizeof(*own));
	all = calloc(n ? n : 1, sizeof(*all));
	if (!v || !own || !all)
		goto out;
	/* One entry per OBJECT:FUNCTION over every process. */
	for (e = s->stats; e; e = e->next) {
		int i;

		for (i = 0; i < nall; i++)
			if (!strcmp(all[i].function, e->function) &&
			    !strcmp(all[i].object, e->object))
				break;
		if (i == nall) {
			all[nall] = (struct stat_ent){.object = e->object,
						      .function = e->function,
						      .pid = e->pid,
						      .min = UINT64_MAX};
			nall++;
		}
		stat_merge(&all[i], e);
		if (all[i].pid != e->pid)
			all[i].pid = 0;
	}
	for (int i = 0; i < nall; i++)
		v[i] = &all[i];
	qsort_r(v, nall, sizeof(*v), cmp_stat, &key);
	for (int p = 0; p < s->npids; p++) {
		for (e = s->stats; e; e = e->next)
			if (e->pid == s->pids[p])
				break;
		nproc += e != NULL;
	}
	if (s->o->json) {
		fputs("{\"pids\": [", f);
		for (int i = 0; i < s->npids; i++)
			fprintf(f, "%s%d", i ? ", " : "", s->pids[i]);
		fprintf(f, "], \"engine\": \"%s\", \"functions\": [",
			s->agent ? "agent" : "ptrace");
		json_functions(f, v, nall);
		fputs("], \"processes\": [", f);
	} else {
		text_functions(f, v, nall);
	}
	for (int p = 0, k = 0; p < s->npids; p++) {
		nown = 0;
		for (e = s->stats; e; e = e->next)
			if (e->pid == s->pids[p])
				own[nown++] = e;
		if (!nown)
			continue;
		qsort_r(own, nown, sizeof(*own), cmp_stat, &key);
		if (s->o->json) {
			fprintf(f, "%s\n {\"pid\": %d, \"functions\": [", k++ ? "," : "",
				s->pids[p]);
			json_functions(f, own, nown);
			fputs("]}", f);
		} else if (nproc > 1) {
			fprintf(f, "\nprocess %d:\n", s->pids[p]);
			text_functions(f, own, nown);
		}
	}
	if (s->o->json) {
		fputs("]", f);
		tp_calls_events_json(s, f);
		fputs("}\n", f);
	}
out:
	free(all);
	free(own);
	free(v);
}

/* ---- the job ---- */

static bool processes_left(struct session *s)
{
	pid_t t[1];

	return s->p && tp_proc_tasks(s->p, t, 1) > 0;
}

/* Take every breakpoint out of every live process and detach. */
static int leave(struct session *s)
{
	int err = 0;

	for (int i = 0; i < s->nimgs; i++) {
		struct image *im = s->imgs[i];
		pid_t t[1];
		int r;

		if (tp_proc_tasks_of(s->p, im->pid, t, 1) <= 0)
			continue;
		if (im->watch_tid)
			tp_proc_watch_clear(im->watch_tid);
		r = tp_bp_remove_all(im->bps);
		if (r) {
			tp_err("process %d: restoring its memory: %s", im->pid, strerror(-r));
			err = r;
		}
		tp_plugins_process(s->plugins, im->pid, TRACEPAD_PROC_DETACH);
	}
	tp_proc_detach(s->p);
	s->p = NULL;
	return err;
}

/* The crash guard's part (proc/guard.h), every task stopped: each process gets its bytes and
 * return addresses back.  Plugins are not called again; returns found are not printed. */
static void restore_on_crash(void *arg)
{
	struct session *s = arg;

	for (int i = 0; i < s->nimgs; i++) {
		if (s->imgs[i]->watch_tid)
			tp_proc_watch_clear(s->imgs[i]->watch_tid);
		tp_bp_crash_restore(s->imgs[i]->bps);
	}
}

static int start(struct session *s)
{
	const struct tp_calls_opts *o = s->o;
	unsigned opts = TP_PROC_FOLLOW_FORK | TP_PROC_TRACE_EXEC | TP_PROC_TRACE_EXIT;
	struct image *im;
	pid_t tids[4096];
	int r, n;

	if (o->pid) {
		r = tp_proc_attach(o->pid, opts, &s->p);
		if (r == -EPERM) {
			char why[256];

			if (!tp_proc_perm_reason(o->pid, why, sizeof(why)))
				tp_err("cannot attach to %d: %s", o->pid, why);
			else
				tp_err("cannot attach to %d: %s", o->pid, strerror(-r));
			return r;
		}
		if (r) {
			tp_err("cannot attach to %d: %s", o->pid,
			       r == -ESRCH   ? "no such process"
			       : r == -EINTR ? "interrupted while waiting for its threads to stop"
					     : strerror(-r));
			return r;
		}
	} else {
		struct tp_launch l = {.argv = o->argv, .cpu = -1, .opts = opts};

		r = tp_proc_launch(&l, &s->p);
		if (r) {
			tp_err("cannot run %s: %s", o->argv[0],
			       r == -ENOEXEC ? "not an executable format tracepad can run"
					     : strerror(-r));
			return r;
		}
		s->launched = true;
	}
	im = tp_calls_image_new(s, tp_proc_pid(s->p), tp_proc_pid(s->p), o->pid != 0);
	if (!im || tp_calls_add_pid(s, im->pid))
		return -ENOMEM;
	tp_calls_trap_init(im, im->pid);
	/* A thread's stops can come a few microseconds apart: polling for them saves waking the
	 * tracer, but holds a CPU that the resumed thread may be waiting for (up to the 100 µs
	 * of the poll, in its call's time): not when times are shown (-T, -c). */
	tp_proc_set_spin(s->p, s->o->durations || s->o->summary ? 0 : 100);
	if (s->launched)
		tp_calls_calibrate(s, im->pid);
	n = tp_proc_tasks(s->p, tids, 4096);
	for (int i = 0; i < n && i < 4096; i++)
		if (!tp_calls_thread_add(s, tids[i], im->pid, im, true))
			return -ENOMEM;
	tp_plugins_process(s->plugins, im->pid, TRACEPAD_PROC_START);
	for (int i = 0; i < n && i < 4096; i++)
		tp_plugins_thread(s->plugins, im->pid, tids[i], TRACEPAD_THREAD_START);
	if (s->insert_failed)
		tp_warn("%u selected functions cannot be traced (%s: %s)", s->insert_failed,
			s->insert_what, strerror(-s->insert_err));
	/* The injections of the SSOL mappings left the first task in a reported stop; one with
	 * a stop of its own queued (a signal that came meanwhile) goes on when that is handled,
	 * its signal delivered. */
	if (!tp_proc_queued(s->p, im->pid))
		tp_proc_resume(s->p, im->pid, tp_calls_resume(s), 0);
	return tp_proc_resume_all(s->p);
}

int tp_calls_run(const struct tp_calls_opts *o)
{
	struct session s = {.o = o, .entry_rec = -1};
	char err[256];
	int r = 0, ret = 0, interrupted = 0;
	uint64_t deadline = 0;

	s.sel = tp_select_new(o->patterns, o->npatterns, err, sizeof(err));
	if (s.sel && o->ncallers) {
		s.csel = tp_select_new(o->callers, o->ncallers, err, sizeof(err));
		if (!s.csel) {
			tp_select_free(s.sel);
			s.sel = NULL;
		}
	}
	if (!s.sel) {
		tp_err("%s", err);
		return 2;
	}
	s.protos = tp_protos_new();
	s.need_args = !o->summary || o->trace_dir;
	/* Plugins see every return at its stop, in order with the other threads' events. */
	s.async = !o->nplugins && !getenv("TRACEPAD_CALLS_SYNC");
	s.ns0 = tp_calls_now_ns();
	s.tsc0 = __rdtsc();
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		s.wall_off = (int64_t)((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) -
			     (int64_t)s.ns0;
	}
	tp_proto_set_string_size((size_t)o->strsize);
	s.host = (struct tracepad_host){
	    .abi = TRACEPAD_PLUGIN_ABI,
	    .ctx = &s,
	    .out = o->out,
	    .read = host_read,
	    .select = host_select,
	    .backtrace = host_backtrace,
	    .symbolize = host_symbolize,
	    .regs = host_regs,
	    .threads = host_threads,
	    .maps = tp_plugin_host_maps,
	    .exit_call = host_exit_call,
	};
	s.plugins = tp_plugins_new(&s.host);
	if (!s.plugins)
		r = -ENOMEM;
	for (int i = 0; i < o->nplugins && !r; i++)
		r = tp_plugins_load(s.plugins, o->plugins[i]);
	if (!r && (o->engine == TP_CALLS_ENGINE_AGENT ||
		   (o->engine == TP_CALLS_ENGINE_DEFAULT && tp_calls_agent_fits(o)))) {
		/* attached for exec, signals and exit, as the ptrace engine shows them (plugins:
		 * agent-watch.c stays attached its own way); but not named with -p: a SIGKILL of
		 * tracepad's tracer process drops a signal waiting in a delivery stop (the
		 * kernel's detach at a tracer's exit), and `--engine agent -p` is the way to
		 * trace a running program that must never lose one (the hooks need no tracer) */
		s.events = !o->nplugins && !(o->pid && o->engine == TP_CALLS_ENGINE_AGENT);
		ret = tp_calls_agent_run(&s);
		goto out;
	}
	if (!r && o->trace_dir)
		r = tp_calls_trace_open(&s, o->trace_dir, &s.trace);
	if (!r)
		r = tp_proc_guard_set("tracepad calls", restore_on_crash, &s);
	if (!r)
		r = start(&s);
	if (r) {
		ret = 2; /* bad input: the line saying what is wrong is out */
		goto out;
	}
	s.started = true;
	tp_proc_set_trap_filter(s.p, tp_calls_trap_filter, &s);
	if (o->pid && o->duration > 0)
		deadline = tp_calls_now_ns() + (uint64_t)(o->duration * 1e9);
	tp_calls_tick(s.p, TICK_MS * 1000);
	for (;;) {
		struct tp_event ev;

		/* Returns made without a stop are read, what is known is out within a tick. */
		tp_calls_lines_tick(&s, tp_calls_ticked);
		tp_calls_ticked = 0;
		if ((o->stop && *o->stop) || (deadline && tp_calls_now_ns() >= deadline))
			break;
		r = tp_proc_wait(s.p, &ev);
		if (r == -EINTR) {
			r = 0;
			continue;
		}
		if (r == -ECHILD || r == -EDEADLK) {
			r = 0;
			break;
		}
		if (r)
			break;
		r = tp_calls_handle(&s, &ev);
		if (!r && s.err)
			r = s.err; /* out of memory where it could not be returned */
		if (r && r != -ESRCH)
			break;
		r = 0;
	}
	tp_calls_tick(s.p, 0);
	if (r) {
		tp_err("stopped tracing: %s", strerror(-r));
		ret = 1;
	}
	if (processes_left(&s)) {
		pid_t pid = tp_proc_pid(s.p);

		if (leave(&s))
			ret = 1;
		if (s.launched && o->stop && *o->stop) {
			/* As strace: the program runs on to its own end, tracepad does not wait. */
			interrupted = *o->stop;
		} else if (s.launched) {
			int st;

			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			s.status = st;
		}
	} else {
		tp_proc_free(s.p);
		s.p = NULL;
	}
	/* Calls still in flight after a detach finish untraced: they get no line. */
	for (int i = 0; i < s.nthreads; i++)
		s.threads[i]->n = 0;
	if (s.launched && !ret)
		ret = interrupted	      ? 128 + interrupted
		      : WIFSIGNALED(s.status) ? 128 + WTERMSIG(s.status)
					      : WEXITSTATUS(s.status);
out:
	tp_proc_guard_clear();
	tp_calls_lines_flush(&s);
	if (s.started)
		tp_select_warn_unmatched(s.sel);
	if (s.started && s.csel)
		tp_select_warn_unmatched(s.csel);
	if (o->summary && s.started)
		print_summary(&s);
	tp_plugins_free(s.plugins);
	while (s.nexit_calls)
		free(s.exit_calls[--s.nexit_calls]);
	tp_calls_lines_free(&s);
	if (s.trace && tp_calls_trace_close(s.trace) && !ret)
		ret = 1;
	fflush(o->out);
	while (s.nthreads)
		tp_calls_thread_del(&s, s.threads[0]);
	while (s.nimgs)
		tp_calls_image_free(&s, s.imgs[0]);
	free(s.imgs);
	free(s.threads);
	free(s.pids);
	while (s.stats) {
		struct stat_ent *e = s.stats;

		s.stats = e->next;
		free(e->object);
		free(e->function);
		free(e);
	}
	tp_symtab_free(s.symtab);
	tp_protos_free(s.protos);
	tp_select_free(s.sel);
	tp_select_free(s.csel);
	return ret;
}
