/* The engines of `tracepad count`: ptrace (single-stepping from the tracer) and trapflag (the
 * agent steps the program from inside), the results they fill, and their report as text,
 * JSON or trace events.  The CLI parses options into struct tp_count_opts and calls in. */
#ifndef TP_COUNT_COUNT_H
#define TP_COUNT_COUNT_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/agent-abi.h"
#include "arch/arch.h"
#include "base/hash.h"
#include "trace/trace.h"

enum tp_count_engine {
	TP_COUNT_ENGINE_DEFAULT,
	TP_COUNT_ENGINE_PTRACE,
	TP_COUNT_ENGINE_TRAPFLAG,
	TP_COUNT_ENGINE_DBT
};
enum tp_count_by {
	TP_COUNT_BY_NONE,
	TP_COUNT_BY_MNEMONIC,
	TP_COUNT_BY_FUNCTION,
	TP_COUNT_BY_OBJECT,
	TP_COUNT_BY_ADDRESS
};

struct tp_count_opts {
	enum tp_count_engine engine;
	enum tp_count_by by;
	const char *start, *stop;
	int top;
	bool json, no_startup;
	const char *outfile;
	const char *trace_dir;
	pid_t pid;
	char **argv;
	const char *agent; /* path of libtracepad-agent.so */
};

/* pc -> count (pc 0 is never recorded). */
struct tp_count_addrs {
	struct tp_hash pcs;
	uint64_t dropped; /* instructions of pcs that found no room (out of memory) */
};

struct tp_count_thread {
	pid_t tid;
	uint64_t count;
};

/* trapflag: the SIGTRAP the agent gave to the program's default action (agent-abi.h). */
struct tp_count_fatal {
	uint32_t traps; /* 0: none */
	int32_t tid, signo, code;
	uint64_t addr, pc, rflags;
	uint8_t bytes[16]; /* from pc - 8 */
	uint32_t readable;
};

struct tp_count_result {
	uint64_t total;
	struct tp_count_thread *threads;
	int nthreads, cap_threads;
	uint64_t mnemonic[TP_AGENT_MNEMONICS];
	struct tp_count_addrs addrs;
	bool have_startup;
	uint64_t startup;
	uint64_t control_pc; /* trapflag: first instruction the agent counted */
	uint64_t overflow;   /* trapflag: instructions of threads beyond the slots */
	uint64_t addr_dropped;
	int wait_status;
	bool exited, exec_seen, forked, detached;
	bool exec_followed; /* an execve's new image was counted too */
	struct tp_count_fatal fatal;
	double seconds;
	char start_note[160];
	char warning[320];
};

/* The progress line: @total instructions so far at @per_second; @end: erase it. */
typedef void (*tp_count_progress_fn)(uint64_t total, double per_second, bool end);

/* Everything one run needs: options, where things are in the program, results. */
struct tp_count_ctx {
	struct tp_count_opts *o;
	struct tp_count_result *r;
	const char *path; /* resolved program path (launch) */
	bool is_static;
	bool whole;	      /* count the whole program */
	bool api;	      /* count tp_step_begin()/tp_step_end() regions */
	bool main_dynamic;    /* --start main on a program without a main symbol */
	uint64_t start_vaddr; /* link-time, in the main executable */
	uint64_t stop_vaddr;
	struct tp_agent_ctl *ctl;
	int ctl_fd;
	size_t ctl_size;
	struct tp_symtab *syms;
	pid_t pid;			/* the program */
	struct tp_trace_consumer *cons; /* --trace with the agent: its rings */
	tp_count_progress_fn progress;	/* NULL: no progress line */
	double last_progress, t_start;
	volatile sig_atomic_t *stop; /* set (by a signal handler): detach and stop */
	char error[PATH_MAX + 256];  /* why a function below failed, when it says */
};

/* --by KEY: 0, or -EINVAL for an unknown key. */
int tp_count_parse_by(const char *s, enum tp_count_by *by);

/* Set @c up for @o with its result @r (zeroed here). */
int tp_count_init(struct tp_count_ctx *c, struct tp_count_opts *o, struct tp_count_result *r);
void tp_count_fini(struct tp_count_ctx *c);

/* What is counted, and where, for a launch (tp_count_probe, into @path, PATH_MAX bytes) or
 * an attach (tp_count_probe_pid).  -errno with c->error set on bad input. */
int tp_count_probe(struct tp_count_ctx *c, char *path);
int tp_count_probe_pid(struct tp_count_ctx *c, char *path);
/* Launch: the control block shared with the agent.  -errno with c->error set. */
int tp_count_ctl_new(struct tp_count_ctx *c);
/* --trace DIR: create the trace now (refused before a long run: an existing trace, no
 * permission); the agent's rings too when it counts.  -errno with c->error set. */
int tp_count_trace_new(struct tp_count_ctx *c, struct tp_trace_writer **w);

/* Count: launch or attach with the engine of the options, until the program ends or
 * *c->stop is set.  -errno (c->error set when there is more to say than the errno). */
int tp_count_run(struct tp_count_ctx *c);

/* The report to @out (text or JSON), and, with @w, the results as events of its trace
 * (closed and freed here).  Returns 0 or the -errno of the trace. */
int tp_count_report(struct tp_count_ctx *c, FILE *out, struct tp_trace_writer *w);
/* The program's exit status as a shell gives it (128 + signal), 0 when detached. */
int tp_count_exit_status(const struct tp_count_result *r);

#endif
