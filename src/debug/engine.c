/* The interposer's engine: what gdb sees of a program that runs in the code cache, after
 * seed 003's debug specifications.  Stops are reported at program instructions only (a
 * stop in hidden code is stepped ahead), registers read back as program values (cache pc
 * -> program pc, pc - 1 after a breakpoint) and written back mapped into the cache,
 * breakpoint bytes gdb writes into the text go to the breakpoint repository (every cache
 * copy, now and later), and reads of the text give back what gdb wrote. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <elf.h>
#include <limits.h>
#include <unistd.h>

#include "base/log.h"
#include "dbt/dbt.h"
#include "dbt/map.h"
#include "dbt/rt-abi.h"
#include "debug/debug.h"
#include "debug/engine-priv.h"
#include "proc/inject.h"
#include "proc/proc.h"

#define MAX_THREADS 512
#define MAX_PROCS 16
#define INT3 0xcc
#define EFLAGS_TF 0x100
#define DR6_OFF (offsetof(struct user, u_debugreg) + 6 * 8)
/* Single-steps of one roll-ahead before it is given up (the runtime translating a block
 * takes thousands). */
#define ROLL_MAX 2000000

struct dthr {
	pid_t tid; /* 0: free */
	struct dproc *pr;
	bool stepping;	/* gdb single-stepped it */
	bool at_bp;	/* stopped after an int3 of a breakpoint at a site */
	bool fake_exec; /* stopped at its first instruction in the cache, shown as its exec stop */
	bool si_shown;	/* GETSIGINFO gives @si (the exec's, or a step's after a run ahead) */
	bool at_hw;	/* stopped on the site of an execute breakpoint of its debug registers */
	uint64_t hw_over; /* that breakpoint, lifted while it steps over its instruction */
	int hw_cont;	  /* and then gdb's request: PTRACE_CONT or SYSCALL (0: a step) */
	int resumed;	  /* how gdb resumed it last: PTRACE_CONT or SYSCALL */
	struct user_regs_struct exec_regs;
	siginfo_t si;
};

static struct dproc procs[MAX_PROCS];
static struct dthr thrs[MAX_THREADS];

static struct dthr *thr_find(pid_t tid)
{
	for (int i = 0; i < MAX_THREADS; i++)
		if (thrs[i].tid == tid)
			return &thrs[i];
	return NULL;
}

static struct dthr *thr_add(pid_t tid, struct dproc *pr)
{
	for (int i = 0; i < MAX_THREADS; i++)
		if (!thrs[i].tid) {
			memset(&thrs[i], 0, sizeof(thrs[i]));
			thrs[i].tid = tid;
			thrs[i].pr = pr;
			return &thrs[i];
		}
	return NULL;
}

static struct dproc *proc_find(pid_t pid)
{
	for (int i = 0; i < MAX_PROCS; i++)
		if (procs[i].pid == pid)
			return &procs[i];
	return NULL;
}

/* @tid's state; a thread of a program in the cache met for the first time (gdb attached it
 * at its creation) is added. */
static struct dthr *thr_get(pid_t tid)
{
	struct dthr *t = thr_find(tid);
	struct dproc *pr;
	int tgid, any = 0;

	for (int i = 0; i < MAX_PROCS; i++)
		any |= procs[i].pid != 0;
	if (t || !any)
		return t;
	tgid = tp_proc_tgid(tid);
	if (tgid > 0 && (pr = proc_find(tgid)) && pr->map)
		return thr_add(tid, pr);
	return NULL;
}

struct dproc *tp_debug_proc_of(pid_t pid)
{
	struct dthr *t = thr_find(pid);

	return t ? t->pr : proc_find(pid);
}

static void proc_forget(struct dproc *pr)
{
	tp_debug_dr_forget(pr, false);
	for (int i = 0; i < MAX_THREADS; i++)
		if (thrs[i].pr == pr)
			thrs[i].tid = 0;
	tp_dbt_map_close(pr->map);
	pr->map = NULL;
	pr->pid = 0;
}

static char *rt_path; /* $TRACEPAD_DEBUG_RT, taken out of the environment */

void tp_debug_init(void)
{
	const char *rt = getenv(TP_DEBUG_ENV_RT);

	/* the program gets the environment it would have without tracepad */
	if (rt && *rt)
		rt_path = strdup(rt);
	unsetenv(TP_DEBUG_ENV_RT);
	tp_debug_ctl_init();
}

void tp_debug_fini(void)
{
	tp_debug_ctl_fini();
}

/* ---- registers ---- */

static bool in_runtime(uint64_t a)
{
	return a >= TP_DBT_REGION && a < TP_DBT_SPACE_END;
}

/* A thread stopped in the runtime's own code (a dispatch, a translation, a system call's
 * gate: gdb stopped it there, or a signal came): where the program goes on is the thread's
 * NEXT slot (the entry's argument, then its result: a cache address, or an indirect branch's
 * program target).  On the thread's runtime stack, the program's registers are the frame its
 * entry pushes at the stack's top (gs:STACK), as far as it is pushed or not popped yet (at
 * and above rsp; below it the registers are the program's), its rsp in gs:PRSP and its rax in
 * gs:RAX while not in the frame (rt-entry.S); elsewhere rax holds the entry's or a lookup's
 * argument, the program's in gs:RAX.  True when @r was so replaced. */
