/* Signals under the code cache: the program's handlers run in the cache.  The kernel enters
 * a runtime trampoline instead of each handler; the trampoline saves the thread's scratch
 * slots (a signal may interrupt cache code or the runtime while they are live), shows the
 * handler the program's pc instead of the cache's (rt-map.c) and goes on at the handler's
 * translation.  rt_sigreturn puts the slots and the cache pc back before the kernel
 * restores the interrupted context. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>

#include "dbt/rt-client.h"
#include "dbt/rt-priv.h"
#include "rt/raw.h"
#include "rt/rt.h"

/* The program's handlers, by signal: what the kernel would call without the runtime; and
 * whether it asked for SA_SIGINFO.  The trampoline always has it: without it the kernel
 * leaves the frame's siginfo uninitialised, and a deferred signal is sent again with it. */
static uint64_t handlers[65];
/* The kernel enters the trampoline with every signal blocked, so that no second signal is
 * delivered on top of a frame not moved yet; it then sets the mask the program's handler
 * would have had: the program's sa_mask, and the signal itself unless SA_NODEFER. */
struct how {
	uint64_t mask;
	uint8_t info, onstack, nodefer;
};
static struct how how[65];

/* @k, the program's action for @sig with a handler, is recorded and becomes the one the
 * kernel gets. */
static void route(int sig, struct tp_ksigaction *k)
{
	handlers[sig] = (uint64_t)(uintptr_t)k->handler;
	how[sig] = (struct how){.mask = k->mask,
				.info = !!(k->flags & SA_SIGINFO),
				.onstack = !!(k->flags & SA_ONSTACK),
				.nodefer = !!(k->flags & SA_NODEFER)};
	k->handler = (void *)&tp_dbt_rt_sigtramp;
	k->flags |= SA_SIGINFO | SA_ONSTACK;
	k->mask = ~0ull;
}

/* @k, the kernel's action for @sig (the trampoline), as the program set it. */
static void unroute(int sig, struct tp_ksigaction *k)
{
	k->handler = (void *)(uintptr_t)handlers[sig];
	if (!how[sig].info)
		k->flags &= ~(unsigned long)SA_SIGINFO;
	if (!how[sig].onstack)
		k->flags &= ~(unsigned long)SA_ONSTACK;
	k->mask = how[sig].mask;
}

/* SIGSEGV is the runtime's while pages are write-protected for it (rt-smc.c): the
 * kernel keeps the trampoline whatever the program asks, and the program's action is
 * kept here and given back to it. */
static struct {
	int own;
	struct tp_ksigaction prog;
} segv;

static long segv_ours(void)
{
	struct tp_ksigaction k = {.handler = (void *)&tp_dbt_rt_sigtramp,
				  .flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | TP_SA_RESTORER,
				  .restorer = (void *)&tp_dbt_rt_sigreturn,
				  .mask = ~0ull};

	return tp_raw4(SYS_rt_sigaction, SIGSEGV, &k, NULL, 8);
}

uint64_t tp_dbt_sig_handler(int sig)
{
	return sig > 0 && sig < 65 ? handlers[sig] : 0;
}

void tp_dbt_sig_native(void)
{
	struct tp_dbt_thread *t = tp_dbt_self();

	tp_raw2(SYS_sigaltstack, &t->prog_ss, NULL);
	for (int sig = 1; sig < 65; sig++) {
		struct tp_ksigaction k;

		if (sig == SIGSEGV && segv.own) {
			tp_raw4(SYS_rt_sigaction, sig, &segv.prog, NULL, 8);
			continue;
		}
		if (!handlers[sig] || tp_raw4(SYS_rt_sigaction, sig, NULL, &k, 8))
			continue;
		if (k.handler == (void *)&tp_dbt_rt_sigtramp)
			unroute(sig, &k);
		tp_raw4(SYS_rt_sigaction, sig, &k, NULL, 8);
	}
}

int tp_dbt_sig_own_segv(void)
{
	if (segv.own)
		return 0;
	if (tp_raw4(SYS_rt_sigaction, SIGSEGV, NULL, &segv.prog, 8))
		return -1;
	if (handlers[SIGSEGV]) {
		/* the kernel has the trampoline already */
		unroute(SIGSEGV, &segv.prog);
	} else if (segv_ours()) {
		return -1;
	}
	segv.own = 1;
	return 0;
}

