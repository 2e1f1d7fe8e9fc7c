/* The CTF reader: packets and events of the traces we write (and of any trace within our
 * TSDL subset), from a directory or from memory, merged across streams in time order.
 * Traces are untrusted: every read is checked against the packet's content size. */
#include "trace/trace-priv.h"
#include "trace/tsdl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_STREAMS 65536
#define MAX_METADATA (64u << 20)
#define MAX_READ_PACKET (256ull << 20)
#define PROBE 4096u

struct cursor {
	const uint8_t *mem; /* whole stream when in memory, else NULL */
	int fd;
	uint64_t size;
	uint64_t off; /* next packet */
	uint8_t *buf; /* packet copy, for files */
	size_t cap;
	const uint8_t *pkt;
	uint64_t content, pos; /* bytes */
	struct tsdl_stream *sc;
	uint64_t clock; /* current value of the stream's clock */
	int clock_idx;
	uint64_t disc_prev;
	struct tp_trace_field *fields, *scratch;
	char *text; /* text arrays of the current event, NUL-terminated (keep_text) */
	size_t text_used, text_cap;
	struct tp_trace_event ev;
	bool has_ev, done;
	int err;		   /* to report at the next tp_trace_reader_next */
	uint64_t pkt_off, err_off; /* the current packet, and where reading stopped */
	char *name;		   /* the stream's file, for messages */
};

struct tp_trace_reader {
	struct tsdl *t;
	struct cursor *cur;
	size_t nr;
	long last;   /* cursor whose event was returned last */
	long failed; /* cursor whose error was returned last */
	bool primed;
	uint64_t discarded;
	char *metadata; /* owned copy, for directories */
	char *unpacked; /* the text of packetized metadata */
};

static const char *display(const char *name)
{
	return name[0] == '_' ? name + 1 : name;
}

static bool big_endian(const struct tp_trace_reader *r, const struct rt_type *t)
{
	return t->byte_order == 2 || (t->byte_order == 0 && r->t->big_endian);
}

static uint64_t get_int(const uint8_t *p, unsigned int bytes, bool be, bool is_signed)
{
	uint64_t v = 0;

	for (unsigned int i = 0; i < bytes; i++)
		v |= (uint64_t)p[be ? bytes - 1 - i : i] << (8 * i);
	if (is_signed && bytes < 8 && (v >> (8 * bytes - 1)) & 1)
		v |= ~0ull << (8 * bytes);
	return v;
}

uint64_t tp_trace_field_elem(const struct tp_trace_field *f, uint32_t i)
{
	if (!f->data || i >= f->count || !f->bits)
		return 0;
	return get_int(f->data + (size_t)i * (f->bits / 8), f->bits / 8, f->big_endian,
		       f->is_signed);
}

const struct tp_trace_field *tp_trace_event_field(const struct tp_trace_event *ev, const char *name)
{
	for (uint32_t i = 0; i < ev->nr_fields; i++)
		if (!strcmp(ev->fields[i].name, name))
			return &ev->fields[i];
	return NULL;
}

static void update_clock(struct cursor *c, const struct rt_type *t, uint64_t v)
{
	uint64_t mask, low;

	c->clock_idx = t->clock;
	if (t->bits == 64) {
		c->clock = v;
		return;
	}
	/* A narrow timestamp holds the low bits of the clock; a smaller value has wrapped. */
	mask = (1ull << t->bits) - 1;
	low = c->clock & mask;
	c->clock = (c->clock & ~mask) | (v & mask);
	if ((v & mask) < low)
		c->clock += mask + 1;
}

static bool align_pos(uint64_t *pos, uint32_t align, uint64_t end)
{
	uint64_t p = (*pos + align - 1) & ~((uint64_t)align - 1);

	if (p > end || p < *pos)
		return false;
	*pos = p;
	return true;
}

/* @bits bits at bit @at of @pkt: CTF packs little-endian fields from the low bit of each
 * byte and big-endian ones from the high bit. */
static uint64_t get_bits(const uint8_t *pkt, uint64_t at, unsigned int bits, bool be,
			 bool is_signed)
{
	uint64_t v = 0;

	if (at % 8 == 0 && bits % 8 == 0)
		return get_int(pkt + at / 8, bits / 8, be, is_signed);
	for (unsigned int i = 0; i < bits; i++) {
		uint64_t b = at + i;

		if (be)
			v = (v << 1) | ((pkt[b / 8] >> (7 - b % 8)) & 1);
		else
			v |= (uint64_t)((pkt[b / 8] >> (b % 8)) & 1) << i;
	}
	if (is_signed && bits < 64 && (v >> (bits - 1)) & 1)
		v |= ~0ull << bits;
	return v;
}