static bool runtime_regs(const struct dthr *t, struct user_regs_struct *r)
{
	/* struct tp_dbt_frame's order; its last word, rsp, is PRSP's */
	unsigned long long *reg[16] = {&r->r15, &r->r14, &r->r13, &r->r12,   &r->r11, &r->r10,
				       &r->r9,	&r->r8,	 &r->rdi, &r->rsi,   &r->rbp, &r->rbx,
				       &r->rdx, &r->rcx, &r->rax, &r->eflags};
	uint64_t blk = r->gs_base, next, stack, prsp, rax, f[17], at, real_rax = r->rax;
	struct tp_dbt_pc m;

	if (!in_runtime(blk) || tp_proc_read(t->tid, blk + TP_DBT_T_NEXT, &next, 8) != 8 ||
	    tp_proc_read(t->tid, blk + TP_DBT_T_STACK, &stack, 8) != 8 ||
	    tp_proc_read(t->tid, blk + TP_DBT_T_PRSP, &prsp, 8) != 8 ||
	    tp_proc_read(t->tid, blk + TP_DBT_T_RAX, &rax, 8) != 8)
		return false;
	if (!tp_dbt_map_to_program(t->pr->map, next, &m) && m.kind != TP_DBT_PC_RUNTIME)
		r->rip = m.pc;
	else if (next && !in_runtime(next))
		r->rip = next;
	else
		return false;
	r->rax = rax;
	at = stack - sizeof(f);
	if (r->rsp <= blk && blk - r->rsp <= TP_DBT_T_STACK_SIZE &&
	    tp_proc_read(t->tid, at, f, sizeof(f)) == sizeof(f)) {
		uint64_t nr = f[14], arg = 0;
		uint8_t insn[2] = {0};

		for (int i = 0; i < 16; i++)
			if (at + 8 * (uint64_t)i >= r->rsp)
				*reg[i] = f[i];
		r->rsp = prsp;
		/* stopped in a system call the runtime makes for the program's own (a fork's
		 * ptrace event): as natively, after its syscall, rax as the kernel has it */
		if ((m.kind == TP_DBT_PC_INSN || m.kind == TP_DBT_PC_INSIDE) && r->orig_rax == nr &&
		    tp_proc_read(t->tid, blk + TP_DBT_T_ARG, &arg, 8) == 8 &&
		    arg == TP_DBT_GATE_SYSCALL && tp_proc_read(t->tid, m.pc, insn, 2) == 2 &&
		    insn[0] == 0x0f && insn[1] == 0x05) {
			r->rip = r->rcx = m.pc + 2;
			r->r11 = r->eflags;
			r->rax = real_rax;
		}
	}
	return true;
}

/* The program's view of the registers @r of @t (the real ones): the seed's Read Register. */
static void regs_shown(const struct dthr *t, struct user_regs_struct *r)
{
	struct tp_dbt_pc m;

	if (t->at_bp && !tp_dbt_map_to_program(t->pr->map, r->rip - 1, &m) &&
	    m.kind == TP_DBT_PC_INSN)
		r->rip = m.pc + 1;
	else if (!tp_dbt_map_to_program(t->pr->map, r->rip, &m) && m.kind != TP_DBT_PC_RUNTIME)
		r->rip = m.pc;
	else if (in_runtime(r->rip))
		runtime_regs(t, r);
	/* the runtime's %gs, and its private TCB before the program has TLS */
	if (in_runtime(r->fs_base))
		r->fs_base = 0;
	if (in_runtime(r->gs_base))
		r->gs_base = 0;
	r->eflags &= ~(unsigned long long)EFLAGS_TF;
	if (t->fake_exec) {
		r->orig_rax = t->exec_regs.orig_rax;
		r->eflags = t->exec_regs.eflags;
	}
}

/* ---- the x87 and SSE registers ---- */

/* The legacy region of an fxsave64 image (the start of XSAVE's too): x87, mxcsr and
 * xmm0-15.  The kernel puts XCR0 and the XSAVE layout (which gdb reads) in the bytes after
 * it, 464-511, so those are never replaced. */
#define FX_SIZE 512
#define FX_REGS 416
#define XSTATE_BV 512 /* XSAVE header: the components present (bit 0 x87, bit 1 SSE) */

/* Where the program's x87 and SSE registers are while @t (real registers @r) runs the
 * runtime's C code: the entry (rt-entry.S) saved them with fxsave64 below the frame it
 * pushed, at (gs:FRAME - 512) & -64, and C may use xmm registers.  0 when the live registers
 * are the program's: in cache code, in the runtime's lookups, in an entry before its
 * fxsave64 or after its fxrstor64. */
static uint64_t fx_saved_at(const struct dthr *t, const struct user_regs_struct *r)
{
	/* what an entry runs between its C call's return and fxrstor64 (rsp on the image) */
	static const uint8_t set_next[] = {0x65, 0x48, 0x89, 0x04, 0x25, TP_DBT_T_NEXT, 0, 0, 0};
	static const uint8_t fxrstor[] = {0x48, 0x0f, 0xae, 0x0c, 0x24};
	uint64_t blk = r->gs_base, frame, stack, at;
	uint8_t insn[sizeof(set_next)];

	if (!in_runtime(r->rip) || !in_runtime(blk) ||
	    tp_proc_read(t->tid, blk + TP_DBT_T_FRAME, &frame, 8) != 8 ||
	    tp_proc_read(t->tid, blk + TP_DBT_T_STACK, &stack, 8) != 8)
		return 0;
	at = (frame - FX_SIZE) & ~63ull;
	/* a frame on the thread's runtime stack, rsp at the image or below it (in the call) */
	if (!frame || frame > stack || stack - frame > TP_DBT_T_STACK_SIZE || r->rsp > at ||
	    at - r->rsp > TP_DBT_T_STACK_SIZE)
		return 0;
	if (r->rsp < at)
		return at;
	if (tp_proc_read(t->tid, r->rip, insn, sizeof(insn)) != (ssize_t)sizeof(insn))
		return 0;
	if (!memcmp(insn, set_next, sizeof(set_next)) || !memcmp(insn, fxrstor, sizeof(fxrstor)))
		return at;
	return 0;
}

