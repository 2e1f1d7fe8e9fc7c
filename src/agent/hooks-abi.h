/* The shared memory of call hooks between `tracepad calls --engine agent` and the agent: the
 * functions to hook (addresses, bounds, what to do at each), what the agent answers, and one
 * ring of call events per thread that tracepad drains (the rings of fast tracepoints,
 * tracept-abi.h).  An anonymous memfd named "tracepad-hooks"; the agent checks every offset
 * and count against its size. */
#ifndef TP_AGENT_HOOKS_ABI_H
#define TP_AGENT_HOOKS_ABI_H

#include <stdint.h>

#include "agent/tracept-abi.h"

#define TP_HK_MAGIC 0x4b4f4f48444152ull /* "RADHOOK" */
#define TP_HK_ABI 4
/* rt's pads: 4096 addresses a process (python3's default selection is ~2000 functions) */
#define TP_HK_MAX_FUNCS 4096

/* What a function's pad does (flags of struct tp_hk_func). */
#define TP_HK_F_SHOWN 0x1 /* its calls are events */
#define TP_HK_F_RET 0x2	  /* its return goes through the return trampoline */
/* an unwinder that walks the stack from here (_Unwind_RaiseException, _Unwind_Resume,
 * _Unwind_Backtrace...): every return address of the thread is put back first */
#define TP_HK_F_WALK 0x4
/* with TP_HK_F_WALK: the walk returns to the caller (backtrace): frames may return unseen
 * until the next hook above it (TP_HK_RESTORED events) */
#define TP_HK_F_RETURNS 0x10
/* the unwinder is done (__cxa_begin_catch): the frames still live are hooked again */
#define TP_HK_F_CATCH 0x8
/* the loader's r_brk (_dl_debug_state): at RT_CONSISTENT the agent asks tracepad for the
 * functions of objects loaded since (dl_seq/dl_done) and hooks them */
#define TP_HK_F_RBRK 0x20
/* set by tracepad at such a request: the function's object is gone (dlclose), its pad is
 * dropped without a write */
#define TP_HK_F_GONE 0x40

/* ---- a record's payload: what tracepad's formatting needs beyond the integer registers ----
 * Decided per function at attach from its prototype (tracepad's plan): the strings and buffers
 * its arguments point to, its stack-passed arguments, its float arguments, and its return
 * value's string, xmm0 or st0.  The agent copies the memory with rt's guarded reads (never a
 * fault of the program) into pieces after the record. */
#define TP_HK_PLAN_ARGS 8
#define TP_HK_OP_STR 1	  /* the string at the value: up to max bytes, its NUL included */
#define TP_HK_OP_BUF 2	  /* max bytes at the value, no more than argument len_src's value */
#define TP_HK_SRC_STACK 6 /* src >= this: the stack slot (src - 6) above the return address */
struct tp_hk_arg {
	uint8_t op, src, len_src, pad;
	uint32_t max;
};
#define TP_HK_RET_XMM0 1 /* float, double */
#define TP_HK_RET_ST0 2	 /* long double */
#define TP_HK_RET_STR 3	 /* char *: the string at rax, up to ret_max bytes */
struct tp_hk_plan {
	uint8_t nargs; /* of arg[] */
	uint8_t nxmm;  /* xmm0.. at the entry (float arguments) */
	uint8_t ret;   /* TP_HK_RET_* */
	/* 1: at the return, the 8 bytes the first argument points to (an out-parameter a plugin
	 * reads then: posix_memalign's) */
	uint8_t out;
	uint16_t stack; /* bytes of stack-passed arguments above the return address */
	uint16_t ret_max;
	/* plugins' backtraces: bytes of stack from the return address's slot up, with rbx, rbp
	 * and r12-r15 (TP_HK_P_REGS); return addresses the agent swapped are put back; 8: the
	 * return address only, without the registers */
	uint16_t snap;
	/* with a snap over 8: the agent walks this many frames itself (TP_HK_P_PCS) when the
	 * block's CFA table knows every caller on the way, else copies the snap */
	uint8_t walk;
	/* integer registers an ENTRY record carries, rdi first (at most 6): what formatting the
	 * arguments and plugins read; the others are not recorded */
	uint8_t regs;
	uint16_t pad2[2];
	struct tp_hk_arg arg[TP_HK_PLAN_ARGS];
};
/* A piece of payload: a header, then len bytes, padded to 8. */
#define TP_HK_P_MEM                                                                                \
	1	       /* the program's memory at addr (len shorter where it stops being readable) \
			*/
