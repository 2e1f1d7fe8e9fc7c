/* Plugins' exit calls (tracepad_host.exit_call): before a process with one thread runs
 * libc's _exit(), it calls each function asked for, as valgrind runs __libc_freeres() at
 * exit.  Each call is made by pointing the thread at the function with _exit's entry as its
 * return address, so that it runs under the engine like any code (its traced calls are
 * stops as usual); back at _exit, the next one starts, and after the last the thread gets
 * the registers it entered _exit with. */
#include <errno.h>
#include <string.h>

#include "calls/engine.h"
#include "elf/symbols.h"

/* Below the stack pointer of _exit's entry, clear of anything the program keeps there. */
#define EXIT_CALL_GAP 256

/* Runtime address of "object:name" in @im, or 0. */
static uint64_t exit_call_addr(struct image *im, const char *spec)
{
	const char *colon = strchr(spec, ':');
	size_t olen = colon ? (size_t)(colon - spec) : 0;
	uint64_t vaddr;

	for (int i = 0; colon && i < im->nobjs; i++) {
		struct object *o = im->objs[i];

		if (strncmp(o->base, spec, olen) ||
		    (o->base[olen] && o->base[olen] != '.' && o->base[olen] != '-'))
			continue;
		if (!tp_elf_lookup(o->path, colon + 1, &vaddr, NULL))
			return vaddr + o->bias;
	}
	return 0;
}

int tp_calls_exit_detour(struct session *s, struct image *im, struct thread *t,
			 struct user_regs_struct *regs)
{
	struct user_regs_struct call;
	uint64_t fn = 0, at = regs->rip - 1;
	int err;

	if (!im->exit_next) {
		/* Other threads could be using what the calls free: single-threaded only.  A
		 * thread joined just before (its exit reported, or a zombie not yet reaped) runs
		 * nothing any more: glibc frees its stack and DTV in __libc_freeres. */
		if (tp_proc_live_tasks_of(s->p, t->pid) != 1)
			return 0;
		im->exit_regs = *regs;
	}
	while (!fn && im->exit_next < s->nexit_calls)
		fn = exit_call_addr(im, s->exit_calls[im->exit_next++]);
	if (!fn) {
		/* The calls are over: _exit as it was entered. */
		if (im->exit_next > s->nexit_calls)
			return 0;
		im->exit_next = s->nexit_calls + 1;
		*regs = im->exit_regs;
		return tp_proc_set_regs(t->tid, regs);
	}
	call = im->exit_regs;
	/* A function's entry sees its return address at an rsp that is 8 mod 16. */
	call.rsp = ((im->exit_regs.rsp - EXIT_CALL_GAP) & ~15ull) - 8;
	call.rip = fn;
	err = tp_proc_write(im->pid, call.rsp, &at, sizeof(at));
	if (!err)
		err = tp_proc_set_regs(t->tid, &call);
	if (!err)
		err = tp_proc_resume(s->p, t->tid, tp_calls_resume(s), 0);
	return err ? err : 1;
}
