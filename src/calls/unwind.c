/* libdw unwinding of ptrace-stopped threads for `tracepad calls --bt` and plugins: our own
 * Dwfl_Thread_Callbacks feed libdwfl the registers src/proc read at the stop and the stack
 * words through process_vm_readv, with tracepad's return trampolines mapped back. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <dwarf.h>
#include <elfutils/libdwfl.h>

#include "calls/unwind.h"
#include "base/log.h"
#include "proc/proc.h"

#define STACK_PAGE 4096

struct tp_unwinder {
	Dwfl *dwfl;
	pid_t pid;
	unsigned gen; /* reports of the objects so far (tp_unwinder_gen) */
	/* The backtrace in progress (libdwfl hands us back only a pointer). */
	pid_t tid;
	const struct user_regs_struct *regs;
	tp_unwind_subst_fn subst;
	void *subst_arg;
	uint64_t *pcs;
	int n, max;
	/* One page of stack read at once: a frame's words sit next to each other. */
	uint64_t page_addr;
	size_t page_len; /* 0: nothing cached */
	uint8_t page[STACK_PAGE];
};

static const Dwfl_Callbacks report_cbs = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
};

static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
	struct tp_unwinder *u = arg;

	/* Only the thread asked for: the others may be running. */
	if (*thread_argp)
		return 0;
	*thread_argp = u;
	return u->tid;
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
	struct tp_unwinder *u = arg;

	if (tid != u->tid)
		return false;
	*thread_argp = u;
	return true;
}

static bool read_word(struct tp_unwinder *u, uint64_t addr, uint64_t *val)
{
	uint64_t base = addr & ~(uint64_t)(STACK_PAGE - 1);

	if (addr - base > STACK_PAGE - sizeof(*val))
		return tp_proc_read(u->pid, addr, val, sizeof(*val)) == sizeof(*val);
	if (!u->page_len || u->page_addr != base) {
		ssize_t got = tp_proc_read(u->pid, base, u->page, STACK_PAGE);

		u->page_addr = base;
		u->page_len = got > 0 ? (size_t)got : 0;
	}
	if (addr - base + sizeof(*val) > u->page_len)
		return false;
	memcpy(val, u->page + (addr - base), sizeof(*val));
	return true;
}

static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	struct tp_unwinder *u = arg;
	uint64_t v;

	if (u->subst && u->subst(u->subst_arg, u->tid, addr, &v)) {
		*result = v;
		return true;
	}
	if (!read_word(u, addr, &v))
		return false;
	*result = v;
	return true;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *arg)
{
	struct tp_unwinder *u = arg;
	const struct user_regs_struct *r = u->regs;
	/* DWARF register numbers of x86-64 (psABI): rax rdx rcx rbx rsi rdi rbp rsp r8-r15,
	 * then 16, the return address column, which holds rip. */
	Dwarf_Word dw[17] = {r->rax, r->rdx, r->rcx, r->rbx, r->rsi, r->rdi, r->rbp, r->rsp, r->r8,
			     r->r9,  r->r10, r->r11, r->r12, r->r13, r->r14, r->r15, r->rip};

	if (!dwfl_thread_state_registers(thread, 0, 17, dw))
		return false;
	dwfl_thread_state_register_pc(thread, r->rip);
	return true;
}

static const Dwfl_Thread_Callbacks thread_cbs = {
    .next_thread = next_thread,
    .get_thread = get_thread,
    .memory_read = memory_read,
    .set_initial_registers = set_initial_registers,
};

static int report(struct tp_unwinder *u)
{
	/* unique across unwinders: another one may come at a freed one's address */
	static unsigned reports;
	int r;

	u->gen = ++reports;
	dwfl_report_begin(u->dwfl);
	r = dwfl_linux_proc_report(u->dwfl, u->pid);
	if (dwfl_report_end(u->dwfl, NULL, NULL) && !r)
		r = EIO;
	if (r) {
		/* A positive errno from reading /proc/PID/maps, or -1 for libdwfl's own. */
		tp_dbg("unwind: reporting the objects of %d: %s", u->pid,
		       r > 0 ? strerror(r) : dwfl_errmsg(-1));
		return r > 0 ? -r : -EIO;
	}
	return 0;
}

struct tp_unwinder *tp_unwinder_new(pid_t pid)
{
	struct tp_unwinder *u = calloc(1, sizeof(*u));
	int err;

	if (!u)
		return NULL;
	u->pid = pid;
	u->dwfl = dwfl_begin(&report_cbs);
	if (!u->dwfl) {
		err = -ENOMEM;
		goto err_free;
	}
	err = report(u);
	if (err)
		goto err_end;
	/* The architecture comes from the reported modules (Elf NULL). */
	if (!dwfl_attach_state(u->dwfl, NULL, pid, &thread_cbs, u)) {
		tp_dbg("unwind: attach state to %d: %s", pid, dwfl_errmsg(-1));
		err = -EIO;
		goto err_end;
	}
	return u;

err_end:
	dwfl_end(u->dwfl);
err_free:
	free(u);
	errno = -err;
	return NULL;
}

