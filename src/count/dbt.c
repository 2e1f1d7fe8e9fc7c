/* The dbt engine of `tracepad count`: the program runs in the code cache of src/dbt from
 * its first instruction after execve, and the runtime's counter (src/dbt/rt-count.c) adds
 * each thread's count to the shared control block when it exits.  For histograms and
 * regions, the counter keeps per-block counters and tables in an area after the control
 * block (dbt/count-abi.h), which tracepad turns into the report's histogram at the end.
 * tracepad only launches, hands over and waits. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "count/count-priv.h"
#include "dbt/count-abi.h"
#include "dbt/dbt.h"
#include "elf/file.h"
#include "elf/symbols.h"
#include "proc/proc.h"

#define MAX_SLOTS (1u << 20)
#define MAX_INSNS (1ull << 23)

/* The block tables' area, after the control block in its memfd. */
struct area {
	struct tp_dbt_counts *a;
	size_t size;
};

static int check_supported(struct tp_count_ctx *c)
{
	if (!c->main_dynamic)
		return 0;
	snprintf(c->error, sizeof(c->error),
		 "the dbt engine needs main's symbol for --start main: use --engine ptrace");
	return -EINVAL;
}

/* Histograms and regions need per-block counters: the area is made and mapped here. */
static int area_new(struct tp_count_ctx *c, struct area *ar, size_t *ctl_size)
{
	struct tp_dbt_counts *a;
	uint64_t slots = 4096, insns = slots + MAX_SLOTS * sizeof(struct tp_dbt_slot),
		 totals = insns + MAX_INSNS * sizeof(struct tp_dbt_insn);
	size_t size = totals + MAX_SLOTS * 8;

	if (c->whole && c->o->by == TP_COUNT_BY_NONE)
		return 0;
	if (ftruncate(c->ctl_fd, (off_t)(c->ctl_size + size)))
		return -errno;
	a = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, c->ctl_fd, (off_t)c->ctl_size);
	if (a == MAP_FAILED)
		return -errno;
	ar->a = a;
	ar->size = size;
	a->magic = TP_DBT_COUNTS_MAGIC;
	a->flags =
	    TP_DBT_CF_BLOCKS | (c->o->start ? TP_DBT_CF_REGION : 0) | (c->api ? TP_DBT_CF_API : 0);
	a->max_slots = MAX_SLOTS;
	a->max_insns = MAX_INSNS;
	a->slots_off = slots;
	a->insns_off = insns;
	a->totals_off = totals;
	*ctl_size = c->ctl_size + size;
	return 0;
}

/* --start and --stop at their run-time addresses: the executable is mapped at the exec
 * stop. */
static int area_region(struct tp_count_ctx *c, struct area *ar)
{
	uint64_t bias = 0;
	int err;

	if (!ar->a || !(ar->a->flags & TP_DBT_CF_REGION))
		return 0;
	err = tp_elf_exe_bias(c->pid, &bias);
	if (err) {
		snprintf(c->error, sizeof(c->error), "cannot find %s's load address", c->path);
		return err;
	}
	ar->a->start_pc = bias + c->start_vaddr;
	ar->a->stop_pc = c->stop_vaddr ? bias + c->stop_vaddr : 0;
	return 0;
}

