/* `tracepad calls --engine agent` (agent.c): what the job and the selection of the hooked
 * functions (agent-select.c) share. */
#ifndef TP_CALLS_AGENT_PRIV_H
#define TP_CALLS_AGENT_PRIV_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include "agent/hooks-abi.h"
#include "calls/engine.h"

#define RINGS 32
#define RING_SIZE (4096u * 1024) /* bytes of a thread's ring */
#define NAP_US 250		 /* between two drains that found nothing */
#define DETACH_ROUNDS 2000	 /* rounds of 1 ms for threads to leave the hooks */
#define ORIG_LEN 16		 /* bytes compared before and after, at each address */
#define BT_BYTES 16384		 /* --bt: stack bytes each entry copies for the unwinder */
#define STACK_MAX 1024		 /* bytes of stack-passed arguments a record carries at most */
/* bytes of stack a call's record carries for plugins' backtraces when the agent cannot walk
 * them (as --bt's: the agent engine's backtraces reach as far as the ptrace engine's); a
 * function's calls whose backtrace no plugin asked for SNAP_PROBE times in a row carry only
 * the return address from then on (memory never asks at free, nor with depth=0) */
#define SNAP_BYTES 16384
#define SNAP_PROBE 64
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
	char path[PATH_MAX];		/* the agent's, as the process maps it */
	bool live;			/* the hooks are in the program */
	struct image *im;		/* the image hooked (the exec line's, with -f) */
	uint32_t dl_done;		/* the agent's last dlopen request answered */
	bool launched;			/* launched by tracepad, stopped at its entry point */
	struct thread *ring_thr[RINGS]; /* whose records each ring holds now (TP_HK_THREAD) */
	uint64_t clk_tsc, clk_ns;	/* agent.c's clock_anchor */
	double clk_rate;		/* ns a TSC tick */
	struct user_regs_struct regs;	/* a record's registers, as the prototypes read them */
	bool full;			/* the last drain found a ring over 1/8 full */
	uint16_t *nobt;			/* calls in a row without a backtrace asked, per function */
	struct tp_unwind_memo *memo;	/* backtraces seen (unwind.h) */
	struct walks *walks;		/* backtraces the agent walks (agent-args.c) */
	uint32_t (*room)[2];		/* payload bytes of an entry, a return, per function */
};

/* The functions to hook, as the ptrace engine selects them, in the block @a (mapped here,
 * its fd in a->fd), with the unwinders, the IFUNC implementations (their resolvers called
 * in stopped task @tid).  0 or -errno. */
int tp_calls_agent_select(struct session *s, struct image *im, struct agent *a, pid_t tid);

/* After a dlopen or a dlclose (the agent asks at r_brk): @a's image synchronised with the
 * process's objects, the functions of objects gone flagged TP_HK_F_GONE (func_of NULL), the
 * new objects' selected functions appended from *@first on.  0 or -errno. */
int tp_calls_agent_select_more(struct session *s, struct agent *a, uint32_t *first);

/* agent.c, for -f (agent-follow.c). */
struct agent *tp_calls_agent_new(pid_t pid);
void tp_calls_agent_free(struct agent *a);
/* Everything @a holds let go (the block, the tables, its place in the crash guard's list):
 * as tp_calls_agent_new left it, for the same process (after an exec, which took the hooks
 * and the agent away). */
void tp_calls_agent_clear(struct agent *a);
/* Hook @a's process, stopped at its entry point (every thread stopped): select, load the
 * agent, place the pads.  0 or -errno (said). */
int tp_calls_agent_hook(struct session *s, struct agent *a);
/* The events of @a's rings turned into lines: how many. */
uint64_t tp_calls_agent_drain(struct session *s, struct agent *a);
/* Thread @t is gone: its calls in flight never return. */
void tp_calls_agent_gone(struct session *s, struct agent *a, struct thread *t);
/* @t's calls in flight ended as @why says (" = <no return>"). */
void tp_calls_agent_thread_over(struct session *s, struct agent *a, struct thread *t,
				const char *why);
/* @a's hooks out of the crash guard's care (out of the program, or @a freed). */
void tp_calls_agent_unguard(struct agent *a);
/* The pads of @a out of process @pid, attached and stopped, its code compared with what it
 * was: 0 or -errno. */
int tp_calls_agent_unhook(struct session *s, struct agent *a, pid_t pid);
/* The pads out of @a's process (attached again, or still attached with plugins) and the
 * program let go: 0 or -errno. */
int tp_calls_agent_leave(struct session *s, struct agent *a);
/* Warn of the calls @a's agent could not follow. */
void tp_calls_agent_lost(const struct agent *a);
/* -f (agent-follow.c): the processes stay traced for their forks, execs and exits (no stop
 * at a call); each exec'd image is hooked at its entry point.  The exit status to return. */
