/* Loading a shared object into a running process through the process's own loader: calls of
 * its dlopen, dlsym and dlerror injected into one stopped task, returning to a temporary
 * int3 at the entry point, while the other tasks may run so that no lock they hold blocks
 * the loader. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "arch/arch.h"
#include "base/log.h"
#include "proc/inject.h"
#include "proc/proc-priv.h"

/* The page that holds the strings of the calls: path, then symbol. */
#define SCRATCH_SIZE 4096
#define SCRATCH_SYM 3072 /* offset of the symbol name; paths are shorter */
/* Signals of a thread's own queue looked at for its step trap (a trap comes first). */
#define PEEK_MAX 8

/* Is the first SIGTRAP queued for @tid the trap of a TF step (it stopped just as it
 * trapped)?  PTRACE_PEEKSIGINFO reads the thread's queue without taking from it. */
static bool step_trap_queued(pid_t tid)
{
	struct __ptrace_peeksiginfo_args a = {.off = 0, .flags = 0, .nr = PEEK_MAX};
	siginfo_t si[PEEK_MAX];
	long n;

	if (!tp_proc_sig_pending(tid, SIGTRAP))
		return false;
	n = ptrace(PTRACE_PEEKSIGINFO, tid, &a, si);
	for (long i = 0; i < n; i++)
		if (si[i].si_signo == SIGTRAP)
			return si[i].si_code == TRAP_TRACE || si[i].si_code == TRAP_BRKPT;
	return false;
}

static bool is_step_trap(const struct tp_event *ev)
{
	return ev->kind == TP_EV_SIGNAL && ev->sig == SIGTRAP &&
	       (ev->si.si_code == TRAP_TRACE || ev->si.si_code == TRAP_BRKPT);
}

/* A step trap of @tid that a stop_all() took and queued as a signal stop: dropped, not
 * delivered (the call would see it first, as a fault). */
static bool drop_queued_step_trap(struct tp_proc *p, pid_t tid)
{
	return tp_proc_inject_drop(p, tid, is_step_trap);
}

/* Let stopped task @tid (TF cleared) dequeue the step trap queued for it, undelivered:
 * the call would meet it as a fault of the function. */
static int take_step_trap(struct tp_proc *p, pid_t tid)
{
	struct tp_task *t;
	struct tp_event ev;
	int r;

	if (!step_trap_queued(tid))
		return 0;
	r = tp_proc_resume(p, tid, TP_RESUME_CONT, 0);
	while (!r) {
		r = tp_proc_inject_wait_task(p, tid, &ev);
		if (r)
			break;
		if (ev.kind != TP_EV_SIGNAL) {
			r = -EIO;
			break;
		}
		if (ev.sig == SIGTRAP) {
			t = tp_proc_task_find(p, tid);
			if (t)
				t->pending_sig = 0;
			break;
		}
		/* another signal came first: it stays queued for the program */
		r = tp_proc_inject_defer(p, &ev);
		if (!r)
			r = -EAGAIN;
		break;
	}
	tp_proc_inject_flush(p);
	return r;
}

int tp_proc_inject_fcall(struct tp_proc *p, pid_t pid, pid_t tid, uint64_t fn,
			 const uint64_t args[6], bool others_run, uint64_t *ret)
{
	struct tp_task *t = tp_proc_task_find(p, tid);
	bool was_held;
	uint64_t at;
	uint8_t orig;
	int r, r2;

	if (!t)
		return -ESRCH;
	was_held = t->held || tp_proc_queued(p, tid);
	drop_queued_step_trap(p, tid);
	r = take_step_trap(p, tid);
	if (r)
		return r;
	r = tp_proc_auxv(pid, AT_ENTRY, &at);
	if (r)
		return r;
	if (tp_proc_read(pid, at, &orig, 1) != 1)
		return -EIO;
	r = tp_proc_poke_int3(pid, at, true, orig);
	if (r)
		return r;
	tp_proc_inflight_push(pid, tid, NULL, at, &orig, 1);
	if (others_run) {
		/* @tid stays stopped for the call to set its registers */
		t->held = false;
		r = tp_proc_resume_all(p);
	}
	if (!r)
		r = tp_proc_inject_call(p, pid, tid, fn, args, at, NULL, NULL, ret);
	/* Back as it was: a task held by an attach or stop_all is resumed by resume_all. */
	t = tp_proc_task_find(p, tid);
	if (t && t->state == TP_TASK_STOPPED && !tp_proc_queued(p, tid))
		t->held = was_held;
	if (others_run) {
		r2 = tp_proc_stop_all(p, 0);
		if (!r && r2 != -ECHILD)
			r = r2;
	}
	/* Nothing runs the entry point again: the byte goes back with the others stopped. */
	r2 = tp_proc_poke_int3(pid, at, false, orig);
	tp_proc_inflight_pop();
	return r ? r : r2;
}

