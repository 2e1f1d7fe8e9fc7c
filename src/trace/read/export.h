/* tracepad export's converter: events of a trace in, Chrome trace-event JSON or folded
 * stacks out (src/trace/read/export.c). */
#ifndef TP_TRACE_EXPORT_H
#define TP_TRACE_EXPORT_H

#include <stdint.h>
#include <stdio.h>

#include "trace/trace.h"

struct tp_symtab;
struct tp_export;

enum tp_export_format {
	TP_EXPORT_CHROME, /* written to @out as the events come */
	TP_EXPORT_FOLDED, /* written at the end (tp_export_folded) */
};

/* @syms names addresses (may be NULL); @out: the Chrome JSON's stream (its header is written
 * here), NULL for folded stacks.  NULL on no memory. */
struct tp_export *tp_export_new(enum tp_export_format fmt, struct tp_symtab *syms, FILE *out);
void tp_export_free(struct tp_export *e);
/* The next event of the trace, in time order.  0, or -ENOMEM (the export is then useless). */
int tp_export_event(struct tp_export *e, const struct tp_trace_event *ev);
/* The trace ended: calls still open end with their thread's last event.  0 or -ENOMEM. */
int tp_export_finish(struct tp_export *e);
/* Calls paired so far. */
uint64_t tp_export_calls(const struct tp_export *e);
/* The end of the Chrome JSON, with what the export saw of trace @dir. */
void tp_export_chrome_end(struct tp_export *e, const char *dir, uint64_t discarded);
/* Folded stacks with their self time in ns, sorted, to @out.  0 or -ENOMEM. */
int tp_export_folded(struct tp_export *e, FILE *out);

#endif
