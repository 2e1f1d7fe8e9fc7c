/* Life cycle of traced processes: launch under ptrace, attach to a running process, detach,
 * kill, and the task table those share with the event loop (event.c). */
#include "proc/proc-priv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "base/paths.h"

extern char **environ;

/* ---- task table ---- */

struct tp_proc *tp_proc_alloc(pid_t pid, unsigned opts)
{
	struct tp_proc *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->pid = pid;
	p->opts = opts | TP_PROC_FOLLOW_THREADS;
	p->cap = 16;
	p->slots = calloc(p->cap, sizeof(*p->slots));
	if (!p->slots) {
		free(p);
		return NULL;
	}
	tp_proc_guard_track(p);
	return p;
}

static void table_put(struct tp_task **slots, unsigned cap, struct tp_task *t)
{
	unsigned i = tp_proc_hash(t->tid, cap);

	while (slots[i])
		i = (i + 1) & (cap - 1);
	slots[i] = t;
}

struct tp_task *tp_proc_task_add(struct tp_proc *p, pid_t tid, pid_t tgid)
{
	struct tp_task *t;

	/* Keep the load under one half so that probes stay short. */
	if (2 * (p->ntasks + 1) > p->cap) {
		unsigned ncap = p->cap * 2;
		struct tp_task **ns = calloc(ncap, sizeof(*ns));

		if (!ns)
			return NULL;
		for (unsigned i = 0; i < p->cap; i++)
			if (p->slots[i])
				table_put(ns, ncap, p->slots[i]);
		free(p->slots);
		p->slots = ns;
		p->cap = ncap;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->tid = tid;
	t->tgid = tgid;
	t->state = TP_TASK_STOPPED;
	t->how = TP_RESUME_CONT;
	table_put(p->slots, p->cap, t);
	p->ntasks++;
	return t;
}

void tp_proc_task_del(struct tp_proc *p, struct tp_task *t)
{
	unsigned mask = p->cap - 1, i = tp_proc_hash(t->tid, p->cap), j;

	while (p->slots[i] != t)
		i = (i + 1) & mask;
	/* Backward-shift deletion: no tombstones, lookups stay O(probe length). */
	for (j = (i + 1) & mask; p->slots[j]; j = (j + 1) & mask) {
		unsigned home = tp_proc_hash(p->slots[j]->tid, p->cap);

		if (((j - home) & mask) >= ((j - i) & mask)) {
			p->slots[i] = p->slots[j];
			i = j;
		}
	}
	p->slots[i] = NULL;
	if (t->state == TP_TASK_RUNNING)
		p->nrunning--;
	if (t->interrupting)
		p->ninterrupting--;
	if (p->last == t)
		p->last = NULL;
	p->ntasks--;
	free(t);
}

void tp_proc_task_set_state(struct tp_proc *p, struct tp_task *t, enum tp_task_state s)
{
	if (t->state == s)
		return;
	if (s == TP_TASK_RUNNING)
		p->nrunning++;
	else
		p->nrunning--;
	t->state = s;
}

int tp_proc_tgid_add(struct tp_proc *p, pid_t tgid)
{
	for (int i = 0; i < p->ntgids; i++)
		if (p->tgids[i] == tgid)
			return 0;
	if (p->ntgids == p->tgids_cap) {
		int ncap = p->tgids_cap ? 2 * p->tgids_cap : 4;
		pid_t *n = realloc(p->tgids, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		p->tgids = n;
		p->tgids_cap = ncap;
	}
	p->tgids[p->ntgids++] = tgid;
	return 0;
}

void tp_proc_tgid_del(struct tp_proc *p, pid_t tgid)
{
	for (int i = 0; i < p->ntgids; i++)
		if (p->tgids[i] == tgid) {
			p->tgids[i] = p->tgids[--p->ntgids];
			break;
		}
	tp_proc_memfd_drop(tgid);
}

unsigned tp_proc_ptrace_opts(unsigned opts)
{
	/* EXEC is always traced: it marks the start of a launched program, turns off the legacy
	 * post-exec SIGTRAP and lets exec by a non-leader thread be recognised.  EXITKILL is
	 * deliberately absent: if tracepad dies, its tracees are detached and keep running. */
	unsigned o = PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC | PTRACE_O_TRACESYSGOOD;

	if (opts & TP_PROC_FOLLOW_FORK)
		o |= PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK;
	if (opts & TP_PROC_TRACE_EXIT)
		o |= PTRACE_O_TRACEEXIT;
	return o;
}

void tp_proc_free(struct tp_proc *p)
{
	if (!p)
		return;
	tp_proc_guard_untrack(p);
	for (unsigned i = 0; i < p->cap; i++)
		free(p->slots[i]);
	for (int i = 0; i < p->ntgids; i++)
		tp_proc_memfd_drop(p->tgids[i]);
	free(p->slots);
	free(p->tgids);
	free(p->queue);
	free(p->held);
	free(p->early);
	free(p);
}

pid_t tp_proc_pid(const struct tp_proc *p)
{
	return p->pid;
}

int tp_proc_tasks(const struct tp_proc *p, pid_t *tids, int max)
{
	int n = 0;

	for (unsigned i = 0; i < p->cap; i++) {
		if (!p->slots[i])
			continue;
		if (n < max)
			tids[n] = p->slots[i]->tid;
		n++;
	}
	return n;
}

int tp_proc_tasks_of(const struct tp_proc *p, pid_t tgid, pid_t *tids, int max)
{
	int n = 0;

	for (unsigned i = 0; i < p->cap; i++) {
		if (!p->slots[i] || p->slots[i]->tgid != tgid)
			continue;
		if (n < max)
			tids[n] = p->slots[i]->tid;
		n++;
	}
	return n;
}

int tp_proc_live_tasks_of(const struct tp_proc *p, pid_t tgid)
{
	int n = 0;

	for (unsigned i = 0; i < p->cap; i++) {
		const struct tp_task *t = p->slots[i];

		if (t && t->tgid == tgid && !t->exiting && !tp_proc_is_zombie(t->tid))
			n++;
	}
	return n;
}

int tp_proc_exit_status(const struct tp_proc *p)
{
	return p->exit_status;
}

/* ---- launch ---- */

/* The environment of the program: ours, with @add entries replacing or extending it. */
static char **build_env(char *const *add)
{
	size_t n = 0, nadd = 0, i, j;
	char **env;

	while (environ && environ[n])
		n++;
	while (add && add[nadd])
		nadd++;
	env = calloc(n + nadd + 1, sizeof(*env));
	if (!env)
		return NULL;
	memcpy(env, environ, n * sizeof(*env));
	for (i = 0; i < nadd; i++) {
		const char *eq = strchr(add[i], '=');
		size_t klen;

		if (!eq || eq == add[i]) {
			free(env);
			errno = EINVAL;
			return NULL;
		}
		klen = eq - add[i] + 1;
		for (j = 0; j < n; j++)
			if (!strncmp(env[j], add[i], klen))
				break;
		env[j] = add[i];
		if (j == n)
			n++;
	}
	env[n] = NULL;
	return env;
}

/* execvpe() without its fallback to /bin/sh on ENOEXEC, so that the error of execve is what
 * the caller sees.  Runs in the forked child: no allocation. */
static void child_exec(const char *file, char *const *argv, char *const *envp, const char *path)
{
	bool eacces = false;
	char buf[PATH_MAX];
	const char *s = path;

	if (!*file) {
		errno = ENOENT;
		return;
	}
	if (strchr(file, '/')) {
		execve(file, argv, envp);
		return;
	}
	while (tp_path_next(&s, file, buf, sizeof(buf))) {
		execve(buf, argv, envp);
		switch (errno) {
		case EACCES:
			eacces = true;
			break;
		case ENOENT:
		case ENOTDIR:
		case ESTALE:
		case ENODEV:
		case ETIMEDOUT:
			break;
		default:
			return;
		}
	}
	errno = eacces ? EACCES : ENOENT;
}

/* The signal state tracepad was started with (tp_proc_save_signals): the signals left
 * ignored and the blocked mask, before the CLI put handlers of its own on SIGINT, SIGTERM,
 * SIGHUP and SIGPIPE (a handler becomes the default at the exec, SIG_IGN stays). */
static sigset_t start_ignored, start_blocked;
static bool start_saved;

void tp_proc_save_signals(void)
{
	sigemptyset(&start_ignored);
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;

		/* glibc's own (SIGCANCEL, SIGSETXID) are refused: tracepad never changes them */
		if (!sigaction(sig, NULL, &sa) && !(sa.sa_flags & SA_SIGINFO) &&
		    sa.sa_handler == SIG_IGN)
			sigaddset(&start_ignored, sig);
	}
	sigprocmask(SIG_SETMASK, NULL, &start_blocked);
	start_saved = true;
}

static void __attribute__((noreturn))
child_main(const struct tp_launch *l, char *const *envp, const char *path, int go_fd, int err_fd)
{
	sigset_t none;
	char c;
	int e;

	/* Wait until the parent has seized us, so that the exec is seen and any failure below
	 * is reported by an exit that the parent waits for. */
	if (read(go_fd, &c, 1) != 1)
		_exit(127);
	if (l->cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		if (l->cpu >= CPU_SETSIZE) {
			errno = EINVAL;
			goto fail;
		}
		CPU_SET(l->cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			goto fail;
	}
	for (int i = 0; i < l->nkeep_fds; i++) {
		int fl = fcntl(l->keep_fds[i], F_GETFD);

		if (fl < 0 || fcntl(l->keep_fds[i], F_SETFD, fl & ~FD_CLOEXEC) < 0)
			goto fail;
	}
	/* The tracer's handlers and blocked signals are its business, not the program's: it
	 * gets what tracepad was given, as it would natively (gdb does the same for its
	 * inferiors); a shell's background job has SIGINT ignored, nohup SIGHUP, say. */
	sigemptyset(&none);
	for (int sig = 1; start_saved && sig < NSIG; sig++) {
		struct sigaction sa;

		if (sigismember(&start_ignored, sig))
			signal(sig, SIG_IGN);
		else if (!sigaction(sig, NULL, &sa) && !(sa.sa_flags & SA_SIGINFO) &&
			 sa.sa_handler == SIG_IGN)
			signal(sig, SIG_DFL);
	}
	sigprocmask(SIG_SETMASK, start_saved ? &start_blocked : &none, NULL);
	child_exec(l->argv[0], l->argv, envp, path);
fail:
	e = errno;
	if (write(err_fd, &e, sizeof(e)) < 0)
		_exit(126);
	_exit(127);
}

int tp_proc_launch(const struct tp_launch *l, struct tp_proc **out)
{
	int go[2], err[2], st, e = 0, r;
	const char *path = tp_path_dirs();
	struct tp_proc *p;
	struct tp_task *t;
	char **envp;
	pid_t pid;

	*out = NULL;
	if (!l->argv || !l->argv[0] || (l->nkeep_fds && !l->keep_fds))
		return -EINVAL;
	envp = build_env(l->env_add);
	if (!envp)
		return -errno;
	if (pipe2(go, O_CLOEXEC)) {
		r = -errno;
		goto err_env;
	}
	if (pipe2(err, O_CLOEXEC)) {
		r = -errno;
		goto err_go;
	}
	pid = fork();
	if (pid < 0) {
		r = -errno;
		goto err_err;
	}
	if (pid == 0)
		child_main(l, envp, path, go[0], err[1]);
	close(err[1]);
	err[1] = -1;
	close(go[0]);
	go[0] = -1;

	p = tp_proc_alloc(pid, l->opts);
	if (!p || !tp_proc_task_add(p, pid, pid) || tp_proc_tgid_add(p, pid)) {
		r = -ENOMEM;
		goto err_child;
	}
	if (ptrace(PTRACE_SEIZE, pid, 0, tp_proc_ptrace_opts(p->opts))) {
		r = -errno;
		goto err_child;
	}
	if (write(go[1], "g", 1) != 1) {
		r = -errno;
		goto err_child;
	}
	close(go[1]);
	go[1] = -1;

	/* Until the exec stop: signals sent to the child meanwhile are passed on. */
	for (;;) {
		if (waitpid(pid, &st, __WALL) < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			goto err_child;
		}
		if (WIFEXITED(st) || WIFSIGNALED(st)) {
			if (read(err[0], &e, sizeof(e)) == sizeof(e) && e > 0)
				r = -e;
			else
				r = -ECHILD;
			goto err_reaped;
		}
		if (st >> 16 == PTRACE_EVENT_EXEC)
			break;
		if (st >> 16 == 0 && WSTOPSIG(st) != (SIGTRAP | 0x80))
			ptrace(PTRACE_CONT, pid, 0, WSTOPSIG(st));
		else
			ptrace(PTRACE_CONT, pid, 0, 0);
	}
	close(err[0]);
	free(envp);
	t = tp_proc_task_find(p, pid);
	t->held = true;
	*out = p;
	return 0;

err_child:
	kill(pid, SIGKILL);
	while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR)
		;
err_reaped:
	tp_proc_free(p);
err_err:
	if (err[1] >= 0)
		close(err[1]);
	close(err[0]);
err_go:
	if (go[0] >= 0)
		close(go[0]);
	if (go[1] >= 0)
		close(go[1]);
err_env:
	free(envp);
	return r;
}

/* ---- adopt ---- */

int tp_proc_adopt(pid_t pid, unsigned opts, struct tp_proc **out)
{
	struct tp_proc *p = tp_proc_alloc(pid, opts);
	int r = -ENOMEM;

	if (!p)
		return r;
	if (!tp_proc_task_add(p, pid, pid) || tp_proc_tgid_add(p, pid))
		goto err;
	if (ptrace(PTRACE_SETOPTIONS, pid, 0, (void *)(uintptr_t)tp_proc_ptrace_opts(p->opts))) {
		r = -errno;
		goto err;
	}
	*out = p;
	return 0;
err:
	tp_proc_free(p);
	return r;
}

/* ---- attach ---- */

/* tp_proc_set_interrupt(): the caller's flag that ends a wait for threads to stop. */
static volatile sig_atomic_t *attach_abort;

void tp_proc_set_interrupt(volatile sig_atomic_t *flag)
{
	attach_abort = flag;
}

/* A field of /proc/PID/status as an integer; -1 if absent. */
static long status_field(pid_t pid, const char *name)
{
	char path[64], line[256];
	size_t nlen = strlen(name);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, name, nlen) && line[nlen] == ':') {
			v = strtol(line + nlen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

pid_t tp_proc_tgid(pid_t tid)
{
	return (pid_t)status_field(tid, "Tgid");
}

static bool have_cap_sys_ptrace(void)
{
	char line[256];
	bool cap = false;
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "CapEff:", 7)) {
			cap = (strtoull(line + 7, NULL, 16) >> 19) & 1; /* CAP_SYS_PTRACE */
			break;
		}
	fclose(f);
	return cap;
}

