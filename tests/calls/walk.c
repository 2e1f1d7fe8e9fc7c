/* Code that walks its own stack through traced frames: backtrace() (libgcc's unwinder, which
 * glibc loads at the first call) three traced frames deep, and pthread_exit() whose forced
 * unwind runs a cleanup handler two traced frames up.  Prints what the walks found. */
#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>

#define W __attribute__((noinline, noipa))

W int walk_leaf(int x)
{
	void *pcs[64];
	int n = backtrace(pcs, 64);

	printf("backtrace %d: %d frames\n", x, n);
	return n + x;
}

W int walk_mid(int x)
{
	return walk_leaf(x) + 1;
}

W int walk_top(int x)
{
	return walk_mid(x) + 1;
}

static void cleanup(void *arg)
{
	printf("cleanup %ld\n", (long)arg);
}

W void walk_exit(long v)
{
	pthread_exit((void *)v);
}

W long walk_body(long v)
{
	long r;

	pthread_cleanup_push(cleanup, (void *)v);
	walk_exit(v);
	r = v;
	pthread_cleanup_pop(0);
	return r;
}

static void *thread(void *arg)
{
	return (void *)walk_body((long)arg);
}

int main(void)
{
	int sum = 0;
	pthread_t t;
	void *ret;

	for (int i = 0; i < 3; i++)
		sum += walk_top(i);
	printf("sum %d\n", sum);
	for (long i = 1; i <= 2; i++) {
		pthread_create(&t, NULL, thread, (void *)(40 + i));
		pthread_join(t, &ret);
		printf("thread returned %ld\n", (long)ret);
	}
	printf("after %d\n", walk_top(7));
	return 0;
}
