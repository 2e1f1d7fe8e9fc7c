/* libtracepad-agent.so loaded into a running process for a session: the task to call the
 * loader in, the injected dlopen of the agent, the call of its attach entry with tracepad's
 * shared block, and the check that an address the agent hands back lies in its own text.
 * Shared by every engine that attaches the agent (count's trapflag, trace's fast). */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <unistd.h>

#include "base/procfs.h"
#include "proc/inject.h"

#define TASKS_MAX 4096

pid_t tp_proc_loader_task(struct tp_proc *p, pid_t pid)
{
	pid_t tids[TASKS_MAX];
	int n = tp_proc_tasks(p, tids, TASKS_MAX);
	pid_t best = n > 0 ? tids[0] : pid, blocked = 0;

	for (int i = 0; i < n && i < TASKS_MAX; i++) {
		struct user_regs_struct regs;

		if (tids[i] == pid)
			best = pid;
		if (tp_proc_get_regs(tids[i], &regs) || (int64_t)regs.orig_rax < 0 ||
		    regs.orig_rax == SYS_futex)
			continue;
		if (tids[i] == pid)
			return pid;
		if (!blocked)
			blocked = tids[i];
	}
	return blocked ? blocked : best;
}

struct agent_where {
	uint64_t pc; /* 0: any address */
	const char *path;
	bool exec;	     /* an executable mapping only (so is one that holds pc) */
	uint64_t start, end; /* the mapping found */
};

static int is_agent_text(void *arg, const struct tp_maps_ent *e)
{
	struct agent_where *w = arg;

	if ((w->pc && (w->pc < e->start || w->pc >= e->end)) ||
	    ((w->pc || w->exec) && !tp_maps_exec(e)) || e->path_len != strlen(w->path) ||
	    memcmp(e->path, w->path, e->path_len))
		return 0;
	w->start = e->start;
	w->end = e->end;
	return 1;
}

bool tp_proc_agent_mapped(pid_t pid, const char *path, uint64_t pc)
{
	struct agent_where w = {.pc = pc, .path = path};

	return tp_maps_foreach(pid, is_agent_text, &w) == 1;
}

int tp_proc_agent_text(pid_t pid, const char *path, uint64_t *start, uint64_t *end)
{
	struct agent_where w = {.path = path, .exec = true};

	if (tp_maps_foreach(pid, is_agent_text, &w) != 1)
		return -ENOENT;
	*start = w.start;
	*end = w.end;
	return 0;
}

int tp_proc_load_agent(struct tp_proc *p, pid_t pid, const struct tp_proc_dl *dl,
		       struct tp_proc_agent *a, char *why, size_t whylen)
{
	uint64_t handle = 0, entry = 0, ret = 0, args[6] = {0};
	char msg[256];
	int r;

	if (!a->agent || !realpath(a->agent, a->path)) {
		snprintf(why, whylen,
			 "cannot find libtracepad-agent.so next to tracepad (set TRACEPAD_AGENT)");
		return -ENOENT;
	}
	a->tid = tp_proc_loader_task(p, pid);
	/* NODELETE: the agent stays loaded, inert, after the session (INTERNALS.md) */
	r = tp_proc_inject_dlopen(p, pid, a->tid, dl, a->path,
				  RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE, a->entry, &handle, &entry,
				  msg, sizeof(msg));
	if (r) {
		snprintf(why, whylen, "cannot load the agent: %s",
			 r == -ENOENT ? msg : strerror(-r));
		return r == -ESRCH ? r : -EIO;
	}
	args[0] = (uint64_t)getpid();
	args[1] = (uint64_t)a->fd;
	r = tp_proc_inject_fcall(p, pid, a->tid, entry, args, true, &ret);
	if (r) {
		snprintf(why, whylen, "cannot start the agent: %s", strerror(-r));
		return r == -ESRCH ? r : -EIO;
	}
	if ((int32_t)ret) {
		/* the block's error field, written by the agent: bounded before it is read */
		char err[256] = "";

		if (a->error && a->error_len) {
			size_t n = a->error_len < sizeof(err) ? a->error_len : sizeof(err);

			memcpy(err, (const char *)a->error, n - 1);
			err[n - 1] = 0;
		}
		snprintf(why, whylen, "the agent refused the session: %s",
			 (int32_t)ret == -3 ? "another one is under way"
			 : err[0]	    ? err
					    : "it cannot open tracepad's shared block");
		return -EIO;
	}
	return 0;
}
