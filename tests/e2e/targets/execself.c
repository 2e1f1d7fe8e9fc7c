/* e2e target: the counted process itself calls execve, in the ways real programs do.  Each
 * image prints a line, so the tests compare the output with a native run; the instruction
 * counts of the engines that follow the exec must agree.
 * Usage:
 *   execself chain N      exec itself with N - 1 until 0, then exit with status 3
 *   execself fail         first an execve that fails (a file without execute permission,
 *                         made here), then one of a missing path, then exec /bin/echo
 *   execself path         execvp("echo") through a PATH whose first entries lack it
 *   execself thread       a second thread execs /bin/echo while the first one waits
 *   execself closefds     close every fd above 2, then exec itself (chain 1)
 *   execself vforkpath    a vfork child execvp's echo along a PATH whose first entries
 *                         lack it (its failed tries are not the parent's instructions)
 *   execself exec PROG..  exec PROG with its arguments (a setuid program, say) */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char *self;

static void chain(int n)
{
	char arg[16];

	printf("execself %d\n", n);
	fflush(stdout);
	if (n <= 0)
		exit(3);
	snprintf(arg, sizeof(arg), "%d", n - 1);
	execl(self, "execself", "chain", arg, (char *)NULL);
	perror("execself: execl");
	exit(1);
}

static int fail(void)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/tp-execself-%d", (int)getpid());
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
	if (fd < 0 || write(fd, "#!/bin/sh\n", 10) != 10 || close(fd)) {
		perror("execself: make the file");
		return 1;
	}
	execl(path, "noexec", (char *)NULL);
	printf("not executable: %s\n", strerror(errno));
	unlink(path);
	execl("/nonexistent/tp-execself", "missing", (char *)NULL);
	printf("missing: %s\n", strerror(errno));
	fflush(stdout);
	execl("/bin/echo", "echo", "after two failures", (char *)NULL);
	perror("execself: execl");
	return 1;
}

static void *exec_thread(void *arg)
{
	/* the first thread's way from pthread_create to pause, counted, done by then (its
	 * instructions must not depend on when the exec kills it) */
	struct timespec ts = {0, 200 * 1000 * 1000};

	(void)arg;
	nanosleep(&ts, NULL);
	execl("/bin/echo", "echo", "from a second thread", (char *)NULL);
	perror("execself: execl");
	exit(1);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	self = argv[0][0] == '/' ? argv[0] : realpath("/proc/self/exe", NULL);
	if (!strcmp(mode, "chain") && argc > 2)
		chain(atoi(argv[2]));
	if (!strcmp(mode, "fail"))
		return fail();
	if (!strcmp(mode, "path")) {
		setenv("PATH", "/nonexistent/a:/nonexistent/b:/usr/bin:/bin", 1);
		execlp("echo", "echo", "found on the PATH", (char *)NULL);
		perror("execself: execlp");
		return 1;
	}
	if (!strcmp(mode, "thread")) {
		pthread_t t;

		pthread_create(&t, NULL, exec_thread, NULL);
		for (;;)
			pause();
	}
	if (!strcmp(mode, "vforkpath")) {
		int st;
		pid_t pid;

		setenv("PATH", "/nonexistent/a:/nonexistent/b:/usr/bin:/bin", 1);
		pid = vfork();
		if (pid == 0) {
			execlp("echo", "echo", "child found echo", (char *)NULL);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, &st, 0) != pid)
			return 1;
		printf("child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
		return 0;
	}
	if (!strcmp(mode, "closefds")) {
		syscall(SYS_close_range, 3, ~0u, 0);
		chain(1);
	}
	if (!strcmp(mode, "exec") && argc > 2) {
		execv(argv[2], argv + 2);
		perror("execself: execv");
		return 1;
	}
	fprintf(stderr, "usage: execself chain N|fail|path|thread|closefds|exec PROG...\n");
	return 2;
}