/* A SIGSEGV while the runtime owns it: a write to a guarded page goes on (0); else the
 * program's handler (its address), or the program's default action, as natively. */
static uint64_t segv_enter(struct tp_dbt_thread *t, siginfo_t *si, ucontext_t *uc)
{
	greg_t *g = uc->uc_mcontext.gregs;
	uint64_t h;

	/* a page fault (14) of a write (2) to a present page (1) */
	if (g[REG_TRAPNO] == 14 && (g[REG_ERR] & 3) == 3) {
		int in = __atomic_load_n(&t->in_c, __ATOMIC_SEQ_CST), fixed;

		/* in the runtime's C code, which holds the lock already */
		if (!in)
			tp_dbt_c_enter(t);
		fixed = tp_dbt_smc_fault((uint64_t)g[REG_CR2]);
		if (!in)
			tp_dbt_c_leave(t);
		if (fixed)
			return 0;
	}
	h = handlers[SIGSEGV];
	if (h && (segv.prog.flags & SA_RESETHAND)) {
		/* the kernel would reset it: the runtime does, keeping its own */
		handlers[SIGSEGV] = 0;
		segv.prog.handler = SIG_DFL;
		segv.prog.flags &= ~(unsigned long)SA_RESETHAND;
		segv_ours();
	}
	if (h)
		return h;
	/* the program's default action: the counts so far, then the fault again (or the
	 * signal sent again) with the default action in place */
	tp_dbt_flush_all();
	segv.prog.handler = SIG_DFL;
	tp_raw4(SYS_rt_sigaction, SIGSEGV, &segv.prog, NULL, 8);
	if (si->si_code <= 0)
		tp_raw2(SYS_kill, tp_raw0(SYS_getpid), SIGSEGV);
	return 0;
}

/* The program's pc while the runtime's own code runs (outside its C code, where signals
 * wait): where it goes on, which NEXT holds (rt-entry.S), a cache or a program address. */
static uint64_t runtime_pc(uint64_t next)
{
	uint64_t pc = tp_dbt_map_program_pc(next);

	if (pc || !next || tp_dbt_in_runtime(next))
		return pc;
	return next;
}

/* The kernel's flag and minimum (glibc's MINSIGSTKSZ is a sysconf() call). */
#ifndef SS_AUTODISARM
#define SS_AUTODISARM (1u << 31)
#endif
#define KERNEL_MINSIGSTKSZ 2048u

/* What the trampoline passes and gets back (rt-entry.S): the frame's address (its return
 * address, then the ucontext), the handler's siginfo and ucontext arguments. */
struct tp_dbt_sigio {
	uint64_t frame, si, uc, sig, mask;
};

static int on_stack(const stack_t *ss, uint64_t sp)
{
	uint64_t base = (uint64_t)(uintptr_t)ss->ss_sp;

	return !(ss->ss_flags & SS_DISABLE) && ss->ss_size && sp > base && sp - base <= ss->ss_size;
}

/* The program's alternate stack as the kernel would describe it at @sp. */
static stack_t prog_stack(const struct tp_dbt_thread *t, uint64_t sp)
{
	stack_t ss = t->prog_ss;

	if (!ss.ss_size || (ss.ss_flags & SS_DISABLE))
		ss.ss_flags = SS_DISABLE | (ss.ss_flags & (int)SS_AUTODISARM);
	else
		ss.ss_flags = (on_stack(&t->prog_ss, sp) ? SS_ONSTACK : 0) |
			      (ss.ss_flags & (int)SS_AUTODISARM);
	return ss;
}

void tp_dbt_sig_thread(struct tp_dbt_thread *t, const stack_t *ss)
{
	stack_t k = {.ss_sp = (void *)(uintptr_t)t->alt, .ss_flags = 0, .ss_size = TP_DBT_ALT_SIZE};

	tp_raw2(SYS_sigaltstack, &k, NULL);
	if (ss)
		t->prog_ss = *ss;
	else
		t->prog_ss = (stack_t){.ss_sp = NULL, .ss_flags = SS_DISABLE, .ss_size = 0};
}

