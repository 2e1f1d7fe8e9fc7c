/* `tracepad calls`: the event loop over the traced processes, the entry and return stops,
 * the lines and the summary, plugins; detaching cleanly on every way out. */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <x86intrin.h>

#include "calls/engine.h"
#include "base/log.h"
#include "base/text.h"
#include "plugins/plugins.h"

#ifndef TRAP_HWBKPT
#define TRAP_HWBKPT 4
#endif

static volatile sig_atomic_t ticked;

/* The event loop's clock, every TICK_MS, only ever delivered while the loop sleeps in a wait:
 * returns made without a stop are reported, the output flushed, --duration checked. */
#define TICK_MS 50

static void on_tick(int sig)
{
	(void)sig;
	ticked = 1;
}

/* Start the clock (after the launch: the program must not inherit the blocked signal), or
 * stop it. */
static void tick(struct tp_proc *p, bool on)
{
	struct itimerval it = {{0, on ? TICK_MS * 1000 : 0}, {0, on ? TICK_MS * 1000 : 0}};
	struct sigaction sa = {.sa_handler = on_tick};
	sigset_t set;

	if (on) {
		sigemptyset(&set);
		sigaddset(&set, SIGALRM);
		sigprocmask(SIG_BLOCK, &set, NULL);
		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, NULL);
		tp_proc_set_wait_signal(p, SIGALRM);
	}
	setitimer(ITIMER_REAL, &it, NULL);
}

/* ---- threads ---- */

static struct thread *thread_find(struct session *s, pid_t tid)
{
	if (s->last && s->last->tid == tid)
		return s->last;
	for (int i = 0; i < s->nthreads; i++)
		if (s->threads[i]->tid == tid)
			return s->last = s->threads[i];
	return NULL;
}

static struct thread *thread_add(struct session *s, pid_t tid, pid_t pid, struct image *im,
				 bool report)
{
	struct thread *t = calloc(1, sizeof(*t));
	struct thread **n = realloc(s->threads, (s->nthreads + 1) * sizeof(*n));

	if (!t || !n)
		abort();
	s->threads = n;
	t->tid = tid;
	t->pid = pid;
	t->img = im;
	t->report = report;
	s->threads[s->nthreads++] = t;
	return t;
}

static void thread_del(struct session *s, struct thread *t)
{
	for (int i = 0; i < s->nthreads; i++)
		if (s->threads[i] == t) {
			s->threads[i] = s->threads[--s->nthreads];
			break;
		}
	if (s->last == t)
		s->last = NULL;
	free(t->recs);
	free(t);
}

static struct rec *rec_push(struct thread *t)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 16;
		t->recs = realloc(t->recs, t->cap * sizeof(*t->recs));
		if (!t->recs)
			abort();
	}
	return &t->recs[t->n++];
}

static void recs_copy(struct thread *to, const struct thread *from)
{
	to->n = 0;
	for (unsigned i = 0; i < from->n; i++) {
		struct rec *r = rec_push(to);

		*r = from->recs[i];
		r->c.tid = to->tid;
		r->c.pid = to->pid;
	}
}

static void add_pid(struct session *s, pid_t pid)
{
	for (int i = 0; i < s->npids; i++)
		if (s->pids[i] == pid)
			return;
	s->pids = realloc(s->pids, (s->npids + 1) * sizeof(*s->pids));
	if (!s->pids)
		abort();
	s->pids[s->npids++] = pid;
}

/* ---- plugins' host ---- */

