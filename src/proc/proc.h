/* Process control over ptrace.  This is the only module that calls ptrace() or waitpid():
 * it owns the task table, the event loop and memory/register access of traced processes. */
#ifndef TP_PROC_PROC_H
#define TP_PROC_PROC_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

/* Which events to follow (struct tp_launch.opts, tp_proc_attach()). */
#define TP_PROC_FOLLOW_THREADS 0x01 /* attach new threads (always on) */
#define TP_PROC_FOLLOW_FORK 0x02    /* attach children of fork/vfork/clone */
#define TP_PROC_TRACE_EXEC 0x04	    /* report exec events */
#define TP_PROC_TRACE_EXIT 0x08	    /* report a stop just before each task exits */

struct tp_launch {
	char *const *argv;    /* argv[0] is looked up in PATH */
	char *const *env_add; /* extra "NAME=value" entries, NULL-terminated, may be NULL */
	int cpu;	      /* pin the program to this CPU before exec, -1 for no pinning */
	const int *keep_fds;  /* fds to keep open across exec (their CLOEXEC flag is cleared) */
	int nkeep_fds;
	unsigned opts; /* TP_PROC_* */
};

enum tp_event_kind {
	TP_EV_NONE = 0,
	TP_EV_STEP,	  /* SIGTRAP from a single-step (si_code TRAP_TRACE or TRAP_BRKPT-less) */
	TP_EV_BREAKPOINT, /* SIGTRAP from int3 (si_code SI_KERNEL); pc is after the int3 */
	TP_EV_SIGNAL,	  /* any other signal-delivery stop: sig to pass on when resuming */
	TP_EV_GROUP_STOP, /* SIGSTOP/SIGTSTP/... group-stop (PTRACE_LISTEN'able) */
	TP_EV_CLONE,	  /* new thread new_tid created by tid (already in the task table) */
	TP_EV_FORK,    /* fork/vfork/non-thread clone: new_tid is the child (traced if followed) */
	TP_EV_EXEC,    /* tid completed an execve (tid is now the thread-group leader) */
	TP_EV_EXIT,    /* tid is about to exit (TP_PROC_TRACE_EXIT): memory still readable */
	TP_EV_EXITED,  /* tid is gone: status holds the wait status; removed from the table */
	TP_EV_SYSCALL, /* syscall entry or exit stop (when resumed with TP_RESUME_SYSCALL) */
};

struct tp_event {
	enum tp_event_kind kind;
	pid_t tid;	/* task that stopped */
	pid_t pid;	/* its thread group */
	int sig;	/* TP_EV_SIGNAL / GROUP_STOP: the signal; 0 otherwise */
	int status;	/* TP_EV_EXITED: wait status; TP_EV_EXIT: the exit status to come */
	pid_t new_tid;	/* TP_EV_CLONE / TP_EV_FORK */
	bool vm_shared; /* TP_EV_FORK: the child shares the parent's memory (vfork, CLONE_VM) */
	bool has_regs;	/* TP_EV_BREAKPOINT recognised by the trap filter: @regs are valid */
	siginfo_t si;	/* TP_EV_STEP / TP_EV_BREAKPOINT / TP_EV_SIGNAL */
	bool leader;	/* TP_EV_EXITED: the thread-group leader of a traced process */
	pid_t old_tid;	/* TP_EV_EXEC: the tid that called execve; when it differs from tid (a
			 * non-leader thread exec'd), that tid is gone without an exit report */
	struct user_regs_struct regs; /* when has_regs: the registers at the stop */
};

enum tp_resume {
	TP_RESUME_CONT,
	TP_RESUME_STEP,
	TP_RESUME_SYSCALL,
};

struct tp_proc; /* the set of tasks traced by one tracer */

/* Start a program stopped at the first instruction of its new image (after execve).
 * Errors: -ENOENT (no such program), -EACCES, -ENOEXEC (exec format error), other -errno.
 * The error of execve in the child is reported exactly (through a close-on-exec pipe). */
