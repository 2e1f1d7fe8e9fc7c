/* bp test target for return breakpoints: work() returns 2i+1 N times (the sum is printed),
 * and every 100th iteration deep() recurses 4 levels and longjmps out, so its calls never
 * return and their shadow frames must be dropped. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

static jmp_buf env;

__attribute__((noinline, noclone)) long work(long i)
{
	return 2 * i + 1;
}

int deep(int d);
/* Through a volatile pointer: -O2 would turn the recursion into a loop. */
static int (*volatile again)(int) = deep;

__attribute__((noinline, noclone)) int deep(int d)
{
	if (d == 0)
		longjmp(env, 1);
	return again(d - 1) + 1;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000;
	volatile long sum = 0, jumps = 0;

	for (volatile long i = 0; i < n; i++) {
		sum += work(i);
		if (i % 100 == 0 && !setjmp(env))
			jumps += deep(3);
	}
	printf("calls %ld sum %ld jumps %ld\n", n, sum, jumps);
	return 3;
}