int tp_calls_agent_follow(struct session *s, struct agent *first);
/* Calls in flight of threads that ended (@all: every thread) after a last drain. */
void tp_calls_agent_ended(struct session *s, struct agent *a, bool all);
/* A thread's record (made on first sight). */
struct thread *tp_calls_agent_thread(struct session *s, pid_t pid, pid_t tid);

/* agent-watch.c: with plugins, the program runs with tracepad attached to the end (*@ended,
 * its wait status *@st) or tracepad's (the hooks taken out).  tracepad's exit status. */
int tp_calls_agent_watch(struct session *s, struct agent *a, bool *ended, int *st);

/* agent-args.c: a record's pieces (after its registers), checked as untrusted. */
struct tp_calls_pieces {
	const uint8_t *p;
	uint32_t len;
};
const struct tp_proto *tp_calls_agent_proto(struct session *s, struct func *f);
/* The plans of @a's functions from @first on (those a dlopen added too). */
void tp_calls_agent_plan(struct session *s, struct agent *a, uint32_t first);
/* The payload bytes function @j's entries (@at_ret false) or returns may carry: its plan's,
 * with its snap as planned (it may have shrunk since). */
uint32_t tp_calls_agent_room(struct session *s, const struct agent *a, uint32_t j, bool at_ret);
/* Whether @h's size is one the agent writes: its registers, then no more pieces than its
 * function's plan may give (inline: the drain asks it of every record). */
static inline bool tp_calls_agent_size_ok(struct session *s, const struct agent *a,
					  const struct tp_hk_rec *h)
{
	uint32_t head;
	bool at_ret = h->type == TP_HK_RETURN;

	if (h->type != TP_HK_ENTRY && !at_ret)
		return h->size == TP_HK_REC_SIZE(0);
	if (tp_hk_rec_nregs(h) > (at_ret ? TP_HK_RETURN_REGS : TP_HK_ENTRY_REGS))
		return false;
	head = TP_HK_REC_SIZE(tp_hk_rec_nregs(h));
	if (h->size < head)
		return false;
	if (h->func >= a->n)
		return at_ret && h->size == head;
	return h->size - head <=
	       (a->room ? a->room[h->func][at_ret] : tp_calls_agent_room(s, a, h->func, at_ret));
}
struct tp_calls_pieces tp_calls_agent_pieces(const struct tp_hk_rec *h);
/* tp_proto_mem_fn over a struct tp_calls_pieces. */
ssize_t tp_calls_agent_piece_read(void *ctx, uint64_t addr, void *buf, size_t len);
/* The vector registers the pieces carry, in @fp; false when none. */
bool tp_calls_agent_piece_fp(const struct tp_calls_pieces *ps, struct user_fpregs_struct *fp);
/* Backtraces of entries walked by the agent from the block's CFA table (hooks-abi.h), filled
 * from the walks libdw made of the entries that carried their stack. */
struct walks {
	uint8_t fn[TP_HK_MAX_FUNCS]; /* 0: not decided yet, 1: walked, 2: never (its CFI) */
	uint64_t walked, unwound, rules;
	bool full; /* the table has taken all it could */
};
/* The CFA table emptied: objects are gone, their return addresses may be others' now. */
void tp_calls_agent_walks_reset(struct agent *a);
/* Entry @h's backtrace: the agent's walk, else libdw's from its registers and stack copy,
 * from which the CFA table learns when @learn (@h is of the block's own process, not of a
 * fork child sharing it).  The count or -errno. */
int tp_calls_agent_unwind(struct session *s, const struct agent *a, pid_t tid,
			  const struct tp_hk_rec *h, uint64_t *pcs, int max, bool learn);
/* The record whose plugins' call() (@entry, thread @tid) or ret() runs now; NULLs after. */
void tp_calls_agent_current(const struct agent *a, pid_t tid, const struct tp_hk_rec *entry,
			    const struct tp_hk_rec *rec);

/* agent-start.c: launched program @pid run to where the hooks go in (0, -ESRCH: it ended,
 * or -errno); a static one at its entry point on to its main. */
int tp_calls_agent_to_entry(struct session *s, pid_t pid);
int tp_calls_agent_to_main(struct session *s, struct agent *a);
struct tp_proc_dl;
/* The loader's dlopen, dlsym and dlerror in @a's process: 0, or -EINVAL said. */
int tp_calls_agent_dl(const struct agent *a, struct tp_proc_dl *dl);
/* -p: the pads of a session whose tracepad was killed (inert, still in the code) taken out,
 * every thread stopped, before this session reads the code.  0 or -errno. */
int tp_calls_agent_orphan(struct session *s, pid_t pid);

#endif
