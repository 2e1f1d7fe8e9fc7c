/* The option table of `tracepad calls` and the options it shares with ltrace, strace and
 * uftrace: -s SIZE, -t/-tt/-ttt, -r, -l LIB, -S, --depth, --time-filter, --sort,
 * --demangle; and --engine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/calls-opts.h"
#include "cli/cli.h"

const char tp_cli_calls_usage[] =
    "usage: tracepad calls [OPTIONS] -- PROGRAM [ARGS]\n"
    "       tracepad calls [OPTIONS] -p PID\n"
    "\n"
    "Trace function calls: one line per completed call,\n"
    "  [TID] OBJECT:FUNCTION(ARGS) = RETVAL <SECONDS>\n"
    "\n"
    "  -e, --select PATTERN   functions to trace: comma-separated globs over OBJECT:FUNCTION\n"
    "                         (OBJECT: a path, file name, soname, or name up to '.so':\n"
    "                         libz.so.1 or libz; or FUNCTION@OBJECT), '!'\n"
    "                         deselects; repeatable; one that matches nothing is warned of\n"
    "                         (default: the program's functions and those it imports);\n"
    "                         C++ functions by mangled or demangled name: 'ns::Widget::get*'\n"
    "  -C, --caller-filter FUNC  only the calls of FUNC and of its callers, on its way\n"
    "                         there (uftrace's -C; FUNC as in -e); repeatable\n"
    "  --demangle=MODE        C++ names shown demangled in full (default) or as their\n"
    "                         symbols with 'no'\n"
    "  -l, --library LIB      the functions of the object LIB (as -e 'LIB:*'); repeatable\n"
    "  -S                     system calls as lines too, named as strace names them\n"
    "  -c, --summary          a summary per function at the end instead of the lines\n"
    "  --sort KEY             with -c: order by total (default), calls, avg, min, max,\n"
    "                         errors or name\n"
    "  --json                 with -c: the summary as one JSON object\n"
    "  -T                     show the time spent in each call\n"
    "  -s SIZE                show at most SIZE characters of a string (default 32)\n"
    "  -t, -tt, -ttt          prefix lines with the time of day, with microseconds, or\n"
    "                         as seconds since the epoch\n"
    "  -r                     prefix lines with the time since the previous line\n"
    "  --depth N              only calls nested at most N deep (1: the outermost ones)\n"
    "  --time-filter TIME     only the lines of calls that lasted at least TIME\n"
    "                         (a number with ns, us, ms or s; ns without)\n"
    "  --entry                print a line at each call's entry too\n"
    "  --bt[=N]               the backtrace of each call's entry (N frames, default 8)\n"
    "  -f, --follow           follow fork, vfork, clone and exec\n"
    "  -o, --output FILE      write the output to FILE instead of stderr\n"
    "  --trace DIR            also record calls and returns into a CTF trace in DIR\n"
    "  --plugin NAME|PATH[:ARGS]  load a plugin (built-in: memory); repeatable\n"
    "  --engine E             ptrace (breakpoints) or agent (hooks placed in the program\n"
    "                         by the agent: no stop a call, -S's only); without it,\n"
    "                         the agent where it prints what ptrace would (the man page)\n"
    "  -p, --pid PID          attach to a running process and all its threads\n"
    "  --duration SECONDS     with -p: detach after SECONDS\n"
    "  -h, --help             show this help\n";

const char tp_cli_calls_optstring[] = "+e:cTfo:p:hs:trl:SC:";

const struct option tp_cli_calls_longopts[] = {
    {"select", required_argument, NULL, 'e'},
    {"library", required_argument, NULL, 'l'},
    {"caller-filter", required_argument, NULL, 'C'},
    {"demangle", required_argument, NULL, CALLS_OPT_DEMANGLE},
    {"summary", no_argument, NULL, 'c'},
    {"sort", required_argument, NULL, CALLS_OPT_SORT},
    {"engine", required_argument, NULL, CALLS_OPT_ENGINE},
    {"json", no_argument, NULL, CALLS_OPT_JSON},
    {"depth", required_argument, NULL, CALLS_OPT_DEPTH},
    {"time-filter", required_argument, NULL, CALLS_OPT_TIME_FILTER},
    {"entry", no_argument, NULL, CALLS_OPT_ENTRY},
    {"bt", optional_argument, NULL, CALLS_OPT_BT},
    {"follow", no_argument, NULL, 'f'},
    {"output", required_argument, NULL, 'o'},
    {"trace", required_argument, NULL, CALLS_OPT_TRACE},
    {"plugin", required_argument, NULL, CALLS_OPT_PLUGIN},
    {"pid", required_argument, NULL, 'p'},
    {"duration", required_argument, NULL, CALLS_OPT_DURATION},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static const char *const sort_keys[] = {
    [TP_CALLS_SORT_TOTAL] = "total", [TP_CALLS_SORT_CALLS] = "calls",
    [TP_CALLS_SORT_AVG] = "avg",     [TP_CALLS_SORT_MIN] = "min",
    [TP_CALLS_SORT_MAX] = "max",     [TP_CALLS_SORT_ERRORS] = "errors",
    [TP_CALLS_SORT_NAME] = "name",
};

/* A duration as uftrace writes it: 100us, 1.5ms, 2s, 500 (ns). */
static int parse_time(const char *arg, uint64_t *ns)
{
	static const struct {
		const char *unit;
		double scale;
	} units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"", 1}};
	char *end;
	double v = strtod(arg, &end);

	if (end == arg || v < 0)
		return -1;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcmp(end, units[i].unit)) {
			*ns = (uint64_t)(v * units[i].scale + 0.5);
			return 0;
		}
	return -1;
}