static const char *enum_label(const struct rt_type *t, uint64_t v)
{
	for (uint32_t i = 0; i < t->nr_maps; i++) {
		const struct rt_enum_map *m = &t->maps[i];

		if (t->is_signed ? (int64_t)v >= (int64_t)m->lo && (int64_t)v <= (int64_t)m->hi
				 : v >= m->lo && v <= m->hi)
			return m->label;
	}
	return NULL;
}

/* Text (an array of UTF8/ASCII bytes) is copied NUL-terminated, so that it reads as a
 * string; the room was reserved for the whole packet when it was loaded. */
static const char *keep_text(struct cursor *c, const uint8_t *s, uint32_t *len)
{
	const uint8_t *nul = memchr(s, 0, *len);
	char *t = c->text + c->text_used;

	if (nul)
		*len = (uint32_t)(nul - s);
	memcpy(t, s, *len);
	t[*len] = 0;
	c->text_used += *len + 1u;
	return t;
}

/* Decode a field of type @t named @name at bit *pos, not past bit @end, into out[*n...];
 * @sib holds the decoded index of each field of the enclosing struct (sequence lengths and
 * variant tags refer to them). */
static int decode_type(struct tp_trace_reader *r, struct cursor *c, const struct rt_type *t,
		       const char *name, const uint32_t *sib, const uint8_t *pkt, uint64_t *pos,
		       uint64_t end, struct tp_trace_field *out, uint32_t *n, int depth)
{
	struct tp_trace_field *f;
	const struct rt_type *e = t;

	if (!align_pos(pos, t->align, end) || depth > 16)
		return -EBADMSG;
	if (t->kind == RT_STRUCT) {
		uint32_t idx[TSDL_MAX_FIELDS];

		for (uint32_t i = 0; i < t->nr_fields; i++) {
			int err;

			idx[i] = *n;
			err = decode_type(r, c, t->fields[i].type, t->fields[i].name, idx, pkt, pos,
					  end, out, n, depth + 1);
			if (err)
				return err;
		}
		return 0;
	}
	if (t->kind == RT_VARIANT) {
		const struct tp_trace_field *tag = &out[sib[t->tag_field]];
		const char *label = tag->label;

		for (uint32_t i = 0; label && i < t->nr_fields; i++)
			if (!strcmp(t->fields[i].name, label))
				return decode_type(r, c, t->fields[i].type, t->fields[i].name, sib,
						   pkt, pos, end, out, n, depth + 1);
		return -EBADMSG; /* a tag value with no option */
	}
	f = &out[(*n)++];
	memset(f, 0, sizeof(*f));
	f->name = display(name);
	if (t->kind == RT_INT) {
		if (end - *pos < t->bits)
			return -EBADMSG;
		f->type = TP_TRACE_INT;
		f->u = get_bits(pkt, *pos, t->bits, big_endian(r, t), t->is_signed);
		*pos += t->bits;
		/* a packet's end time is no reference for the narrow timestamps of its events */
		if (t->clock >= 0 && strcmp(f->name, "timestamp_end"))
			update_clock(c, t, f->u);
		if (t->nr_maps)
			f->label = enum_label(t, f->u);
	} else if (t->kind == RT_FLOAT) {
		uint64_t bits;

		if (end - *pos < t->bits)
			return -EBADMSG;
		bits = get_bits(pkt, *pos, t->bits, big_endian(r, t), false);
		f->type = TP_TRACE_FLOAT;
		if (t->bits == 32) {
			uint32_t b32 = (uint32_t)bits;
			float x;

			memcpy(&x, &b32, 4);
			f->d = x;
		} else {
			memcpy(&f->d, &bits, 8);
		}
		*pos += t->bits;
	} else if (t->kind == RT_STRING) {
		const uint8_t *nul = memchr(pkt + *pos / 8, 0, (end - *pos) / 8);

		if (!nul)
			return -EBADMSG;
		f->type = TP_TRACE_STRING;
		f->str = (const char *)pkt + *pos / 8;
		f->count = (uint32_t)(nul - (pkt + *pos / 8));
		*pos += (f->count + 1ull) * 8;
		return 0;
	} else {
		uint64_t count = t->length, bits;

		e = t->elem;
		if (t->kind == RT_SEQ) {
			const struct tp_trace_field *len = &out[sib[t->len_field]];

			if (len->type != TP_TRACE_INT || (len->is_signed && len->s < 0))
				return -EBADMSG;
			count = len->u;
		}
		bits = count * e->bits;
		if (count > UINT32_MAX || (end - *pos) / e->bits < count)
			return -EBADMSG;
		f->type = t->kind == RT_SEQ ? TP_TRACE_SEQ : TP_TRACE_ARRAY;
		if (t->kind == RT_SEQ && e->bits == 8 && !e->is_signed && e->base == 10 &&
		    !e->is_text)
			f->type = TP_TRACE_BYTES;
		f->data = pkt + *pos / 8;
		f->count = (uint32_t)count;
		*pos += bits;
		if (e->is_text && e->bits == 8 && c->text &&
		    c->text_used + f->count + 1 <= c->text_cap) {
			f->type = TP_TRACE_STRING;
			f->str = keep_text(c, f->data, &f->count);
			f->data = NULL;
			return 0;
		}
	}
	f->bits = e->bits;
	f->base = e->base;
	f->is_signed = e->is_signed;
	f->big_endian = big_endian(r, e);
	return 0;
}

