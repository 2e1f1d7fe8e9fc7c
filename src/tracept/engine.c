/* `tracepad trace`, the job: launch or attach, the event loop over the int3 stops of the
 * tracepoints (one ptrace stop a hit: the condition is evaluated and the values collected
 * while the thread is stopped, memory in one process_vm_readv where the addresses need no
 * read), while-stepping by single steps, and detaching with every byte restored. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arch/arch.h"
#include "base/log.h"
#include "proc/guard.h"
#include "proc/inject.h"
#include "tracept/engine.h"

static int read_mem(void *arg, uint64_t addr, void *buf, size_t len)
{
	struct session *s = arg;

	return tp_proc_read(s->pid, addr, buf, len) == (ssize_t)len ? 0 : -EFAULT;
}

/* Collect @items over @regs into @f. */
static void collect(struct session *s, const struct tp_items *items, const uint64_t *regs,
		    struct frame *f)
{
	struct tp_proc_piece pcs[TP_MAX_ITEMS];
	int idx[TP_MAX_ITEMS];
	unsigned npcs = 0;
	uint8_t *room = f->buf;

	f->unavail = 0;
	for (int i = 0; i < items->n; i++) {
		const struct tp_item *it = &items->v[i];
		uint64_t v = 0;

		if (tp_expr_eval(it->c.code, it->c.len, regs, read_mem, s, &v, NULL)) {
			f->unavail |= 1ull << i;
			f->val[i] = 0;
			f->mem[i] = room;
			room += it->mem ? it->size : 0;
			continue;
		}
		if (!it->mem) {
			f->val[i] = v;
			continue;
		}
		f->mem[i] = room;
		room += it->size;
		if (it->fixed) {
			pcs[npcs] = (struct tp_proc_piece){v, f->mem[i], it->size};
			idx[npcs++] = i;
		} else if (tp_proc_read(s->pid, v, f->mem[i], it->size) != (ssize_t)it->size) {
			f->unavail |= 1ull << i;
		}
	}
	if (npcs && tp_proc_read_pieces(s->pid, pcs, npcs)) {
		/* Some range is not readable: each on its own, to tell which. */
		for (unsigned k = 0; k < npcs; k++)
			if (tp_proc_read(s->pid, pcs[k].addr, pcs[k].buf, pcs[k].len) !=
			    (ssize_t)pcs[k].len)
				f->unavail |= 1ull << idx[k];
	}
	/* Scalars read as bytes become values. */
	for (int i = 0; i < items->n; i++) {
		const struct tp_item *it = &items->v[i];
		unsigned bits = it->size * 8;
		uint64_t v = 0;

		if (!it->scalar || (f->unavail & (1ull << i)))
			continue;
		memcpy(&v, f->mem[i], it->size);
		if (bits < 64 && it->is_signed && (v >> (bits - 1)) & 1)
			v |= ~0ull << bits;
		f->val[i] = v;
	}
}

static int on_hit(struct session *s, pid_t tid, struct user_regs_struct *regs, int nest);

/* Single-step @tid @n times after a hit of @tp (its pc in the slot), a frame at each. */
static int stepping(struct session *s, struct tracepoint *tp, pid_t tid, int nest)
{
	uint64_t slot = 0;
	struct frame f = {.buf = s->scratch};
	uint64_t held = 0;
	int r = 0;

	tp_bp_lookup(s->bps, tp->addr, NULL, &slot);
	for (unsigned k = 1; k <= tp->spec->while_stepping;) {
		struct user_regs_struct regs;

		r = tp_proc_inject_step(s->p, tid, &held);
		if (r)
			break;
		r = tp_proc_get_regs(tid, &regs);
		if (r)
			break;
		/* The jmp back from the slot is tracepad's, not the program's. */
		if (slot && regs.rip > slot && regs.rip < slot + 64)
			continue;
		if (tp_bp_lookup(s->bps, regs.rip - 1, NULL, NULL) == 1 && nest == 0) {
			uint8_t b = 0;

			/* The step ran into another tracepoint's int3: that is a hit. */
			if (tp_proc_read(s->pid, regs.rip - 1, &b, 1) == 1 && b == TP_ARCH_INT3) {
				tp_proc_inject_flush(s->p);
				tp_proc_held_resend(s->pid, tid, &held);
				return on_hit(s, tid, &regs, nest + 1);
			}
		}
		f.pc = regs.rip;
		f.step = k;
		collect(s, &tp->step_items, (const uint64_t *)&regs, &f);
		tp_tracept_frame_out(s, tp, &tp->step_items, tid, &f);
		k++;
	}
	tp_proc_inject_flush(s->p);
	tp_proc_held_resend(s->pid, tid, &held);
	if (r == -ESRCH)
		return 0;
	if (r)
		return r;
	return tp_proc_resume(s->p, tid, TP_RESUME_CONT, 0);
}

