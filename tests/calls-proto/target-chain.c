/* calls-proto unwinding target: main -> a -> b -> c, each with a stack frame of its own and
 * no frame pointer at -O2 (in a second thread with any argument), and a qsort comparator
 * called from inside libc. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noipa)) int c(int x)
{
	volatile char buf[64];

	buf[x & 63] = x;
	return buf[x & 63] + 1;
}

__attribute__((noipa)) int b(int x)
{
	volatile char buf[32];
	int r;

	buf[0] = x;
	r = c(x + 1);
	return r + buf[0];
}

__attribute__((noipa)) int a(int x)
{
	volatile long v[5];
	int r;

	v[x % 5] = x;
	r = b(x * 2);
	return r + (int)v[x % 5];
}

__attribute__((noipa)) int cmp_ints(const void *x, const void *y)
{
	return *(const int *)x - *(const int *)y;
}

__attribute__((noipa)) void *thr(void *arg)
{
	return (void *)(intptr_t)a((int)(intptr_t)arg);
}

int main(int argc, char **argv)
{
	int v[8] = {5, 3, 8, 1, 9, 2, 7, 4};
	pthread_t t;
	void *res;
	int s;

	if (argc > 1) {
		pthread_create(&t, NULL, thr, (void *)1);
		pthread_join(t, &res);
		s = (int)(intptr_t)res;
	} else {
		s = a(1);
	}

	qsort(v, 8, sizeof(int), cmp_ints);
	printf("%d %d %d\n", s, v[0], v[7]);
	return 0;
}
