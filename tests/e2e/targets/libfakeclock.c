/* Preloaded by the fakeclock tests: time() shifted to start on 2020-01-01, the real one found
 * through dlsym(RTLD_NEXT) in its constructor and at each call, as libfaketime does (a
 * tracer that hides dlsym's caller makes it fail: the program then exits 3). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define FAKE_START 1577836800 /* 2020-01-01 00:00:00 UTC */

static time_t first;

/* As libfaketime's constructor: the real function is looked up before main. */
__attribute__((constructor)) static void fakeclock_init(void)
{
	if (!dlsym(RTLD_NEXT, "time")) {
		fprintf(stderr, "fakeclock: dlsym(RTLD_NEXT, time) failed at start: %s\n",
			dlerror());
		exit(3);
	}
}

__attribute__((visibility("default"))) time_t time(time_t *t)
{
	time_t (*real)(time_t *) = (time_t(*)(time_t *))dlsym(RTLD_NEXT, "time");
	time_t now;

	if (!real) {
		fprintf(stderr, "fakeclock: dlsym(RTLD_NEXT, time) failed: %s\n", dlerror());
		exit(3);
	}
	now = real(NULL);
	if (!first)
		first = now;
	now = FAKE_START + (now - first);
	if (t)
		*t = now;
	return now;
}
