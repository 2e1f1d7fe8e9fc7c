/* The reader against malformed traces (truncations, bit flips, lying sizes, hostile TSDL)
 * and against a hand-made trace in another layout (big-endian, aligned fields, a 16-bit
 * timestamp that wraps, no stream or event ids). */
#include "../tap.h"
#include "trace/trace-priv.h"
#include "util.h"

#include <errno.h>
#include <stdint.h>

static const struct tp_trace_field_desc fields[] = {
    {"n", TP_TRACE_INT, 32, false, 10, 0},
    {"s", TP_TRACE_STRING},
    {"b", TP_TRACE_BYTES},
    {"v", TP_TRACE_SEQ, 16, true, 10, 0},
};

static char *meta;
static uint8_t *stream;
static size_t mlen, slen;

static void make_trace(const char *tmp)
{
	struct tp_trace_opts o = {.packet_size = 4096};
	char *dir = util_path(tmp, "good"), *p;
	struct tp_trace_writer *w;
	struct tp_trace_producer pr;
	int id;

	tp_trace_writer_new(dir, &o, &w);
	id = tp_trace_writer_add_class(w, "t:ev", fields, 4);
	tp_trace_writer_add_class(w, "t:other", NULL, 0);
	tp_trace_writer_producer_init(w, &pr);
	for (uint32_t i = 0; i < 300; i++) {
		uint8_t *e = tp_trace_reserve(&pr, (uint16_t)id, 4 + 6 + 4 + 3 + 4 + 4);

		e = tp_trace_put_u32(e, i);
		e = tp_trace_put_str(e, "hello", 5);
		e = tp_trace_put_bytes(e, "abc", 3);
		e = tp_trace_put_u32(e, 2);
		e = tp_trace_put_u16(e, (uint16_t)i);
		tp_trace_put_u16(e, (uint16_t)-i);
		tp_trace_commit(&pr);
	}
	tp_trace_producer_fini(&pr);
	tp_trace_writer_close(w);
	p = util_path(dir, "metadata");
	meta = util_read(p, &mlen);
	free(p);
	p = util_path(dir, "stream_0");
	stream = (uint8_t *)util_read(p, &slen);
	free(p);
	free(dir);
	if (!meta || !stream || slen < 3 * 4096) {
		printf("Bail out! no trace to work on\n");
		exit(1);
	}
}

/* Events read and the first error (0 if none). */
static int64_t read_all(const char *m, size_t ml, const void *s, size_t sl, int *first_err)
{
	struct tp_trace_mem_stream ms = {s, sl};
	struct tp_trace_reader *r;
	const struct tp_trace_event *ev;
	int64_t n = 0;
	int err;

	*first_err = 0;
	err = tp_trace_reader_open_mem(m, ml, &ms, 1, &r);
	if (err) {
		*first_err = err;
		return -1;
	}
	while ((err = tp_trace_reader_next(r, &ev)) != 0) {
		if (err < 0) {
			if (!*first_err)
				*first_err = err;
			continue;
		}
		n++;
	}
	tp_trace_reader_close(r);
	return n;
}

static void test_truncations(void)
{
	int err, bad = 0;
	int64_t n = read_all(meta, mlen, stream, slen, &err), last = 0;

	is_int(n, 300, "the intact trace has 300 events");
	is_int(err, 0, "and no error");
	for (size_t len = 0; len <= slen; len += len % 4096 < 64 || len % 4096 > 4000 ? 1 : 61) {
		int64_t m = read_all(meta, mlen, stream, len, &err);

		/* Whole packets read cleanly; a cut packet is an error, never a crash. */
		if (len % 4096 == 0)
			bad += err != 0 || m < last;
		else
			bad += err != -EBADMSG || m > n;
		if (len % 4096 == 0)
			last = m;
	}
	is_int(bad, 0, "stream truncated at every length: whole packets read, cut ones refused");
	bad = 0;
	for (size_t len = 0; len < mlen; len++) {
		int64_t m = read_all(meta, len, stream, slen, &err);

		bad += m >= 0 && m != 300 && !err;
	}
	is_int(bad, 0, "metadata truncated at every length: refused, errors, or read in full");
}

