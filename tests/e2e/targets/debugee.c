/* A program for scripted gdb sessions (tests/debug): calls a few levels deep, locals and
 * globals, a loop, output and an exit status of its own. */
#include <stdio.h>

int counter = 3;
long total;

__attribute__((noinline)) int square(int x)
{
	int r = x * x;

	return r;
}

__attribute__((noinline)) int work(int n)
{
	int sum = 0;

	for (int i = 0; i < n; i++) {
		sum += square(i) + counter;
		total += sum;
	}
	return sum;
}

int main(void)
{
	int v = 0;

	for (int k = 1; k <= 3; k++)
		v += work(k + 2);
	printf("v=%d total=%ld\n", v, total);
	return v % 7;
}
