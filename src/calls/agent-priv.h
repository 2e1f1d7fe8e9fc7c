/* `tracepad calls --engine agent` (agent.c): what the job and the selection of the hooked
 * functions (agent-select.c) share. */
#ifndef TP_CALLS_AGENT_PRIV_H
#define TP_CALLS_AGENT_PRIV_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/hooks-abi.h"
#include "calls/engine.h"

#define RINGS 32
#define RING_SIZE (4096u * 1024) /* bytes of a thread's ring */
#define NAP_US 250		 /* between two drains that found nothing */
#define DETACH_ROUNDS 2000	 /* rounds of 1 ms for threads to leave the hooks */
#define ORIG_LEN 16		 /* bytes compared before and after, at each address */
/* struct rec's aux here: a tail call (it returns with the frame below), a frame whose return
 * address was put back for an unwinder (its return may pass unseen) */
#define REC_TAIL 0x1
#define REC_LOST 0x2

struct agent {
	int fd;
	struct tp_hk_ctl *ctl;
	size_t size;
	struct tp_hk_func *hfs;
	struct func **func_of; /* block index -> function */
	uint32_t n;
	pid_t pid;
	uint8_t (*orig)[ORIG_LEN]; /* the code at each hooked address before */
	uint64_t detach_pc;
	char path[PATH_MAX]; /* the agent's, as the process maps it */
	bool live;	     /* the hooks are in the program */
	uint64_t own[64];    /* libc's functions the agent and libZydis call (own_funcs) */
	int nown;
	unsigned nskipped; /* selected, but one of those */
};

/* The functions to hook, as the ptrace engine selects them, in the block @a (mapped here,
 * its fd in a->fd), with the unwinders, the IFUNC implementations (their resolvers called
 * in stopped task @tid) and without libc's functions the agent calls itself.  0 or -errno. */
int tp_calls_agent_select(struct session *s, struct image *im, struct agent *a, pid_t tid);

#endif
