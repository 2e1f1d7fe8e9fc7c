/* A program whose forked child goes on after its parent's end (tests/debug): the child
 * waits for the end of a pipe its parent holds, then runs code its parent never ran
 * (stdio's first use). */
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) int work(int x)
{
	return x * 2;
}

int main(void)
{
	int p[2];
	char c;

	if (pipe(p))
		return 1;
	if (!fork()) {
		close(p[1]);
		/* end of file once the parent has exited */
		while (read(p[0], &c, 1) > 0)
			;
		printf("child %d\n", work(1));
		return 3;
	}
	return 0;
}
