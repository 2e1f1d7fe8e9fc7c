/* Shared by the trace readers of the CLI (dump, report, export): opening a trace directory
 * with one-line errors, the `.maps` file that lets addresses be resolved, and the text and
 * JSON forms of timestamps and field values. */
#ifndef TP_CLI_TRACE_READ_H
#define TP_CLI_TRACE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trace/trace.h"

struct tp_symtab;

/* Executable mappings of the traced programs, written by producers next to the streams.  A
 * hidden name, because babeltrace2 and our reader take every other regular file of a trace
 * directory for a stream. */
#define TP_CLI_MAPS_FILE ".maps"
/* The format strings of static tracepoints, by the "fmt" field of their events, written by
 * `tracepad markers record`: "ID\tCLASS\tTYPES\tFORMAT" lines (C escapes in FORMAT). */
#define TP_CLI_FORMATS_FILE ".formats"

struct tp_cli_formats;

struct tp_cli_trace {
	const char *cmd; /* for error messages: "tracepad CMD: ..." */
	const char *dir;
	struct tp_trace_reader *r;
	struct tp_symtab *syms;		/* from DIR/.maps; NULL when the trace has none */
	struct tp_cli_formats *formats; /* from DIR/.formats; NULL when the trace has none */
	uint64_t nr_events;		/* returned so far */
	bool salvage;			/* a corrupt stream ends alone: the others are still read */
	bool corrupt;			/* a stream was corrupt (said on stderr) */
};

/* Open the trace DIR (and its .maps with @want_maps).  Returns 0, or prints one line and
 * returns the exit status: 2 for bad input, 1 for a failure of ours. */
int tp_cli_trace_open(struct tp_cli_trace *t, const char *cmd, const char *dir, bool want_maps);
/* tp_trace_reader_next; on a malformed stream, prints one line naming the stream and the
 * offset, and returns -1 at once, or with t->salvage set, after the other streams' events. */
int tp_cli_trace_next(struct tp_cli_trace *t, const struct tp_trace_event **ev);
void tp_cli_trace_close(struct tp_cli_trace *t);

/* Load @path as a maps file into a new symbol table; NULL when absent or empty.  Malformed
 * lines are skipped with a warning naming the first one. */
struct tp_symtab *tp_cli_maps_load(const char *cmd, const char *path);

/* Load @path as a formats file; NULL when absent or empty.  Malformed lines are skipped with
 * a warning naming the first one. */
struct tp_cli_formats *tp_cli_formats_load(const char *cmd, const char *path);
void tp_cli_formats_free(struct tp_cli_formats *f);
/* The text of a static tracepoint's event: the format its "fmt" field names applied to its
 * typed a0.. fields.  Returns the length (snprintf-like), or -ENOENT when the event is not
 * one, its format is unknown or its fields do not fit the format's argument types. */
int tp_cli_marker_text(const struct tp_cli_formats *f, const struct tp_trace_event *ev, char *buf,
		       size_t len);

/* Does this integer field hold a code address (pc, ip, addr, *_addr)? */
bool tp_cli_is_addr_field(const char *name);
/* "object:function+0xoff" (object without its directory), or "object+0xoff" when no symbol
 * covers @addr; -ENOENT when no mapping does. */
int tp_cli_resolve(struct tp_symtab *syms, uint64_t addr, char *buf, size_t len);
/* A slice or frame name: "function", "function+0xoff", "object+0xoff", else "0x..". */
void tp_cli_func_name(struct tp_symtab *syms, uint64_t addr, char *buf, size_t len);

/* "YYYY-MM-DD HH:MM:SS.nnnnnnnnn", local time, from ns since the epoch. */
void tp_cli_fmt_time(uint64_t ns, char *buf, size_t len);
/* "S.nnnnnnnnn" */
void tp_cli_fmt_secs(uint64_t ns, char *buf, size_t len);

/* A length field that only says how long the next (sequence) field is: not shown. */
bool tp_cli_field_hidden(const struct tp_trace_event *ev, uint32_t i);
/* An integer in its display base: decimal, or 0x.. of its bits for base 16. */
void tp_cli_put_int(FILE *f, const struct tp_trace_field *fld, uint64_t v);
/* A double as the shortest decimal text that reads back as the same value ("0.5", "500", "1e+100",
 * "nan", "-inf"). */
void tp_cli_put_float(FILE *f, double v);
/* A name from the trace (event class, field, stream file, function) as text: control
 * characters and bytes that are not UTF-8 as \xHH; for folded stacks, the separators ';' and
 * blanks as '_' and bad bytes as '?'. */
void tp_cli_put_name(FILE *f, const char *s, bool folded);
/* A string as text: quoted, with C escapes for what a terminal would interpret. */
void tp_cli_put_text(FILE *f, const char *s, size_t len);
/* A field's value as text: integers in their base, strings quoted, bytes as <hex>,
 * arrays as [a, b]. */
void tp_cli_put_value(FILE *f, const struct tp_trace_field *fld);
/* A field's value as JSON: numbers, strings, bytes as a hex string, arrays. */
void tp_cli_put_value_json(FILE *f, const struct tp_trace_field *fld);

/* stdout for NULL or "-", else the file (one-line error and NULL on failure). */
FILE *tp_cli_out_open(const char *cmd, const char *path);
/* Flush and close; 0, or 1 after a one-line error on a write error.  A file is replaced
 * only when @keep (the command succeeded) and every write did: otherwise a file that
 * existed before is left as it was. */
int tp_cli_out_close(const char *cmd, FILE *f, const char *path, bool keep);

#endif
