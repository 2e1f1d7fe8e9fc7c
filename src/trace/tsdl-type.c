/* The type declarations of TSDL (see tsdl.h): integers, floating point, strings, structs,
 * enumerations, variants, arrays and sequences, and the aliases that name them.  Untrusted
 * input: names, counts and nesting are bounded, and what is beyond the subset is -ENOTSUP. */
#include "trace/tsdl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ALIASES 4096

static int find_clock(struct tsdl_parser *p, const char *map)
{
	char name[TSDL_TOK_MAX + 1];
	size_t n;

	if (strncmp(map, "clock.", 6))
		return -1;
	n = strlen(map + 6);
	if (n < 7 || strcmp(map + 6 + n - 6, ".value"))
		return -1;
	memcpy(name, map + 6, n - 6);
	name[n - 6] = 0;
	for (uint32_t i = 0; i < p->t->nr_clocks; i++)
		if (!strcmp(p->t->clocks[i].name, name))
			return (int)i;
	return -1;
}

static int parse_integer(struct tsdl_parser *p, struct rt_type *t)
{
	uint64_t align = 0;

	t->kind = RT_INT;
	t->base = 10;
	t->clock = -1;
	tp_trace_lex_next(p);
	if (tp_trace_lex_expect(p, '{'))
		return p->err;
	while (!tp_trace_lex_is_punct(p, '}')) {
		char key[TSDL_TOK_MAX + 1];
		struct tsdl_value v;
		bool b;
		int n;

		if (p->kind != T_IDENT)
			return tp_trace_tsdl_fail(p, -EINVAL);
		strcpy(key, p->text);
		tp_trace_lex_next(p);
		if (tp_trace_lex_expect(p, '=') || tp_trace_lex_value(p, &v) ||
		    tp_trace_lex_expect(p, ';'))
			return p->err;
		if (!strcmp(key, "size")) {
			if (v.kind != T_NUM || v.neg || v.num == 0 || v.num > 64)
				return tp_trace_tsdl_fail(p, -EINVAL);
			t->bits = (uint8_t)v.num;
		} else if (!strcmp(key, "align")) {
			if (v.kind != T_NUM || v.neg || !v.num || (v.num & (v.num - 1)) ||
			    v.num > 512)
				return tp_trace_tsdl_fail(p, -EINVAL);
			align = v.num;
		} else if (!strcmp(key, "signed")) {
			if (!tp_trace_lex_bool(&v, &b))
				return tp_trace_tsdl_fail(p, -EINVAL);
			t->is_signed = b;
		} else if (!strcmp(key, "byte_order")) {
			if ((n = tp_trace_lex_byte_order(&v)) < 0)
				return tp_trace_tsdl_fail(p, -EINVAL);
			t->byte_order = (uint8_t)n;
		} else if (!strcmp(key, "base")) {
			if ((n = tp_trace_lex_base(&v)) < 0)
				return tp_trace_tsdl_fail(p, -EINVAL);
			t->base = (uint8_t)n;
		} else if (!strcmp(key, "map")) {
			if (v.kind != T_IDENT || (t->clock = find_clock(p, v.text)) < 0)
				return tp_trace_tsdl_fail(p, -EINVAL);
		} else if (!strcmp(key, "encoding")) {
			t->is_text = v.kind == T_IDENT &&
				     (!strcmp(v.text, "UTF8") || !strcmp(v.text, "ASCII"));
		} else {
			return tp_trace_tsdl_fail(p, -ENOTSUP);
		}
	}
	tp_trace_lex_next(p);
	if (!t->bits)
		return tp_trace_tsdl_fail(p, -EINVAL);
	/* CTF's default: byte-aligned when the size is whole bytes, else packed. */
	t->align = align ? (uint32_t)align : t->bits % 8 ? 1 : 8;
	return 0;
}

