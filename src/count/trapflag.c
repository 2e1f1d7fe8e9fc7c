/* The trapflag engine of `tracepad count`: libtracepad-agent.so steps the program from
 * inside with EFLAGS.TF and SIGTRAP, and keeps its counts in the shared control block.
 * For a whole-program count, the start-up before the agent's constructor (ld.so, libc's
 * initialisation) is stepped by the ptrace engine first and reported apart. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "count/count-priv.h"
#include "elf/symbols.h"
#include "proc/proc.h"

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

int tp_count_run_trapflag(struct tp_count_ctx *c)
{
	struct tp_count_result *r = c->r;
	pid_t pid;
	double t0 = tp_count_now();
	int st = 0, err;

	if (c->is_static) {
		snprintf(c->error, sizeof(c->error),
			 "%s is statically linked: the trapflag engine needs the agent preloaded; "
			 "use --engine ptrace",
			 c->path);
		return -EINVAL;
	}
	c->ctl->mode = TP_AGENT_COUNT;
	if (c->whole && !c->o->no_startup)
		c->ctl->flags |= TP_CTL_SYNC;
	/* with SYNC, the start-up is stepped by ptrace until the agent's int3; otherwise the
	 * program is let go at its first instruction */
	err = tp_count_launch_ptrace(c, true, c->whole && !c->o->no_startup);
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
			 "the first %llu instructions (from execve to the agent's constructor) "
			 "were counted by ptrace stepping",
			 (unsigned long long)r->startup);
	return 0;
}
