/* tracepad markers: the static tracepoints of <tracepad/tracepoint.h>: list the sites of a
 * program at rest (its .note.tracepad) or of a live process with their state, enable or
 * disable them in a live process, and record the events of a launched program or of a
 * running process into a trace (the engine: src/markers/tracer.h). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "base/paths.h"
#include "markers/tracer.h"
#include "proc/proc.h"

static const char usage_text[] =
    "usage: tracepad markers list [-p PID | PROGRAM...]\n"
    "       tracepad markers enable -p PID GLOB\n"
    "       tracepad markers disable -p PID GLOB\n"
    "       tracepad markers record [-e GLOB] --trace DIR -- PROGRAM [ARGS...]\n"
    "       tracepad markers record -p PID [-e GLOB] --trace DIR [--duration S]\n"
    "\n"
    "List the static tracepoints (<tracepad/tracepoint.h>) of programs or libraries at rest,\n"
    "or of a running process with the state of each site; enable or disable the points whose\n"
    "name matches GLOB (fnmatch, comma-separated alternatives) in a running process; record\n"
    "the events of a launched program's points, or of a running process that uses\n"
    "libtracepad until Ctrl-C, --duration or its exit, into a trace directory that\n"
    "tracepad dump shows with each event's formatted text.\n"
    "\n"
    "  -p, --pid PID     the running process (list: every object it has mapped)\n"
    "  -e, --enable GLOB record: the points enabled (default: all); with -p, those it\n"
    "                    enables are disabled again at the end\n"
    "  -t, --trace DIR   record: the trace directory to create\n"
    "      --duration S  record -p: stop after S seconds\n"
    "      --fields POINT=NAME,...  record: name POINT's fields (repeatable)\n"
    "  -h, --help        show this help\n";

enum site_state { SITE_DISABLED, SITE_ENABLED, SITE_UNKNOWN, SITE_UNREADABLE };

/* ---- output ---- */

static void print_site(const struct tp_markers_site *s, const char *state, const char *point)
{
	printf("%-24s 0x%-14" PRIx64, s->name ? s->name : "?", s->addr);
	if (state)
		printf(" %-8s %-8s", state, point);
	printf(" %-6s", s->types && *s->types ? s->types : "-");
	if (s->file)
		printf(" %s:%u", s->file, s->line);
	else
		printf(" ?");
	printf(" \"%s\"\n", s->fmt ? s->fmt : "");
}

static int proc_error(const char *what, pid_t pid, int err)
{
	char msg[512];

	tp_markers_proc_error(msg, sizeof(msg), what, pid, err);
	tp_cli_error("markers", "%s", msg);
	return 2;
}

static int do_list_files(char **files, int n)
{
	int ret = 0;

	for (int i = 0; i < n; i++) {
		struct tp_markers_sites s = {0};
		bool is_elf;
		int err = tp_markers_read_notes(&s, files[i], 0, &is_elf);

		if (err < 0) {
			tp_cli_error("markers", "%s: %s", files[i],
				     err == -ENOEXEC ? "not an ELF file" : strerror(-err));
			ret = 2;
		} else {
			if (n > 1)
				printf("# %s\n", files[i]);
			for (size_t j = 0; j < s.n; j++)
				print_site(&s.v[j], NULL, NULL);
			if (!s.n)
				fprintf(stderr, "tracepad markers: %s: no tracepoints\n", files[i]);
		}
		tp_markers_sites_free(&s);
	}
	return ret;
}

static int do_list_pid(pid_t pid)
{
	struct tp_markers_sites s = {0};
	const char *last = NULL, *state, *point;
	char unk[32];
	int err = tp_markers_read_process(&s, pid);

	if (err) {
		tp_markers_sites_free(&s);
		return proc_error("read its memory", pid, err);
	}
	for (size_t i = 0; i < s.n; i++) {
		state = tp_markers_site_state(pid, &s.v[i], unk, &point);
		if (s.v[i].object != last && s.v[i].object)
			printf("# %s\n", last = s.v[i].object);
		print_site(&s.v[i], state, point);
	}
	if (!s.n)
		fprintf(stderr, "tracepad markers: -p %d: no tracepoints\n", (int)pid);
	tp_markers_sites_free(&s);
	return 0;
}

static int do_set(pid_t pid, const char *glob, bool on)
{
	struct tp_markers_sites s = {0};
	int err, changed = 0, refused = 0, matched, ret = 2;
	char msg[512];

	err = tp_markers_read_process(&s, pid);
	matched = err ? 0 : (int)tp_markers_count_matching(&s, glob);
	if (err)
		ret = proc_error("read its memory", pid, err);
	else if (!s.n)
		tp_cli_error("markers", "-p %d: the process has no tracepoints", (int)pid);
	else if (!matched)
		tp_cli_error("markers", "-p %d: no point matches '%s'", (int)pid, glob);
	else if (tp_markers_switch(pid, &s, glob, on, &changed, &refused, msg, sizeof(msg)))
		tp_cli_error("markers", "%s", msg);
	else {
		printf("%s %d site%s (%d matching, %d refused)\n", on ? "enabled" : "disabled",
		       changed, changed == 1 ? "" : "s", matched, refused);
		ret = refused ? 1 : 0;
	}
	tp_markers_sites_free(&s);
	return ret;
}

