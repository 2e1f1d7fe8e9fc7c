/* Target of the pending tracepoints: dlopen(argv[1]) after start-up, then g(i) for
 * i = 0..N-1 (argv[2]); prints the sum of what g returned. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	void *h = argc > 2 ? dlopen(argv[1], RTLD_NOW) : NULL;
	int (*g)(int) = h ? (int (*)(int))dlsym(h, "g") : NULL;
	long sum = 0;

	if (!g) {
		fprintf(stderr, "usage: loop-dl LIB N (%s)\n", dlerror());
		return 2;
	}
	for (int i = 0; i < atoi(argv[2]); i++)
		sum += g(i);
	printf("sum %ld\n", sum);
	return 0;
}
