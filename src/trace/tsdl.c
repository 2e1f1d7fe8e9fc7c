/* The blocks of a TSDL metadata text (trace, env, clock, stream, event), their checks and
 * the tables the reader uses; types are parsed in tsdl-type.c.  The input is untrusted:
 * anything outside the subset of tsdl.h is refused with -ENOTSUP rather than guessed at. */
#include "trace/tsdl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum block { B_TRACE, B_ENV, B_CLOCK, B_STREAM, B_EVENT, B_CALLSITE };

struct block_ctx {
	struct tsdl_clock *clock;
	struct tsdl_stream *stream;
	struct tsdl_event *event;
	bool has_stream_id;
};

static int set_value(struct tsdl_parser *p, enum block b, struct block_ctx *c, const char *key,
		     const struct tsdl_value *v)
{
	bool num = v->kind == T_NUM;
	int n;

	switch (b) {
	case B_TRACE:
		if (!strcmp(key, "major") && !(num && v->num == 1))
			return tp_trace_tsdl_fail(p, -ENOTSUP);
		if (!strcmp(key, "uuid")) {
			if (v->kind != T_STR || !tp_trace_lex_uuid(v->text, p->t->uuid))
				return tp_trace_tsdl_fail(p, -EINVAL);
			p->t->has_uuid = true;
		} else if (!strcmp(key, "byte_order")) {
			if ((n = tp_trace_lex_byte_order(v)) <= 0)
				return tp_trace_tsdl_fail(p, -EINVAL);
			p->t->big_endian = n == 2;
		}
		return 0;
	case B_CLOCK:
		if (!strcmp(key, "name")) {
			if (v->kind != T_STR && v->kind != T_IDENT)
				return tp_trace_tsdl_fail(p, -EINVAL);
			c->clock->name = tp_trace_tsdl_dup(p, v->text);
		} else if (!strcmp(key, "freq")) {
			if (!num || v->neg || !v->num)
				return tp_trace_tsdl_fail(p, -EINVAL);
			c->clock->freq = v->num;
		} else if (!strcmp(key, "offset_s")) {
			if (!num || v->num > INT64_MAX)
				return tp_trace_tsdl_fail(p, -EINVAL);
			c->clock->offset_s = v->neg ? -(int64_t)v->num : (int64_t)v->num;
		} else if (!strcmp(key, "offset")) {
			if (!num || v->neg)
				return tp_trace_tsdl_fail(p, -EINVAL);
			c->clock->offset = v->num;
		}
		return 0;
	case B_STREAM:
		if (!strcmp(key, "id")) {
			if (!num || v->neg)
				return tp_trace_tsdl_fail(p, -EINVAL);
			c->stream->id = v->num;
		}
		return 0;
	case B_EVENT:
		if (!strcmp(key, "name")) {
			if (v->kind != T_STR && v->kind != T_IDENT)
				return tp_trace_tsdl_fail(p, -EINVAL);
			c->event->name = tp_trace_tsdl_dup(p, v->text);
		} else if (!strcmp(key, "id") || !strcmp(key, "stream_id")) {
			if (!num || v->neg)
				return tp_trace_tsdl_fail(p, -EINVAL);
			if (key[0] == 'i') {
				c->event->id = v->num;
			} else {
				c->event->stream_id = v->num;
				c->has_stream_id = true;
			}
		}
		return 0;
	default:
		return 0;
	}
}

static int set_type(struct tsdl_parser *p, enum block b, struct block_ctx *c, const char *key,
		    struct rt_type *t)
{
	if (b == B_TRACE && !strcmp(key, "packet.header"))
		p->t->packet_header = t;
	else if (b == B_STREAM && !strcmp(key, "packet.context"))
		c->stream->packet_context = t;
	else if (b == B_STREAM && !strcmp(key, "event.header"))
		c->stream->event_header = t;
	else if (b == B_STREAM && !strcmp(key, "event.context"))
		c->stream->event_context = t;
	else if (b == B_EVENT && !strcmp(key, "fields"))
		c->event->fields = t;
	else
		return tp_trace_tsdl_fail(p, -ENOTSUP); /* event.context of an event class, ... */
	return 0;
}

