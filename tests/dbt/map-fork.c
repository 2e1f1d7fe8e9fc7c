/* A forked child under the code cache has repositories of its own (map.py): both processes
 * print their pid and the address of work(), which both ran, then wait for a line each. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noipa)) unsigned work(unsigned n)
{
	unsigned s = 0;

	for (unsigned i = 0; i < n; i++)
		s += i * i ^ (s >> 3);
	return s;
}

static void wait_line(void)
{
	char c;

	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

int main(void)
{
	unsigned a = work(10);
	pid_t child = fork();
	int st = 0;

	if (child < 0)
		return 1;
	a += work(20);
	printf("%s %d work %#lx %u\n", child ? "parent" : "child", (int)getpid(),
	       (unsigned long)&work, a);
	fflush(stdout);
	if (!child) {
		wait_line();
		printf("child done %u\n", work(30));
		return 3;
	}
	waitpid(child, &st, 0);
	wait_line();
	printf("parent done, child status %d\n", WEXITSTATUS(st));
	return 0;
}
