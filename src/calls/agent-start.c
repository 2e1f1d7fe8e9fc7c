/* `tracepad calls --engine agent`: a launched program run to where the hooks go in (after
 * libc's constructor, or its entry point; a static program on to its main), under ptrace; the
 * loader's entry points the agent is loaded with; the pads a killed session left, taken out. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "base/log.h"
#include "base/procfs.h"
#include "calls/agent-priv.h"
#include "elf/file.h"
#include "proc/inject.h"

/* -S: the loader's system calls, as the ptrace engine shows them */
static int syscall_line(void *arg, const struct tp_event *ev)
{
	struct session *s = arg;
	int r;

	if (ev->kind != TP_EV_SYSCALL)
		return 0;
	tp_calls_agent_thread(s, ev->pid, ev->tid);
	r = tp_calls_syscall_stop(s, ev);
	return r ? r : 1;
}

/* Run the launched program's thread @pid to @at (an int3 there, taken out again). */
static int run_to(struct session *s, pid_t pid, uint64_t at)
{
	const struct tp_proc_run_to how = {tp_calls_resume(s), s->o->stop, syscall_line, s,
					   &s->status};

	return tp_proc_run_to(s->p, pid, at, &how);
}

static uint64_t symbol(pid_t pid, const char *name)
{
	struct tp_symtab *st = tp_symtab_new();
	uint64_t at = 0;

	if (!st || tp_symtab_load_pid(st, pid) || tp_symtab_find_symbol(st, name, &at))
		at = 0;
	tp_symtab_free(st);
	return at;
}

/* Run the launched program to where the hooks go in: right after libc's own constructor
 * (_init_first: the program's environment is libc's from then on), before any other object's
 * constructor, so that what those do is seen; that is the loader's _dl_init, then libc's
 * _init_first and its return.  Without the symbols of the loader or of libc, the program's
 * entry point: its objects' constructors have run by then.  (At _dl_init itself, the agent's
 * dlopen would run libc's constructor with no environment yet.) */
int tp_calls_agent_to_entry(struct session *s, pid_t pid)
{
	uint64_t at, entry, ret;
	int r;

	if (tp_proc_auxv(pid, AT_ENTRY, &entry))
		return -EIO;
	at = symbol(pid, "ld-linux:_dl_init");
	if (at) {
		r = run_to(s, pid, at);
		if (r)
			return r;
		at = symbol(pid, "libc:_init_first");
	}
	if (at) {
		struct user_regs_struct regs;

		r = run_to(s, pid, at);
		if (r)
			return r;
		if (!tp_proc_get_regs(pid, &regs) && tp_proc_read(pid, regs.rsp, &ret, 8) == 8)
			return run_to(s, pid, ret);
	}
	return run_to(s, pid, entry);
}

/* A static program at its entry point has no libc yet (its own start-up sets up TLS and
 * IFUNCs): it runs on to main, where its static dlopen can load the agent. */
int tp_calls_agent_to_main(struct session *s, struct agent *a)
{
	struct tp_symtab *st = tp_symtab_new();
	uint64_t main_pc = 0;
	int r;

	if (!st)
		return -ENOMEM;
	tp_symtab_load_pid(st, a->pid);
	r = tp_symtab_find_symbol(st, "main", &main_pc) ? -ENOENT : run_to(s, a->pid, main_pc);
	tp_symtab_free(st);
	return r;
}

/* dlopen, dlsym and dlerror of @im's libc, from that file's own symbols: the process's whole
 * symbol table (every object's, debug files too) took most of the start.  0 or -ENOENT. */
static int libc_dl(const struct image *im, struct tp_proc_dl *dl)
{
	static const char *const names[] = {"dlopen", "dlsym", "dlerror"};
	uint64_t *at[] = {&dl->dlopen, &dl->dlsym, &dl->dlerror};

	if (!im || im->is_static || !im->libc)
		return -ENOENT;
	for (int i = 0; i < 3; i++) {
		uint64_t v;

		if (tp_elf_lookup(im->libc->path, names[i], &v, NULL))
			return -ENOENT;
		*at[i] = v + im->libc->bias;
	}
	return 0;
}