/* The histogram: each slot's executions times its instructions, at their pcs. */
static void area_collect(struct tp_count_ctx *c, struct area *ar)
{
	struct tp_dbt_counts *a = ar->a;
	struct tp_count_result *r = c->r;
	const struct tp_dbt_slot *s;
	const struct tp_dbt_insn *in;
	const uint64_t *tot;
	uint32_t n;
	uint64_t ni;

	if (!a)
		return;
	s = (const void *)((char *)a + a->slots_off);
	in = (const void *)((char *)a + a->insns_off);
	tot = (const void *)((char *)a + a->totals_off);
	n = __atomic_load_n(&a->nslots, __ATOMIC_ACQUIRE);
	ni = a->ninsns;
	if (n > a->max_slots)
		n = a->max_slots;
	if (ni > a->max_insns)
		ni = a->max_insns;
	for (uint32_t i = 1; i < n; i++) {
		if (!tot[i])
			continue;
		if (s[i].insn + (uint64_t)s[i].n > ni || !s[i].n) {
			r->addr_dropped += tot[i] * (s[i].n ? s[i].n : 1);
			continue;
		}
		for (uint32_t k = 0; k < s[i].n; k++) {
			const struct tp_dbt_insn *e = &in[s[i].insn + k];

			if (e->mnemonic < TP_AGENT_MNEMONICS)
				r->mnemonic[e->mnemonic] += tot[i];
			if (c->o->by >= TP_COUNT_BY_FUNCTION)
				tp_count_addrs_add(&r->addrs, e->pc, tot[i]);
		}
	}
}

/* The program's executable mappings, recorded by the runtime as it ran code there: the
 * program is gone when the histogram's addresses are resolved. */
static void maps_collect(struct tp_count_ctx *c)
{
	struct tp_agent_ctl *ctl = c->ctl;
	struct tp_agent_map *m = (void *)((char *)ctl + ctl->maps_off);
	uint32_t n = ctl->nmaps;

	if (n > ctl->max_maps)
		n = ctl->max_maps;
	for (uint32_t i = 0; i < n; i++) {
		m[i].path[TP_AGENT_PATH_MAX - 1] = 0;
		tp_symtab_add_map(c->syms, m[i].start, m[i].end, m[i].offset, m[i].path);
	}
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
	char fdenv[64], preload[4096];
	char *env[3] = {fdenv, preload, NULL};
	const char *old = getenv("LD_PRELOAD");
	int keep[1] = {c->ctl_fd};
	struct area ar = {0};
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
	t.ctl_size = c->ctl_size;
	err = area_new(c, &ar, &t.ctl_size);
	if (err) {
		snprintf(c->error, sizeof(c->error), "cannot make the block tables: %s",
			 strerror(-err));
		goto out;
	}
	/* as the ptrace engine: a whole program runs with its own environment, nothing of
	 * tracepad mapped by the loader, so that both count the same instructions; regions
	 * have the passive agent preloaded (tracepad_step_*, and the same loader's work) */
	c->ctl->mode = TP_AGENT_PASSIVE;
	snprintf(fdenv, sizeof(fdenv), "%s=%d", TP_AGENT_ENV_FD, c->ctl_fd);
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s%s%s", c->o->agent, old ? ":" : "",
		 old ? old : "");
	if (!c->whole && !c->is_static && c->o->agent)
		l.env_add = env;
	l.argv = c->o->argv;
	l.keep_fds = keep;
	l.nkeep_fds = 1;
	l.cpu = -1;
	l.opts = TP_PROC_TRACE_EXEC;
	t0 = tp_count_now();
	err = tp_proc_launch(&l, &p);
	if (err)
		goto out;
	c->pid = tp_proc_pid(p);
	t.ctl_fd = c->ctl_fd;
	err = area_region(c, &ar);
	if (!err)
		err = tp_dbt_takeover(p, c->pid, &t, c->error, sizeof(c->error));
	if (err) {
		tp_proc_kill(p);
		goto out;
	}
	err = tp_proc_detach(p);
	if (err)
		goto out;
	snprintf(r->start_note, sizeof(r->start_note),
		 "counted from the first instruction after execve (the dynamic loader's entry)");
	while ((w = waitpid(c->pid, &st, 0)) < 0 && errno == EINTR)
		;
	if (w < 0) {
		err = -errno;
		goto out;
	}
	r->wait_status = st;
	r->exited = true;
	r->seconds = tp_count_now() - t0;
	collect(c);
	if (ar.a) {
		area_collect(c, &ar);
		maps_collect(c);
	}
out:
	if (ar.a)
		munmap(ar.a, ar.size);
	return err;
}
