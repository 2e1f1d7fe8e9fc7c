/* What the trace readers share: loading a trace's .maps file into a symbol table and its
 * .formats file, and printing timestamps and field values.  Traces are untrusted input:
 * everything here copes with any value the reader hands out. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trace/read/trace-read.h"
#include "base/procfs.h"
#include "elf/symbols.h"
#include "base/text.h"

/* ---- the maps file ---- */

/* One line: "START END OFFSET PATH" (hex, 0x optional) or a line of /proc/PID/maps, whose
 * mappings count only when executable.  0 with *path set, 1 to skip, -1 if malformed. */
static int parse_map_line(char *line, uint64_t *start, uint64_t *end, uint64_t *off, char **path)
{
	size_t first;
	int pos = 0;

	while (*line == ' ' || *line == '\t')
		line++;
	if (!*line || *line == '#')
		return 1;
	first = strcspn(line, " \t");
	if (memchr(line, '-', first)) {
		struct tp_maps_ent e;

		if (tp_maps_parse_line(line, strlen(line), &e))
			return -1;
		if (!tp_maps_exec(&e))
			return 1;
		*start = e.start;
		*end = e.end;
		*off = e.offset;
		pos = (int)(e.path - line);
	} else if (sscanf(line, "%" SCNx64 " %" SCNx64 " %" SCNx64 " %n", start, end, off, &pos) <
		       3 ||
		   !pos) {
		return -1;
	}
	*path = line + pos;
	if (!**path || *start >= *end)
		return -1;
	return 0;
}

struct tp_symtab *tp_trace_maps_load(const char *path, struct tp_trace_bad_lines *bad_lines)
{
	struct tp_symtab *syms = NULL;
	char *line = NULL;
	size_t cap = 0;
	unsigned long lineno = 0, bad = 0, first_bad = 0, added = 0;
	struct stat st;
	ssize_t len;
	FILE *f;
	int fd;

	*bad_lines = (struct tp_trace_bad_lines){0};
	/* Not a FIFO or a device (a trace is untrusted: opening must not block). */
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || !(f = fdopen(fd, "r"))) {
		close(fd);
		return NULL;
	}
	syms = tp_symtab_new();
	while (syms && (len = getline(&line, &cap, f)) > 0) {
		uint64_t start, end, off;
		char *obj, *del;
		int r;

		lineno++;
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		r = parse_map_line(line, &start, &end, &off, &obj);
		if (r < 0) {
			if (!bad++)
				first_bad = lineno;
			continue;
		}
		if (r)
			continue;
		del = strstr(obj, " (deleted)");
		if (del && !del[10])
			*del = 0;
		/* Objects are opened lazily by path: nothing that could block (FIFO) or that is
		 * not an ELF file at all. */
		if (obj[0] != '[' && !stat(obj, &st) && !S_ISREG(st.st_mode)) {
			if (!bad++)
				first_bad = lineno;
			continue;
		}
		if (!tp_symtab_add_map(syms, start, end, off, obj))
			added++;
	}
	free(line);
	fclose(f);
	bad_lines->count = bad;
	bad_lines->first = first_bad;
	if (!added) {
		tp_symtab_free(syms);
		return NULL;
	}
	return syms;
}

/* ---- the formats file ---- */

#define MAX_FORMAT_ID (1u << 16)

struct fmt_entry {
	char *cls, *types, *fmt;
};

struct tp_trace_formats {
	struct fmt_entry *v; /* by id */
	uint32_t n;
};

void tp_trace_formats_free(struct tp_trace_formats *f)
{
	if (!f)
		return;
	for (uint32_t i = 0; i < f->n; i++) {
		free(f->v[i].cls);
		free(f->v[i].types);
		free(f->v[i].fmt);
	}
	free(f->v);
	free(f);
}

/* Undo the escapes of the writer (src/markers, tracer side) in place; false on a bad escape. */
static bool unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (*s != '\\') {
			*o++ = *s;
			continue;
		}
		s++;
		if (*s == '\\')
			*o++ = '\\';
		else if (*s == 't')
			*o++ = '\t';
		else if (*s == 'n')
			*o++ = '\n';
		else if (*s == 'x' && isxdigit((unsigned char)s[1]) &&
			 isxdigit((unsigned char)s[2])) {
			char hex[3] = {s[1], s[2], 0};
			*o++ = (char)strtoul(hex, NULL, 16);
			s += 2;
			if (!o[-1])
				return false;
		} else
			return false;
	}
	*o = 0;
	return true;
}

