/* bp test target whose traced function starts with a RIP-relative load of a global
 * (built -O2 without CET), so its displaced instruction needs its disp32 fixed in the slot. */
#include <stdio.h>
#include <stdlib.h>

int counter = 7;

__attribute__((noinline, noclone)) int work(int x)
{
	return counter * 3 + x;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000, calls = 0, sum = 0;

	for (long i = 0; i < n; i++) {
		sum += work((int)i);
		counter = (int)(i & 15);
		calls++;
	}
	printf("calls %ld sum %ld\n", calls, sum);
	return 3;
}