long tp_dbt_sigaltstack(struct tp_dbt_thread *t, uint64_t uss, uint64_t uold, uint64_t sp)
{
	stack_t old = prog_stack(t, sp), ss;
	int mode;

	if (uss) {
		if (tp_rt_mem_read(uss, &ss, sizeof(ss)))
			return -EFAULT;
		if (on_stack(&t->prog_ss, sp))
			return -EPERM;
		mode = ss.ss_flags & ~(int)SS_AUTODISARM;
		if (mode != SS_DISABLE && mode != SS_ONSTACK && mode != 0)
			return -EINVAL;
		if (mode == SS_DISABLE) {
			ss.ss_sp = NULL;
			ss.ss_size = 0;
		} else if (ss.ss_size < KERNEL_MINSIGSTKSZ) {
			return -ENOMEM;
		}
		t->prog_ss = ss;
	}
	if (uold && tp_rt_mem_write(uold, &old, sizeof(old)))
		return -EFAULT;
	return 0;
}

/* The kernel put the frame on the runtime's alternate stack: move it where it would have
 * put it natively, the program's alternate stack or below the interrupted stack pointer's
 * red zone.  A frame delivered while the runtime's stack was already in use stays. */
static int move_frame(struct tp_dbt_thread *t, int sig, struct tp_dbt_sigio *io)
{
	uint64_t top = t->alt + TP_DBT_ALT_SIZE, sp, dest, shift, len;
	ucontext_t *uc = (ucontext_t *)(uintptr_t)io->uc;
	stack_t ss;
	int in_rt;

	sp = (uint64_t)uc->uc_mcontext.gregs[REG_RSP];
	if (io->frame < t->alt || io->frame >= top || (sp > t->alt && sp <= top))
		return 0;
	/* On the runtime's stack (an entry into C, or a deferred signal sent again as its C
	 * code returns), the program is where it entered, its rsp in PRSP: the handler runs as
	 * it would have there, and its own entries into C run below the live ones. */
	in_rt = sp <= t->self && t->self - sp <= TP_DBT_T_STACK_SIZE; /* the stack ends at t */
	if (in_rt) {
		t->stack = (sp - 128) & ~63ull;
		sp = t->prsp;
		uc->uc_mcontext.gregs[REG_RSP] = (greg_t)sp; /* put back at sigreturn */
	}
	ss = prog_stack(t, sp);
	if (how[sig].onstack && !ss.ss_flags)
		dest = (uint64_t)(uintptr_t)ss.ss_sp + ss.ss_size;
	else
		dest = sp - 128;
	dest &= ~63ull; /* the kernel's alignment of the fpu state is kept */
	shift = dest - top;
	len = top - io->frame;
	/* a native frame below the stack's lowest page grows it: a plain store does too */
	if (tp_rt_mem_write(io->frame + shift, (const void *)(uintptr_t)io->frame, len))
		memcpy((void *)(uintptr_t)(io->frame + shift), (const void *)(uintptr_t)io->frame,
		       len);
	io->frame += shift;
	io->si += shift;
	io->uc += shift;
	uc = (ucontext_t *)(uintptr_t)io->uc;
	if (uc->uc_mcontext.fpregs)
		uc->uc_mcontext.fpregs =
		    (fpregset_t)((uint64_t)(uintptr_t)uc->uc_mcontext.fpregs + shift);
	uc->uc_stack = ss;
	if (how[sig].onstack && !ss.ss_flags && (t->prog_ss.ss_flags & (int)SS_AUTODISARM))
		t->prog_ss = (stack_t){.ss_sp = NULL, .ss_flags = SS_DISABLE, .ss_size = 0};
	return 0;
}

/* A signal that came while the runtime's C code ran, kept for tp_dbt_c_leave(): one of each
 * standard signal, as the kernel keeps them pending (a second instance merges); real-time
 * ones queue, up to TP_DBT_PENDING in all (the kernel's own queue has a limit too). */
