/* The TSDL tokenizer and value readers, and the parser's arena.  Tokens, strings and
 * numbers from the untrusted text are bounded (TSDL_TOK_MAX, 64-bit overflow). */
#include "trace/tsdl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void *tp_trace_tsdl_alloc(struct tsdl_parser *p, size_t size)
{
	struct tsdl_arena *b = calloc(1, sizeof(*b) + size);

	if (!b) {
		p->err = -ENOMEM;
		return NULL;
	}
	b->next = p->t->arena;
	p->t->arena = b;
	return b->data;
}

char *tp_trace_tsdl_dup(struct tsdl_parser *p, const char *s)
{
	char *d = tp_trace_tsdl_alloc(p, strlen(s) + 1);

	if (d)
		strcpy(d, s);
	return d;
}

int tp_trace_tsdl_fail(struct tsdl_parser *p, int err)
{
	if (!p->err)
		p->err = err;
	return p->err;
}

static void skip_space(struct tsdl_parser *p)
{
	while (p->s < p->end) {
		if (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r') {
			p->s++;
		} else if (p->end - p->s >= 2 && p->s[0] == '/' && p->s[1] == '*') {
			const char *e = memmem(p->s + 2, (size_t)(p->end - p->s - 2), "*/", 2);

			if (!e) {
				tp_trace_tsdl_fail(p, -EINVAL);
				p->s = p->end;
				return;
			}
			p->s = e + 2;
		} else if (p->end - p->s >= 2 && p->s[0] == '/' && p->s[1] == '/') {
			const char *e = memchr(p->s, '\n', (size_t)(p->end - p->s));

			p->s = e ? e + 1 : p->end;
		} else {
			return;
		}
	}
}