static int parse_block(struct tsdl_parser *p, enum block b, struct block_ctx *c)
{
	tp_trace_lex_next(p);
	if (tp_trace_lex_expect(p, '{'))
		return p->err;
	while (!p->err && !tp_trace_lex_is_punct(p, '}')) {
		char key[TSDL_TOK_MAX + 1];
		size_t n;

		if (p->kind != T_IDENT)
			return tp_trace_tsdl_fail(p, -EINVAL);
		if (tp_trace_lex_is_word(p, "typealias") || tp_trace_lex_is_word(p, "typedef"))
			return tp_trace_tsdl_fail(p, -ENOTSUP);
		strcpy(key, p->text);
		n = strlen(key);
		tp_trace_lex_next(p);
		while (tp_trace_lex_is_punct(p, '.')) {
			tp_trace_lex_next(p);
			if (p->kind != T_IDENT || n + 1 + strlen(p->text) > TSDL_TOK_MAX)
				return tp_trace_tsdl_fail(p, -EINVAL);
			key[n++] = '.';
			strcpy(key + n, p->text);
			n += strlen(p->text);
			tp_trace_lex_next(p);
		}
		if (tp_trace_lex_is_punct(p, '=')) {
			struct tsdl_value v;

			tp_trace_lex_next(p);
			if (tp_trace_lex_value(p, &v) || set_value(p, b, c, key, &v))
				return p->err;
		} else if (tp_trace_lex_is_punct(p, ':')) {
			struct rt_type *t;

			tp_trace_lex_next(p);
			if (tp_trace_tsdl_type(p, &t) || set_type(p, b, c, key, t))
				return p->err;
		} else {
			return tp_trace_tsdl_fail(p, -EINVAL);
		}
		if (tp_trace_lex_expect(p, ';'))
			return p->err;
	}
	tp_trace_lex_next(p);
	return tp_trace_lex_expect(p, ';');
}

static int parse_top(struct tsdl_parser *p)
{
	struct tsdl *t = p->t;

	tp_trace_lex_next(p);
	while (!p->err && p->kind != T_EOF) {
		struct block_ctx c = {0};

		if (tp_trace_lex_is_word(p, "typealias")) {
			tp_trace_tsdl_typealias(p);
		} else if (tp_trace_lex_is_word(p, "trace")) {
			parse_block(p, B_TRACE, &c);
		} else if (tp_trace_lex_is_word(p, "env")) {
			parse_block(p, B_ENV, &c);
		} else if (tp_trace_lex_is_word(p, "callsite")) {
			parse_block(p, B_CALLSITE, &c);
		} else if (tp_trace_lex_is_word(p, "clock")) {
			if (t->nr_clocks == TSDL_MAX_CLOCKS)
				return tp_trace_tsdl_fail(p, -EINVAL);
			c.clock = &t->clocks[t->nr_clocks];
			c.clock->freq = 1000000000;
			if (!parse_block(p, B_CLOCK, &c) && !c.clock->name)
				return tp_trace_tsdl_fail(p, -EINVAL);
			t->nr_clocks++;
		} else if (tp_trace_lex_is_word(p, "stream")) {
			if (t->nr_streams == TSDL_MAX_STREAMS)
				return tp_trace_tsdl_fail(p, -EINVAL);
			c.stream = &t->streams[t->nr_streams];
			if (!parse_block(p, B_STREAM, &c))
				t->nr_streams++;
		} else if (tp_trace_lex_is_word(p, "event")) {
			struct tsdl_event ev = {0};

			if (t->nr_events == TSDL_MAX_EVENTS)
				return tp_trace_tsdl_fail(p, -EINVAL);
			c.event = &ev;
			if (parse_block(p, B_EVENT, &c))
				break;
			if (!c.has_stream_id)
				ev.stream_id = UINT64_MAX; /* resolved once all streams are known */
			if (!(t->nr_events & (t->nr_events + 1)) || !t->events) {
				struct tsdl_event *ne =
				    realloc(t->events, (t->nr_events * 2 + 2) * sizeof(*ne));

				if (!ne)
					return tp_trace_tsdl_fail(p, -ENOMEM);
				t->events = ne;
			}
			t->events[t->nr_events++] = ev;
		} else if (tp_trace_lex_is_word(p, "struct") || tp_trace_lex_is_word(p, "enum") ||
			   tp_trace_lex_is_word(p, "variant")) {
			struct rt_type *ty;

			if (!tp_trace_tsdl_type(p, &ty))
				tp_trace_lex_expect(p, ';');
		} else {
			return tp_trace_tsdl_fail(p, p->kind == T_IDENT ? -ENOTSUP : -EINVAL);
		}
	}
	return p->err;
}