static void defer(struct tp_dbt_thread *t, const siginfo_t *si)
{
	int n = t->npending;

	if (si->si_signo < 32) /* the kernel's first real-time signal */
		for (int i = 0; i < n; i++)
			if (t->pending[i].si_signo == si->si_signo)
				return;
	if (n < TP_DBT_PENDING) {
		t->pending[n] = *si;
		t->npending = n + 1;
	}
}

uint64_t tp_dbt_sig_enter(int sig, struct tp_dbt_sigio *io)
{
	struct tp_dbt_thread *t = tp_dbt_self();
	siginfo_t *si = (siginfo_t *)(uintptr_t)io->si;
	ucontext_t *uc = (ucontext_t *)(uintptr_t)io->uc;
	uint64_t h = sig > 0 && sig < 65 ? handlers[sig] : 0, frame, stack, prsp, rsp;
	int n;

	if (sig == SIGSEGV && segv.own && !(h = segv_enter(t, si, uc)))
		return 0;
	if (__atomic_load_n(&t->in_c, __ATOMIC_SEQ_CST)) {
		defer(t, si);
		return 0;
	}
	frame = t->frame;
	stack = t->stack;
	prsp = t->prsp;
	rsp = (uint64_t)uc->uc_mcontext.gregs[REG_RSP];
	if (sig > 0 && sig < 65)
		move_frame(t, sig, io);
	uc = (ucontext_t *)(uintptr_t)io->uc;
	si = (siginfo_t *)(uintptr_t)io->si;
	memcpy(&io->mask, &uc->uc_sigmask, 8);
	if (sig > 0 && sig < 65)
		io->mask |= how[sig].mask | (how[sig].nodefer ? 0 : tp_sigbit(sig));
	n = __atomic_fetch_add(&t->nsave, 1, __ATOMIC_SEQ_CST);
	if (n < TP_DBT_SAVES) {
		struct tp_dbt_saved *s = &t->save[n];

		s->frame = frame;
		s->stack = stack;
		s->prsp = prsp;
		s->rt_rsp = rsp != (uint64_t)uc->uc_mcontext.gregs[REG_RSP] ? rsp : 0;
		s->uc = (uint64_t)(uintptr_t)uc;
		s->rax = t->rax;
		s->rcx0 = t->rcx0;
		s->rdx = t->rdx;
		s->next = t->next;
		s->arg = t->arg;
		for (int k = 0; k < TP_DBT_NCELLS; k++)
			s->count[k] = *tp_dbt_cell(t, k);
		s->ibl_rcx = t->ibl_rcx;
		s->ibl_rdx = t->ibl_rdx;
		s->cache_pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
		s->prog_pc = tp_dbt_map_program_pc(s->cache_pc);
		/* on its way into a handler (the trampoline unblocked signals): natively, the
		 * handler's first instruction */
		if (s->cache_pc >= (uint64_t)(uintptr_t)&tp_dbt_rt_sigtramp_go &&
		    s->cache_pc < (uint64_t)(uintptr_t)&tp_dbt_rt_sigtramp_end) {
			uint64_t outer = (uint64_t)uc->uc_mcontext.gregs[REG_R13];

			s->prog_pc = outer > 0 && outer < 65 ? handlers[outer] : 0;
		} else if (!s->prog_pc && tp_dbt_in_runtime(s->cache_pc)) {
			s->prog_pc = runtime_pc(s->next);
		}
		if (s->prog_pc) {
			/* right after a syscall, rcx holds the pc after it, as rip does */
			if ((uint64_t)uc->uc_mcontext.gregs[REG_RCX] == s->cache_pc)
				uc->uc_mcontext.gregs[REG_RCX] = (greg_t)s->prog_pc;
			uc->uc_mcontext.gregs[REG_RIP] = (greg_t)s->prog_pc;
			/* the faulting instruction's address */
			if ((sig == SIGILL || sig == SIGFPE) && si->si_addr == (void *)s->cache_pc)
				si->si_addr = (void *)(uintptr_t)s->prog_pc;
		}
	} else {
		__atomic_fetch_sub(&t->nsave, 1, __ATOMIC_SEQ_CST);
		tp_dbt_fail("signal handlers nested too deeply", 0);
	}
	tp_dbt_client_signal(t, si, uc);
	return h;
}

