/* The target of calls-habits (ltrace's, strace's and uftrace's options): strings for -s,
 * nesting for --depth, a long and a short call for --time-filter, a deep recursion for the
 * bounded indentation, a fork for the per-process summary, library calls for -l, system
 * calls for -S, a 200 us spin and a 4-byte memcpy for -T's accuracy.  Built with -pg so that
 * uftrace can trace it too; it prints what the tracer must see. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib.h"

#define H __attribute__((noinline, noipa))

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

H int h_inner(int x)
{
	return x + 1;
}

H int h_mid(int x)
{
	return h_inner(x) * 2;
}

H int h_outer(int x)
{
	return h_mid(x) + 3;
}

/* Busy for @ms milliseconds (no system call: the time is the call's own). */
H int h_spin(int ms)
{
	double end = now_s() + ms / 1e3;
	volatile int n = 0;

	while (now_s() < end)
		n++;
	return ms;
}

/* Busy for @us microseconds by the program's own clock, which it returns in ns. */
H long h_spin_us(int us)
{
	struct timespec a, b;
	long ns;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((ns = (b.tv_sec - a.tv_sec) * 1000000000L + b.tv_nsec - a.tv_nsec) < us * 1000L);
	return ns;
}

H int h_quick(int x)
{
	return x * 2;
}

H int h_rec(int n)
{
	return n ? h_rec(n - 1) + 1 : 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "str";

	if (!strcmp(mode, "str")) {
		puts("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ");
		puts("short");
		puts("tab\there \"quoted\" and a newline\n");
	} else if (!strcmp(mode, "nest")) {
		for (int i = 0; i < 3; i++)
			printf("outer %d = %d\n", i, h_outer(i));
	} else if (!strcmp(mode, "time")) {
		for (int i = 0; i < 3; i++) {
			double t0 = now_s(), t1, t2;

			h_spin(50);
			t1 = now_s();
			h_quick(i);
			t2 = now_s();
			printf("spin %.6f quick %.6f\n", t1 - t0, t2 - t1);
		}
	} else if (!strcmp(mode, "honest")) {
		/* -T's accuracy: 101 spins of 200 us and 21 memcpy calls of 4 bytes.  The clock
		 * is read once first: the first call's lazy binding is no part of a spin's own
		 * time, though it would be of the call's. */
		void *(*volatile cp)(void *, const void *, size_t) = memcpy;
		char src[4] = "abc", dst[4];
		struct timespec warm;

		clock_gettime(CLOCK_MONOTONIC, &warm);
		for (int i = 0; i < 101; i++)
			printf("spin %ld\n", h_spin_us(200));
		for (int i = 0; i < 21; i++)
			cp(dst, src, 4);
		printf("copied %s\n", dst);
	} else if (!strcmp(mode, "deep")) {
		int n = argc > 2 ? atoi(argv[2]) : 10000;

		printf("rec %d\n", h_rec(n));
	} else if (!strcmp(mode, "fork")) {
		pid_t pid = fork();
		int st;

		for (int i = 0; i < (pid ? 3 : 2); i++)
			h_inner(i);
		if (!pid)
			_exit(0);
		waitpid(pid, &st, 0);
		printf("parent %d child %d\n", (int)getpid(), (int)pid);
	} else if (!strcmp(mode, "lib")) {
		printf("a %d add %d\n", tpc_a(1), tpc_add(2, 3));
	} else if (!strcmp(mode, "sys")) {
		int fd = open("/dev/null", O_WRONLY);

		printf("write %zd\n", write(fd, "hello", 5));
		close(fd);
		printf("close again %d\n", close(fd));
	}
	return 0;
}
