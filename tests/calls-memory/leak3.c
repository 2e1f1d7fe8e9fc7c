/* Target of the memory plugin's tests: exactly three leaks (100 bytes from leak_a, 101 from
 * leak_b, 102 from leak_c) among thousands of blocks freed through every allocator entry, and
 * stdout's buffer (stdout is a pipe or a file), which stays reachable until exit. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each leak goes through here so that the compiler keeps the allocation; cleared at once, so
 * no copy of the pointer is left in the program's data. */
static void *volatile sink;

/* Every block passes through here, so that the compiler removes no malloc/free pair. */
__attribute__((noinline)) static void use(void *p)
{
	sink = p;
	sink = NULL;
}

/* glibc's chunk after a 100-byte block starts 4 bytes before the block's end.  With the free
 * chunks of that size used up first, the leaked block comes from the top chunk or is split
 * from a larger free one, and what follows it is free: libc's main_arena (top, bins,
 * last_remainder) then points into the block's interior, a pointer memcheck never sees and
 * the plugin must not take for the program's. */
#define DRAIN 64

__attribute__((noinline)) static void leak_a(void)
{
	void *drain[DRAIN];
	char *p;

	for (int i = 0; i < DRAIN; i++) {
		drain[i] = malloc(100);
		use(drain[i]);
	}
	p = malloc(100);
	memset(p, 'a', 100);
	sink = p;
	sink = NULL;
	for (int i = 0; i < DRAIN; i++)
		free(drain[i]);
}

__attribute__((noinline)) static void leak_b(void)
{
	sink = calloc(101, 1);
	sink = NULL;
}

__attribute__((noinline)) static void leak_c(void)
{
	char *p = malloc(10);

	memset(p, 'c', 10);
	p = realloc(p, 102);
	memset(p, 'c', 102);
	sink = p;
	sink = NULL;
}

/* Every allocator entry, every block freed: none of it may show in the report.  A round
 * allocates 10 blocks (the two reallocs that resize count as an allocation and a free each)
 * and frees 10 (realloc(p, 0) frees; free(NULL) does nothing). */
__attribute__((noinline)) static unsigned long churn(int rounds)
{
	unsigned long sum = 0;

	for (int i = 0; i < rounds; i++) {
		size_t n = 1 + (size_t)(i * 37) % 700;
		char *a = malloc(n), *b = calloc(n, 2), *c = realloc(NULL, n), *d = NULL, *e, *f,
		     *g;

		memset(a, i, n);
		use(a);
		use(b);
		c[0] = (char)i;
		c = realloc(c, n * 3);
		c = reallocarray(c, n, 4);
		if (posix_memalign((void **)&d, 64, n))
			abort();
		e = aligned_alloc(32, 64 * (1 + i % 5));
		f = memalign(128, n);
		g = i % 50 ? malloc(i % 3 ? n : 0) : valloc(n);
		use(c);
		use(d);
		use(e);
		use(f);
		use(g);
		sum += (unsigned long)b[n - 1] + (unsigned char)c[0];
		free(a);
		free(b);
		free(c);
		free(d);
		free(e);
		free(f);
		free(g);
		free(NULL);
		a = malloc(n);
		use(a);
		a = realloc(a, 0); /* glibc frees the block and returns NULL */
		free(a);
	}
	return sum;
}

/* Failing calls allocate nothing and free nothing: realloc's block stays.  Sizes of 2^63 and
 * up are ones memcheck refuses too without counting them ("fishy" values). */
__attribute__((noinline)) static int failures(void)
{
	volatile size_t huge = (size_t)1 << 63;
	void *p = malloc(16), *q = NULL;
	int failed = 0;

	use(p);
	failed += malloc(huge) == NULL;
	failed += calloc(huge, 4) == NULL;
	q = realloc(p, huge);
	if (q)
		p = q;
	else
		failed++;
	q = reallocarray(p, huge, 4);
	if (q)
		p = q;
	else
		failed++;
	q = NULL;
	failed += posix_memalign(&q, 3, 16) != 0;
	free(p);
	return failed;
}

/* Overwrite the dead stack the leaking functions used: memcheck does not scan dead stack
 * contents (undefined memory), and tracepad cannot tell them from live ones. */
__attribute__((noinline)) static void scrub_stack(void)
{
	char buf[64 * 1024];

	explicit_bzero(buf, sizeof(buf));
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 1000;
	unsigned long sum;
	int failed;

	printf("leak3: start\n"); /* allocates stdout's buffer */
	leak_b();
	sum = churn(rounds / 2);
	leak_c();
	sum += churn(rounds - rounds / 2);
	failed = failures();
	leak_a();
	scrub_stack();
	printf("leak3: %d rounds, sum %lu, %d failed calls\n", rounds, sum, failed);
	return 0;
}
