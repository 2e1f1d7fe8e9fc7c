/* `tracepad calls --engine agent`: the calls recorded in the program by the agent's call
 * hooks (src/agent/hooks.c).  tracepad launches the program and runs it to its entry point
 * (or attaches, -p), selects the functions (agent-select.c), hands them to the agent in a
 * memfd block (hooks-abi.h), has the agent place the pads with every thread stopped, lets
 * go of the program and turns the events it drains from the per-thread rings into the
 * ptrace engine's lines and summary; at -p's end it takes the pads out again. */
#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/hooks-abi.h"
#include "base/log.h"
#include "calls/agent-priv.h"
#include "proc/inject.h"

/* Options the agent engine does not have yet: the first one given, or NULL. */
static const char *unsupported(const struct tp_calls_opts *o)
{
	return o->follow      ? "-f"
	       : o->bt	      ? "--bt"
	       : o->trace_dir ? "--trace"
	       : o->nplugins  ? "--plugin"
	       : o->syscalls  ? "-S"
	       : o->ncallers  ? "-C"
	       : o->entry     ? "--entry"
			      : NULL;
}

/* ---- start ---- */

/* Run the launched program to its entry point: its libraries are mapped and relocated, none
 * of its code has run. */
static int to_entry(struct session *s, pid_t pid)
{
	uint64_t entry, pc;
	uint8_t orig;
	int r;

	if (tp_proc_auxv(pid, AT_ENTRY, &entry) || tp_proc_get_pc(pid, &pc))
		return -EIO;
	if (pc == entry)
		return 0;
	if (tp_proc_read(pid, entry, &orig, 1) != 1)
		return -EIO;
	r = tp_proc_poke_int3(pid, entry, true, orig);
	if (r)
		return r;
	r = tp_proc_resume(s->p, pid, TP_RESUME_CONT, 0);
	while (!r) {
		struct tp_event ev;

		r = tp_proc_wait(s->p, &ev);
		if (r == -EINTR && !(s->o->stop && *s->o->stop)) {
			r = 0;
			continue;
		}
		if (r)
			break;
		if (ev.kind == TP_EV_EXITED) {
			if (ev.leader)
				s->status = ev.status;
			r = -ESRCH;
			break;
		}
		if (ev.kind == TP_EV_BREAKPOINT && ev.tid == pid && !tp_proc_get_pc(ev.tid, &pc) &&
		    pc == entry + 1)
			break;
		r = tp_proc_resume(s->p, ev.tid, TP_RESUME_CONT,
				   ev.kind == TP_EV_SIGNAL	 ? ev.sig
				   : ev.kind == TP_EV_BREAKPOINT ? SIGTRAP
								 : 0);
	}
	if (r)
		return r;
	r = tp_proc_poke_int3(pid, entry, false, orig);
	return r ? r : tp_proc_set_pc(pid, entry);
}

static int load_agent(struct session *s, struct agent *a, pid_t *tid)
{
	struct tp_proc_agent ag = {.agent = s->o->agent,
				   .entry = "tracepad_hooks_attach",
				   .fd = a->fd,
				   .error = a->ctl->error,
				   .error_len = sizeof(a->ctl->error)};
	struct tp_symtab *st = tp_symtab_new();
	struct tp_proc_dl dl;
	char why[512];
	int r = -EINVAL;

	if (!st)
		return -ENOMEM;
	tp_symtab_load_pid(st, a->pid);
	if (tp_symtab_find_symbol(st, "libc:dlopen", &dl.dlopen) ||
	    tp_symtab_find_symbol(st, "libc:dlsym", &dl.dlsym)) {
		tp_err("--engine agent: no dlopen in process %d (a static program, or glibc before "
		       "2.34): use --engine ptrace",
		       a->pid);
		goto out;
	}
	if (tp_symtab_find_symbol(st, "libc:dlerror", &dl.dlerror))
		dl.dlerror = 0;
	r = tp_proc_load_agent(s->p, a->pid, &dl, &ag, why, sizeof(why));
	if (r) {
		tp_err("--engine agent: process %d: %s", a->pid, why);
		r = r == -ENOENT ? -EINVAL : r;
		goto out;
	}
	*tid = ag.tid;
	snprintf(a->path, sizeof(a->path), "%s", ag.path);
	a->detach_pc = a->ctl->detach_pc;
	/* written by the agent: trusted only inside its own text */
	if (!tp_proc_agent_mapped(a->pid, ag.path, a->ctl->install_pc) ||
	    !tp_proc_agent_mapped(a->pid, ag.path, a->ctl->detach_pc))
		r = -EIO;
out:
	tp_symtab_free(st);
	return r;
}

