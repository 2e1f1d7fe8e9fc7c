/* Tests of the event loop on launched programs: threads (clone, exit), fork/vfork/exec
 * following, exec by a non-leader thread, signals passed through, group-stops, int3,
 * syscall stops, and single-stepping across thread creation. */
#include <sys/syscall.h>

#include "proc-test.h"

static struct tp_proc *launch(char **argv, unsigned opts, int *fd)
{
	struct tp_launch l = {.argv = argv, .cpu = -1, .opts = opts};
	struct tp_proc *p = NULL;
	int r = launch_capture(&l, &p, fd);

	if (r)
		printf("# launch %s: %s\n", argv[0], strerror(-r));
	return p;
}

/* The new threads' first stops may come before their creator's clone events: with the creator
 * not the main thread, waitid() looks at the new thread first. */
static void test_nested_threads(void)
{
	char *argv[] = {target("target-threads"), "nested", NULL};
	struct counts c;
	struct tp_proc *p;
	int fd;

	for (int i = 0; i < 20; i++) {
		p = launch(argv, 0, &fd);
		if (!p)
			break;
		run_all(p, &c, NULL, NULL);
		if (c.ev[TP_EV_CLONE] != 5 || c.ev[TP_EV_EXITED] != 6 || c.bad_resumes ||
		    strcmp(read_all(fd), "threads=4 total=15005000\n")) {
			printf("# round %d: %d clones %d exits %d bad resumes\n", i,
			       c.ev[TP_EV_CLONE], c.ev[TP_EV_EXITED], c.bad_resumes);
			tp_proc_free(p);
			break;
		}
		tp_proc_free(p);
		if (i == 19)
			ok(1, "nested threads: 20 runs, 5 clones, 6 exits, output right");
	}
}

/* A child of the tracer that is not traced must not be reaped by tp_proc_wait(). */
static void test_unrelated_child(void)
{
	char *argv[] = {target("target-threads"), "nested", NULL};
	siginfo_t si = {0};
	struct counts c;
	struct tp_proc *p;
	int fd, st = 0;
	pid_t other = fork();

	if (other == 0)
		_exit(42);
	/* Until it is a zombie, without reaping it. */
	waitid(P_PID, other, &si, WEXITED | WNOWAIT);
	p = launch(argv, 0, &fd);
	if (!p)
		return;
	is_int(run_all(p, &c, NULL, NULL), -ECHILD, "unrelated: traced program ran to the end");
	is_int(c.ev[TP_EV_CLONE], 5, "unrelated: 5 clones");
	is_int(c.ev[TP_EV_EXITED], 6, "unrelated: 6 exits");
	is_str(read_all(fd), "threads=4 total=15005000\n", "unrelated: output");
	tp_proc_free(p);
	is_int(waitpid(other, &st, WNOHANG), other,
	       "unrelated: the other child is still ours to reap");
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 42, "unrelated: with its status");
}

static void test_threads(void)
{
	char *argv[] = {target("target-threads"), NULL};
	struct counts c;
	struct tp_proc *p;
	int fd, st;

	p = launch(argv, TP_PROC_TRACE_EXIT, &fd);
	ok(p, "threads: launch");
	if (!p)
		return;
	is_int(run_all(p, &c, NULL, NULL), -ECHILD, "threads: ran to the end");
	is_int(c.ev[TP_EV_CLONE], 4, "threads: 4 TP_EV_CLONE");
	is_int(c.ev[TP_EV_EXIT], 5, "threads: 5 TP_EV_EXIT");
	is_int(c.ev[TP_EV_EXITED], 5, "threads: 5 TP_EV_EXITED");
	is_int(c.leaders_exited, 1, "threads: one of them the leader");
	is_int(c.bad_resumes, 0, "threads: every resume (parents and new threads) accepted");
	st = tp_proc_exit_status(p);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "threads: exit status 0");
	is_str(read_all(fd), "threads=4 total=15005000\n", "threads: output");
	tp_proc_free(p);
}

