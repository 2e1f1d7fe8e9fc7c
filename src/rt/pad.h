/* Jump pads: a callback run in-process at any instruction of the program, by a 5-byte jmp to
 * a pad where 5 bytes can be taken safely, else by an int3 that rt's SIGTRAP dispatcher turns
 * into the same call with the same register record.  The engine of fast tracepoints and of
 * the in-process call hooks; it collects nothing itself.  Layout and rules: docs/INTERNALS.md
 * ("Jump pads"). */
#ifndef TP_RT_PAD_H
#define TP_RT_PAD_H

#include <stddef.h>
#include <stdint.h>

#include "rt/rt.h"

/* What the callback sees, the same for both paths: the program's registers as they were
 * before the instruction at @rip ran; @rsp is the program's own stack pointer. */
struct tp_rt_regs {
	uint64_t rax, rbx, rcx, rdx, rsi, rdi, rbp, rsp;
	uint64_t r8, r9, r10, r11, r12, r13, r14, r15;
	uint64_t rip, rflags;
};

/* Runs in whichever thread hit the tracepoint, possibly inside a signal handler of the
 * program and reentrantly (a signal handler hitting the same tracepoint): it must be
 * async-signal-safe and reentrant, and must not reach a pad or int3 of its own (no
 * recursion guard is kept: pads use no thread-local state).  Unless the pad was installed
 * with TP_RT_PAD_FPU, it must not touch x87/SSE/AVX registers: compile it (and all it calls)
 * with __attribute__((target("general-regs-only"))) or -mgeneral-regs-only. */
typedef void (*tp_rt_pad_fn)(const struct tp_rt_regs *regs, void *ctx);

/* Flags of tp_rt_pad_install. */
#define TP_RT_PAD_TRAP 0x1 /* always the int3 path */
#define TP_RT_PAD_FPU 0x2  /* xsave/xrstor around the callback: it may be any C */
/* No other thread runs the code at @addr during the install (the caller stopped them and
 * moved any whose pc was inside the displaced bytes, or there is no other thread): then a
 * jmp may displace several instructions.  Without it only an instruction of 5 bytes or
 * more gets a jmp; shorter ones take the int3 path. */
#define TP_RT_PAD_STOPPED 0x4
/* The callback keeps its own count of the threads inside it (two locked adds a hit less,
 * and no cache line shared by the threads): tp_rt_pad_busy and tp_rt_pad_hits say 0 and
 * tp_rt_pad_remove does not wait.  A thread that loaded the callback before the unlink may still
 * call it after. */
#define TP_RT_PAD_UNCOUNTED 0x8

/* What the caller knows of the code around @addr; every field may be 0.  Without function
 * bounds, the symbol around @addr (dladdr1) gives them; without either, only branches within
 * the 5 bytes themselves are seen. */
struct tp_rt_pad_where {
	uint64_t fn_lo, fn_hi; /* the function holding @addr: scanned for branches into it */
	/* [fn_hi, pad_hi): alignment padding after the function, which nothing reaches (0: none
	 * known).  A function that ends in a ret or jmp before 5 bytes may then still get a jmp,
	 * its last instruction copied to the pad and the padding covered. */
	uint64_t pad_hi;
	const uint64_t *targets; /* known branch targets (from DWARF, a jump table...) */
	size_t ntargets;
};

/* How a pad ended up being reached. */
enum tp_rt_pad_kind {
	TP_RT_PAD_KIND_JMP = 1, /* jmp rel32 to the pad */
	TP_RT_PAD_KIND_INT3,	/* int3 and the dispatcher: ~ a signal's cost a hit */
};
/* Why the int3 path was taken. */
enum tp_rt_pad_why {
	TP_RT_PAD_WHY_NONE = 0,
	TP_RT_PAD_WHY_ASKED,	 /* TP_RT_PAD_TRAP */
	TP_RT_PAD_WHY_TARGET,	 /* a branch target inside the bytes the jmp would take */
	TP_RT_PAD_WHY_CALL,	 /* a call or syscall before the last displaced instruction */
	TP_RT_PAD_WHY_UNMOVABLE, /* an instruction that cannot run elsewhere, or past the end */
	TP_RT_PAD_WHY_REACH,	 /* no pad within rel32 reach */
	TP_RT_PAD_WHY_RUNNING,	 /* several instructions displaced, no TP_RT_PAD_STOPPED */
};

struct tp_rt_pad;

/* Install a pad at instruction @addr calling @fn(regs, @ctx) before the instruction runs.
 * Returns 0 and *@out, or -EEXIST (a pad at or overlapping @addr), -EILSEQ (the bytes
 * changed under us), -ENOSPC (site table full), -ENOMEM (no executable memory), -errno.
 * Not async-signal-safe; installs and removals are serialised. */