#define TP_HK_P_XMM 2  /* the low 8 bytes of xmm0, xmm1... */
#define TP_HK_P_ST0 3  /* st0's 10 bytes */
#define TP_HK_P_REGS 4 /* rbx, rbp, r12, r13, r14, r15 at the entry */
/* the backtrace the agent walked: the function's address, then the return addresses, real
 * ones (not the trampoline's); addr TP_HK_PCS_END when the walk reached the outermost frame,
 * 0 when it stopped at the plan's walk frames */
#define TP_HK_P_PCS 5
#define TP_HK_PCS_END 1
struct tp_hk_piece {
	uint64_t addr;
	uint32_t len;
	uint16_t what;
	uint16_t pad;
};
#define TP_HK_PIECE_MAX 16384 /* bytes a piece carries at most (--bt's stack) */

/* Bytes the payload of an entry (@at_ret 0) or a return may take at most under plan @p: the
 * agent reserves that much, tracepad's drain accepts no more. */
static inline uint32_t tp_hk_payload_room(const struct tp_hk_plan *p, int at_ret)
{
	uint32_t n = 0;

#define TP_HK_R8(n) (((uint32_t)(n) + 7) & ~7u)
	if (at_ret)
		return (p->ret ? sizeof(struct tp_hk_piece) +
				     TP_HK_R8(p->ret == TP_HK_RET_STR ? p->ret_max : 16)
			       : 0) +
		       (p->out ? sizeof(struct tp_hk_piece) + 8 : 0);
	for (uint32_t i = 0; i < p->nargs && i < TP_HK_PLAN_ARGS; i++)
		n += sizeof(struct tp_hk_piece) + TP_HK_R8(p->arg[i].max);
	if (p->stack)
		n += sizeof(struct tp_hk_piece) + TP_HK_R8(p->stack);
	if (p->nxmm)
		n += sizeof(struct tp_hk_piece) + 8 * 8;
	/* a walk's pieces (TP_HK_P_PCS, walk <= 255 frames) take less than a snap over 8 */
	if (p->snap)
		n += 2 * sizeof(struct tp_hk_piece) + 6 * 8 +
		     (p->snap > 8 && p->walk && TP_HK_R8(p->snap) < 8u * p->walk
			  ? 8u * p->walk
			  : TP_HK_R8(p->snap));
#undef TP_HK_R8
	return n;
}

struct tp_hk_func {
	/* written by tracepad */
	uint64_t addr;
	uint64_t fn_lo, fn_hi; /* the function's bounds, for the relocator's checks */
	uint64_t pad_hi;       /* [fn_hi, pad_hi): alignment padding after it (rt/pad.h) */
	uint32_t flags;
	uint32_t pad;
	struct tp_hk_plan plan; /* what ENTRY and RETURN records carry after them */
	/* written by the agent */
	int32_t err; /* placing it: 0 or -errno */
	uint32_t kind, why, covered, ninsn;
	uint8_t ioff[TP_FTP_MAX_INSNS];
	uint64_t icopy[TP_FTP_MAX_INSNS];
};

/* Events in the rings: a struct tp_hk_rec, tagged by type.  Records are 8-byte aligned and
 * as short as their type needs (size says how long); tracepad reads only what size covers.
 * Every record format change is here: fields after regs[] (a payload) may follow in a
 * record whose size says so. */
enum tp_hk_type {
	TP_HK_ENTRY = 1, /* a call of func: args, sp (the return address's slot) */
	TP_HK_RETURN,	 /* the innermost followed call of the thread returned: rax, rdx */
	/* the innermost followed call's frame is gone without a return (longjmp, exception,
	 * a thread's end): sp is its slot */
	TP_HK_UNWOUND,
	/* the frame at sp got its real return address back for an unwinder (its return is not
	 * seen until it is hooked again: TP_HK_REHOOKED) */
	TP_HK_RESTORED,
	TP_HK_REHOOKED,
	/* the ring's records from here on are of thread aux (a ring passes to another thread
	 * once its thread is gone): the first record a thread writes into a ring */
	TP_HK_THREAD,
};

/* The record's flags. */
#define TP_HK_R_FOLLOWED 0x1 /* ENTRY: its return will be an event (RETURN or UNWOUND) */
/* UNWOUND: the frame had its real address back: it may as well have returned */
#define TP_HK_R_LOST 0x2
#define TP_HK_R_ERRNO 0x4 /* RETURN: aux is the thread's errno then */
/* ENTRY: bits 8-11 are the number of registers regs[] holds (the plan's regs) */
#define TP_HK_R_NREGS_SHIFT 8

