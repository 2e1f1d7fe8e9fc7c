/* Tests of tp_proc_attach/detach on a running 4-thread program: memory access while
 * attached, repeated attach/detach leaving the program intact, stop_all/resume_all, a
 * group-stopped process, and errors. */
#include <time.h>

#include "proc-test.h"

static pid_t spawn_spin(int *out_fd, uint64_t *magic, uint64_t *stop)
{
	char *argv[] = {target("target-spin"), NULL};
	char line[128];
	int pfd[2];
	size_t got = 0;
	pid_t pid;

	if (pipe(pfd))
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pfd[1]);
	/* The first line, byte by byte, so that nothing after it is consumed. */
	while (got < sizeof(line) - 1 && read(pfd[0], line + got, 1) == 1 && line[got] != '\n')
		got++;
	line[got] = 0;
	if (sscanf(line, "ready %lx %lx", (unsigned long *)magic, (unsigned long *)stop) != 2) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	*out_fd = pfd[0];
	return pid;
}

/* Every task of @p stopped: ptrace requests on a running task fail with ESRCH. */
static int count_stopped(struct tp_proc *p)
{
	struct user_regs_struct regs;
	pid_t tids[64];
	int n = tp_proc_tasks(p, tids, 64), s = 0;

	for (int i = 0; i < n && i < 64; i++)
		s += tp_proc_get_regs(tids[i], &regs) == 0;
	return s;
}

static void test_attach_detach(void)
{
	uint64_t magic_addr = 0, stop_addr = 0;
	int fd, ok_rounds = 0, st = -1, one = 1;
	long magic = 0, want = 0x1234;
	struct tp_proc *p;
	char expect[64];
	pid_t pid;

	pid = spawn_spin(&fd, &magic_addr, &stop_addr);
	ok(pid > 0, "attach: target running");
	if (pid <= 0)
		return;
	for (int i = 0; i < 20; i++) {
		int r = tp_proc_attach(pid, 0, &p), n;

		if (r) {
			printf("# attach round %d: %s\n", i, strerror(-r));
			break;
		}
		n = tp_proc_tasks(p, NULL, 0);
		if (n != 5 || count_stopped(p) != 5 || tp_proc_pid(p) != pid) {
			printf("# round %d: %d tasks, %d stopped\n", i, n, count_stopped(p));
			tp_proc_detach(p);
			break;
		}
		if (tp_proc_read(pid, magic_addr, &magic, sizeof(magic)) != sizeof(magic) ||
		    magic != want) {
			printf("# round %d: magic %#lx, want %#lx\n", i, magic, want);
			tp_proc_detach(p);
			break;
		}
		want = 0x5000 + i;
		if (tp_proc_write(pid, magic_addr, &want, sizeof(want)) ||
		    (i == 19 && tp_proc_write(pid, stop_addr, &one, sizeof(one)))) {
			tp_proc_detach(p);
			break;
		}
		if (tp_proc_detach(p))
			break;
		ok_rounds++;
	}
	is_int(ok_rounds, 20, "attach: 20 rounds of attach, 5 tasks stopped, read, write, detach");
	is_int(waitpid(pid, &st, 0), pid, "attach: target finished");
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "attach: exit status 0 (%#x)", st);
	snprintf(expect, sizeof(expect), "threads=4 errors=0 magic=%lx\n", want);
	is_str(read_all(fd), expect, "attach: no error seen by the target, last write kept");
}

static void test_stop_resume_all(void)
{
	uint64_t magic_addr = 0, stop_addr = 0;
	int fd, good = 0, st = -1, one = 1, r;
	struct tp_proc *p = NULL;
	pid_t pid;

	pid = spawn_spin(&fd, &magic_addr, &stop_addr);
	if (pid <= 0)
		return;
	r = tp_proc_attach(pid, 0, &p);
	is_int(r, 0, "stop_all: attach");
	if (r)
		goto out;
	for (int i = 0; i < 10; i++) {
		struct timespec ts = {0, 2000000};

		if (tp_proc_resume_all(p) || count_stopped(p) != 0)
			break;
		nanosleep(&ts, NULL);
		if (tp_proc_stop_all(p, 0) || count_stopped(p) != 5)
			break;
		good++;
	}
	is_int(good, 10, "stop_all: 10 rounds, all 5 running after resume_all, stopped after");
	tp_proc_write(pid, stop_addr, &one, sizeof(one));
	is_int(tp_proc_detach(p), 0, "stop_all: detach");
out:
	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "stop_all: target exit status 0");
	is_str(read_all(fd), "threads=4 errors=0 magic=1234\n", "stop_all: target output");
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