static long host_read(void *ctx, int pid, uint64_t addr, void *buf, size_t len)
{
	(void)ctx;
	return tp_proc_read(pid, addr, buf, len);
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

static bool subst_return(void *arg, pid_t tid, uint64_t addr, uint64_t *val)
{
	struct image *im = arg;

	return tp_bp_real_return(im->bps, tid, addr, val);
}

static int backtrace_of(struct session *s, struct thread *t, struct user_regs_struct *regs,
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
	struct thread *t = thread_find(s, tid);
	struct user_regs_struct regs;

	if (!t)
		return -ESRCH;
	if (t == s->cur) {
		regs = s->cur_regs;
	} else if (tp_proc_get_regs(tid, &regs)) {
		return -ESRCH;
	}
	return backtrace_of(s, t, &regs, pcs, max);
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
static int symbolize(struct session *s, int pid, uint64_t pc, bool ret, char *buf, size_t len)
{
	struct tp_symtab *st = symtab_of(s, pid);
	struct tp_symloc loc;
	int n;

	if (!st || tp_symtab_lookup(st, pc - ret, true, &loc))
		return snprintf(buf, len, "0x%" PRIx64, pc);
	loc.offset += ret;
	if (loc.function)
		n = snprintf(buf, len, "%s:%s+0x%" PRIx64, tp_select_base(loc.object), loc.function,
			     loc.offset);
	else
		n = snprintf(buf, len, "%s+0x%" PRIx64, tp_select_base(loc.object), loc.offset);
	if (loc.file && n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - n, " (%s:%d)", tp_select_base(loc.file), loc.line);
	return n;
}

static int host_symbolize(void *ctx, int pid, uint64_t pc, char *buf, size_t len)
{
	return symbolize(ctx, pid, pc, false, buf, len) < 0 ? -EIO : 0;
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

static const struct {
	const char *name;
	int (*init)(const struct tracepad_host *, const char *, struct tracepad_plugin *);
} builtin_plugins[] = {
    {"memory", tp_plugin_memory_init},
};

static int plugin_load(struct session *s, const char *spec)
{
	int (*init)(const struct tracepad_host *, const char *, struct tracepad_plugin *) = NULL;
	char *name = strdup(spec), *args;
	struct plugin pl = {0};
	int r;

	if (!name)
		return -ENOMEM;
	args = strchr(name, ':');
	if (args)
		*args++ = 0;
	if (strchr(name, '/')) {
		pl.dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
		if (!pl.dl) {
			tp_err("cannot load plugin %s: %s", name, dlerror());
			free(name);
			return -ENOENT;
		}
		*(void **)&init = dlsym(pl.dl, "tracepad_plugin_init");
		if (!init) {
			tp_err("plugin %s has no tracepad_plugin_init()", name);
			dlclose(pl.dl);
			free(name);
			return -ENOENT;
		}
	} else {
		for (size_t i = 0; i < sizeof(builtin_plugins) / sizeof(builtin_plugins[0]); i++)
			if (!strcmp(builtin_plugins[i].name, name))
				init = builtin_plugins[i].init;
		if (!init) {
			tp_err(
			    "unknown plugin '%s' (built-in: memory; or a path to a shared object)",
			    name);
			free(name);
			return -ENOENT;
		}
	}
	r = init(&s->host, args, &pl.pl);
	if (r) {
		tp_err("plugin %s: initialisation failed: %s", name, strerror(r < 0 ? -r : r));
		if (pl.dl)
			dlclose(pl.dl);
		free(name);
		return r < 0 ? r : -r;
	}
	free(name);
	s->plugins = realloc(s->plugins, (s->nplugins + 1) * sizeof(*s->plugins));
	if (!s->plugins)
		abort();
	s->plugins[s->nplugins++] = pl;
	return 0;
}

#define EACH_PLUGIN(s, cb, ...)                                                                    \
	do {                                                                                       \
		for (int i_ = 0; i_ < (s)->nplugins; i_++)                                         \
			if ((s)->plugins[i_].pl.cb)                                                \
				(s)->plugins[i_].pl.cb((s)->plugins[i_].pl.priv, __VA_ARGS__);     \
	} while (0)

/* ---- output ---- */

static void print_line(struct session *s, struct thread *t, const struct rec *rc, unsigned depth,
		       const char *tail)
{
	FILE *out = s->o->out;

	fprintf(out, "[%d] %*s%s:%s(%s)%s\n", t->tid, (int)(2 * depth), "", rc->f->obj->base,
		rc->f->name, rc->args, tail);
	for (int i = 1; i < rc->npcs; i++) {
		char buf[512];

		symbolize(s, t->pid, rc->pcs[i], true, buf, sizeof(buf));
		fprintf(out, "[%d] %*s    at %s\n", t->tid, (int)(2 * depth), "", buf);
	}
}

/* Calls of @t above index @keep that will never return here (longjmp, exception, exit). */
static void drop_recs(struct session *s, struct thread *t, unsigned keep, const char *why)
{
	while (t->n > keep) {
		struct rec *rc = &t->recs[--t->n];

		if (!t->report || !rc->f->shown)
			continue;
		if (!s->o->summary)
			print_line(s, t, rc, t->n, why);
		if (s->trace)
			tp_calls_trace_return(s->trace, rc, why + 3);
	}
}

static struct stat_ent *stat_of(struct session *s, struct func *f)
{
	struct stat_ent *e;

	if (f->stat)
		return f->stat;
	for (e = s->stats; e; e = e->next)
		if (!strcmp(e->function, f->name) && !strcmp(e->object, f->obj->base))
			return f->stat = e;
	e = calloc(1, sizeof(*e));
	if (!e)
		abort();
	e->object = strdup(f->obj->base);
	e->function = strdup(f->name);
	e->min = UINT64_MAX;
	e->next = s->stats;
	s->stats = e;
	return f->stat = e;
}

static const struct tp_proto *proto_of(struct session *s, struct func *f)
{
	if (!f->proto_done) {
		f->proto = tp_protos_find(s->protos, f->obj->path, f->name, f->addr - f->obj->bias);
		f->proto_done = true;
	}
	return f->proto;
}

static bool get_fp(pid_t tid, const struct tp_proto *p, struct user_fpregs_struct *fp)
{
	return p && tp_proto_needs_fp(p) && !tp_proc_get_fpregs(tid, fp);
}

/* ---- SIGTRAP of the program ---- */

#define TRAP_BIT (1ULL << (SIGTRAP - 1))

/* Scratch space in stopped task @tid's stack, below the red zone. */
static uint64_t scratch(pid_t tid)
{
	struct user_regs_struct r;

	return tp_proc_get_regs(tid, &r) ? 0 : ((r.rsp - 4096) & ~63ULL);
}

/* Read the program's SIGTRAP disposition (rt_sigaction injected into @tid). */
static void trap_capture(struct image *im, pid_t tid)
{
	uint64_t at = scratch(tid), args[6] = {SIGTRAP, 0, at, 8};
	int64_t ret = -1;

	if (!at || tp_bp_inject_syscall(im->bps, tid, SYS_rt_sigaction, args, &ret) || ret ||
	    tp_proc_read(im->pid, at, im->trap_act, sizeof(im->trap_act)) !=
		(ssize_t)sizeof(im->trap_act))
		return;
	im->trap_custom = im->trap_act[0] != (uint64_t)(uintptr_t)SIG_DFL;
	tp_dbg("calls: SIGTRAP disposition of %d: 0x%llx flags 0x%llx", im->pid,
	       (unsigned long long)im->trap_act[0], (unsigned long long)im->trap_act[1]);
}

/* A new image: SIGTRAP may be ignored (inherited) or caught (attached). */
static void trap_init(struct image *im, pid_t tid)
{
	struct tp_sig_masks m;

	if (!tp_proc_sig_masks(tid, &m) && ((m.ignored | m.caught) & TRAP_BIT))
		trap_capture(im, tid);
}

/* After a stop at one of our int3s: if the kernel reset SIGTRAP to SIG_DFL (it does when
 * the int3 comes while SIGTRAP is ignored or blocked), put the program's disposition back;
 * a handler was reset only because SIGTRAP was blocked, so block it again. */
static void trap_check(struct image *im, pid_t tid)
{
	uint64_t at, mask = TRAP_BIT;
	struct tp_sig_masks m;
	int64_t ret;

	if (tp_proc_sig_masks(tid, &m) || ((m.ignored | m.caught) & TRAP_BIT))
		return;
	tp_dbg("calls: SIGTRAP of %d was reset, restoring handler 0x%llx", tid,
	       (unsigned long long)im->trap_act[0]);
	at = scratch(tid);
	if (!at || tp_proc_write(im->pid, at, im->trap_act, sizeof(im->trap_act)) ||
	    tp_proc_write(im->pid, at + 64, &mask, 8))
		return;
	uint64_t act[6] = {SIGTRAP, at, 0, 8}, blk[6] = {SIG_BLOCK, at + 64, 0, 8};

	tp_bp_inject_syscall(im->bps, tid, SYS_rt_sigaction, act, &ret);
	if (im->trap_act[0] != (uint64_t)(uintptr_t)SIG_IGN)
		tp_bp_inject_syscall(im->bps, tid, SYS_rt_sigprocmask, blk, &ret);
}

/* ---- stops ---- */

static void on_entry(struct session *s, struct thread *t, struct func *f,
		     const struct tp_bp_stop *st, struct user_regs_struct *regs, uint64_t now)
{
	struct image *im = t->img;
	struct rec tmp, *rc;
	uint64_t caller = 0;

	if (f->hooked) {
		drop_recs(s, t, st->depth - 1, " = <unwound>");
		rc = rec_push(t);
	} else {
		drop_recs(s, t, st->depth, " = <unwound>");
		rc = &tmp;
	}
	if (!tp_bp_real_return(im->bps, t->tid, regs->rsp, &caller))
		tp_proc_read(im->pid, regs->rsp, &caller, 8);
	rc->f = f;
	rc->npcs = 0;
	rc->aux = 0;
	if (f->kind == F_SIGACTION && regs->rdi == SIGTRAP && regs->rsi)
		tp_proc_read(im->pid, regs->rsi, &rc->aux, 8);
	rc->args[0] = 0;
	rc->c = (struct tracepad_call){
	    .pid = t->pid,
	    .tid = t->tid,
	    .object = f->obj->base,
	    .function = f->name,
	    .func = f->addr,
	    .args = {regs->rdi, regs->rsi, regs->rdx, regs->rcx, regs->r8, regs->r9},
	    .sp = regs->rsp,
	    .caller = caller,
	    .depth = f->hooked ? t->n - 1 : t->n,
	    .entry_ns = now,
	};
	if (!t->report || !f->shown)
		return;
	stat_of(s, f)->calls++;
	if (s->need_args) {
		const struct tp_proto *p = proto_of(s, f);
		struct user_fpregs_struct fp;

		tp_proto_format_args(p, t->pid, regs, get_fp(t->tid, p, &fp) ? &fp : NULL, rc->args,
				     sizeof(rc->args));
	}
	if (s->o->bt) {
		struct user_regs_struct r = *regs;
		int n;

		r.rip = f->addr;
		n = backtrace_of(s, t, &r, rc->pcs, s->o->bt + 1 < 64 ? s->o->bt + 1 : 64);
		rc->npcs = n > 0 ? n : 0;
	}
	EACH_PLUGIN(s, call, &rc->c);
	if (s->trace)
		tp_calls_trace_call(s->trace, rc);
	if (!s->o->summary && (s->o->entry || !f->hooked)) {
		int npcs = rc->npcs;

		if (f->hooked)
			rc->npcs = 0; /* the backtrace goes with the completed call */
		print_line(s, t, rc, rc->c.depth, f->hooked ? " ..." : "");
		rc->npcs = npcs;
	}
}

/* errno's place in the thread's TLS, once libc is there; also for the return stubs. */
static bool errno_known(struct image *im)
{
	if (!im->errno_state && im->libc) {
		im->errno_state = -1;
		if (!tp_errno_tpoff(im->pid, im->libc->path, im->libc->bias, &im->errno_tpoff)) {
			im->errno_state = 1;
			tp_bps_set_errno(im->bps, im->errno_tpoff);
		}
	}
	return im->errno_state > 0;
}

static int errno_of(struct thread *t, const struct user_regs_struct *regs)
{
	int32_t v;

	if (!errno_known(t->img) ||
	    tp_proc_read(t->img->pid, regs->fs_base + t->img->errno_tpoff, &v, 4) != 4)
		return -1;
	return v;
}

/* A call returned: at its trampoline stop (@regs, @fp NULL: read when needed), or earlier
 * through its return stub (@st->async: @regs and @fp hold what the stub saved). */
static void on_return(struct session *s, struct thread *t, const struct tp_bp_stop *st,
		      struct user_regs_struct *regs, const struct user_fpregs_struct *fp,
		      uint64_t now)
{
	struct image *im = t->img;
	char ret[600], tail[700];
	struct stat_ent *e;
	struct rec *rc;
	bool failed = false;
	int k = -1;

	for (int i = (int)t->n - 1; i >= (int)st->depth; i--)
		if (t->recs[i].c.sp == st->sp) {
			k = i;
			break;
		}
	if (k < 0) {
		/* A call whose record was dropped (its frame looked unwound). */
		drop_recs(s, t, st->depth, " = <unwound>");
		return;
	}
	drop_recs(s, t, k + 1, " = <unwound>");
	rc = &t->recs[k];
	rc->c.retval = st->rax;
	rc->c.return_ns = now;
	if (rc->f->kind == F_RESOLVER) {
		tp_calls_resolved(s, im, t->tid, rc->f, st->rax);
		goto out;
	}
	if (rc->f->kind == F_SIGACTION && rc->c.args[0] == SIGTRAP && rc->c.args[1] &&
	    (int)st->rax == 0) {
		/* The trampoline's int3 may already have reset the handler the call set (when
		 * it set SIG_IGN): the rest of the disposition is the kernel's, the handler
		 * the one the call passed. */
		trap_capture(im, t->tid);
		im->trap_act[0] = rc->aux;
		im->trap_custom = rc->aux != (uint64_t)(uintptr_t)SIG_DFL;
	}
	if (!t->report || !rc->f->shown)
		goto out;
	{
		const struct tp_proto *p = proto_of(s, rc->f);
		struct user_fpregs_struct own;
		uint64_t d = now > rc->c.entry_ns ? now - rc->c.entry_ns : 0;
		int err = -1;

		regs->rip = st->ret_addr;
		if (p && tp_proto_failed(p, regs))
			err = !st->async ? errno_of(t, regs) : st->err_valid ? st->err : -1;
		if (!fp && get_fp(t->tid, p, &own))
			fp = &own;
		if (s->need_args)
			tp_proto_format_ret(p, t->pid, regs, fp, err, ret, sizeof(ret), &failed);
		else
			failed = p && tp_proto_failed(p, regs);
		e = stat_of(s, rc->f);
		e->returns++;
		e->errors += failed;
		e->total += d;
		if (d < e->min)
			e->min = d;
		if (d > e->max)
			e->max = d;
		EACH_PLUGIN(s, ret, &rc->c);
		if (s->trace)
			tp_calls_trace_return(s->trace, rc, s->need_args ? ret : "");
		if (!s->o->summary) {
			if (s->o->durations)
				snprintf(tail, sizeof(tail), " = %s <%" PRIu64 ".%06" PRIu64 ">",
					 ret, d / 1000000000u, d / 1000 % 1000000);
			else
				snprintf(tail, sizeof(tail), " = %s", ret);
			print_line(s, t, rc, k, tail);
		}
	}
out:
	t->n = k;
	drop_recs(s, t, st->depth, " = <unwound>");
}

/* The TSC reading of a return stub on the monotonic clock: both clocks advance together,
 * their rate is measured since the start. */
static uint64_t tsc_to_ns(struct session *s, uint64_t tsc)
{
	uint64_t ns = tp_calls_now_ns(), now = __rdtsc();
	double rate = now > s->tsc0 ? (double)(ns - s->ns0) / (double)(now - s->tsc0) : 1.0;

	return tsc < now ? ns - (uint64_t)((double)(now - tsc) * rate) : ns;
}

void tp_calls_async_return(void *arg, pid_t tid, const struct tp_bp_stop *st)
{
	struct session *s = arg;
	struct thread *t = thread_find(s, tid);
	struct user_regs_struct regs = {.rax = st->rax, .rdx = st->rdx};
	struct user_fpregs_struct fp = {0};

	if (!t)
		return;
	memcpy(fp.xmm_space, &st->xmm0, 8);
	on_return(s, t, st, &regs, &fp, tsc_to_ns(s, st->tsc));
}

/* Report the returns without a stop of every thread of @im; @t is at a stop with stack
 * pointer @sp, and its calls left without returning are printed too (before an object they
 * belong to goes away). */
static void reap_image(struct session *s, struct image *im, struct thread *t, uint64_t sp)
{
	for (int i = 0; i < s->nthreads; i++)
		if (s->threads[i]->img == im && s->threads[i] != t)
			tp_bp_reap(im->bps, s->threads[i]->tid, true, 0);
	tp_bp_reap(im->bps, t->tid, false, sp);
	drop_recs(s, t, tp_bp_depth(im->bps, t->tid), " = <unwound>");
}

/* May a call of @f return without a stop?  Not where tracepad acts on the return
 * (IFUNC resolvers, sigaction), nor in a vfork child on its parent's memory. */
static unsigned async_ok(struct session *s, struct thread *t, const struct func *f)
{
	if (!s->async || t->img->pid != t->pid || !f || f->kind != F_TRACED)
		return 0;
	errno_known(t->img);
	return TP_BP_HIT_ASYNC;
}

/* A stop at one of our int3s; the task is resumed with signal @sig (0: none). */
static int on_breakpoint(struct session *s, const struct tp_event *ev, int sig)
{
	struct thread *t = thread_find(s, ev->tid);
	struct user_regs_struct regs;
	struct tp_bp_stop st;
	struct image *im;
	uint64_t now, stop_sp;
	struct func *f;
	int r;

	if (!t && (im = tp_calls_image_of(s, ev->pid)))
		t = thread_add(s, ev->tid, ev->pid, im, true); /* a thread known late */
	if (!t)
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, SIGTRAP);
	im = t->img;
	if (ev->has_regs)
		regs = ev->regs;
	else if (tp_proc_get_regs(ev->tid, &regs))
		return 0; /* killed meanwhile: its exit follows */
	stop_sp = regs.rip - 1 == tp_bp_trampoline(im->bps) ? regs.rsp - 8 : regs.rsp;
	if (t->rehook_at && stop_sp >= t->rehook_at) {
		tp_bp_rehook_thread(im->bps, t->tid, stop_sp - 1);
		t->rehook_at = 0;
	}
	f = tp_calls_func_find(im, regs.rip - 1);
	if (f && f->kind == F_EXEC)
		reap_image(s, im, t, regs.rsp); /* the returns go with the old image */
	r = tp_bp_hit(im->bps, ev->tid, &regs, TP_BP_HIT_STAY | async_ok(s, t, f), &st);
	if (r == 0)
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, SIGTRAP);
	if (r < 0) {
		if (r == -ESRCH)
			return 0;
		tp_err("thread %d at 0x%llx: %s", ev->tid, (unsigned long long)regs.rip,
		       r == -ENOENT ? "a return through tracepad's trampoline with no call known"
				    : strerror(-r));
		return r;
	}
	now = tp_calls_now_ns();
	s->cur = t;
	s->cur_regs = regs;
	s->cur_regs.rip = st.kind == TP_BP_STOP_ENTRY ? st.func : st.ret_addr;
	if (st.kind == TP_BP_STOP_RETURN) {
		on_return(s, t, &st, &regs, NULL, now);
	} else if (f) { /* the entry's function, found before the hit */
		switch (f->kind) {
		case F_EXEC:
		case F_TRACED:
		case F_SIGACTION:
			on_entry(s, t, f, &st, &regs, now);
			break;
		case F_RESOLVER:
			drop_recs(s, t, st.depth - 1, " = <unwound>");
			*rec_push(t) = (struct rec){.f = f, .c = {.sp = regs.rsp, .tid = t->tid}};
			break;
		case F_RBRK: {
			int32_t state = -1;

			/* RT_CONSISTENT (0): the loader is done adding or removing objects. */
			if (tp_proc_read(im->pid, im->rdebug + 24, &state, 4) == 4 && state == 0) {
				/* Returns of functions of an object on its way out are printed
				 * while its symbols are there. */
				reap_image(s, im, t, regs.rsp);
				/* The start-up's objects are relocated when the loader says they
				 * are consistent, a dlopen'ed one only after: its IFUNC resolvers
				 * are left to the loader (their returns are hooked). */
				im->live = !im->started;
				im->started = true;
				tp_calls_objects_sync(s, im, t->tid);
				im->live = false;
				s->objects_gen++;
			}
			break;
		}
		case F_UNWIND:
			tp_bp_unhook_thread(im->bps, t->tid);
			break;
		case F_BACKTRACE: {
			uint64_t back = 0;
			struct object *bo;

			tp_bp_unhook_thread(im->bps, t->tid);
			t->rehook_at = regs.rsp;
			/* Hook the frames again as soon as it returns: a breakpoint where it
			 * returns to (else at the thread's next stop above it). */
			if (!tp_bp_real_return(im->bps, t->tid, regs.rsp, &back))
				tp_proc_read(im->pid, regs.rsp, &back, 8);
			bo = tp_calls_object_at(im, back);
			if (bo && !tp_calls_func_find(im, back))
				tp_calls_func_add(s, im, t->tid, bo, back,
						  "<after _Unwind_Backtrace>", F_REHOOK);
			break;
		}
		case F_REHOOK:
			if (t->rehook_at) {
				tp_bp_rehook_thread(im->bps, t->tid, regs.rsp - 1);
				t->rehook_at = 0;
			}
			break;
		case F_CATCH:
			tp_bp_rehook_thread(im->bps, t->tid, regs.rsp - 1);
			drop_recs(s, t, tp_bp_depth(im->bps, t->tid), " = <unwound>");
			break;
		}
	}
	s->cur = NULL;
	if (im->trap_custom)
		trap_check(im, t->tid);
	return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, sig);
}

