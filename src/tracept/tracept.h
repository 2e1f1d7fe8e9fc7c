/* `tracepad trace`: dynamic tracepoints over ptrace (int3 + SSOL slots of src/bp), with
 * conditions and collect lists compiled to bytecode (expr.h), while-stepping, pass counts,
 * frames printed as lines and written into the trace store; and `tracepad frames`, which
 * reads them back. */
#ifndef TP_TRACEPT_TRACEPT_H
#define TP_TRACEPT_TRACEPT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "trace/trace.h"

struct tp_symtab;

/* A piece of text the user wrote, and where, for error messages: "@where: message at
 * column N" with N counted from the start of @text plus @col0. */
struct tp_tracept_text {
	const char *text;
	const char *where; /* "-t 'f if x'", "script.gdb:3" */
	int col0;
};

struct tp_tracept_spec {
	struct tp_tracept_text loc;  /* "LOCATION [if COND]" */
	struct tp_tracept_text cond; /* a condition given apart (text NULL: none) */
	struct tp_tracept_text *collect, *step_collect; /* "[collect] EXPR, ..." */
	int ncollect, nstep_collect;
	unsigned while_stepping; /* single steps after each collecting hit */
	uint64_t pass_count;	 /* collect at most this many hits (0: no limit) */
	bool fast;		 /* a jump pad in the agent (ftrace), else int3 and ptrace */
};

struct tp_tracept_opts {
	pid_t pid;	   /* attach, or 0 */
	char *const *argv; /* launch */
	struct tp_tracept_spec *specs;
	int nspecs;
	const char *trace_dir; /* frames into a CTF trace, or NULL */
	bool quiet;	       /* no line per frame */
	FILE *out;
	volatile sig_atomic_t *stop; /* set: detach and report */
	const char *agent;	     /* libtracepad-agent.so, for fast tracepoints */
};

/* Run the job: 0 or the program's exit status (128 + signal when killed), 2 for bad input
 * (a location or expression, said through tp_log), 1 for a failure of ours. */
int tp_tracept_run(const struct tp_tracept_opts *o);

/* Parse a gdb-like script into specs (malloc'ed, kept until tp_tracept_script_free()).
 * 0 or -EINVAL after a one-line tp_log error "FILE:LINE: ...". */
struct tp_tracept_script;
int tp_tracept_script_load(const char *path, struct tp_tracept_script **out,
			   struct tp_tracept_spec **specs, int *nspecs);
void tp_tracept_script_free(struct tp_tracept_script *s);

/* ---- reading frames back (tracepad frames) ---- */

/* The side file of a trace that describes its tracepoints: "N\tADDRESS\tLOCATION" lines. */
#define TP_TRACEPT_FILE ".tracepoints"

/* Is @ev a frame (an event of a tracepoint's class)?  Its tracepoint, step and pc. */
bool tp_tracept_frame_info(const struct tp_trace_event *ev, unsigned *tp, unsigned *step,
			   uint64_t *pc);
/* One line for the list: "FRAME TP TID PC SYMBOL". */
void tp_tracept_frame_line(FILE *f, const struct tp_trace_event *ev, uint64_t idx,
			   struct tp_symtab *syms);
/* The frame in full (tdump): header, source line, every collected value by name. */
void tp_tracept_frame_dump(FILE *f, const struct tp_trace_event *ev, uint64_t idx,
			   struct tp_symtab *syms, const char *dir);
/* While `tracepad trace --trace DIR` runs on process @pid, the symbolic link that names DIR
 * (for `tracepad frames -p PID --live`): its path in @buf; -ENAMETOOLONG if it does not fit. */
int tp_tracept_live_link(pid_t pid, char *buf, size_t len);
/* How often, at the most, a trace session writes its frames so far for live readers. */
#define TP_TRACEPT_LIVE_NS (200ull * 1000 * 1000)
/* Does @ev's pc resolve to source line @file:@line? */
bool tp_tracept_frame_at_line(const struct tp_trace_event *ev, struct tp_symtab *syms,
			      const char *file, int line);

#endif
