/* tracepad export: convert a trace for other tools: Chrome trace-event JSON (Perfetto UI,
 * chrome://tracing) with function calls as complete slices, or folded stacks for flame
 * graphs.  Calls come from func_entry/func_exit events paired per thread by nesting. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "trace/read/export.h"

static const char usage_text[] =
    "usage: tracepad export [OPTIONS] DIR\n"
    "\n"
    "Convert the trace in DIR.  Function calls are func_entry/func_exit events (a func\n"
    "string field, or an addr field resolved with DIR/.maps), paired per thread.\n"
    "\n"
    "  --format F      chrome: Chrome trace-event JSON for Perfetto UI and\n"
    "                  chrome://tracing (default); folded: folded stacks with the\n"
    "                  self time in ns, for flame graphs\n"
    "  -o OUT          write to OUT instead of standard output\n"
    "  -h, --help      show this help\n";

int cmd_export(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"format", required_argument, NULL, 'F'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	enum tp_export_format fmt = TP_EXPORT_CHROME;
	const struct tp_trace_event *ev;
	struct tp_export *e = NULL;
	struct tp_cli_trace t;
	FILE *out = NULL;
	const char *outfile = NULL;
	uint64_t discarded;
	int opt, status, err;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'F':
			if (!strcmp(optarg, "chrome")) {
				fmt = TP_EXPORT_CHROME;
			} else if (!strcmp(optarg, "folded")) {
				fmt = TP_EXPORT_FOLDED;
			} else {
				tp_cli_error("export", "unknown --format '%s' (chrome, folded)",
					     optarg);
				return 2;
			}
			break;
		case 'o':
			outfile = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			return tp_cli_bad_option("export", argv, "o:h");
		}
	}
	if (optind != argc - 1) {
		tp_cli_error("export", optind == argc ? "no trace directory (tracepad export DIR)"
						      : "one trace directory at a time");
		return 2;
	}
	status = tp_cli_trace_open(&t, "export", argv[optind], true);
	if (status)
		return status;
	/* Chrome JSON is written as the trace is read; folded stacks only at the end, so that
	 * a trace without calls leaves no output file behind. */
	if (fmt == TP_EXPORT_CHROME && !(out = tp_cli_result_open("export", outfile, stdout))) {
		tp_cli_trace_close(&t);
		return 2;
	}
	e = tp_export_new(fmt, t.syms, out);
	err = e ? 0 : -ENOMEM;
	while (!err && (status = tp_cli_trace_next(&t, &ev)) > 0)
		err = tp_export_event(e, ev);
	status = status < 0 ? 2 : 0;
	if (!status && (err || tp_export_finish(e))) {
		tp_cli_error("export", "out of memory");
		status = 1;
	}
	discarded = tp_trace_reader_discarded(t.r);
	if (!status && fmt == TP_EXPORT_FOLDED) {
		if (!tp_export_calls(e)) {
			tp_cli_error("export",
				     "%s: no func_entry/func_exit events: no stacks to fold",
				     t.dir);
			status = 2;
		} else if (!(out = tp_cli_result_open("export", outfile, stdout))) {
			status = 2;
		} else if (tp_export_folded(e, out)) {
			tp_cli_error("export", "out of memory");
			status = 1;
		}
	} else if (!status) {
		tp_export_chrome_end(e, t.dir, discarded);
	}
	/* no half-written file that looks like a result: an existing one is kept as it was */
	if (out && tp_cli_out_close("export", out, outfile, !status) && !status)
		status = 1;
	if (!status && discarded)
		tp_cli_error("export",
			     "warning: the producers discarded %" PRIu64
			     " events: calls may be cut short or missing",
			     discarded);
	tp_export_free(e);
	tp_cli_trace_close(&t);
	return status;
}
