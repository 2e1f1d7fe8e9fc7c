/* The TSDL subset our reader understands: integers (bit fields too), enumerations,
 * IEEE-754 binary32/64 floating point, strings, structs, variants tagged by an enumeration
 * of the same struct (what LTTng-UST's event headers use), fixed arrays and sequences of
 * byte-sized integers; trace, env, clock, stream and event blocks.
 * Everything parsed here comes from an untrusted file, so sizes and nesting are bounded. */
#ifndef TP_TRACE_TSDL_H
#define TP_TRACE_TSDL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum rt_kind { RT_INT, RT_STRING, RT_STRUCT, RT_ARRAY, RT_SEQ, RT_FLOAT, RT_VARIANT };

struct rt_type;

struct rt_field {
	char *name; /* as written, with its escape underscore */
	struct rt_type *type;
};

/* One label of an enumeration: the values lo..hi (as signed or unsigned as the container). */
struct rt_enum_map {
	char *label;
	uint64_t lo, hi;
};

struct rt_type {
	enum rt_kind kind;
	uint32_t align; /* bits, a power of two */
	/* RT_INT (1..64 bits), RT_FLOAT (bits 32 or 64, IEEE-754) */
	uint8_t bits, base;
	uint8_t byte_order; /* 0: the trace's, 1: le, 2: be */
	bool is_signed;
	bool is_text; /* RT_INT with encoding UTF8 or ASCII: arrays of it are text */
	int clock;    /* index in tsdl.clocks of the clock this integer maps to, or -1 */
	/* RT_INT of an enumeration */
	struct rt_enum_map *maps;
	uint32_t nr_maps;
	/* RT_STRUCT; RT_VARIANT: its options, chosen by the label of the tag */
	struct rt_field *fields;
	uint32_t nr_fields;
	uint32_t nr_flat; /* RT_STRUCT, RT_VARIANT: decoded fields, nested ones counted */
	/* RT_ARRAY, RT_SEQ */
	struct rt_type *elem;
	uint32_t length;    /* RT_ARRAY */
	uint32_t len_field; /* RT_SEQ: index of the length in the enclosing struct */
	/* RT_VARIANT: the enumeration field of the enclosing struct that selects the option */
	char *tag_name;
	uint32_t tag_field; /* index in the enclosing struct, UINT32_MAX until bound */
};

struct tsdl_clock {
	char *name;
	uint64_t freq;
	int64_t offset_s;
	uint64_t offset;
};

struct tsdl_event {
	char *name;
	uint64_t id, stream_id;
	struct rt_type *fields; /* NULL: no payload */
};

struct tsdl_stream {
	uint64_t id;
	struct rt_type *packet_context, *event_header, *event_context;
	struct tsdl_event **by_id; /* events of this stream indexed by id */
	uint32_t nr_ids;
};

#define TSDL_MAX_CLOCKS 8
#define TSDL_MAX_STREAMS 64
#define TSDL_MAX_EVENTS 65536
#define TSDL_MAX_FIELDS 1024

struct tsdl {
	uint8_t uuid[16];
	bool has_uuid, big_endian;
	struct rt_type *packet_header;
	struct tsdl_clock clocks[TSDL_MAX_CLOCKS];
	uint32_t nr_clocks;
	struct tsdl_stream streams[TSDL_MAX_STREAMS];
	uint32_t nr_streams;
	struct tsdl_event *events;
	uint32_t nr_events;
	uint32_t max_fields; /* largest decoded field count (nr_flat) of any struct */
	struct tsdl_arena *arena;
};

/* 0 or -EINVAL (syntax, semantic error), -ENOTSUP (valid TSDL beyond our subset), -ENOMEM. */
int tp_trace_tsdl_parse(const char *text, size_t len, struct tsdl **out);
void tp_trace_tsdl_free(struct tsdl *t);
struct tsdl_stream *tp_trace_tsdl_stream(struct tsdl *t, uint64_t id);

/* ---- Internal to tsdl.c and tsdl-lex.c -------------------------------------------------- */

#define TSDL_TOK_MAX 255
#define TSDL_MAX_DEPTH 8

struct tsdl_arena {
	struct tsdl_arena *next;
	max_align_t data[];
};

enum tsdl_tok { T_EOF, T_IDENT, T_NUM, T_STR, T_PUNCT };

struct tsdl_alias {
	char *name;
	struct rt_type *type;
};

struct tsdl_parser {
	const char *s, *end;
	enum tsdl_tok kind;
	char text[TSDL_TOK_MAX + 1];
	uint64_t num;
	char punct; /* ':' stands for ":=" */
	int err;
	int depth;
	struct tsdl *t;
	struct tsdl_alias *aliases;
	uint32_t nr_aliases;
};

/* A value: number (possibly negative), string, or dotted identifier (clock.x.value). */
struct tsdl_value {
	enum tsdl_tok kind;
	uint64_t num;
	bool neg;
	char text[TSDL_TOK_MAX + 1];
};

/* Allocations live as long as the struct tsdl. */
void *tp_trace_tsdl_alloc(struct tsdl_parser *p, size_t size);
char *tp_trace_tsdl_dup(struct tsdl_parser *p, const char *s);
/* A type at the cursor (tsdl-type.c); 0 or the parser's error. */
int tp_trace_tsdl_type(struct tsdl_parser *p, struct rt_type **out);
/* "typealias TYPE := NAME;" at the cursor. */
int tp_trace_tsdl_typealias(struct tsdl_parser *p);
/* Records the first error and returns it. */
int tp_trace_tsdl_fail(struct tsdl_parser *p, int err);
void tp_trace_lex_next(struct tsdl_parser *p);
bool tp_trace_lex_is_punct(struct tsdl_parser *p, char c);
bool tp_trace_lex_is_word(struct tsdl_parser *p, const char *w);
int tp_trace_lex_expect(struct tsdl_parser *p, char c);
int tp_trace_lex_value(struct tsdl_parser *p, struct tsdl_value *v);
bool tp_trace_lex_bool(const struct tsdl_value *v, bool *out);
/* 0 native, 1 le, 2 be; -1 if not a byte order. */
int tp_trace_lex_byte_order(const struct tsdl_value *v);
/* 2, 8, 10 or 16; -1 if not a base. */
int tp_trace_lex_base(const struct tsdl_value *v);
bool tp_trace_lex_uuid(const char *s, uint8_t out[16]);

#endif