/* A thread stopped on an inner boundary of a jmp site (or in a system call that restarts
 * there) goes on in the pad's copy of the instruction. */
static int move_threads(struct session *s, struct agent *a)
{
	pid_t tids[4096];
	int n = tp_proc_tasks(s->p, tids, 4096);

	for (int i = 0; i < n && i < 4096; i++) {
		struct user_regs_struct regs;

		if (tp_proc_get_regs(tids[i], &regs))
			continue;
		for (uint32_t j = 0; j < a->n; j++) {
			const struct tp_hk_func *x = &a->hfs[j];

			for (uint32_t k = 1; !x->err && k < x->ninsn && k < TP_FTP_MAX_INSNS; k++) {
				uint64_t at = x->addr + x->ioff[k];
				bool sys = (int64_t)regs.orig_rax >= 0 && regs.rip - 2 == at;

				if (regs.rip != at && !sys)
					continue;
				regs.rip = x->icopy[k] + (regs.rip - at);
				if (tp_proc_set_regs(tids[i], &regs))
					return -EIO;
			}
		}
	}
	return 0;
}

/* Launch the program to its entry point, or attach to -p's process: every thread stopped. */
static int take(struct session *s, struct agent *a)
{
	struct tp_launch l = {.argv = s->o->argv, .cpu = -1};
	int r;

	if (s->o->pid) {
		r = tp_proc_attach(s->o->pid, 0, &s->p);
		if (r)
			tp_err("cannot attach to %d: %s", s->o->pid,
			       r == -ESRCH ? "no such process" : strerror(-r));
		a->pid = s->o->pid;
		return r;
	}
	r = tp_proc_launch(&l, &s->p);
	if (r) {
		tp_err("cannot run %s: %s", s->o->argv[0],
		       r == -ENOEXEC ? "not an executable format tracepad can run" : strerror(-r));
		return r;
	}
	s->launched = true;
	a->pid = tp_proc_pid(s->p);
	r = to_entry(s, a->pid);
	return r && r != -ESRCH ? -EIO : r;
}

static int start(struct session *s, struct agent *a)
{
	struct image *im;
	uint64_t bad = 0;
	unsigned failed = 0;
	pid_t tid;
	int r;

	r = take(s, a);
	if (r)
		return r;
	/* the loader is done: objects and functions as the ptrace engine selects them */
	im = tp_calls_image_new(s, a->pid, a->pid, false);
	if (!im || tp_calls_add_pid(s, a->pid))
		return -ENOMEM;
	r = tp_calls_agent_select(s, im, a, tp_proc_loader_task(s->p, a->pid));
	if (!r && im->libc &&
	    !tp_errno_tpoff(a->pid, im->libc->path, im->libc->bias, &a->ctl->errno_tpoff))
		a->ctl->errno_ok = 1;
	a->orig = calloc(a->n ? a->n : 1, ORIG_LEN);
	if (!r && !a->orig)
		r = -ENOMEM;
	for (uint32_t j = 0; !r && j < a->n; j++)
		if (tp_proc_read(a->pid, a->hfs[j].addr, a->orig[j], ORIG_LEN) != ORIG_LEN)
			r = -EIO;
	if (!r)
		r = load_agent(s, a, &tid);
	if (r)
		return r;
	r = tp_proc_stop_all(s->p, 0);
	if (!r)
		r = tp_proc_inject_fcall(s->p, a->pid, tid, a->ctl->install_pc,
					 (const uint64_t[6]){0}, false, &bad);
	if (r) {
		tp_err("--engine agent: cannot place the hooks: %s", strerror(-r));
		return r == -ESRCH ? r : -EIO;
	}
	a->live = true;
	for (uint32_t j = 0; j < a->n; j++) {
		const struct tp_hk_func *x = &a->hfs[j];

		if (x->err && x->flags & TP_HK_F_SHOWN && !failed++)
			tp_warn("%s:%s cannot be hooked: %s", a->func_of[j]->obj->base,
				a->func_of[j]->name, strerror(-x->err));
		else if (!x->err && x->kind != 1)
			tp_dbg("calls: %s through an int3 (reason %u)", a->func_of[j]->name,
			       x->why);
	}
	if (failed > 1)
		tp_warn("%u selected functions cannot be hooked", failed);
	return move_threads(s, a);
}

