/* tracepad report: a summary of a trace (src/trace/read/summary.c): events per class,
 * discarded events per stream, the time span and the rate, as text or JSON. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/text.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "trace/read/summary.h"

static const char usage_text[] =
    "usage: tracepad report [OPTIONS] DIR\n"
    "\n"
    "Summarise the trace in DIR: events per event class (most frequent first),\n"
    "events discarded by the producers per stream and in total, the number of\n"
    "streams, the first and last timestamps, the duration and the event rate.\n"
    "\n"
    "  --json          write the report as one JSON object\n"
    "  -o FILE         write to FILE instead of standard output\n"
    "  -h, --help      show this help\n";

/* A stream file truncated while mapped: the only way left to fail is to say so. */
static void on_sigbus(int sig)
{
	static const char msg[] = "tracepad report: a stream file shrank while it was read\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(2);
	_exit(2);
}

static void put_text(const struct tp_trace_summary *rp, FILE *f)
{
	char first[64], last[64], dur[32];

	tp_trace_fmt_time(rp->first, first, sizeof(first));
	tp_trace_fmt_time(rp->last, last, sizeof(last));
	tp_trace_fmt_secs(rp->last - rp->first, dur, sizeof(dur));
	fprintf(f,
		"trace      %s\nstreams    %zu\nevents     %" PRIu64 "\ndiscarded  %" PRIu64 "\n",
		rp->dir, rp->nr_st, rp->events, rp->discarded);
	if (rp->events)
		fprintf(f,
			"first      %s\nlast       %s\nduration   %s s\nrate       %.1f events/s\n",
			first, last, dur, tp_trace_summary_rate(rp));
	fprintf(f, "\n  stream        events   discarded  file\n");
	for (size_t i = 0; i < rp->nr_st; i++) {
		fprintf(f, "  %6zu  %12" PRIu64 "  %10" PRIu64 "  ", i, rp->st[i].events,
			rp->st[i].discarded);
		tp_trace_print_name(f, rp->st[i].file, false);
		fputc('\n', f);
	}
	fprintf(f, "\n        count       %%  class\n");
	for (size_t i = 0; i < rp->nr_cls; i++) {
		fprintf(f, "  %11" PRIu64 "  %5.1f%%  ", rp->cls[i].count,
			100.0 * (double)rp->cls[i].count / (double)rp->events);
		tp_trace_print_name(f, rp->cls[i].name, false);
		fputc('\n', f);
	}
}

static void put_json(const struct tp_trace_summary *rp, FILE *f)
{
	char when[64];

	fputs("{\"trace\": ", f);
	tp_json_str(f, rp->dir, strlen(rp->dir));
	fprintf(f, ", \"nr_streams\": %zu, \"events\": %" PRIu64 ", \"discarded\": %" PRIu64,
		rp->nr_st, rp->events, rp->discarded);
	if (rp->events) {
		tp_trace_fmt_time(rp->first, when, sizeof(when));
		fprintf(f, ", \"first_ns\": %" PRIu64 ", \"first\": \"%s\"", rp->first, when);
		tp_trace_fmt_time(rp->last, when, sizeof(when));
		fprintf(f, ", \"last_ns\": %" PRIu64 ", \"last\": \"%s\"", rp->last, when);
	} else {
		fputs(", \"first_ns\": null, \"first\": null, \"last_ns\": null, \"last\": null",
		      f);
	}
	fprintf(f, ", \"duration_ns\": %" PRIu64 ", \"events_per_second\": %.1f",
		rp->last - rp->first, tp_trace_summary_rate(rp));
	fputs(", \"streams\": [", f);
	for (size_t i = 0; i < rp->nr_st; i++) {
		fprintf(f, "%s{\"index\": %zu, \"file\": ", i ? ", " : "", i);
		tp_json_str(f, rp->st[i].file, strlen(rp->st[i].file));
		fprintf(f, ", \"events\": %" PRIu64 ", \"discarded\": %" PRIu64 "}",
			rp->st[i].events, rp->st[i].discarded);
	}
	fputs("], \"classes\": [", f);
	for (size_t i = 0; i < rp->nr_cls; i++) {
		fputs(i ? ", {\"name\": " : "{\"name\": ", f);
		tp_json_str(f, rp->cls[i].name, strlen(rp->cls[i].name));
		fprintf(f, ", \"count\": %" PRIu64 "}", rp->cls[i].count);
	}
	fputs("]}\n", f);
}

int cmd_report(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"json", no_argument, NULL, 'J'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct sigaction sa = {.sa_handler = on_sigbus};
	static struct tp_trace_summary rp;
	struct tp_cli_trace t;
	const char *outfile = NULL;
	size_t n;
	bool json = false;
	int opt, err, status;
	FILE *out;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'J':
			json = true;
			break;
		case 'o':
			outfile = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			return tp_cli_bad_option("report", argv, "o:h");
		}
	}
	if (optind != argc - 1) {
		tp_cli_error("report", optind == argc ? "no trace directory (tracepad report DIR)"
						      : "one trace directory at a time");
		return 2;
	}
	/* The whole trace opened once for its checks and errors, then each stream alone. */
	status = tp_cli_trace_open(&t, "report", argv[optind], false);
	if (status)
		return status;
	n = tp_trace_reader_nr_streams(t.r);
	tp_cli_trace_close(&t);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
	err = tp_trace_summary_read(&rp, argv[optind], n);
	if (err) {
		tp_cli_error("report", "%s", rp.error);
		status = err == -ENOMEM ? 1 : 2;
		goto out;
	}
	out = tp_cli_result_open("report", outfile, stdout);
	if (!out) {
		status = 2;
		goto out;
	}
	if (json)
		put_json(&rp, out);
	else
		put_text(&rp, out);
	status = tp_cli_out_close("report", out, outfile, true);
out:
	tp_trace_summary_fini(&rp);
	return status;
}
