/* Backtraces of a stopped thread of a traced process for `tracepad calls --bt`, unwound by
 * libdw from CFI (.eh_frame / .debug_frame), so -O2 code without frame pointers and objects
 * without debug info unwind too.  Return addresses tracepad replaced are mapped back. */
#ifndef TP_CALLS_UNWIND_H
#define TP_CALLS_UNWIND_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

struct tp_unwinder;

/* A Dwfl over the objects mapped in process @pid (dwfl_linux_proc_report), kept across
 * backtraces.  NULL with errno set on failure. */
struct tp_unwinder *tp_unwinder_new(pid_t pid);
void tp_unwinder_free(struct tp_unwinder *u);
/* The process mapped or unmapped objects (dlopen/dlclose, exec): report them again.
 * Returns 0 or -errno. */
int tp_unwinder_refresh(struct tp_unwinder *u);
/* Changes at each report of the objects (new, refresh): what was unwound before may differ. */
unsigned tp_unwinder_gen(const struct tp_unwinder *u);

/* Called for each 8-byte stack word the unwinder reads: return true and set *val to
 * substitute (tracepad's return hook replaced the return address stored at @addr by a
 * trampoline). */
typedef bool (*tp_unwind_subst_fn)(void *arg, pid_t tid, uint64_t addr, uint64_t *val);

/* Unwind stopped thread @tid of the process from @regs: pcs[0] = regs->rip, then return
 * addresses, innermost first.  At an int3 stop, pass rip = the breakpoint's address (the
 * kernel reports it one byte further).  @subst may be NULL.  Stack memory is read once per
 * 4 KiB page and call.  Returns the count (>= 1) or -errno (-EINVAL: @max < 1). */
int tp_unwinder_backtrace(struct tp_unwinder *u, pid_t tid, const struct user_regs_struct *regs,
			  tp_unwind_subst_fn subst, void *arg, uint64_t *pcs, int max);

/* How a frame at @pc finds its caller, when the CFI libdw's walk reads there (.eh_frame
 * first, then .debug_frame; at pc - 1 for a return address, @ret) says it simply enough for
 * the agent to walk it (hooks-abi.h's CFA table): the caller's CFA is rsp or rbp plus an
 * offset, its return address at CFA - 8, rbp the same or saved at CFA plus an offset; or
 * the frame is the outermost (the return address undefined). */
struct tp_unwind_rule {
	bool end;
	bool cfa_rbp; /* the CFA is rbp + cfa_off, else rsp + cfa_off */
	bool rbp_saved;
	int64_t cfa_off, rbp_off;
};
/* 0, or -ENOENT when the CFI says something else, or nothing, there. */
int tp_unwinder_rule(struct tp_unwinder *u, uint64_t pc, bool ret, struct tp_unwind_rule *r);

/* Backtraces remembered (unwind-memo.c): libdw's walk is a function of the registers and of
 * the stack words it reads, so a walk from the same pc and stack pointer over the same words
 * gives the same frames.  Only for walks whose @word serves every read (a stack copy). */
struct tp_unwind_memo;

struct tp_unwind_memo *tp_unwind_memo_new(void);
void tp_unwind_memo_free(struct tp_unwind_memo *m);
/* As tp_unwinder_backtrace, whose result it gives, from @m when the walk was seen before. */
int tp_unwind_memo_backtrace(struct tp_unwind_memo *m, struct tp_unwinder *u, pid_t tid,
			     const struct user_regs_struct *regs, tp_unwind_subst_fn word,
			     void *arg, uint64_t *pcs, int max);

#endif