static void image_release(struct session *s, struct image *im)
{
	for (int i = 0; i < s->nthreads; i++)
		if (s->threads[i]->img == im)
			return;
	tp_calls_image_free(s, im);
}

static int on_fork(struct session *s, const struct tp_event *ev)
{
	struct thread *pt = thread_find(s, ev->tid), *ct;
	pid_t child = ev->new_tid;
	bool traced = false;
	pid_t tids[1];

	traced = tp_proc_tasks_of(s->p, child, tids, 1) > 0;
	if (!pt || !traced)
		goto resume;
	/* Returns already made are the parent's alone. */
	tp_bp_reap(pt->img->bps, pt->tid, false, 0);
	if (ev->vm_shared) {
		/* vfork: the child runs on the parent's memory and stack until it execs. */
		ct = thread_add(s, child, child, pt->img, s->o->follow);
		tp_bp_copy_shadow(pt->img->bps, pt->tid, pt->img->bps, child);
		recs_copy(ct, pt);
	} else {
		struct image *ci = tp_calls_image_fork(s, pt->img, child);

		tp_bp_copy_shadow(pt->img->bps, pt->tid, ci->bps, child);
		if (s->o->follow) {
			ct = thread_add(s, child, child, ci, true);
			recs_copy(ct, pt);
			add_pid(s, child);
			EACH_PLUGIN(s, process, child, TRACEPAD_PROC_START);
		} else {
			/* Not followed: the child gets its original bytes back and goes. */
			int r = tp_bp_remove_all(ci->bps);

			if (r)
				tp_warn("child %d: restoring its memory: %s", child, strerror(-r));
			tp_proc_detach_tgid(s->p, child);
			tp_calls_image_free(s, ci);
			tp_proc_resume_all(s->p);
			traced = false;
		}
	}
resume:
	if (traced)
		tp_proc_resume(s->p, child, TP_RESUME_CONT, 0);
	return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
}

