/* Plugins built into tracepad: `tracepad calls --plugin NAME` finds their init functions here.
 * Each has the signature of tracepad_plugin_init() from <tracepad/plugin.h>. */
#ifndef TP_PLUGINS_PLUGINS_H
#define TP_PLUGINS_PLUGINS_H

#include "tracepad/plugin.h"

/* `memory`: follows libc's allocator and, when a process exits, reports the blocks still
 * allocated as memcheck classifies them.  @args: NULL, or a comma-separated list of
 * "depth=N" (frames of each allocation backtrace, 12 by default, 0 for none) and "summary"
 * (only the totals).  Returns 0, -EINVAL (bad @args or host ABI) or the error of select(). */
int tp_plugin_memory_init(const struct tracepad_host *host, const char *args,
			  struct tracepad_plugin *plugin);

/* The host's maps() for every plugin (<tracepad/plugin.h>), over src/base's maps parser;
 * @ctx is unused. */
int tp_plugin_host_maps(void *ctx, int pid, int (*fn)(void *arg, const struct tracepad_map *m),
			void *arg);

#endif
