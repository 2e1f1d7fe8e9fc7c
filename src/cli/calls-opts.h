/* The option table of `tracepad calls` and the options it shares with ltrace, strace and
 * uftrace (-s, -t, -r, -l, -S, --depth, --time-filter, --sort, --demangle), apart from
 * cmd-calls.c. */
#ifndef TP_CLI_CALLS_OPTS_H
#define TP_CLI_CALLS_OPTS_H

#include <getopt.h>

#include "calls/calls.h"

extern const char tp_cli_calls_usage[];
extern const char tp_cli_calls_optstring[];
extern const struct option tp_cli_calls_longopts[];

/* getopt values of the long options without a short one. */
enum {
	CALLS_OPT_JSON = 0x100,
	CALLS_OPT_ENTRY,
	CALLS_OPT_BT,
	CALLS_OPT_TRACE,
	CALLS_OPT_PLUGIN,
	CALLS_OPT_DURATION,
	CALLS_OPT_DEPTH,
	CALLS_OPT_TIME_FILTER,
	CALLS_OPT_SORT,
	CALLS_OPT_DEMANGLE,
	CALLS_OPT_ENGINE,
};

/* One of the peers' options @opt with argument @arg into @o.  -l LIB gives the pattern it
 * stands for in *@pattern (to free).  Returns 0, 2 after a one-line error, or -1 when @opt
 * is not one of them. */
int tp_cli_calls_habit(int opt, const char *arg, struct tp_calls_opts *o, char **pattern);

#endif