static int on_exec(struct session *s, const struct tp_event *ev)
{
	struct thread *t = thread_find(s, ev->old_tid ? ev->old_tid : ev->tid);
	struct image *old;

	if (!t)
		t = thread_add(s, ev->tid, ev->pid, NULL, true);
	old = t->img;
	/* The other threads of the process are gone without exit reports. */
	for (int i = 0; i < s->nthreads;) {
		struct thread *o = s->threads[i];

		if (o != t && o->pid == ev->pid) {
			thread_del(s, o);
			continue;
		}
		i++;
	}
	t->tid = ev->tid;
	t->n = 0;
	t->rehook_at = 0;
	if (old && old->pid != ev->pid) {
		/* A vfork child leaves its parent's memory. */
		tp_bp_drop_thread(old->bps, ev->old_tid ? ev->old_tid : ev->tid);
		if (!s->o->follow) {
			thread_del(s, t);
			return tp_proc_detach_tgid(s->p, ev->pid);
		}
	}
	t->img = NULL;
	if (old)
		image_release(s, old);
	t->img = tp_calls_image_new(s, ev->pid, ev->tid, false);
	trap_init(t->img, ev->tid);
	t->report = true;
	add_pid(s, ev->pid);
	EACH_PLUGIN(s, process, ev->pid, TRACEPAD_PROC_START);
	return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
}

