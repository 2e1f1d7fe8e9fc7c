/* Reading /proc/PID/maps on the tracer side (see procfs.h); the line parser is in
 * procfs-line.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/procfs.h"

int tp_maps_foreach(pid_t pid, tp_maps_fn fn, void *arg)
{
	char fname[64], *line = NULL;
	struct tp_maps_ent e;
	size_t cap = 0;
	ssize_t len;
	FILE *f;
	int r = 0;

	if (pid)
		snprintf(fname, sizeof(fname), "/proc/%d/maps", (int)pid);
	else
		snprintf(fname, sizeof(fname), "/proc/self/maps");
	f = fopen(fname, "re");
	if (!f)
		return -errno;
	while (!r && (len = getline(&line, &cap, f)) > 0) {
		if (tp_maps_parse_line(line, (size_t)len, &e))
			continue;
		line[e.path - line + e.path_len] = 0;
		r = fn(arg, &e);
	}
	free(line);
	fclose(f);
	return r;
}