/* floating_point: only the IEEE-754 binary32 and binary64 layouts, byte-aligned. */
static int parse_float(struct tsdl_parser *p, struct rt_type *t)
{
	uint64_t align = 0, exp = 0, mant = 0;

	t->kind = RT_FLOAT;
	t->base = 10;
	t->clock = -1;
	tp_trace_lex_next(p);
	if (tp_trace_lex_expect(p, '{'))
		return p->err;
	while (!tp_trace_lex_is_punct(p, '}')) {
		char key[TSDL_TOK_MAX + 1];
		struct tsdl_value v;
		int n;

		if (p->kind != T_IDENT)
			return tp_trace_tsdl_fail(p, -EINVAL);
		strcpy(key, p->text);
		tp_trace_lex_next(p);
		if (tp_trace_lex_expect(p, '=') || tp_trace_lex_value(p, &v) ||
		    tp_trace_lex_expect(p, ';'))
			return p->err;
		if (!strcmp(key, "exp_dig") || !strcmp(key, "mant_dig")) {
			if (v.kind != T_NUM || v.neg || v.num == 0 || v.num > 64)
				return tp_trace_tsdl_fail(p, -EINVAL);
			*(key[0] == 'e' ? &exp : &mant) = v.num;
		} else if (!strcmp(key, "align")) {
			if (v.kind != T_NUM || v.neg || !v.num || (v.num & (v.num - 1)) ||
			    v.num > 512)
				return tp_trace_tsdl_fail(p, -EINVAL);
			align = v.num;
		} else if (!strcmp(key, "byte_order")) {
			if ((n = tp_trace_lex_byte_order(&v)) < 0)
				return tp_trace_tsdl_fail(p, -EINVAL);
			t->byte_order = (uint8_t)n;
		} else {
			return tp_trace_tsdl_fail(p, -ENOTSUP);
		}
	}
	tp_trace_lex_next(p);
	if (exp == 8 && mant == 24)
		t->bits = 32;
	else if (exp == 11 && mant == 53)
		t->bits = 64;
	else
		return tp_trace_tsdl_fail(p, exp && mant ? -ENOTSUP : -EINVAL);
	if (align && align < 8)
		return tp_trace_tsdl_fail(p, -ENOTSUP);
	t->align = align ? (uint32_t)align : 8;
	return 0;
}

static struct tsdl_alias *find_alias(struct tsdl_parser *p, const char *name)
{
	for (uint32_t i = 0; i < p->nr_aliases; i++)
		if (!strcmp(p->aliases[i].name, name))
			return &p->aliases[i];
	return NULL;
}

static int add_alias(struct tsdl_parser *p, const char *name, struct rt_type *t)
{
	struct tsdl_alias *a = find_alias(p, name);

	if (a) {
		a->type = t;
		return 0;
	}
	if (p->nr_aliases == MAX_ALIASES)
		return tp_trace_tsdl_fail(p, -EINVAL);
	if (!(p->nr_aliases & (p->nr_aliases + 1)) || !p->aliases) {
		struct tsdl_alias *na = realloc(p->aliases, (p->nr_aliases * 2 + 2) * sizeof(*na));

		if (!na)
			return tp_trace_tsdl_fail(p, -ENOMEM);
		p->aliases = na;
	}
	p->aliases[p->nr_aliases].name = tp_trace_tsdl_dup(p, name);
	p->aliases[p->nr_aliases++].type = t;
	return p->err;
}