static void on_exit_stop(struct session *s, const struct tp_event *ev)
{
	struct thread *t = thread_find(s, ev->tid);
	pid_t tids[256];
	int n;
	bool all = true;

	if (!t)
		return;
	t->exiting = true;
	if (t->img)
		tp_bp_reap(t->img->bps, t->tid, false, 0);
	drop_recs(s, t, 0, " = <no return>");
	if (!t->report)
		return;
	EACH_PLUGIN(s, thread, t->pid, t->tid, TRACEPAD_THREAD_EXIT);
	if (t->img->pid != t->pid)
		return;
	n = tp_proc_tasks_of(s->p, t->pid, tids, 256);
	for (int i = 0; i < n && i < 256; i++) {
		struct thread *o = thread_find(s, tids[i]);

		if (o && !o->exiting)
			all = false;
	}
	if (all && !t->img->exit_reported) {
		t->img->exit_reported = true;
		s->cur = t;
		EACH_PLUGIN(s, process, t->pid, TRACEPAD_PROC_EXIT);
		s->cur = NULL;
	}
}

static void on_exited(struct session *s, const struct tp_event *ev)
{
	struct thread *t = thread_find(s, ev->tid);
	struct image *im;

	if (ev->leader && ev->pid == tp_proc_pid(s->p) && s->launched)
		s->status = ev->status;
	if (!t)
		return;
	im = t->img;
	drop_recs(s, t, 0, " = <no return>");
	if (im)
		tp_bp_drop_thread(im->bps, t->tid);
	thread_del(s, t);
	if (im)
		image_release(s, im);
}

