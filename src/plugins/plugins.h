/* The plugin registry (registry.c): `tracepad calls --plugin NAME[:ARGS]` loads a built-in
 * plugin or a shared object through it, and the engine hands its events to the registry,
 * which calls each plugin.  Plugins follow <tracepad/plugin.h>. */
#ifndef TP_PLUGINS_PLUGINS_H
#define TP_PLUGINS_PLUGINS_H

#include "tracepad/plugin.h"

/* The plugins loaded for one host. */
struct tp_plugins;

/* @host must outlive the registry.  NULL with errno on failure. */
struct tp_plugins *tp_plugins_new(const struct tracepad_host *host);
/* Calls each plugin's fini(), unloads them and frees; @ps may be NULL. */
void tp_plugins_free(struct tp_plugins *ps);
/* Load plugin @spec: "NAME[:ARGS]", NAME a built-in plugin or a path to a shared object
 * exporting tracepad_plugin_init().  Says why through tp_log on failure.  Returns 0,
 * -ENOENT (unknown, or not a plugin), -ENOMEM, or the plugin's init error. */
int tp_plugins_load(struct tp_plugins *ps, const char *spec);
int tp_plugins_count(const struct tp_plugins *ps);

/* The host's events, handed to every plugin that has the callback (@ps may be NULL). */
void tp_plugins_call(struct tp_plugins *ps, struct tracepad_call *c);
void tp_plugins_ret(struct tp_plugins *ps, struct tracepad_call *c);
void tp_plugins_process(struct tp_plugins *ps, int pid, enum tracepad_proc_event ev);
void tp_plugins_thread(struct tp_plugins *ps, int pid, int tid, enum tracepad_thread_event ev);

/* Built-in plugins. */

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