/* ---- events ---- */

static struct thread *thread_get(struct session *s, pid_t pid, pid_t tid)
{
	struct thread *t = tp_calls_thread_of(s, tid);

	return t ? t : tp_calls_thread_add(s, tid, pid, NULL, true);
}

static const struct tp_proto *proto_of(struct session *s, struct func *f)
{
	if (!f->proto_done) {
		f->proto = tp_protos_find(s->protos, f->obj->path, f->name, f->addr - f->obj->bias);
		f->proto_done = true;
	}
	return f->proto;
}

/* The call on top of @t is over: returned with @h's registers, or, @h NULL, left as @why
 * says. */
static void finish(struct session *s, struct thread *t, const struct tp_hk_rec *h, const char *why)
{
	struct rec *rc = &t->recs[--t->n];
	struct stat_ent *e = tp_calls_stat_of(s, t->pid, rc->f);
	char text[600], tail[700];
	bool failed = false;
	uint64_t d = 0;

	if (!e || tp_calls_too_deep(s, t->n))
		return;
	if (!h) {
		if (!s->o->summary && !s->o->min_ns)
			tp_calls_line_call(s, t, rc, t->n, why);
		return;
	}
	{
		const struct tp_proto *p = proto_of(s, rc->f);
		struct user_regs_struct regs = {
		    .rax = h->regs[0], .rdx = h->regs[1], .rsp = h->sp + 8};

		int err = (h->flags & TP_HK_R_ERRNO) ? (int)(int32_t)h->regs[2] : -1;

		d = tp_calls_ticks_ns(s, h->tsc > rc->entry_tsc ? h->tsc - rc->entry_tsc : 0);
		if (s->need_args)
			tp_proto_format_ret(p, -1, &regs, NULL, err, text, sizeof(text), &failed);
		else
			failed = p && tp_proto_failed(p, &regs);
	}
	e->returns++;
	e->errors += failed;
	e->total += d;
	e->min = d < e->min ? d : e->min;
	e->max = d > e->max ? d : e->max;
	if (s->o->summary || d < s->o->min_ns)
		return;
	if (s->o->durations)
		snprintf(tail, sizeof(tail), " = %s <%" PRIu64 ".%06" PRIu64 ">", text,
			 d / 1000000000u, d / 1000 % 1000000);
	else
		snprintf(tail, sizeof(tail), " = %s", text);
	tp_calls_line_call(s, t, rc, t->n, tail);
}