/* A signal comes as a call is about to return through the trampoline: the return is
 * taken first (as if its int3 had run), so that the handler's frame holds the real return
 * address, then the signal is delivered there with its siginfo. */
static int signal_at_trampoline(struct session *s, const struct tp_event *ev)
{
	struct tp_event bev = *ev;

	if (tp_proc_get_regs(ev->tid, &bev.regs))
		return 0; /* gone: its exit follows */
	bev.kind = TP_EV_BREAKPOINT;
	bev.regs.rip++;
	bev.has_regs = true;
	return on_breakpoint(s, &bev, ev->sig);
}

static int handle(struct session *s, const struct tp_event *ev)
{
	struct thread *t;

	switch (ev->kind) {
	case TP_EV_BREAKPOINT:
		return on_breakpoint(s, ev, 0);
	case TP_EV_SIGNAL:
		t = thread_find(s, ev->tid);
		if (t && t->img && ev->sig == SIGSEGV && tp_bp_stub_fault(t->img->bps, t->tid) > 0)
			return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
		if (t && t->img) {
			int r;

			tp_bp_reap(t->img->bps, t->tid, false, 0);
			r = tp_bp_signal_stop(t->img->bps, t->tid, &ev->si);
			if (r == 2)
				return signal_at_trampoline(s, ev);
			/* Its SIGTRAP disposition may have been reset by the steps. */
			if (r > 0 && t->img->trap_custom)
				trap_check(t->img, t->tid);
		}
		if (ev->sig == SIGTRAP && ev->si.si_code == TRAP_HWBKPT && t && t->img &&
		    t->img->watch_tid == ev->tid) {
			tp_calls_watch_hit(s, t->img, ev->tid);
			return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
		}
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, ev->sig);
	case TP_EV_CLONE:
		t = thread_find(s, ev->tid);
		if (t && !thread_find(s, ev->new_tid)) {
			thread_add(s, ev->new_tid, t->pid, t->img, t->report);
			if (t->report)
				EACH_PLUGIN(s, thread, t->pid, ev->new_tid, TRACEPAD_THREAD_START);
		}
		tp_proc_resume(s->p, ev->new_tid, TP_RESUME_CONT, 0);
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
	case TP_EV_FORK:
		return on_fork(s, ev);
	case TP_EV_EXEC:
		return on_exec(s, ev);
	case TP_EV_EXIT:
		on_exit_stop(s, ev);
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
	case TP_EV_EXITED:
		on_exited(s, ev);
		return 0;
	default:
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
	}
}