int tp_proc_launch(const struct tp_launch *l, struct tp_proc **out);
/* Note the signal state of the process as it was started (the signals ignored, the blocked
 * mask), before it installs handlers of its own: programs launched after are given it back
 * (without it: the caller's ignored signals at the launch, none blocked). */
void tp_proc_save_signals(void);
/* Attach to every thread of @pid and leave them all stopped.  Errors: -ESRCH (no such
 * process), -EPERM (ptrace refused: different user, ptrace_scope, or already traced). */
int tp_proc_attach(pid_t pid, unsigned opts, struct tp_proc **out);
/* A thread may take long to stop (a vfork parent waits for its child's exec, a task in an
 * uninterruptible sleep): when *@flag is set (by a signal handler of the caller, whose
 * signal interrupts the wait), tp_proc_attach() gives up with -EINTR, having changed
 * nothing.  NULL: wait. */
void tp_proc_set_interrupt(volatile sig_atomic_t *flag);
/* Is a stop of @tid reported and queued for tp_proc_wait()?  Such a task (a signal that came
 * as tracepad attached, say) is resumed by the handling of that event, not before: resumed
 * earlier, it would lose its signal, and the event would find it running (-EBUSY). */
bool tp_proc_queued(struct tp_proc *p, pid_t tid);
/* Take @pid, a process of one thread that the calling thread already traces (as a
 * debugger that launched it) and that is in a ptrace-stop, into a new tp_proc, with this
 * module's ptrace options set (the caller's are its own to set back).  Release with
 * tp_proc_free(): the task stays traced and stopped. */
int tp_proc_adopt(pid_t pid, unsigned opts, struct tp_proc **out);
/* Detach from every task, delivering any signal the tasks were stopped with; tasks are
 * left running.  Frees @p.  Accepts NULL. */
int tp_proc_detach(struct tp_proc *p);
/* SIGKILL every task and reap them; frees @p.  Accepts NULL. */
void tp_proc_kill(struct tp_proc *p);
/* Free after every task has exited.  Accepts NULL. */
void tp_proc_free(struct tp_proc *p);

/* The main pid (the launched or attached process). */
pid_t tp_proc_pid(const struct tp_proc *p);
/* Number of live tasks and their tids (fills up to @max, returns the total). */
int tp_proc_tasks(const struct tp_proc *p, pid_t *tids, int max);
/* Tids of the live tasks of thread group @tgid (fills up to @max, returns the total). */
int tp_proc_tasks_of(const struct tp_proc *p, pid_t tgid, pid_t *tids, int max);
/* How many tasks of thread group @tgid may still run code of their own: neither past their
 * exit stop (TP_PROC_TRACE_EXIT) nor zombies whose exit is not reported yet. */
int tp_proc_live_tasks_of(const struct tp_proc *p, pid_t tgid);
/* Detach from the tasks of thread group @tgid only, which must all be stopped (-EBUSY
 * otherwise); they run on, the other traced processes stay traced. */
int tp_proc_detach_tgid(struct tp_proc *p, pid_t tgid);
/* Wait status of the main process once it has exited (valid after its TP_EV_EXITED). */
int tp_proc_exit_status(const struct tp_proc *p);

/* Wait for the next stop of any traced task.  Bookkeeping (new threads, exec, exits) is done
 * here; the caller resumes the task.  Returns 0, -ECHILD when no task is left, -EINTR when
 * interrupted by a signal of the tracer. */
int tp_proc_wait(struct tp_proc *p, struct tp_event *ev);
/* Give back an event taken from tp_proc_wait() and not handled: returned again later. */
int tp_proc_requeue(struct tp_proc *p, const struct tp_event *ev);
/* Is the SIGTRAP stop of a task of process @pid with registers @regs at one of the
 * caller's int3s (pc - 1)?  Only a yes that cannot be wrong: an address where no thread can
 * be but after executing that int3. */
typedef bool (*tp_proc_trap_filter_fn)(void *arg, pid_t pid, const struct user_regs_struct *regs);
/* With a filter, a SIGTRAP stop after PTRACE_CONT costs one PTRACE_GETREGS, whose registers
 * come in the event (has_regs), instead of a PTRACE_GETSIGINFO when the filter says yes. */