_Static_assert(offsetof(struct tp_dbt_thread, prsp) == TP_DBT_T_PRSP, "the program's rsp");

extern const uint8_t tp_dbt_tpl_count[], tp_dbt_tpl_count_w[], tp_dbt_tpl_count_n[];
extern const uint8_t tp_dbt_tpl_rep_post[], tp_dbt_tpl_rep_w[], tp_dbt_tpl_rep_w2[];

/* Is @pc in a copy of the template @tpl at @at bytes from its start?  The bytes before
 * the window are compared (no patched field is among them). */
static int in_template(uint64_t pc, const uint8_t *tpl, const uint8_t *at, const uint8_t *cmp_end)
{
	uint64_t start = pc - (uint64_t)(at - tpl);

	return tp_dbt_in_runtime(start) && tp_dbt_in_runtime(start + (uint64_t)(cmp_end - tpl)) &&
	       !memcmp((const void *)(uintptr_t)start, tpl, (size_t)(cmp_end - tpl));
}

extern const uint8_t tp_dbt_tpl_count_regs[], tp_dbt_tpl_count_regs_len[];

/* Is there a copy of the count's template through the register @r at @start (its two
 * disp32 and the lea's not compared)? */
static int at_count_reg(uint64_t start, int r)
{
	const uint8_t *t = tp_dbt_tpl_count_regs + 32 * r, *p = (const uint8_t *)(uintptr_t)start;
	size_t n = tp_dbt_tpl_count_regs_len[r];

	return tp_dbt_in_runtime(start) && tp_dbt_in_runtime(start + n) && !memcmp(p, t, 5) &&
	       !memcmp(p + 9, t + 9, n - 22) && !memcmp(p + n - 9, t + n - 9, 5);
}

/* The same for the count's templates through a dead register (rt-count.c): interrupted
 * after its load, at the lea or the store, that register holds the cell's value. */
static void count_fix_reg(ucontext_t *uc, struct tp_dbt_thread *t, const struct tp_dbt_saved *s)
{
	static const int greg[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP,
				     REG_RSI, REG_RDI, REG_R8,	REG_R9,	 REG_R10, REG_R11,
				     REG_R12, REG_R13, REG_R14, REG_R15};
	uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP], start;
	int32_t off;

	for (int r = 0; r < 16; r++) {
		size_t n = tp_dbt_tpl_count_regs_len[r];

		if (r == 4)
			continue;
		if (at_count_reg(pc - 9, r))
			start = pc - 9;
		else if (at_count_reg(pc - (n - 9), r))
			start = pc - (n - 9);
		else
			continue;
		memcpy(&off, (const void *)(uintptr_t)(start + 5), 4);
		for (int k = 0; k < TP_DBT_NCELLS; k++)
			if (off == TP_DBT_CELL_OFF(k))
				uc->uc_mcontext.gregs[greg[r]] +=
				    (greg_t)(*tp_dbt_cell(t, k) - s->count[k]);
		return;
	}
}

/* The count is read, added to and stored back by several instructions: a handler that
 * interrupted them counted into the value they hold in a register, which would store
 * over its instructions.  That register gets what the handler added to the cell it holds
 * (a block's cell is the disp32 of its load, after the template's first 14 bytes; the rep
 * templates' is the first). */
