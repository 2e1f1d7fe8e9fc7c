/* Raw floor of ptrace single-stepping: a tracer and its tracee pinned to one CPU, the tracer
 * doing nothing but PTRACE_SINGLESTEP + waitpid over a dec/jnz loop.  No engine that steps
 * with ptrace can beat this; bench/count compares `tracepad count --engine ptrace` to it.
 * Usage: floor-ptrace [ITERATIONS]   (2 * ITERATIONS + a few dozen instructions stepped) */
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include "floor.h"

int main(int argc, char **argv)
{
	unsigned long n = floor_iterations(argc, argv), steps = 0;
	double t0, t1;
	int status;
	pid_t pid;

	if (floor_pin())
		perror("floor-ptrace: sched_setaffinity (not pinned)");
	pid = fork();
	if (pid < 0) {
		perror("floor-ptrace: fork");
		return 1;
	}
	if (pid == 0) {
		if (ptrace(PTRACE_TRACEME, 0, NULL, NULL))
			_exit(1);
		raise(SIGSTOP);
		bench_loop(n);
		_exit(0);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status)) {
		fprintf(stderr, "floor-ptrace: the child did not stop\n");
		return 1;
	}
	t0 = floor_now();
	for (;;) {
		if (ptrace(PTRACE_SINGLESTEP, pid, NULL, NULL)) {
			perror("floor-ptrace: PTRACE_SINGLESTEP");
			return 1;
		}
		if (waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status))
			break;
		steps++;
	}
	t1 = floor_now();
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "floor-ptrace: the child did not exit normally\n");
		return 1;
	}
	floor_print("floor-ptrace", steps, t1 - t0);
	return 0;
}
