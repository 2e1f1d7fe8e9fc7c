/* tracepad frames: the frames that `tracepad trace --trace DIR` recorded, listed, or one
 * shown in full with its symbol, source line and values (gdb's tfind and tdump), offline. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "tracept/tracept.h"

static const char usage_text[] =
    "usage: tracepad frames [OPTIONS] DIR [N]\n"
    "\n"
    "Without N or a selection, list the frames of the trace in DIR, one a line:\n"
    "FRAME, tracepoint (TP.STEP for a while-stepping frame), thread, pc, symbol (file:line).\n"
    "With N, show frame N in full: its tracepoint, thread, pc with symbol and source line,\n"
    "and every value collected, by name.  A selection shows the first frame that matches.\n"
    "\n"
    "  --tracepoint T    the first frame of tracepoint T\n"
    "  --pc ADDR         the first frame at pc ADDR\n"
    "  --line FILE:LINE  the first frame at source line FILE:LINE\n"
    "  -o FILE           write to FILE instead of standard output\n"
    "  -h, --help        show this help\n";

#define OPTSTRING "o:h"

struct sel {
	long long n; /* frame number, -1: none */
	long tp;     /* 0: any */
	uint64_t pc; /* 0: any */
	char *file;  /* NULL: any */
	int line;
};

static bool selected(const struct sel *s, const struct tp_trace_event *ev, uint64_t idx,
		     struct tp_symtab *syms)
{
	unsigned tp, step;
	uint64_t pc;

	if (!tp_tracept_frame_info(ev, &tp, &step, &pc))
		return false;
	if (s->n >= 0)
		return idx == (uint64_t)s->n;
	if (s->tp && tp != (unsigned long)s->tp)
		return false;
	if (s->pc && pc != s->pc)
		return false;
	return !s->file || tp_tracept_frame_at_line(ev, syms, s->file, s->line);
}

int cmd_frames(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"tracepoint", required_argument, NULL, 'T'},
	    {"pc", required_argument, NULL, 'C'},
	    {"line", required_argument, NULL, 'L'},
	    {"output", required_argument, NULL, 'o'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct sel s = {.n = -1};
	struct tp_cli_trace t;
	const char *outpath = NULL;
	const struct tp_trace_event *ev;
	uint64_t idx = 0;
	bool one, found = false;
	char *end, *colon;
	FILE *out;
	int opt, r, ret = 0;

	optind = 1;
	while ((opt = getopt_long(argc, argv, OPTSTRING, longopts, NULL)) != -1) {
		switch (opt) {
		case 'T':
			s.tp = strtol(optarg, &end, 10);
			if (*end || s.tp < 1) {
				tp_cli_error("frames", "bad tracepoint number '%s'", optarg);
				return 2;
			}
			break;
		case 'C':
			s.pc = strtoull(optarg, &end, 0);
			if (*end || !s.pc) {
				tp_cli_error("frames", "bad address '%s'", optarg);
				return 2;
			}
			break;
		case 'L':
			colon = strrchr(optarg, ':');
			s.line = colon ? (int)strtol(colon + 1, &end, 10) : 0;
			if (!colon || colon == optarg || *end || s.line < 1) {
				tp_cli_error("frames", "bad source line '%s' (FILE:LINE)", optarg);
				return 2;
			}
			s.file = optarg;
			*colon = 0;
			break;
		case 'o':
			outpath = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			return tp_cli_bad_option("frames", argv, OPTSTRING);
		}
	}
	if (optind >= argc || argc - optind > 2) {
		tp_cli_error("frames", argc - optind > 2
					   ? "too many arguments"
					   : "no trace directory (tracepad frames DIR [N])");
		return 2;
	}
	if (argc - optind == 2) {
		s.n = strtoll(argv[optind + 1], &end, 10);
		if (*end || s.n < 0 || !argv[optind + 1][0]) {
			tp_cli_error("frames", "bad frame number '%s'", argv[optind + 1]);
			return 2;
		}
	}
	one = s.n >= 0 || s.tp || s.pc || s.file;
	r = tp_cli_trace_open(&t, "frames", argv[optind], true);
	if (r)
		return r;
	out = tp_cli_result_open("frames", outpath, stdout);
	if (!out) {
		tp_cli_trace_close(&t);
		return 2;
	}
	while ((r = tp_cli_trace_next(&t, &ev)) > 0) {
		unsigned tp, step;
		uint64_t pc;

		if (!tp_tracept_frame_info(ev, &tp, &step, &pc))
			continue;
		if (!one) {
			tp_tracept_frame_line(out, ev, idx, t.syms);
		} else if (selected(&s, ev, idx, t.syms)) {
			tp_tracept_frame_dump(out, ev, idx, t.syms, argv[optind]);
			found = true;
			break;
		}
		idx++;
	}
	if (r < 0)
		ret = 1;
	if (one && !found && !ret) {
		tp_cli_error("frames", "no such frame (%" PRIu64 " frames in %s)", idx,
			     argv[optind]);
		ret = 1;
	}
	tp_cli_trace_close(&t);
	if (tp_cli_out_close("frames", out, outpath, !ret))
		ret = ret ? ret : 1;
	return ret;
}
