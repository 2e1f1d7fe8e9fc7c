/* The program bench/count counts: bench_loop (the floors' dec/jnz loop) or bench_mix (ordinary
 * compiled code: loads, stores, multiplies, branches), and the native time of that region.
 * Usage: count-target loop|mix N   prints "region NAME N ns T" */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floor.h"

static unsigned int table[256];

__attribute__((noinline, noclone)) unsigned long bench_mix(unsigned long n)
{
	unsigned int x = 12345, crc = ~0u;
	unsigned long i, sum = 0;

	for (i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		table[x >> 24] += x;
		crc = (crc >> 8) ^ table[(crc ^ x) & 255];
		if (crc & 1)
			sum += crc;
		else
			sum ^= x;
	}
	return sum;
}

int main(int argc, char **argv)
{
	unsigned long n, r = 0;
	int mix;
	double t0, t1;

	if (argc < 3 || (strcmp(argv[1], "loop") && strcmp(argv[1], "mix"))) {
		fprintf(stderr, "usage: count-target loop|mix N\n");
		return 2;
	}
	mix = !strcmp(argv[1], "mix");
	n = strtoul(argv[2], NULL, 0);
	t0 = floor_now();
	if (mix)
		r = bench_mix(n);
	else
		bench_loop(n);
	t1 = floor_now();
	printf("region %s %lu ns %.0f (%lx)\n", argv[1], n, (t1 - t0) * 1e9, r);
	return 0;
}
