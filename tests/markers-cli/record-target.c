/* Target of the `tracepad markers record` tests: fires known typed events (in the executable
 * and in a library it links with) from the main thread and a second thread ("record-target N": N
 * rounds each), prints "fired K" with the number of events it fired, then exits; with "wait" as the
 * second argument it pauses after printing instead, to be killed.  A third argument names a
 * library to dlopen after that, whose rec_dl_fire(v) it calls for v = 0..N-1 (counted). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tracepad/tracepoint.h>

TP_POINT(rec_int);
TP_POINT(rec_str);
TP_POINT(rec_two);
TP_POINT(rec_misc);

static int rounds;

void rec_lib_fire(int v);

/* Events per round: rec_int, rec_str, rec_two twice (two signatures), rec_misc, rec_lib. */
#define PER_ROUND 6

static void fire(int base)
{
	for (int i = 0; i < rounds; i++) {
		int v = base + i;

		TP_TRACE(rec_int, "int %d %llu", -v, (unsigned long long)v * 1000000007ull);
		TP_TRACE(rec_str, "str %s %u", v % 2 ? "odd" : "even", (unsigned char)(v & 0xff));
		TP_TRACE(rec_two, "two %d", v);
		TP_TRACE(rec_two, "two %s %ld", "x", (long)-v);
		TP_TRACE(rec_misc, "misc %hd %f %p", (short)-v, 0.5 * v, (void *)(uintptr_t)0x1000);
		rec_lib_fire(v);
	}
}

static void *thread_main(void *arg)
{
	(void)arg;
	fire(1000);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th;

	if (argc < 2) {
		fprintf(stderr, "usage: %s ROUNDS [wait]\n", argv[0]);
		return 2;
	}
	rounds = atoi(argv[1]);
	if (pthread_create(&th, NULL, thread_main, NULL))
		return 1;
	fire(0);
	pthread_join(th, NULL);
	int fired = 2 * rounds * PER_ROUND;
	if (argc > 3) {
		void *lib = dlopen(argv[3], RTLD_NOW);
		void (*dl_fire)(int) = lib ? (void (*)(int))dlsym(lib, "rec_dl_fire") : NULL;

		if (!dl_fire) {
			fprintf(stderr, "record-target: %s\n", dlerror());
			return 1;
		}
		for (int v = 0; v < rounds; v++)
			dl_fire(v);
		fired += rounds;
	}
	printf("fired %d\n", fired);
	fflush(stdout);
	if (argc > 2 && !strcmp(argv[2], "wait"))
		for (;;)
			pause();
	return 0;
}