static int parse_int(const char *what, const char *arg, long lo, long hi, int *out)
{
	char *end;
	long v = strtol(arg, &end, 10);

	if (!*arg || *end || v < lo || v > hi) {
		tp_cli_error("calls", "bad %s '%s' (%ld to %ld)", what, arg, lo, hi);
		return 2;
	}
	*out = (int)v;
	return 0;
}

int tp_cli_calls_habit(int opt, const char *arg, struct tp_calls_opts *o, char **pattern)
{
	switch (opt) {
	case 's':
		return parse_int("-s size", arg, 0, 1 << 20, &o->strsize);
	case 't':
		if (o->timestamps < 3)
			o->timestamps++;
		return 0;
	case 'r':
		o->relative = true;
		return 0;
	case 'S':
		o->syscalls = true;
		return 0;
	case 'l':
		if (!*arg || strpbrk(arg, ",:@")) {
			tp_cli_error("calls", "bad -l library '%s' (one object name or glob)", arg);
			return 2;
		}
		if (asprintf(pattern, "%s:*", arg) < 0) {
			tp_cli_error("calls", "out of memory");
			return 1;
		}
		return 0;
	case CALLS_OPT_DEPTH:
		return parse_int("--depth", arg, 1, 1 << 30, &o->max_depth);
	case CALLS_OPT_TIME_FILTER:
		if (parse_time(arg, &o->min_ns)) {
			tp_cli_error("calls", "bad --time-filter '%s' (e.g. 100us, 1.5ms, 2s)",
				     arg);
			return 2;
		}
		return 0;
	case CALLS_OPT_DEMANGLE:
		if (strcmp(arg, "full") && strcmp(arg, "no")) {
			tp_cli_error("calls", "bad --demangle mode '%s' (full or no)", arg);
			return 2;
		}
		o->mangled = !strcmp(arg, "no");
		return 0;
	case CALLS_OPT_ENGINE:
		if (!strcmp(arg, "ptrace") || !strcmp(arg, "agent")) {
			o->engine =
			    !strcmp(arg, "agent") ? TP_CALLS_ENGINE_AGENT : TP_CALLS_ENGINE_PTRACE;
			o->agent = tp_cli_agent_path();
			return 0;
		}
		tp_cli_error("calls", "unknown engine '%s' (ptrace, agent)", arg);
		return 2;
	case CALLS_OPT_SORT:
		for (size_t i = 0; i < sizeof(sort_keys) / sizeof(sort_keys[0]); i++)
			if (!strcmp(arg, sort_keys[i])) {
				o->sort = (enum tp_calls_sort)i;
				return 0;
			}
		tp_cli_error("calls",
			     "bad --sort key '%s' (total, calls, avg, min, max, errors or name)",
			     arg);
		return 2;
	}
	return -1;
}
