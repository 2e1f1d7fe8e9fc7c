/* calls-memory/sites.py's target: each round keeps one block from each of 9 call chains, the
 * same chains every round with other values in the registers and the stack around them:
 * malloc through down() 1 to 5 deep, through a function with a frame pointer, calloc from
 * main, malloc under frames of 600 bytes 6 deep (more stack than an entry's copy holds), and
 * malloc in a signal handler.  Every block stays reachable (keep[]); a freed one each round. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_ROUNDS 1000

void *keep[9][MAX_ROUNDS]; /* read by nobody but the leak check */
void *volatile sink;
static volatile int round_now;

__attribute__((noinline)) static void *leaf(size_t n)
{
	void *p = malloc(n);

	__asm__ volatile("" ::: "memory"); /* no tail call: leaf stays a frame */
	return p;
}

__attribute__((noinline)) static void *down(int d, size_t n, long salt)
{
	void *p = d ? down(d - 1, n, salt * 3 + d) : leaf(n);

	sink = (void *)salt; /* salt lives in a saved register: other stack words every round */
	return p;
}

__attribute__((noinline, optimize("no-omit-frame-pointer"))) static void *framed(size_t n)
{
	char buf[32];
	void *p;

	sink = buf; /* a frame of its own, its CFA on rbp */
	p = malloc(n);
	__asm__ volatile("" ::: "memory");
	return p;
}

__attribute__((noinline)) static void *wide(int d, size_t n)
{
	volatile char room[600];
	void *p;

	room[d] = (char)d; /* 600 bytes of frame each */
	p = d ? wide(d - 1, n) : malloc(n);
	__asm__ volatile("" ::: "memory");
	return room[d] == (char)d ? p : NULL;
}

static void on_usr1(int sig)
{
	(void)sig;
	keep[8][round_now] = malloc(60); /* under the kernel's signal frame */
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 100;

	if (rounds < 0 || rounds > MAX_ROUNDS)
		return 2;
	signal(SIGUSR1, on_usr1);
	for (int i = 0; i < rounds; i++) {
		for (int d = 0; d < 5; d++)
			keep[d][i] = down(d, 10 + (size_t)d, i);
		keep[5][i] = framed(20);
		keep[6][i] = calloc(1, 30);
		keep[7][i] = wide(5, 50);
		round_now = i;
		raise(SIGUSR1);
		free(leaf(40));
	}
	printf("%d rounds\n", rounds);
	return 0;
}
