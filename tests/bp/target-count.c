/* bp test target: calls work() N times (argv[1], default 2000) and prints the count, so the
 * test can check the breakpoint saw exactly N hits and the output is unchanged. */
#include <stdio.h>
#include <stdlib.h>

long sink;

__attribute__((noinline, noclone)) long work(long i)
{
	sink += i;
	return sink;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000, calls = 0, last = 0;

	for (long i = 0; i < n; i++) {
		last = work(i);
		calls++;
	}
	printf("calls %ld sum %ld\n", calls, last);
	return 3;
}
