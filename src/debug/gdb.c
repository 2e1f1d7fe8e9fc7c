/* Starting gdb for `tracepad debug`: the interposer preloaded, the program loaded with its
 * arguments, and one setting the interposer relies on: gdb steps over breakpoints in place
 * (displaced stepping copies instructions to the program's entry point, where the cache
 * would run its old translation). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/paths.h"
#include "debug/debug.h"

const char *tp_debug_interposer_path(const char *agent)
{
	static char path[PATH_MAX];

	return tp_path_beside(agent, "TRACEPAD_INTERPOSE", "debug", "libtracepad-interpose.so",
			      path, sizeof(path));
}

static const char *const settings[] = {
    "-iex",
    "set displaced-stepping off",
};

int tp_debug_exec_gdb(const struct tp_debug_opts *o, char *err, size_t errlen)
{
	const char *old = getenv("LD_PRELOAD"), *gdb = o->gdb;
	size_t ng = 0, np = 0, n = 0;
	char *preload, **argv;
	int e;

	while (o->gdb_args && o->gdb_args[ng])
		ng++;
	while (o->argv[np])
		np++;
	argv = calloc(ng + np + 8, sizeof(*argv));
	if (!argv || asprintf(&preload, "%s%s%s", o->interposer, old && *old ? ":" : "",
			      old && *old ? old : "") < 0) {
		free(argv);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (!gdb || !*gdb)
		gdb = "gdb";
	argv[n++] = (char *)gdb;
	for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
		argv[n++] = (char *)settings[i];
	for (size_t i = 0; i < ng; i++)
		argv[n++] = o->gdb_args[i];
	argv[n++] = "--args";
	for (size_t i = 0; i < np; i++)
		argv[n++] = o->argv[i];
	if (setenv(TP_DEBUG_ENV_PRELOAD, old ? old : "", 1) ||
	    setenv(TP_DEBUG_ENV_RT, o->runtime, 1) || setenv("LD_PRELOAD", preload, 1) ||
	    (o->report && setenv(TP_DEBUG_ENV_REPORT, o->report, 1))) {
		e = -errno;
		snprintf(err, errlen, "cannot set the environment: %s", strerror(-e));
		goto out;
	}
	execvp(gdb, argv);
	e = -errno;
	snprintf(err, errlen, "cannot run %s: %s", gdb, strerror(-e));
out:
	free(preload);
	free(argv);
	return e;
}
