/* The trapflag engine of `tracepad count`: libtracepad-agent.so steps the program from
 * inside with EFLAGS.TF and SIGTRAP, and keeps its counts in the shared control block.
 * For a whole-program count, the start-up before the agent's constructor (ld.so, libc's
 * initialisation) is stepped by the ptrace engine first and reported apart.  With -p, the
 * agent is injected into the running process (dlopen through src/proc) and every thread
 * gets TF from tracepad; at the end the agent is disabled and TF cleared again. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arch/arch.h"
#include "count/count-priv.h"
#include "elf/symbols.h"
#include "proc/inject.h"
#include "proc/proc.h"

/* Tasks of the process handled at attach and detach (as the ptrace engine's -p). */
#define TASKS_MAX 4096
/* Rounds of letting the threads run 1 ms for the agent's handlers to be left before
 * tracepad gives up unmapping the control block (it then stays mapped, inert). */
#define DETACH_ROUNDS 2000

/* Fold what the agent counted into the result; nothing it wrote is trusted blindly. */
static void collect(struct tp_count_ctx *c, pid_t pid)
{
	struct tp_agent_ctl *ctl = c->ctl;
	struct tp_count_result *r = c->r;
	uint32_t n = ctl->nthreads;
	struct tp_agent_thread *th = (void *)((char *)ctl + ctl->threads_off);
	uint32_t maps = ctl->nmaps;

	if (n > ctl->max_threads)
		n = ctl->max_threads;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t cnt = th[i].count;

		if (!cnt)
			continue;
		tp_count_add_thread(r, th[i].tid, cnt);
		r->total += cnt;
		for (int m = 0; m < TP_AGENT_MNEMONICS; m++)
			r->mnemonic[m] += th[i].mnemonic[m];
	}
	r->overflow = ctl->overflow_count;
	r->total += r->overflow;
	r->addr_dropped = ctl->addr_dropped;
	r->control_pc = ctl->control_pc;
	r->exec_seen = ctl->state & TP_AGENT_ST_EXEC;
	r->forked = ctl->state & TP_AGENT_ST_FORKED;
	r->fatal.traps = __atomic_load_n(&ctl->fatal_traps, __ATOMIC_ACQUIRE);
	if (r->fatal.traps) {
		r->fatal.tid = ctl->fatal_tid;
		r->fatal.signo = ctl->fatal_signo;
		r->fatal.code = ctl->fatal_code;
		r->fatal.addr = ctl->fatal_addr;
		r->fatal.pc = ctl->fatal_pc;
		r->fatal.rflags = ctl->fatal_rflags;
		memcpy(r->fatal.bytes, ctl->fatal_bytes, sizeof(r->fatal.bytes));
		r->fatal.readable = ctl->fatal_readable;
	}
	if (ctl->flags & TP_CTL_BY_ADDRESS) {
		struct tp_agent_addr *a = (void *)((char *)ctl + ctl->addrs_off);

		for (uint64_t i = 0; i < ctl->addr_slots; i++)
			if (a[i].pc && a[i].count)
				tp_count_addrs_add(&r->addrs, a[i].pc, a[i].count);
	}
	if (maps > ctl->max_maps)
		maps = ctl->max_maps;
	for (uint32_t i = 0; i < maps; i++) {
		struct tp_agent_map *m = (void *)((char *)ctl + ctl->maps_off);

		m[i].path[TP_AGENT_PATH_MAX - 1] = 0;
		tp_symtab_add_map(c->syms, m[i].start, m[i].end, m[i].offset, m[i].path);
	}
	(void)pid;
}

/* What the agent has counted so far (a running total for the progress line). */
static uint64_t agent_total(struct tp_count_ctx *c)
{
	struct tp_agent_ctl *ctl = c->ctl;
	struct tp_agent_thread *th = (void *)((char *)ctl + ctl->threads_off);
	uint32_t n = __atomic_load_n(&ctl->nthreads, __ATOMIC_RELAXED);
	uint64_t total = c->r->startup;

	if (n > ctl->max_threads)
		n = ctl->max_threads;
	for (uint32_t i = 0; i < n; i++)
		total += __atomic_load_n(&th[i].count, __ATOMIC_RELAXED);
	return total;
}

