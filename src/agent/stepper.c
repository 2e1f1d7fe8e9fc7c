/* The trap-flag stepper: with EFLAGS.TF set, the CPU raises SIGTRAP before each instruction
 * of a counted thread runs; the handler counts the instruction at the interrupted PC.
 * Syscalls need care: after one, the kernel returns with TF set and the next instruction
 * runs before the next trap, so the handler counts it afterwards ("pending"); syscalls that
 * would take the stepper's SIGTRAP away from it (rt_sigaction, rt_sigprocmask) are emulated
 * from the handler (src/rt's signal virtualisation).  The stepper is a client of src/rt's
 * SIGTRAP dispatcher, which owns SIGTRAP for the agent. */
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "agent/agent-priv.h"

#ifndef TRAP_TRACE
#define TRAP_TRACE 2
#endif

/* ---- decode cache: pc -> decoded instruction, shared by threads, insertion by CAS ---- */

#define DC_BITS 16
#define DC_BUSY (1ull << 63)

struct dc_entry {
	uint64_t pc;
	uint64_t info; /* len | kind << 8 | flags << 16 | mnemonic << 32 */
};

static struct dc_entry *dcache;

static int read_code(uint64_t pc, uint8_t *buf)
{
	unsigned first = (unsigned)(4096 - (pc & 4095));

	if (first > TP_ARCH_MAX_INSN_LEN)
		first = TP_ARCH_MAX_INSN_LEN;
	if (tp_rt_mem_read(pc, buf, first))
		return 0;
	if (first < TP_ARCH_MAX_INSN_LEN &&
	    !tp_rt_mem_read(pc + first, buf + first, TP_ARCH_MAX_INSN_LEN - first))
		return TP_ARCH_MAX_INSN_LEN;
	return (int)first;
}

