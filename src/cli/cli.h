/* Shared by the subcommands of the tracepad CLI. */
#ifndef TP_CLI_CLI_H
#define TP_CLI_CLI_H

#include <signal.h>
#include <stdbool.h>

/* Set by SIGTERM/SIGHUP (and SIGINT when attached to a running process): detach and stop. */
extern volatile sig_atomic_t tp_cli_interrupted;
/* SIGINT also stops tracepad (attach mode); when launching, the program gets it alone. */
void tp_cli_catch_signals(bool sigint_stops);

/* Print "tracepad CMD: message" on stderr. */
void tp_cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A getopt error (getopt prints nothing: opterr is 0) as one line, "tracepad CMD: unknown
 * option '--x' (see 'tracepad CMD --help')" or "... option '-p' needs a value ...", for the
 * option string @optstring.  Returns the exit status, 2. */
int tp_cli_bad_option(const char *cmd, char *const *argv, const char *optstring);

/* Path of libtracepad-agent.so next to this executable (build tree or install prefix), or
 * NULL; TRACEPAD_AGENT overrides. */
const char *tp_cli_agent_path(void);

int cmd_calls(int argc, char **argv);
int cmd_count(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_markers(int argc, char **argv);

#endif