/* "ID\tCLASS\tTYPES\tFORMAT": 0, 1 to skip, -1 if malformed. */
static int parse_format_line(char *line, uint32_t *id, char **cls, char **types, char **fmt)
{
	char *end, *t1, *t2, *t3;
	unsigned long v;

	if (!*line || *line == '#')
		return 1;
	if (!(t1 = strchr(line, '\t')) || !(t2 = strchr(t1 + 1, '\t')) ||
	    !(t3 = strchr(t2 + 1, '\t')))
		return -1;
	*t1 = *t2 = *t3 = 0;
	errno = 0;
	v = strtoul(line, &end, 10);
	if (*end || end == line || errno || v >= MAX_FORMAT_ID || !t1[1] || strlen(t2 + 1) > 8 ||
	    strspn(t2 + 1, "bhilBHILpds") != strlen(t2 + 1) || !unescape(t3 + 1))
		return -1;
	*id = (uint32_t)v;
	*cls = t1 + 1;
	*types = t2 + 1;
	*fmt = t3 + 1;
	return 0;
}

struct tp_trace_formats *tp_trace_formats_load(const char *path,
					       struct tp_trace_bad_lines *bad_lines)
{
	struct tp_trace_formats *fs = NULL;
	unsigned long lineno = 0, bad = 0, first_bad = 0;
	char *line = NULL;
	size_t cap = 0;
	struct stat st;
	ssize_t len;
	FILE *f;
	int fd;

	*bad_lines = (struct tp_trace_bad_lines){0};
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || !(f = fdopen(fd, "r"))) {
		close(fd);
		return NULL;
	}
	fs = calloc(1, sizeof(*fs));
	while (fs && (len = getline(&line, &cap, f)) > 0) {
		char *cls, *types, *fmt;
		uint32_t id;
		int r;

		lineno++;
		if (line[len - 1] == '\n')
			line[--len] = 0;
		r = parse_format_line(line, &id, &cls, &types, &fmt);
		if (r < 0 || (!r && id < fs->n && fs->v[id].fmt)) {
			if (!bad++)
				first_bad = lineno;
			continue;
		}
		if (r)
			continue;
		if (id >= fs->n) {
			uint32_t n = id + 1 > fs->n * 2 ? id + 1 : fs->n * 2;
			struct fmt_entry *v = realloc(fs->v, n * sizeof(*v));

			if (!v)
				break;
			memset(v + fs->n, 0, (n - fs->n) * sizeof(*v));
			fs->v = v;
			fs->n = n;
		}
		fs->v[id].cls = strdup(cls);
		fs->v[id].types = strdup(types);
		fs->v[id].fmt = strdup(fmt);
	}
	free(line);
	fclose(f);
	bad_lines->count = bad;
	bad_lines->first = first_bad;
	if (fs && !fs->n) {
		tp_trace_formats_free(fs);
		fs = NULL;
	}
	return fs;
}

int tp_trace_marker_text(const struct tp_trace_formats *fs, const struct tp_trace_event *ev,
			 char *buf, size_t len)
{
	const struct tp_trace_field *id = tp_trace_event_field(ev, "fmt");
	union tp_trace_value args[8];
	const struct fmt_entry *m;
	size_t n;

	if (!fs || !id || id->type != TP_TRACE_INT || id->u >= fs->n)
		return -ENOENT;
	m = &fs->v[id->u];
	if (!m->fmt || !m->cls || !m->types || strcmp(m->cls, ev->name))
		return -ENOENT;
	n = strlen(m->types);
	/* The arguments are the fields after "fmt", in order, whatever their names (aN, or the
	 * words of the format). */
	if ((size_t)(id - ev->fields) + n >= ev->nr_fields)
		return -ENOENT;
	for (size_t i = 0; i < n; i++) {
		const struct tp_trace_field *a = id + 1 + i;
		char t = m->types[i];

		if (t == 's' && a->type == TP_TRACE_STRING)
			args[i].s = a->str;
		else if (t == 'd' && a->type == TP_TRACE_FLOAT)
			args[i].d = a->d;
		else if (t != 's' && t != 'd' && a->type == TP_TRACE_INT)
			args[i].u = a->u; /* signed values come sign-extended */
		else
			return -ENOENT;
	}
	int r = tp_trace_format(m->fmt, m->types, args, n, buf, len);
	return r < 0 ? -ENOENT : r;
}

