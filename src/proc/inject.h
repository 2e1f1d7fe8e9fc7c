/* Running code inside a stopped tracee: one syscall, one function call, one single-step,
 * each waiting for that one task while the other tasks' events are held back and handed
 * to tp_proc_wait() again afterwards, in order. */
#ifndef TP_PROC_INJECT_H
#define TP_PROC_INJECT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "proc/proc.h"

/* Hold event @ev of another task until tp_proc_inject_flush().  Returns 0 or -ENOMEM. */
int tp_proc_inject_defer(struct tp_proc *p, const struct tp_event *ev);
/* The first event queued for stopped task @tid that @match accepts, dropped (the task is in
 * that stop now, and held as after tp_proc_stop_all()); whether there was one. */
bool tp_proc_inject_drop(struct tp_proc *p, pid_t tid, bool (*match)(const struct tp_event *ev));
/* Hand the held events back to the event loop (tp_proc_requeue()), in order. */
void tp_proc_inject_flush(struct tp_proc *p);
/* tp_proc_wait() that finishes before the tracer's own signals are looked at (-EINTR). */
int tp_proc_inject_wait(struct tp_proc *p, struct tp_event *ev);
/* The next event of task @tid, the other tasks' held: 0, or -ESRCH once @tid exits (that
 * event held too, for the event loop), or -errno. */
int tp_proc_inject_wait_task(struct tp_proc *p, pid_t tid, struct tp_event *ev);

/* Single-step @tid once and wait for its stop; other tasks' events are held.  A signal for
 * @tid that comes first is held back into the set *@held (bit sig - 1: re-send them with
 * tp_proc_held_resend once done) and the step retried; signals a step can raise itself
 * stay unblocked.  A breakpoint reached by the step counts as done.  Returns 0, -ESRCH
 * (@tid died), -EIO or -errno. */
int tp_proc_inject_step(struct tp_proc *p, pid_t tid, uint64_t *held);

/* Send task @tid of process @pid each signal of the set @held (tgkill: their siginfo is
 * SI_TKILL's now), and empty it. */
void tp_proc_held_resend(pid_t pid, pid_t tid, uint64_t *held);

/* Run syscall @nr with @args inside stopped task @tid of process @pid and return its raw
 * result (-errno on failure of the syscall) in *@ret.  The "syscall" instruction is written
 * over the program's entry point (AT_ENTRY, never run again once the program started) and
 * reached through syscall stops; bytes and registers are restored, including a pending
 * syscall restart.  A signal arriving meanwhile is re-sent to @tid afterwards (its siginfo
 * is lost).  @tid stays stopped, as after a reported stop.  Returns 0 or -errno (-ESRCH:
 * @tid died). */
int tp_proc_inject_syscall(struct tp_proc *p, pid_t pid, pid_t tid, long nr, const uint64_t args[6],
			   int64_t *ret);

/* A breakpoint stop at @pc (after the int3) met by an injected call: 0 with *@to, the pc to
 * resume at, or -errno to give up. */
typedef int (*tp_proc_inject_trap_fn)(void *arg, pid_t tid, uint64_t pc, uint64_t *to);

/* Call function @fn(@args) in stopped task @tid of process @pid and return its rax in
 * *@ret: the task runs alone on its own stack below the red zone, returning to @ret_to,
 * which must hold an int3; registers are restored.  Other int3 stops go to @on_trap (may be
 * NULL: -EIO).  A fault of the function gives -EFAULT.  Returns 0, -ESRCH or -errno. */
int tp_proc_inject_call(struct tp_proc *p, pid_t pid, pid_t tid, uint64_t fn,
			const uint64_t args[6], uint64_t ret_to, tp_proc_inject_trap_fn on_trap,
			void *arg, uint64_t *ret);

/* Call @fn(@args) in stopped task @tid of process @pid, returning to an int3 written over
 * the entry point for the time of the call (tp_proc_inject_call()).  With @others_run, the
 * process's other stopped tasks run meanwhile, so that a lock one of them holds (the
 * loader's, malloc's) is let go, and are stopped again after; their events are queued. */
int tp_proc_inject_fcall(struct tp_proc *p, pid_t pid, pid_t tid, uint64_t fn,
			 const uint64_t args[6], bool others_run, uint64_t *ret);
