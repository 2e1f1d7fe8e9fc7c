/* The dbt engine of `tracepad count`: the program runs in the code cache of src/dbt from
 * its first instruction after execve, and the runtime's counter (src/dbt/rt-count.c) adds
 * each thread's count to the shared control block when it exits.  For histograms and
 * regions, the counter keeps per-block counters and tables in an area after the control
 * block (dbt/count-abi.h), which tracepad turns into the report's histogram at the end.
 * tracepad only launches, hands over and waits. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "count/count-priv.h"
#include "dbt/count-abi.h"
#include "dbt/dbt.h"
#include "dbt/rt-abi.h"
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

/* --start main of a stripped program: the ptrace engine learns main's address from
 * __libc_start_main's first argument; here it is decoded from the entry code before the
 * start (the runtime's region begins at a pc known at translation). */
static int check_supported(struct tp_count_ctx *c)
{
	uint64_t at;

	if (!c->main_dynamic)
		return 0;
	if (!tp_elf_find_main(c->path, &at)) {
		c->start_vaddr = at;
		c->main_dynamic = false;
		c->ctl->start_vaddr = at;
		c->ctl->flags &= ~(uint32_t)TP_CTL_MAIN_DYNAMIC;
		return 0;
	}
	snprintf(c->error, sizeof(c->error),
		 "--start main: main's address is not in %s's symbols nor in its entry code "
		 "(use --engine ptrace)",
		 c->path);
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

/* ---- execve, followed ----
 *
 * The count goes on in the image an execve of the counted process starts
 * (tp_count_follows_exec): the runtime asks (ctl->exec_tid), tracepad attaches to the
 * process, answers, and at the exec stop takes the new image over as it took the first. */
static void futex_wake(int32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void on_tick(int sig)
{
	(void)sig;
}

/* tp_proc_wait() wakes every 10 ms meanwhile, to see a failed execve or a signal to us;
 * SIGALRM's action and mask are put back after. */
static void tick(struct tp_proc *p, bool on)
{
	static struct sigaction old;
	static sigset_t old_mask;
	struct itimerval it = {{0, on ? 10000 : 0}, {0, on ? 10000 : 0}};
	struct sigaction sa = {.sa_handler = on_tick};
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGALRM);
	if (on) {
		sigprocmask(SIG_BLOCK, &set, &old_mask);
		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, &old);
		tp_proc_set_wait_signal(p, SIGALRM);
	}
	setitimer(ITIMER_REAL, &it, NULL);
	if (!on) {
		sigaction(SIGALRM, &old, NULL);
		sigprocmask(SIG_SETMASK, &old_mask, NULL);
	}
}

/* The block tables of the image that exec'd, folded into the result; the new image's
 * runtime numbers its blocks from 1 again. */
static void area_next_image(struct tp_count_ctx *c, struct area *ar)
{
	struct tp_dbt_counts *a = ar->a;
	uint32_t n;

	if (!a)
		return;
	area_collect(c, ar);
	n = a->nslots < a->max_slots ? a->nslots : a->max_slots;
	memset((char *)a + a->totals_off, 0, (size_t)n * 8);
	a->nslots = 0;
	a->ninsns = 0;
}

/* The runtime asked for the execve of thread @tid: attach, answer, and take the new image
 * over at its exec stop (or let go if the call fails).  *@ended when the process ended
 * meanwhile (its wait status in *@st). */
