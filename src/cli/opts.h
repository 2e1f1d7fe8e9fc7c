/* Option helpers shared by the subcommands of the CLI: -p PID, --duration SECONDS, -o FILE
 * and a trace DIR.  On bad input each prints one line "tracepad CMD: ..." and returns the exit
 * status (2 for bad input, 1 for a failure of ours); 0 otherwise. */
#ifndef TP_CLI_OPTS_H
#define TP_CLI_OPTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "trace/read/trace-read.h"

/* -p PID: a positive process id. */
int tp_cli_parse_pid(const char *cmd, const char *arg, pid_t *pid);
/* --duration S: seconds, > 0. */
int tp_cli_parse_duration(const char *cmd, const char *arg, double *seconds);

/* A trace DIR being read, with the side files that help show it. */
struct tp_cli_trace {
	const char *cmd; /* for error messages: "tracepad CMD: ..." */
	const char *dir;
	struct tp_trace_reader *r;
	struct tp_symtab *syms;		  /* from DIR/.maps; NULL when the trace has none */
	struct tp_trace_formats *formats; /* from DIR/.formats; NULL when the trace has none */
	uint64_t nr_events;		  /* returned so far */
	bool salvage; /* a corrupt stream ends alone: the others are still read */
	bool corrupt; /* a stream was corrupt (said on stderr) */
};

/* Open the trace DIR (and its .maps with @want_maps).  Returns 0, or prints one line and
 * returns the exit status: 2 for bad input, 1 for a failure of ours. */
int tp_cli_trace_open(struct tp_cli_trace *t, const char *cmd, const char *dir, bool want_maps);
/* tp_trace_reader_next; on a malformed stream, prints one line naming the stream and the
 * offset, and returns -1 at once, or with t->salvage set, after the other streams' events. */
int tp_cli_trace_next(struct tp_cli_trace *t, const struct tp_trace_event **ev);
void tp_cli_trace_close(struct tp_cli_trace *t);

/* -o FILE: @dflt (stdout or stderr) for NULL or "-", else the file (one-line error and
 * NULL on failure), written as the command goes (a log that can be followed). */
FILE *tp_cli_out_open(const char *cmd, const char *path, FILE *dflt);
/* -o FILE for a result: a regular (or new) file is written under a temporary name beside
 * it, which replaces it at tp_cli_out_close only if the command keeps its output. */
FILE *tp_cli_result_open(const char *cmd, const char *path, FILE *dflt);
/* Flush and close; 0, or 1 after a one-line error on a write error.  A result file
 * replaces its target only when @keep and every write succeeded: otherwise a file that
 * existed before is left as it was. */
int tp_cli_out_close(const char *cmd, FILE *f, const char *path, bool keep);

#endif