static int agent_attach(struct tp_count_ctx *c, struct tp_proc *p, char *agent,
			uint64_t *detach_pc);
static int set_tf_all(struct tp_proc *p, bool on);

/* A whole program: its start-up stepped by ptrace up to its entry point with nothing of
 * tracepad in it, then the agent injected there (its loading is not the program's work)
 * and TF set; the program is let go, counted from its first instruction after the loader.
 * Returns with the program running, or -errno with c->error set. */
static int launch_to_entry(struct tp_count_ctx *c)
{
	char agent[PATH_MAX];
	uint64_t detach_pc;
	struct tp_proc *p = NULL;
	int err = tp_count_launch_ptrace(c, false, true, &p);

	if (err || !p)
		return err;
	c->ctl->handover_pc = c->r->control_pc;
	err = agent_attach(c, p, agent, &detach_pc);
	if (err) {
		/* the program goes on uncounted, as without tracepad */
		set_tf_all(p, false);
		tp_proc_detach(p);
		return err;
	}
	return tp_proc_detach(p);
}

int tp_count_run_trapflag(struct tp_count_ctx *c)
{
	struct tp_count_result *r = c->r;
	pid_t pid;
	double t0 = tp_count_now();
	int st = 0, err;
	/* --trace needs the agent's rings from its start: it is preloaded then */
	bool to_entry = c->whole && !c->o->no_startup && !c->cons;

	if (c->is_static) {
		snprintf(c->error, sizeof(c->error),
			 "%s is statically linked: the trapflag engine needs the agent preloaded; "
			 "use --engine ptrace",
			 c->path);
		return -EINVAL;
	}
	c->ctl->mode = TP_AGENT_COUNT;
	c->ctl->tracer_pid = (int32_t)getpid(); /* the agent stops stepping when we are gone */
	if (c->whole && !c->o->no_startup && !to_entry)
		c->ctl->flags |= TP_CTL_SYNC;
	/* with SYNC, the start-up is stepped by ptrace until the agent's int3; otherwise the
	 * program is let go at its first instruction */
	err = to_entry ? launch_to_entry(c)
		       : tp_count_launch_ptrace(c, true, c->whole && !c->o->no_startup, NULL);
	if (err)
		return err;
	pid = c->pid;
	if (r->detached)
		return 0; /* interrupted in the start-up: what was stepped is the report */
	if (c->whole && !c->o->no_startup && !r->have_startup) {
		snprintf(c->error, sizeof(c->error), "the agent did not start in %s", c->path);
		return -EIO;
	}
	/* with --trace, the agent's rings are drained while the program runs */
	for (;;) {
		pid_t w;

		if (c->stop && *c->stop) {
			/* The agent counts on in the program, which runs to its own end; the
			 * report is what it counted so far. */
			r->detached = true;
			break;
		}
		w = waitpid(pid, &st, c->cons || c->progress ? WNOHANG : 0);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w && (WIFEXITED(st) || WIFSIGNALED(st)))
			break;
		if (!w) {
			if (c->cons)
				tp_trace_consumer_poll(c->cons);
			tp_count_progress(c, agent_total(c));
			usleep(20000);
		}
	}
	if (c->cons) {
		/* everything committed reaches the trace, even if the program was killed */
		err = tp_trace_consumer_flush(c->cons);
		if (err < 0)
			snprintf(r->warning, sizeof(r->warning), "--trace: %s", strerror(-err));
	}
	if (!r->detached) {
		r->wait_status = st;
		r->exited = true;
	}
	r->seconds = tp_count_now() - t0;
	if (c->ctl->state & TP_AGENT_ST_ERROR) {
		c->ctl->error[sizeof(c->ctl->error) - 1] = 0;
		snprintf(r->warning, sizeof(r->warning), "the agent stopped: %s", c->ctl->error);
	} else if (!(c->ctl->state & TP_AGENT_ST_ACTIVE)) {
		snprintf(r->warning, sizeof(r->warning),
			 "the agent never took control (LD_PRELOAD ignored?)");
	}
	collect(c, pid);
	if (r->have_startup)
		snprintf(r->start_note, sizeof(r->start_note),
			 "the first %llu instructions (from execve to %s) were counted by "
			 "ptrace stepping",
			 (unsigned long long)r->startup,
			 to_entry ? "the program's entry point" : "the agent's constructor");
	return 0;
}