static bool trap_filter(void *arg, pid_t pid, const struct user_regs_struct *regs)
{
	struct image *im = tp_calls_image_of(arg, pid);

	return im && tp_bp_owns_trap(im->bps, regs->rip);
}

/* ---- summary ---- */

static int cmp_stat(const void *a, const void *b)
{
	const struct stat_ent *x = *(struct stat_ent *const *)a, *y = *(struct stat_ent *const *)b;

	if (x->total != y->total)
		return x->total < y->total ? 1 : -1;
	if (x->calls != y->calls)
		return x->calls < y->calls ? 1 : -1;
	return strcmp(x->function, y->function);
}

static void print_summary(struct session *s)
{
	struct stat_ent **v = NULL, *e;
	FILE *f = s->o->out;
	int n = 0;

	for (e = s->stats; e; e = e->next)
		n++;
	v = calloc(n ? n : 1, sizeof(*v));
	if (!v)
		return;
	n = 0;
	for (e = s->stats; e; e = e->next)
		v[n++] = e;
	qsort(v, n, sizeof(*v), cmp_stat);
	if (s->o->json) {
		fputs("{\"pids\": [", f);
		for (int i = 0; i < s->npids; i++)
			fprintf(f, "%s%d", i ? ", " : "", s->pids[i]);
		fputs("], \"functions\": [", f);
		for (int i = 0; i < n; i++) {
			e = v[i];
			fputs(i ? ",\n  {\"object\": " : "\n  {\"object\": ", f);
			tp_json_str(f, e->object, strlen(e->object));
			fputs(", \"function\": ", f);
			tp_json_str(f, e->function, strlen(e->function));
			fprintf(f,
				", \"calls\": %" PRIu64 ", \"returns\": %" PRIu64
				", \"errors\": %" PRIu64 ", \"total_ns\": %" PRIu64
				", \"avg_ns\": %" PRIu64 ", \"min_ns\": %" PRIu64
				", \"max_ns\": %" PRIu64 "}",
				e->calls, e->returns, e->errors, e->total,
				e->returns ? e->total / e->returns : 0, e->returns ? e->min : 0,
				e->max);
		}
		fputs("]}\n", f);
	} else {
		fprintf(f, "%10s %8s %12s %10s %10s %10s  %s\n", "calls", "errors", "total s",
			"avg us", "min us", "max us", "function");
		for (int i = 0; i < n; i++) {
			e = v[i];
			fprintf(
			    f, "%10" PRIu64 " %8" PRIu64 " %12.6f %10.2f %10.2f %10.2f  %s:%s\n",
			    e->calls, e->errors, e->total / 1e9,
			    e->returns ? e->total / 1e3 / e->returns : 0.0,
			    e->returns ? e->min / 1e3 : 0.0, e->max / 1e3, e->object, e->function);
		}
	}
	free(v);
}

/* ---- the job ---- */

static bool processes_left(struct session *s)
{
	pid_t t[1];

	return s->p && tp_proc_tasks(s->p, t, 1) > 0;
}