/* Decode struct @st (NULL: nothing) at bit *pos into @out, flattened. */
static int decode_struct(struct tp_trace_reader *r, struct cursor *c, const struct rt_type *st,
			 const uint8_t *pkt, uint64_t *pos, uint64_t end,
			 struct tp_trace_field *out)
{
	uint32_t n = 0;

	if (!st)
		return 0;
	return decode_type(r, c, st, "", NULL, pkt, pos, end, out, &n, 0);
}

/* The last field named @name of decoded struct @st: in LTTng's event headers the id and
 * timestamp of the extended variant come after the compact id. */
static const struct tp_trace_field *find(const struct rt_type *st, const struct tp_trace_field *f,
					 const char *name)
{
	for (uint32_t i = st ? st->nr_flat : 0; i-- > 0;)
		if (f[i].name && !strcmp(f[i].name, name))
			return &f[i];
	return NULL;
}

static const struct tp_trace_field *find_int(const struct rt_type *st,
					     const struct tp_trace_field *f, const char *name)
{
	const struct tp_trace_field *x = find(st, f, name);

	return x && x->type == TP_TRACE_INT ? x : NULL;
}

/* Bring @len bytes of the stream at @off into reach. */
static const uint8_t *fetch(struct cursor *c, uint64_t off, uint64_t len)
{
	uint64_t done = 0;

	if (c->mem)
		return c->mem + off;
	if (len > c->cap) {
		uint8_t *nb = realloc(c->buf, len);

		if (!nb)
			return NULL;
		c->buf = nb;
		c->cap = len;
	}
	while (done < len) {
		ssize_t n = pread(c->fd, c->buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return NULL; /* truncated under us */
		done += (uint64_t)n;
	}
	return c->buf;
}

static int load_packet(struct tp_trace_reader *r, struct cursor *c)
{
	struct tsdl *t = r->t;
	const struct tp_trace_field *f;
	const struct rt_type *ctx;
	uint64_t rem = c->size - c->off, pos = 0, psize = rem, content;
	uint64_t probe_bits;
	uint64_t probe = rem < PROBE ? rem : PROBE;
	const uint8_t *p = fetch(c, c->off, probe);
	int err;

	if (!p)
		return -EIO;
	probe_bits = probe * 8;
	err = decode_struct(r, c, t->packet_header, p, &pos, probe_bits, c->scratch);
	if (err)
		return err;
	f = find_int(t->packet_header, c->scratch, "magic");
	if (f && f->u != TP_TRACE_MAGIC)
		return -EBADMSG;
	f = find(t->packet_header, c->scratch, "uuid");
	if (f && t->has_uuid &&
	    (f->type != TP_TRACE_ARRAY || f->count != 16 || f->bits != 8 ||
	     memcmp(f->data, t->uuid, 16)))
		return -EBADMSG;
	f = find_int(t->packet_header, c->scratch, "stream_id");
	if (f)
		c->sc = tp_trace_tsdl_stream(t, f->u);
	else
		c->sc = t->nr_streams == 1 ? &t->streams[0] : NULL;
	if (!c->sc)
		return -EBADMSG;
	ctx = c->sc->packet_context;
	err = decode_struct(r, c, ctx, p, &pos, probe_bits, c->scratch);
	if (err)
		return err;
	if ((f = find_int(ctx, c->scratch, "packet_size"))) {
		if (f->u % 8)
			return -EBADMSG;
		psize = f->u / 8;
	}
	content = psize * 8; /* bits, as the positions in the packet */
	if ((f = find_int(ctx, c->scratch, "content_size")))
		content = f->u;
	if (!psize || psize > rem || psize > MAX_READ_PACKET || content > psize * 8 ||
	    content < pos)
		return -EBADMSG;
	if ((f = find_int(ctx, c->scratch, "events_discarded"))) {
		/* A cumulative counter: the packet records what was lost since the last one. */
		if (f->u > c->disc_prev) {
			r->discarded += f->u - c->disc_prev;
			c->disc_prev = f->u;
		}
	}
	p = fetch(c, c->off, psize);
	if (!p)
		return -EIO;
	/* room for every text array of any event of this packet, and their NULs */
	if (c->text_cap < psize + r->t->max_fields + 1) {
		char *nt = realloc(c->text, psize + r->t->max_fields + 1);

		if (!nt)
			return -ENOMEM;
		c->text = nt;
		c->text_cap = psize + r->t->max_fields + 1;
	}
	c->pkt = p;
	c->content = content;
	c->pos = pos;
	c->off += psize;
	return 0;
}

/* Cycles of a clock that is not 1 GHz to ns, truncated, computed in double precision as
 * babeltrace2 does, so that both readers print the same time to the nanosecond. */
static uint64_t cycles_ns(uint64_t freq, uint64_t cycles)
{
	double ns;

	if (freq == 1000000000u)
		return cycles;
	ns = 1e9 * (double)cycles / (double)freq;
	return ns >= (double)UINT64_MAX ? UINT64_MAX : (uint64_t)ns;
}

/* The clock's offset is first normalised to whole seconds and fewer cycles than a second's
 * (as CTF readers do); then seconds, offset cycles and the value are converted apart. */
static int64_t to_ns(const struct tsdl *t, int idx, uint64_t cycles)
{
	const struct tsdl_clock *k;
	__int128 ns;

	if (idx < 0 || (uint32_t)idx >= t->nr_clocks)
		return (int64_t)cycles;
	k = &t->clocks[idx];
	ns = ((__int128)k->offset_s + (__int128)(k->offset / k->freq)) * 1000000000 +
	     cycles_ns(k->freq, k->offset % k->freq) + cycles_ns(k->freq, cycles);
	if (ns < 0)
		return 0;
	return ns > INT64_MAX ? INT64_MAX : (int64_t)ns;
}

static int decode_event(struct tp_trace_reader *r, struct cursor *c)
{
	struct tsdl_stream *sc = c->sc;
	const struct tp_trace_field *f;
	struct tsdl_event *ec = NULL;
	uint64_t start = c->pos, id = 0;
	int err;

	c->text_used = 0;
	err = decode_struct(r, c, sc->event_header, c->pkt, &c->pos, c->content, c->scratch);
	if (err)
		return err;
	if ((f = find_int(sc->event_header, c->scratch, "id")))
		id = f->u;
	else if (sc->nr_ids != 1)
		return -EBADMSG;
	if (id < sc->nr_ids)
		ec = sc->by_id[id];
	if (!ec)
		return -EBADMSG;
	err = decode_struct(r, c, sc->event_context, c->pkt, &c->pos, c->content, c->scratch);
	if (err)
		return err;
	c->ev.pid = c->ev.tid = -1;
	if ((f = find_int(sc->event_context, c->scratch, "pid")) ||
	    (f = find_int(sc->event_context, c->scratch, "vpid")))
		c->ev.pid = f->s;
	if ((f = find_int(sc->event_context, c->scratch, "tid")) ||
	    (f = find_int(sc->event_context, c->scratch, "vtid")))
		c->ev.tid = f->s;
	err = decode_struct(r, c, ec->fields, c->pkt, &c->pos, c->content, c->fields);
	if (err)
		return err;
	if (c->pos == start)
		return -EBADMSG; /* an empty event would never end */
	c->ev.name = ec->name;
	c->ev.id = (uint32_t)id;
	c->ev.cycles = c->clock;
	c->ev.ts = (uint64_t)to_ns(r->t, c->clock_idx, c->clock);
	c->ev.fields = c->fields;
	c->ev.nr_fields = ec->fields ? ec->fields->nr_flat : 0;
	return 0;
}

/* Decode the next event of @c into c->ev; errors end the stream. */
static void advance(struct tp_trace_reader *r, struct cursor *c)
{
	int err = 0;

	c->has_ev = false;
	while (!c->done) {
		if (!c->pkt || c->pos >= c->content) {
			c->pkt = NULL;
			if (c->off >= c->size) {
				c->done = true;
				return;
			}
			c->pkt_off = c->off;
			err = load_packet(r, c);
		} else {
			err = decode_event(r, c);
			if (!err) {
				c->has_ev = true;
				return;
			}
		}
		if (err) {
			c->err = err;
			c->err_off = c->pkt ? c->pkt_off + c->pos / 8 : c->pkt_off;
			c->done = true;
		}
	}
}

int tp_trace_reader_next(struct tp_trace_reader *r, const struct tp_trace_event **ev)
{
	long best = -1;

	if (!r->primed) {
		for (size_t i = 0; i < r->nr; i++)
			advance(r, &r->cur[i]);
		r->primed = true;
	} else if (r->last >= 0) {
		advance(r, &r->cur[r->last]);
		r->last = -1;
	}
	for (size_t i = 0; i < r->nr; i++) {
		struct cursor *c = &r->cur[i];

		if (c->err) {
			int err = c->err;

			c->err = 0;
			r->failed = (long)i;
			return err;
		}
		if (c->has_ev && (best < 0 || c->ev.ts < r->cur[best].ev.ts))
			best = (long)i;
	}
	if (best < 0)
		return 0;
	r->last = best;
	*ev = &r->cur[best].ev;
	return 1;
}

const char *tp_trace_reader_error_at(const struct tp_trace_reader *r, uint64_t *offset)
{
	const struct cursor *c;

	if (r->failed < 0)
		return NULL;
	c = &r->cur[r->failed];
	*offset = c->err_off;
	return c->name;
}

uint64_t tp_trace_reader_discarded(const struct tp_trace_reader *r)
{
	return r->discarded;
}

size_t tp_trace_reader_nr_streams(const struct tp_trace_reader *r)
{
	return r->nr;
}

void tp_trace_reader_close(struct tp_trace_reader *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nr; i++) {
		if (!r->cur[i].mem && r->cur[i].fd >= 0)
			close(r->cur[i].fd);
		free(r->cur[i].buf);
		free(r->cur[i].fields);
		free(r->cur[i].text);
		free(r->cur[i].name);
	}
	free(r->cur);
	tp_trace_tsdl_free(r->t);
	free(r->metadata);
	free(r->unpacked);
	free(r);
}

