/* Software breakpoints for the ptrace engine: int3 at the breakpoint, the displaced
 * instruction relocated into an SSOL ("single-step out of line") slot of an area mmap'd in
 * the tracee, so a hit costs one ptrace stop and breakpoints never leave the text while
 * threads run.  The areas are mapped by syscall injection (proc/inject.h). */
#ifndef TP_BP_BP_H
#define TP_BP_BP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include "proc/proc.h"

/* The breakpoints of one traced process (thread group) of a struct tp_proc. */
struct tp_bps;

struct tp_bps *tp_bps_new(struct tp_proc *p, pid_t pid);
/* Frees the bookkeeping only; call tp_bp_remove_all() first to take the int3s out. */
void tp_bps_free(struct tp_bps *bps);

/* Wait for the next event: events of other tasks that arrived while this module waited for
 * one task (injection, stepping) first, then tp_proc_wait().  Use it instead of
 * tp_proc_wait() while breakpoints are in use. */
int tp_bp_wait(struct tp_bps *bps, struct tp_event *ev);

/* Run syscall @nr with @args inside stopped task @tid and return its raw result (-errno on
 * failure of the syscall) in *@ret.  The "syscall" instruction is written over the
 * program's entry point (AT_ENTRY, never run again once the program started) and
 * single-stepped; bytes and registers are restored, including a pending syscall restart.
 * A signal arriving meanwhile is re-sent to @tid afterwards (its siginfo is lost).
 * @tid stays stopped, but as after a reported stop (tp_proc_resume_all() no longer counts it
 * as held): resume it with tp_proc_resume().  Returns 0 or -errno (-ESRCH: @tid died). */
int tp_bp_inject_syscall(struct tp_bps *bps, pid_t tid, long nr, const uint64_t args[6],
			 int64_t *ret);

/* Flags of tp_bp_insert(). */
#define TP_BP_RETURN 0x01 /* @addr is a function entry: also stop when the call returns */
/* With TP_BP_RETURN: the function reads its return address (glibc's dlsym and dlopen choose
 * the caller's object by it), so the return address is left in place and the return caught
 * by a breakpoint at the return site, planted at the entry.  Also set by tp_bp_insert() for
 * a function whose first instructions read their return slot (tp_arch_reads_return_slot). */
#define TP_BP_RETURN_SITE 0x02

/* Plant an int3 at @addr, the first byte of an instruction.  Maps an SSOL area within
 * +-2 GiB of @addr if none is there yet (by injection into stopped task @tid).  Other
 * threads may run.  With TP_BP_RETURN, each hit replaces the return address at [rsp] with a
 * shared return trampoline (an int3 in the SSOL area) and keeps the real one on the
 * thread's shadow stack; the trampoline's stop restores pc to it.  Returns 0, -EEXIST,
 * -ENOTSUP (an instruction tp_arch_relocate() refuses: syscall, int3, ...; none is
 * emulated and there is no stop-the-world stepping fallback yet), -ENOMEM (no free space
 * near @addr), -EINVAL (not an instruction), or -errno.
 * Return hooking shows the trampoline as the return address to stack walkers: a C++
 * exception unwinding through a hooked frame would not find its caller. */
int tp_bp_insert(struct tp_bps *bps, pid_t tid, uint64_t addr, unsigned flags);

enum tp_bp_stop_kind {
	TP_BP_STOP_ENTRY = 1, /* the int3 at a breakpoint */
	TP_BP_STOP_RETURN,    /* a TP_BP_RETURN function returned through the trampoline */
	TP_BP_STOP_SITE,      /* a return site (TP_BP_RETURN_SITE) passed with no return due */
};

