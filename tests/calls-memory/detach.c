/* Target of detach.py (the memory plugin's report when tracepad detaches): prints "pid N",
 * calls tick() every 2 ms until a line comes on stdin; then loses a 50-byte block, allocates
 * and frees 10 blocks (16 to 25 bytes), keeps a 100-byte block, prints "done" and waits for
 * a second line (or EOF) before it frees it and exits 0.  stdin is read with read(2): no
 * stdio buffer is allocated while traced. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char *keep;
static volatile unsigned long ticks;

__attribute__((noinline)) void tick(void)
{
	ticks++;
}

__attribute__((noinline)) static void lose(void)
{
	char *volatile p = malloc(50);

	if (p)
		p[0] = 1;
	p = NULL;
}

static void line(void)
{
	char c;

	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

int main(void)
{
	struct pollfd pfd = {.fd = 0, .events = POLLIN};

	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	do
		tick();
	while (poll(&pfd, 1, 2) == 0);
	line();
	lose();
	for (int i = 0; i < 10; i++) {
		char *volatile q = malloc(16 + i); /* volatile: the pair is not optimised away */

		free(q);
	}
	keep = malloc(100);
	printf("done\n");
	fflush(stdout);
	line();
	free(keep);
	return 0;
}