/* Packetized metadata, as LTTng writes it: packets of a 37-byte header (magic, uuid,
 * checksum, content and packet sizes in bits, compression, encryption and checksum schemes,
 * major, minor) followed by TSDL text.  The text of every packet, joined, in @out. */
#define META_MAGIC 0x75d11d57u
#define META_HEADER 37u

static int unpack_metadata(const char *m, size_t len, char **out, size_t *out_len)
{
	const uint8_t *b = (const uint8_t *)m;
	bool be = get_int(b, 4, true, false) == META_MAGIC;
	size_t off = 0, n = 0;
	char *text = malloc(len + 1);

	if (!text)
		return -ENOMEM;
	while (off < len) {
		uint64_t content, psize;

		if (len - off < META_HEADER || get_int(b + off, 4, be, false) != META_MAGIC)
			goto bad;
		content = get_int(b + off + 24, 4, be, false);
		psize = get_int(b + off + 28, 4, be, false);
		if (content % 8 || psize % 8 || content / 8 < META_HEADER || content > psize)
			goto bad;
		if (b[off + 32] || b[off + 33] || b[off + 34]) {
			free(text);
			return -ENOTSUP; /* compressed, encrypted or checksummed */
		}
		content /= 8;
		psize /= 8;
		if (content > len - off)
			goto bad;
		memcpy(text + n, m + off + META_HEADER, content - META_HEADER);
		n += content - META_HEADER;
		off += psize < len - off ? psize : len - off;
	}
	text[n] = 0;
	*out = text;
	*out_len = n;
	return 0;
bad:
	free(text);
	return -EINVAL;
}