struct tp_hk_rec {
	/* of the record: TP_HK_REC_SIZE(nregs), then pieces (tp_hk_piece), a multiple of 8 */
	uint32_t size;
	uint16_t type;	/* enum tp_hk_type, or TP_FTP_REC_FILL */
	uint16_t flags; /* TP_HK_R_* */
	uint32_t func;	/* index in the block (ENTRY, and the frame's for the others) */
	uint32_t aux;	/* RETURN: errno (TP_HK_R_ERRNO); THREAD: the tid */
	uint64_t tsc;	/* rdtsc when it happened */
	uint64_t sp;
	/* ENTRY: rdi, rsi, rdx, rcx, r8, r9; RETURN: rax, rdx; none for the others */
	uint64_t regs[];
};
#define TP_HK_REC_SIZE(nregs) ((uint32_t)(sizeof(struct tp_hk_rec) + 8 * (nregs)))
#define TP_HK_ENTRY_REGS 6
#define TP_HK_RETURN_REGS 2

/* The registers record @h holds: an ENTRY's as its flags say, a RETURN's two. */
static inline uint32_t tp_hk_rec_nregs(const struct tp_hk_rec *h)
{
	return h->type == TP_HK_ENTRY	 ? (uint32_t)(h->flags >> TP_HK_R_NREGS_SHIFT) & 15
	       : h->type == TP_HK_RETURN ? TP_HK_RETURN_REGS
					 : 0;
}

/* Register @i of record @h (an ENTRY's rdi, rsi, rdx, rcx, r8, r9): 0 when not recorded. */
static inline uint64_t tp_hk_rec_reg(const struct tp_hk_rec *h, uint32_t i)
{
	return i < tp_hk_rec_nregs(h) ? h->regs[i] : 0;
}

struct tp_hk_ctl {
	uint64_t magic;
	uint32_t abi, nfuncs;
	uint64_t size; /* bytes of the block */
	uint64_t funcs_off;
	uint64_t rings_off, data_off; /* struct tp_ftp_ring[nrings]; nrings * ring_size bytes */
	uint32_t nrings, ring_size;   /* ring_size: a power of two */
	int32_t tracer_pid;
	uint32_t errno_ok;   /* errno_tpoff is known: returns record errno */
	int64_t errno_tpoff; /* errno's offset from the thread pointer (libc's TLS) */
	uint32_t follow;     /* -f: fork children record into the rings too (ring.pid) */
	uint64_t rdebug;     /* the loader's r_debug (TP_HK_F_RBRK reads its r_state) */
	/* dlopen/dlclose: the agent adds one to dl_seq and waits (futex on dl_done) until
	 * tracepad, having appended the new objects' functions (nfuncs, at most funcs_cap) and
	 * flagged the gone ones, sets dl_done to it */
	uint32_t dl_seq, dl_done;
	uint32_t funcs_cap, pad2;
	uint64_t cfa_off; /* struct tp_hk_cfa[TP_HK_CFA_SLOTS] (plan.walk) */
	/* written by the agent */
	uint32_t state; /* TP_HK_ST_* */
	int32_t pid;
	uint64_t tramp;	  /* the return trampoline's address */
	uint64_t no_ring; /* events of threads that found no free ring */
	uint64_t lost;	  /* events lost: tracepad gone while a ring was full */
	uint64_t nested;  /* entries inside a hook of the same thread: not followed */
	uint64_t deep;	  /* entries whose return could not be followed: shadow full */
	uint64_t install_pc, detach_pc;
	char error[128];
};

/* ---- the CFA table: how the agent walks a backtrace (plan.walk) ----
 * For a return address ra, tracepad's reading of the CFI at ra - 1 (libdw, as its unwinder
 * does), when it is one the agent can follow: the caller's CFA is rsp or rbp plus an offset,
 * its return address at CFA - 8, its caller's rbp the same or saved at CFA plus an offset;
 * or the outermost frame (the return address undefined).  Open addressing by ra; tracepad
 * writes rule then ra, and clears every ra when objects go (dlclose); the agent reads ra,
 * rule, ra again, and takes the rule only when both reads of ra matched. */
#define TP_HK_CFA_SLOTS 4096
#define TP_HK_CFA_PROBES 16
#define TP_HK_CFA_BP (1ull << 48)	/* the CFA is rbp + offset, else the frame's rsp + offset */
#define TP_HK_CFA_BP_SAVED (1ull << 49) /* the caller's rbp is at CFA + the rule's bits 32-47 */
#define TP_HK_CFA_END (1ull << 50)	/* the outermost frame: no caller */
#define TP_HK_CFA_VALID (1ull << 63)
struct tp_hk_cfa {
	uint64_t ra;
	uint64_t rule; /* bits 0-31: the CFA's offset (signed), 32-47 rbp's, TP_HK_CFA_* */
};

static inline uint32_t tp_hk_cfa_hash(uint64_t ra)
{
	return (uint32_t)((ra * 0x9e3779b97f4a7c15ull) >> 52) & (TP_HK_CFA_SLOTS - 1);
}

#define TP_HK_ST_ACTIVE 0x1
#define TP_HK_ST_FORKED 0x2

#endif