/* The program's view of @t's x87/SSE registers in @buf (@len bytes, as PTRACE_GETFPREGS or
 * GETREGSET of NT_PRFPREG or NT_X86_XSTATE gave them), after the seed's Read Register: what
 * the runtime's entry saved while the thread is in its C code.  The AVX halves and AVX-512
 * registers are the live ones: the runtime's code uses no VEX instruction. */
static void fp_shown(const struct dthr *t, uint8_t *buf, size_t len, bool xstate)
{
	struct user_regs_struct r;
	uint8_t fx[FX_REGS];
	uint64_t at;

	if (len < FX_SIZE || tp_proc_get_regs(t->tid, &r) || !(at = fx_saved_at(t, &r)) ||
	    tp_proc_read(t->tid, at, fx, sizeof(fx)) != (ssize_t)sizeof(fx))
		return;
	memcpy(buf, fx, sizeof(fx));
	if (xstate && len >= XSTATE_BV + 8)
		buf[XSTATE_BV] |= 3;
}

/* gdb writes @t's x87/SSE registers (ptrace @req, @addr, @buf of @len bytes): into the
 * saved image while the thread is in the runtime's C code, which puts them back as it
 * leaves, the live registers keeping the runtime's.  False when the real call is to be
 * made as it is. */
static bool fp_write(const struct dthr *t, int req, void *addr, const uint8_t *buf, size_t len,
		     long *ret)
{
	struct user_regs_struct r;
	struct iovec iov;
	uint8_t *live;
	uint64_t at;
	int err;

	if (len < FX_SIZE || tp_proc_get_regs(t->tid, &r) || !(at = fx_saved_at(t, &r)))
		return false;
	if (!(live = malloc(len))) {
		*ret = -1;
		errno = ENOMEM;
		return true;
	}
	iov = (struct iovec){live, len};
	*ret = req == PTRACE_SETFPREGS ? ptrace(PTRACE_GETFPREGS, t->tid, 0, live)
				       : ptrace(PTRACE_GETREGSET, t->tid, addr, &iov);
	if (!*ret) {
		memcpy(live + FX_REGS, buf + FX_REGS, len - FX_REGS);
		*ret = req == PTRACE_SETFPREGS ? ptrace(PTRACE_SETFPREGS, t->tid, 0, live)
					       : ptrace(PTRACE_SETREGSET, t->tid, addr, &iov);
	}
	/* the kernel took the rest: the saved image too */
	if (!*ret && (err = tp_proc_write(t->tid, at, buf, FX_REGS))) {
		*ret = -1;
		errno = -err;
	}
	err = errno;
	free(live);
	errno = err;
	return true;
}

/* Registers @want that gdb writes, as the cache needs them (the seed's Write Register): a
 * pc written back unchanged or set back onto a breakpoint keeps its place in the cache,
 * another goes to a cache copy of the instruction there. */
static int regs_write(struct dthr *t, const struct user_regs_struct *want)
{
	struct user_regs_struct real, shown, w = *want;
	uint64_t enter = 0, ibl;
	int err = tp_proc_get_regs(t->tid, &real);

	if (err)
		return err;
	shown = real;
	regs_shown(t, &shown);
	if (in_runtime(real.rip) && shown.rip != real.rip) {
		/* its registers are in the runtime's frame: written back unchanged, nothing to do
		 */
		if (!memcmp(&w, &shown, sizeof(w)))
			return 0;
		tp_warn("the registers of thread %d cannot be changed while it is in the code "
			"cache's runtime",
			(int)t->tid);
		return -EBUSY;
	}
	if (w.rip == shown.rip) {
		w.rip = real.rip;
	} else if (t->at_bp && w.rip == shown.rip - 1) {
		w.rip = real.rip - 1;
	} else {
		struct tp_dbt_copy c[8];
		size_t n = tp_dbt_map_copies(t->pr->map, w.rip, c, 8), i;

		for (i = 0; i < n && i < 8 && c[i].stale; i++)
			;
		if (i < n && i < 8)
			w.rip = c[i].cache;
		else
			enter = w.rip; /* not translated yet: through the runtime's lookup */
	}
	if (w.fs_base == shown.fs_base)
		w.fs_base = real.fs_base;
	if (w.gs_base == shown.gs_base)
		w.gs_base = real.gs_base;
	if (w.orig_rax == shown.orig_rax)
		w.orig_rax = real.orig_rax;
	if (w.eflags == shown.eflags)
		w.eflags = real.eflags & ~(unsigned long long)EFLAGS_TF;
	if (enter) {
		/* the seed's last case, without leaving the cache: the thread enters the
		 * runtime's indirect branch lookup as an indirect jump there would (rax = the
		 * target, the program's rax in its slot), which translates the code */
		if (tp_proc_read(t->tid, real.gs_base + TP_DBT_T_IBL, &ibl, 8) != 8 ||
		    (err = tp_proc_write(t->tid, real.gs_base + TP_DBT_T_RAX, &w.rax, 8)) ||
		    (err = tp_proc_write(t->tid, real.gs_base + TP_DBT_T_NEXT, &enter, 8)))
			return err ? err : -EIO;
		w.rax = enter;
		w.rip = ibl;
		tp_dbg("pc set to 0x%llx, not translated: through the lookup",
		       (unsigned long long)enter);
	}
	if (w.rip != real.rip)
		t->at_bp = t->at_hw = false;
	t->fake_exec = false;
	return tp_proc_set_regs(t->tid, &w);
}