static void count_fix(ucontext_t *uc, struct tp_dbt_thread *t, const struct tp_dbt_saved *s)
{
	uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP], start = 0;
	greg_t *rax = &uc->uc_mcontext.gregs[REG_RAX], *rdx = &uc->uc_mcontext.gregs[REG_RDX];
	const size_t load = (size_t)(tp_dbt_tpl_count_w - tp_dbt_tpl_count) - 4;
	int32_t off;

	if (in_template(pc, tp_dbt_tpl_count, tp_dbt_tpl_count_w, tp_dbt_tpl_count + load))
		start = pc - (uint64_t)(tp_dbt_tpl_count_w - tp_dbt_tpl_count);
	else if (in_template(pc, tp_dbt_tpl_count, tp_dbt_tpl_count_n, tp_dbt_tpl_count + load))
		start = pc - (uint64_t)(tp_dbt_tpl_count_n - tp_dbt_tpl_count);
	if (start) {
		memcpy(&off, (const void *)(uintptr_t)(start + load), 4);
		for (int k = 0; k < TP_DBT_NCELLS; k++)
			if (off == TP_DBT_CELL_OFF(k))
				*rax += (greg_t)(*tp_dbt_cell(t, k) - s->count[k]);
	} else if (in_template(pc, tp_dbt_tpl_rep_post, tp_dbt_tpl_rep_w, tp_dbt_tpl_rep_w)) {
		*rdx += (greg_t)(t->count - s->count[0]);
	} else if (in_template(pc, tp_dbt_tpl_rep_post, tp_dbt_tpl_rep_w2, tp_dbt_tpl_rep_w)) {
		*rax += (greg_t)(t->count - s->count[0]);
	} else {
		count_fix_reg(uc, t, s);
	}
}

/* rt_sigreturn with the frame at @rsp: the slots as the signal found them, and a resume
 * address in the cache even if the handler changed it to a program address. */
uint64_t tp_dbt_sig_return(uint64_t rsp)
{
	struct tp_dbt_thread *t = tp_dbt_self();
	ucontext_t *uc = (ucontext_t *)(uintptr_t)rsp;
	greg_t *rip = &uc->uc_mcontext.gregs[REG_RIP];
	struct tp_dbt_saved *s = NULL;
	uint64_t frame = t->frame, prsp = t->prsp;

	/* frames of handlers that longjmp'd out are dropped on the way */
	while (t->nsave > 0) {
		s = &t->save[--t->nsave];
		frame = s->frame;
		t->stack = s->stack;
		if (s->uc == rsp)
			break;
		s = NULL;
	}
	/* the pc the handler was shown: back where the signal came, in the cache; a pc it
	 * changed is the program's, translated */
	if (s && s->prog_pc && (uint64_t)*rip == s->prog_pc) {
		*rip = (greg_t)s->cache_pc;
	} else if (s && tp_dbt_map_rewound(s->cache_pc, s->prog_pc, (uint64_t)*rip)) {
		*rip = (greg_t)(s->cache_pc - 1);
	} else if (!tp_dbt_in_runtime((uint64_t)*rip)) {
		uint64_t to = tp_dbt_translate((uint64_t)*rip);

		if (to)
			*rip = (greg_t)to;
	}
	/* the kernel restores its alternate stack from the frame: the runtime's, always; the
	 * program's is what the handler left there (the kernel's rules: not while on it) */
	if (uc->uc_stack.ss_sp != (void *)(uintptr_t)t->alt && !on_stack(&t->prog_ss, rsp)) {
		stack_t ss = uc->uc_stack;

		ss.ss_flags &= ~SS_ONSTACK;
		if ((ss.ss_flags & SS_DISABLE) || ss.ss_size >= KERNEL_MINSIGSTKSZ)
			t->prog_ss = ss;
	}
	uc->uc_stack = (stack_t){
	    .ss_sp = (void *)(uintptr_t)t->alt, .ss_flags = 0, .ss_size = TP_DBT_ALT_SIZE};
	if (s) {
		t->rax = s->rax;
		t->rcx0 = s->rcx0;
		t->rdx = s->rdx;
		t->next = s->next;
		t->arg = s->arg;
		t->ibl_rcx = s->ibl_rcx;
		t->ibl_rdx = s->ibl_rdx;
		prsp = s->prsp;
		if (s->rt_rsp && (uint64_t)uc->uc_mcontext.gregs[REG_RSP] == prsp)
			uc->uc_mcontext.gregs[REG_RSP] = (greg_t)s->rt_rsp;
		count_fix(uc, t, s);
	}
	tp_dbt_client_signal(t, NULL, uc);
	/* it goes on there, whatever a flush does meanwhile */
	if (tp_dbt_in_runtime((uint64_t)*rip))
		tp_dbt_cache_pin(t, (uint64_t)*rip);
	tp_dbt_c_leave(t);
	/* the entry frame and PRSP of the code this handler interrupted, once off the runtime's
	 * stack: until then, a signal sent again by tp_dbt_c_leave() has its frame moved below
	 * the program's rsp of this call's entry, not over the frame at rsp */
	tp_dbt_rt_sigreturn(rsp, frame, prsp);
	return 0;
}