struct tp_bp_stop {
	enum tp_bp_stop_kind kind;
	uint64_t func;	   /* the breakpoint (the function's entry) */
	uint64_t sp;	   /* the stack pointer at the entry (the return address's slot) */
	uint64_t ret_addr; /* RETURN: where the call returns to */
	uint64_t rax, rdx; /* RETURN: the return value */
	unsigned depth;	   /* hooked calls of the thread in flight (ENTRY: this one included) */
	/* ENTRY of a TP_BP_RETURN function whose return will not be reported: a return site
	 * could not take a breakpoint, or a hooked function tail-called it (the caller's
	 * return is caught at the site then).  Not counted in depth. */
	bool no_return;
	/* RETURN without a stop (tp_bps_set_async()): what its stub saw as it returned. */
	bool async;
	bool err_valid;	    /* tp_bps_set_errno() was known at the entry */
	int32_t err;	    /* errno */
	uint64_t xmm0, tsc; /* the float return; the time stamp counter (rdtsc) */
	uint64_t entry_tsc; /* the counter as the call began (its entry stub's), or 0 */
};

/* Flags of tp_bp_hit(). */
#define TP_BP_HIT_STAY 0x01  /* leave the task stopped: the caller resumes it */
#define TP_BP_HIT_ASYNC 0x02 /* the call may return without a stop (tp_bps_set_async()) */

/* After a TP_EV_BREAKPOINT of @tid (pc = addr + 1; @regs may be NULL to read them here):
 * when the int3 is ours, describe it in *@out (may be NULL), move pc to its slot (or to the
 * real return address), resume the task (unless TP_BP_HIT_STAY) and return 1; 0 when it is
 * not ours (pass SIGTRAP on); -errno on failure (-ENOENT: a return with no shadow frame,
 * task left stopped).  Shadow frames of calls unwound without returning (longjmp) are
 * dropped when a later entry or return of the thread finds a stack pointer above them.
 * At a return site (TP_BP_RETURN_SITE), a call of the thread returning there is a RETURN
 * (not async), anything else passing by a SITE stop. */
int tp_bp_hit(struct tp_bps *bps, pid_t tid, const struct user_regs_struct *regs, unsigned flags,
	      struct tp_bp_stop *out);
/* Returns without a stop.  Once set, an entry hit with TP_BP_HIT_ASYNC replaces the return
 * address with the address of a return stub of its own (one of 4096 in an area mapped at
 * the first such hit) instead of the trampoline: the stub records the return value, errno
 * and the TSC, and returns to the real address, with no stop.  The module learns of the
 * return at the thread's next stop here (or tp_bp_reap()) and reports it to @fn, with
 * TP_BP_STOP_RETURN and async set, innermost call first, before whatever that stop is.
 * With no stub free, or no area for them, the call returns through the trampoline. */
typedef void (*tp_bp_return_fn)(void *arg, pid_t tid, const struct tp_bp_stop *st);
void tp_bps_set_async(struct tp_bps *bps, tp_bp_return_fn fn, void *arg);
/* errno's offset from the thread pointer (fs_base), for the stubs to read it. */
void tp_bps_set_errno(struct tp_bps *bps, int64_t tpoff);
/* At a signal-delivery stop of @tid (signal @si): a task inside an SSOL slot is stepped
 * out of it first, so that no handler's frame holds a slot's address (the slots go away at
 * detach); its siginfo is set back for the delivery.  Resume it with the signal as usual.
 * Returns 1 when it was moved, 0 when it was not in a slot, 2 when it is at the trampoline
 * (the caller takes the return first, as at its int3 stop), -errno. */
int tp_bp_signal_stop(struct tp_bps *bps, pid_t tid, const siginfo_t *si);
/* After a SIGSEGV stop of @tid: 1 when it was the rdtsc of a return stub in a program that
 * forbids rdtsc (PR_SET_TSC), which was then done for it (resume without the signal); 0
 * when the fault is not ours; -errno. */
int tp_bp_stub_fault(struct tp_bps *bps, pid_t tid);
/* Report the calls of @tid that have returned through their stubs so far, from its
 * innermost call outwards up to the first still in flight.  @running: @tid may be running
 * (it may be inside a stub).  @sp: 0, or the stack pointer of stopped @tid, when frames
 * below it that did not return are dropped as unwound (tp_bp_depth() tells how many are
 * left). */
int tp_bp_reap(struct tp_bps *bps, pid_t tid, bool running, uint64_t sp);

