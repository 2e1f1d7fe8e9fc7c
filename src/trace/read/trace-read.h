/* What the trace readers (tracepad dump, report, export) share: the side files of a trace
 * directory (`.maps` to resolve addresses, `.formats` for static tracepoints' text) and the
 * text and JSON forms of timestamps and field values. */
#ifndef TP_TRACE_READ_H
#define TP_TRACE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trace/trace.h"

struct tp_symtab;

/* Executable mappings of the traced programs, written by producers next to the streams.  A
 * hidden name, because babeltrace2 and our reader take every other regular file of a trace
 * directory for a stream. */
#define TP_TRACE_MAPS_FILE ".maps"
/* The format strings of static tracepoints, by the "fmt" field of their events, written by
 * `tracepad markers record`: "ID\tCLASS\tTYPES\tFORMAT" lines (C escapes in FORMAT). */
#define TP_TRACE_FORMATS_FILE ".formats"

struct tp_trace_formats;

/* Malformed lines of a side file, skipped: how many, and the number of the first. */
struct tp_trace_bad_lines {
	unsigned long count, first;
};

/* Load @path as a maps file into a new symbol table; NULL when absent or empty.  Malformed
 * lines are skipped and counted in *@bad. */
struct tp_symtab *tp_trace_maps_load(const char *path, struct tp_trace_bad_lines *bad);

/* Load @path as a formats file; NULL when absent or empty.  Malformed lines are skipped and
 * counted in *@bad. */
struct tp_trace_formats *tp_trace_formats_load(const char *path, struct tp_trace_bad_lines *bad);
void tp_trace_formats_free(struct tp_trace_formats *f);
/* The text of a static tracepoint's event: the format its "fmt" field names applied to its
 * typed a0.. fields.  Returns the length (snprintf-like), or -ENOENT when the event is not
 * one, its format is unknown or its fields do not fit the format's argument types. */
int tp_trace_marker_text(const struct tp_trace_formats *f, const struct tp_trace_event *ev,
			 char *buf, size_t len);

/* Does this integer field hold a code address (pc, ip, addr, *_addr)? */
bool tp_trace_is_addr_field(const char *name);
/* "object:function+0xoff" (object without its directory), or "object+0xoff" when no symbol
 * covers @addr; -ENOENT when no mapping does. */
int tp_trace_resolve_addr(struct tp_symtab *syms, uint64_t addr, char *buf, size_t len);
/* A slice or frame name: "function", "function+0xoff", "object+0xoff", else "0x..". */
void tp_trace_func_name(struct tp_symtab *syms, uint64_t addr, char *buf, size_t len);

/* "YYYY-MM-DD HH:MM:SS.nnnnnnnnn", local time, from ns since the epoch. */
void tp_trace_fmt_time(uint64_t ns, char *buf, size_t len);
/* "S.nnnnnnnnn" */
void tp_trace_fmt_secs(uint64_t ns, char *buf, size_t len);

/* A length field that only says how long the next (sequence) field is: not shown. */
bool tp_trace_field_hidden(const struct tp_trace_event *ev, uint32_t i);
/* An integer in its display base: decimal, or 0x.. of its bits for base 16. */
void tp_trace_print_int(FILE *f, const struct tp_trace_field *fld, uint64_t v);
/* A double as the shortest decimal text that reads back as the same value ("0.5", "500", "1e+100",
 * "nan", "-inf"). */
void tp_trace_print_float(FILE *f, double v);
/* A name from the trace (event class, field, stream file, function) as text: control
 * characters and bytes that are not UTF-8 as \xHH; for folded stacks, the separators ';' and
 * blanks as '_' and bad bytes as '?'. */
void tp_trace_print_name(FILE *f, const char *s, bool folded);
/* A string as text: quoted, with C escapes for what a terminal would interpret. */
void tp_trace_print_text(FILE *f, const char *s, size_t len);
/* A field's value as text: integers in their base, strings quoted, bytes as <hex>,
 * arrays as [a, b]. */
void tp_trace_print_value(FILE *f, const struct tp_trace_field *fld);
/* A field's value as JSON: numbers, strings, bytes as a hex string, arrays. */
void tp_trace_print_json(FILE *f, const struct tp_trace_field *fld);

#endif