/* Call @fn() (an agent's detach: it answers how many threads are still inside its code, 0
 * once it is off) in stopped task @tid until it answers 0 or less, at most @rounds times,
 * the tasks stop_all() stopped let run 1 ms between two calls.  @between, when not NULL,
 * runs before and after each such run, every task stopped (to drain the rings a thread may
 * wait on, to clear flags anew); an error of it ends the loop.  Returns 0 with the last
 * answer in *@busy (still above 0: the rounds ran out), or -errno. */
int tp_proc_inject_until_out(struct tp_proc *p, pid_t pid, pid_t tid, uint64_t fn, int rounds,
			     int (*between)(void *), void *arg, uint64_t *busy);

/* How tp_proc_run_to() runs a task: resumed as @resume; *@stop set (by a signal handler
 * of the caller) ends the run with -EINTR; @other, when not NULL, is shown every other
 * event first and answers 1 when it took it (and resumed its task), 0 to let it pass (a
 * signal delivered, a breakpoint not at @at raised again), or -errno to stop; the main
 * process's wait status in *@status (when not NULL) when it ends. */
struct tp_proc_run_to {
	enum tp_resume resume;
	volatile sig_atomic_t *stop;
	int (*other)(void *arg, const struct tp_event *ev);
	void *arg;
	int *status;
};
/* Run stopped task @tid to @at, through an int3 planted there for the time of the run and
 * taken out again: the task is left stopped at @at.  0, -ESRCH when its process ended
 * first, -EINTR, or -errno. */
int tp_proc_run_to(struct tp_proc *p, pid_t tid, uint64_t at, const struct tp_proc_run_to *how);

/* The process's own loader entry points (libc's dlopen, dlsym, dlerror). */
struct tp_proc_dl {
	uint64_t dlopen, dlsym, dlerror;
};

/* Load @path into process @pid with its dlopen(@path, @flags), from stopped task @tid, and
 * find @sym in it (dlsym): the handle in *@handle, the address in *@addr.  The strings go
 * on a page mapped for the time of the calls.  Returns 0 or -errno; -ENOENT with the
 * loader's message in @err (@errlen bytes) when dlopen or dlsym fails. */
int tp_proc_inject_dlopen(struct tp_proc *p, pid_t pid, pid_t tid, const struct tp_proc_dl *dl,
			  const char *path, int flags, const char *sym, uint64_t *handle,
			  uint64_t *addr, char *err, size_t errlen);

/* The task of stopped process @pid to run the loader in: one blocked in a system call other
 * than futex (it holds no lock of the program's in all likelihood), the leader first, else
 * the leader (else the first task).  A task stopped inside the loader or malloc would make
 * an injected dlopen wait for itself; and the leader allocates from the main arena, where
 * another thread's first allocation may make glibc map an arena for it. */
pid_t tp_proc_loader_task(struct tp_proc *p, pid_t pid);

/* libtracepad-agent.so attached to a running process (tp_proc_load_agent()). */
struct tp_proc_agent {
	/* in */
	const char *agent;	    /* the agent's path as configured (NULL: not found) */
	const char *entry;	    /* its attach entry: int entry(pid_t tracer, int fd) */
	int fd;			    /* tracepad's fd of the shared block handed to the entry */
	const volatile char *error; /* the block's error text, written by the agent on refusal */
	size_t error_len;	    /* its size */
	/* out */
	char path[PATH_MAX]; /* the agent's real path, as the process's maps show it */
	pid_t tid;	     /* the task the loader and the entry ran in */
};

/* Load @a's agent into stopped process @pid with its own dlopen (@dl; RTLD_NODELETE: it
 * stays loaded, inert, after the session) from tp_proc_loader_task()'s task, and call its
 * entry(getpid(), fd) there, the other tasks running meanwhile (stopped again after).
 * Returns 0, -ENOENT (no agent file), -ESRCH (the task died) or -EIO, with the reason in
 * @why (@whylen bytes) for the user. */
int tp_proc_load_agent(struct tp_proc *p, pid_t pid, const struct tp_proc_dl *dl,
		       struct tp_proc_agent *a, char *why, size_t whylen);

/* Whether @pc lies in an executable mapping of file @path (the agent's real path) in process
 * @pid, so that an address the agent wrote may be called; @pc 0: any mapping of @path. */
bool tp_proc_agent_mapped(pid_t pid, const char *path, uint64_t pc);
/* The agent's executable mapping in @pid (@path as it maps it): 0, or -ENOENT. */
int tp_proc_agent_text(pid_t pid, const char *path, uint64_t *start, uint64_t *end);

#endif