/* Single-step every task, including new threads from their first instruction. */
static void test_step_threads(void)
{
	char *argv[] = {target("target-threads"), NULL};
	long steps = 0, other = 0, clones = 0, bad = 0, exited = 0;
	struct tp_event ev;
	struct tp_proc *p;
	int fd, r;

	p = launch(argv, 0, &fd);
	ok(p, "step threads: launch");
	if (!p)
		return;
	tp_proc_resume(p, tp_proc_pid(p), TP_RESUME_STEP, 0);
	while (!(r = tp_proc_wait(p, &ev))) {
		switch (ev.kind) {
		case TP_EV_STEP:
			steps++;
			bad += tp_proc_resume(p, ev.tid, TP_RESUME_STEP, 0) != 0;
			break;
		case TP_EV_CLONE:
			clones++;
			bad += tp_proc_resume(p, ev.tid, TP_RESUME_STEP, 0) != 0;
			bad += tp_proc_resume(p, ev.new_tid, TP_RESUME_STEP, 0) != 0;
			break;
		case TP_EV_EXITED:
			exited++;
			break;
		default:
			other++;
			bad += tp_proc_resume(p, ev.tid, TP_RESUME_STEP, ev.sig) != 0;
			break;
		}
	}
	is_int(r, -ECHILD, "step threads: to the end");
	is_int(clones, 4, "step threads: 4 clones");
	is_int(exited, 5, "step threads: 5 exits");
	is_int(other, 0, "step threads: only steps, clones and exits");
	is_int(bad, 0, "step threads: every resume accepted");
	ok(steps > 40000, "step threads: %ld steps", steps);
	is_str(read_all(fd), "threads=4 total=15005000\n", "step threads: output");
	tp_proc_free(p);
}

static void test_fork_exec(void)
{
	char *argv[] = {target("target-forkexec"), NULL};
	struct counts c;
	struct tp_proc *p;
	int fd;

	p = launch(argv, TP_PROC_FOLLOW_FORK | TP_PROC_TRACE_EXEC, &fd);
	ok(p, "fork: launch");
	if (!p)
		return;
	is_int(run_all(p, &c, NULL, NULL), -ECHILD, "fork: ran to the end");
	is_int(c.ev[TP_EV_FORK], 2, "fork: 2 TP_EV_FORK (fork, posix_spawn)");
	is_int(c.ev[TP_EV_EXEC], 2, "fork: 2 TP_EV_EXEC");
	ok(c.fork_child[0] > 0 && c.exec_tid[0] == c.fork_child[0],
	   "fork: the first child exec'd (%d, %d)", c.fork_child[0], c.exec_tid[0]);
	ok(c.fork_child[1] > 0 && c.exec_tid[1] == c.fork_child[1],
	   "fork: the spawned child exec'd (%d, %d)", c.fork_child[1], c.exec_tid[1]);
	is_int(c.leaders_exited, 3, "fork: 3 processes exited");
	ok(WIFEXITED(c.exit_status[0]) && WEXITSTATUS(c.exit_status[0]) == 0 &&
	       WIFEXITED(c.exit_status[1]) && WEXITSTATUS(c.exit_status[1]) == 0,
	   "fork: children exited with 0");
	is_int(c.bad_resumes, 0, "fork: every resume accepted");
	ok(WIFEXITED(tp_proc_exit_status(p)) && WEXITSTATUS(tp_proc_exit_status(p)) == 0,
	   "fork: parent exit status 0");
	is_str(read_all(fd), "fork status=0 spawn status=0\n", "fork: output");
	tp_proc_free(p);

	p = launch(argv, TP_PROC_TRACE_EXEC, &fd);
	if (!p)
		return;
	is_int(run_all(p, &c, NULL, NULL), -ECHILD, "no follow: ran to the end");
	is_int(c.ev[TP_EV_FORK] + c.ev[TP_EV_EXEC], 0, "no follow: no fork or exec event");
	is_int(c.leaders_exited, 1, "no follow: only the parent's exit");
	is_str(read_all(fd), "fork status=0 spawn status=0\n", "no follow: output");
	tp_proc_free(p);
}

static int exec_hook(struct tp_proc *p, struct tp_event *ev, void *arg)
{
	if (ev->kind == TP_EV_EXEC)
		*(struct tp_event *)arg = *ev;
	return 0;
}