static void test_flips(void)
{
	uint8_t *copy = malloc(slen);
	char *mcopy = malloc(mlen);
	int errors = 0, runs = 0, err;

	for (size_t off = 0; off < 2 * 4096; off++) {
		for (int x = 0; x < 2; x++) {
			memcpy(copy, stream, slen);
			copy[off] ^= x ? 0x80 : 0xff;
			read_all(meta, mlen, copy, slen, &err);
			errors += err != 0;
			runs++;
		}
	}
	ok(errors > 0, "%d of %d bit-flipped streams reported as malformed, none crashed", errors,
	   runs);
	errors = 0;
	for (size_t off = 0; off < mlen; off++) {
		memcpy(mcopy, meta, mlen);
		mcopy[off] = mcopy[off] == '{' ? '}' : '{';
		read_all(mcopy, mlen, stream, slen, &err);
		errors += err != 0;
	}
	ok(errors > (int)mlen / 2, "%d of %zu corrupted metadata texts refused, none crashed",
	   errors, mlen);
	free(copy);
	free(mcopy);
}

static int corrupt(size_t off, const void *bytes, size_t n)
{
	uint8_t *copy = malloc(slen);
	int err;

	memcpy(copy, stream, slen);
	memcpy(copy + off, bytes, n);
	read_all(meta, mlen, copy, slen, &err);
	free(copy);
	return err;
}

static void test_lies(void)
{
	uint64_t v;
	uint32_t magic = 0xdeadbeef;
	uint16_t id = 999;
	/* The first event: header (18 bytes) then n (4), s "hello" (6), b (4 + 3), v. */
	size_t ev = TP_PKT_HDR, seq_len = ev + TP_TRACE_EVENT_HDR + 4 + 6 + 4 + 3;

	is_int(corrupt(TP_PKT_MAGIC, &magic, 4), -EBADMSG, "wrong packet magic");
	is_int(corrupt(TP_PKT_UUID + 3, "x", 1), -EBADMSG, "uuid of another trace");
	v = 4097 * 8;
	is_int(corrupt(TP_PKT_CONTENT_SIZE, &v, 8), -EBADMSG, "content larger than the packet");
	v = 0;
	is_int(corrupt(TP_PKT_PACKET_SIZE, &v, 8), -EBADMSG, "zero packet size");
	v = (uint64_t)slen * 8 + 8 * 4096;
	is_int(corrupt(TP_PKT_PACKET_SIZE, &v, 8), -EBADMSG, "packet larger than the file");
	v = 12;
	is_int(corrupt(TP_PKT_CONTENT_SIZE, &v, 8), -EBADMSG, "content size not in bytes");
	is_int(corrupt(ev, &id, 2), -EBADMSG, "unknown event id");
	v = 0xffffffff;
	is_int(corrupt(seq_len, &v, 4), -EBADMSG, "sequence longer than the packet");
	v = (ev + TP_TRACE_EVENT_HDR + 4 + 3) * 8;
	is_int(corrupt(TP_PKT_CONTENT_SIZE, &v, 8), -EBADMSG, "content ending inside a string");
}

static int meta_err_len(const char *text, size_t len)
{
	int err;

	read_all(text, len, stream, 0, &err);
	return err;
}

static int meta_err(const char *text)
{
	return meta_err_len(text, strlen(text));
}

#define HEAD "/* CTF 1.8 */ trace { major = 1; minor = 8; byte_order = le; };\n"

