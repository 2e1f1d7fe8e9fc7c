/* The offsets the return trampoline's common case (hooks-entry.S) reads in hooks.c's state,
 * checked there by static asserts: the thread's struct hstate (TLS), its struct shadow and
 * struct sframe, hooks.c's struct hk_state, the block's struct tp_hk_func and struct
 * tp_ftp_ring, and the RETURN record it writes (hooks-abi.h). */
#ifndef TP_AGENT_HOOKS_FAST_H
#define TP_AGENT_HOOKS_FAST_H

#define HS_GEN 0
#define HS_RING 8
#define HS_TAIL 16
#define HS_SH 24
#define HS_IN 32

#define SH_N 4
#define SH_BUSY 8
#define SH_WALK 16
#define SH_F 24
#define SF_SIZE 32
#define SF_SLOT 0
#define SF_RET 8
#define SF_FUNC 16
#define SF_FLAGS 20
#define SF_GEN 22
#define SF_EVENTS_BIT 0x1
#define SF_RESTORED_BIT 0x2

#define HK_CTL 0
#define HK_FUNCS 16
#define HK_RINGS 32
#define HK_DATA 40
#define HK_RSIZE 52
#define HK_ERRNO_TPOFF 72
#define HK_ERRNO_OK 80
#define HK_PREFETCHW 84
#define HK_GEN 88
#define HK_ON 92
#define HK_FORKED 96

#define FN_SIZE 216
#define FN_PLAN_RET 42 /* plan.ret, then plan.out: either set, a payload */

#define RING_SIZE 2176
#define RING_HEAD 8

#define REC_RETURN_SIZE 48 /* TP_HK_REC_SIZE(TP_HK_RETURN_REGS) */
#define REC_RETURN 2	   /* TP_HK_RETURN */
#define REC_R_ERRNO 4	   /* TP_HK_R_ERRNO */
#define PREFETCH_AHEAD 512 /* bytes: a few records */

#endif
