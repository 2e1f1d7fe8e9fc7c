/* The binary form of a marker event, for the trace store's rings (markers.c writes it under
 * `tracepad markers record`): a u32 format id (its index in the control table, ctl.h), then
 * each argument in the trace store's payload layout (little-endian, unaligned; strings
 * NUL-terminated).  The field rules are inline so that tracepad (src/cli/cmd-markers.c, with
 * TP_NO_SITE_REGISTRATION) builds the same classes as the runtime. */
#ifndef TP_MARKERS_RECORD_H
#define TP_MARKERS_RECORD_H

#include <tracepad/tracepoint.h>

#include "trace/trace.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/types.h>

/* Longest string argument kept in a record (the rest is cut). */
#define TP_MARKERS_STR_MAX 256
/* Field names of a record: "fmt", then "a0".."a7". */
#define TP_MARKERS_MAX_FIELDS (1 + TP_MAX_ARGS)

/* Bytes of a non-string argument in a record, 0 for a string or an unknown code. */
static inline int tp_markers_arg_bytes(char t)
{
	switch (t) {
	case TP_ARG_I8:
	case TP_ARG_U8:
		return 1;
	case TP_ARG_I16:
	case TP_ARG_U16:
		return 2;
	case TP_ARG_I32:
	case TP_ARG_U32:
		return 4;
	case TP_ARG_I64:
	case TP_ARG_U64:
	case TP_ARG_PTR:
	case TP_ARG_DOUBLE:
		return 8;
	default:
		return 0;
	}
}

/* The event class fields of the records of sites with argument types @types (TP_ARG_*
 * codes), for tp_trace_schema_add(): "fmt" u32, then integers by size and sign, pointers as
 * hex u64, doubles as 64-bit floats, strings as strings.  Returns the number of fields or
 * -EINVAL (unknown code, more than TP_MAX_ARGS arguments). */
static inline int tp_markers_fields_of(const char *types,
				       struct tp_trace_field_desc out[TP_MARKERS_MAX_FIELDS])
{
	static const char *const names[TP_MAX_ARGS] = {"a0", "a1", "a2", "a3",
						       "a4", "a5", "a6", "a7"};
	size_t n = strlen(types);

	if (n > TP_MAX_ARGS)
		return -EINVAL;
	memset(out, 0, sizeof(out[0]) * (n + 1));
	out[0].name = "fmt";
	out[0].type = TP_TRACE_INT;
	out[0].bits = 32;
	for (size_t i = 0; i < n; i++) {
		struct tp_trace_field_desc *f = &out[i + 1];
		char t = types[i];

		f->name = names[i];
		if (t == TP_ARG_STR) {
			f->type = TP_TRACE_STRING;
		} else if (t == TP_ARG_DOUBLE) {
			f->type = TP_TRACE_FLOAT;
			f->bits = 64;
		} else if (tp_markers_arg_bytes(t)) {
			f->type = TP_TRACE_INT;
			f->bits = (uint8_t)(tp_markers_arg_bytes(t) * 8);
			f->is_signed = t >= 'a' && t != TP_ARG_PTR;
			f->base = t == TP_ARG_PTR ? 16 : 10;
		} else {
			return -EINVAL;
		}
	}
	return (int)n + 1;
}

/* Field names from a format's words: the name of a conversion is the word just before it
 * followed by '=' or ':' ("bytes=%d from=%s", "len: %zu"), else none (the field stays aN).
 * Kept only as CTF names that cannot clash: letters, digits and '_' (not first a digit), at
 * most TP_MARKERS_NAME_MAX - 1 bytes, not "fmt", not aN, not a TSDL keyword, not twice. */
#define TP_MARKERS_NAME_MAX 32

static inline bool tp_markers_ident_char(char c)
{
	return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
	       (c >= 'A' && c <= 'Z');
}