static bool is_ident(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       (!first && c >= '0' && c <= '9');
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static void lex_number(struct tsdl_parser *p)
{
	unsigned base = 10;
	uint64_t v = 0;
	bool any = false;

	if (p->end - p->s >= 2 && p->s[0] == '0' && (p->s[1] == 'x' || p->s[1] == 'X')) {
		base = 16;
		p->s += 2;
	} else if (p->s[0] == '0') {
		base = 8;
	}
	for (; p->s < p->end; p->s++) {
		int d = hexval(*p->s);

		if (d < 0 || (unsigned)d >= base)
			break;
		if (v > (UINT64_MAX - (unsigned)d) / base) {
			tp_trace_tsdl_fail(p, -EINVAL);
			return;
		}
		v = v * base + (unsigned)d;
		any = true;
	}
	while (p->s < p->end && (*p->s == 'u' || *p->s == 'U' || *p->s == 'l' || *p->s == 'L'))
		p->s++;
	if (!any && base == 16)
		tp_trace_tsdl_fail(p, -EINVAL);
	p->kind = T_NUM;
	p->num = v;
}

static void lex_string(struct tsdl_parser *p)
{
	size_t n = 0;

	p->s++;
	while (p->s < p->end && *p->s != '"') {
		char c = *p->s++;

		if (c == '\\' && p->s < p->end) {
			c = *p->s++;
			c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
		}
		if (n == TSDL_TOK_MAX) {
			tp_trace_tsdl_fail(p, -EINVAL);
			return;
		}
		p->text[n++] = c;
	}
	if (p->s >= p->end) {
		tp_trace_tsdl_fail(p, -EINVAL);
		return;
	}
	p->s++;
	p->text[n] = 0;
	p->kind = T_STR;
}

void tp_trace_lex_next(struct tsdl_parser *p)
{
	skip_space(p);
	p->text[0] = 0;
	if (p->err || p->s >= p->end) {
		p->kind = T_EOF;
		return;
	}
	if (is_ident(*p->s, true)) {
		size_t n = 0;

		while (p->s < p->end && is_ident(*p->s, false)) {
			if (n == TSDL_TOK_MAX) {
				tp_trace_tsdl_fail(p, -EINVAL);
				p->kind = T_EOF;
				return;
			}
			p->text[n++] = *p->s++;
		}
		p->text[n] = 0;
		p->kind = T_IDENT;
	} else if (*p->s >= '0' && *p->s <= '9') {
		lex_number(p);
	} else if (*p->s == '"') {
		lex_string(p);
	} else if (strchr("{}[]();=.,<>:-+", *p->s)) {
		p->kind = T_PUNCT;
		p->punct = *p->s++;
		if (p->punct == ':' && p->s < p->end && *p->s == '=')
			p->s++;
		else if (p->punct == ':')
			p->punct = 'c'; /* a lone colon (enum bases): not in our subset */
	} else {
		tp_trace_tsdl_fail(p, -EINVAL);
		p->kind = T_EOF;
	}
	if (p->err)
		p->kind = T_EOF;
}

bool tp_trace_lex_is_punct(struct tsdl_parser *p, char c)
{
	return p->kind == T_PUNCT && p->punct == c;
}

bool tp_trace_lex_is_word(struct tsdl_parser *p, const char *w)
{
	return p->kind == T_IDENT && !strcmp(p->text, w);
}

int tp_trace_lex_expect(struct tsdl_parser *p, char c)
{
	if (!tp_trace_lex_is_punct(p, c))
		return tp_trace_tsdl_fail(p, -EINVAL);
	tp_trace_lex_next(p);
	return p->err;
}

int tp_trace_lex_value(struct tsdl_parser *p, struct tsdl_value *v)
{
	memset(v, 0, sizeof(*v));
	if (tp_trace_lex_is_punct(p, '-') || tp_trace_lex_is_punct(p, '+')) {
		v->neg = p->punct == '-';
		tp_trace_lex_next(p);
		if (p->kind != T_NUM)
			return tp_trace_tsdl_fail(p, -EINVAL);
	}
	v->kind = p->kind;
	if (p->kind == T_NUM) {
		v->num = p->num;
		tp_trace_lex_next(p);
	} else if (p->kind == T_STR) {
		strcpy(v->text, p->text);
		tp_trace_lex_next(p);
	} else if (p->kind == T_IDENT) {
		size_t n = strlen(p->text);

		memcpy(v->text, p->text, n + 1);
		tp_trace_lex_next(p);
		while (tp_trace_lex_is_punct(p, '.')) {
			tp_trace_lex_next(p);
			if (p->kind != T_IDENT || n + 1 + strlen(p->text) > TSDL_TOK_MAX)
				return tp_trace_tsdl_fail(p, -EINVAL);
			v->text[n++] = '.';
			strcpy(v->text + n, p->text);
			n += strlen(p->text);
			tp_trace_lex_next(p);
		}
	} else {
		return tp_trace_tsdl_fail(p, -EINVAL);
	}
	return p->err;
}

bool tp_trace_lex_bool(const struct tsdl_value *v, bool *out)
{
	if (v->kind == T_NUM && v->num <= 1) {
		*out = v->num;
		return true;
	}
	if (v->kind != T_IDENT)
		return false;
	if (!strcasecmp(v->text, "true")) {
		*out = true;
		return true;
	}
	if (!strcasecmp(v->text, "false")) {
		*out = false;
		return true;
	}
	return false;
}

int tp_trace_lex_byte_order(const struct tsdl_value *v)
{
	if (v->kind != T_IDENT)
		return -1;
	if (!strcmp(v->text, "le"))
		return 1;
	if (!strcmp(v->text, "be") || !strcmp(v->text, "network"))
		return 2;
	if (!strcmp(v->text, "native"))
		return 0;
	return -1;
}

int tp_trace_lex_base(const struct tsdl_value *v)
{
	static const struct {
		const char *name;
		int base;
	} names[] = {{"decimal", 10}, {"dec", 10},	   {"d", 10},	 {"i", 10},
		     {"u", 10},	      {"hexadecimal", 16}, {"hex", 16},	 {"x", 16},
		     {"X", 16},	      {"p", 16},	   {"octal", 8}, {"oct", 8},
		     {"o", 8},	      {"binary", 2},	   {"bin", 2},	 {"b", 2}};

	if (v->kind == T_NUM && !v->neg &&
	    (v->num == 2 || v->num == 8 || v->num == 10 || v->num == 16))
		return (int)v->num;
	for (size_t i = 0; v->kind == T_IDENT && i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(v->text, names[i].name))
			return names[i].base;
	return -1;
}

bool tp_trace_lex_uuid(const char *s, uint8_t out[16])
{
	if (strlen(s) != 36)
		return false;
	for (int i = 0, j = 0; i < 16; i++) {
		int hi, lo;

		if (j == 8 || j == 13 || j == 18 || j == 23) {
			if (s[j++] != '-')
				return false;
		}
		hi = hexval(s[j]);
		lo = hexval(s[j + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
		j += 2;
	}
	return true;
}
