/* Internals of src/proc shared by its files: the task table (tid -> task, open addressing),
 * the queue of events seen but not yet returned, and the tracer-wide state. */
#ifndef TP_PROC_PROC_PRIV_H
#define TP_PROC_PROC_PRIV_H

#include "proc/proc.h"

#include <sys/user.h>

/* The injections in flight (inject.c, inject-dl.c), innermost last, for the crash guard:
 * task @tid of @pid gets its registers back (when @has_regs), and the @norig bytes at @at
 * that the injection wrote over. */
struct tp_proc_inflight {
	pid_t pid, tid;
	bool has_regs;
	struct user_regs_struct regs;
	uint64_t at;
	uint8_t orig[8];
	unsigned norig;
};
#define TP_PROC_INFLIGHT_MAX 4
extern struct tp_proc_inflight tp_proc_inflight[TP_PROC_INFLIGHT_MAX];
extern volatile int tp_proc_ninflight;
/* Push what a crash puts back of the injection that starts now (@regs NULL: none); pop it
 * once the injection put it back itself. */
void tp_proc_inflight_push(pid_t pid, pid_t tid, const struct user_regs_struct *regs, uint64_t at,
			   const uint8_t *orig, unsigned norig);
void tp_proc_inflight_pop(void);

enum tp_task_state {
	TP_TASK_RUNNING, /* resumed (or listening in a group-stop): a stop may be reported */
	TP_TASK_STOPPED, /* in a ptrace-stop that the caller owns */
};

struct tp_task {
	pid_t tid;
	pid_t tgid;
	uint8_t state;	   /* enum tp_task_state */
	uint8_t how;	   /* enum tp_resume of the last resume, reused for transparent restarts */
	bool group_stop;   /* stopped in a group-stop: resumed with PTRACE_LISTEN */
	bool held;	   /* stopped by stop_all/attach/launch: tp_proc_resume_all() restarts it */
	bool interrupting; /* PTRACE_INTERRUPT sent, no stop seen since */
	int pending_sig;   /* signal of a signal-delivery stop not yet resumed (given on detach) */
	bool trapped;	   /* crash guard: its stop is a SIGTRAP (an int3) not handled */
	bool exiting;	   /* its PTRACE_EVENT_EXIT seen: it runs no code of its own again */
};

/* A stop of a task we have not been told about yet (its creator's clone event is late). */
struct tp_early {
	pid_t tid;
	int status;
};

struct tp_proc {
	pid_t pid;
	unsigned opts;
	int exit_status;
	bool exited;

	struct tp_task **slots; /* hash by tid, linear probing, NULL = empty */
	unsigned cap;		/* power of two */
	unsigned ntasks;
	unsigned nrunning;
	unsigned ninterrupting;
	struct tp_task *last; /* last task resumed: waited on alone when it is the only runner */

	pid_t *tgids; /* traced thread groups */
	int ntgids, tgids_cap;

	struct tp_event *queue; /* ring of events decoded but not yet returned */
	unsigned qhead, qlen, qcap;

	struct tp_event *held; /* ring of events held during an injection (inject.c) */
	unsigned hhead, hlen, hcap;

	struct tp_early *early;
	int nearly, early_cap;

	pid_t unrelated;  /* a child of the tracer that is not ours, blocking waitid(P_ALL) */
	uint64_t spin_ns; /* tp_proc_set_spin() */
	int wait_sig;	  /* tp_proc_set_wait_signal() */
	tp_proc_trap_filter_fn trap_filter;
	void *trap_arg;
};

/* proc.c: task table */
struct tp_proc *tp_proc_alloc(pid_t pid, unsigned opts);
struct tp_task *tp_proc_task_add(struct tp_proc *p, pid_t tid, pid_t tgid);
void tp_proc_task_del(struct tp_proc *p, struct tp_task *t);
void tp_proc_task_set_state(struct tp_proc *p, struct tp_task *t, enum tp_task_state s);
int tp_proc_tgid_add(struct tp_proc *p, pid_t tgid);
void tp_proc_tgid_del(struct tp_proc *p, pid_t tgid);
unsigned tp_proc_ptrace_opts(unsigned opts);
bool tp_proc_is_zombie(pid_t pid);
/* mem.c: stopped task @tid's vector and x87 state, saved (NULL when it cannot be read) and
 * put back (and freed) around code an injection runs in the task, which may use them. */
#define TP_PROC_XSTATE_MAX 16384
void *tp_proc_xstate_save(pid_t tid, size_t *len);
int tp_proc_xstate_restore(pid_t tid, void *state, size_t len);

static inline unsigned tp_proc_hash(pid_t tid, unsigned cap)
{
	return ((uint32_t)tid * 2654435761u) & (cap - 1);
}

static inline struct tp_task *tp_proc_task_find(const struct tp_proc *p, pid_t tid)
{
	unsigned i = tp_proc_hash(tid, p->cap);
	struct tp_task *t;

	while ((t = p->slots[i])) {
		if (t->tid == tid)
			return t;
		i = (i + 1) & (p->cap - 1);
	}
	return NULL;
}

/* event.c */
int tp_proc_queue_push(struct tp_proc *p, const struct tp_event *ev);
/* Wait for and decode one stop; events for the caller are queued.  Used while stopping. */
int tp_proc_wait_queue(struct tp_proc *p);
int tp_proc_interrupt(struct tp_proc *p, struct tp_task *t);
int tp_proc_restart(struct tp_proc *p, struct tp_task *t, enum tp_resume how, int sig);

/* guard.c: the tp_proc the crash guard stops and detaches (set at alloc, cleared at free) */
void tp_proc_guard_track(struct tp_proc *p);
void tp_proc_guard_untrack(struct tp_proc *p);
/* The guard is running: memory access takes no lock. */
extern volatile sig_atomic_t tp_proc_guard_running;
/* TRACEPAD_TEST_CRASH: events left before tracepad faults on purpose (0: never). */
extern long tp_proc_guard_crash_after;
void tp_proc_guard_test_crash(void);

/* mem.c */
void tp_proc_memfd_drop(pid_t pid);

/* Let every stopped task run for @us microseconds, answering signal-delivery stops at once, then
 * stop them all again. */
int tp_proc_let_run(struct tp_proc *p, unsigned us);

#endif