/* Take every breakpoint out of every live process and detach.  @crashed: from the crash
 * handler, plugins are not called again. */
static int leave(struct session *s, bool crashed)
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
		if (crashed) /* returns found while leaving are not printed */
			tp_bps_set_async(im->bps, NULL, NULL);
		r = tp_bp_remove_all(im->bps);
		if (r) {
			tp_err("process %d: restoring its memory: %s", im->pid, strerror(-r));
			err = r;
		}
		if (!crashed)
			EACH_PLUGIN(s, process, im->pid, TRACEPAD_PROC_DETACH);
	}
	tp_proc_detach(s->p);
	s->p = NULL;
	return err;
}

/* A crash of tracepad itself (a bug, a plugin's) must not leave int3s and trampolines in
 * the programs: on a fatal signal, take them out and detach as on any other way out, then
 * die of the signal.  A second fault in there finds the default action (SA_RESETHAND). */
static struct session *crash_session;

static void on_crash(int sig)
{
	static const char msg[] = "tracepad calls: crashed; restoring the programs and detaching\n";
	struct session *s = crash_session;

	crash_session = NULL;
	if (s && s->p) {
		if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
			s->status = 0;
		leave(s, true);
	}
	raise(sig);
}

static void catch_crashes(struct session *s)
{
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
	static char altstack[64 * 1024];
	stack_t ss = {.ss_sp = altstack, .ss_size = sizeof(altstack)};
	struct sigaction sa = {.sa_handler = on_crash,
			       .sa_flags = SA_RESETHAND | SA_NODEFER | SA_ONSTACK};

	sigaltstack(&ss, NULL);
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
	crash_session = s;
}

static void uncatch_crashes(void)
{
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

	crash_session = NULL;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
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
			       r == -ESRCH ? "no such process" : strerror(-r));
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
	trap_init(im, im->pid);
	add_pid(s, im->pid);
	n = tp_proc_tasks(s->p, tids, 4096);
	for (int i = 0; i < n && i < 4096; i++)
		thread_add(s, tids[i], im->pid, im, true);
	EACH_PLUGIN(s, process, im->pid, TRACEPAD_PROC_START);
	for (int i = 0; i < n && i < 4096; i++)
		EACH_PLUGIN(s, thread, im->pid, tids[i], TRACEPAD_THREAD_START);
	if (s->insert_failed)
		tp_warn("%u selected functions cannot be traced (%s: %s)", s->insert_failed,
			s->insert_what, strerror(-s->insert_err));
	/* The injections of the SSOL mappings left the first task in a reported stop. */
	tp_proc_resume(s->p, im->pid, TP_RESUME_CONT, 0);
	return tp_proc_resume_all(s->p);
}

int tp_calls_run(const struct tp_calls_opts *o)
{
	struct session s = {.o = o};
	char err[256];
	int r = 0, ret = 0;
	uint64_t deadline = 0;

	s.sel = tp_select_new(o->patterns, o->npatterns, err, sizeof(err));
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
	};
	for (int i = 0; i < o->nplugins && !r; i++)
		r = plugin_load(&s, o->plugins[i]);
	if (!r && o->trace_dir)
		r = tp_calls_trace_open(&s, o->trace_dir, &s.trace);
	if (!r) {
		catch_crashes(&s);
		r = start(&s);
	}
	if (r) {
		ret = 2; /* bad input: the line saying what is wrong is out */
		goto out;
	}
	s.started = true;
	/* A thread's stops can come a few microseconds apart. */
	tp_proc_set_spin(s.p, 100);
	tp_proc_set_trap_filter(s.p, trap_filter, &s);
	if (o->pid && o->duration > 0)
		deadline = tp_calls_now_ns() + (uint64_t)(o->duration * 1e9);
	tick(s.p, true);
	for (;;) {
		struct tp_event ev;

		if (ticked) {
			ticked = 0;
			for (int i = 0; s.async && i < s.nthreads; i++)
				if (s.threads[i]->img)
					tp_bp_reap(s.threads[i]->img->bps, s.threads[i]->tid, true,
						   0);
			fflush(o->out); /* what is known by now is out within a tick */
		}
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
		r = handle(&s, &ev);
		if (r && r != -ESRCH)
			break;
		r = 0;
	}
	tick(s.p, false);
	if (r) {
		tp_err("stopped tracing: %s", strerror(-r));
		ret = 1;
	}
	if (processes_left(&s)) {
		pid_t pid = tp_proc_pid(s.p);

		if (leave(&s, false))
			ret = 1;
		if (s.launched) {
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
		ret = WIFSIGNALED(s.status) ? 128 + WTERMSIG(s.status) : WEXITSTATUS(s.status);
out:
	uncatch_crashes();
	if (o->summary && s.started)
		print_summary(&s);
	for (int i = 0; i < s.nplugins; i++) {
		if (s.plugins[i].pl.fini)
			s.plugins[i].pl.fini(s.plugins[i].pl.priv);
		if (s.plugins[i].dl)
			dlclose(s.plugins[i].dl);
	}
	free(s.plugins);
	if (s.trace && tp_calls_trace_close(s.trace) && !ret)
		ret = 1;
	fflush(o->out);
	while (s.nthreads)
		thread_del(&s, s.threads[0]);
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
	return ret;
}