void tp_proc_set_trap_filter(struct tp_proc *p, tp_proc_trap_filter_fn fn, void *arg);
/* When a single task runs, poll for its next stop for up to @us microseconds before
 * sleeping (0, the default: sleep at once).  For tracers whose stops come every few
 * microseconds: it saves the wake-up of a sleeping tracer, at the cost of CPU time. */
void tp_proc_set_spin(struct tp_proc *p, unsigned us);
/* Signal @sig (blocked by the caller) is unblocked only while tp_proc_wait() sleeps, so
 * that its handler interrupts a sleep (-EINTR) and nothing else: a periodic timer wakes
 * the event loop without breaking the tracer's other system calls.  0: none. */
void tp_proc_set_wait_signal(struct tp_proc *p, int sig);
/* Resume a stopped task, delivering @sig (0 for none). */
int tp_proc_resume(struct tp_proc *p, pid_t tid, enum tp_resume how, int sig);

/* The protocol.  A reported stop leaves its task stopped until the caller resumes it:
 * - TP_EV_SIGNAL: resume with ev.sig to pass the signal on unchanged (siginfo included).
 * - TP_EV_BREAKPOINT for an int3 that is not the caller's: resume with SIGTRAP.
 * - TP_EV_CLONE, TP_EV_FORK: ev.tid and, if followed, ev.new_tid are both stopped (the new
 *   task's first stop has been consumed); the caller resumes both.
 * - TP_EV_GROUP_STOP: resuming uses PTRACE_LISTEN, so the task stays stopped as its process
 *   is; after SIGCONT it goes on as it was resumed, and the SIGCONT comes as a TP_EV_SIGNAL.
 * - TP_EV_EXITED: nothing to resume.
 * After launch or attach every task is stopped: resume each, or all with
 * tp_proc_resume_all().  tp_proc_resume() returns -EBUSY for a task that is not stopped and
 * succeeds for one killed while stopped (its TP_EV_EXITED follows); tp_proc_wait() returns
 * -EDEADLK when no task is running and none has anything left to report.
 * A tp_proc is used by the thread that created it (ptrace's rule).  Other children of that
 * thread are never reaped.  A launched program gets the signal state tp_proc_save_signals()
 * noted, else the caller's ignored signals (not its blocked ones), and stays the caller's
 * child: after tp_proc_detach() the caller reaps it.
 * PTRACE_O_EXITKILL is not used: if tracepad dies, its programs are detached and run on. */

/* Stop every running task of @p except @except (PTRACE_INTERRUPT and wait); events that
 * arrive meanwhile are queued and returned by later tp_proc_wait() calls. */
int tp_proc_stop_all(struct tp_proc *p, pid_t except);
/* Resume the tasks stopped by tp_proc_stop_all(), each as it was resumed last; or all as
 * @how (a tracer that now wants their system calls, say). */
int tp_proc_resume_all(struct tp_proc *p);
int tp_proc_resume_all_as(struct tp_proc *p, enum tp_resume how);

int tp_proc_get_regs(pid_t tid, struct user_regs_struct *regs);
int tp_proc_set_regs(pid_t tid, const struct user_regs_struct *regs);
/* Code that moved while the tasks were stopped (a jump pad over the first instructions of a
 * function): a task about to run @from goes on at @to. */
struct tp_proc_move {
	uint64_t from, to;
};
/* Every task of thread group @tgid (stopped) whose next instruction is one of the @n moves'
 * @from (or whose syscall restarts there) goes on at its @to; and so does every signal
 * frame on its stack (a handler that interrupted it there: the kernel would resume the
 * frame's pc when the handler returns), found from the task's rsp up and recognised by its
 * return address, the rt_sigreturn stub.  @mv is sorted in place.  0, or -EIO. */