static void test_bad_tsdl(void)
{
	char *bomb = malloc(4096);

	is_int(meta_err(HEAD), 0, "a trace block alone is a valid trace");
	is_int(meta_err(HEAD "event { name = x; fields := struct { floating_point { "
			     "exp_dig = 8; mant_dig = 24; } f; }; };"),
	       0, "binary32 floating point is read");
	is_int(meta_err(HEAD "event { name = x; fields := struct { floating_point { "
			     "exp_dig = 5; mant_dig = 11; } f; }; };"),
	       -ENOTSUP, "binary16 floating point: not in our subset");
	is_int(meta_err(HEAD "event { name = x; fields := struct { variant <t> { } v; }; };"),
	       -ENOTSUP, "variant whose tag is not a field of its struct");
	is_int(meta_err(HEAD "event { name = x; fields := struct { integer { size = 8; } t; "
			     "variant <t> { string s; } v; }; };"),
	       -EINVAL, "variant tagged by an integer that is not an enumeration");
	is_int(meta_err(HEAD "event { name = x; fields := struct { integer { size = 12; } f[2]; "
			     "}; };"),
	       -ENOTSUP, "array of bit fields: not in our subset");
	is_int(meta_err(HEAD "event { name = x }; "), -EINVAL, "missing semicolon");
	is_int(meta_err(HEAD "/* unterminated"), -EINVAL, "unterminated comment");
	is_int(meta_err(HEAD "event { name = \"x; };"), -EINVAL, "unterminated string");
	is_int(meta_err(HEAD "event { name = x; fields := struct { integer { size = 8; } a"
			     "[4294967296]; }; };"),
	       -EINVAL, "absurd array length");
	is_int(meta_err(HEAD "event { name = x; fields := struct { integer { size = 8; } a[n]; "
			     "}; };"),
	       -ENOTSUP, "sequence length that is not an earlier field");
	is_int(meta_err(HEAD "event { name = x; id = 1; }; event { name = y; id = 1; };"), -EINVAL,
	       "two events with one id");
	is_int(meta_err(HEAD "event { name = x; stream_id = 5; };"), -EINVAL,
	       "event of an unknown stream");
	is_int(meta_err("trace { major = 2; };"), -ENOTSUP, "CTF 2");
	is_int(meta_err("\x57\x1d\xd1\x75 packetized"), -EINVAL, "truncated packetized metadata");
	is_int(meta_err(HEAD "typealias integer { size = 8; map = clock.nope.value; } := t;"),
	       -EINVAL, "map to an unknown clock");
	strcpy(bomb, HEAD "event { name = x; fields := ");
	for (int i = 0; i < 100; i++)
		strcat(bomb, "struct { ");
	is_int(meta_err(bomb), -EINVAL, "100 nested structs refused");
	is_int(meta_err("@"), -EINVAL, "garbage");
	free(bomb);
}

/* ---- a trace in another layout ---- */

struct em {
	uint8_t b[128];
	size_t pos;
};

static void al(struct em *e, size_t a)
{
	while (e->pos % a)
		e->b[e->pos++] = 0;
}

static void be(struct em *e, uint64_t v, int bytes)
{
	for (int i = bytes - 1; i >= 0; i--)
		e->b[e->pos++] = (uint8_t)(v >> (8 * i));
}

static void le(struct em *e, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		e->b[e->pos++] = (uint8_t)(v >> (8 * i));
}

static const char foreign_meta[] =
    "/* CTF 1.8 */\n"
    "typealias integer { size = 8; align = 8; signed = false; } := u8;\n"
    "typealias integer { size = 32; align = 32; signed = false; } := u32;\n"
    "trace { major = 1; minor = 8; byte_order = be;\n"
    "  packet.header := struct { u32 magic; }; };\n"
    "clock { name = c; freq = 1000; offset_s = 10; offset = 500; };\n"
    "typealias integer { size = 16; align = 16; signed = false; map = clock.c.value; } := t16;\n"
    "stream { packet.context := struct { u32 content_size; u32 packet_size; };\n"
    "  event.header := struct { t16 timestamp; }; };\n"
    "event { name = \"only\"; fields := struct { u8 a; u32 b;\n"
    "  integer { size = 64; align = 8; signed = true; byte_order = le; base = x; } c;\n"
    "  string s; u8 n; u32 v[n]; }; };\n";

static void emit_event(struct em *e, uint16_t ts, uint8_t a, uint32_t b, int64_t c, const char *s,
		       uint8_t n)
{
	al(e, 2);
	be(e, ts, 2);
	al(e, 4); /* the payload struct is aligned as its most aligned field */
	be(e, a, 1);
	al(e, 4);
	be(e, b, 4);
	le(e, (uint64_t)c, 8);
	memcpy(e->b + e->pos, s, strlen(s) + 1);
	e->pos += strlen(s) + 1;
	be(e, n, 1);
	al(e, 4);
	for (uint32_t i = 0; i < n; i++)
		be(e, 10 + i, 4);
}