int tp_rt_pad_install(uint64_t addr, tp_rt_pad_fn fn, void *ctx, unsigned flags,
		      const struct tp_rt_pad_where *where, struct tp_rt_pad **out) TP_RT_HIDDEN;

/* tp_rt_pad_install with the jmp path's pad calling @entry instead of rt's common body, for a
 * caller whose common case is cheaper than a full register record (call hooks).  The pad calls
 * @entry as it calls the common body: the stack holds the pad's return address, the program's
 * rax, the site (its first fields are struct tp_rt_pad_head), the program's red zone and the
 * program's stack; rax is clobbered, every other register and the flags are the program's.
 * @entry either returns to the pad with every register and flag as the program had them
 * (rax from its slot) and the stack as it found it, or jumps to tp_rt_pad_entry with the
 * stack, the registers but rax and the flags as it found them, which runs @fn as usual.  A
 * site keeps the entry it was built with; another one builds it anew.  The int3 path always
 * runs @fn. */
int tp_rt_pad_install_entry(uint64_t addr, tp_rt_pad_fn fn, void *ctx, unsigned flags,
			    const struct tp_rt_pad_where *where, void (*entry)(void),
			    struct tp_rt_pad **out) TP_RT_HIDDEN;
/* rt's common body, where an entry of tp_rt_pad_install_entry hands over. */
void tp_rt_pad_entry(void) TP_RT_HIDDEN;
/* What an entry body may read of the site the pad pushed: @fn is NULL once the site is
 * unlinked (the callback must not run then), @ctx the installer's. */
struct tp_rt_pad_head {
	uint64_t addr;
	uint32_t flags;
	int32_t state;
	tp_rt_pad_fn fn;
	void *ctx;
};
/* Put the original bytes back and wait until no thread is inside the callback (up to 2 s:
 * -EBUSY then, the pad is unlinked all the same and @p stays valid to call again).  A pad's
 * code is never freed: a thread still on its way through it finishes normally. */
int tp_rt_pad_remove(struct tp_rt_pad *p) TP_RT_HIDDEN;

/* tp_rt_pad_remove in two halves, for a caller that stopped the other threads (it cannot
 * wait for them in-process): the bytes back and the callback cleared; then the number of
 * threads inside the callback path (let them run until it is 0 before unmapping what the
 * callback uses). */
int tp_rt_pad_unlink(struct tp_rt_pad *p) TP_RT_HIDDEN;
uint64_t tp_rt_pad_busy(const struct tp_rt_pad *p) TP_RT_HIDDEN;
/* The code under pad @p was unmapped (dlclose): the site is dropped without a write, so
 * that whatever is mapped there later is the program's alone.  The pad's code stays. */
void tp_rt_pad_forget(struct tp_rt_pad *p) TP_RT_HIDDEN;
/* Where the displaced instructions of a jmp site went: offsets in the program and addresses
 * of their copies in the pad (at most @max; 0 for the int3 path), for a TP_RT_PAD_STOPPED
 * caller that must move a thread stopped on an inner boundary into the copy.  And the bytes
 * the site covers (the jmp's instructions, 1 for int3). */
size_t tp_rt_pad_layout(const struct tp_rt_pad *p, uint8_t *ioff, uint64_t *icopy,
			size_t max) TP_RT_HIDDEN;
size_t tp_rt_pad_covered(const struct tp_rt_pad *p) TP_RT_HIDDEN;

enum tp_rt_pad_kind tp_rt_pad_kind(const struct tp_rt_pad *p) TP_RT_HIDDEN;
enum tp_rt_pad_why tp_rt_pad_why(const struct tp_rt_pad *p) TP_RT_HIDDEN;
/* Bytes of program code the pad displaced (1 for int3). */
size_t tp_rt_pad_len(const struct tp_rt_pad *p) TP_RT_HIDDEN;
/* Entries into the callback path since the first install at this address. */
uint64_t tp_rt_pad_hits(const struct tp_rt_pad *p) TP_RT_HIDDEN;

/* Read @len bytes at @addr for a callback: a plain copy when they lie on the pad's own stack
 * pages (from @regs up to the end of the page under the program's red zone, which the pad
 * just wrote), else tp_rt_mem_read_fast (a guarded copy once rt's fault guard is installed,
 * else a system call).  0 or -EFAULT.  General-regs-only. */
int tp_rt_pad_read(const struct tp_rt_regs *regs, uint64_t addr, void *buf,
		   size_t len) TP_RT_HIDDEN;

#endif
