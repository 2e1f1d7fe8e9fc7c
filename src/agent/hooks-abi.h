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
#define TP_HK_ABI 1
#define TP_HK_MAX_FUNCS 1024 /* rt's pads: 1024 addresses a process */

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

struct tp_hk_func {
	/* written by tracepad */
	uint64_t addr;
	uint64_t fn_lo, fn_hi; /* the function's bounds, for the relocator's checks */
	uint64_t pad_hi;       /* [fn_hi, pad_hi): alignment padding after it (rt/pad.h) */
	uint32_t flags;
	uint32_t pad;
	/* written by the agent */
	int32_t err; /* placing it: 0 or -errno */
	uint32_t kind, why, covered, ninsn;
	uint8_t ioff[TP_FTP_MAX_INSNS];
	uint64_t icopy[TP_FTP_MAX_INSNS];
};

/* Events in the rings: a struct tp_hk_rec, tagged by type. */
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
};

/* The record's flags. */
#define TP_HK_R_FOLLOWED 0x1 /* ENTRY: its return will be an event (RETURN or UNWOUND) */
/* UNWOUND: the frame had its real address back: it may as well have returned */
#define TP_HK_R_LOST 0x2
#define TP_HK_R_ERRNO 0x4 /* RETURN: regs[2] is the thread's errno then */

struct tp_hk_rec {
	uint32_t size;	/* of the record: sizeof(struct tp_hk_rec) */
	uint16_t type;	/* enum tp_hk_type, or TP_FTP_REC_FILL */
	uint16_t flags; /* TP_HK_R_* */
	int32_t tid;
	uint32_t func; /* index in the block (ENTRY) */
	uint64_t tsc;
	uint64_t sp;
	uint64_t regs[6]; /* ENTRY: rdi, rsi, rdx, rcx, r8, r9; RETURN: rax, rdx, errno */
};

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

#define TP_HK_ST_ACTIVE 0x1
#define TP_HK_ST_FORKED 0x2

#endif
