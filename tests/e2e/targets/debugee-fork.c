/* A program that forks and runs a shell command, for scripted gdb sessions (tests/debug):
 * the child of fork() calls the function the session breaks on, as the parent does. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) int work(int x)
{
	return x * 2;
}

int main(void)
{
	int st = 0;
	pid_t p = fork();

	if (!p) {
		printf("child %d\n", work(1));
		return 3;
	}
	waitpid(p, &st, 0);
	fflush(stdout);
	/* the shell prints nothing: its output would race with gdb's line on the vfork */
	st = WEXITSTATUS(st) * 10 + WEXITSTATUS(system("exit 4"));
	printf("parent %d, status %d\n", work(2), st);
	return 0;
}
