/* tracepad: one command, one subcommand per job (src/cli/cmd-*.c). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "base/log.h"
#include "proc/proc.h"

#ifndef TP_AGENT_RELDIR
#define TP_AGENT_RELDIR "../lib/tracepad"
#endif

volatile sig_atomic_t tp_cli_interrupted;
/* Set by the signals only, not by --duration: a slow attach is given up at a user's word. */
static volatile sig_atomic_t signalled;

static void on_signal(int sig)
{
	tp_cli_interrupted = sig;
	signalled = sig;
}

void tp_cli_catch_signals(void)
{
	/* No SA_RESTART: a wait returns EINTR.  A second signal while detaching only sets the
	 * flag again: the detach goes on.  SIGPIPE too: dying of it would leave the program
	 * with our breakpoints in it. */
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
	struct sigaction sa = {.sa_handler = on_signal};

	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaddset(&sa.sa_mask, sigs[i]);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
	/* Nor is an attach waited for on end when a thread takes for ever to stop. */
	tp_proc_set_interrupt(&signalled);
	/* With the handlers in place: a signal before the split reaches the tracer too. */
	tp_cli_keeper_start();
}

static void on_alarm(int sig)
{
	(void)sig;
	if (!tp_cli_interrupted)
		tp_cli_interrupted = SIGALRM;
}

void tp_cli_stop_after(double seconds)
{
	struct sigaction sa = {.sa_handler = on_alarm};
	struct itimerval it = {{0, 0},
			       {(time_t)seconds, (suseconds_t)((seconds - (time_t)seconds) * 1e6)}};

	if (!it.it_value.tv_sec && !it.it_value.tv_usec)
		it.it_value.tv_usec = 1;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
}

void tp_cli_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tracepad %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int tp_cli_bad_option(const char *cmd, char *const *argv, const char *optstring)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	const char *known = optopt > 0 && optopt < 256 ? strchr(optstring, optopt) : NULL;

	if (!optopt)
		tp_cli_error(cmd, "unknown option '%s' (see 'tracepad %s --help')", arg, cmd);
	else if (!strncmp(arg, "--", 2))
		tp_cli_error(cmd, "option '%.*s' %s (see 'tracepad %s --help')",
			     (int)strcspn(arg, "="), arg,
			     strchr(arg, '=') ? "takes no value" : "needs a value", cmd);
	else if (known && known[1] == ':')
		tp_cli_error(cmd, "option '-%c' needs a value (see 'tracepad %s --help')", optopt,
			     cmd);
	else
		tp_cli_error(cmd, "unknown option '-%c' (see 'tracepad %s --help')", optopt, cmd);
	return 2;
}

/* The subcommand being run, for the prefix of log lines. */
static const char *cur_cmd;

static void log_to_stderr(enum tp_log_level level, const char *fmt, va_list ap)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};

	if (level > TP_LOG_WARN && !getenv("TRACEPAD_DEBUG"))
		return;
	/* the same prefix as the command's own errors: "tracepad CMD: warning: ..." */
	fprintf(stderr, "tracepad%s%s: %s: ", cur_cmd ? " " : "", cur_cmd ? cur_cmd : "",
		names[level]);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

const char *tp_cli_agent_path(void)
{
	static char path[PATH_MAX];
	char exe[PATH_MAX - 64];
	static const char *const rel[] = {"../agent", TP_AGENT_RELDIR};
	const char *env = getenv("TRACEPAD_AGENT");
	ssize_t n;
	char *slash;

	if (env && *env)
		return access(env, R_OK) ? NULL : env;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return NULL;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (!slash)
		return NULL;
	*slash = 0;
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		char cand[PATH_MAX + 64];

		snprintf(cand, sizeof(cand), "%s/%s/libtracepad-agent.so", exe, rel[i]);
		if (!access(cand, R_OK) && realpath(cand, path))
			return path;
	}
	return NULL;
}

/* One entry a subcommand: `tracepad NAME ...` runs fn with argv[0] = NAME. */
static const struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
} commands[] = {
    {"calls", cmd_calls, "trace function calls with arguments, return values and times"},
    {"count", cmd_count, "count every executed instruction of a program or of a region of it"},
    {"debug", cmd_debug, "run gdb on a program that runs in the code cache"},
    {"dump", cmd_dump, "print the events of a trace, one a line"},
    {"report", cmd_report, "summarise a trace: events per class, discarded events, time span"},
    {"export", cmd_export, "convert a trace to Chrome trace-event JSON or folded stacks"},
    {"markers", cmd_markers,
     "list, enable or disable the static tracepoints of a program or process"},
    {"trace", cmd_trace, "collect values at code locations: dynamic tracepoints"},
    {"frames", cmd_frames, "list or show the frames that tracepad trace recorded"},
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

static void usage(FILE *f)
{
	fputs("usage: tracepad COMMAND [OPTIONS] [-- PROGRAM [ARGS]]\n\nCommands:\n", f);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
	fputs("  help     show this help, or `tracepad help COMMAND` for one command\n"
	      "\n"
	      "Options: --version, --help.  See tracepad(1) and tracepad-COMMAND(1).\n",
	      f);
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : NULL;
	const struct command *cmd;

	/* before any handler of ours: the programs we launch get the signals as we got them */
	tp_proc_save_signals();
	tp_log_set_callback(log_to_stderr);
	opterr = 0; /* the commands say what is wrong in one line: tp_cli_bad_option() */
	if (!name) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(name, "--version") || !strcmp(name, "version")) {
		printf("tracepad %s\n", TP_VERSION);
		return 0;
	}
	if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(name, "help")) {
		if (argc > 2) {
			char *args[] = {argv[2], "--help", NULL};

			cmd = find_command(argv[2]);
			if (!cmd) {
				tp_cli_error("help", "unknown command '%s'", argv[2]);
				return 2;
			}
			return cmd->fn(2, args);
		}
		usage(stdout);
		return 0;
	}
	cmd = find_command(name);
	if (cmd) {
		cur_cmd = name;
		return cmd->fn(argc - 1, argv + 1);
	}
	fprintf(stderr, "tracepad: unknown command '%s' (try 'tracepad help')\n", name);
	return 2;
}