int tp_proc_perm_reason(pid_t pid, char *buf, size_t len)
{
	long tracer = status_field(pid, "TracerPid"), uid = status_field(pid, "Uid");
	bool cap = have_cap_sys_ptrace();
	int scope = -1;
	FILE *f;

	if (tracer < 0)
		return -ESRCH;
	f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
	if (f) {
		if (fscanf(f, "%d", &scope) != 1)
			scope = -1;
		fclose(f);
	}
	if (tracer > 0)
		snprintf(buf, len, "process %d is already traced by process %ld", (int)pid, tracer);
	else if (scope == 3)
		snprintf(buf, len,
			 "ptrace is disabled on this system (kernel.yama.ptrace_scope is 3)");
	else if (scope == 2 && !cap)
		snprintf(buf, len,
			 "ptrace of process %d refused: kernel.yama.ptrace_scope is 2, only "
			 "CAP_SYS_PTRACE may attach",
			 (int)pid);
	else if (scope == 1 && !cap)
		snprintf(buf, len,
			 "ptrace of process %d refused: kernel.yama.ptrace_scope is 1, only its "
			 "ancestors may attach (set it to 0, or use CAP_SYS_PTRACE)",
			 (int)pid);
	else if (uid >= 0 && uid != (long)getuid() && !cap)
		snprintf(buf, len,
			 "ptrace of process %d refused: it belongs to user %ld (CAP_SYS_PTRACE is "
			 "needed)",
			 (int)pid, uid);
	else
		snprintf(buf, len,
			 "ptrace of process %d refused: it is not dumpable or runs with more "
			 "privileges (set-id, capabilities)",
			 (int)pid);
	return 0;
}

