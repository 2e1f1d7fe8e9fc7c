/* tracepad trace: dynamic tracepoints with conditions and collect lists (src/tracept). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "tracept/tracept.h"

static const char usage_text[] =
    "usage: tracepad trace [OPTIONS] -t 'LOCATION [if COND]' [-a 'collect EXPR, ...'] ... -- "
    "PROGRAM [ARGS]\n"
    "       tracepad trace [OPTIONS] -x SCRIPT -p PID\n"
    "\n"
    "Collect values where the program passes a location, without stopping it for a person:\n"
    "one line per frame, '#TP [TID] WHERE: EXPR=VALUE ...', and a count per tracepoint at the "
    "end.\n"
    "\n"
    "  -t, --tracepoint 'LOC [if COND]'  a tracepoint: FUNCTION, LIB:FUNCTION, FILE:LINE or "
    "*ADDR;\n"
    "                         the options below apply to the last -t\n"
    "  -a, --actions 'collect EXPR, ...'  what to collect at each hit: expressions over\n"
    "                         $REG, *ADDR, variables, members and elements, *ADDR@LEN, $regs,\n"
    "                         $args, $locals; repeatable\n"
    "  --pass-count N         collect at the first N hits where COND holds, no more\n"
    "  --while-stepping N     after each collecting hit, N single steps with a frame each\n"
    "  --step-actions 'collect EXPR, ...'  what those frames collect (default: -a's list)\n"
    "  -x, --script FILE      tracepoints in gdb's syntax (trace, condition, passcount,\n"
    "                         actions / collect / while-stepping / end)\n"
    "  --fast, --normal       a jump pad in the program (the agent collects, no stop), or\n"
    "                         an int3 and a ptrace stop a hit (the default); after a -t:\n"
    "                         that tracepoint only (scripts: ftrace is always fast)\n"
    "  -q, --quiet            no line per frame: the counts only\n"
    "  -o, --output FILE      write the output to FILE instead of stderr\n"
    "  --trace DIR            also record the frames into a CTF trace in DIR (tracepad frames)\n"
    "  -p, --pid PID          attach to a running process and all its threads\n"
    "  --duration SECONDS     with -p: detach after SECONDS\n"
    "  -h, --help             show this help\n";

#define OPTSTRING "+t:a:x:qo:p:h"

struct cli {
	struct tp_tracept_spec *specs;
	int n;
	char **strs;
	int nstrs;
};

static void *grow(void *v, size_t size)
{
	v = realloc(v, size);
	if (!v) {
		perror("tracepad trace");
		exit(1);
	}
	return v;
}

static const char *quoted(struct cli *c, const char *opt, const char *arg)
{
	size_t n = strlen(opt) + strlen(arg) + 4;
	char *s = grow(NULL, n);

	snprintf(s, n, "%s '%s'", opt, arg);
	c->strs = grow(c->strs, (c->nstrs + 1) * sizeof(*c->strs));
	c->strs[c->nstrs++] = s;
	return s;
}

static void add_text(struct tp_tracept_text **v, int *n, const char *text, const char *where)
{
	*v = grow(*v, (*n + 1) * sizeof(**v));
	(*v)[(*n)++] = (struct tp_tracept_text){text, where, 0};
}

static void cli_free(struct cli *c)
{
	for (int i = 0; i < c->n; i++) {
		free(c->specs[i].collect);
		free(c->specs[i].step_collect);
	}
	free(c->specs);
	while (c->nstrs)
		free(c->strs[--c->nstrs]);
	free(c->strs);
}

static int count_arg(const char *opt, const char *arg, unsigned long long max,
		     unsigned long long *out)
{
	char *end;

	errno = 0;
	*out = strtoull(arg, &end, 10);
	if (errno || end == arg || *end || *out < 1 || *out > max || arg[0] == '-') {
		tp_cli_error("trace", "bad %s '%s' (1 to %llu)", opt, arg, max);
		return 2;
	}
	return 0;
}

int cmd_trace(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"tracepoint", required_argument, NULL, 't'},
	    {"actions", required_argument, NULL, 'a'},
	    {"pass-count", required_argument, NULL, 'P'},
	    {"while-stepping", required_argument, NULL, 'W'},
	    {"step-actions", required_argument, NULL, 'S'},
	    {"script", required_argument, NULL, 'x'},
	    {"quiet", no_argument, NULL, 'q'},
	    {"output", required_argument, NULL, 'o'},
	    {"trace", required_argument, NULL, 'R'},
	    {"pid", required_argument, NULL, 'p'},
	    {"duration", required_argument, NULL, 'D'},
	    {"fast", no_argument, NULL, 'F'},
	    {"normal", no_argument, NULL, 'N'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct tp_tracept_opts o = {.out = stderr};
	struct tp_tracept_script *script = NULL;
	struct cli c = {0};
	const char *outpath = NULL, *script_path = NULL;
	double duration = 0;
	int fast = 0; /* --fast or --normal before any -t: 1 or -1 */
	unsigned long long v;
	int opt, ret = 2;

	optind = 1;
	while ((opt = getopt_long(argc, argv, OPTSTRING, longopts, NULL)) != -1) {
		struct tp_tracept_spec *sp = c.n ? &c.specs[c.n - 1] : NULL;

		if (!sp && (opt == 'a' || opt == 'P' || opt == 'W' || opt == 'S')) {
			tp_cli_error("trace", "%s comes after the -t it belongs to",
				     opt == 'a'	  ? "-a"
				     : opt == 'P' ? "--pass-count"
				     : opt == 'W' ? "--while-stepping"
						  : "--step-actions");
			goto out;
		}
		switch (opt) {
		case 't':
			c.specs = grow(c.specs, (c.n + 1) * sizeof(*c.specs));
			memset(&c.specs[c.n], 0, sizeof(c.specs[0]));
			c.specs[c.n].fast = fast > 0;
			c.specs[c.n++].loc =
			    (struct tp_tracept_text){optarg, quoted(&c, "-t", optarg), 0};
			break;
		case 'a':
			add_text(&sp->collect, &sp->ncollect, optarg, quoted(&c, "-a", optarg));
			break;
		case 'S':
			add_text(&sp->step_collect, &sp->nstep_collect, optarg,
				 quoted(&c, "--step-actions", optarg));
			break;
		case 'P':
			if (count_arg("--pass-count", optarg, ~0ull >> 1, &v))
				goto out;
			sp->pass_count = v;
			break;
		case 'W':
			if (count_arg("--while-stepping", optarg, 1000000, &v))
				goto out;
			sp->while_stepping = (unsigned)v;
			break;
		case 'F':
		case 'N':
			if (sp)
				sp->fast = opt == 'F';
			else
				fast = opt == 'F' ? 1 : -1;
			break;
		case 'x':
			script_path = optarg;
			break;
		case 'q':
			o.quiet = true;
			break;
		case 'o':
			outpath = optarg;
			break;
		case 'R':
			o.trace_dir = optarg;
			break;
		case 'p':
			if (tp_cli_parse_pid("trace", optarg, &o.pid))
				goto out;
			break;
		case 'D':
			if (tp_cli_parse_duration("trace", optarg, &duration))
				goto out;
			break;
		case 'h':
			fputs(usage_text, stdout);
			ret = 0;
			goto out;
		default:
			tp_cli_bad_option("trace", argv, OPTSTRING);
			goto out;
		}
	}
	if (!o.pid == (optind >= argc)) {
		tp_cli_error(
		    "trace",
		    o.pid ? "-p and a program to run exclude each other"
			  : "no program to run (tracepad trace -t LOC -- PROGRAM, or -p PID)");
		goto out;
	}
	if (script_path && c.n) {
		tp_cli_error("trace", "-x and -t exclude each other");
		goto out;
	}
	if (script_path) {
		if (tp_tracept_script_load(script_path, &script, &o.specs, &o.nspecs))
			goto out;
	} else if (!c.n) {
		tp_cli_error("trace", "no tracepoint (-t LOCATION, or -x SCRIPT)");
		goto out;
	} else {
		o.specs = c.specs;
		o.nspecs = c.n;
	}
	if (duration > 0 && !o.pid) {
		tp_cli_error("trace", "--duration goes with -p");
		goto out;
	}
	if (outpath) {
		o.out = tp_cli_out_open("trace", outpath, stderr);
		if (!o.out)
			goto out;
	}
	o.argv = argv + optind;
	o.agent = tp_cli_agent_path();
	o.stop = &tp_cli_interrupted;
	tp_cli_catch_signals();
	if (duration > 0)
		tp_cli_stop_after(duration);
	for (int i = 0; i < o.nspecs; i++) {
		struct tp_tracept_spec *sp = &o.specs[i];

		if (script_path)
			sp->fast |= fast > 0;
		if (sp->while_stepping && !sp->nstep_collect) {
			sp->step_collect = sp->collect; /* the same list at each step */
			sp->nstep_collect = sp->ncollect;
		}
	}
	ret = tp_tracept_run(&o);
	if (outpath && tp_cli_out_close("trace", o.out, outpath, true))
		ret = ret ? ret : 1;
	for (int i = 0; i < o.nspecs; i++)
		if (o.specs[i].step_collect == o.specs[i].collect)
			o.specs[i].step_collect = NULL;
out:
	tp_tracept_script_free(script);
	cli_free(&c);
	return ret;
}