static void test_foreign(void)
{
	struct tp_trace_mem_stream ms;
	struct tp_trace_reader *r;
	const struct tp_trace_event *ev;
	const struct tp_trace_field *f;
	struct em e = {{0}, 0};
	size_t content;

	be(&e, TP_TRACE_MAGIC, 4);
	e.pos += 8;
	emit_event(&e, 0xfff0, 0x7f, 0x01020304, -2, "hi", 2);
	emit_event(&e, 0x0010, 1, 5, 7, "", 0);
	content = e.pos;
	e.pos = 4;
	be(&e, content * 8, 4);
	be(&e, sizeof(e.b) * 8, 4);
	ms = (struct tp_trace_mem_stream){e.b, sizeof(e.b)};
	is_int(tp_trace_reader_open_mem(foreign_meta, strlen(foreign_meta), &ms, 1, &r), 0,
	       "big-endian trace with aligned fields opens");
	is_int(tp_trace_reader_next(r, &ev), 1, "first event");
	is_str(ev->name, "only", "its name");
	is_int(ev->ts, 10000000000ll + (500 + 0xfff0) * 1000000ll, "its time from a 1 kHz clock");
	ok((f = tp_trace_event_field(ev, "b")) && f->u == 0x01020304, "aligned big-endian u32");
	ok((f = tp_trace_event_field(ev, "c")) && f->s == -2 && f->base == 16,
	   "little-endian signed 64 in a big-endian trace");
	ok((f = tp_trace_event_field(ev, "s")) && !strcmp(f->str, "hi"), "string");
	ok((f = tp_trace_event_field(ev, "v")) && f->count == 2 && tp_trace_field_elem(f, 1) == 11,
	   "aligned big-endian sequence");
	is_int(tp_trace_reader_next(r, &ev), 1, "second event");
	is_int(ev->cycles, 0x10010, "the 16-bit timestamp wrapped into the next period");
	ok((f = tp_trace_event_field(ev, "v")) && f->count == 0, "empty sequence");
	is_int(tp_trace_reader_next(r, &ev), 0, "end of trace");
	tp_trace_reader_close(r);
}

/* Bit fields, an enumeration and the variant it tags (as in LTTng's event headers), first as
 * plain metadata, then as packetized metadata split over two packets. */
static const char bits_meta[] =
    HEAD "event { name = bits; fields := struct {\n"
	 "  integer { size = 5; } a; integer { size = 3; } b;\n"
	 "  integer { size = 12; signed = true; } c; integer { size = 4; } d;\n"
	 "  enum : integer { size = 8; } { x = 1, y = 2 ... 5, z } e;\n"
	 "  variant <e> { integer { size = 16; } x; string y; integer { size = 8; } z; } v;\n"
	 "}; };\n";

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static size_t packetize(const char *text, size_t len, uint8_t *out)
{
	size_t half = len / 2, n = 0;

	for (int k = 0; k < 2; k++) {
		size_t part = k ? len - half : half, psize = 37 + part + 11;

		memset(out + n, 0, psize);
		put_le32(out + n, 0x75d11d57);
		put_le32(out + n + 24, (uint32_t)(37 + part) * 8);
		put_le32(out + n + 28, (uint32_t)psize * 8);
		out[n + 35] = 1;
		out[n + 36] = 8;
		memcpy(out + n + 37, text + (k ? half : 0), part);
		n += psize;
	}
	return n;
}

