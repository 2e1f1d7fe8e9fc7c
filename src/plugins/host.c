/* Host services every plugin gets that need nothing of the calls engine: the mappings of a
 * traced process, through the one /proc/PID/maps parser. */
#include <stdio.h>
#include <string.h>

#include "base/procfs.h"
#include "plugins/plugins.h"

struct host_maps {
	int (*fn)(void *arg, const struct tracepad_map *m);
	void *arg;
};

static int host_map(void *arg, const struct tp_maps_ent *e)
{
	struct host_maps *hm = arg;
	struct tracepad_map m = {.start = e->start, .end = e->end, .offset = e->offset};
	char path[4096 + 16];

	memcpy(m.perms, e->perms, sizeof(m.perms));
	/* The path as the kernel shows it: "/dev/zero (deleted)" is shared anonymous memory. */
	if (e->deleted) {
		snprintf(path, sizeof(path), "%s (deleted)", e->path);
		m.path = path;
	} else {
		m.path = e->path;
	}
	return hm->fn(hm->arg, &m);
}

int tp_plugin_host_maps(void *ctx, int pid, int (*fn)(void *arg, const struct tracepad_map *m),
			void *arg)
{
	struct host_maps hm = {fn, arg};

	return tp_maps_foreach(pid, host_map, &hm);
}