/* ---- taking a program over at its exec ---- */

static const char *runtime_path(void)
{
	return rt_path;
}

/* @pid stopped at its exec (the SIGTRAP of a PTRACE_TRACEME child, no options set): load
 * the runtime, run it to the program's first instruction in the cache (an int3 there, set
 * through the boot record), and leave it stopped there, shown as the exec stop. */
static int takeover(pid_t pid)
{
	struct tp_dbt_takeover o = {.boot_flags =
					TP_DBT_BOOT_BREAK_ENTRY | TP_DBT_BOOT_EXACT_FLAGS};
	struct user_regs_struct regs;
	struct tp_proc *p = NULL;
	struct tp_dbt_pc m;
	struct tp_event ev;
	struct dproc *pr = NULL;
	struct dthr *t;
	siginfo_t si;
	char why[256] = "";
	int err;

	o.runtime = runtime_path();
	if (!o.runtime) {
		tp_err("no code cache runtime (%s is not set)", TP_DEBUG_ENV_RT);
		return -ENOENT;
	}
	if (ptrace(PTRACE_GETSIGINFO, pid, 0, &si) || (err = tp_proc_get_regs(pid, &regs)))
		return -errno;
	for (int i = 0; i < MAX_PROCS && !pr; i++)
		if (!procs[i].pid)
			pr = &procs[i];
	if (!pr || !(t = thr_add(pid, pr)))
		return -ENOSPC;
	err = tp_proc_adopt(pid, 0, &p);
	if (err)
		goto err;
	o.ctl_fd = tp_debug_ctl_fd(&o.ctl_size);
	tp_debug_ctl_reset();
	err = tp_dbt_takeover(p, pid, &o, why, sizeof(why));
	if (!err && o.ctl_fd >= 0) {
		/* mapped: the program's fds are its own again */
		const uint64_t args[6] = {(uint64_t)o.ctl_fd};
		int64_t ret;

		err = tp_proc_inject_syscall(p, pid, pid, SYS_close, args, &ret);
	}
	if (!err)
		err = tp_proc_resume(p, pid, TP_RESUME_CONT, 0);
	if (!err)
		err = tp_proc_inject_wait_task(p, pid, &ev);
	if (!err && ev.kind != TP_EV_BREAKPOINT) {
		struct user_regs_struct now = {0};

		tp_proc_get_regs(pid, &now);
		snprintf(why, sizeof(why),
			 "the runtime did not reach the program (signal %d at 0x%llx, address %p)",
			 ev.sig, (unsigned long long)now.rip, ev.si.si_addr);
		err = -EIO;
	}
	if (!err)
		err = tp_dbt_map_open(pid, &pr->map);
	if (!err)
		err = tp_proc_get_regs(pid, &ev.regs);
	if (!err && (tp_dbt_map_to_program(pr->map, ev.regs.rip - 1, &m) ||
		     m.kind != TP_DBT_PC_INSN || m.pc != regs.rip)) {
		snprintf(why, sizeof(why), "the first stop is not at the program's entry");
		err = -EIO;
	}
	if (!err) {
		ev.regs.rip--;
		err = tp_proc_set_regs(pid, &ev.regs);
	}
	if (!err)
		err = tp_dbt_map_bp_remove(pr->map, regs.rip);
	/* gdb set no options on its TRACEME child yet: it sets its own next */
	if (!err && ptrace(PTRACE_SETOPTIONS, pid, 0, 0))
		err = -errno;
	tp_proc_free(p);
	if (err)
		goto err;
	pr->pid = pid;
	pr->own = true;
	t->fake_exec = true;
	t->exec_regs = regs;
	t->si = si;
	t->si_shown = true;
	return 0;
err:
	tp_err("cannot run the program in the code cache: %s", why[0] ? why : strerror(-err));
	tp_dbt_map_close(pr->map);
	pr->map = NULL;
	t->tid = 0;
	return err;
}

/* ---- stops ---- */

static bool is_bp_stop(struct dthr *t, const struct user_regs_struct *r)
{
	struct tp_dbt_pc m;

	return !tp_dbt_map_to_program(t->pr->map, r->rip - 1, &m) && m.kind == TP_DBT_PC_INSN &&
	       tp_dbt_map_bp_at(t->pr->map, m.pc, NULL);
}

/* Is @r at the start of a program instruction's code? */
static bool at_program(struct dthr *t, const struct user_regs_struct *r)
{
	struct tp_dbt_pc m;
	int err = tp_dbt_map_to_program(t->pr->map, r->rip, &m);

	/* outside any translation and the runtime: nothing to roll over */
	return err ? true : m.kind == TP_DBT_PC_INSN;
}

/* The program address where a thread that entered the runtime's own code from a range of
 * kind @from (its last cache pc mapped in @m) goes on, as its entry was given it in rax: an
 * exit stub's target, an indirect branch's target, the cache address after a system call's
 * gate.  0 when unknown. */
static uint64_t runtime_target(struct dthr *t, const struct tp_dbt_pc *m, uint64_t rax)
{
	struct tp_dbt_pc back;

	if (m->kind == TP_DBT_PC_STUB)
		return m->pc;
	if (m->kind == TP_DBT_PC_LOOKUP)
		return rax;
	if (!tp_dbt_map_to_program(t->pr->map, rax, &back) && back.kind == TP_DBT_PC_INSN)
		return back.pc;
	return 0;
}

/* Run @t through the runtime (a dispatch, a translation: tens of thousands of
 * instructions) to the program instruction at @pc with a breakpoint there, its own or
 * gdb's, instead of stepping.  True when it stopped there (the pc set back onto the site). */