static int reader_new(const char *metadata, size_t len, size_t nr, struct tp_trace_reader **out)
{
	struct tp_trace_reader *r;
	char *unpacked = NULL;
	int err;

	if (nr > MAX_STREAMS)
		return -E2BIG;
	if (len >= 4 && (!memcmp(metadata, "\x57\x1d\xd1\x75", 4) ||
			 !memcmp(metadata, "\x75\xd1\x1d\x57", 4))) {
		err = unpack_metadata(metadata, len, &unpacked, &len);
		if (err)
			return err;
		metadata = unpacked;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		free(unpacked);
		return -ENOMEM;
	}
	r->unpacked = unpacked;
	r->last = r->failed = -1;
	r->cur = calloc(nr ? nr : 1, sizeof(*r->cur));
	if (!r->cur) {
		free(unpacked);
		free(r);
		return -ENOMEM;
	}
	err = tp_trace_tsdl_parse(metadata, len, &r->t);
	if (err) {
		free(unpacked);
		free(r->cur);
		free(r);
		return err;
	}
	for (size_t i = 0; i < nr; i++) {
		struct cursor *c = &r->cur[i];

		c->fd = -1;
		c->clock_idx = -1;
		c->ev.stream = (uint32_t)i;
		/* Two halves: event payload fields and header/context scratch. */
		c->fields = calloc(2 * ((size_t)r->t->max_fields + 1), sizeof(*c->fields));
		if (!c->fields) {
			r->nr = i;
			tp_trace_reader_close(r);
			return -ENOMEM;
		}
		c->scratch = c->fields + r->t->max_fields + 1;
	}
	r->nr = nr;
	*out = r;
	return 0;
}

