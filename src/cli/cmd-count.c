/* tracepad count: count every executed instruction of a program, or of a region of it,
 * with the dbt engine (a code cache), the ptrace engine (single-stepping from the tracer) or
 * the trapflag engine (the agent steps the program from inside). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "count/count.h"
#include "proc/proc.h"
#include "trace/trace.h"

static const char usage_text[] =
    "usage: tracepad count [OPTIONS] -- PROGRAM [ARGS]\n"
    "       tracepad count [OPTIONS] -p PID\n"
    "\n"
    "Count every instruction the program executes, exactly.\n"
    "\n"
    "  --engine E      dbt (the program runs in a code cache; the default when\n"
    "                  launching; not with -p), ptrace (single-step from tracepad; the\n"
    "                  default with -p) or trapflag (the agent steps the program from inside)\n"
    "  --start SYM     count from each thread's first entry of SYM to that call's return\n"
    "  --stop SYM      ... or to the entry of SYM\n"
    "  --by KEY        histogram by mnemonic, function, object or address\n"
    "  --top N         show the N largest histogram entries (default: 20 in text, all in\n"
    "                  JSON; 0 for all)\n"
    "  --json          write the report as one JSON object\n"
    "  -o FILE         write the report to FILE instead of stderr\n"
    "  --trace DIR     also record the results as events of a CTF trace in DIR\n"
    "  --no-startup    trapflag (chosen by this option when no engine is given): do not\n"
    "                  step the start-up before the agent takes control\n"
    "  -p PID          count a running process until it exits, Ctrl-C or --duration (ptrace\n"
    "                  by default; trapflag injects the agent into it)\n"
    "  --duration S    with -p: stop counting and detach after S seconds\n"
    "  -h, --help      show this help\n"
    "\n"
    "Without --start, the whole program is counted, or only the regions between\n"
    "tp_step_begin() and tp_step_end() when the program uses <tracepad/step.h>.\n";

/* The progress line on the terminal. */
static void show_progress(uint64_t total, double per_second, bool end)
{
	if (end)
		fputs("\r\033[K", stderr);
	else
		fprintf(stderr, "\rtracepad count: %llu instructions, %.0f/s ",
			(unsigned long long)total, per_second);
}