/* The last program addresses run_to() set its own breakpoint at: a thread that gdb let run
 * meanwhile may have hit one. */
static uint64_t temp_bps[8];
static unsigned temp_next;

static bool run_to(struct dthr *t, uint64_t pc, struct user_regs_struct *r, int *status)
{
	bool own = !tp_dbt_map_bp_at(t->pr->map, pc, NULL);
	struct tp_dbt_pc m;
	siginfo_t si;
	int st, err;

	if (own && tp_dbt_map_bp_insert(t->pr->map, pc))
		return false;
	if (own)
		temp_bps[temp_next++ % 8] = pc;
	err = ptrace(PTRACE_CONT, t->tid, 0, 0) ? -errno : 0;
	while (!err && waitpid(t->tid, &st, __WALL) < 0)
		err = errno == EINTR ? 0 : -errno;
	if (own)
		tp_dbt_map_bp_remove(t->pr->map, pc);
	if (err || tp_proc_get_regs(t->tid, r))
		return false;
	if (!WIFSTOPPED(st) || WSTOPSIG(st) != SIGTRAP || st >> 16 ||
	    ptrace(PTRACE_GETSIGINFO, t->tid, 0, &si) || si.si_code != SI_KERNEL ||
	    tp_dbt_map_to_program(t->pr->map, r->rip - 1, &m) || m.kind != TP_DBT_PC_INSN ||
	    m.pc != pc) {
		*status = st; /* something else came first: reported as it is */
		return false;
	}
	r->rip--;
	return !tp_proc_set_regs(t->tid, r);
}

/* Step @t on until it is at a program instruction or at a breakpoint; *@status becomes the
 * stop that ended it when it is not a step's (a signal, an exit).  The runtime's own code
 * is run through at full speed to where it goes back to the program. */
static void roll_ahead(struct dthr *t, struct user_regs_struct *r, int *status)
{
	struct tp_dbt_pc last = {.kind = TP_DBT_PC_RUNTIME};
	long n;

	for (n = 0; n < ROLL_MAX && !at_program(t, r); n++) {
		struct tp_dbt_pc m;
		int st;

		if (!tp_dbt_map_to_program(t->pr->map, r->rip, &m)) {
			uint64_t to;

			if (m.kind != TP_DBT_PC_RUNTIME)
				last = m;
			else if (last.kind != TP_DBT_PC_RUNTIME &&
				 (to = runtime_target(t, &last, r->rax))) {
				siginfo_t si;

				/* gdb is shown the siginfo of a step */
				if (!ptrace(PTRACE_GETSIGINFO, t->tid, 0, &si) &&
				    run_to(t, to, r, status)) {
					t->si = si;
					t->si_shown = true;
					break;
				}
				if (*status >> 8 != SIGTRAP)
					break;
				last.kind = TP_DBT_PC_RUNTIME;
				continue;
			}
		}
		if (ptrace(PTRACE_SINGLESTEP, t->tid, 0, 0))
			return;
		while (waitpid(t->tid, &st, __WALL) < 0)
			if (errno != EINTR)
				return;
		if (!WIFSTOPPED(st) || WSTOPSIG(st) != SIGTRAP || st >> 16) {
			*status = st;
			return;
		}
		if (tp_proc_get_regs(t->tid, r))
			return;
		if (is_bp_stop(t, r)) {
			t->at_bp = true;
			break;
		}
	}
	tp_dbg("rolled ahead %ld steps to 0x%llx", n, (unsigned long long)r->rip);
}

/* ---- forked children ---- */

/* Children of fork events of programs in the cache, until their first stop. */
static pid_t forks[8];
static struct dproc *fork_parents[8];
static unsigned forks_next;

/* @pid, a forked child of a program in the cache, at its first stop (its SIGSTOP, before
 * it ran anything: it is inside the runtime, which makes fork, and shares its parent's
 * cache until it copied it): the interposer asks its runtime (the flag in its copy of the
 * boot record) to keep its copy of the breakpoints and to stop at a breakpoint where it
 * goes on in the program, runs it there, and shows gdb its first stop at that instruction.
 * gdb then takes its breakpoints out before it detaches it (follow-fork-mode parent) or
 * keeps them (child), as natively.  False when the child was not so taken over (*@status:
 * what came instead, if anything). */
static bool forked(pid_t pid, struct dproc *parent, int *status)
{
	uint64_t at = TP_DBT_HEAP_AT + offsetof(struct tp_dbt_boot, flags);
	struct user_regs_struct r;
	struct dproc *pr = NULL;
	struct tp_dbt_map *map = NULL;
	struct tp_dbt_pc m;
	struct dthr *t;
	siginfo_t si0;
	uint32_t flags;
	int st;

	for (int i = 0; i < MAX_PROCS && !pr; i++)
		if (!procs[i].pid)
			pr = &procs[i];
	if (!pr || ptrace(PTRACE_GETSIGINFO, pid, 0, &si0) || tp_proc_read(pid, at, &flags, 4) != 4)
		return false;
	flags |= TP_DBT_BOOT_BREAK_FORKED;
	if (tp_proc_write(pid, at, &flags, 4) || ptrace(PTRACE_CONT, pid, 0, 0))
		return false;
	while (waitpid(pid, &st, __WALL) < 0)
		if (errno != EINTR)
			return false;
	if (!WIFSTOPPED(st) || WSTOPSIG(st) != SIGTRAP || (st >> 16) ||
	    tp_dbt_map_open(pid, &map) || tp_proc_get_regs(pid, &r) ||
	    tp_dbt_map_to_program(map, r.rip - 1, &m) || m.kind != TP_DBT_PC_INSN ||
	    !tp_dbt_map_bp_at(map, m.pc, NULL)) {
		tp_warn("the forked child %d did not stop where it goes on in the code cache",
			(int)pid);
		tp_dbt_map_close(map);
		*status = st;
		return false;
	}
	r.rip--;
	if (tp_proc_set_regs(pid, &r) || tp_dbt_map_bp_remove(map, m.pc) ||
	    !(t = thr_add(pid, pr))) {
		tp_dbt_map_close(map);
		return false;
	}
	/* the child has gdb's int3s as natively, not the debug registers (the kernel clears
	 * them in a child): its copies of their execute breakpoints go */
	for (size_t i = 0; parent && i < parent->nsw; i++)
		tp_debug_sw_note(pr, parent->sw[i], true);
	for (unsigned i = 0; parent && i < parent->nhw; i++)
		if (!tp_debug_sw_bp_at(parent, parent->hw[i]))
			tp_dbt_map_bp_remove(map, parent->hw[i]);
	pr->pid = pid;
	pr->map = map;
	pr->own = false;
	/* its first stop, as it came */
	t->si = si0;
	t->si_shown = true;
	return true;
}