static void test_thread_exec(void)
{
	char *argv[] = {target("target-threxec"), NULL};
	struct tp_event exec = {0};
	struct counts c;
	struct tp_proc *p;
	int fd, st;

	p = launch(argv, TP_PROC_TRACE_EXEC, &fd);
	ok(p, "thread exec: launch");
	if (!p)
		return;
	is_int(run_all(p, &c, exec_hook, &exec), -ECHILD, "thread exec: ran to the end");
	is_int(c.ev[TP_EV_EXEC], 1, "thread exec: one TP_EV_EXEC");
	is_int(exec.tid, tp_proc_pid(p), "thread exec: reported under the leader's tid");
	ok(exec.old_tid != exec.tid && exec.old_tid > 0, "thread exec: old_tid is the thread (%d)",
	   exec.old_tid);
	is_int(c.ev[TP_EV_CLONE], 3, "thread exec: 3 clones");
	/* The two sleepers die; the old leader and the exec'ing tid vanish without a report. */
	is_int(c.ev[TP_EV_EXITED], 3, "thread exec: 2 sleepers + the new image exited");
	st = tp_proc_exit_status(p);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "thread exec: /bin/true's status 0");
	is_int(c.bad_resumes, 0, "thread exec: every resume accepted");
	close(fd);
	tp_proc_free(p);
}

static int siginfo_hook(struct tp_proc *p, struct tp_event *ev, void *arg)
{
	int *n = arg;

	if (ev->kind == TP_EV_SIGNAL && ev->sig == SIGUSR1 && ev->si.si_signo == SIGUSR1 &&
	    ev->si.si_code == SI_TKILL && ev->si.si_pid == tp_proc_pid(p))
		(*n)++;
	return 0;
}

static char proc_state(pid_t pid)
{
	char path[64], buf[512], *rp;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	buf[fread(buf, 1, sizeof(buf) - 1, f)] = 0;
	fclose(f);
	rp = strrchr(buf, ')');
	return rp ? rp[2] : 0;
}

static int stop_hook(struct tp_proc *p, struct tp_event *ev, void *arg)
{
	char *state = arg;

	if (ev->kind != TP_EV_GROUP_STOP)
		return 0;
	/* Resuming a group-stopped task leaves it stopped (PTRACE_LISTEN) until SIGCONT. */
	tp_proc_resume(p, ev->tid, TP_RESUME_CONT, 0);
	*state = proc_state(ev->tid);
	kill(ev->tid, SIGCONT);
	return 1;
}

static int trap_hook(struct tp_proc *p, struct tp_event *ev, void *arg)
{
	int *good = arg;
	uint64_t pc = 0;
	uint8_t b = 0;

	if (ev->kind != TP_EV_BREAKPOINT)
		return 0;
	tp_proc_get_pc(ev->tid, &pc);
	tp_proc_read(ev->pid, pc - 1, &b, 1);
	*good = ev->si.si_code == SI_KERNEL && b == 0xcc;
	/* Not one of ours: the program's own int3, so its SIGTRAP is passed on. */
	tp_proc_resume(p, ev->tid, TP_RESUME_CONT, SIGTRAP);
	return 1;
}

static void test_signals(void)
{
	char *argv[] = {target("target-signals"), NULL, NULL};
	int fd, n = 0, st, good = 0;
	struct counts c;
	struct tp_proc *p;
	char state = 0;

	argv[1] = "handle";
	p = launch(argv, 0, &fd);
	ok(p, "signals: launch");
	if (!p)
		return;
	run_all(p, &c, siginfo_hook, &n);
	is_int(c.sig[SIGUSR1], 5, "signals: 5 SIGUSR1 stops");
	is_int(n, 5, "signals: with their siginfo (SI_TKILL from the program)");
	is_int(c.sig[SIGUSR2], 1, "signals: 1 SIGUSR2 stop");
	is_str(read_all(fd), "usr1=5 usr2=1\n", "signals: handlers ran as without tracer");
	tp_proc_free(p);

	argv[1] = "term";
	p = launch(argv, 0, &fd);
	if (!p)
		return;
	run_all(p, &c, NULL, NULL);
	is_int(c.sig[SIGTERM], 1, "term: 1 SIGTERM stop");
	st = tp_proc_exit_status(p);
	ok(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "term: killed by SIGTERM (%#x)", st);
	is_str(read_all(fd), "before term\n", "term: output");
	tp_proc_free(p);

	argv[1] = "stop";
	p = launch(argv, 0, &fd);
	if (!p)
		return;
	run_all(p, &c, stop_hook, &state);
	is_int(c.sig[SIGSTOP], 1, "stop: SIGSTOP signal-delivery stop");
	is_int(c.ev[TP_EV_GROUP_STOP], 1, "stop: then a group-stop");
	ok(state == 't' || state == 'T', "stop: stays stopped after resume (state %c)", state);
	is_int(c.sig[SIGCONT], 1, "stop: SIGCONT passed through");
	is_int(c.bad_resumes, 0, "stop: every resume accepted");
	is_str(read_all(fd), "continued\n", "stop: continued after SIGCONT");
	tp_proc_free(p);

	argv[1] = "trap";
	p = launch(argv, 0, &fd);
	if (!p)
		return;
	run_all(p, &c, trap_hook, &good);
	is_int(c.ev[TP_EV_BREAKPOINT], 1, "trap: one TP_EV_BREAKPOINT");
	ok(good, "trap: si_code SI_KERNEL, pc after the int3");
	is_str(read_all(fd), "traps=1\n", "trap: the program's SIGTRAP handler ran");
	tp_proc_free(p);
}

