/* e2e target for -p: prints "pid N", then ticks every 20 ms for SECONDS of wall-clock time
 * and exits 0.  With "traced", a child that is already ptrace'd by this process does the
 * ticking (and prints its pid), so that attaching to it must be refused.
 * Usage: spin SECONDS [traced] */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static unsigned long ticks;

__attribute__((noinline, noclone)) void tick(void)
{
	ticks++;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int run(double seconds)
{
	double end = now() + seconds;

	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	while (now() < end) {
		tick();
		usleep(20000);
	}
	printf("ticked\n");
	fflush(stdout); /* the traced child leaves by _exit */
	return 0;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? strtod(argv[1], NULL) : 5;
	int status;
	pid_t pid;

	if (argc < 3 || strcmp(argv[2], "traced"))
		return run(seconds);
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		if (ptrace(PTRACE_TRACEME, 0, NULL, NULL))
			_exit(1);
		_exit(run(seconds));
	}
	/* The tracer: pass every signal on until the child exits. */
	while (waitpid(pid, &status, 0) == pid) {
		if (WIFEXITED(status))
			return WEXITSTATUS(status);
		if (WIFSIGNALED(status))
			return 128 + WTERMSIG(status);
		ptrace(PTRACE_CONT, pid, NULL, (void *)(long)WSTOPSIG(status));
	}
	return 1;
}
