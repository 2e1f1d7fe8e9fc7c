/* The example `make demo` counts: a small sieve of Eratosthenes, then a checksum of the
 * primes it found.  `tracepad count --start sieve` counts the sieve alone. */
#include <stdio.h>
#include <string.h>

#define N 4000

static unsigned char composite[N];

__attribute__((noinline)) int sieve(void)
{
	int found = 0;

	memset(composite, 0, sizeof(composite));
	for (int i = 2; i < N; i++) {
		if (composite[i])
			continue;
		found++;
		for (int j = i * 2; j < N; j += i)
			composite[j] = 1;
	}
	return found;
}

__attribute__((noinline)) unsigned checksum(void)
{
	unsigned sum = 0;

	for (int i = 2; i < N; i++)
		if (!composite[i])
			sum = sum * 31 + (unsigned)i;
	return sum;
}

int main(void)
{
	int n = sieve();

	printf("%d primes below %d, checksum %08x\n", n, N, checksum());
	return 0;
}