/* An int3 stop of @tid, pc after the int3. */
static int on_hit(struct session *s, pid_t tid, struct user_regs_struct *regs, int nest)
{
	uint64_t addr = regs->rip - 1;
	struct tracepoint *step = NULL;
	struct frame f = {.buf = s->scratch};
	bool ours = false;
	int r;

	bool rbrk = s->rbrk && addr == s->rbrk;

	regs->rip = addr; /* the pc of the tracepoint, as expressions see it */
	for (int i = 0; i < s->ntps; i++) {
		struct tracepoint *tp = &s->tps[i];
		uint64_t v = 1;

		/* a fast tracepoint's int3 is the agent's: passed on with its SIGTRAP */
		if (tp->addr != addr || tp->pending || tp->dead || tp->fast)
			continue;
		ours = true;
		tp->hits++;
		if (tp->spec->pass_count && tp->collected >= tp->spec->pass_count) {
			tp->discarded++;
			continue;
		}
		if (tp->has_cond) {
			r = tp_expr_eval(tp->cond.code, tp->cond.len, (const uint64_t *)regs,
					 read_mem, s, &v, NULL);
			if (r) {
				/* A condition that cannot be evaluated is not true. */
				tp->errors++;
				v = 0;
			}
		}
		if (!v) {
			tp->discarded++;
			continue;
		}
		tp->collected++;
		f.pc = addr;
		f.step = 0;
		collect(s, &tp->items, (const uint64_t *)regs, &f);
		tp_tracept_frame_out(s, tp, &tp->items, tid, &f);
		if (tp->spec->while_stepping && !step && nest == 0)
			step = tp;
	}
	regs->rip = addr + 1;
	if (!ours && !rbrk)
		return tp_proc_resume(s->p, tid, TP_RESUME_CONT, SIGTRAP);
	r = tp_bp_hit(s->bps, tid, regs, step || rbrk ? TP_BP_HIT_STAY : 0, NULL);
	if (r == 0)
		return tp_proc_resume(s->p, tid, TP_RESUME_CONT, SIGTRAP);
	if (r < 0)
		return r == -ESRCH ? 0 : r;
	if (rbrk)
		tp_tracept_retry(s, tid); /* objects came or went: pending tracepoints */
	if (step)
		return stepping(s, step, tid, nest);
	return rbrk ? tp_proc_resume(s->p, tid, TP_RESUME_CONT, 0) : 0;
}

static int on_fork(struct session *s, const struct tp_event *ev)
{
	pid_t child = ev->new_tid, t[1];

	if (tp_proc_tasks_of(s->p, child, t, 1) > 0) {
		if (ev->vm_shared) {
			/* vfork: the child runs in the parent's memory (its int3s are the
			 * parent's) until it execs; it is let go then. */
			tp_proc_resume(s->p, child, TP_RESUME_CONT, 0);
		} else {
			/* Not traced: it gets its bytes back and goes. */
			struct tp_bps *cb = tp_bps_clone(s->bps, child);
			int r = cb ? tp_bp_remove_all(cb) : -ENOMEM;

			if (r)
				tp_warn("child %d: restoring its memory: %s", child, strerror(-r));
			tp_bps_free(cb);
			tp_proc_detach_tgid(s->p, child);
			tp_proc_resume_all(s->p);
		}
	}
	return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
}

