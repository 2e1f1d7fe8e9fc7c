/* What the interposer's engine files share (engine.c: stops, registers, ptrace; text.c:
 * the program's memory; ctl.c: the count's control block). */
#ifndef TP_DEBUG_ENGINE_PRIV_H
#define TP_DEBUG_ENGINE_PRIV_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/user.h>

#define TP_DEBUG_MAX_HW 16

struct dproc {
	pid_t pid; /* 0: free */
	struct tp_dbt_map *map;
	bool own; /* gdb launched it and the interposer took it over (else: attached) */
	/* the repository's breakpoints that are gdb's: the int3s it wrote (text.c), the
	 * execute breakpoints of its debug registers (dregs.c); either keeps it */
	uint64_t *sw;
	size_t nsw, capsw;
	uint64_t hw[TP_DEBUG_MAX_HW];
	unsigned nhw;
};

/* The process (in the code cache) of @pid, a process or one of its threads; NULL. */
struct dproc *tp_debug_proc_of(pid_t pid);

/* dregs.c: the debug registers of @tid (a thread of @pr) as gdb reads and writes them
 * (PTRACE_PEEKUSER/POKEUSER at @off of struct user): true when done (the result in *@ret,
 * errno set), false when the real call is to be made. */
bool tp_debug_dr_peek(struct dproc *pr, pid_t tid, unsigned long off, long *ret);
bool tp_debug_dr_poke(struct dproc *pr, pid_t tid, unsigned long off, unsigned long v, long *ret);
/* DR6's bits of the execute breakpoints of @tid's registers at program address @pc; 0. */
unsigned tp_debug_dr_hit(pid_t tid, uint64_t pc);
/* @tid is shown stopped by those (DR6 reads them until gdb writes DR6). */
void tp_debug_dr_shown(pid_t tid, unsigned bits);
void tp_debug_dr_thread_gone(pid_t tid);
/* @pr is forgotten (gone, or detached: then its execute breakpoints are removed). */
void tp_debug_dr_forget(struct dproc *pr, bool remove);
/* Is the repository's breakpoint at @pc an execute breakpoint of gdb's registers, an int3
 * gdb wrote?  (text.c notes the latter.) */
bool tp_debug_hw_bp_at(const struct dproc *pr, uint64_t pc);
bool tp_debug_sw_bp_at(const struct dproc *pr, uint64_t pc);
int tp_debug_sw_note(struct dproc *pr, uint64_t pc, bool set);

/* ctl.c: one control block for the session, its memfd inherited by the programs gdb
 * forks; made empty at each takeover, its count reported at the program's exit. */
void tp_debug_ctl_init(void);
int tp_debug_ctl_fd(size_t *size);
void tp_debug_ctl_reset(void);
void tp_debug_ctl_report(int status);
/* The program @pid that gdb launched is detached (it runs on): its block is set aside and
 * reported at its end, the session's next program gets a new one. */
void tp_debug_ctl_detached(pid_t pid);
/* A wait of gdb's reaped @pid, perhaps a detached program. */
void tp_debug_ctl_reaped(pid_t pid, int status);
/* At gdb's exit: the detached programs' counts, now or at their end. */
void tp_debug_ctl_fini(void);

#endif