/* ---- -p PID: the agent injected into a running process ---- */

/* Set (@on) or clear TF in every stopped task; a task that blocks SIGTRAP gets it unblocked,
 * since a trap with SIGTRAP blocked kills (the kernel resets the handler). */
static int set_tf_all(struct tp_proc *p, bool on)
{
	pid_t tids[TASKS_MAX];
	int n = tp_proc_tasks(p, tids, TASKS_MAX), err = 0;

	if (n > TASKS_MAX)
		return -E2BIG;
	for (int i = 0; i < n; i++) {
		struct user_regs_struct regs;
		uint64_t mask;
		int e = tp_proc_get_regs(tids[i], &regs);

		if (e == -ESRCH)
			continue;
		if (!e && !!(regs.eflags & TP_ARCH_EFLAGS_TF) != on) {
			regs.eflags ^= TP_ARCH_EFLAGS_TF;
			e = tp_proc_set_regs(tids[i], &regs);
		}
		if (!e && on && !tp_proc_get_sigmask(tids[i], &mask) &&
		    (mask & (1ull << (SIGTRAP - 1))))
			e = tp_proc_set_sigmask(tids[i], mask & ~(1ull << (SIGTRAP - 1)));
		if (e && e != -ESRCH && !err)
			err = e;
	}
	return err;
}

static int find_loader(struct tp_count_ctx *c, struct tp_proc_dl *dl)
{
	int err = tp_symtab_load_pid(c->syms, c->pid);

	if (!err)
		err = tp_symtab_find_symbol(c->syms, "libc:dlopen", &dl->dlopen);
	if (!err)
		err = tp_symtab_find_symbol(c->syms, "libc:dlsym", &dl->dlsym);
	if (!err && tp_symtab_find_symbol(c->syms, "libc:dlerror", &dl->dlerror))
		dl->dlerror = 0;
	if (err == -ENOENT)
		snprintf(c->error, sizeof(c->error),
			 "-p %d: no dlopen in the process's libc (glibc 2.34 or later is needed to "
			 "load the agent); use --engine ptrace",
			 (int)c->pid);
	return err;
}

/* Load the agent, hand it the control block, give every thread TF. */
static int agent_attach(struct tp_count_ctx *c, struct tp_proc *p, char *agent, uint64_t *detach_pc)
{
	struct tp_proc_agent a = {.agent = c->o->agent,
				  .entry = "tracepad_agent_attach",
				  .fd = c->ctl_fd,
				  .error = c->ctl->error,
				  .error_len = sizeof(c->ctl->error)};
	struct tp_proc_dl dl;
	char why[512];
	int err = find_loader(c, &dl);

	if (err)
		return err;
	err = tp_proc_load_agent(p, c->pid, &dl, &a, why, sizeof(why));
	if (err) {
		snprintf(c->error, sizeof(c->error), "-p %d: %s", (int)c->pid, why);
		return err;
	}
	memcpy(agent, a.path, PATH_MAX);
	/* written by the agent: trusted only inside its own text */
	*detach_pc = c->ctl->detach_pc;
	if (!tp_proc_agent_mapped(c->pid, agent, *detach_pc)) {
		snprintf(c->error, sizeof(c->error), "-p %d: the agent gave no detach entry",
			 (int)c->pid);
		return -EIO;
	}
	return set_tf_all(p, true);
}

