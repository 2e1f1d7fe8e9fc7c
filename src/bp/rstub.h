/* The record a return stub fills as a hooked call returns without a stop (byte offsets):
 * src/bp maps and reads the records, src/arch's tp_arch_emit_return_stub() writes the code
 * that fills them, told where by TP_RSTUB_LAYOUT. */
#ifndef TP_BP_RSTUB_H
#define TP_BP_RSTUB_H

#define TP_RSTUB_DONE 0	      /* u32: 1 once the call returned (written last) */
#define TP_RSTUB_RET 8	      /* u64: where the call returns to (written at entry) */
#define TP_RSTUB_ERRNO_AT 16  /* u64: the thread's errno, or any readable word (at entry) */
#define TP_RSTUB_ENTRY_TO 24  /* u64: where the entry stub goes on (written at entry) */
#define TP_RSTUB_ENTRY_TSC 32 /* u64: the TSC as the call began (0 at entry: the stub's) */
#define TP_RSTUB_RAX 40	      /* u64, and the rest as the call returned */
#define TP_RSTUB_RDX 48
#define TP_RSTUB_XMM0 56
#define TP_RSTUB_TSC 64	  /* u64: the time stamp counter */
#define TP_RSTUB_ERRNO 72 /* i32 */
#define TP_RSTUB_REC_SIZE 80

/* The same, for tp_arch_emit_return_stub(). */
#define TP_RSTUB_LAYOUT                                                                            \
	{                                                                                          \
		.done = TP_RSTUB_DONE, .ret = TP_RSTUB_RET, .errno_at = TP_RSTUB_ERRNO_AT,         \
		.rax = TP_RSTUB_RAX, .rdx = TP_RSTUB_RDX, .xmm0 = TP_RSTUB_XMM0,                   \
		.tsc = TP_RSTUB_TSC, .err = TP_RSTUB_ERRNO, .entry_to = TP_RSTUB_ENTRY_TO,         \
		.entry_tsc = TP_RSTUB_ENTRY_TSC                                                    \
	}

#endif