static int follow_exec(struct tp_count_ctx *c, struct area *ar, struct tp_dbt_takeover *t,
		       int32_t tid, bool *ended, int *st)
{
	struct tp_agent_ctl *ctl = c->ctl;
	struct tp_proc *p;
	struct tp_event ev;
	struct tp_agent_thread *th = (void *)((char *)ctl + ctl->threads_off);
	int err = tp_proc_attach(c->pid, TP_PROC_TRACE_EXEC, &p);

	/* the runtime flushed every count before it asked: the image's blocks go with it (a
	 * new image's runtime makes its blocks at the same addresses) */
	for (uint32_t i = 0; i < ctl->nthreads && i < ctl->max_threads; i++)
		__atomic_store_n(&th[i].block, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&ctl->exec_ack, err ? -1 : tid, __ATOMIC_RELEASE);
	futex_wake(&ctl->exec_ack);
	if (err) {
		snprintf(c->r->warning, sizeof(c->r->warning),
			 "the program called execve and tracepad could not attach to follow it "
			 "(%s): the new image is not counted",
			 strerror(-err));
		return 0;
	}
	tick(p, true);
	err = tp_proc_resume_all(p);
	while (!err) {
		err = tp_proc_wait(p, &ev);
		if (err == -EINTR) {
			int32_t again = __atomic_load_n(&ctl->exec_tid, __ATOMIC_ACQUIRE);

			err = 0;
			if (again > 0 && !__atomic_load_n(&ctl->exec_ack, __ATOMIC_ACQUIRE)) {
				/* another execve after a failed one (execvp's next path): still
				 * attached, it is answered at once */
				__atomic_store_n(&ctl->exec_ack, again, __ATOMIC_RELEASE);
				futex_wake(&ctl->exec_ack);
				continue;
			}
			if (__atomic_exchange_n(&ctl->exec_failed, 0, __ATOMIC_ACQUIRE) ||
			    (c->stop && *c->stop))
				break; /* the program goes on in this image */
			continue;
		}
		if (err)
			break;
		switch (ev.kind) {
		case TP_EV_EXEC:
			area_next_image(c, ar);
			err = tp_dbt_takeover(p, c->pid, t, c->error, sizeof(c->error));
			if (err) {
				/* the new image runs natively, from its first instruction */
				snprintf(c->r->warning, sizeof(c->r->warning),
					 "the new image of an execve could not be taken over "
					 "(%.200s): it "
					 "is not counted",
					 c->error);
				c->error[0] = 0;
				err = 0;
			}
			goto out;
		case TP_EV_EXITED:
			if (ev.leader) {
				*ended = true;
				*st = ev.status;
				tick(p, false);
				tp_proc_free(p);
				return 0;
			}
			break;
		case TP_EV_SIGNAL:
			err = tp_proc_resume(p, ev.tid, TP_RESUME_CONT, ev.sig);
			break;
		default:
			err = tp_proc_resume(p, ev.tid, TP_RESUME_CONT, 0);
			break;
		}
	}
out:
	tick(p, false);
	{
		int e = tp_proc_detach(p);

		return err ? err : e;
	}
}

/* What a thread still running in the cache counted since its last flush, read from its
 * block in the program (0 when it cannot be read, or is no longer a block there). */
static uint64_t unflushed(pid_t pid, uint64_t block)
{
	uint64_t b[TP_DBT_T_FLUSHED / 8 + 1], n = 0;
	struct iovec here = {b, sizeof(b)}, there = {(void *)(uintptr_t)block, sizeof(b)};

	if (!block || process_vm_readv(pid, &here, 1, &there, 1, 0) != (ssize_t)sizeof(b) ||
	    b[TP_DBT_T_SELF / 8] != block)
		return 0;
	for (int k = 0; k < TP_DBT_NCELLS; k++)
		n += b[TP_DBT_CELL_OFF(k) / 8];
	return n > b[TP_DBT_T_FLUSHED / 8] ? n - b[TP_DBT_T_FLUSHED / 8] : 0;
}

/* The counts the threads flushed into the control block; with @running (tracepad leaves a
 * program that goes on), those of the threads still running too, as far as they are. */