/* A leader that called pthread_exit() stays a zombie while its threads run: it can neither be
 * seized nor stopped, but its threads can. */
bool tp_proc_is_zombie(pid_t pid)
{
	char path[64], buf[512], *rp;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && rp[2] == 'Z';
}

/* Seize the threads of p->pid not seized yet; returns how many, or -errno. */
static int seize_new_threads(struct tp_proc *p, bool skip_leader)
{
	char path[64];
	struct dirent *d;
	int n = 0, r = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)p->pid);
	dir = opendir(path);
	if (!dir)
		return errno == ENOENT ? -ESRCH : -errno;
	while ((d = readdir(dir))) {
		pid_t tid = atoi(d->d_name);
		struct tp_task *t;

		if (tid <= 0 || tp_proc_task_find(p, tid) || (skip_leader && tid == p->pid))
			continue;
		if (ptrace(PTRACE_SEIZE, tid, 0, 0)) {
			/* A thread that exited meanwhile is not an error. */
			if (errno == ESRCH)
				continue;
			r = -errno;
			break;
		}
		t = tp_proc_task_add(p, tid, p->pid);
		if (!t) {
			ptrace(PTRACE_DETACH, tid, 0, 0);
			r = -ENOMEM;
			break;
		}
		tp_proc_task_set_state(p, t, TP_TASK_RUNNING);
		tp_proc_interrupt(p, t);
		n++;
	}
	closedir(dir);
	return r < 0 ? r : n;
}