/* The decoder handles structs (nested ones and variants are flattened) of integers,
 * floats, strings and arrays or sequences of byte-sized integers laid out without gaps. */
static int check_struct(const struct rt_type *t, int depth)
{
	int err;

	if (!t)
		return 0;
	if ((t->kind != RT_STRUCT && t->kind != RT_VARIANT) || depth > TSDL_MAX_DEPTH)
		return -ENOTSUP;
	if (t->kind == RT_VARIANT && t->tag_field == UINT32_MAX)
		return -EINVAL; /* a variant outside a struct, or with no tag */
	for (uint32_t i = 0; i < t->nr_fields; i++) {
		const struct rt_type *f = t->fields[i].type;

		if (f->kind == RT_ARRAY || f->kind == RT_SEQ) {
			const struct rt_type *e = f->elem;

			if (e->kind != RT_INT || e->bits % 8 || e->align > e->bits || e->align < 8)
				return -ENOTSUP;
			if (f->kind == RT_SEQ && t->fields[f->len_field].type->kind != RT_INT)
				return -EINVAL;
		} else if (f->kind == RT_STRUCT || f->kind == RT_VARIANT) {
			if ((err = check_struct(f, depth + 1)))
				return err;
		}
	}
	return 0;
}

struct tsdl_stream *tp_trace_tsdl_stream(struct tsdl *t, uint64_t id)
{
	for (uint32_t i = 0; i < t->nr_streams; i++)
		if (t->streams[i].id == id)
			return &t->streams[i];
	return NULL;
}

static int resolve(struct tsdl_parser *p)
{
	struct tsdl *t = p->t;
	int err;

	if (!t->nr_streams)
		t->nr_streams = 1; /* the implicit stream class 0, without headers */
	for (uint32_t i = 0; i < t->nr_streams; i++) {
		struct tsdl_stream *s = &t->streams[i];

		if (tp_trace_tsdl_stream(t, s->id) != s)
			return -EINVAL;
		if ((err = check_struct(s->packet_context, 0)) ||
		    (err = check_struct(s->event_header, 0)) ||
		    (err = check_struct(s->event_context, 0)))
			return err;
	}
	if ((err = check_struct(t->packet_header, 0)))
		return err;
	for (uint32_t i = 0; i < t->nr_events; i++) {
		struct tsdl_event *e = &t->events[i];
		struct tsdl_stream *s;

		if (e->stream_id == UINT64_MAX && t->nr_streams == 1)
			e->stream_id = t->streams[0].id;
		s = tp_trace_tsdl_stream(t, e->stream_id);
		if (!s || !e->name || e->id >= TSDL_MAX_EVENTS)
			return -EINVAL;
		if ((err = check_struct(e->fields, 0)))
			return err;
		if (e->id >= s->nr_ids)
			s->nr_ids = (uint32_t)e->id + 1;
	}
	for (uint32_t i = 0; i < t->nr_streams; i++) {
		struct tsdl_stream *s = &t->streams[i];

		s->by_id = tp_trace_tsdl_alloc(p, (s->nr_ids + 1) * sizeof(*s->by_id));
		if (!s->by_id)
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < t->nr_events; i++) {
		struct tsdl_event *e = &t->events[i];
		struct tsdl_stream *s = tp_trace_tsdl_stream(t, e->stream_id);

		if (s->by_id[e->id])
			return -EINVAL;
		s->by_id[e->id] = e;
	}
	return 0;
}

int tp_trace_tsdl_parse(const char *text, size_t len, struct tsdl **out)
{
	struct tsdl_parser p = {.s = text, .end = text + len};
	int err;

	p.t = calloc(1, sizeof(*p.t));
	if (!p.t)
		return -ENOMEM;
	err = parse_top(&p);
	if (!err)
		err = resolve(&p);
	free(p.aliases);
	if (err) {
		tp_trace_tsdl_free(p.t);
		return err;
	}
	*out = p.t;
	return 0;
}

void tp_trace_tsdl_free(struct tsdl *t)
{
	struct tsdl_arena *b, *n;

	if (!t)
		return;
	for (b = t->arena; b; b = n) {
		n = b->next;
		free(b);
	}
	free(t->events);
	free(t);
}