static int decode_at(uint64_t pc, struct tp_insn *in)
{
	uint64_t h = (pc * 0x9e3779b97f4a7c15ull) >> (64 - DC_BITS);
	uint8_t buf[TP_ARCH_MAX_INSN_LEN];
	int n;

	for (unsigned probe = 0; dcache && probe < 8; probe++) {
		struct dc_entry *e = &dcache[(h + probe) & ((1u << DC_BITS) - 1)];
		uint64_t cur = __atomic_load_n(&e->pc, __ATOMIC_ACQUIRE);

		if (cur == pc) {
			uint64_t info = e->info;

			in->len = (uint8_t)info;
			in->kind = (uint8_t)(info >> 8);
			in->flags = (uint8_t)(info >> 16);
			in->mnemonic = (uint16_t)(info >> 32);
			return 0;
		}
		if (cur == 0) {
			n = read_code(pc, buf);
			if (!n || tp_arch_decode(buf, (size_t)n, pc, in))
				return -1;
			if (__atomic_compare_exchange_n(&e->pc, &cur, pc | DC_BUSY, 0,
							__ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
				e->info = in->len | (uint64_t)in->kind << 8 |
					  (uint64_t)in->flags << 16 | (uint64_t)in->mnemonic << 32;
				__atomic_store_n(&e->pc, pc, __ATOMIC_RELEASE);
			}
			return 0;
		}
	}
	n = read_code(pc, buf);
	if (!n || tp_arch_decode(buf, (size_t)n, pc, in))
		return -1;
	return 0;
}

/* ---- counting ---- */

static void count_insn(struct tp_tstate *ts, uint64_t pc, const struct tp_insn *in)
{
	struct tp_agent_thread *t = ts->slot;

	if (t) {
		t->count++;
		if ((tp_ag.flags & TP_CTL_BY_MNEMONIC) && in->mnemonic < TP_AGENT_MNEMONICS)
			t->mnemonic[in->mnemonic]++;
	} else {
		__atomic_fetch_add(&tp_ag.ctl->overflow_count, 1, __ATOMIC_RELAXED);
	}
	if (tp_ag.addrs)
		tp_agent_addr_add(pc, 1);
	if (!tp_ag.ctl->control_pc)
		tp_ag.ctl->control_pc = pc;
}

/* Take back the count of the instruction at @pc (counted before a signal interrupted it). */
static void uncount_pc(struct tp_tstate *ts, uint64_t pc)
{
	struct tp_agent_thread *t = ts->slot;
	struct tp_insn in;

	if (decode_at(pc, &in))
		in.mnemonic = 0;
	if (t) {
		t->count--;
		if ((tp_ag.flags & TP_CTL_BY_MNEMONIC) && in.mnemonic < TP_AGENT_MNEMONICS)
			t->mnemonic[in.mnemonic]--;
	} else {
		__atomic_fetch_sub(&tp_ag.ctl->overflow_count, 1, __ATOMIC_RELAXED);
	}
	if (tp_ag.addrs)
		tp_agent_addr_add(pc, (uint64_t)-1);
}

static void count_pc(struct tp_tstate *ts, uint64_t pc, struct tp_insn *in)
{
	struct tp_insn tmp;

	if (!in)
		in = &tmp;
	if (decode_at(pc, in)) {
		in->len = 0;
		in->kind = TP_INSN_OTHER;
		in->mnemonic = 0;
	}
	count_insn(ts, pc, in);
}

void tp_thread_start_counting(struct tp_tstate *ts)
{
	if (!ts->slot)
		ts->slot = tp_agent_slot();
	ts->counting = 1;
	ts->pending = 0;
}

static void stop_counting(struct tp_tstate *ts, greg_t *g)
{
	tp_agent_event(ts, TP_AGENT_EV_COUNTING_END, (uint64_t)g[REG_RIP]);
	ts->counting = 0;
	ts->in_region = 0;
	ts->pending = 0;
	g[REG_EFL] &= ~TP_EFLAGS_TF;
}

/* The instruction that ran without a trap after a syscall; a syscall there (a restarted
 * one, after rt_sigreturn) took its following instruction along too. */
static void count_pc_len(struct tp_tstate *ts, uint64_t pc, unsigned *len)
{
	struct tp_insn in;

	count_pc(ts, pc, &in);
	if (len)
		*len = in.len;
}

static void count_pending(struct tp_tstate *ts)
{
	struct tp_insn in;
	uint64_t pc = ts->pending;

	ts->pending = 0;
	count_pc(ts, pc, &in);
	if (in.kind == TP_INSN_SYSCALL && in.len)
		count_pc(ts, pc + in.len, NULL);
}

/* ---- breakpoints with an out-of-line copy of the displaced instruction ---- */

/* Plant or lift the int3 of @bp with src/rt's patcher: a thread that meets the int3 while
 * it is lifted runs the displaced instruction from its slot. */
static int bp_patch(struct tp_abp *bp, int on)
{
	const uint8_t int3 = TP_ARCH_INT3;

	if (on)
		return tp_rt_patch(bp->addr, bp->orig, &int3, 1, 0);
	return tp_rt_patch(bp->addr, &int3, bp->orig, 1, bp->slot);
}

int tp_bp_insert(uint64_t addr, enum tp_abp_kind kind)
{
	struct tp_abp *bp;
	uint8_t code[64];
	size_t len = 0;
	int n;

	if (tp_ag.nbps >= TP_AGENT_MAX_BPS)
		return -1;
	bp = &tp_ag.bps[tp_ag.nbps];
	n = read_code(addr, bp->orig);
	if (!n || tp_arch_decode(bp->orig, (size_t)n, addr, &bp->insn))
		return -1;
	/* the slot is out of reach of every thread until the int3 below is planted */
	bp->slot = tp_rt_near_alloc(addr, sizeof(code));
	if (!bp->slot)
		return -1;
	if (tp_arch_relocate(bp->orig, bp->insn.len, addr, bp->slot, code, sizeof(code) - 5, &len))
		return -1;
	bp->slot_back = bp->slot + len;
	if (tp_arch_emit_jmp(code + len, bp->slot_back, addr + bp->insn.len))
		return -1;
	if (tp_rt_near_write(bp->slot, code, len + 5))
		return -1;
	bp->addr = addr;
	bp->kind = kind;
	/* live before the int3 exists: a thread may hit it at once */
	bp->live = 1;
	tp_ag.nbps++;
	if (bp_patch(bp, 1)) {
		bp->live = 0;
		return -1;
	}
	return 0;
}

static struct tp_abp *bp_find(uint64_t addr)
{
	for (int i = 0; i < tp_ag.nbps; i++)
		if (tp_ag.bps[i].live && tp_ag.bps[i].addr == addr)
			return &tp_ag.bps[i];
	return NULL;
}

/* Inside an out-of-line copy (each fits in 64 bytes). */
static int in_slots(uint64_t pc)
{
	for (int i = 0; i < tp_ag.nbps; i++)
		if (pc - tp_ag.bps[i].slot < 64)
			return 1;
	return 0;
}

static void region_begin(struct tp_tstate *ts, greg_t *g)
{
	uint64_t ret;

	if (tp_rt_mem_read((uint64_t)g[REG_RSP], &ret, 8))
		return;
	ts->init = 1;
	ts->region_done = 1;
	ts->in_region = 1;
	ts->region_sp = (uint64_t)g[REG_RSP];
	ts->region_ret = ret;
	tp_thread_start_counting(ts);
}

/* A thread reached breakpoint @bp (by an int3 hit, or stepping onto it): run the displaced
 * instruction from its slot; a counted thread counts it as the original. */
static void bp_reached(struct tp_tstate *ts, greg_t *g, struct tp_abp *bp)
{
	if (bp->kind == TP_ABP_LIBC_START_MAIN) {
		/* __libc_start_main(main, ...): break on main, and this one is done */
		uint64_t main_pc = (uint64_t)g[REG_RDI];

		bp->live = 0;
		bp_patch(bp, 0);
		g[REG_RIP] = (greg_t)bp->addr;
		tp_ag.start_pc = tp_ag.ctl->start_pc = main_pc;
		if (tp_bp_insert(main_pc, TP_ABP_START))
			tp_agent_fail("cannot insert the breakpoint at main");
		return;
	}
	if (!tp_ag.disabled && !ts->counting && !ts->region_done) {
		region_begin(ts, g);
		if (ts->counting)
			tp_agent_event(ts, TP_AGENT_EV_COUNTING_BEGIN, bp->addr);
	}
	g[REG_RIP] = (greg_t)bp->slot;
	if (!tp_ag.disabled && ts->counting) {
		count_insn(ts, bp->addr, &bp->insn);
		g[REG_EFL] |= TP_EFLAGS_TF;
	}
}

/* ---- syscalls seen just before they run ---- */

static void record_clone_site(uint64_t pc)
{
	for (int i = 0; i < TP_AGENT_CLONE_SITES; i++) {
		uint64_t cur = __atomic_load_n(&tp_ag.clone_sites[i], __ATOMIC_ACQUIRE);

		if (cur == pc)
			return;
		if (!cur && __atomic_compare_exchange_n(&tp_ag.clone_sites[i], &cur, pc, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return;
	}
}

/* Returns 1 when the syscall was emulated and the thread resumes after it. */
static int syscall_before(struct tp_tstate *ts, ucontext_t *uc, uint64_t pc, unsigned len)
{
	greg_t *g = uc->uc_mcontext.gregs;
	uint64_t flags = 0;
	long ret;

	switch (g[REG_RAX]) {
	case SYS_rt_sigaction:
		ret = tp_rt_sig_emulate_sigaction(uc);
		break;
	case SYS_rt_sigprocmask:
		ret = tp_rt_sig_emulate_sigprocmask(uc);
		break;
	case SYS_rt_sigreturn: {
		/* the frame's ucontext is at %rsp: resume where it says, if TF stays on */
		ucontext_t *f = (ucontext_t *)(uintptr_t)g[REG_RSP];
		uint64_t rip, efl;

		if (!tp_rt_mem_read((uint64_t)&f->uc_mcontext.gregs[REG_RIP], &rip, 8) &&
		    !tp_rt_mem_read((uint64_t)&f->uc_mcontext.gregs[REG_EFL], &efl, 8) &&
		    (efl & TP_EFLAGS_TF))
			ts->pending = rip;
		return 0;
	}
	case SYS_clone3:
		if (tp_rt_mem_read((uint64_t)g[REG_RDI], &flags, 8))
			flags = 0;
		goto clone;
	case SYS_clone:
		flags = (uint64_t)g[REG_RDI];
	clone:
		if (flags & CLONE_THREAD) {
			record_clone_site(pc);
		} else {
			ts->pending_fork = 1;
			ts->pending_clone_flags = (uint32_t)flags;
		}
		ts->pending = pc + len;
		return 0;
	case SYS_fork:
		ts->pending_fork = 1;
		ts->pending_clone_flags = 0;
		ts->pending = pc + len;
		return 0;
	case SYS_vfork:
		ts->pending_fork = 1;
		ts->pending_clone_flags = CLONE_VM | CLONE_VFORK;
		ts->pending = pc + len;
		return 0;
	case SYS_exit:
	case SYS_exit_group:
		tp_agent_event(ts, TP_AGENT_EV_COUNTING_END, pc);
		return 0;
	case SYS_execve:
	case SYS_execveat:
		__atomic_or_fetch(&tp_ag.ctl->state, TP_AGENT_ST_EXEC, __ATOMIC_RELAXED);
		ts->pending = pc + len;
		return 0;
	default:
		ts->pending = pc + len;
		return 0;
	}
	/* emulated: the kernel's syscall return convention, then resume after it */
	g[REG_RAX] = ret;
	g[REG_RCX] = (greg_t)(pc + len);
	g[REG_R11] = g[REG_EFL];
	g[REG_RIP] = (greg_t)(pc + len);
	return 1;
}

/* A thread created by a counted thread: TF came with the registers it was cloned with, and
 * its first instruction after the clone syscall ran before this trap. */
static void thread_first_trap(struct tp_tstate *ts, uint64_t pc)
{
	uint64_t handover;
	struct tp_insn in;

	ts->init = 1;
	tp_thread_start_counting(ts);
	tp_agent_event(ts, TP_AGENT_EV_COUNTING_BEGIN, pc);
	/* the launched program's first instruction after the loader ran before this trap */
	handover = __atomic_exchange_n(&tp_ag.ctl->handover_pc, 0, __ATOMIC_ACQ_REL);
	if (handover && !decode_at(handover, &in)) {
		count_insn(ts, handover, &in);
		return;
	}
	for (int i = 0; i < TP_AGENT_CLONE_SITES; i++) {
		uint64_t site = __atomic_load_n(&tp_ag.clone_sites[i], __ATOMIC_ACQUIRE);

		if (site && !decode_at(site + 2, &in) && site + 2 + in.len == pc) {
			count_insn(ts, site + 2, &in);
			return;
		}
	}
}

/* One TF trap of a counted thread at @pc (the instruction about to run). */
static void step(struct tp_tstate *ts, ucontext_t *uc)
{
	greg_t *g = uc->uc_mcontext.gregs;
	struct tp_abp *bp;
	struct tp_insn in;

	if (ts->pending_fork) {
		if (tp_raw0(SYS_getpid) != tp_ag.pid) {
			/* the child of a fork: it is not counted.  A vfork child shares our
			 * memory (and this TLS): it must not write anything. */
			g[REG_EFL] &= ~TP_EFLAGS_TF;
			if (!(ts->pending_clone_flags & CLONE_VM)) {
				ts->pending_fork = 0;
				ts->counting = 0;
				tp_ag.disabled = 1;
				tp_raw2(SYS_munmap, tp_ag.ctl, tp_ag.ctl_size);
				tp_ag.ctl = NULL;
			}
			return;
		}
		ts->pending_fork = 0;
		__atomic_or_fetch(&tp_ag.ctl->state, TP_AGENT_ST_FORKED, __ATOMIC_RELAXED);
	}
	if (!ts->init)
		thread_first_trap(ts, (uint64_t)g[REG_RIP]);
	if (!ts->counting) {
		g[REG_EFL] &= ~TP_EFLAGS_TF;
		return;
	}
	if (ts->pending)
		count_pending(ts);
	if (ts->late) {
		/* the trap of the instruction after a cpuid came late: it ran */
		if ((uint64_t)g[REG_RIP] != ts->late)
			count_pc(ts, ts->late, NULL);
		ts->late = 0;
	}

	for (;;) {
		uint64_t pc = (uint64_t)g[REG_RIP], sp = (uint64_t)g[REG_RSP];

		if (ts->hidden_sp) {
			if (!tp_region_returned(pc, sp, ts->hidden_ret, ts->hidden_sp))
				return;
			ts->hidden_sp = 0;
		}
		if (pc - tp_ag.zydis_start < tp_ag.zydis_end - tp_ag.zydis_start) {
			/* the program (its loader) called into libZydis: not its work */
			if (!tp_rt_mem_read(sp, &ts->hidden_ret, 8))
				ts->hidden_sp = sp;
			return;
		}
		if (pc - tp_ag.text_start < tp_ag.text_end - tp_ag.text_start) {
			/* the program called into the agent: its code is not counted */
			if (pc == (uint64_t)(uintptr_t)&tracepad_step_end &&
			    (tp_ag.flags & TP_CTL_API))
				stop_counting(ts, g);
			g[REG_EFL] &= ~TP_EFLAGS_TF;
			return;
		}
		if (in_slots(pc)) {
			/* inside an out-of-line copy: only its jump back maps to an original
			 * instruction (the one after the displaced one) */
			for (int i = 0; i < tp_ag.nbps; i++) {
				struct tp_abp *b = &tp_ag.bps[i];

				if (b->slot_back == pc) {
					g[REG_RIP] = (greg_t)(b->addr + b->insn.len);
					break;
				}
			}
			if ((uint64_t)g[REG_RIP] == pc)
				return;
			continue;
		}
		if (ts->in_region &&
		    tp_region_returned(pc, (uint64_t)g[REG_RSP], ts->region_ret, ts->region_sp)) {
			stop_counting(ts, g);
			return;
		}
		if (pc == tp_ag.stop_pc) {
			stop_counting(ts, g);
			return;
		}
		bp = bp_find(pc);
		if (bp) {
			bp_reached(ts, g, bp);
			return;
		}
		count_pc(ts, pc, &in);
		if (in.flags & TP_INSN_F_LATE_STEP)
			ts->late = pc + in.len;
		if (in.kind != TP_INSN_SYSCALL || !in.len)
			return;
		if (!syscall_before(ts, uc, pc, in.len))
			return;
		/* emulated: the thread resumes at the next instruction, which runs before the
		 * next trap, so it is handled here as if it had trapped */
	}
}

/* The trap of an icebp the program ran just before @pc (si_code TRAP_BRKPT at @pc). */
static int icebp_trap(const siginfo_t *si, uint64_t pc)
{
	struct tp_insn in;
	uint8_t b;

	return si->si_code == TRAP_BRKPT && (uint64_t)(uintptr_t)si->si_addr == pc &&
	       !tp_rt_mem_read(pc - 1, &b, 1) && !tp_arch_decode(&b, 1, pc - 1, &in) &&
	       in.len == 1 && in.kind == TP_INSN_INT;
}

/* Some virtual machines (KVM on AMD) report an icebp as a fault, at the icebp: the thread
 * is still at the pc of its last step's trap, and the instruction there is an icebp. */
static int icebp_fault(uint64_t pc)
{
	struct tp_insn in;
	uint8_t b;

	return pc == tp_tstate()->last_step && !tp_rt_mem_read(pc, &b, 1) &&
	       !tp_arch_decode(&b, 1, pc, &in) && in.len == 1 && in.kind == TP_INSN_INT;
}

/* A debug trap whose DR6 names no cause reaches us as TRAP_BRKPT, as if the program had run
 * an icebp: some virtual machines report TF steps that way now and then (issue 14: gzip died
 * of SIGTRAP under the stepper).  It is a step when the kernel made it here (si_addr is the
 * PC), TF was set, and the instruction before the PC is no icebp of the program's. */
static int step_without_bs(const siginfo_t *si, const greg_t *g)
{
	uint64_t pc = (uint64_t)g[REG_RIP];

	if (!(g[REG_EFL] & TP_EFLAGS_TF) || (uint64_t)(uintptr_t)si->si_addr != pc)
		return 0;
	return !icebp_trap(si, pc) && !icebp_fault(pc);
}

/* The stepper's client of the SIGTRAP dispatcher: TF traps and its breakpoints.  The kernel
 * reports a step at the pc it stopped at (si_addr); a TRAP_TRACE elsewhere is one the program
 * sent itself (rt_tgsigqueueinfo), and goes to it.  A disabled agent (after a fault, in a
 * forked child, or detached) only clears TF where it finds it: a signal frame saved while a
 * thread was stepped may still bring it back. */
static int trap_busy(siginfo_t *si, ucontext_t *uc, int live)
{
	greg_t *g = uc->uc_mcontext.gregs;
	struct tp_abp *bp;

	if ((si->si_code == TRAP_TRACE &&
	     (uint64_t)(uintptr_t)si->si_addr == (uint64_t)g[REG_RIP]) ||
	    (si->si_code == TRAP_BRKPT && step_without_bs(si, g))) {
		if (!(g[REG_EFL] & TP_EFLAGS_TF))
			return 1; /* the trap after an instruction that cleared TF */
		if (!live || tp_agent_tracer_gone(tp_tstate())) {
			g[REG_EFL] &= ~TP_EFLAGS_TF;
			return 1;
		}
		step(tp_tstate(), uc);
		tp_tstate()->last_step = (uint64_t)g[REG_RIP];
		return 1;
	}
	if (si->si_code == SI_KERNEL) {
		bp = bp_find((uint64_t)g[REG_RIP] - 1);
		if (bp) {
			if (!live)
				g[REG_RIP] = (greg_t)bp->slot;
			else
				bp_reached(tp_tstate(), g, bp);
			return 1;
		}
	}
	return 0;
}

static int on_trap(siginfo_t *si, ucontext_t *uc, void *ctx)
{
	int r = trap_busy(si, uc, tp_agent_busy_enter());

	tp_agent_busy_exit();
	return r;
}

/* ---- what the signal virtualisation asks the stepper ---- */

/* Counting in this generation (tp_ts of an earlier attach session does not count). */
static int ts_counting(void)
{
	return tp_ts.gen == tp_ag.gen && tp_ts.counting;
}

static int host_stepped(const ucontext_t *uc)
{
	return !tp_ag.disabled && tp_ag.active && ts_counting() &&
	       (uc->uc_mcontext.gregs[REG_EFL] & TP_EFLAGS_TF);
}

static void host_handler_enter(const ucontext_t *uc)
{
	/* The interrupted instruction runs after the handler's sigreturn, which counts it
	 * then.  Delivered at a syscall's exit, it was pending and not counted yet; delivered
	 * after a trap, that trap counted it: take that back. */
	struct tp_tstate *ts = tp_tstate();

	if (tp_agent_busy_enter()) {
		if (ts->pending)
			ts->pending = 0;
		else
			uncount_pc(ts, (uint64_t)uc->uc_mcontext.gregs[REG_RIP]);
	}
	tp_agent_busy_exit();
}

static void host_trap_handler(void *h, int sig, siginfo_t *si, ucontext_t *uc)
{
	/* Natively the handler would return through the program's restorer and the
	 * interrupted instruction would run after rt_sigreturn without a trap of its own
	 * (unless a trap had counted it already: an asynchronous SIGTRAP).  The program's
	 * handler runs outside the busy sections: it may block for as long as it likes. */
	struct tp_tstate *ts = tp_tstate();
	struct tp_ksigaction act = {0};
	/* an int3's or an icebp's trap took the place of the step's: the instruction at the
	 * pc has not been counted */
	int fresh = ts->pending || si->si_code == SI_KERNEL ||
		    icebp_trap(si, (uint64_t)uc->uc_mcontext.gregs[REG_RIP]);
	unsigned len = 0;

	ts->pending = 0;
	tp_rt_sig_virtual(SIGTRAP, &act);
	tp_rt_call_handler_tf(h, sig, si, uc);
	if (tp_agent_busy_enter() && (act.flags & TP_SA_RESTORER) && act.restorer) {
		count_pc_len(ts, (uint64_t)(uintptr_t)act.restorer, &len);
		if (len)
			count_pc_len(ts, (uint64_t)(uintptr_t)act.restorer + len, NULL);
	}
	tp_agent_busy_exit();
	if (fresh)
		ts->pending = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
}

/* The program dies of this trap (its default action): say in the control block what it was,
 * for tracepad's report (a soak run that ends so must be diagnosable). */
static void host_trap_fatal(const siginfo_t *si, const ucontext_t *uc)
{
	const greg_t *g = uc->uc_mcontext.gregs;
	struct tp_agent_ctl *ctl;
	uint64_t pc = (uint64_t)g[REG_RIP], word;
	uint32_t readable = 0;
	int32_t none = 0;

	if (tp_agent_busy_enter()) {
		ctl = tp_ag.ctl;
		/* the first thread to claim it fills it in */
		if (__atomic_compare_exchange_n(&ctl->fatal_tid, &none, tp_agent_gettid(), 0,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			__builtin_memcpy(&word, &si->si_addr, sizeof(word));
			ctl->fatal_signo = si->si_signo;
			ctl->fatal_code = si->si_code;
			ctl->fatal_addr = word;
			ctl->fatal_pc = pc;
			ctl->fatal_rflags = (uint64_t)g[REG_EFL];
			for (unsigned i = 0; i < sizeof(ctl->fatal_bytes); i++) {
				uint8_t b = 0;

				if (!tp_rt_mem_read(pc - 8 + i, &b, 1))
					readable |= 1u << i;
				ctl->fatal_bytes[i] = b;
			}
			ctl->fatal_readable = readable;
		}
		__atomic_add_fetch(&ctl->fatal_traps, 1, __ATOMIC_RELEASE);
		/* an icebp reported as a fault did not run: its step's trap counted it */
		if (si->si_code == TRAP_BRKPT && icebp_fault(pc))
			uncount_pc(tp_tstate(), pc);
	}
	tp_agent_busy_exit();
}

static int host_route(int which)
{
	if (tp_ag.disabled || !tp_ag.ctl)
		return 0;
	if (!tp_ag.active) {
		/* under the ptrace engine only the masks matter (see src/rt/wrap.c) */
		return which == TP_RT_WRAP_SIGPROCMASK || which == TP_RT_WRAP_PTHREAD_SIGMASK;
	}
	return ts_counting() ? 2 : 1;
}

const struct tp_rt_sig_host tp_stepper_sig_host = {
    .stepped = host_stepped,
    .handler_enter = host_handler_enter,
    .trap_handler = host_trap_handler,
    .trap_fatal = host_trap_fatal,
    .route = host_route,
};

void tp_stepper_reset(void)
{
	if (dcache)
		__builtin_memset(dcache, 0, (1ul << DC_BITS) * sizeof(struct dc_entry));
	for (int i = 0; i < TP_AGENT_CLONE_SITES; i++)
		tp_ag.clone_sites[i] = 0;
}

void tp_stepper_release(void)
{
	if (dcache)
		tp_raw2(SYS_munmap, dcache, (1l << DC_BITS) * (long)sizeof(struct dc_entry));
	dcache = NULL;
}

int tp_stepper_install(void)
{
	static int registered;
	long p;

	if (!dcache) {
		p = tp_raw6(SYS_mmap, 0, (1l << DC_BITS) * (long)sizeof(struct dc_entry),
			    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (tp_raw_failed(p))
			return -1;
		dcache = (struct dc_entry *)p;
	}
	if (!registered) {
		if (tp_rt_trap_register(on_trap, NULL))
			return -1;
		registered = 1;
	}
	return tp_rt_trap_own(tp_rt_sig_foreign_trap) ? -1 : 0;
}