static int handle(struct session *s, struct tp_event *ev)
{
	switch (ev->kind) {
	case TP_EV_BREAKPOINT: {
		struct user_regs_struct regs;

		if (s->gone) /* after an exec: no int3 is ours */
			return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, SIGTRAP);
		if (ev->has_regs)
			regs = ev->regs;
		else if (tp_proc_get_regs(ev->tid, &regs))
			return 0;
		return on_hit(s, ev->tid, &regs, 0);
	}
	case TP_EV_SIGNAL:
		if (!s->gone)
			tp_bp_signal_stop(s->bps, ev->tid, &ev->si);
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, ev->sig);
	case TP_EV_CLONE:
		tp_proc_resume(s->p, ev->new_tid, TP_RESUME_CONT, 0);
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
	case TP_EV_FORK:
		return on_fork(s, ev);
	case TP_EV_EXEC:
		if (ev->pid != s->pid)
			return tp_proc_detach_tgid(s->p, ev->pid); /* a vfork child left */
		if (!s->gone)
			tp_warn("process %d exec'd: its tracepoints are gone with its old image",
				s->pid);
		s->gone = true;
		tp_bp_forget(s->bps, 0, UINT64_MAX);
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
	case TP_EV_EXITED:
		if (ev->leader && ev->pid == s->pid)
			s->status = ev->status;
		if (!s->gone)
			tp_bp_drop_thread(s->bps, ev->tid);
		return 0;
	default:
		return tp_proc_resume(s->p, ev->tid, TP_RESUME_CONT, 0);
	}
}

static bool trap_filter(void *arg, pid_t pid, const struct user_regs_struct *regs)
{
	struct session *s = arg;

	return pid == s->pid && !s->gone && tp_bp_owns_trap(s->bps, regs->rip);
}

static void restore_on_crash(void *arg)
{
	struct session *s = arg;

	if (!s->gone)
		tp_bp_crash_restore(s->bps);
}

static int start(struct session *s)
{
	const struct tp_tracept_opts *o = s->o;
	unsigned opts = TP_PROC_FOLLOW_FORK | TP_PROC_TRACE_EXEC;
	int r;

	if (o->pid) {
		r = tp_proc_attach(o->pid, opts, &s->p);
		if (r == -EPERM) {
			char why[256];

			if (!tp_proc_perm_reason(o->pid, why, sizeof(why)))
				tp_err("cannot attach to %d: %s", o->pid, why);
			else
				tp_err("cannot attach to %d: %s", o->pid, strerror(-r));
		} else if (r) {
			tp_err("cannot attach to %d: %s", o->pid,
			       r == -ESRCH ? "no such process" : strerror(-r));
		}
		if (r)
			return -EINVAL;
	} else {
		struct tp_launch l = {.argv = o->argv, .cpu = -1, .opts = opts};

		r = tp_proc_launch(&l, &s->p);
		if (r) {
			tp_err("cannot run %s: %s", o->argv[0],
			       r == -ENOEXEC ? "not an executable format tracepad can run"
					     : strerror(-r));
			return -EINVAL;
		}
		s->launched = true;
	}
	s->pid = tp_proc_pid(s->p);
	if (s->launched) {
		r = tp_tracept_to_entry(s);
		if (r == -ESRCH) {
			tp_err("%s ended before its first instruction", o->argv[0]);
			return r;
		}
		if (r)
			return r;
	}
	r = tp_tracept_setup(s);
	if (!r && s->nnormal < s->ntps)
		r = tp_tracept_fast_start(s);
	return r;
}

static void on_tick(int sig)
{
	(void)sig;
}

/* Fast tracepoints beside int3 ones: the event loop wakes up every 2 ms to drain the
 * agent's rings (a signal unblocked only while it sleeps, as calls' clock). */
static int tick_start(struct session *s, timer_t *t)
{
	struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGRTMIN + 3};
	struct itimerspec its = {{0, 2000000}, {0, 2000000}};
	struct sigaction sa = {.sa_handler = on_tick};
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGRTMIN + 3);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGRTMIN + 3, &sa, NULL);
	if (timer_create(CLOCK_MONOTONIC, &ev, t) || timer_settime(*t, 0, &its, NULL))
		return -errno;
	tp_proc_set_wait_signal(s->p, SIGRTMIN + 3);
	return 0;
}

static void report(struct session *s)
{
	FILE *f = s->o->out;

	fprintf(f, "%-4s %10s %10s %10s %8s  %s\n", "tp", "hits", "collected", "discarded",
		"errors", "location");
	for (int i = 0; i < s->ntps; i++) {
		struct tracepoint *tp = &s->tps[i];

		fprintf(f, "%-4d %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %8" PRIu64 "  %s",
			tp->num, tp->hits, tp->collected, tp->discarded, tp->errors, tp->where);
		if (tp->has_cond)
			fprintf(f, " if %s",
				strstr(tp->spec->loc.text, " if ")
				    ? strstr(tp->spec->loc.text, " if ") + 4
				: tp->spec->cond.text ? tp->spec->cond.text
						      : "");
		fputc('\n', f);
	}
	if (s->lost)
		fprintf(f, "%" PRIu64 " frames could not be written to the trace\n", s->lost);
}