/* Is @w (@n bytes) a name a field may take? */
static inline bool tp_markers_name_ok(const char *w, size_t n)
{
	static const char *const kw[] = {
	    "align",   "callsite", "const",	     "char",   "clock",	  "double",   "enum",
	    "env",     "event",	   "floating_point", "float",  "integer", "int",      "long",
	    "short",   "signed",   "stream",	     "string", "struct",  "trace",    "typealias",
	    "typedef", "unsigned", "variant",	     "void",   "_Bool",	  "_Complex", "_Imaginary",
	    "fmt",     "id",	   "timestamp"};
	bool digits = n > 1;

	if (!n || n >= TP_MARKERS_NAME_MAX || (w[0] >= '0' && w[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!tp_markers_ident_char(w[i]))
			return false;
		if (i && !(w[i] >= '0' && w[i] <= '9'))
			digits = false;
	}
	if (w[0] == 'a' && digits)
		return false; /* aN: the name of an unnamed field */
	for (size_t i = 0; i < sizeof(kw) / sizeof(kw[0]); i++)
		if (strlen(kw[i]) == n && !memcmp(kw[i], w, n))
			return false;
	return true;
}

/* The names of the @nargs conversions of @fmt as "NAME,,NAME" (an empty entry: unnamed) into
 * @out (@cap bytes); "" when no conversion is named, or when the conversions are not
 * @nargs ('*' widths included).  Async-signal-safe: it runs in the program. */
static inline void tp_markers_names_of(const char *fmt, size_t nargs, char *out, size_t cap)
{
	size_t k = 0, pos = 0;
	bool any = false;

	if (cap)
		out[0] = 0;
	for (const char *p = fmt; p && *p; p++) {
		const char *b = p, *e;

		if (*p != '%')
			continue;
		if (p[1] == '%') {
			p++;
			continue;
		}
		/* The word before: spaces, '=' or ':', spaces, the word. */
		while (b > fmt && b[-1] == ' ')
			b--;
		e = b;
		if (b > fmt && (b[-1] == '=' || b[-1] == ':')) {
			b--;
			while (b > fmt && b[-1] == ' ')
				b--;
			e = b;
			while (b > fmt && tp_markers_ident_char(b[-1]))
				b--;
		}
		if (k && pos + 1 < cap)
			out[pos++] = ',';
		if (b < e && tp_markers_name_ok(b, (size_t)(e - b))) {
			/* Not twice: a later one of the same name stays unnamed. */
			bool dup = false;

			for (size_t i = 0, start = 0; i <= pos && !dup; i++)
				if (i == pos || out[i] == ',') {
					dup = i - start == (size_t)(e - b) &&
					      !memcmp(out + start, b, (size_t)(e - b));
					start = i + 1;
				}
			if (!dup && pos + (size_t)(e - b) + 1 < cap) {
				memcpy(out + pos, b, (size_t)(e - b));
				pos += (size_t)(e - b);
				any = true;
			}
		}
		k++;
		/* Past the conversion: flags, width, precision, length, then its letter. */
		for (p++; *p && !((*p >= 'a' && *p <= 'z' && !strchr("hlqjzt", *p)) ||
				  (*p >= 'A' && *p <= 'Z' && *p != 'L'));
		     p++)
			if (*p == '*')
				k = nargs + 1; /* an argument of its own: not followed */
		if (!*p)
			break;
	}
	if (cap && (!any || k != nargs))
		out[0] = 0;
	else if (cap)
		out[pos < cap ? pos : cap - 1] = 0;
}

/* Name the fields @f (from tp_markers_fields_of, @nf of them with "fmt") after @names (as
 * tp_markers_names_of writes it; untrusted: what does not fit the rules is left out), with
 * @buf holding the names. */
static inline void tp_markers_name_fields(struct tp_trace_field_desc *f, int nf, const char *names,
					  char buf[TP_MAX_ARGS][TP_MARKERS_NAME_MAX])
{
	const char *p = names;

	for (int i = 1; i < nf && p && *p != 0; i++) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		bool dup = false;

		for (int j = 1; j < nf && !dup; j++)
			dup = j != i && strlen(f[j].name) == n && !memcmp(f[j].name, p, n);
		if (tp_markers_name_ok(p, n) && !dup) {
			memcpy(buf[i - 1], p, n);
			buf[i - 1][n] = 0;
			f[i].name = buf[i - 1];
		}
		p = e ? e + 1 : NULL;
	}
}

/* An event's arguments with every string copied safely out of the program: NULL becomes
 * "(null)", a pointer that cannot be read "(bad pointer)" (never a fault), a longer string is
 * cut at TP_MARKERS_STR_MAX.  Returns @args itself when the site has no string argument,
 * else @tmp->args. */
struct tp_markers_safe_args {
	union tp_arg args[TP_MAX_ARGS];
	char str[TP_MAX_ARGS][TP_MARKERS_STR_MAX + 1];
};
const union tp_arg *tp_markers_safe_args(const struct tp_site_desc *desc, const union tp_arg *args,
					 struct tp_markers_safe_args *tmp);

/* The same for a site. */
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
