/* tracepad: one command, one subcommand per job (src/cli/cmd-*.c). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/log.h"

#ifndef TP_AGENT_RELDIR
#define TP_AGENT_RELDIR "../lib/tracepad"
#endif

volatile sig_atomic_t tp_cli_interrupted;
static bool sigint_stops;

static void on_signal(int sig)
{
	if (sig != SIGINT || sigint_stops)
		tp_cli_interrupted = 1;
}

void tp_cli_catch_signals(bool stops)
{
	struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: waits return EINTR */

	sigint_stops = stops;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
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

static void log_to_stderr(enum tp_log_level level, const char *fmt, va_list ap)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};

	if (level > TP_LOG_WARN && !getenv("TRACEPAD_DEBUG"))
		return;
	fprintf(stderr, "tracepad: %s: ", names[level]);
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

static void usage(FILE *f)
{
	fputs("usage: tracepad COMMAND [OPTIONS] [-- PROGRAM [ARGS]]\n"
	      "\n"
	      "Commands:\n"
	      "  count    count every executed instruction of a program or of a region of it\n"
	      "  dump     print the events of a trace, one a line\n"
	      "  report   summarise a trace: events per class, discarded events, time span\n"
	      "  export   convert a trace to Chrome trace-event JSON or folded stacks\n"
	      "  help     show this help, or `tracepad help COMMAND` for one command\n"
	      "\n"
	      "Options: --version, --help.  See tracepad(1) and tracepad-COMMAND(1).\n",
	      f);
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	tp_log_set_callback(log_to_stderr);
	if (!cmd) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
		printf("tracepad %s\n", TP_VERSION);
		return 0;
	}
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "help")) {
		if (argc > 2 && !strcmp(argv[2], "count")) {
			char *args[] = {argv[2], "--help", NULL};

			return cmd_count(2, args);
		}
		if (argc > 2 && (!strcmp(argv[2], "dump") || !strcmp(argv[2], "report") ||
				 !strcmp(argv[2], "export"))) {
			char *args[] = {argv[2], "--help", NULL};

			return argv[2][0] == 'd'   ? cmd_dump(2, args)
			       : argv[2][0] == 'r' ? cmd_report(2, args)
						   : cmd_export(2, args);
		}
		if (argc > 2) {
			tp_cli_error("help", "unknown command '%s'", argv[2]);
			return 2;
		}
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "count"))
		return cmd_count(argc - 1, argv + 1);
	if (!strcmp(cmd, "dump"))
		return cmd_dump(argc - 1, argv + 1);
	if (!strcmp(cmd, "report"))
		return cmd_report(argc - 1, argv + 1);
	if (!strcmp(cmd, "export"))
		return cmd_export(argc - 1, argv + 1);
	fprintf(stderr, "tracepad: unknown command '%s' (try 'tracepad help')\n", cmd);
	return 2;
}