/* ---- record ---- */

/* --fields, NULL-terminated. */
static const char *fields[33];
static int nfields;

static int do_record(const char *glob, const char *dir, char **argv)
{
	struct tp_markers_sites s = {0};
	char path[PATH_MAX], msg[PATH_MAX + 64] = "";
	bool is_elf;
	int err, ret = 2;

	/* Not found: the launch says so. */
	if (tp_path_find_program(argv[0], path, sizeof(path)))
		snprintf(path, sizeof(path), "%s", argv[0]);
	/* The notes at rest only help name the classes (libtracepad declares them): a script
	 * or a wrapper such as valgrind is run all the same. */
	err = tp_markers_read_notes(&s, path, 0, &is_elf);
	if (err == -ENOENT || err == -EACCES) {
		tp_cli_error("markers", "record: %s: %s", path, strerror(-err));
		goto out;
	}
	if (err >= 0)
		tp_markers_read_needed(&s, path);
	if (!s.n)
		fprintf(stderr,
			"tracepad markers: %s: no tracepoints (a library it loads may have "
			"some)\n",
			path);
	ret = tp_markers_record_launch(dir, &s, glob, fields, argv, &tp_cli_interrupted, msg,
				       sizeof(msg));
	if (msg[0])
		tp_cli_error("markers", "%s", msg);
out:
	tp_markers_sites_free(&s);
	return ret;
}

static int do_record_pid(pid_t pid, const char *glob, const char *dir, double duration)
{
	struct tp_markers_sites s = {0};
	char msg[PATH_MAX + 64] = "";
	int err = tp_markers_read_process(&s, pid), ret;

	if (err)
		ret = proc_error("read its memory", pid, err);
	else
		ret = tp_markers_record_pid(pid, &s, tp_markers_read_process, glob, fields, dir,
					    duration, &tp_cli_interrupted, msg, sizeof(msg));
	if (msg[0])
		tp_cli_error("markers", "%s", msg);
	tp_markers_sites_free(&s);
	return ret;
}

/* One line on stderr, exit status 2: the arguments are wrong. */
#define REFUSE(...) return (tp_cli_error("markers", __VA_ARGS__), 2)

int cmd_markers(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"pid", required_argument, NULL, 'p'},
	    {"enable", required_argument, NULL, 'e'},
	    {"trace", required_argument, NULL, 't'},
	    {"duration", required_argument, NULL, 'D'},
	    {"help", no_argument, NULL, 'h'},
	    {"fields", required_argument, NULL, 'F'},
	    {NULL, 0, NULL, 0},
	};
	const char *sub, *glob = NULL, *dir = NULL;
	pid_t pid = 0;
	double duration = 0;
	char msg[256];
	int c;

	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (argc < 2) {
		tp_cli_error("markers", "which subcommand? (list, enable, disable, record; see "
					"'tracepad markers --help')");
		return 2;
	}
	sub = argv[1];
	if (strcmp(sub, "list") && strcmp(sub, "enable") && strcmp(sub, "disable") &&
	    strcmp(sub, "record"))
		REFUSE("unknown subcommand '%s' (list, enable, disable, record)", sub);
	argc--;
	argv++;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+p:e:t:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'e':
			glob = optarg;
			break;
		case 't':
			dir = optarg;
			break;
		case 'F':
			if (nfields == 32 || tp_markers_fields_check(optarg, msg, sizeof(msg)))
				REFUSE("record: %s", nfields == 32 ? "more than 32 --fields" : msg);
			fields[nfields++] = optarg;
			break;
		case 'D':
			if (tp_cli_parse_duration("markers", optarg, &duration))
				return 2;
			break;
		case 'p':
			if (tp_cli_parse_pid("markers", optarg, &pid))
				return 2;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			return tp_cli_bad_option("markers", argv, "+p:e:t:h");
		}
	}
	if ((glob || dir || duration || nfields) && strcmp(sub, "record"))
		REFUSE("%s: -e, --trace, --duration and --fields belong to record", sub);
	if (!strcmp(sub, "record")) {
		if (!dir)
			REFUSE("record: --trace DIR is required");
		if (glob && !*glob)
			REFUSE("record: -e: empty GLOB");
		if (pid && optind < argc)
			REFUSE("record: give either -p PID or a PROGRAM, not both");
		if (duration && !pid)
			REFUSE("record: --duration goes with -p PID");
		/* from here on SIGINT, SIGTERM, SIGHUP and SIGPIPE end the recording */
		tp_cli_catch_signals();
		if (pid)
			return do_record_pid(pid, glob ? glob : "*", dir, duration);
		if (optind >= argc)
			REFUSE("record: give a PROGRAM to launch or -p PID");
		return do_record(glob ? glob : "*", dir, argv + optind);
	}
	if (!strcmp(sub, "list")) {
		if (pid && optind < argc)
			REFUSE("give either -p PID or programs, not both");
		if (pid)
			return do_list_pid(pid);
		if (optind >= argc)
			REFUSE("list: give a PROGRAM or -p PID");
		return do_list_files(argv + optind, argc - optind);
	}
	if (!pid)
		REFUSE("%s: -p PID is required", sub);
	if (optind != argc - 1)
		REFUSE("%s: give exactly one GLOB", sub);
	return do_set(pid, argv[optind], !strcmp(sub, "enable"));
}