void tp_unwinder_free(struct tp_unwinder *u)
{
	if (!u)
		return;
	dwfl_end(u->dwfl);
	free(u);
}

int tp_unwinder_refresh(struct tp_unwinder *u)
{
	return report(u);
}

unsigned tp_unwinder_gen(const struct tp_unwinder *u)
{
	return u->gen;
}

static int frame_cb(Dwfl_Frame *frame, void *arg)
{
	struct tp_unwinder *u = arg;
	Dwarf_Addr pc;
	bool activation;

	if (!dwfl_frame_pc(frame, &pc, &activation) || (!pc && u->n))
		return DWARF_CB_ABORT;
	/* libdwfl gives return addresses as they are (isactivation false): report them so. */
	u->pcs[u->n++] = pc;
	return u->n < u->max ? DWARF_CB_OK : DWARF_CB_ABORT;
}

int tp_unwinder_backtrace(struct tp_unwinder *u, pid_t tid, const struct user_regs_struct *regs,
			  tp_unwind_subst_fn subst, void *arg, uint64_t *pcs, int max)
{
	int r;

	if (max < 1)
		return -EINVAL;
	u->tid = tid;
	u->regs = regs;
	u->subst = subst;
	u->subst_arg = arg;
	u->pcs = pcs;
	u->n = 0;
	u->max = max;
	u->page_len = 0;
	r = dwfl_getthread_frames(u->dwfl, tid, frame_cb, u);
	/* The outermost frame (_start, clone) often ends in an error: what came before holds. */
	if (r == -1 && !u->n)
		tp_dbg("unwind: thread %d: %s", tid, dwfl_errmsg(-1));
	if (!u->n) {
		pcs[0] = regs->rip;
		u->n = 1;
	}
	u->regs = NULL;
	u->subst = NULL;
	u->pcs = NULL;
	return u->n;
}

/* A register rule "at CFA + offset" (libdw's two operations for it): its offset. */
static bool at_cfa(const Dwarf_Op *ops, size_t n, int64_t *off)
{
	if (n != 2 || ops[0].atom != DW_OP_call_frame_cfa || ops[1].atom != DW_OP_plus_uconst)
		return false;
	*off = (int64_t)ops[1].number;
	return true;
}

static int frame_rule(Dwarf_Frame *f, struct tp_unwind_rule *r)
{
	Dwarf_Op mem[3], *ops;
	size_t n;
	bool signal;
	int64_t off;

	memset(r, 0, sizeof(*r));
	if (dwarf_frame_info(f, NULL, NULL, &signal) < 0 || signal)
		return -ENOENT;
	/* DWARF register 16: the return address column */
	if (dwarf_frame_register(f, 16, mem, &ops, &n))
		return -ENOENT;
	if (!n && ops == mem) {
		r->end = true; /* undefined: no caller */
		return 0;
	}
	if (!at_cfa(ops, n, &off) || off != -8)
		return -ENOENT;
	if (dwarf_frame_cfa(f, &ops, &n) || n != 1 || ops[0].atom != DW_OP_bregx ||
	    (ops[0].number != 6 && ops[0].number != 7))
		return -ENOENT;
	r->cfa_rbp = ops[0].number == 6;
	r->cfa_off = (int64_t)ops[0].number2;
	if (r->cfa_off != (int32_t)r->cfa_off)
		return -ENOENT;
	if (dwarf_frame_register(f, 6, mem, &ops, &n))
		return -ENOENT;
	if (n || ops) {
		if (!at_cfa(ops, n, &r->rbp_off) || r->rbp_off != (int16_t)r->rbp_off)
			return -ENOENT;
		r->rbp_saved = true;
	}
	return 0;
}

int tp_unwinder_rule(struct tp_unwinder *u, uint64_t pc, bool ret, struct tp_unwind_rule *r)
{
	Dwfl_Module *mod = dwfl_addrmodule(u->dwfl, ret ? pc - 1 : pc);

	if (!mod)
		return -ENOENT;
	/* as libdwfl's frame unwinder: .eh_frame, then .debug_frame */
	for (int which = 0; which < 2; which++) {
		Dwarf_Addr bias;
		Dwarf_CFI *cfi =
		    which ? dwfl_module_dwarf_cfi(mod, &bias) : dwfl_module_eh_cfi(mod, &bias);
		Dwarf_Frame *f;
		int err;

		if (!cfi || dwarf_cfi_addrframe(cfi, (ret ? pc - 1 : pc) - bias, &f))
			continue;
		err = frame_rule(f, r);
		free(f);
		return err;
	}
	return -ENOENT;
}