static void on_entry(struct session *s, struct agent *a, struct thread *t,
		     const struct tp_hk_rec *h)
{
	struct func *f = a->func_of[h->func];
	bool follow = h->flags & TP_HK_R_FOLLOWED;
	/* a tail call of a followed frame: it returns with that frame */
	bool tail = !follow && t->n && t->recs[t->n - 1].c.sp == h->sp;
	struct rec tmp, *rc = follow || tail ? tp_calls_rec_push(s, t) : &tmp;
	struct stat_ent *e;

	if (!rc)
		return;
	rc->f = f;
	rc->npcs = 0;
	rc->aux = tail ? REC_TAIL : 0;
	rc->entry_tsc = h->tsc;
	rc->stall0 = 0;
	rc->args[0] = 0;
	rc->c = (struct tracepad_call){
	    .pid = t->pid,
	    .tid = t->tid,
	    .object = f->obj->base,
	    .function = f->name,
	    .func = f->addr,
	    .sp = h->sp,
	    .depth = rc == &tmp ? t->n : t->n - 1,
	    .entry_ns = tp_calls_tsc_ns(s, h->tsc),
	};
	memcpy(rc->c.args, h->regs, sizeof(rc->c.args));
	if (tp_calls_too_deep(s, rc->c.depth) || !(e = tp_calls_stat_of(s, t->pid, f)))
		return;
	e->calls++;
	if (s->need_args) {
		struct user_regs_struct regs = {.rdi = h->regs[0],
						.rsi = h->regs[1],
						.rdx = h->regs[2],
						.rcx = h->regs[3],
						.r8 = h->regs[4],
						.r9 = h->regs[5],
						.rsp = h->sp};

		/* no memory of the program: it was not recorded (strings show as addresses) */
		tp_proto_format_args(proto_of(s, f), -1, &regs, NULL, rc->args, sizeof(rc->args));
	}
	if (rc == &tmp && !s->o->summary) {
		s->ret_tsc = h->tsc;
		tp_calls_line_call(s, t, rc, rc->c.depth,
				   f->hooked ? " = <return not followed>" : "");
		s->ret_tsc = 0;
	}
}

static void one(struct session *s, struct agent *a, const struct tp_hk_rec *h)
{
	struct thread *t = thread_get(s, a->pid, h->tid);

	if (!t)
		return;
	if (h->type == TP_HK_ENTRY) {
		on_entry(s, a, t, h);
		return;
	}
	if (h->type == TP_HK_RESTORED || h->type == TP_HK_REHOOKED) {
		/* an unwinder's walk: the frame's return may pass unseen meanwhile */
		for (unsigned i = t->n; i-- > 0;)
			if (t->recs[i].c.sp == h->sp && !(t->recs[i].aux & REC_TAIL)) {
				t->recs[i].aux = h->type == TP_HK_RESTORED ? REC_LOST : 0;
				break;
			}
		return;
	}
	/* tail-called frames above go with the frame that returns */
	s->ret_tsc = h->tsc;
	while (t->n) {
		bool tail = t->recs[t->n - 1].aux & REC_TAIL;

		finish(s, t, h->type == TP_HK_RETURN ? h : NULL,
		       h->flags & TP_HK_R_LOST ? " = <return not followed>" : " = <unwound>");
		if (!tail)
			break;
	}
	s->ret_tsc = 0;
}

/* Calls in flight of threads that ended (pthread_exit, or the whole process): after a last
 * drain, they never return. */
static uint64_t drain(struct session *s, struct agent *a);
static void ended_threads(struct session *s, struct agent *a, bool all)
{
	bool drained = all;

	for (int i = 0; i < s->nthreads; i++) {
		struct thread *t = s->threads[i];

		if (!t->n || (!all && syscall(SYS_tgkill, a->pid, t->tid, 0) == 0) ||
		    (!all && errno != ESRCH))
			continue;
		if (!drained)
			drain(s, a);
		drained = true;
		s->ret_tsc = __builtin_ia32_rdtsc();
		while (t->n)
			finish(s, t, NULL,
			       t->recs[t->n - 1].aux & REC_LOST ? " = <return not followed>"
								: " = <no return>");
		s->ret_tsc = 0;
	}
}