/* rt_sigaction of SIGSEGV while the runtime owns it: the kernel keeps the trampoline. */
static long segv_action(const struct tp_ksigaction *act, struct tp_ksigaction *oact, long size)
{
	struct tp_ksigaction old = segv.prog, k;
	uint64_t prev = handlers[SIGSEGV];
	long ret = 0;

	if (size != 8)
		return -EINVAL;
	if (act) {
		if (tp_rt_mem_read((uint64_t)(uintptr_t)act, &k, sizeof(k)))
			return -EFAULT;
		segv.prog = k;
		handlers[SIGSEGV] =
		    (uint64_t)(uintptr_t)k.handler > 1 ? (uint64_t)(uintptr_t)k.handler : 0;
		if (handlers[SIGSEGV]) {
			route(SIGSEGV, &k);
			k.flags &= ~(unsigned long)SA_RESETHAND; /* emulated (segv_enter) */
			ret = tp_raw4(SYS_rt_sigaction, SIGSEGV, &k, NULL, 8);
		} else {
			ret = segv_ours();
		}
		if (ret) {
			segv.prog = old;
			handlers[SIGSEGV] = prev;
			return ret;
		}
	}
	if (oact && tp_rt_mem_write((uint64_t)(uintptr_t)oact, &old, sizeof(old)))
		return -EFAULT;
	return 0;
}

/* rt_sigaction(@sig, @act, @oact, @size) on the program's behalf: handlers are recorded and
 * the kernel is given the trampoline; the program reads back its own. */
long tp_dbt_sigaction(long sig, const struct tp_ksigaction *act, struct tp_ksigaction *oact,
		      long size)
{
	struct tp_ksigaction k;
	uint64_t prev;
	struct how prev_how;
	long ret;

	if (sig <= 0 || sig >= 65)
		return tp_raw4(SYS_rt_sigaction, sig, act, oact, size);
	if (sig == SIGSEGV && segv.own)
		return segv_action(act, oact, size);
	prev = handlers[sig];
	prev_how = how[sig];
	if (act) {
		k = *act;
		if ((uint64_t)(uintptr_t)k.handler > 1)
			route((int)sig, &k);
	}
	ret = tp_raw4(SYS_rt_sigaction, sig, act ? &k : NULL, oact, size);
	if (ret) {
		handlers[sig] = prev;
		how[sig] = prev_how;
		return ret;
	}
	if (oact && oact->handler == (void *)&tp_dbt_rt_sigtramp) {
		struct how now = how[sig];
		uint64_t h = handlers[sig];

		handlers[sig] = prev;
		how[sig] = prev_how;
		unroute((int)sig, oact);
		handlers[sig] = h;
		how[sig] = now;
	}
	return 0;
}

void tp_dbt_c_leave(struct tp_dbt_thread *t)
{
	siginfo_t si[TP_DBT_PENDING];
	uint64_t all = ~0ull, mask;
	int n, pid, tid;

	tp_dbt_unlock();
	__atomic_store_n(&t->in_c, 0, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&t->npending, __ATOMIC_SEQ_CST))
		return;
	/* taken with every signal blocked (a handler's own C code would send them too), sent
	 * again with their siginfo, and delivered as the mask comes back */
	tp_raw4(SYS_rt_sigprocmask, SIG_BLOCK, &all, &mask, 8);
	n = t->npending;
	memcpy(si, t->pending, (size_t)n * sizeof(si[0]));
	t->npending = 0;
	pid = (int)tp_raw0(SYS_getpid);
	tid = tp_dbt_gettid();
	for (int i = 0; i < n; i++)
		tp_raw4(SYS_rt_tgsigqueueinfo, pid, tid, si[i].si_signo, &si[i]);
	tp_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &mask, NULL, 8);
}