int tp_proc_attach(pid_t pid, unsigned opts, struct tp_proc **out)
{
	unsigned popts = tp_proc_ptrace_opts(opts);
	bool zombie_leader = false;
	struct tp_proc *p;
	long tgid;
	int r;

	*out = NULL;
	if (pid <= 0)
		return -ESRCH;
	tgid = status_field(pid, "Tgid");
	if (tgid <= 0)
		return -ESRCH;
	p = tp_proc_alloc(tgid, opts);
	if (!p)
		return -ENOMEM;
	if (tp_proc_tgid_add(p, tgid)) {
		r = -ENOMEM;
		goto err_free;
	}
	/* The leader first, so that refusals are reported before touching any thread. */
	if (ptrace(PTRACE_SEIZE, (pid_t)tgid, 0, 0)) {
		r = -errno;
		if (r == -EPERM && tp_proc_is_zombie(tgid)) {
			zombie_leader = true;
		} else {
			if (r == -EPERM) {
				char why[200];

				if (!tp_proc_perm_reason(tgid, why, sizeof(why)))
					tp_dbg("%s\n", why);
			}
			goto err_free;
		}
	} else {
		struct tp_task *t = tp_proc_task_add(p, tgid, tgid);

		if (!t) {
			ptrace(PTRACE_DETACH, (pid_t)tgid, 0, 0);
			r = -ENOMEM;
			goto err_free;
		}
		tp_proc_task_set_state(p, t, TP_TASK_RUNNING);
		tp_proc_interrupt(p, t);
	}

	/* Stopped threads create no threads: once every known thread is stopped, a scan that
	 * finds nobody new is final.  New threads are seized without options, so none is
	 * auto-attached behind our back before this settles. */
	for (;;) {
		int nnew = seize_new_threads(p, zombie_leader);

		if (nnew < 0) {
			r = nnew;
			goto err_detach;
		}
		while (p->ninterrupting) {
			r = tp_proc_wait_queue(p);
			if (r == -EINTR && attach_abort && *attach_abort)
				goto err_abort;
			if (r < 0 && r != -EINTR)
				goto err_detach;
		}
		if (!p->ntasks) {
			r = -ESRCH;
			goto err_detach;
		}
		if (!nnew)
			break;
	}
	for (unsigned i = 0; i < p->cap; i++) {
		struct tp_task *t = p->slots[i];

		if (!t)
			continue;
		if (ptrace(PTRACE_SETOPTIONS, t->tid, 0, popts) && errno != ESRCH) {
			r = -errno;
			goto err_detach;
		}
		if (t->state == TP_TASK_STOPPED && !tp_proc_queued(p, t->tid))
			t->held = true;
	}
	*out = p;
	return 0;

err_detach:
	tp_proc_detach(p);
	return r;
err_abort:
	/* Nothing was changed yet: the stopped tasks are let go, those that did not stop are
	 * detached by the kernel when tracepad exits (their pending interrupt dropped). */
	for (unsigned i = 0; i < p->cap; i++)
		if (p->slots[i] && p->slots[i]->state == TP_TASK_STOPPED)
			ptrace(PTRACE_DETACH, p->slots[i]->tid, 0, p->slots[i]->pending_sig);
	r = -EINTR;
err_free:
	tp_proc_free(p);
	return r;
}