int tp_proc_inject_until_out(struct tp_proc *p, pid_t pid, pid_t tid, uint64_t fn, int rounds,
			     int (*between)(void *), void *arg, uint64_t *busy)
{
	int r = 0;

	*busy = 0;
	for (int round = 0; round < rounds; round++) {
		r = tp_proc_inject_fcall(p, pid, tid, fn, (const uint64_t[6]){0}, false, busy);
		if (r || (int64_t)*busy <= 0)
			break;
		/* a thread inside the code (maybe waiting for room in its ring): out of it once
		 * let run */
		r = between ? between(arg) : 0;
		if (!r)
			r = tp_proc_let_run(p, 1000);
		if (!r && between)
			r = between(arg);
		if (r)
			break;
	}
	return r;
}

int tp_proc_run_to(struct tp_proc *p, pid_t tid, uint64_t at, const struct tp_proc_run_to *how)
{
	pid_t pid = tp_proc_tgid(tid);
	uint64_t pc;
	uint8_t orig;
	int r;

	if (pid < 0 || tp_proc_get_pc(tid, &pc))
		return -EIO;
	if (pc == at)
		return 0;
	if (tp_proc_read(pid, at, &orig, 1) != 1)
		return -EIO;
	r = tp_proc_poke_int3(pid, at, true, orig);
	if (r)
		return r;
	r = tp_proc_resume(p, tid, how->resume, 0);
	while (!r) {
		struct tp_event ev;

		r = tp_proc_wait(p, &ev);
		if (r == -EINTR && !(how->stop && *how->stop)) {
			r = 0;
			continue;
		}
		if (r)
			break;
		if (ev.kind == TP_EV_EXITED) {
			if (ev.leader && how->status)
				*how->status = ev.status;
			r = -ESRCH;
			break;
		}
		if (ev.kind == TP_EV_BREAKPOINT && ev.tid == tid && !tp_proc_get_pc(ev.tid, &pc) &&
		    pc == at + 1)
			break;
		if (how->other && (r = how->other(how->arg, &ev)) != 0) {
			r = r > 0 ? 0 : r;
			continue;
		}
		r = tp_proc_resume(p, ev.tid, how->resume,
				   ev.kind == TP_EV_SIGNAL	 ? ev.sig
				   : ev.kind == TP_EV_BREAKPOINT ? SIGTRAP
								 : 0);
	}
	if (r)
		return r;
	r = tp_proc_poke_int3(pid, at, false, orig);
	return r ? r : tp_proc_set_pc(tid, at);
}

/* dlerror()'s message, or @dflt. */
static void loader_error(struct tp_proc *p, pid_t pid, pid_t tid, const struct tp_proc_dl *dl,
			 const char *dflt, char *err, size_t errlen)
{
	const uint64_t none[6] = {0};
	uint64_t msg = 0;
	ssize_t n = 0;

	if (!errlen)
		return;
	if (dl->dlerror && !tp_proc_inject_fcall(p, pid, tid, dl->dlerror, none, true, &msg) && msg)
		n = tp_proc_read(pid, msg, err, errlen - 1);
	if (n <= 0) {
		snprintf(err, errlen, "%s", dflt);
		return;
	}
	err[n] = 0;
	err[strnlen(err, (size_t)n)] = 0;
}

int tp_proc_inject_dlopen(struct tp_proc *p, pid_t pid, pid_t tid, const struct tp_proc_dl *dl,
			  const char *path, int flags, const char *sym, uint64_t *handle,
			  uint64_t *addr, char *err, size_t errlen)
{
	const uint64_t map[6] = {
	    0, SCRATCH_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1, 0};
	size_t plen = strlen(path) + 1, slen = strlen(sym) + 1;
	uint64_t args[6] = {0}, unmap[6] = {0};
	int64_t page, ret;
	int r, r2;

	if (errlen)
		err[0] = 0;
	if (plen > SCRATCH_SYM || slen > SCRATCH_SIZE - SCRATCH_SYM)
		return -ENAMETOOLONG;
	r = tp_proc_inject_syscall(p, pid, tid, SYS_mmap, map, &page);
	if (r)
		return r;
	if (page < 0 && page > -4096)
		return (int)page;
	r = tp_proc_write(pid, (uint64_t)page, path, plen);
	if (!r)
		r = tp_proc_write(pid, (uint64_t)page + SCRATCH_SYM, sym, slen);
	if (r)
		goto out;
	args[0] = (uint64_t)page;
	args[1] = (uint64_t)flags;
	r = tp_proc_inject_fcall(p, pid, tid, dl->dlopen, args, true, handle);
	if (!r && !*handle) {
		loader_error(p, pid, tid, dl, "dlopen failed", err, errlen);
		r = -ENOENT;
	}
	if (r)
		goto out;
	args[0] = *handle;
	args[1] = (uint64_t)page + SCRATCH_SYM;
	r = tp_proc_inject_fcall(p, pid, tid, dl->dlsym, args, true, addr);
	if (!r && !*addr) {
		loader_error(p, pid, tid, dl, "dlsym failed", err, errlen);
		r = -ENOENT;
	}
out:
	unmap[0] = (uint64_t)page;
	unmap[1] = SCRATCH_SIZE;
	r2 = tp_proc_inject_syscall(p, pid, tid, SYS_munmap, unmap, &ret);
	if (r2)
		tp_warn("proc: the scratch page at 0x%llx of %d stays mapped: %s",
			(unsigned long long)page, (int)pid, strerror(-r2));
	return r ? r : r2;
}