static void cleanup(struct session *s)
{
	for (int i = 0; i < s->ntps; i++) {
		tp_items_free(&s->tps[i].items);
		tp_items_free(&s->tps[i].step_items);
	}
	free(s->tps);
	free(s->scratch);
	tp_bps_free(s->bps);
	tp_symtab_free(s->syms);
}

int tp_tracept_run(const struct tp_tracept_opts *o)
{
	struct session s = {.o = o};
	int r, ret = 0;
	bool stopped = false;
	timer_t tick = 0;

	r = tp_proc_guard_set("tracepad trace", restore_on_crash, &s);
	if (!r)
		r = start(&s);
	if (!r && o->trace_dir)
		r = tp_tracept_frames_open(&s, o->trace_dir);
	if (r) {
		/* Nothing planted stays: the program goes on (attached) or is killed (launched:
		 * it never ran its own code). */
		if (s.p && s.launched) {
			tp_proc_kill(s.p);
		} else if (s.p) {
			if (s.bps)
				tp_bp_remove_all(s.bps);
			tp_tracept_fast_stop(&s);
			tp_proc_detach(s.p);
		}
		tp_proc_guard_clear();
		tp_tracept_fast_end(&s);
		cleanup(&s);
		return r == -EINVAL || r == -ESRCH ? 2 : 1;
	}
	if (s.fast && !s.nnormal) {
		/* every tracepoint in the agent: no ptrace while the program runs */
		r = tp_tracept_fast_run(&s, &stopped);
		if (r) {
			tp_err("stopped tracing: %s", strerror(-r));
			ret = 1;
		}
		goto done;
	}
	if (s.fast && (r = tick_start(&s, &tick)) != 0) {
		tp_err("cannot start the clock of the rings: %s", strerror(-r));
		ret = 1;
		goto out_loop;
	}
	tp_proc_set_trap_filter(s.p, trap_filter, &s);
	/* A thread's hits can come a few microseconds apart: poll before sleeping. */
	tp_proc_set_spin(s.p, 100);
	/* the leader, stopped by the set-up, unless a stop of its own waits to be handled */
	if (!tp_proc_queued(s.p, s.pid))
		tp_proc_resume(s.p, s.pid, TP_RESUME_CONT, 0);
	tp_proc_resume_all(s.p);
	for (;;) {
		struct tp_event ev;

		if (o->stop && *o->stop) {
			stopped = true;
			break;
		}
		r = tp_bp_wait(s.bps, &ev);
		if (r == -EINTR) {
			tp_tracept_fast_drain(&s);
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
	if (r) {
		tp_err("stopped tracing: %s", strerror(-r));
		ret = 1;
	}
	if (s.fast)
		timer_delete(tick);
out_loop : {
	pid_t t[1];

	if (tp_proc_tasks(s.p, t, 1) > 0) {
		if (!s.gone && (r = tp_bp_remove_all(s.bps))) {
			tp_err("process %d: restoring its memory: %s", s.pid, strerror(-r));
			ret = 1;
		}
		if (!s.gone && (r = tp_tracept_fast_stop(&s)) && r != -ESRCH) {
			tp_err("process %d: removing its fast tracepoints: %s", s.pid,
			       strerror(-r));
			ret = 1;
		}
		tp_proc_detach(s.p);
		if (s.launched && !stopped) {
			int st = 0;

			while (waitpid(s.pid, &st, 0) < 0 && errno == EINTR)
				;
			s.status = st;
		}
	} else {
		tp_proc_free(s.p);
	}
}
done:
	tp_proc_guard_clear();
	tp_tracept_fast_end(&s);
	if (o->trace_dir && tp_tracept_frames_close(&s) && !ret)
		ret = 1;
	report(&s);
	fflush(o->out);
	if (s.launched && !ret)
		ret = stopped		      ? 128 + *o->stop
		      : WIFSIGNALED(s.status) ? 128 + WTERMSIG(s.status)
					      : WEXITSTATUS(s.status);
	cleanup(&s);
	return ret;
}
