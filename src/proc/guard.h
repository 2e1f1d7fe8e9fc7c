/* The crash guard of every ptrace command: a fault of tracepad itself (a bug, a plugin's)
 * must not leave int3s, slots' addresses or trampolines in the traced programs.  On a fatal
 * signal, on an alternate stack and with no lock taken and nothing allocated, it stops every
 * task of the tp_proc in use, lets the command put the programs back, detaches, and dies of
 * the signal. */
#ifndef TP_PROC_GUARD_H
#define TP_PROC_GUARD_H

#include "proc/proc.h"

/* The command's part, run with every task stopped: put back what it changed in the
 * programs.  It may call only async-signal-safe code: ptrace register access, tp_proc_read(),
 * tp_proc_write() (lock-free while the guard runs), no malloc, no stdio, no tp_log. */
typedef void (*tp_proc_guard_fn)(void *arg);

/* Arm the guard for the tp_proc that exists now or is created next (one at a time): on
 * SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT, "@who: crashed; restoring the programs and
 * detaching" goes to stderr, @restore(@arg) runs, every task is detached.  A second fault
 * in there finds the default action.  For tests, TRACEPAD_TEST_CRASH=N makes tracepad
 * fault at its Nth event.  Returns 0 or -errno. */
int tp_proc_guard_set(const char *who, tp_proc_guard_fn restore, void *arg);
/* For the restore: is stopped task @tid at a SIGTRAP stop (an int3's, or a step's) that
 * the command has not handled?  Its pc may then be just past one of its int3s. */
bool tp_proc_guard_trapped(pid_t tid);
/* An event of the command's own, outside tp_proc_wait() (the agent engine's records drained):
 * TRACEPAD_TEST_CRASH counts it as one. */
void tp_proc_guard_event(void);
/* Process @pid (0: none) was let go with what the command changed still in it (the agent
 * engine's hooks): a crash with no tp_proc in use seizes its threads again for the restore,
 * then detaches from them. */
void tp_proc_guard_detached(pid_t pid);
/* Disarm it and give the signals their default action back. */
void tp_proc_guard_clear(void);

#endif
