/* The summary of a trace that tracepad report prints: events per class (most frequent
 * first), discarded events per stream and in total, the time span (src/trace/read/summary.c). */
#ifndef TP_TRACE_SUMMARY_H
#define TP_TRACE_SUMMARY_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"
#include "trace/trace.h"

struct tp_trace_summary_stream {
	char *file;
	uint64_t events, discarded;
};

struct tp_trace_summary_class {
	uint32_t id;
	char *name;
	uint64_t count;
};

struct tp_trace_summary {
	const char *dir;
	struct tp_trace_summary_stream *st; /* in tp_trace_reader_open's order */
	size_t nr_st;
	struct tp_trace_summary_class *cls; /* sorted by count, then name */
	size_t nr_cls, cap_cls;
	struct tp_hash cls_index; /* class id -> its index in cls, while reading */
	uint64_t events, discarded, first, last;
	char error[PATH_MAX + 256]; /* one line, when a function below fails */
};

/* Read each stream of trace @dir alone (it had @nr_streams when opened whole: another number
 * means the files changed).  0, or -errno with rp->error set: -ENOMEM, or another for a
 * trace that cannot be read. */
int tp_trace_summary_read(struct tp_trace_summary *rp, const char *dir, size_t nr_streams);
void tp_trace_summary_fini(struct tp_trace_summary *rp);
/* Events per second over the time span; 0 without one. */
double tp_trace_summary_rate(const struct tp_trace_summary *rp);

#endif