/* The same from the process's symbols: a static program's own libc may have dlopen (static
 * dlopen: NSS, iconv).  0, or -EINVAL said. */
static int process_dl(const struct agent *a, struct tp_proc_dl *dl)
{
	struct tp_symtab *st = tp_symtab_new();
	int r = 0;

	if (!st)
		return -ENOMEM;
	tp_symtab_load_pid(st, a->pid);
	if ((tp_symtab_find_symbol(st, "libc:dlopen", &dl->dlopen) ||
	     tp_symtab_find_symbol(st, "libc:dlsym", &dl->dlsym)) &&
	    (!a->im || !a->im->is_static || tp_symtab_find_symbol(st, "dlopen", &dl->dlopen) ||
	     tp_symtab_find_symbol(st, "dlsym", &dl->dlsym))) {
		tp_err("--engine agent: no dlopen in process %d (a static program, or glibc before "
		       "2.34): use --engine ptrace",
		       a->pid);
		r = -EINVAL;
	} else if (tp_symtab_find_symbol(st, "libc:dlerror", &dl->dlerror) &&
		   tp_symtab_find_symbol(st, "dlerror", &dl->dlerror)) {
		dl->dlerror = 0;
	}
	tp_symtab_free(st);
	return r;
}

int tp_calls_agent_dl(const struct agent *a, struct tp_proc_dl *dl)
{
	return libc_dl(a->im, dl) ? process_dl(a, dl) : 0;
}

/* ---- a session whose tracepad was killed ---- */

struct orphan {
	char path[PATH_MAX]; /* the agent's file */
	uint64_t start, offset;
	uint64_t block; /* its session's block, still mapped */
};

static bool named(const struct tp_maps_ent *e, const char *name, bool tail)
{
	size_t n = strlen(name);

	return e->path_len >= n && !memcmp(e->path + (tail ? e->path_len - n : 0), name, n);
}

static int find_orphan(void *arg, const struct tp_maps_ent *e)
{
	struct orphan *o = arg;

	if (!o->block && !e->offset && named(e, "/memfd:tracepad-hooks", false))
		o->block = e->start;
	if (!o->start && tp_maps_exec(e) && named(e, "/libtracepad-agent.so", true) &&
	    e->path_len < sizeof(o->path)) {
		memcpy(o->path, e->path, e->path_len);
		o->path[e->path_len] = 0;
		o->start = e->start;
		o->offset = e->offset;
	}
	return 0;
}

int tp_calls_agent_orphan(struct session *s, pid_t pid)
{
	struct orphan o = {.start = 0};
	int32_t tracer = 0;
	uint64_t at, bias, busy = 0;
	int r;

	if (tp_maps_foreach(pid, find_orphan, &o) || !o.block || !o.start ||
	    tp_proc_read(pid, o.block + offsetof(struct tp_hk_ctl, tracer_pid), &tracer,
			 sizeof(tracer)) != sizeof(tracer))
		return 0;
	/* a session under way: the agent refuses this one, saying so */
	if (tracer > 0 && (!kill(tracer, 0) || errno != ESRCH))
		return 0;
	if (tp_elf_lookup(o.path, "tracepad_hooks_detach", &at, NULL) ||
	    tp_elf_map_bias(o.path, o.start, o.offset, &bias))
		return 0;
	r = tp_proc_inject_until_out(s->p, pid, tp_proc_loader_task(s->p, pid), at + bias,
				     DETACH_ROUNDS, NULL, NULL, &busy);
	tp_dbg("calls: the pads of a session whose tracepad is gone taken out: %d, busy %lld", r,
	       (long long)busy);
	return r == -ESRCH ? 0 : r;
}
