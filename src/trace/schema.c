/* The event-class registry: named classes of typed fields, numbered densely from 0.  The
 * writer turns it into TSDL; producers only need the ids and the field order. */
#include "trace/trace-priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tp_trace_class {
	char *name;
	struct tp_trace_field_desc *fields;
	size_t nr_fields;
};

struct tp_trace_schema {
	struct tp_trace_class *classes;
	size_t nr, cap;
};

struct tp_trace_schema *tp_trace_schema_new(void)
{
	return calloc(1, sizeof(struct tp_trace_schema));
}

static void class_release(struct tp_trace_class *c)
{
	for (size_t i = 0; i < c->nr_fields; i++)
		free((char *)c->fields[i].name);
	free(c->fields);
	free(c->name);
}

void tp_trace_schema_free(struct tp_trace_schema *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nr; i++)
		class_release(&s->classes[i]);
	free(s->classes);
	free(s);
}

/* Event names end up in a TSDL string literal: keep them printable and free of quotes. */
static bool valid_class_name(const char *name)
{
	size_t len = name ? strlen(name) : 0;

	if (len == 0 || len > TP_TRACE_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = name[i];

		if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
			return false;
	}
	return true;
}

/* Field names become TSDL identifiers, written with a leading underscore so that they never
 * clash with a keyword (CTF readers strip it).  Room is kept for the "_length" suffix. */
static bool valid_field_name(const char *name)
{
	size_t len = name ? strlen(name) : 0;

	if (len == 0 || len > TP_TRACE_NAME_MAX - 8)
		return false;
	if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z')))
		return false;
	for (size_t i = 1; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_'))
			return false;
	}
	return true;
}

static bool valid_int(uint8_t bits, uint8_t base)
{
	return (bits == 8 || bits == 16 || bits == 32 || bits == 64) &&
	       (base == 0 || base == 10 || base == 16);
}

static bool has_length_field(enum tp_trace_ftype t)
{
	return t == TP_TRACE_BYTES || t == TP_TRACE_SEQ;
}

/* Two fields must not print under the same name, the length fields included. */
static bool names_collide(const struct tp_trace_field_desc *f, size_t n)
{
	char a[TP_TRACE_NAME_MAX + 1], b[TP_TRACE_NAME_MAX + 1];

	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < n; j++) {
			for (int la = 0; la < 2; la++) {
				for (int lb = 0; lb < 2; lb++) {
					if ((la && !has_length_field(f[i].type)) ||
					    (lb && !has_length_field(f[j].type)) ||
					    (i == j && la == lb))
						continue;
					snprintf(a, sizeof(a), "%s%s", f[i].name,
						 la ? "_length" : "");
					snprintf(b, sizeof(b), "%s%s", f[j].name,
						 lb ? "_length" : "");
					if (!strcmp(a, b))
						return true;
				}
			}
		}
	}
	return false;
}

static int check_fields(const struct tp_trace_field_desc *f, size_t n)
{
	if (n > TP_TRACE_MAX_FIELDS || (n && !f))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (!valid_field_name(f[i].name))
			return -EINVAL;
		switch (f[i].type) {
		case TP_TRACE_INT:
		case TP_TRACE_SEQ:
			if (!valid_int(f[i].bits, f[i].base))
				return -EINVAL;
			break;
		case TP_TRACE_ARRAY:
			if (!valid_int(f[i].bits, f[i].base) || f[i].count == 0 ||
			    f[i].count > 65536)
				return -EINVAL;
			break;
		case TP_TRACE_FLOAT:
			if (f[i].bits != 32 && f[i].bits != 64)
				return -EINVAL;
			break;
		case TP_TRACE_STRING:
		case TP_TRACE_BYTES:
			break;
		default:
			return -EINVAL;
		}
	}
	return names_collide(f, n) ? -EINVAL : 0;
}

int tp_trace_schema_add(struct tp_trace_schema *s, const char *name,
			const struct tp_trace_field_desc *fields, size_t nr_fields)
{
	struct tp_trace_class c = {0};
	int err;

	if (!s || !valid_class_name(name))
		return -EINVAL;
	err = check_fields(fields, nr_fields);
	if (err)
		return err;
	if (tp_trace_schema_find(s, name) >= 0)
		return -EEXIST;
	if (s->nr >= TP_TRACE_MAX_CLASSES)
		return -ENOSPC;
	if (s->nr == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		struct tp_trace_class *nc = realloc(s->classes, cap * sizeof(*nc));

		if (!nc)
			return -ENOMEM;
		s->classes = nc;
		s->cap = cap;
	}
	c.name = strdup(name);
	c.fields = calloc(nr_fields ? nr_fields : 1, sizeof(*c.fields));
	if (!c.name || !c.fields)
		goto err_nomem;
	for (size_t i = 0; i < nr_fields; i++) {
		c.fields[i] = fields[i];
		if (!c.fields[i].base)
			c.fields[i].base = 10;
		if (fields[i].type == TP_TRACE_BYTES) {
			c.fields[i].bits = 8;
			c.fields[i].is_signed = false;
		}
		if (fields[i].type != TP_TRACE_ARRAY)
			c.fields[i].count = 0;
		c.fields[i].name = strdup(fields[i].name);
		c.nr_fields = i + 1;
		if (!c.fields[i].name)
			goto err_nomem;
	}
	s->classes[s->nr] = c;
	return (int)s->nr++;

err_nomem:
	class_release(&c);
	return -ENOMEM;
}

int tp_trace_schema_find(const struct tp_trace_schema *s, const char *name)
{
	for (size_t i = 0; s && name && i < s->nr; i++)
		if (!strcmp(s->classes[i].name, name))
			return (int)i;
	return -ENOENT;
}

size_t tp_trace_schema_count(const struct tp_trace_schema *s)
{
	return s ? s->nr : 0;
}

const char *tp_trace_schema_name(const struct tp_trace_schema *s, unsigned int id)
{
	return s && id < s->nr ? s->classes[id].name : NULL;
}

const struct tp_trace_field_desc *tp_trace_schema_fields(const struct tp_trace_schema *s,
							 unsigned int id, size_t *nr_fields)
{
	if (!s || id >= s->nr)
		return NULL;
	if (nr_fields)
		*nr_fields = s->classes[id].nr_fields;
	return s->classes[id].fields;
}