/* ---- detach, kill ---- */

/* Reap a task that vanished under us (killed while stopped) if it is already a zombie. */
static void reap_gone(pid_t tid)
{
	int st;

	waitpid(tid, &st, __WALL | WNOHANG);
}

int tp_proc_sig_masks(pid_t tid, struct tp_sig_masks *m)
{
	static const char *const names[] = {"SigPnd:", "SigBlk:", "SigIgn:", "SigCgt:"};
	uint64_t *fields[] = {&m->pending, &m->blocked, &m->ignored, &m->caught};
	char path[64], line[128];
	unsigned found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	while (found < 4 && fgets(line, sizeof(line), f)) {
		for (unsigned i = 0; i < 4; i++) {
			unsigned long long v;

			if (!strncmp(line, names[i], 7) && sscanf(line + 7, "%llx", &v) == 1) {
				*fields[i] = v;
				found++;
			}
		}
	}
	fclose(f);
	return found == 4 ? 0 : -EIO;
}

bool tp_proc_sig_pending(pid_t tid, int sig)
{
	struct tp_sig_masks m;

	return !tp_proc_sig_masks(tid, &m) && (m.pending >> (sig - 1) & 1);
}

/* A task interrupted in the middle of a single-step may have the step's SIGTRAP queued but
 * not yet dequeued: once detached, it would die of it.  Let it dequeue the trap while still
 * traced, and drop it. */
