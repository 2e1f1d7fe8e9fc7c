/* Shared by the subcommands of the tracepad CLI. */
#ifndef TP_CLI_CLI_H
#define TP_CLI_CLI_H

#include <signal.h>
#include <stdbool.h>

/* The signal that asked tracepad to stop (SIGINT, SIGTERM, SIGHUP, SIGPIPE; SIGALRM for
 * tp_cli_stop_after()), 0 until then: detach, report and exit, launched programs left to
 * run to their own end. */
extern volatile sig_atomic_t tp_cli_interrupted;
/* Catch those signals, then split tracepad in two (tp_cli_keeper_start): what follows runs
 * in the tracer process.  Every command that traces calls it before it starts. */
void tp_cli_catch_signals(void);
/* keeper.c: fork; the parent (the process the user started) only forwards the signals above
 * to the child and exits as it does, and never returns; the child returns, with
 * PR_SET_PDEATHSIG set to SIGTERM, so that a SIGKILL of the parent ends tracing cleanly. */
void tp_cli_keeper_start(void);
/* --duration for commands whose engine has no clock of its own: SIGALRM after @seconds sets
 * tp_cli_interrupted. */
void tp_cli_stop_after(double seconds);

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
int cmd_debug(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_markers(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_frames(int argc, char **argv);

#endif