static void check_bits(const char *m, size_t ml, const char *how)
{
	/* a=0x13 b=5 | c=-3 (0xffd) d=9 | e=3 (y): "hi" || a=b=c=d=0 | e=1 (x): 0x1234 | e=6 (z) */
	static const uint8_t s[] = {0xb3, 0xfd, 0x9f, 0x03, 'h',  'i',	0,    0x00, 0x00,
				    0x00, 0x01, 0x34, 0x12, 0x00, 0x00, 0x00, 0x06, 0x2a};
	struct tp_trace_mem_stream ms = {s, sizeof(s)};
	struct tp_trace_reader *r;
	const struct tp_trace_event *ev;
	const struct tp_trace_field *f;

	int err = tp_trace_reader_open_mem(m, ml, &ms, 1, &r);

	is_int(err, 0, "%s: opens", how);
	if (err)
		return;
	is_int(tp_trace_reader_next(r, &ev), 1, "%s: first event", how);
	ok((f = tp_trace_event_field(ev, "a")) && f->u == 0x13, "%s: 5-bit field", how);
	ok((f = tp_trace_event_field(ev, "b")) && f->u == 5, "%s: 3-bit field after it", how);
	ok((f = tp_trace_event_field(ev, "c")) && f->s == -3, "%s: signed 12 bits across bytes",
	   how);
	ok((f = tp_trace_event_field(ev, "d")) && f->u == 9, "%s: 4-bit field", how);
	ok((f = tp_trace_event_field(ev, "e")) && f->u == 3 && f->label && !strcmp(f->label, "y"),
	   "%s: enumeration value in a range has its label", how);
	ok((f = tp_trace_event_field(ev, "y")) && f->type == TP_TRACE_STRING &&
	       !strcmp(f->str, "hi") && !tp_trace_event_field(ev, "x"),
	   "%s: the variant's option is the one the label names", how);
	is_int(tp_trace_reader_next(r, &ev), 1, "%s: second event", how);
	ok((f = tp_trace_event_field(ev, "x")) && f->u == 0x1234 && !tp_trace_event_field(ev, "y"),
	   "%s: another option for another tag", how);
	is_int(tp_trace_reader_next(r, &ev), 1, "%s: third event", how);
	ok((f = tp_trace_event_field(ev, "e")) && f->label && !strcmp(f->label, "z") &&
	       (f = tp_trace_event_field(ev, "z")) && f->u == 0x2a,
	   "%s: a label without a value follows the previous one", how);
	is_int(tp_trace_reader_next(r, &ev), 0, "%s: end of trace", how);
	tp_trace_reader_close(r);
}

static void test_bits(void)
{
	static const char be_meta[] =
	    "trace { major = 1; minor = 8; byte_order = be; };\n"
	    "event { name = b; fields := struct { integer { size = 5; } a; "
	    "integer { size = 3; } b; integer { size = 8; } c; }; };\n";
	static const uint8_t be_s[] = {0x9d, 0x7e};
	struct tp_trace_mem_stream ms = {be_s, sizeof(be_s)};
	uint8_t packed[2048];
	size_t n;
	struct tp_trace_reader *r = NULL;
	const struct tp_trace_event *ev;
	const struct tp_trace_field *f;

	check_bits(bits_meta, strlen(bits_meta), "plain metadata");
	n = packetize(bits_meta, strlen(bits_meta), packed);
	check_bits((const char *)packed, n, "packetized metadata");
	packed[32] = 1; /* compression scheme */
	is_int(meta_err_len((const char *)packed, n), -ENOTSUP,
	       "compressed packetized metadata: not in our subset");
	is_int(tp_trace_reader_open_mem(be_meta, strlen(be_meta), &ms, 1, &r), 0,
	       "big-endian bit fields open");
	if (r) {
		ok(tp_trace_reader_next(r, &ev) == 1 && (f = tp_trace_event_field(ev, "a")) &&
		       f->u == 0x13 && (f = tp_trace_event_field(ev, "b")) && f->u == 5 &&
		       (f = tp_trace_event_field(ev, "c")) && f->u == 0x7e,
		   "big-endian bit fields are packed from the high bit");
		tp_trace_reader_close(r);
	}
}

int main(void)
{
	char *tmp = util_tmpdir();

	make_trace(tmp);
	test_truncations();
	test_flips();
	test_lies();
	test_bad_tsdl();
	test_foreign();
	test_bits();
	free(meta);
	free(stream);
	util_rmtree(tmp);
	free(tmp);
	return tap_done();
}