/* Is @pid at the exec of the shell through which gdb starts programs ($SHELL, else
 * /bin/sh; `startup-with-shell`), whose own exec of the program comes next? */
static bool is_shell(pid_t pid)
{
	const char *sh = getenv("SHELL");
	char exe[64], a[PATH_MAX], b[PATH_MAX];

	snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)pid);
	return realpath(exe, a) && realpath(sh && *sh ? sh : "/bin/sh", b) && !strcmp(a, b);
}

/* A SIGTRAP stop of @t at an int3 of run_to()'s that is gone (@r: its registers): set
 * back onto the site and resumed, as if it had never come. */
static bool temp_bp_hit(struct dthr *t, struct user_regs_struct *r)
{
	struct tp_dbt_pc m;
	uint8_t b;

	if (tp_dbt_map_to_program(t->pr->map, r->rip - 1, &m) || m.kind != TP_DBT_PC_INSN ||
	    tp_dbt_map_bp_at(t->pr->map, m.pc, NULL) ||
	    tp_proc_read(t->tid, r->rip - 1, &b, 1) != 1 || b == INT3)
		return false;
	for (int i = 0; i < 8; i++)
		if (temp_bps[i] == m.pc) {
			r->rip--;
			return !tp_proc_set_regs(t->tid, r) && !ptrace(PTRACE_CONT, t->tid, 0, 0);
		}
	return false;
}

/* ---- execute breakpoints of the debug registers (dregs.c) ---- */

/* A SIGTRAP of @t at an int3 of the repository's (@r: after it) that stands for an execute
 * breakpoint of the debug registers: the pc is set back onto its site, and the stop is shown
 * as the register's trap, which comes before the instruction runs (TRAP_HWBKPT, DR6's bit).
 * Another thread's (not in @t's registers yet) is stepped over and @t goes on, unseen.
 * 0: not such a stop; 1: shown; 2: hidden. */
static int hw_hit(struct dthr *t, struct user_regs_struct *r)
{
	struct tp_dbt_pc m;
	unsigned bits;

	if (tp_dbt_map_to_program(t->pr->map, r->rip - 1, &m) || m.kind != TP_DBT_PC_INSN ||
	    !tp_debug_hw_bp_at(t->pr, m.pc) || tp_debug_sw_bp_at(t->pr, m.pc))
		return 0;
	r->rip--;
	if (tp_proc_set_regs(t->tid, r))
		return 0;
	bits = tp_debug_dr_hit(t->tid, m.pc);
	if (!bits) {
		t->hw_cont = t->stepping ? 0 : PTRACE_CONT;
		if (!tp_dbt_map_bp_remove(t->pr->map, m.pc))
			t->hw_over = m.pc;
		t->stepping = true;
		return ptrace(PTRACE_SINGLESTEP, t->tid, 0, 0) ? 1 : 2;
	}
	memset(&t->si, 0, sizeof(t->si));
	t->si.si_signo = SIGTRAP;
	t->si.si_code = TRAP_HWBKPT;
	t->si.si_addr = (void *)(uintptr_t)m.pc;
	t->si_shown = true;
	t->at_hw = true;
	t->at_bp = false;
	tp_debug_dr_shown(t->tid, bits);
	return 1;
}

/* @t, stopped on an execute breakpoint's site, is resumed: its instruction runs once without
 * it (the trap flag's RF, which the kernel sets after a debug register's trap). */
static void hw_lift(struct dthr *t)
{
	struct user_regs_struct r;
	struct tp_dbt_pc m;

	if (!t->at_hw || tp_proc_get_regs(t->tid, &r) ||
	    tp_dbt_map_to_program(t->pr->map, r.rip, &m) || m.kind != TP_DBT_PC_INSN ||
	    !tp_debug_hw_bp_at(t->pr, m.pc) || tp_debug_sw_bp_at(t->pr, m.pc))
		return;
	if (!tp_dbt_map_bp_remove(t->pr->map, m.pc))
		t->hw_over = m.pc;
}

/* ... and back once it stopped again. */
static void hw_restore(struct dthr *t)
{
	uint64_t pc = t->hw_over;

	t->hw_over = 0;
	if (pc && tp_debug_hw_bp_at(t->pr, pc) && !tp_dbt_map_bp_at(t->pr->map, pc, NULL))
		tp_dbt_map_bp_insert(t->pr->map, pc);
}