static void collect(struct tp_count_ctx *c, bool running)
{
	struct tp_agent_ctl *ctl = c->ctl;
	struct tp_count_result *r = c->r;
	struct tp_agent_thread *th = (void *)((char *)ctl + ctl->threads_off);
	uint32_t state = __atomic_load_n(&ctl->state, __ATOMIC_ACQUIRE), n = ctl->nthreads;

	/* one slot a thread, in creation order; what did not fit is in the overflow */
	if (n > ctl->max_threads)
		n = ctl->max_threads;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t k = __atomic_load_n(&th[i].count, __ATOMIC_ACQUIRE);

		if (running)
			k += unflushed(c->pid, __atomic_load_n(&th[i].block, __ATOMIC_ACQUIRE));
		if (!k)
			continue;
		tp_count_add_thread(r, th[i].tid, k);
		r->total += k;
	}
	r->overflow = ctl->overflow_count;
	r->total += r->overflow;
	r->exec_seen = state & TP_AGENT_ST_EXEC;
	r->exec_followed = state & TP_AGENT_ST_EXEC_FOLLOWED;
	r->forked = state & TP_AGENT_ST_FORKED;
	if (state & TP_AGENT_ST_ERROR) {
		ctl->error[sizeof(ctl->error) - 1] = 0;
		snprintf(r->warning, sizeof(r->warning),
			 "the code cache stopped: %s; the count is "
			 "of the run up to there",
			 ctl->error);
	} else if (!(state & TP_AGENT_ST_ACTIVE)) {
		snprintf(r->warning, sizeof(r->warning), "the code cache never took control");
	} else if (WIFSIGNALED(r->wait_status)) {
		/* a thread's count reaches the control block as it ends; a kill ends the
		 * threads alive then without it */
		snprintf(r->warning, sizeof(r->warning),
			 r->total ? "the program was killed by a signal: the threads still running "
				    "then are not counted"
				  : "the program was killed before it could report its count");
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
	bool ended = false;
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
	/* bench/dbt's measure of what publishing the mapping repository costs */
	if (getenv("TRACEPAD_DBT_PUBLISH") && !strcmp(getenv("TRACEPAD_DBT_PUBLISH"), "0"))
		t.boot_flags |= TP_DBT_BOOT_UNPUBLISHED;
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
	/* the preloaded agent reads the block from its fd; else the program's fds are its own */
	t.close_fd = !l.env_add;
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
	/* Polled, so that a signal to tracepad (c->stop) ends the wait at once: the program
	 * runs on in the cache to its own end, and the report is what its ended threads
	 * folded so far.  Between polls, a wait for the runtime's word of an execve. */
	c->ctl->tracer_pid = (int32_t)getpid();
	c->ctl->exec_follow = tp_count_follows_exec(c);
	while (!ended && !(c->stop && *c->stop)) {
		struct timespec ts = {0, 10 * 1000 * 1000};
		int32_t tid = __atomic_load_n(&c->ctl->exec_tid, __ATOMIC_ACQUIRE);

		if (tid > 0 && c->ctl->exec_follow && !c->ctl->exec_ack) {
			err = follow_exec(c, &ar, &t, tid, &ended, &st);
			if (err || ended)
				break;
			continue;
		}
		w = waitpid(c->pid, &st, WNOHANG);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			err = -errno;
			goto out;
		}
		ended = w && (WIFEXITED(st) || WIFSIGNALED(st));
		if (!w)
			syscall(SYS_futex, &c->ctl->exec_tid, FUTEX_WAIT, 0, &ts, NULL, 0);
	}
	/* an execve from here on runs natively at once, without waiting for an answer */
	c->ctl->exec_follow = 0;
	if (err)
		goto out;
	if (!ended) {
		/* with block tables, what a running thread counted is in its own counters (and
		 * the tables) until it flushes them: only a plain count reads it so far */
		r->detached = true;
		snprintf(r->warning, sizeof(r->warning), "%s",
			 ar.a ? "interrupted: the threads still running were not counted"
			      : "interrupted: the threads still running are counted up to here");
	} else {
		r->wait_status = st;
		r->exited = true;
	}
	r->seconds = tp_count_now() - t0;
	collect(c, !ended && !ar.a);
	if (ar.a) {
		area_collect(c, &ar);
		maps_collect(c);
	}
out:
	if (ar.a)
		munmap(ar.a, ar.size);
	return err;
}