bool tp_trace_is_addr_field(const char *name)
{
	size_t n = strlen(name);

	return !strcmp(name, "pc") || !strcmp(name, "ip") || !strcmp(name, "addr") ||
	       (n > 5 && !strcmp(name + n - 5, "_addr"));
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s && s[1] ? s + 1 : path;
}

int tp_trace_resolve_addr(struct tp_symtab *syms, uint64_t addr, char *buf, size_t len)
{
	struct tp_symloc loc;

	if (!syms || tp_symtab_lookup(syms, addr, false, &loc))
		return -ENOENT;
	if (loc.function)
		snprintf(buf, len, "%s:%s+0x%" PRIx64, base_name(loc.object), loc.function,
			 loc.offset);
	else
		snprintf(buf, len, "%s+0x%" PRIx64, base_name(loc.object), loc.offset);
	return 0;
}

void tp_trace_func_name(struct tp_symtab *syms, uint64_t addr, char *buf, size_t len)
{
	struct tp_symloc loc;

	if (!syms || tp_symtab_lookup(syms, addr, false, &loc))
		snprintf(buf, len, "0x%" PRIx64, addr);
	else if (loc.function && !loc.offset)
		snprintf(buf, len, "%s", loc.function);
	else if (loc.function)
		snprintf(buf, len, "%s+0x%" PRIx64, loc.function, loc.offset);
	else
		snprintf(buf, len, "%s+0x%" PRIx64, base_name(loc.object), loc.offset);
}

/* ---- text ---- */

void tp_trace_fmt_time(uint64_t ns, char *buf, size_t len)
{
	/* Events come in time order: most share the second of the one before. */
	static time_t last_secs = (time_t)-1;
	static char last[48];
	time_t secs = (time_t)(ns / 1000000000u);
	struct tm tm;

	if (secs != last_secs) {
		last_secs = secs;
		if (!localtime_r(&secs, &tm) ||
		    !strftime(last, sizeof(last), "%Y-%m-%d %H:%M:%S", &tm))
			snprintf(last, sizeof(last), "%" PRIu64, ns / 1000000000u);
	}
	snprintf(buf, len, "%s.%09u", last, (unsigned int)(ns % 1000000000u));
}

void tp_trace_fmt_secs(uint64_t ns, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRIu64 ".%09u", ns / 1000000000u, (unsigned int)(ns % 1000000000u));
}

bool tp_trace_field_hidden(const struct tp_trace_event *ev, uint32_t i)
{
	const struct tp_trace_field *f = &ev->fields[i], *next;
	size_t n = strlen(f->name);

	if (f->type != TP_TRACE_INT || i + 1 >= ev->nr_fields || n <= 7 ||
	    strcmp(f->name + n - 7, "_length"))
		return false;
	next = &ev->fields[i + 1];
	return (next->type == TP_TRACE_SEQ || next->type == TP_TRACE_BYTES) &&
	       strlen(next->name) == n - 7 && !strncmp(next->name, f->name, n - 7);
}

static uint64_t field_bits(const struct tp_trace_field *f, uint64_t v)
{
	return f->bits && f->bits < 64 ? v & ((UINT64_C(1) << f->bits) - 1) : v;
}

void tp_trace_print_int(FILE *f, const struct tp_trace_field *fld, uint64_t v)
{
	if (fld->base == 16)
		fprintf(f, "0x%" PRIx64, field_bits(fld, v));
	else if (fld->is_signed)
		fprintf(f, "%" PRId64, (int64_t)v);
	else
		fprintf(f, "%" PRIu64, v);
}

