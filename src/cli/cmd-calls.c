/* tracepad calls: trace function calls with arguments and return values (src/calls). */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calls/calls.h"
#include "cli/cli.h"
#include "cli/opts.h"

static const char usage_text[] =
    "usage: tracepad calls [OPTIONS] -- PROGRAM [ARGS]\n"
    "       tracepad calls [OPTIONS] -p PID\n"
    "\n"
    "Trace function calls: one line per completed call,\n"
    "  [TID] OBJECT:FUNCTION(ARGS) = RETVAL <SECONDS>\n"
    "\n"
    "  -e, --select PATTERN   functions to trace: comma-separated globs over OBJECT:FUNCTION\n"
    "                         (OBJECT also matches up to '.so'; or FUNCTION@OBJECT), '!'\n"
    "                         deselects; repeatable; one that matches nothing is warned of\n"
    "                         (default: the program's functions and those it imports)\n"
    "  -c, --summary          a summary per function at the end instead of the lines\n"
    "  --json                 with -c: the summary as one JSON object\n"
    "  -T                     show the time spent in each call\n"
    "  --entry                print a line at each call's entry too\n"
    "  --bt[=N]               the backtrace of each call's entry (N frames, default 8)\n"
    "  -f, --follow           follow fork, vfork, clone and exec\n"
    "  -o, --output FILE      write the output to FILE instead of stderr\n"
    "  --trace DIR            also record calls and returns into a CTF trace in DIR\n"
    "  --plugin NAME|PATH[:ARGS]  load a plugin (built-in: memory); repeatable\n"
    "  -p, --pid PID          attach to a running process and all its threads\n"
    "  --duration SECONDS     with -p: detach after SECONDS\n"
    "  -h, --help             show this help\n";

static char **push(char **v, int *n, char *s)
{
	v = realloc(v, (*n + 1) * sizeof(*v));
	if (!v) {
		perror("tracepad calls");
		exit(1);
	}
	v[(*n)++] = s;
	return v;
}

int cmd_calls(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"select", required_argument, NULL, 'e'},
	    {"summary", no_argument, NULL, 'c'},
	    {"json", no_argument, NULL, 'J'},
	    {"entry", no_argument, NULL, 'E'},
	    {"bt", optional_argument, NULL, 'B'},
	    {"follow", no_argument, NULL, 'f'},
	    {"output", required_argument, NULL, 'o'},
	    {"trace", required_argument, NULL, 'R'},
	    {"plugin", required_argument, NULL, 'P'},
	    {"pid", required_argument, NULL, 'p'},
	    {"duration", required_argument, NULL, 'D'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct tp_calls_opts o = {.out = stderr};
	char **pats = NULL, **plugins = NULL, *end;
	const char *outpath = NULL;
	int opt, ret;
	long v;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "+e:cTfo:p:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'e':
			pats = push(pats, &o.npatterns, optarg);
			break;
		case 'c':
			o.summary = true;
			break;
		case 'J':
			o.json = true;
			break;
		case 'T':
			o.durations = true;
			break;
		case 'E':
			o.entry = true;
			break;
		case 'B':
			o.bt = 8;
			if (optarg) {
				v = strtol(optarg, &end, 10);
				if (*end || v < 1 || v > 63) {
					tp_cli_error("calls", "bad --bt depth '%s' (1 to 63)",
						     optarg);
					goto bad;
				}
				o.bt = (int)v;
			}
			break;
		case 'f':
			o.follow = true;
			break;
		case 'o':
			outpath = optarg;
			break;
		case 'R':
			o.trace_dir = optarg;
			break;
		case 'P':
			plugins = push(plugins, &o.nplugins, optarg);
			break;
		case 'p':
			if (tp_cli_parse_pid("calls", optarg, &o.pid))
				goto bad;
			break;
		case 'D':
			if (tp_cli_parse_duration("calls", optarg, &o.duration))
				goto bad;
			break;
		case 'h':
			fputs(usage_text, stdout);
			free(pats);
			free(plugins);
			return 0;
		default:
			tp_cli_bad_option("calls", argv, "+e:cTfo:p:h");
			goto bad;
		}
	}
	if (!o.pid == (optind >= argc)) {
		tp_cli_error("calls",
			     o.pid ? "-p and a program to run exclude each other"
				   : "no program to run (tracepad calls -- PROGRAM, or -p PID)");
		goto bad;
	}
	if (o.json && !o.summary) {
		tp_cli_error("calls", "--json goes with -c");
		goto bad;
	}
	if (o.duration > 0 && !o.pid) {
		tp_cli_error("calls", "--duration goes with -p");
		goto bad;
	}
	if (outpath) {
		o.out = tp_cli_out_open("calls", outpath, stderr);
		if (!o.out)
			goto bad;
	} else if (!isatty(STDERR_FILENO)) {
		static char buf[1 << 16];

		setvbuf(stderr, buf, _IOFBF, sizeof(buf));
	}
	o.patterns = pats;
	o.plugins = plugins;
	o.argv = argv + optind;
	o.stop = &tp_cli_interrupted;
	tp_cli_catch_signals();
	ret = tp_calls_run(&o);
	if (outpath && tp_cli_out_close("calls", o.out, outpath, true))
		ret = ret ? ret : 1;
	free(pats);
	free(plugins);
	return ret;
bad:
	free(pats);
	free(plugins);
	return 2;
}