/* Threads held stopped die when the leader exits (or the process is killed): their exits are
 * reported, and the leader's, which the kernel holds back until they are reaped. */
static void test_held_threads_die(void)
{
	char *argv[] = {target("target-exitgroup"), NULL};
	int fd, r, clones = 0, exited = 0, leader_status = -1, steps = 0;
	struct tp_event ev;
	struct tp_proc *p;
	pid_t pid;

	p = launch(argv, 0, &fd);
	if (!p)
		return;
	pid = tp_proc_pid(p);
	tp_proc_resume_all(p);
	while (!(r = tp_proc_wait(p, &ev))) {
		if (ev.kind == TP_EV_EXITED) {
			exited++;
			if (ev.leader)
				leader_status = ev.status;
			continue;
		}
		clones += ev.kind == TP_EV_CLONE;
		/* New threads are never resumed. */
		tp_proc_resume(p, ev.tid, TP_RESUME_CONT, ev.sig);
	}
	is_int(r, -ECHILD, "held threads: wait ends with -ECHILD");
	is_int(clones, 2, "held threads: 2 clones");
	is_int(exited, 3, "held threads: 3 exits reported");
	ok(WIFEXITED(leader_status) && WEXITSTATUS(leader_status) == 5,
	   "held threads: leader's exit status 5");
	close(fd);
	tp_proc_free(p);

	/* Step the leader with the others held, then SIGKILL the process. */
	argv[0] = target("target-threxec");
	p = launch(argv, 0, &fd);
	if (!p)
		return;
	pid = tp_proc_pid(p);
	clones = exited = 0;
	tp_proc_resume_all(p);
	while (clones < 3 && !(r = tp_proc_wait(p, &ev))) {
		clones += ev.kind == TP_EV_CLONE;
		if (clones < 3)
			tp_proc_resume(p, ev.tid, TP_RESUME_CONT, ev.sig);
	}
	/* The leader is at its third clone event; the new threads are stopped. */
	for (int i = 0; i < 100; i++) {
		if (tp_proc_resume(p, pid, TP_RESUME_STEP, 0) || tp_proc_wait(p, &ev) ||
		    ev.kind != TP_EV_STEP)
			break;
		steps++;
	}
	is_int(steps, 100, "killed: stepped the leader 100 times with 3 threads held");
	kill(pid, SIGKILL);
	/* The engine goes on: resuming a task killed while stopped succeeds. */
	is_int(tp_proc_resume(p, pid, TP_RESUME_STEP, 0), 0, "killed: resume after the kill");
	while (!(r = tp_proc_wait(p, &ev))) {
		exited += ev.kind == TP_EV_EXITED;
		if (ev.kind != TP_EV_EXITED)
			tp_proc_resume(p, ev.tid, TP_RESUME_CONT, 0);
	}
	is_int(r, -ECHILD, "killed: wait ends with -ECHILD");
	is_int(exited, 4, "killed: 4 exits reported");
	ok(WIFSIGNALED(tp_proc_exit_status(p)) && WTERMSIG(tp_proc_exit_status(p)) == SIGKILL,
	   "killed: by SIGKILL");
	close(fd);
	tp_proc_free(p);
}

/* A launched program whose main thread leaves with pthread_exit(): stop_all does not wait for
 * the zombie leader, and its exit comes after its threads'. */
