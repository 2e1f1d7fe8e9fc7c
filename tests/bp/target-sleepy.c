/* bp test target for attaching: says "ready", then calls work() N times (argv[1]) with a
 * 1 ms sleep between calls, so the tracer usually attaches inside nanosleep. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

long sink;

__attribute__((noinline, noclone)) long work(long i)
{
	sink += i;
	return sink;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 300, calls = 0;

	printf("ready\n");
	fflush(stdout);
	for (long i = 0; i < n; i++) {
		usleep(1000);
		work(i);
		calls++;
	}
	printf("calls %ld sum %ld\n", calls, sink);
	return 3;
}
