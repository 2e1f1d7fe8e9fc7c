/* calls-events' target: process events to report.  "procev" execs itself as "procev run"
 * (the same process), which: raises SIGUSR1 and runs an int3 (both handled); forks a child that
 * execs "procev exit 3"; forks a child that it kills with SIGKILL; forks a child that execs "procev
 * term", which kills itself with SIGTERM; waits for each (SIGCHLD, default disposition) and
 * exits with 5.  Each process prints "ROLE PID" on stdout, for the test to name pids. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t got;

static void on_sig(int sig)
{
	got = sig;
}

static void say(const char *role)
{
	printf("%s %d\n", role, (int)getpid());
	fflush(stdout);
}

static pid_t child_exec(char *self, char *arg1, char *arg2)
{
	pid_t pid = fork();

	if (pid == 0) {
		char *argv[] = {self, arg1, arg2, NULL};

		execv(self, argv);
		_exit(127);
	}
	return pid;
}

int main(int argc, char **argv)
{
	pid_t pid;
	int st;

	if (argc > 2 && !strcmp(argv[1], "exit")) {
		say("exit");
		return atoi(argv[2]);
	}
	if (argc > 1 && !strcmp(argv[1], "term")) {
		say("term");
		kill(getpid(), SIGTERM);
		return 1;
	}
	if (argc < 2) {
		char *again[] = {argv[0], "run", NULL};

		execv(argv[0], again);
		return 127;
	}
	say("main");
	signal(SIGUSR1, on_sig);
	raise(SIGUSR1);
	if (got != SIGUSR1)
		return 1;
	signal(SIGTRAP, on_sig);
	__asm__ volatile("int3"); /* its own breakpoint: a SIGTRAP of the program */
	if (got != SIGTRAP)
		return 1;
	pid = child_exec(argv[0], "exit", "3");
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 3)
		return 1;
	pid = fork();
	if (pid == 0) {
		for (;;)
			pause();
	}
	printf("kill %d\n", (int)pid);
	fflush(stdout);
	kill(pid, SIGKILL);
	if (waitpid(pid, &st, 0) != pid || !WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
		return 1;
	pid = child_exec(argv[0], "term", NULL);
	if (waitpid(pid, &st, 0) != pid || !WIFSIGNALED(st) || WTERMSIG(st) != SIGTERM)
		return 1;
	return 5;
}
