/* tracepad frames: the frames that `tracepad trace --trace DIR` recorded, listed, or one
 * shown in full with its symbol, source line and values (gdb's tfind and tdump), offline or
 * live (-p PID --live: the growing trace read again every LIVE_US, like tail -f). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "tracept/tracept.h"

static const char usage_text[] =
    "usage: tracepad frames [OPTIONS] DIR [N]\n"
    "       tracepad frames [OPTIONS] -p PID [--live] [N]\n"
    "\n"
    "Without N or a selection, list the frames of the trace in DIR, one a line:\n"
    "FRAME, tracepoint (TP.STEP for a while-stepping frame), thread, pc, symbol (file:line).\n"
    "With N, show frame N in full: its tracepoint, thread, pc with symbol and source line,\n"
    "and every value collected, by name.  A selection shows the first frame that matches.\n"
    "\n"
    "  --tracepoint T    the first frame of tracepoint T\n"
    "  --pc ADDR         the first frame at pc ADDR\n"
    "  --line FILE:LINE  the first frame at source line FILE:LINE\n"
    "  -p PID            the trace that `tracepad trace --trace DIR` writes of process PID\n"
    "  --live            with -p, follow the trace as it grows (like tail -f) until the\n"
    "                    session ends; with N or a selection, wait for that frame\n"
    "  -o FILE           write to FILE instead of standard output\n"
    "  -h, --help        show this help\n";

#define OPTSTRING "p:o:h"
#define LIVE_US 100000 /* between two readings of a live trace */

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

/* One reading of the trace in @dir: the frames from *@idx on listed, or the selected one
 * shown.  Live, a reading that meets a packet being written ends there quietly (read again
 * later).  1: the selected frame was shown, 0, or -1 on an error. */
static int reading(const struct sel *s, bool one, const char *dir, FILE *out, uint64_t *idx,
		   bool live)
{
	const struct tp_trace_event *ev;
	struct tp_cli_trace t;
	uint64_t i = 0;
	int r, ret = 0;

	r = tp_cli_trace_open(&t, "frames", dir, true);
	if (r)
		return -1;
	while ((r = live ? tp_trace_reader_next(t.r, &ev) : tp_cli_trace_next(&t, &ev)) > 0) {
		unsigned tp, step;
		uint64_t pc;

		if (!tp_tracept_frame_info(ev, &tp, &step, &pc))
			continue;
		if (i++ < *idx)
			continue;
		if (!one) {
			tp_tracept_frame_line(out, ev, *idx, t.syms);
		} else if (selected(s, ev, *idx, t.syms)) {
			tp_tracept_frame_dump(out, ev, *idx, t.syms, dir);
			ret = 1;
			break;
		}
		(*idx)++;
	}
	if (r < 0 && !live)
		ret = -1;
	tp_cli_trace_close(&t);
	fflush(out);
	return ret;
}

/* -p PID: the trace directory its session named (tp_tracept_live_link()). */
static bool live_dir(pid_t pid, char *dir, size_t len)
{
	char link[PATH_MAX];
	ssize_t n;

	if (tp_tracept_live_link(pid, link, sizeof(link)))
		return false;
	n = readlink(link, dir, len - 1);
	if (n <= 0)
		return false;
	dir[n] = 0;
	return true;
}

/* Read the trace of @pid's session again until the session ends (its link goes, written
 * after the last frame) or the frame looked for is shown. */
static int follow(const struct sel *s, bool one, pid_t pid, const char *dir, FILE *out,
		  uint64_t *idx)
{
	char now[PATH_MAX];
	int r;

	for (;;) {
		bool last = !live_dir(pid, now, sizeof(now)) || strcmp(now, dir);

		r = reading(s, one, dir, out, idx, !last);
		if (r || last)
			return r;
		usleep(LIVE_US);
	}
}

int cmd_frames(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"tracepoint", required_argument, NULL, 'T'},
	    {"pc", required_argument, NULL, 'C'},
	    {"line", required_argument, NULL, 'L'},
	    {"live", no_argument, NULL, 'V'},
	    {"output", required_argument, NULL, 'o'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct sel s = {.n = -1};
	const char *outpath = NULL, *dir;
	char live[PATH_MAX];
	uint64_t idx = 0;
	bool one, follows = false;
	char *end, *colon;
	long pid = 0;
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
		case 'p':
			pid = strtol(optarg, &end, 10);
			if (*end || pid < 1 || pid > INT_MAX) {
				tp_cli_error("frames", "bad process id '%s'", optarg);
				return 2;
			}
			break;
		case 'V':
			follows = true;
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
	if (follows && !pid) {
		tp_cli_error("frames", "--live goes with -p PID");
		return 2;
	}
	if ((pid ? argc - optind > 1 : optind >= argc || argc - optind > 2)) {
		tp_cli_error("frames", optind < argc
					   ? "too many arguments"
					   : "no trace directory (tracepad frames DIR [N])");
		return 2;
	}
	dir = pid ? live : argv[optind++];
	if (optind < argc) {
		s.n = strtoll(argv[optind], &end, 10);
		if (*end || s.n < 0 || !argv[optind][0]) {
			tp_cli_error("frames", "bad frame number '%s'", argv[optind]);
			return 2;
		}
	}
	if (pid && !live_dir((pid_t)pid, live, sizeof(live))) {
		tp_cli_error("frames", "process %ld: no `tracepad trace --trace DIR` session on it",
			     pid);
		return 1;
	}
	one = s.n >= 0 || s.tp || s.pc || s.file;
	out = tp_cli_result_open("frames", outpath, stdout);
	if (!out)
		return 2;
	r = follows ? follow(&s, one, (pid_t)pid, dir, out, &idx)
		    : reading(&s, one, dir, out, &idx, false);
	if (r < 0)
		ret = 1;
	if (one && !r) {
		tp_cli_error("frames", "no such frame (%" PRIu64 " frames in %s)", idx, dir);
		ret = 1;
	}
	if (tp_cli_out_close("frames", out, outpath, !ret))
		ret = ret ? ret : 1;
	return ret;
}
