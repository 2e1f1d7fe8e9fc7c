/* `tracepad calls`: the function-call tracer (ptrace engine, SSOL breakpoints at function
 * entries, one shared return trampoline).  The CLI parses options into tp_calls_opts. */
#ifndef TP_CALLS_CALLS_H
#define TP_CALLS_CALLS_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

struct tp_calls_opts {
	char *const *patterns; /* -e arguments */
	int npatterns;
	char *const *plugins; /* --plugin arguments */
	int nplugins;
	bool summary, json, durations, entry, follow;
	int bt; /* --bt frames, 0 for none */
	FILE *out;
	const char *trace_dir;
	pid_t pid;	 /* -p, 0 to launch argv */
	double duration; /* -p: detach after this many seconds, 0 for never */
	char *const *argv;
	volatile sig_atomic_t *stop; /* set (by a signal handler) to detach and stop */
};

/* Run the whole job; returns tracepad's exit status (the program's, when launched). */
int tp_calls_run(const struct tp_calls_opts *o);

#endif