int tp_proc_move_tasks(struct tp_proc *p, pid_t tgid, struct tp_proc_move *mv, size_t n);
/* A hardware watchpoint on writes to the 8 aligned bytes at @addr (debug register 0): the
 * write is reported as a TP_EV_SIGNAL SIGTRAP with si_code TRAP_HWBKPT.  Cleared by
 * tp_proc_watch_clear(). */
int tp_proc_watch_write(pid_t tid, uint64_t addr);
int tp_proc_watch_clear(pid_t tid);
/* The x87/SSE registers (xmm0-15: float and double arguments and returns). */
int tp_proc_get_fpregs(pid_t tid, struct user_fpregs_struct *fp);
/* What a syscall stop (TP_EV_SYSCALL) is, from PTRACE_GET_SYSCALL_INFO: an entry (@nr,
 * @args), an exit (@ret: the value or -errno), or neither (a seccomp stop, unknown). */
struct tp_syscall_stop {
	bool entry, exit;
	int nr;
	uint64_t args[6];
	int64_t ret;
};
int tp_proc_syscall_info(pid_t tid, struct tp_syscall_stop *out);
/* Program counter only (one PTRACE_PEEKUSER). */
int tp_proc_get_pc(pid_t tid, uint64_t *pc);
/* The process of thread @tid (itself for a process), from /proc; -1 when it is gone. */
pid_t tp_proc_tgid(pid_t tid);
int tp_proc_set_pc(pid_t tid, uint64_t pc);
/* Stopped task @tid's blocked-signal mask (bit sig - 1 per signal). */
int tp_proc_get_sigmask(pid_t tid, uint64_t *mask);
int tp_proc_set_sigmask(pid_t tid, uint64_t mask);
/* The siginfo of the signal a stopped task will get when resumed with that signal. */
int tp_proc_set_siginfo(pid_t tid, const siginfo_t *si);

/* Read @len bytes at @addr; returns bytes read (may be short at an unmapped page) or -errno. */
ssize_t tp_proc_read(pid_t pid, uint64_t addr, void *buf, size_t len);
/* Write @len bytes, also into read-only text (through /proc/PID/mem); returns 0 or -errno. */
int tp_proc_write(pid_t pid, uint64_t addr, const void *buf, size_t len);
/* Plant the int3 at @addr of @pid (@on), or put back @orig, the byte it replaced: the one
 * place the tracer writes a breakpoint byte (bp's table and trampoline, count's stepping
 * breakpoints, the return address of an injected call).  0 or -errno. */
int tp_proc_poke_int3(pid_t pid, uint64_t addr, bool on, uint8_t orig);
/* Scattered transfers in one system call (process_vm_readv/writev): @n pieces, at most
 * 1024, each complete or the call fails.  Only pages the process itself may read (or
 * write).  Return 0 or -errno (-EFAULT: some piece was short). */
struct tp_proc_piece {
	uint64_t addr;
	void *buf;
	size_t len;
};
int tp_proc_read_pieces(pid_t pid, const struct tp_proc_piece *pc, unsigned n);
int tp_proc_write_pieces(pid_t pid, const struct tp_proc_piece *pc, unsigned n);

/* Why ptrace(@pid) was refused with EPERM, as one line for the user (already traced,
 * kernel.yama.ptrace_scope, other user).  Returns 0, or -ESRCH. */
int tp_proc_perm_reason(pid_t pid, char *buf, size_t len);

/* Signal masks of thread @tid from /proc/TID/status (bit sig - 1 for each signal): its own
 * pending queue, its blocked mask, and the process's ignored and caught dispositions. */
struct tp_sig_masks {
	uint64_t pending, blocked, ignored, caught;
};
int tp_proc_sig_masks(pid_t tid, struct tp_sig_masks *m);
/* Is @sig pending in thread @tid's own queue? */
bool tp_proc_sig_pending(pid_t tid, int sig);

/* Value of one auxv entry (AT_ENTRY, AT_PHDR, ...) of @pid; returns 0 or -ENOENT. */
int tp_proc_auxv(pid_t pid, unsigned long type, uint64_t *val);

#endif