void tp_trace_print_float(FILE *f, double v)
{
	char buf[48];
	int prec = 1, e;

	/* The fewest significant digits that read back as the same double, without an exponent
	 * for magnitudes from 1e-5 to 1e17, as babeltrace2 prints them. */
	for (; prec < 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, v);
		if (strtod(buf, NULL) == v || v != v)
			break;
	}
	snprintf(buf, sizeof(buf), "%.*e", prec - 1, v);
	e = isfinite(v) && v != 0 ? atoi(strchr(buf, 'e') + 1) : 0;
	if (e >= prec && e < 17)
		prec = e + 1;
	snprintf(buf, sizeof(buf), "%.*g", prec, v);
	fputs(buf, f);
}

void tp_trace_print_text(FILE *f, const char *s, size_t len)
{
	tp_text_str(f, s, len);
}

void tp_trace_print_name(FILE *f, const char *str, bool folded)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t n = strlen(str);

	for (size_t i = 0; i < n;) {
		size_t u = tp_text_plain_run(s + i, n - i, folded ? " ;" : "");

		if (u) {
			fwrite(s + i, 1, u, f);
			i += u;
			continue;
		}
		u = tp_text_utf8_len(s + i, n - i);
		if (folded && (s[i] <= ' ' || s[i] == ';' || s[i] == 0x7f))
			fputc('_', f);
		else if (folded && !u)
			fputc('?', f);
		else if (s[i] < 0x20 || s[i] == 0x7f || !u)
			fprintf(f, "\\x%02x", s[i]);
		else {
			fwrite(s + i, 1, u, f);
			i += u;
			continue;
		}
		i++;
	}
}

void tp_trace_print_value(FILE *f, const struct tp_trace_field *fld)
{
	switch (fld->type) {
	case TP_TRACE_INT:
		if (fld->label) {
			/* an enumeration: its label, then the value */
			tp_trace_print_name(f, fld->label, false);
			fputc('(', f);
			tp_trace_print_int(f, fld, fld->u);
			fputc(')', f);
			break;
		}
		tp_trace_print_int(f, fld, fld->u);
		break;
	case TP_TRACE_FLOAT:
		tp_trace_print_float(f, fld->d);
		break;
	case TP_TRACE_STRING:
		tp_text_str(f, fld->str, fld->count);
		break;
	case TP_TRACE_BYTES:
		fputc('<', f);
		for (uint32_t i = 0; i < fld->count; i++)
			fprintf(f, "%02x", fld->data[i]);
		fputc('>', f);
		break;
	case TP_TRACE_ARRAY:
	case TP_TRACE_SEQ:
		fputc('[', f);
		for (uint32_t i = 0; i < fld->count; i++) {
			if (i)
				fputs(", ", f);
			tp_trace_print_int(f, fld, tp_trace_field_elem(fld, i));
		}
		fputc(']', f);
		break;
	}
}

/* ---- JSON ---- */

static void put_json_int(FILE *f, const struct tp_trace_field *fld, uint64_t v)
{
	if (fld->is_signed && fld->base != 16)
		fprintf(f, "%" PRId64, (int64_t)v);
	else
		fprintf(f, "%" PRIu64, field_bits(fld, v));
}

void tp_trace_print_json(FILE *f, const struct tp_trace_field *fld)
{
	switch (fld->type) {
	case TP_TRACE_INT:
		if (fld->label) {
			fputs("{\"label\": ", f);
			tp_json_str(f, fld->label, strlen(fld->label));
			fputs(", \"value\": ", f);
			put_json_int(f, fld, fld->u);
			fputc('}', f);
			break;
		}
		put_json_int(f, fld, fld->u);
		break;
	case TP_TRACE_FLOAT:
		/* JSON has no NaN or infinity. */
		if (isfinite(fld->d))
			tp_trace_print_float(f, fld->d);
		else
			fputs("null", f);
		break;
	case TP_TRACE_STRING:
		tp_json_str(f, fld->str, fld->count);
		break;
	case TP_TRACE_BYTES:
		fputc('"', f);
		for (uint32_t i = 0; i < fld->count; i++)
			fprintf(f, "%02x", fld->data[i]);
		fputc('"', f);
		break;
	case TP_TRACE_ARRAY:
	case TP_TRACE_SEQ:
		fputc('[', f);
		for (uint32_t i = 0; i < fld->count; i++) {
			if (i)
				fputs(", ", f);
			put_json_int(f, fld, tp_trace_field_elem(fld, i));
		}
		fputc(']', f);
		break;
	}
}
