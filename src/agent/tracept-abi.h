/* The shared memory of fast tracepoints between `tracepad trace --fast` and the agent: what
 * to place (addresses, compiled condition and collect bytecode, pass counts), the counts
 * the agent keeps, and one ring of frames per thread that tracepad drains.  An anonymous
 * memfd named "tracepad-ftp"; the agent checks every offset and count against its size. */
#ifndef TP_AGENT_TRACEPT_ABI_H
#define TP_AGENT_TRACEPT_ABI_H

#include <stdint.h>

#define TP_FTP_MAGIC 0x5054465044415254ull /* "TRADPFTP" */
#define TP_FTP_ABI 1
#define TP_FTP_MAX_TPS 64
#define TP_FTP_MAX_ITEMS 56    /* tracept's TP_MAX_ITEMS */
#define TP_FTP_MAX_INSNS 8     /* displaced instructions of a jmp site (pad.c's MAX_INSNS) */
#define TP_FTP_REC_FILL 0xffff /* a record's tp: filler up to the end of the ring */

/* One collect item: its bytecode, and what the code computes. */
struct tp_ftp_item {
	uint32_t code_off, code_len; /* in the block */
	uint32_t size;		     /* mem: bytes read at the address */
	uint32_t mem;		     /* the code computes an address */
};

struct tp_ftp_tp {
	/* written by tracepad */
	uint64_t addr;
	uint64_t fn_lo, fn_hi;	     /* the function around addr, for the relocator's checks */
	uint64_t pass_count;	     /* 0: no limit */
	uint32_t cond_off, cond_len; /* cond_len 0: no condition */
	uint32_t items_off, nitems;  /* struct tp_ftp_item[nitems] */
	uint32_t rec_size;	     /* bytes of a frame record, a multiple of 8 */
	uint32_t first;		     /* 1: the first tracepoint at addr (it owns the pad) */
	/* written by the agent: plus what the rings count */
	uint64_t hits, collected, discarded, errors;
	uint64_t lost; /* collected, but no room in the thread's ring */
	int32_t err;   /* placing it: 0 or -errno */
	uint32_t kind, why, covered, ninsn;
	uint8_t ioff[TP_FTP_MAX_INSNS];
	uint64_t icopy[TP_FTP_MAX_INSNS];
};

/* Counts of a tracepoint: hits, collected, discarded, errors (struct tp_ftp_tp's order). */
#define TP_FTP_COUNTS 4

/* A ring: one thread writes (head), tracepad reads (tail); byte counts since the start,
 * each on its own cache line (the two sides write them at every frame). */
struct tp_ftp_ring {
	int32_t tid; /* 0: free; claimed by CAS at the thread's first frame */
	int32_t pid; /* the owner's process, set by it before its first record (fork children
		      * of a process write into its rings with -f) */
	uint64_t head;
	uint8_t line0[48];
	uint64_t tail;
	/* 1: the owner found the ring full and sleeps on this futex (1 ms at most) until
	 * tracepad, having moved the tail, sets it to 0 and wakes it */
	uint32_t waiting;
	uint8_t line1[52];
	/* the owner's counts of each tracepoint, added to the tracepoint's own (a lock'ed add
	 * a hit costs more than the rest of the callback) */
	uint64_t counts[TP_FTP_MAX_TPS][TP_FTP_COUNTS];
};

/* A frame: this header, u64 values[nitems], then the memory items' bytes, padded to 8. */
struct tp_ftp_rec {
	uint32_t size; /* of the whole record */
	uint16_t tp;   /* index in the block, or TP_FTP_REC_FILL */
	uint16_t pad;
	int32_t tid;
	uint32_t pad2;
	uint64_t unavail; /* bit i: item i could not be read */
};

struct tp_ftp_ctl {
	uint64_t magic;
	uint32_t abi, ntps;
	uint64_t size; /* bytes of the block */
	uint64_t tps_off;
	uint64_t rings_off, data_off; /* struct tp_ftp_ring[nrings]; nrings * ring_size bytes */
	uint32_t nrings, ring_size;   /* ring_size: a power of two */
	int32_t tracer_pid;
	uint32_t pad;
	/* written by the agent */
	uint32_t state; /* TP_FTP_ST_* */
	int32_t pid;
	uint64_t no_ring; /* frames of threads that found no free ring */
	uint64_t nested;  /* hits inside a hit of the same thread (a signal handler): discarded */
	uint64_t install_pc, detach_pc;
	char error[128];
};

#define TP_FTP_ST_ACTIVE 0x1
#define TP_FTP_ST_FORKED 0x2 /* a fork child runs the pads: its hits are not counted */

#endif
