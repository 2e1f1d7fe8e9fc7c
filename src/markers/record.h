/* The binary form of a marker event, for the trace store's rings (markers.c writes it under
 * `tracepad markers record`): a u32 format id (FNV-1a of the format string), then each argument in
 * the trace store's payload layout (little-endian, unaligned; strings NUL-terminated). */
#ifndef TP_MARKERS_RECORD_H
#define TP_MARKERS_RECORD_H

#include <tracepad/tracepoint.h>

#include "trace/trace.h"

#include <sys/types.h>

/* Longest string argument kept in a record (the rest is cut). */
#define TP_MARKERS_STR_MAX 256
/* Field names of a record: "fmt", then "a0".."a7" ("aN_f64bits" for a double). */
#define TP_MARKERS_MAX_FIELDS (1 + TP_MAX_ARGS)

/* The event class fields of a site's records, for tp_trace_schema_add().  Doubles are
 * carried as their IEEE-754 bits in a 64-bit hex integer named "aN_f64bits" (the trace store
 * has no float field yet).  `tracepad markers record` (src/cli/cmd-markers.c) repeats these
 * rules.  Returns the number of fields or -EINVAL for an unknown type code. */
int tp_markers_fields(const struct tp_site_desc *desc,
		      struct tp_trace_field_desc out[TP_MARKERS_MAX_FIELDS]);

/* Payload size of an event: the room tp_markers_encode needs. */
size_t tp_markers_record_size(const struct tp_site_desc *desc, const union tp_arg *args);

/* Encode an event; returns its size, or -ENOSPC if @cap is too small. */
ssize_t tp_markers_encode(const struct tp_site_desc *desc, uint32_t fmt_id,
			  const union tp_arg *args, uint8_t *buf, size_t cap);

/* Decode a record back into arguments (string arguments point into @buf) for
 * tp_markers_format; returns 0 or -EINVAL when the record is short or malformed. */
int tp_markers_decode(const struct tp_site_desc *desc, const uint8_t *buf, size_t len,
		      uint32_t *fmt_id, union tp_arg args[TP_MAX_ARGS]);

#endif