/* Declarator suffixes: [N] arrays and [length_field] sequences, innermost last. */
static int parse_dims(struct tsdl_parser *p, struct rt_type **type, const struct rt_field *prev,
		      uint32_t nr_prev)
{
	struct rt_type *dims[TSDL_MAX_DEPTH];
	int n = 0;

	while (tp_trace_lex_is_punct(p, '[')) {
		struct rt_type *a;

		tp_trace_lex_next(p);
		if (n == TSDL_MAX_DEPTH || !(a = tp_trace_tsdl_alloc(p, sizeof(*a))))
			return tp_trace_tsdl_fail(p, p->err ? p->err : -EINVAL);
		if (p->kind == T_NUM) {
			if (p->num > (1u << 28))
				return tp_trace_tsdl_fail(p, -EINVAL);
			a->kind = RT_ARRAY;
			a->length = (uint32_t)p->num;
		} else if (p->kind == T_IDENT) {
			uint32_t i;

			for (i = 0; i < nr_prev && strcmp(prev[i].name, p->text); i++)
				;
			if (i == nr_prev)
				return tp_trace_tsdl_fail(
				    p, -ENOTSUP); /* length outside this struct */
			a->kind = RT_SEQ;
			a->len_field = i;
		} else {
			return tp_trace_tsdl_fail(p, -EINVAL);
		}
		tp_trace_lex_next(p);
		if (tp_trace_lex_expect(p, ']'))
			return p->err;
		dims[n++] = a;
	}
	/* int a[2][3] is an array of 2 arrays of 3 ints. */
	while (n--) {
		dims[n]->elem = *type;
		dims[n]->align = (*type)->align;
		*type = dims[n];
	}
	return 0;
}

/* How many decoded fields a field of type @t takes: nested structs are flattened, and a
 * variant takes as many as its largest option. */
static uint32_t flat_count(const struct rt_type *t)
{
	return t->kind == RT_STRUCT || t->kind == RT_VARIANT ? t->nr_flat : 1;
}

/* A variant names its tag: bind it to the enumeration among the fields before it (a copy
 * of the type, since a variant type may be shared through an alias). */
static int bind_tag(struct tsdl_parser *p, struct rt_type **ft, const struct rt_field *prev,
		    uint32_t nr_prev)
{
	struct rt_type *v;
	uint32_t i;

	if (!(*ft)->tag_name)
		return tp_trace_tsdl_fail(p, -EINVAL);
	for (i = 0; i < nr_prev && strcmp(prev[i].name, (*ft)->tag_name); i++)
		;
	if (i == nr_prev)
		return tp_trace_tsdl_fail(p, -ENOTSUP); /* a tag outside this struct */
	if (prev[i].type->kind != RT_INT || !prev[i].type->maps)
		return tp_trace_tsdl_fail(p, -EINVAL);
	if (!(v = tp_trace_tsdl_alloc(p, sizeof(*v))))
		return p->err;
	*v = **ft;
	v->tag_field = i;
	*ft = v;
	return 0;
}

static int parse_struct_body(struct tsdl_parser *p, struct rt_type *t)
{
	struct rt_field fields[64], *all = fields;
	uint32_t n = 0, cap = 64;
	int err = 0;

	while (!tp_trace_lex_is_punct(p, '}')) {
		struct rt_type *ft;

		if (tp_trace_tsdl_type(p, &ft))
			goto out;
		if (p->kind != T_IDENT) {
			err = tp_trace_tsdl_fail(p, -EINVAL);
			goto out;
		}
		if (n == cap) {
			struct rt_field *na;

			if (cap == TSDL_MAX_FIELDS) {
				err = tp_trace_tsdl_fail(p, -EINVAL);
				goto out;
			}
			na = malloc(cap * 2 * sizeof(*na));
			if (!na) {
				err = tp_trace_tsdl_fail(p, -ENOMEM);
				goto out;
			}
			memcpy(na, all, n * sizeof(*na));
			if (all != fields)
				free(all);
			all = na;
			cap *= 2;
		}
		all[n].name = tp_trace_tsdl_dup(p, p->text);
		tp_trace_lex_next(p);
		if (ft->kind == RT_VARIANT && bind_tag(p, &ft, all, n))
			goto out;
		if (parse_dims(p, &ft, all, n) || tp_trace_lex_expect(p, ';'))
			goto out;
		if (t->nr_flat + flat_count(ft) > TSDL_MAX_FIELDS) {
			err = tp_trace_tsdl_fail(p, -EINVAL);
			goto out;
		}
		t->nr_flat += flat_count(ft);
		all[n++].type = ft;
		if (ft->align > t->align)
			t->align = ft->align;
	}
	tp_trace_lex_next(p);
	t->nr_fields = n;
	t->fields = tp_trace_tsdl_alloc(p, (n ? n : 1) * sizeof(*all));
	if (t->fields)
		memcpy(t->fields, all, n * sizeof(*all));
	if (t->nr_flat > p->t->max_fields)
		p->t->max_fields = t->nr_flat;
out:
	if (all != fields)
		free(all);
	return err ? err : p->err;
}

