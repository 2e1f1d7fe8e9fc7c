/* Target of the tracepad markers tests: points in the executable and in a dlopened library,
 * a loop over their sites, and its own consumer's counts per point printed every 100 ms
 * ("counts NAME=N ...") until SIGTERM, then the points the runtime believes enabled.  SIGUSR1:
 * print "mark" before the next counts line. */
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tracepad/tracepoint.h>

TP_POINT(mc_alpha);
TP_POINT(mc_beta);
TP_POINT(other_gamma);
TP_POINT(tamper_me);

static const char *const names[] = {"mc_alpha",	 "mc_beta", "other_gamma",
				    "tamper_me", "mc_lib",  "lib_delta"};
#define NPOINTS (sizeof(names) / sizeof(names[0]))
static atomic_ulong counts[NPOINTS];
static atomic_ulong strangers;
static volatile sig_atomic_t stop, mark;

static void consumer(const struct tp_site_desc *desc, const union tp_arg *args, void *ctx)
{
	(void)args;
	(void)ctx;
	for (size_t i = 0; i < NPOINTS; i++) {
		if (!strcmp(desc->point->name, names[i])) {
			counts[i]++;
			return;
		}
	}
	strangers++;
}

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void on_usr1(int sig)
{
	(void)sig;
	mark = 1;
}

static void print_counts(const char *what)
{
	printf("%s", what);
	for (size_t i = 0; i < NPOINTS; i++)
		printf(" %s=%lu", names[i], (unsigned long)counts[i]);
	printf("\n");
	fflush(stdout);
}

__attribute__((noinline)) static void fire_exe(int i)
{
	TP_TRACE(mc_alpha, "alpha %d", i);
	TP_TRACE(mc_beta, "beta %d %s", i, "one");
	TP_TRACE(mc_beta, "beta again %ld", (long)i);
	TP_TRACE(other_gamma, "gamma");
	TP_TRACE(tamper_me, "tamper %u", (unsigned)i);
}

int main(int argc, char **argv)
{
	struct timespec ms = {0, 1000000};
	void (*lib_fire)(int);
	void *lib;
	int i = 0, fails = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s LIBRARY\n", argv[0]);
		return 2;
	}
	signal(SIGTERM, on_term);
	signal(SIGUSR1, on_usr1);
	tp_markers_set_consumer(consumer, NULL);
	lib = dlopen(argv[1], RTLD_NOW);
	lib_fire = lib ? (void (*)(int))dlsym(lib, "mc_lib_fire") : NULL;
	if (!lib_fire) {
		fprintf(stderr, "target: %s\n", dlerror());
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	while (!stop) {
		for (int k = 0; k < 100 && !stop; k++, i++) {
			fire_exe(i);
			lib_fire(i);
			nanosleep(&ms, NULL);
		}
		/* A line after "mark" counts a whole period that began after the SIGUSR1. */
		if (mark) {
			mark = 0;
			printf("mark\n");
		}
		print_counts("counts");
	}
	print_counts("final");
	printf("enabled:");
	for (size_t k = 0; k < NPOINTS; k++)
		if (tp_point_enabled(tp_point_find(names[k])))
			printf(" %s", names[k]);
	printf("\n");
	/* Own checks: every event came from a known point, and the library's points are known
	 * to the runtime. */
	if (strangers) {
		fprintf(stderr, "target: %lu events of unknown points\n", (unsigned long)strangers);
		fails++;
	}
	if (!tp_point_find("mc_lib") || !tp_point_find("mc_alpha")) {
		fprintf(stderr, "target: points not registered\n");
		fails++;
	}
	dlclose(lib);
	return fails ? 1 : 0;
}
