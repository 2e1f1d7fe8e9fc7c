/* Event filters of the trace readers: by class (globs over event names, '!' excludes), by
 * pid and tid, and by time since the trace's first event. */
#ifndef TP_CLI_FILTER_H
#define TP_CLI_FILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace/trace.h"

struct tp_cli_filter {
	char **classes; /* globs, a leading '!' excludes */
	size_t nr_classes;
	int64_t *ids; /* pids then tids */
	size_t nr_pids, nr_tids;
	uint64_t from_ns, to_ns; /* since the first event; to_ns = UINT64_MAX: no end */
	bool any;		 /* some filter was given */
};

enum tp_cli_filter_kind {
	TP_FILTER_CLASS,
	TP_FILTER_PID,
	TP_FILTER_TID,
	TP_FILTER_FROM,
	TP_FILTER_TO
};

/* Add the option's argument (comma-separated lists; seconds for FROM and TO).  0, or 2 after
 * a one-line error naming what is wrong. */
int tp_cli_filter_add(struct tp_cli_filter *f, const char *cmd, enum tp_cli_filter_kind kind,
		      const char *arg);
/* Whether @ev passes, @t0 being the time of the trace's first event. */
bool tp_cli_filter_match(const struct tp_cli_filter *f, const struct tp_trace_event *ev,
			 uint64_t t0);
void tp_cli_filter_free(struct tp_cli_filter *f);

#endif