static void drop_step_trap(struct tp_task *t)
{
	int st;

	if (t->how != TP_RESUME_STEP || t->pending_sig || !tp_proc_sig_pending(t->tid, SIGTRAP))
		return;
	if (ptrace(PTRACE_CONT, t->tid, 0, 0))
		return;
	while (waitpid(t->tid, &st, __WALL) < 0 && errno == EINTR)
		;
}

int tp_proc_detach(struct tp_proc *p)
{
	int r = 0;

	if (!p)
		return 0;
	r = tp_proc_stop_all(p, 0);
	for (unsigned i = 0; i < p->cap; i++) {
		struct tp_task *t = p->slots[i];

		if (!t)
			continue;
		drop_step_trap(t);
		/* A group-stopped task detached with no signal goes back to its group-stop:
		 * the process stays stopped, as it was before we came. */
		if (ptrace(PTRACE_DETACH, t->tid, 0, t->pending_sig) && errno == ESRCH)
			reap_gone(t->tid);
	}
	for (int i = 0; i < p->nearly; i++)
		if (!WIFEXITED(p->early[i].status) && !WIFSIGNALED(p->early[i].status))
			ptrace(PTRACE_DETACH, p->early[i].tid, 0, 0);
	tp_proc_free(p);
	return r == -ECHILD ? 0 : r;
}

int tp_proc_detach_tgid(struct tp_proc *p, pid_t tgid)
{
	for (unsigned i = 0; i < p->cap; i++) {
		struct tp_task *t = p->slots[i];

		if (t && t->tgid == tgid && t->state != TP_TASK_STOPPED)
			return -EBUSY;
	}
	for (unsigned i = 0; i < p->cap; i++) {
		struct tp_task *t = p->slots[i];

		if (!t || t->tgid != tgid)
			continue;
		drop_step_trap(t);
		if (ptrace(PTRACE_DETACH, t->tid, 0, t->pending_sig) && errno == ESRCH)
			reap_gone(t->tid);
		tp_proc_task_del(p, t);
		i = -1u; /* the table was rehashed around the hole: scan again */
	}
	tp_proc_tgid_del(p, tgid);
	return 0;
}

void tp_proc_kill(struct tp_proc *p)
{
	struct tp_event ev;

	if (!p)
		return;
	for (int i = 0; i < p->ntgids; i++)
		kill(p->tgids[i], SIGKILL);
	for (int i = 0; i < p->nearly; i++)
		kill(p->early[i].tid, SIGKILL);
	/* SIGKILL ends ptrace-stops too: every task, stopped or not, reports its death; stops
	 * that raced with the kill are restarted. */
	for (unsigned i = 0; i < p->cap; i++)
		if (p->slots[i])
			tp_proc_task_set_state(p, p->slots[i], TP_TASK_RUNNING);
	while (p->ntasks) {
		int r = tp_proc_wait(p, &ev);

		if (r == -EINTR)
			continue;
		if (r < 0)
			break;
		if (ev.kind != TP_EV_EXITED)
			tp_proc_resume(p, ev.tid, TP_RESUME_CONT, 0);
	}
	for (int i = 0; i < p->nearly; i++)
		if (!WIFEXITED(p->early[i].status) && !WIFSIGNALED(p->early[i].status))
			while (waitpid(p->early[i].tid, NULL, __WALL) < 0 && errno == EINTR)
				;
	tp_proc_free(p);
}
