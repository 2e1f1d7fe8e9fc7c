/* Target of the proc tests: fork + exec of /bin/true, then posix_spawn (a vfork-like clone)
 * of /bin/true; prints both children's statuses. */
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int main(void)
{
	char *argv[] = {"true", NULL};
	int st1 = -1, st2 = -1;
	pid_t pid = fork();

	if (pid < 0)
		return 1;
	if (pid == 0) {
		execv("/bin/true", argv);
		_exit(127);
	}
	if (waitpid(pid, &st1, 0) != pid)
		return 2;
	if (posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ))
		return 3;
	if (waitpid(pid, &st2, 0) != pid)
		return 4;
	printf("fork status=%d spawn status=%d\n", st1, st2);
	return 0;
}