bool tp_debug_on_wait(pid_t pid, int *status)
{
	struct dthr *t;
	struct user_regs_struct r;
	struct tp_dbt_pc m;
	siginfo_t si;

	t = WIFSTOPPED(*status) ? thr_get(pid) : thr_find(pid);
	if (!t && WIFSTOPPED(*status) && WSTOPSIG(*status) == SIGSTOP && !(*status >> 16))
		for (int i = 0; i < 8; i++)
			if (forks[i] == pid) {
				forks[i] = 0;
				forked(pid, fork_parents[i], status);
				return false;
			}
	if (!t && WIFSTOPPED(*status) && WSTOPSIG(*status) == SIGTRAP && !(*status >> 16) &&
	    !ptrace(PTRACE_GETSIGINFO, pid, 0, &si) && si.si_code == SI_USER && si.si_pid == pid &&
	    !is_shell(pid)) {
		if (takeover(pid))
			kill(pid, SIGKILL);
		return false;
	}
	if (!t && (WIFEXITED(*status) || WIFSIGNALED(*status)))
		tp_debug_ctl_reaped(pid, *status);
	if (!t)
		return false;
	hw_restore(t);
	if (WIFEXITED(*status) || WIFSIGNALED(*status)) {
		tp_debug_dr_thread_gone(pid);
		if (t->pr->pid == pid) {
			if (t->pr->own)
				tp_debug_ctl_report(*status);
			proc_forget(t->pr);
		} else
			t->tid = 0;
		return false;
	}
	if (WIFSTOPPED(*status) && (*status >> 16) == PTRACE_EVENT_FORK) {
		unsigned long child;

		/* not a vfork: that child shares its parent's memory, cache and repositories */
		if (!ptrace(PTRACE_GETEVENTMSG, pid, 0, &child)) {
			fork_parents[forks_next % 8] = t->pr;
			forks[forks_next++ % 8] = (pid_t)child;
		}
		return false;
	}
	if (!WIFSTOPPED(*status) || (*status >> 16) || tp_proc_get_regs(pid, &r))
		return false;
	if (WSTOPSIG(*status) == SIGTRAP && !ptrace(PTRACE_GETSIGINFO, pid, 0, &si) &&
	    si.si_code == SI_KERNEL) {
		int hw = hw_hit(t, &r);

		if (hw)
			return hw == 2;
		if (is_bp_stop(t, &r)) {
			t->at_bp = true;
			return false;
		}
		if (!t->stepping && temp_bp_hit(t, &r))
			return true;
	}
	/* a data watchpoint's trap in the runtime's own code: a write it makes for the program
	 * (sigaction's old action, a signal frame it moves), which natively the kernel makes,
	 * unseen by the debug registers: never shown, DR6 as if it had not come */
	if (WSTOPSIG(*status) == SIGTRAP && !t->stepping && in_runtime(r.rip) &&
	    (tp_dbt_map_to_program(t->pr->map, r.rip, &m) || m.kind == TP_DBT_PC_RUNTIME) &&
	    !ptrace(PTRACE_GETSIGINFO, pid, 0, &si) && si.si_code == TRAP_HWBKPT &&
	    !ptrace(PTRACE_POKEUSER, pid, (void *)DR6_OFF, 0) &&
	    !ptrace(t->resumed ? t->resumed : PTRACE_CONT, pid, 0, 0))
		return true;
	/* after a step of gdb's, or a hardware watchpoint's trap (after the write, which may be
	 * one of several cache instructions of the program's): on to the next instruction */
	if (WSTOPSIG(*status) != SIGTRAP ||
	    !(t->stepping ||
	      (!ptrace(PTRACE_GETSIGINFO, pid, 0, &si) && si.si_code == TRAP_HWBKPT)))
		return false;
	roll_ahead(t, &r, status);
	/* a popf of the runtime's may have put back a trap flag of a step */
	if (WIFSTOPPED(*status) && !tp_proc_get_regs(pid, &r) && (r.eflags & EFLAGS_TF)) {
		r.eflags &= ~(unsigned long long)EFLAGS_TF;
		tp_proc_set_regs(pid, &r);
	}
	/* the step over an execute breakpoint's instruction: back in, and on as gdb asked */
	if (t->hw_cont) {
		int req = t->hw_cont;

		t->hw_cont = 0;
		hw_restore(t);
		if (WIFSTOPPED(*status) && WSTOPSIG(*status) == SIGTRAP && !(*status >> 16) &&
		    !t->at_bp && !ptrace(req, pid, 0, 0)) {
			t->stepping = false;
			return true;
		}
	}
	return false;
}

/* ---- ptrace ---- */

/* gdb attached @tid: a thread of a process that runs in the cache (launched by `tracepad
 * count --engine dbt`, say) is mapped from then on. */
static void attached(pid_t tid)
{
	struct dproc *pr = NULL;
	int tgid = tp_proc_tgid(tid);

	if (tgid <= 0)
		return;
	if (!(pr = proc_find(tgid))) {
		struct tp_dbt_map *map;

		if (tp_dbt_map_open(tgid, &map))
			return; /* not in a code cache: gdb's own business */
		for (int i = 0; i < MAX_PROCS && !pr; i++)
			if (!procs[i].pid)
				pr = &procs[i];
		if (!pr) {
			tp_dbt_map_close(map);
			return;
		}
		pr->pid = tgid;
		pr->map = map;
		pr->own = false;
	}
	thr_add(tid, pr);
}

