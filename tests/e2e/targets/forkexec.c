/* e2e target: forks (or vforks) a child that execs /bin/echo hi; the parent waits and prints
 * the child's status.  Under `tracepad count` the output and exit status must not change.
 * Usage: forkexec [fork|vfork] */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int use_vfork = argc > 1 && !strcmp(argv[1], "vfork");
	int status;
	pid_t pid;

	printf("forkexec: %s\n", use_vfork ? "vfork" : "fork");
	fflush(stdout);
	pid = use_vfork ? vfork() : fork();
	if (pid < 0) {
		perror("forkexec: fork");
		return 1;
	}
	if (pid == 0) {
		execl("/bin/echo", "echo", "hi", (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid) {
		perror("forkexec: waitpid");
		return 1;
	}
	if (WIFEXITED(status))
		printf("child exited with status %d\n", WEXITSTATUS(status));
	else
		printf("child killed by signal %d\n", WIFSIGNALED(status) ? WTERMSIG(status) : -1);
	return 0;
}