int tp_trace_reader_open_mem(const char *metadata, size_t len,
			     const struct tp_trace_mem_stream *streams, size_t nr_streams,
			     struct tp_trace_reader **out)
{
	struct tp_trace_reader *r;
	int err = reader_new(metadata, len, nr_streams, &r);

	if (err)
		return err;
	for (size_t i = 0; i < nr_streams; i++) {
		r->cur[i].mem = streams[i].data ? streams[i].data : (const uint8_t *)"";
		r->cur[i].size = streams[i].data ? streams[i].size : 0;
	}
	*out = r;
	return 0;
}

int tp_trace_dir_metadata(int dirfd, char **out, size_t *len)
{
	struct stat st;
	size_t done = 0;
	char *buf;
	int fd = openat(dirfd, "metadata", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > MAX_METADATA) {
		close(fd);
		return -EINVAL;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (done < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + done, (size_t)st.st_size - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	close(fd);
	buf[done] = 0;
	*out = buf;
	*len = done;
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strverscmp(*(char *const *)a, *(char *const *)b);
}

/* Regular, non-hidden files other than the metadata, in version order (stream_2 before
 * stream_10). */
int tp_trace_dir_streams(int dirfd, char ***out, size_t *nr)
{
	DIR *d = fdopendir(dup(dirfd));
	struct dirent *de;
	char **names = NULL;
	size_t n = 0;
	int err = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		struct stat st;
		char **nn;

		if (de->d_name[0] == '.' || !strcmp(de->d_name, "metadata"))
			continue;
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
			continue;
		if (n == MAX_STREAMS) {
			err = -E2BIG;
			break;
		}
		nn = realloc(names, (n + 1) * sizeof(*names));
		if (!nn || !(nn[n] = strdup(de->d_name))) {
			names = nn ? nn : names;
			err = -ENOMEM;
			break;
		}
		names = nn;
		n++;
	}
	closedir(d);
	if (err) {
		while (n--)
			free(names[n]);
		free(names);
		return err;
	}
	if (n)
		qsort(names, n, sizeof(*names), cmp_names);
	*out = names;
	*nr = n;
	return 0;
}

int tp_trace_reader_open(const char *dir, struct tp_trace_reader **out)
{
	struct tp_trace_reader *r = NULL;
	char *metadata = NULL, **names = NULL;
	size_t len = 0, nr = 0;
	int dirfd, err;

	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	err = tp_trace_dir_metadata(dirfd, &metadata, &len);
	if (err)
		goto out;
	err = tp_trace_dir_streams(dirfd, &names, &nr);
	if (err)
		goto out;
	err = reader_new(metadata, len, nr, &r);
	if (err)
		goto out;
	r->metadata = metadata;
	metadata = NULL;
	for (size_t i = 0; i < nr; i++) {
		struct stat st;
		struct cursor *c = &r->cur[i];

		c->name = names[i];
		names[i] = NULL;
		c->fd = openat(dirfd, c->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (c->fd < 0 || fstat(c->fd, &st)) {
			err = -errno;
			goto out;
		}
		c->size = (uint64_t)st.st_size;
	}
	*out = r;
	r = NULL;
out:
	tp_trace_reader_close(r);
	for (size_t i = 0; i < nr; i++)
		free(names[i]);
	free(names);
	free(metadata);
	close(dirfd);
	return err;
}