bool tp_debug_ptrace(int req, pid_t pid, void *addr, void *data, long *ret)
{
	struct dthr *t = thr_get(pid);
	struct user_regs_struct r;

	if (!t && (req == PTRACE_ATTACH || req == PTRACE_SEIZE)) {
		int e;

		*ret = ptrace(req, pid, addr, data);
		e = errno;
		if (!*ret)
			attached(pid);
		errno = e;
		return true;
	}
	if (!t)
		return false;
	switch (req) {
	case PTRACE_GETREGS:
		if ((*ret = ptrace(PTRACE_GETREGS, pid, addr, data)) == 0)
			regs_shown(t, data);
		return true;
	case PTRACE_SETREGS: {
		int err = regs_write(t, data);

		*ret = err ? -1 : 0;
		errno = -err;
		return true;
	}
	case PTRACE_GETFPREGS:
		if ((*ret = ptrace(PTRACE_GETFPREGS, pid, addr, data)) == 0)
			fp_shown(t, data, FX_SIZE, false);
		return true;
	case PTRACE_SETFPREGS:
		return fp_write(t, req, addr, data, FX_SIZE, ret);
	case PTRACE_GETREGSET: {
		struct iovec *iov = data;

		if ((long)addr != NT_PRSTATUS && (long)addr != NT_PRFPREG &&
		    (long)addr != NT_X86_XSTATE)
			return false;
		if ((*ret = ptrace(PTRACE_GETREGSET, pid, addr, data)) || !iov)
			return true;
		if ((long)addr == NT_PRSTATUS && iov->iov_len >= sizeof(r))
			regs_shown(t, iov->iov_base);
		else if ((long)addr != NT_PRSTATUS)
			fp_shown(t, iov->iov_base, iov->iov_len, (long)addr == NT_X86_XSTATE);
		return true;
	}
	case PTRACE_SETREGSET: {
		int err;

		if (((long)addr == NT_PRFPREG || (long)addr == NT_X86_XSTATE) && data)
			return fp_write(t, req, addr, ((struct iovec *)data)->iov_base,
					((struct iovec *)data)->iov_len, ret);
		if ((long)addr != NT_PRSTATUS || ((struct iovec *)data)->iov_len < sizeof(r))
			return false;
		err = regs_write(t, ((struct iovec *)data)->iov_base);
		*ret = err ? -1 : 0;
		errno = -err;
		return true;
	}
	case PTRACE_PEEKUSER:
		if (tp_debug_dr_peek(t->pr, pid, (unsigned long)addr, ret))
			return true;
		if ((unsigned long)addr >= sizeof(r) || ((unsigned long)addr & 7))
			return false;
		if (tp_proc_get_regs(pid, &r)) {
			*ret = -1;
			return true;
		}
		regs_shown(t, &r);
		errno = 0;
		*ret = (long)((uint64_t *)&r)[(unsigned long)addr / 8];
		return true;
	case PTRACE_POKEUSER: {
		int err;

		if (tp_debug_dr_poke(t->pr, pid, (unsigned long)addr, (unsigned long)data, ret))
			return true;
		if ((unsigned long)addr >= sizeof(r) || ((unsigned long)addr & 7))
			return false;
		if ((err = tp_proc_get_regs(pid, &r)) == 0) {
			regs_shown(t, &r);
			((uint64_t *)&r)[(unsigned long)addr / 8] = (uint64_t)data;
			err = regs_write(t, &r);
		}
		*ret = err ? -1 : 0;
		errno = -err;
		return true;
	}
	case PTRACE_GETSIGINFO: {
		siginfo_t *si = data;
		struct tp_dbt_pc m;

		if (t->si_shown)
			memcpy(si, &t->si, sizeof(t->si));
		else if ((*ret = ptrace(PTRACE_GETSIGINFO, pid, addr, data)))
			return true;
		*ret = 0;
		/* a trap's or fault's address is the pc's: a program address too */
		if (si->si_code <= 0 || si->si_code == SI_KERNEL ||
		    (si->si_signo != SIGTRAP && si->si_signo != SIGILL && si->si_signo != SIGFPE))
			return true;
		if (si->si_signo == SIGTRAP && !tp_proc_get_regs(pid, &r)) {
			regs_shown(t, &r);
			si->si_addr = (void *)(uintptr_t)r.rip;
		} else if (!tp_dbt_map_to_program(t->pr->map, (uint64_t)(uintptr_t)si->si_addr,
						  &m) &&
			   m.kind != TP_DBT_PC_RUNTIME) {
			si->si_addr = (void *)(uintptr_t)m.pc;
		}
		return true;
	}
	case PTRACE_SINGLESTEP:
		hw_lift(t);
		t->stepping = true;
		t->at_bp = t->at_hw = t->fake_exec = t->si_shown = false;
		return false;
	case PTRACE_DETACH: {
		struct dproc *pr = t->pr;
		bool left = false;

		/* the process runs on without gdb: forgotten with its last thread */
		t->tid = 0;
		tp_debug_dr_thread_gone(pid);
		for (int i = 0; i < MAX_THREADS && !left; i++)
			left = thrs[i].tid && thrs[i].pr == pr;
		if (!left)
			tp_debug_dr_forget(pr, true);
		if (!left && pr->own)
			tp_debug_ctl_detached(pr->pid);
		if (!left)
			proc_forget(pr);
		return false;
	}
	case PTRACE_CONT:
	case PTRACE_SYSCALL:
		t->resumed = req;
		if (t->at_hw) {
			/* a step over the instruction first, then on (tp_debug_on_wait) */
			hw_lift(t);
			t->hw_cont = req;
			t->stepping = true;
			t->at_bp = t->at_hw = t->fake_exec = t->si_shown = false;
			*ret = ptrace(PTRACE_SINGLESTEP, pid, addr, data);
			return true;
		}
		/* fall through */
	case PTRACE_KILL:
		t->stepping = t->at_bp = t->at_hw = t->fake_exec = t->si_shown = false;
		return false;
	default:
		return false;
	}
}
