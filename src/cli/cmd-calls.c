/* tracepad calls: trace function calls with arguments and return values (src/calls). */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calls/calls.h"
#include "cli/calls-opts.h"
#include "cli/cli.h"
#include "cli/opts.h"

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
	struct tp_calls_opts o = {.out = stderr, .strsize = 32};
	char **pats = NULL, **plugins = NULL, **libs = NULL, **callers = NULL, *end, *lib;
	const char *outpath = NULL;
	int opt, ret, nlibs = 0;
	long v;

	optind = 1;
	while ((opt = getopt_long(argc, argv, tp_cli_calls_optstring, tp_cli_calls_longopts,
				  NULL)) != -1) {
		switch (opt) {
		case 'e':
			pats = push(pats, &o.npatterns, optarg);
			break;
		case 'C':
			callers = push(callers, &o.ncallers, optarg);
			break;
		case 'c':
			o.summary = true;
			break;
		case CALLS_OPT_JSON:
			o.json = true;
			break;
		case 'T':
			o.durations = true;
			break;
		case CALLS_OPT_ENTRY:
			o.entry = true;
			break;
		case CALLS_OPT_BT:
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
		case CALLS_OPT_TRACE:
			o.trace_dir = optarg;
			break;
		case CALLS_OPT_PLUGIN:
			plugins = push(plugins, &o.nplugins, optarg);
			break;
		case 'p':
			if (tp_cli_parse_pid("calls", optarg, &o.pid))
				goto bad;
			break;
		case CALLS_OPT_DURATION:
			if (tp_cli_parse_duration("calls", optarg, &o.duration))
				goto bad;
			break;
		case 'h':
			fputs(tp_cli_calls_usage, stdout);
			ret = 0;
			goto out;
		default:
			lib = NULL;
			ret = tp_cli_calls_habit(opt, optarg, &o, &lib);
			if (ret < 0) {
				tp_cli_bad_option("calls", argv, tp_cli_calls_optstring);
				goto bad;
			}
			if (ret)
				goto out;
			if (lib) {
				libs = push(libs, &nlibs, lib);
				pats = push(pats, &o.npatterns, lib);
			}
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
	if (o.min_ns && o.entry) {
		tp_cli_error("calls", "--time-filter and --entry exclude each other");
		goto bad;
	}
	if (o.ncallers && (o.summary || o.entry)) {
		tp_cli_error("calls", "-C goes with call lines, not with %s",
			     o.summary ? "-c" : "--entry");
		goto bad;
	}
	if (o.sort && !o.summary) {
		tp_cli_error("calls", "--sort goes with -c");
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
	if (!o.agent)
		o.agent = tp_cli_agent_path(); /* the default engine may be the agent */
	o.patterns = pats;
	o.plugins = plugins;
	o.callers = callers;
	o.argv = argv + optind;
	o.stop = &tp_cli_interrupted;
	tp_cli_catch_signals();
	ret = tp_calls_run(&o);
	if (outpath && tp_cli_out_close("calls", o.out, outpath, true))
		ret = ret ? ret : 1;
	goto out;
bad:
	ret = 2;
out:
	while (nlibs)
		free(libs[--nlibs]);
	free(libs);
	free(pats);
	free(plugins);
	free(callers);
	return ret;
}