int cmd_count(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"engine", required_argument, NULL, 'E'},
	    {"start", required_argument, NULL, 'S'},
	    {"stop", required_argument, NULL, 'T'},
	    {"by", required_argument, NULL, 'B'},
	    {"top", required_argument, NULL, 'N'},
	    {"json", no_argument, NULL, 'J'},
	    {"no-startup", no_argument, NULL, 'U'},
	    {"help", no_argument, NULL, 'h'},
	    {"trace", required_argument, NULL, 'D'},
	    {"duration", required_argument, NULL, 'R'},
	    {NULL, 0, NULL, 0},
	};
	struct tp_count_opts o = {.top = -1};
	static struct tp_count_result res; /* large: the mnemonic counts */
	struct tp_count_ctx c;
	char path[PATH_MAX];
	struct tp_trace_writer *tw = NULL;
	FILE *out = stderr;
	double duration = 0;
	int opt, err, status;
	char *end;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "+o:p:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'E':
			if (!strcmp(optarg, "ptrace"))
				o.engine = TP_COUNT_ENGINE_PTRACE;
			else if (!strcmp(optarg, "trapflag"))
				o.engine = TP_COUNT_ENGINE_TRAPFLAG;
			else if (!strcmp(optarg, "dbt"))
				o.engine = TP_COUNT_ENGINE_DBT;
			else {
				tp_cli_error("count", "unknown engine '%s' (ptrace, trapflag, dbt)",
					     optarg);
				return 2;
			}
			break;
		case 'S':
			o.start = optarg;
			break;
		case 'T':
			o.stop = optarg;
			break;
		case 'B':
			if (tp_count_parse_by(optarg, &o.by)) {
				tp_cli_error("count",
					     "unknown --by key '%s' (mnemonic, function, object, "
					     "address)",
					     optarg);
				return 2;
			}
			break;
		case 'N':
			o.top = (int)strtol(optarg, &end, 10);
			if (*end || o.top < 0) {
				tp_cli_error("count", "--top: '%s' is not a count", optarg);
				return 2;
			}
			break;
		case 'J':
			o.json = true;
			break;
		case 'U':
			o.no_startup = true;
			break;
		case 'o':
			o.outfile = optarg;
			break;
		case 'D':
			o.trace_dir = optarg;
			break;
		case 'p':
			if (tp_cli_parse_pid("count", optarg, &o.pid))
				return 2;
			break;
		case 'R':
			if (tp_cli_parse_duration("count", optarg, &duration))
				return 2;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			return tp_cli_bad_option("count", argv, "+o:p:h");
		}
	}
	o.argv = argv + optind;
	if (!o.pid == !o.argv[0]) {
		tp_cli_error("count", o.pid ? "give either -p PID or a program, not both"
					    : "no program to count (tracepad count -- PROGRAM)");
		return 2;
	}
	if (o.pid && o.engine == TP_COUNT_ENGINE_DBT) {
		tp_cli_error("count",
			     "-p: the dbt engine cannot attach yet; use --engine ptrace or "
			     "trapflag");
		return 2;
	}
	if (duration > 0 && !o.pid) {
		tp_cli_error("count", "--duration goes with -p");
		return 2;
	}
	/* The fastest engine that does what was asked: --no-startup only means something to
	 * the trapflag engine. */
	if (o.engine == TP_COUNT_ENGINE_DEFAULT)
		o.engine = o.pid	  ? TP_COUNT_ENGINE_PTRACE
			   : o.no_startup ? TP_COUNT_ENGINE_TRAPFLAG
					  : TP_COUNT_ENGINE_DBT;
	if (tp_count_init(&c, &o, &res))
		return 1;
	status = 2;
	if (o.pid ? tp_count_probe_pid(&c, path) : tp_count_probe(&c, path)) {
		tp_cli_error("count", "%s", c.error);
		goto done;
	}
	if (!o.pid || o.engine == TP_COUNT_ENGINE_TRAPFLAG) {
		o.agent = tp_cli_agent_path();
		if (tp_count_ctl_new(&c)) {
			tp_cli_error("count", "%s", c.error);
			status = 1;
			goto done;
		}
	}
	out = tp_cli_out_open("count", o.outfile, stderr);
	if (!out)
		goto done;
	if (o.trace_dir && (err = tp_count_trace_new(&c, &tw))) {
		tp_cli_error("count", "%s", c.error);
		status = tw ? 1 : 2; /* the trace was created, the agent's rings were not */
		goto done;
	}
	tp_cli_catch_signals();
	if (duration > 0)
		tp_cli_stop_after(duration);
	c.stop = &tp_cli_interrupted;
	if (isatty(STDERR_FILENO) && !getenv("CI"))
		c.progress = show_progress;
	err = tp_count_run(&c);
	if (err && c.error[0])
		tp_cli_error("count", "%s", c.error);
	if (err) {
		if (err == -EPERM && o.pid) {
			char why[256];

			if (tp_proc_perm_reason(o.pid, why, sizeof(why)))
				snprintf(why, sizeof(why), "ptrace refused: permission denied");
			tp_cli_error("count", "-p %d: %s", (int)o.pid, why);
		} else if (err == -EINTR && o.pid) {
			tp_cli_error("count",
				     "-p %d: interrupted while waiting for its threads to stop",
				     (int)o.pid);
		} else if (err == -ESRCH && o.pid)
			tp_cli_error("count", "-p %d: no such process", (int)o.pid);
		else if (err == -ENOENT || err == -EACCES || err == -ENOEXEC)
			tp_cli_error("count", "%s: %s", o.argv[0], strerror(-err));
		else if (err != -EINVAL)
			tp_cli_error("count", "%s", strerror(-err));
		status = 2;
		goto done;
	}
	err = tp_count_report(&c, out, tw);
	tw = NULL;
	if (err)
		tp_cli_error("count", "--trace %s: %s", o.trace_dir, strerror(-err));
	status = tp_count_exit_status(&res);
	/* Launched and interrupted: the program runs on, its status is not ours to know. */
	if (!o.pid && res.detached && tp_cli_interrupted)
		status = 128 + tp_cli_interrupted;
done:
	if (out && out != stderr && tp_cli_out_close("count", out, o.outfile, true) && !status)
		status = 1;
	tp_trace_writer_free(tw);
	tp_count_fini(&c);
	return status;
}
