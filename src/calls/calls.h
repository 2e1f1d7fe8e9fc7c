/* `tracepad calls`: the function-call tracer (ptrace engine, SSOL breakpoints at function
 * entries, one shared return trampoline).  The CLI parses options into tp_calls_opts. */
#ifndef TP_CALLS_CALLS_H
#define TP_CALLS_CALLS_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct tp_calls_opts {
	char *const *patterns; /* -e arguments */
	int npatterns;
	char *const *callers; /* -C arguments: only the calls on a path to these are shown */
	int ncallers;
	bool mangled;	      /* --demangle=no: C++ names shown as their symbols */
	char *const *plugins; /* --plugin arguments */
	int nplugins;
	bool summary, json, durations, entry, follow;
	int bt;		 /* --bt frames, 0 for none */
	int strsize;	 /* -s: characters of a string argument shown (ltrace's and strace's 32) */
	int timestamps;	 /* -t, -tt, -ttt: 1, 2, 3 (0: none) */
	bool relative;	 /* -r: time since the previous line */
	bool syscalls;	 /* -S: system calls as lines too */
	int max_depth;	 /* --depth N: calls nested at most N deep (1: outermost only), 0: all */
	uint64_t min_ns; /* --time-filter: call lines of calls that lasted at least this */
	enum tp_calls_sort {
		TP_CALLS_SORT_TOTAL, /* -c: by total time (the default), then calls */
		TP_CALLS_SORT_CALLS,
		TP_CALLS_SORT_AVG,
		TP_CALLS_SORT_MIN,
		TP_CALLS_SORT_MAX,
		TP_CALLS_SORT_ERRORS,
		TP_CALLS_SORT_NAME,
	} sort;
	enum tp_calls_engine {
		TP_CALLS_ENGINE_DEFAULT, /* no --engine: the agent where it fits (agent-choose.c) */
		TP_CALLS_ENGINE_PTRACE,	 /* breakpoints and stops */
		TP_CALLS_ENGINE_AGENT,	 /* hooks in the program by the agent (agent.c) */
	} engine;
	const char *agent; /* libtracepad-agent.so, NULL when not found */
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
