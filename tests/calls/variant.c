/* The program of the build variants (lazy, BIND_NOW, -fno-plt, CET, -pg, static): calls
 * tpc_add(i, i % 7 + 1) N times and tpc_word(0..3), and prints what the tracer must see. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lib.h"

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000, sum = 0;
	int status = argc > 2 ? atoi(argv[2]) : 0;

	printf("pid %d\n", (int)getpid());
	for (long i = 0; i < n; i++)
		sum += tpc_add((int)i, (int)(i % 7) + 1);
	printf("calls %ld sum %ld\n", n, sum);
	for (int i = 0; i < 4; i++)
		printf("word %d %s\n", i, tpc_word(i));
	return status;
}