/* Call function @fn(@args) in stopped task @tid and return its rax in *@ret: the task runs
 * alone on its own stack below the red zone, returning to the trampoline; registers are
 * restored.  Breakpoints it meets run their slots without hooks.  For pure functions such
 * as IFUNC resolvers.  Returns 0, -ENOENT (no trampoline yet), -ESRCH or -errno. */
int tp_bp_call(struct tp_bps *bps, pid_t tid, uint64_t fn, const uint64_t args[6], uint64_t *ret);
/* Hooked calls of @tid in flight. */
unsigned tp_bp_depth(struct tp_bps *bps, pid_t tid);
/* Is a thread at @pc certainly just past one of our int3s (the trampoline, or a breakpoint
 * over an instruction longer than one byte, whose addr + 1 nothing else reaches)? */
bool tp_bp_owns_trap(struct tp_bps *bps, uint64_t pc);
/* The return trampoline's address (0 before the first TP_BP_RETURN breakpoint). */
uint64_t tp_bp_trampoline(const struct tp_bps *bps);
/* The real return address of @tid's hooked call whose return address slot is @slot. */
bool tp_bp_real_return(struct tp_bps *bps, pid_t tid, uint64_t slot, uint64_t *ret);

/* An unwinder is about to walk @tid's stack (a C++ exception is thrown, a backtrace is
 * taken): put the real return addresses back for it to find. */
int tp_bp_unhook_thread(struct tp_bps *bps, pid_t tid);
/* The unwinder is done and @tid runs at stack pointer @sp: frames at or below it are gone,
 * the others get the trampoline again. */
int tp_bp_rehook_thread(struct tp_bps *bps, pid_t tid, uint64_t sp);
/* Forget thread @tid's shadow stack (it exited or exec'd). */
void tp_bp_drop_thread(struct tp_bps *bps, pid_t tid);
/* Give thread @tid of @to a copy of the shadow stack of @from (a fork or vfork child runs on
 * a copy of, or on, its parent's stack).  @to may be @bps. */
int tp_bp_copy_shadow(struct tp_bps *bps, pid_t from, struct tp_bps *to, pid_t tid);
/* The breakpoints of fork child @pid: same addresses, slots and areas as @parent's (the
 * child has a copy of its memory); no shadow stacks (tp_bp_copy_shadow()). */
struct tp_bps *tp_bps_clone(const struct tp_bps *parent, pid_t pid);
/* Forget the breakpoints in [@lo, @hi) without touching memory: the object there was
 * unmapped.  Returns how many. */
int tp_bp_forget(struct tp_bps *bps, uint64_t lo, uint64_t hi);

/* Is there a breakpoint at @addr: 1 with its hit count and slot address (either may be
 * NULL), 0 when none. */
int tp_bp_lookup(struct tp_bps *bps, uint64_t addr, uint64_t *hits, uint64_t *slot);

/* Take every breakpoint out, for detaching.  Stops every task and consumes what they have
 * left to report: an int3 hit not yet seen is rewound to its address, a trampoline hit is
 * completed (pc to the real return), other events are kept for tp_bp_wait().  A task in a
 * slot is moved back to the breakpoint address (slot start) or single-stepped out of it.
 * A reported int3 stop that was not given to tp_bp_hit() is rewound too, except at a 1-byte
 * instruction (push %rbp), where pc = addr + 1 is also where the slot returns: pass every
 * reported hit to tp_bp_hit() first.  Then restores and reads back every original byte,
 * writes back every return address the trampoline holds, and unmaps the areas (the return
 * stubs' when none can run any more; areas left mapped are reused by a later attach).  Leaves
 * every task stopped: tp_proc_detach() next.  Returns 0, -EIO when a byte did not read back
 * as the original, or -errno. */
int tp_bp_remove_all(struct tp_bps *bps);

/* tp_bp_remove_all() for src/proc's crash guard (proc/guard.h), with every task stopped and
 * nothing allocated nor locked: tasks are moved out of int3 stops, the trampoline and the
 * slots, original bytes and return addresses are written back.  The areas stay mapped (no
 * injection), as do the stubs'.  @bps may be NULL. */
void tp_bp_crash_restore(struct tp_bps *bps);

#endif