static int tf_off(void *p)
{
	return set_tf_all(p, false);
}

/* Disable the agent: once no thread is inside its handlers, it unmaps the control block;
 * then TF goes from every thread.  @p has every task stopped. */
static int agent_detach(struct tp_count_ctx *c, struct tp_proc *p, uint64_t detach_pc,
			const char *agent)
{
	pid_t tid = tp_proc_loader_task(p, c->pid);
	uint64_t busy = 0;
	int err;

	/* after an execve, the agent and its TF are gone with the old image */
	if (!tp_proc_agent_mapped(c->pid, agent, detach_pc))
		return 0;
	/* first, so that the injected call is not stepped; again after each run: a thread
	 * inside the agent's handler finishes it (it blocks on nothing) */
	err = set_tf_all(p, false);
	if (!err)
		err = tp_proc_inject_until_out(p, c->pid, tid, detach_pc, DETACH_ROUNDS, tf_off, p,
					       &busy);
	if (!err && (int64_t)busy > 0)
		snprintf(c->r->warning, sizeof(c->r->warning),
			 "a thread stayed inside the agent's handler: its control block stays "
			 "mapped in the program");
	return set_tf_all(p, false) ? -EIO : err;
}

/* Count until --duration, SIGINT or the end of the process; true when it ended. */
static bool wait_counted(struct tp_count_ctx *c)
{
	int pfd = (int)syscall(SYS_pidfd_open, c->pid, 0);
	bool ended = false;

	while (!(c->stop && *c->stop)) {
		struct pollfd pf = {.fd = pfd, .events = POLLIN};

		if (pfd < 0 ? kill(c->pid, 0) && errno == ESRCH : poll(&pf, 1, 20) > 0) {
			ended = true;
			break;
		}
		if (pfd < 0)
			usleep(20000);
		tp_count_progress(c, agent_total(c));
	}
	if (pfd >= 0)
		close(pfd);
	return ended;
}

int tp_count_attach_trapflag(struct tp_count_ctx *c)
{
	struct tp_count_result *r = c->r;
	char agent[PATH_MAX];
	uint64_t detach_pc = 0;
	struct tp_proc *p;
	double t0;
	int err, e2;

	c->ctl->mode = TP_AGENT_COUNT;
	err = tp_proc_attach(c->pid, 0, &p);
	if (err)
		return err;
	err = agent_attach(c, p, agent, &detach_pc);
	if (err) {
		/* the agent, if loaded, never counted: nothing of it runs */
		set_tf_all(p, false);
		tp_proc_detach(p);
		return err;
	}
	t0 = tp_count_now();
	err = tp_proc_detach(p);
	if (err)
		return err;
	snprintf(r->start_note, sizeof(r->start_note),
		 "counted from the moment the agent was injected");
	r->detached = true;
	if (wait_counted(c)) {
		snprintf(r->warning, sizeof(r->warning),
			 "the program ended while counted (its exit status is its parent's)");
	} else {
		err = tp_proc_attach(c->pid, 0, &p);
		if (!err) {
			err = agent_detach(c, p, detach_pc, agent);
			e2 = tp_proc_detach(p);
			err = err ? err : e2;
		}
		if (err == -ESRCH)
			err = 0; /* it ended as tracepad came back: counted to its end */
		if (err)
			snprintf(c->error, sizeof(c->error),
				 "-p %d: detaching the agent failed: %s", (int)c->pid,
				 strerror(-err));
	}
	r->seconds = tp_count_now() - t0;
	if (c->ctl->state & TP_AGENT_ST_ERROR) {
		c->ctl->error[sizeof(c->ctl->error) - 1] = 0;
		snprintf(r->warning, sizeof(r->warning), "the agent stopped: %s", c->ctl->error);
	}
	collect(c, c->pid);
	return err;
}