static uint64_t drain(struct session *s, struct agent *a)
{
	struct tp_ftp_ring *rings = (void *)((uint8_t *)a->ctl + a->ctl->rings_off);
	uint32_t size = a->ctl->ring_size;
	uint64_t n = 0;

	for (uint32_t i = 0; i < RINGS; i++) {
		struct tp_ftp_ring *r = &rings[i];
		uint64_t tail = r->tail, head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
		uint8_t *data = (uint8_t *)a->ctl + a->ctl->data_off + (uint64_t)i * size;

		while (tail < head) {
			const struct tp_hk_rec *h = (const void *)(data + (tail & (size - 1)));
			uint32_t left = size - (uint32_t)(tail & (size - 1));

			/* the agent's records, checked as untrusted */
			if (h->size < 8 || h->size > left ||
			    (h->type != TP_FTP_REC_FILL &&
			     (h->size != sizeof(*h) || h->type < TP_HK_ENTRY ||
			      h->type > TP_HK_REHOOKED ||
			      (h->type == TP_HK_ENTRY && h->func >= a->n)))) {
				tp_warn("--engine agent: a broken record in ring %u: ring dropped",
					i);
				tail = head;
				break;
			}
			if (h->type != TP_FTP_REC_FILL) {
				one(s, a, h);
				n++;
			}
			tail += h->size;
		}
		__atomic_store_n(&r->tail, tail, __ATOMIC_SEQ_CST);
		/* its thread found it full and sleeps (the agent's ring.c) */
		if (__atomic_load_n(&r->waiting, __ATOMIC_SEQ_CST) &&
		    __atomic_exchange_n(&r->waiting, 0, __ATOMIC_SEQ_CST))
			syscall(SYS_futex, &r->waiting, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	}
	return n;
}

/* ---- the job ---- */

static int leave(struct session *s, struct agent *a);

/* Threads whose trap at a hook's int3 tracepad took as it attached (a breakpoint stop, which
 * detaching would not deliver) go back to the hooked instruction, whose bytes are the
 * program's again: otherwise they would resume one byte into it.  Other stops stay queued. */
static void traps_back(struct session *s, struct agent *a)
{
	pid_t tids[4096];
	int n = tp_proc_tasks(s->p, tids, 4096);
	struct tp_event keep[64];
	int nkeep = 0;

	for (int i = 0; i < n && i < 4096; i++) {
		while (tp_proc_queued(s->p, tids[i]) && nkeep < 64) {
			struct tp_event ev;
			uint64_t pc;
			bool ours = false;

			if (tp_proc_wait(s->p, &ev))
				break;
			if (ev.kind == TP_EV_BREAKPOINT && !tp_proc_get_pc(ev.tid, &pc))
				for (uint32_t j = 0; j < a->n && !ours; j++)
					ours = a->hfs[j].addr == pc - 1;
			if (ours)
				tp_proc_set_pc(ev.tid, pc - 1);
			else
				keep[nkeep++] = ev;
		}
	}
	for (int k = 0; k < nkeep; k++)
		tp_proc_requeue(s->p, &keep[k]);
}

/* The program still runs (-p, or tracepad interrupted): every thread stopped, the pads out,
 * threads out of the hooks, the block unmapped by the agent, the code compared with what it
 * was, and the program let go.  Frames hooked meanwhile still return through the agent's
 * trampoline, which records nothing any more. */
static int leave(struct session *s, struct agent *a)
{
	uint64_t busy = 0;
	pid_t tid;
	int r;

	r = tp_proc_attach(a->pid, 0, &s->p);
	if (r)
		return r == -ESRCH ? 0 : r;
	if (!tp_proc_agent_mapped(a->pid, a->path, a->detach_pc))
		goto out; /* an execve took the agent and its hooks away */
	tid = tp_proc_loader_task(s->p, a->pid);
	for (int round = 0; round < DETACH_ROUNDS; round++) {
		r = tp_proc_inject_fcall(s->p, a->pid, tid, a->detach_pc, (const uint64_t[6]){0},
					 false, &busy);
		tp_dbg("calls: detach in %d: %d busy %lld", tid, r, (long long)busy);
		if (r || (int64_t)busy <= 0)
			break;
		/* a thread inside a hook (maybe waiting for room in its ring) */
		drain(s, a);
		tp_proc_resume_all(s->p);
		usleep(1000);
		drain(s, a);
		r = tp_proc_stop_all(s->p, 0);
		if (r)
			break;
	}
	if (!r && busy)
		tp_warn("--engine agent: a thread stayed inside a hook: the agent's block stays "
			"mapped in the program");
	if (!r && !busy)
		traps_back(s, a);
	for (uint32_t j = 0; !r && j < a->n; j++) {
		uint8_t now[ORIG_LEN];

		if (tp_proc_read(a->pid, a->hfs[j].addr, now, ORIG_LEN) == ORIG_LEN &&
		    memcmp(now, a->orig[j], ORIG_LEN)) {
			tp_err("--engine agent: the code of %s is not what it was",
			       a->func_of[j]->name);
			r = -EIO;
		}
	}
out:
	a->live = false;
	tp_proc_detach(s->p);
	s->p = NULL;
	return r == -ESRCH ? 0 : r;
}

int tp_calls_agent_run(struct session *s)
{
	const char *no = unsupported(s->o);
	struct agent a = {.fd = -1};
	pid_t pid;
	int r, st = 0, pfd = -1;
	bool ended = false;
	uint64_t next = 0, deadline = 0;

	if (no) {
		tp_err("%s is not supported with --engine agent yet", no);
		return 2;
	}
	s->agent = true;
	r = start(s, &a);
	if (r) {
		/* a launched program goes, an attached one is let go as it was */
		if (s->launched) {
			tp_proc_kill(s->p);
		} else {
			tp_proc_detach(s->p);
			if (a.live)
				leave(s, &a);
		}
		s->p = NULL;
		r = 2;
		goto out;
	}
	s->started = true;
	pid = a.pid;
	/* no ptrace stop from here on: the program runs, the rings are drained */
	tp_proc_detach(s->p);
	s->p = NULL;
	if (!s->launched)
		pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (s->o->pid && s->o->duration > 0)
		deadline = tp_calls_now_ns() + (uint64_t)(s->o->duration * 1e9);
	while (!(s->o->stop && *s->o->stop) && !(deadline && tp_calls_now_ns() >= deadline)) {
		struct pollfd pf = {.fd = pfd, .events = POLLIN};
		bool busy = drain(s, &a) > 0;

		if (s->launched) {
			if (waitpid(pid, &st, WNOHANG) == pid &&
			    (WIFEXITED(st) || WIFSIGNALED(st))) {
				ended = true;
				break;
			}
		} else if (pfd < 0 ? kill(pid, 0) && errno == ESRCH : poll(&pf, 1, 0) > 0) {
			ended = true;
			break;
		}
		if (tp_calls_now_ns() >= next) {
			ended_threads(s, &a, false);
			next = tp_calls_now_ns() + 50000000u;
		}
		tp_calls_lines_tick(s, false);
		if (!busy)
			usleep(NAP_US);
	}
	if (pfd >= 0)
		close(pfd);
	drain(s, &a);
	if (!ended && leave(s, &a))
		r = 1;
	else
		r = 0;
	drain(s, &a);
	if (ended)
		ended_threads(s, &a, true);
	/* calls in flight when tracepad was interrupted finish untraced: no line */
	for (int i = 0; i < s->nthreads; i++)
		s->threads[i]->n = 0;
	if (a.ctl->lost || a.ctl->no_ring || a.ctl->nested || a.ctl->deep)
		tp_warn("--engine agent: calls not followed: %" PRIu64 " lost, %" PRIu64
			" of threads without a ring, %" PRIu64 " in signal handlers inside a "
			"hook, %" PRIu64 " too deep",
			a.ctl->lost, a.ctl->no_ring, a.ctl->nested, a.ctl->deep);
	if (ended && s->launched) {
		struct thread *t = thread_get(s, pid, pid);

		if (t)
			tp_calls_event_exit(s, t, st);
		r = r ? r : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
	} else if (s->launched && !r) {
		/* as strace: the program runs on to its own end, without the hooks */
		r = 128 + *s->o->stop;
	}
out:
	if (a.ctl)
		munmap(a.ctl, a.size);
	if (a.fd >= 0)
		close(a.fd);
	free(a.func_of);
	free(a.orig);
	return r;
}