static int parse_struct(struct tsdl_parser *p, struct rt_type **out)
{
	char name[TSDL_TOK_MAX + 8] = "";
	struct rt_type *t;

	tp_trace_lex_next(p);
	if (p->kind == T_IDENT) {
		strcpy(name, "struct ");
		strcat(name, p->text);
		tp_trace_lex_next(p);
		if (!tp_trace_lex_is_punct(p, '{')) {
			struct tsdl_alias *a = find_alias(p, name);

			if (!a)
				return tp_trace_tsdl_fail(p, -EINVAL);
			*out = a->type;
			return 0;
		}
	}
	if (tp_trace_lex_expect(p, '{') || !(t = tp_trace_tsdl_alloc(p, sizeof(*t))))
		return tp_trace_tsdl_fail(p, -EINVAL);
	t->kind = RT_STRUCT;
	t->align = 1;
	if (parse_struct_body(p, t))
		return p->err;
	if (tp_trace_lex_is_word(p, "align")) {
		tp_trace_lex_next(p);
		if (tp_trace_lex_expect(p, '(') || p->kind != T_NUM || !p->num ||
		    (p->num & (p->num - 1)) || p->num > 512)
			return tp_trace_tsdl_fail(p, -EINVAL);
		if (p->num > t->align)
			t->align = (uint32_t)p->num;
		tp_trace_lex_next(p);
		if (tp_trace_lex_expect(p, ')'))
			return p->err;
	}
	if (name[0] && add_alias(p, name, t))
		return p->err;
	*out = t;
	return 0;
}

/* The longest run of words at the cursor that names an alias ("unsigned long"), the cursor
 * left after it; NULL (cursor unmoved) when none does. */
static struct tsdl_alias *find_multiword_alias(struct tsdl_parser *p)
{
	struct tsdl_parser start = *p, after;
	struct tsdl_alias *best = NULL, *a;
	char name[TSDL_TOK_MAX + 1];
	size_t n = 0;

	for (int words = 0; words < 4 && p->kind == T_IDENT; words++) {
		size_t w = strlen(p->text);

		if (n + (n ? 1 : 0) + w > TSDL_TOK_MAX)
			break;
		if (n)
			name[n++] = ' ';
		memcpy(name + n, p->text, w + 1);
		n += w;
		tp_trace_lex_next(p);
		if ((a = find_alias(p, name))) {
			best = a;
			after = *p;
		}
	}
	*p = best ? after : start;
	return best;
}