static void test_group_stopped(void)
{
	uint64_t magic_addr = 0, stop_addr = 0;
	int fd, st = -1, one = 1, r, waits = 0;
	struct tp_proc *p = NULL;
	char state;
	pid_t pid;

	pid = spawn_spin(&fd, &magic_addr, &stop_addr);
	if (pid <= 0)
		return;
	kill(pid, SIGSTOP);
	waitpid(pid, &st, WUNTRACED);
	ok(WIFSTOPPED(st), "stopped: target group-stopped");
	r = tp_proc_attach(pid, 0, &p);
	is_int(r, 0, "stopped: attach to a stopped process");
	is_int(tp_proc_tasks(p, NULL, 0), 5, "stopped: 5 tasks");
	tp_proc_write(pid, stop_addr, &one, sizeof(one));
	/* resume_all keeps group-stopped tasks stopped */
	is_int(tp_proc_resume_all(p), 0, "stopped: resume_all");
	is_int(tp_proc_stop_all(p, 0), 0, "stopped: stop_all");
	is_int(tp_proc_detach(p), 0, "stopped: detach");
	/* Detached tasks go back to their group-stop: poll until they have. */
	while ((state = proc_state(pid)) != 'T' && waits++ < 10000)
		usleep(1000);
	is_int(state, 'T', "stopped: still stopped after detach");
	kill(pid, SIGCONT);
	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "stopped: finishes after SIGCONT (%#x)", st);
	is_str(read_all(fd), "threads=4 errors=0 magic=1234\n", "stopped: target output");
}

/* main gone with pthread_exit(): its threads are traced, stopped and detached without it. */
static void test_zombie_leader(void)
{
	char *argv[] = {target("target-zleader"), NULL};
	char line[128];
	uint64_t stop_addr = 0;
	struct tp_proc *p = NULL;
	int pfd[2], st = -1, one = 1, r;
	size_t got = 0;
	pid_t pid;

	if (pipe(pfd))
		return;
	pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pfd[1]);
	while (got < sizeof(line) - 1 && read(pfd[0], line + got, 1) == 1 && line[got] != '\n')
		got++;
	line[got] = 0;
	sscanf(line, "ready %lx", (unsigned long *)&stop_addr);
	/* Until main has gone. */
	while (proc_state(pid) != 'Z')
		usleep(1000);
	r = tp_proc_attach(pid, 0, &p);
	is_int(r, 0, "zombie leader: attach");
	if (r) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return;
	}
	is_int(tp_proc_tasks(p, NULL, 0), 2, "zombie leader: its 2 threads");
	is_int(count_stopped(p), 2, "zombie leader: both stopped");
	is_int(tp_proc_resume_all(p), 0, "zombie leader: resume_all");
	is_int(tp_proc_stop_all(p, 0), 0, "zombie leader: stop_all");
	is_int(tp_proc_write(pid, stop_addr, &one, sizeof(one)), 0, "zombie leader: write memory");
	one = 0;
	is_int(tp_proc_read(pid, stop_addr, &one, sizeof(one)), sizeof(one),
	       "zombie leader: read memory");
	is_int(one, 1, "zombie leader: the value written");
	is_int(tp_proc_detach(p), 0, "zombie leader: detach");
	is_int(waitpid(pid, &st, 0), pid, "zombie leader: process ended");
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "zombie leader: exit status 0");
	is_str(read_all(pfd[0]), "done\n", "zombie leader: output");
}

static void test_attach_errors(void)
{
	struct tp_proc *p = NULL, *p2 = NULL;
	uint64_t magic_addr, stop_addr;
	int fd, st, one = 1;
	char why[200] = "";
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	is_int(tp_proc_attach(pid, 0, &p), -ESRCH, "errors: reaped pid -> -ESRCH");
	is_int(tp_proc_attach(0x3fffffff, 0, &p), -ESRCH, "errors: pid out of range -> -ESRCH");
	is_int(tp_proc_attach(-1, 0, &p), -ESRCH, "errors: pid -1 -> -ESRCH");

	pid = spawn_spin(&fd, &magic_addr, &stop_addr);
	if (pid <= 0)
		return;
	/* Another user may not attach; the reason names the owner. */
	if (getuid() == 0) {
		pid_t other = fork();

		if (other == 0) {
			struct tp_proc *q = NULL;
			int e;

			if (setgid(65534) || setuid(65534))
				_exit(3);
			e = tp_proc_attach(pid, 0, &q);
			if (e != -EPERM)
				_exit(1);
			tp_proc_perm_reason(pid, why, sizeof(why));
			_exit(strstr(why, "belongs to user 0") ? 0 : 2);
		}
		waitpid(other, &st, 0);
		ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		   "errors: another user gets -EPERM and the reason (%#x)", st);
	}
	is_int(tp_proc_attach(pid, 0, &p), 0, "errors: attach");
	is_int(tp_proc_attach(pid, 0, &p2), -EPERM, "errors: second attach -> -EPERM");
	is_int(tp_proc_perm_reason(pid, why, sizeof(why)), 0, "errors: reason");
	ok(strstr(why, "already traced"), "errors: reason says already traced: %s", why);
	tp_proc_write(pid, stop_addr, &one, sizeof(one));
	tp_proc_detach(p);

	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "errors: target exit status 0");
	read_all(fd);
}

int main(int argc, char **argv)
{
	target_dir = argc > 1 ? argv[1] : ".";
	test_attach_detach();
	test_stop_resume_all();
	test_group_stopped();
	test_zombie_leader();
	test_attach_errors();
	return tap_done();
}
