/* `tracepad count`: shared state of the command and its two engines. */
#ifndef TP_CLI_COUNT_H
#define TP_CLI_COUNT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/agent-abi.h"
#include "arch/arch.h"
#include "trace/trace.h"

enum count_engine { ENGINE_DEFAULT, ENGINE_PTRACE, ENGINE_TRAPFLAG };
enum count_by { BY_NONE, BY_MNEMONIC, BY_FUNCTION, BY_OBJECT, BY_ADDRESS };

struct count_opts {
	enum count_engine engine;
	enum count_by by;
	const char *start, *stop;
	int top;
	bool json, no_startup;
	const char *outfile;
	const char *trace_dir;
	pid_t pid;
	char **argv;
	const char *agent; /* path of libtracepad-agent.so */
};

/* pc -> count, open addressing; grows. */
struct addr_hist {
	uint64_t *pc, *count;
	size_t cap, n;
};

struct count_thread {
	pid_t tid;
	uint64_t count;
};

struct count_result {
	uint64_t total;
	struct count_thread *threads;
	int nthreads, cap_threads;
	uint64_t mnemonic[TP_AGENT_MNEMONICS];
	struct addr_hist addrs;
	bool have_startup;
	uint64_t startup;
	uint64_t control_pc; /* trapflag: first instruction the agent counted */
	uint64_t overflow;   /* trapflag: instructions of threads beyond the slots */
	uint64_t addr_dropped;
	int wait_status;
	bool exited, exec_seen, forked, detached;
	double seconds;
	char start_note[160];
	char warning[320];
};

/* Everything one run needs: options, where things are in the program, results. */
struct count_ctx {
	struct count_opts *o;
	struct count_result *r;
	const char *path; /* resolved program path (launch) */
	bool is_static;
	bool whole;	      /* count the whole program */
	bool api;	      /* count tp_step_begin()/tp_step_end() regions */
	bool main_dynamic;    /* --start main on a program without a main symbol */
	uint64_t start_vaddr; /* link-time, in the main executable */
	uint64_t stop_vaddr;
	uint64_t entry_vaddr; /* e_entry, to compute the load bias from AT_ENTRY */
	struct tp_agent_ctl *ctl;
	int ctl_fd;
	size_t ctl_size;
	struct tp_symtab *syms;
	pid_t pid;			/* the program */
	struct tp_trace_consumer *cons; /* --trace with the agent: its rings */
	bool progress;			/* stderr is a terminal: show a progress line */
	double last_progress, t_start;
};

/* Seconds on the monotonic clock. */
double count_now(void);
/* Show the running total on the terminal, at most twice a second. */
void count_progress(struct count_ctx *c, uint64_t total);
void count_progress_end(struct count_ctx *c);
void count_add_thread(struct count_result *r, pid_t tid, uint64_t n);
void addr_hist_add(struct addr_hist *h, uint64_t pc, uint64_t n);

int count_run_ptrace(struct count_ctx *c);
int count_run_trapflag(struct count_ctx *c);

#endif