/* enum [NAME] [: CONTAINER] { LABEL [= V [... W]], ... }: an integer with labels. */
static int parse_enum(struct tsdl_parser *p, struct rt_type **out)
{
	char name[TSDL_TOK_MAX + 8] = "";
	struct rt_enum_map maps[256], *all = maps;
	struct rt_type *base = NULL, *t;
	uint32_t n = 0, cap = 256;
	uint64_t next = 0;
	int err = 0;

	tp_trace_lex_next(p);
	if (p->kind == T_IDENT) {
		snprintf(name, sizeof(name), "enum %s", p->text);
		tp_trace_lex_next(p);
	}
	if (tp_trace_lex_is_punct(p, 'c')) {
		tp_trace_lex_next(p);
		if (tp_trace_tsdl_type(p, &base))
			return p->err;
	} else if (name[0] && !tp_trace_lex_is_punct(p, '{')) {
		struct tsdl_alias *a = find_alias(p, name);

		if (!a)
			return tp_trace_tsdl_fail(p, -EINVAL);
		*out = a->type;
		return 0;
	} else {
		struct tsdl_alias *a = find_alias(p, "int");

		base = a ? a->type : NULL;
	}
	if (!base || base->kind != RT_INT)
		return tp_trace_tsdl_fail(p, -EINVAL);
	if (tp_trace_lex_expect(p, '{'))
		return p->err;
	while (!p->err && !tp_trace_lex_is_punct(p, '}')) {
		struct tsdl_value lo, hi;

		if (p->kind != T_IDENT && p->kind != T_STR) {
			err = tp_trace_tsdl_fail(p, -EINVAL);
			break;
		}
		if (n == cap) {
			struct rt_enum_map *na;

			if (cap == TSDL_MAX_EVENTS || !(na = malloc(cap * 2 * sizeof(*na)))) {
				err = tp_trace_tsdl_fail(p, cap == TSDL_MAX_EVENTS ? -EINVAL
										   : -ENOMEM);
				break;
			}
			memcpy(na, all, n * sizeof(*na));
			if (all != maps)
				free(all);
			all = na;
			cap *= 2;
		}
		all[n].label = tp_trace_tsdl_dup(p, p->text);
		all[n].lo = all[n].hi = next;
		tp_trace_lex_next(p);
		if (tp_trace_lex_is_punct(p, '=')) {
			tp_trace_lex_next(p);
			if (tp_trace_lex_value(p, &lo) || lo.kind != T_NUM)
				break;
			all[n].lo = all[n].hi = lo.neg ? (uint64_t) - (int64_t)lo.num : lo.num;
			if (tp_trace_lex_is_punct(p, '.')) {
				for (int i = 0; i < 3; i++)
					if (tp_trace_lex_expect(p, '.'))
						break;
				if (p->err || tp_trace_lex_value(p, &hi) || hi.kind != T_NUM)
					break;
				all[n].hi = hi.neg ? (uint64_t) - (int64_t)hi.num : hi.num;
			}
		}
		next = all[n++].hi + 1;
		if (!tp_trace_lex_is_punct(p, ','))
			break;
		tp_trace_lex_next(p);
	}
	if (!p->err && !err && !tp_trace_lex_expect(p, '}') &&
	    (t = tp_trace_tsdl_alloc(p, sizeof(*t)))) {
		*t = *base;
		t->nr_maps = n;
		t->maps = tp_trace_tsdl_alloc(p, (n ? n : 1) * sizeof(*all));
		if (t->maps) {
			memcpy(t->maps, all, n * sizeof(*all));
			if (!name[0] || !add_alias(p, name, t))
				*out = t;
		}
	}
	if (!err && !p->err && !tp_trace_lex_is_punct(p, '}') && p->kind == T_EOF)
		tp_trace_tsdl_fail(p, -EINVAL);
	if (all != maps)
		free(all);
	return err ? err : p->err;
}

/* variant [NAME] [<TAG>] [{ options }]: the tag is bound by the enclosing struct. */
static int parse_variant(struct tsdl_parser *p, struct rt_type **out)
{
	char name[TSDL_TOK_MAX + 16] = "", tag[TSDL_TOK_MAX + 1] = "";
	struct rt_type *t, body = {.kind = RT_STRUCT, .align = 1};

	tp_trace_lex_next(p);
	if (p->kind == T_IDENT) {
		snprintf(name, sizeof(name), "variant %s", p->text);
		tp_trace_lex_next(p);
	}
	if (tp_trace_lex_is_punct(p, '<')) {
		tp_trace_lex_next(p);
		if (p->kind != T_IDENT)
			return tp_trace_tsdl_fail(p, -EINVAL);
		strcpy(tag, p->text);
		tp_trace_lex_next(p);
		if (tp_trace_lex_is_punct(p, '.'))
			return tp_trace_tsdl_fail(p, -ENOTSUP); /* a tag given by a path */
		if (tp_trace_lex_expect(p, '>'))
			return p->err;
	}
	if (!(t = tp_trace_tsdl_alloc(p, sizeof(*t))))
		return p->err;
	if (!tp_trace_lex_is_punct(p, '{')) {
		struct tsdl_alias *a = name[0] ? find_alias(p, name) : NULL;

		if (!a || !tag[0])
			return tp_trace_tsdl_fail(p, -EINVAL);
		*t = *a->type;
	} else {
		tp_trace_lex_next(p);
		if (parse_struct_body(p, &body))
			return p->err;
		*t = body;
		t->kind = RT_VARIANT;
		/* every option starts where the variant does: the largest one counts */
		t->nr_flat = 0;
		for (uint32_t i = 0; i < t->nr_fields; i++)
			if (flat_count(t->fields[i].type) > t->nr_flat)
				t->nr_flat = flat_count(t->fields[i].type);
		if (name[0] && add_alias(p, name, t))
			return p->err;
	}
	t->tag_name = tag[0] ? tp_trace_tsdl_dup(p, tag) : NULL;
	t->tag_field = UINT32_MAX;
	*out = t;
	return p->err;
}

