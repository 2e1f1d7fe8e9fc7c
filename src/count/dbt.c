/* The dbt engine of `tracepad count`: the program runs in the code cache of src/dbt from
 * its first instruction after execve, and the runtime adds each thread's count to the
 * shared control block when it exits.  tracepad only launches, hands over and waits. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "count/count-priv.h"
#include "dbt/dbt.h"
#include "elf/file.h"
#include "proc/proc.h"

/* What the dbt engine cannot do yet is refused before the program runs. */
static int check_supported(struct tp_count_ctx *c)
{
	const char *why = NULL;

	if (!c->whole)
		why = "counts whole programs only for now (no --start, --stop or tp_step "
		      "regions)";
	else if (c->o->by != TP_COUNT_BY_NONE)
		why = "has no --by histograms yet";
	else if (c->o->trace_dir)
		why = "has no --trace yet";
	if (!why)
		return 0;
	snprintf(c->error, sizeof(c->error), "the dbt engine %s: use --engine ptrace or trapflag",
		 why);
	return -EINVAL;
}

static void collect(struct tp_count_ctx *c)
{
	struct tp_agent_ctl *ctl = c->ctl;
	struct tp_count_result *r = c->r;
	struct tp_agent_thread *th = (void *)((char *)ctl + ctl->threads_off);
	uint32_t state = __atomic_load_n(&ctl->state, __ATOMIC_ACQUIRE), n = ctl->nthreads;

	/* one slot a thread, in creation order; what did not fit is in the overflow */
	if (n > ctl->max_threads)
		n = ctl->max_threads;
	for (uint32_t i = 0; i < n; i++) {
		if (!th[i].count)
			continue;
		tp_count_add_thread(r, th[i].tid, th[i].count);
		r->total += th[i].count;
	}
	r->overflow = ctl->overflow_count;
	r->total += r->overflow;
	r->exec_seen = state & TP_AGENT_ST_EXEC;
	r->forked = state & TP_AGENT_ST_FORKED;
	if (state & TP_AGENT_ST_ERROR) {
		ctl->error[sizeof(ctl->error) - 1] = 0;
		snprintf(r->warning, sizeof(r->warning),
			 "the code cache stopped: %s; the count is "
			 "of the run up to there",
			 ctl->error);
	} else if (!(state & TP_AGENT_ST_ACTIVE)) {
		snprintf(r->warning, sizeof(r->warning), "the code cache never took control");
	} else if (!r->total && WIFSIGNALED(r->wait_status)) {
		snprintf(r->warning, sizeof(r->warning),
			 "the program was killed before it could report its count");
	}
}

int tp_count_run_dbt(struct tp_count_ctx *c)
{
	int keep[1] = {c->ctl_fd};
	struct tp_launch l = {0};
	struct tp_dbt_takeover t = {0};
	struct tp_count_result *r = c->r;
	struct tp_proc *p;
	double t0;
	int err, st;
	pid_t w;

	err = check_supported(c);
	if (err)
		return err;
	t.runtime = tp_dbt_runtime_path(c->o->agent);
	if (!t.runtime) {
		snprintf(c->error, sizeof(c->error),
			 "cannot find tracepad-dbt-rt.so next to the agent (set TRACEPAD_DBT_RT)");
		return -ENOENT;
	}
	/* as the ptrace engine's whole-program count: the program's own environment, nothing
	 * of tracepad mapped by the loader, so that both count the same instructions */
	c->ctl->mode = TP_AGENT_PASSIVE;
	l.argv = c->o->argv;
	l.keep_fds = keep;
	l.nkeep_fds = 1;
	l.cpu = -1;
	l.opts = TP_PROC_TRACE_EXEC;
	t0 = tp_count_now();
	err = tp_proc_launch(&l, &p);
	if (err)
		return err;
	c->pid = tp_proc_pid(p);
	t.ctl_fd = c->ctl_fd;
	t.ctl_size = c->ctl_size;
	err = tp_dbt_takeover(p, c->pid, &t, c->error, sizeof(c->error));
	if (err) {
		tp_proc_kill(p);
		return err;
	}
	err = tp_proc_detach(p);
	if (err)
		return err;
	snprintf(r->start_note, sizeof(r->start_note),
		 "counted from the first instruction after execve (the dynamic loader's entry)");
	while ((w = waitpid(c->pid, &st, 0)) < 0 && errno == EINTR)
		;
	if (w < 0)
		return -errno;
	r->wait_status = st;
	r->exited = true;
	r->seconds = tp_count_now() - t0;
	collect(c);
	return 0;
}