static void test_launch_zombie_leader(void)
{
	char *argv[] = {target("target-zleader"), NULL};
	int fd, r, exited = 0, one = 1, clones = 0;
	uint64_t stop_addr = 0;
	char line[128];
	size_t got = 0;
	struct tp_event ev;
	struct tp_proc *p;
	pid_t pid;

	p = launch(argv, 0, &fd);
	if (!p)
		return;
	pid = tp_proc_pid(p);
	tp_proc_resume_all(p);
	while (got < sizeof(line) - 1 && read(fd, line + got, 1) == 1 && line[got] != '\n')
		got++;
	line[got] = 0;
	sscanf(line, "ready %lx", (unsigned long *)&stop_addr);
	while (clones < 2 && !(r = tp_proc_wait(p, &ev))) {
		clones += ev.kind == TP_EV_CLONE;
		tp_proc_resume(p, ev.tid, TP_RESUME_CONT, ev.sig);
		if (ev.kind == TP_EV_CLONE)
			tp_proc_resume(p, ev.new_tid, TP_RESUME_CONT, 0);
	}
	/* Until main has gone. */
	while (proc_state(pid) != 'Z')
		usleep(1000);
	is_int(tp_proc_stop_all(p, 0), 0, "zombie leader: stop_all returns");
	tp_proc_write(pid, stop_addr, &one, sizeof(one));
	is_int(tp_proc_resume_all(p), 0, "zombie leader: resume_all");
	while (!(r = tp_proc_wait(p, &ev))) {
		if (ev.kind == TP_EV_EXITED) {
			exited++;
			if (ev.leader)
				ok(exited == 3, "zombie leader: leader's exit reported last");
			continue;
		}
		tp_proc_resume(p, ev.tid, TP_RESUME_CONT, ev.sig);
	}
	is_int(exited, 3, "zombie leader: 3 exits");
	ok(WIFEXITED(tp_proc_exit_status(p)) && WEXITSTATUS(tp_proc_exit_status(p)) == 0,
	   "zombie leader: exit status 0");
	is_str(read_all(fd), "done\n", "zombie leader: output");
	tp_proc_free(p);
}

/* Detaching from a task stopped with a signal delivers it. */
static void test_detach_pending_signal(void)
{
	char *argv[] = {target("target-signals"), "handle", NULL};
	struct tp_event ev;
	struct tp_proc *p;
	int fd, st = -1, r;
	pid_t pid;

	p = launch(argv, 0, &fd);
	if (!p)
		return;
	pid = tp_proc_pid(p);
	tp_proc_resume_all(p);
	r = tp_proc_wait(p, &ev);
	ok(!r && ev.kind == TP_EV_SIGNAL && ev.sig == SIGUSR1, "detach: stopped with SIGUSR1");
	is_int(tp_proc_detach(p), 0, "detach: without resuming");
	is_int(waitpid(pid, &st, 0), pid, "detach: the program ran on");
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "detach: exit status 0");
	is_str(read_all(fd), "usr1=5 usr2=1\n", "detach: the pending SIGUSR1 was delivered");
}

static void test_syscalls(void)
{
	char *argv[] = {target("target-hello"), NULL};
	int fd, r, entries = 0, stops = 0, writes = 0, first_execve = 0;
	struct user_regs_struct regs;
	struct tp_event ev;
	struct tp_proc *p;

	p = launch(argv, 0, &fd);
	ok(p, "syscalls: launch");
	if (!p)
		return;
	tp_proc_resume(p, tp_proc_pid(p), TP_RESUME_SYSCALL, 0);
	while (!(r = tp_proc_wait(p, &ev)) && ev.kind != TP_EV_EXITED) {
		if (ev.kind == TP_EV_SYSCALL) {
			tp_proc_get_regs(ev.tid, &regs);
			/* We start inside execve: its exit stop comes first. */
			if (!stops++)
				first_execve = regs.orig_rax == SYS_execve && regs.rax == 0;
			/* rax is -ENOSYS at entry */
			if ((long)regs.rax == -ENOSYS) {
				entries++;
				writes += regs.orig_rax == SYS_write;
			}
		}
		tp_proc_resume(p, ev.tid, TP_RESUME_SYSCALL, ev.sig);
	}
	ok(entries > 10, "syscalls: %d entries", entries);
	ok(first_execve, "syscalls: the first stop is the exit of execve");
	ok(stops == 2 * entries, "syscalls: %d stops (+ execve's exit, - exit_group's)", stops);
	is_int(writes, 1, "syscalls: one write");
	read_all(fd);
	tp_proc_kill(p);
}

int main(int argc, char **argv)
{
	target_dir = argc > 1 ? argv[1] : ".";
	test_threads();
	test_nested_threads();
	test_step_threads();
	test_fork_exec();
	test_thread_exec();
	test_signals();
	test_syscalls();
	test_detach_pending_signal();
	test_held_threads_die();
	test_launch_zombie_leader();
	test_unrelated_child();
	return tap_done();
}