int tp_trace_tsdl_type(struct tsdl_parser *p, struct rt_type **out)
{
	struct rt_type *t;
	struct tsdl_alias *a;

	if (++p->depth > TSDL_MAX_DEPTH) {
		p->depth--;
		return tp_trace_tsdl_fail(p, -EINVAL);
	}
	if (tp_trace_lex_is_word(p, "integer")) {
		if ((t = tp_trace_tsdl_alloc(p, sizeof(*t))) && !parse_integer(p, t))
			*out = t;
	} else if (tp_trace_lex_is_word(p, "floating_point")) {
		if ((t = tp_trace_tsdl_alloc(p, sizeof(*t))) && !parse_float(p, t))
			*out = t;
	} else if (tp_trace_lex_is_word(p, "string")) {
		if ((t = tp_trace_tsdl_alloc(p, sizeof(*t)))) {
			t->kind = RT_STRING;
			t->align = 8;
			*out = t;
			tp_trace_lex_next(p);
			if (tp_trace_lex_is_punct(p, '{')) {
				/* Only an encoding may be given; we read bytes either way. */
				tp_trace_lex_next(p);
				while (!p->err && !tp_trace_lex_is_punct(p, '}')) {
					struct tsdl_value v;

					if (!tp_trace_lex_is_word(p, "encoding"))
						tp_trace_tsdl_fail(p, -ENOTSUP);
					tp_trace_lex_next(p);
					if (!tp_trace_lex_expect(p, '=') &&
					    !tp_trace_lex_value(p, &v))
						tp_trace_lex_expect(p, ';');
				}
				tp_trace_lex_next(p);
			}
		}
	} else if (tp_trace_lex_is_word(p, "struct")) {
		parse_struct(p, out);
	} else if (p->kind == T_IDENT && (a = find_multiword_alias(p))) {
		*out = a->type;
	} else if (tp_trace_lex_is_word(p, "enum")) {
		parse_enum(p, out);
	} else if (tp_trace_lex_is_word(p, "variant")) {
		parse_variant(p, out);
	} else {
		tp_trace_tsdl_fail(p, -EINVAL);
	}
	p->depth--;
	return p->err;
}

int tp_trace_tsdl_typealias(struct tsdl_parser *p)
{
	struct rt_type *t;
	char name[TSDL_TOK_MAX + 1];
	size_t n;

	tp_trace_lex_next(p);
	if (tp_trace_tsdl_type(p, &t) || tp_trace_lex_expect(p, ':'))
		return p->err;
	if (p->kind != T_IDENT)
		return tp_trace_tsdl_fail(p, -EINVAL);
	strcpy(name, p->text);
	n = strlen(name);
	tp_trace_lex_next(p);
	/* "unsigned long" style names are accepted but can only be used as one word. */
	while (p->kind == T_IDENT) {
		if (n + 1 + strlen(p->text) > TSDL_TOK_MAX)
			return tp_trace_tsdl_fail(p, -EINVAL);
		name[n++] = ' ';
		strcpy(name + n, p->text);
		n += strlen(p->text);
		tp_trace_lex_next(p);
	}
	if (add_alias(p, name, t))
		return p->err;
	return tp_trace_lex_expect(p, ';');
}
