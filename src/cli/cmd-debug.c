/* tracepad debug: run gdb on a program that runs in the code cache (the interposer in gdb
 * hides the cache: src/debug).  Only parses its arguments and execs gdb. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "dbt/dbt.h"
#include "debug/debug.h"

static const char usage_text[] =
    "usage: tracepad debug [--tool count] [-o FILE] [GDB-ARGS] -- PROGRAM [ARGS]\n"
    "\n"
    "Debug PROGRAM with gdb while it runs in tracepad's code cache (as under\n"
    "`tracepad count --engine dbt`): `run`, breakpoints, stepping, registers and memory\n"
    "behave as in a plain gdb.  GDB-ARGS go to gdb before the program (-batch, -x FILE,\n"
    "-ex CMD, ...).\n"
    "\n"
    "  --tool count    the client that runs with the program (the only one: the default)\n"
    "  -o FILE         append the count at each exit of the program to FILE instead of\n"
    "                  gdb's stderr\n"
    "  -h, --help      show this help\n"
    "\n"
    "Environment: TRACEPAD_GDB, the gdb to run (default: gdb in PATH).\n";

int cmd_debug(int argc, char **argv)
{
	struct tp_debug_opts o = {0};
	char **gdb_args = calloc((size_t)argc + 1, sizeof(*gdb_args));
	const char *agent = tp_cli_agent_path();
	char err[512];
	int i, dash, n = 0, status = 2;

	if (!gdb_args)
		return 1;
	for (dash = 1; dash < argc && strcmp(argv[dash], "--"); dash++)
		;
	/* tracepad's options, anywhere before "--"; the others are gdb's (without "--" there is
	 * no program: an option tracepad does not know is the error to report) */
	for (i = 1; i < dash; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage_text, stdout);
			status = 0;
			goto out;
		}
		if (!strcmp(a, "--tool") || !strcmp(a, "-o")) {
			if (i + 1 >= dash) {
				tp_cli_error(
				    "debug",
				    "option '%s' needs a value (see 'tracepad debug --help')", a);
				goto out;
			}
			if (a[1] == 'o')
				o.report = argv[++i];
			else if (strcmp(argv[++i], "count")) {
				tp_cli_error("debug", "--tool: '%s' is not a tool (count)",
					     argv[i]);
				goto out;
			}
			continue;
		}
		if (dash == argc && a[0] == '-') {
			tp_cli_error("debug", "unknown option '%s' (see 'tracepad debug --help')",
				     a);
			goto out;
		}
		gdb_args[n++] = argv[i];
	}
	i = dash;
	if (i + 1 >= argc) {
		tp_cli_error("debug", "no program to debug (tracepad debug -- PROGRAM)");
		goto out;
	}
	o.gdb_args = gdb_args;
	o.argv = argv + i + 1;
	o.gdb = getenv("TRACEPAD_GDB");
	o.interposer = tp_debug_interposer_path(agent);
	o.runtime = tp_dbt_runtime_path(agent);
	status = 1;
	if (!o.interposer || !o.runtime) {
		tp_cli_error("debug", "cannot find %s next to the agent",
			     o.interposer ? "tracepad-dbt-rt.so" : "libtracepad-interpose.so");
		goto out;
	}
	tp_debug_exec_gdb(&o, err, sizeof(err));
	tp_cli_error("debug", "%s", err);
	status = 127;
out:
	free(gdb_args);
	return status;
}
