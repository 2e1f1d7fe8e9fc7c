/* e2e target: deterministic CPU work in work() (sieve, bitwise CRC-32, qsort with a
 * comparator of ours, so the region also runs libc code and calls back into the program),
 * about 60k instructions at -O0.  Both engines must agree on --start work to the instruction.
 * Usage: compute [SEED]   prints the checksum */
#include <stdio.h>
#include <stdlib.h>

#define SIEVE_N 1200
#define CRC_LEN 160
#define SORT_N 120

static unsigned char composite[SIEVE_N];
static unsigned char buf[CRC_LEN];
static int keys[SORT_N];

static int cmp_keys(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* noclone: --start work must find the code that runs under the symbol's own name. */
__attribute__((noinline, noclone)) unsigned long work(unsigned long seed)
{
	unsigned long i, j, primes = 0, sum = 0;
	unsigned int crc = 0xffffffffu, x = (unsigned int)seed;
	int k;

	for (i = 2; i < SIEVE_N; i++) {
		if (composite[i])
			continue;
		primes++;
		for (j = i * i; j < SIEVE_N; j += i)
			composite[j] = 1;
	}
	for (i = 0; i < CRC_LEN; i++)
		buf[i] = (unsigned char)(primes * i + seed);
	for (i = 0; i < CRC_LEN; i++) {
		crc ^= buf[i];
		for (k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xedb88320u & -(crc & 1));
	}
	for (i = 0; i < SORT_N; i++) {
		x = x * 1103515245u + 12345u;
		keys[i] = (int)(x >> 8) - (1 << 22);
	}
	qsort(keys, SORT_N, sizeof(keys[0]), cmp_keys);
	for (i = 0; i < SORT_N; i++)
		sum = sum * 31 + (unsigned int)keys[i];
	return sum ^ ((unsigned long)~crc << 20) ^ primes;
}

int main(int argc, char **argv)
{
	unsigned long seed = argc > 1 ? strtoul(argv[1], NULL, 0) : 1;

	printf("compute %lu checksum %lx\n", seed, work(seed));
	return 0;
}
