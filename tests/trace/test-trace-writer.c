/* Event-class registry, TSDL metadata and the tracer-side writer, read back through our
 * reader from the directory and from memory. */
#include "../tap.h"
#include "trace/trace.h"
#include "util.h"

#include <errno.h>
#include <stdint.h>
#include <time.h>

static const struct tp_trace_field_desc fields[] = {
    {"num", TP_TRACE_INT, 32, true, 10, 0},
    {"addr", TP_TRACE_INT, 64, false, 16, 0},
    {"path", TP_TRACE_STRING},
    {"buf", TP_TRACE_BYTES},
    {"regs", TP_TRACE_ARRAY, 64, false, 16, 3},
};

static void test_schema(void)
{
	struct tp_trace_schema *s = tp_trace_schema_new();
	struct tp_trace_field_desc f[TP_TRACE_MAX_FIELDS + 1];
	const struct tp_trace_field_desc *got;
	size_t n;

	is_int(tp_trace_schema_add(s, "a:open", fields, 5), 0, "first class gets id 0");
	is_int(tp_trace_schema_add(s, "a:close", NULL, 0), 1, "a class without fields, id 1");
	is_int(tp_trace_schema_add(s, "a:open", fields, 1), -EEXIST, "duplicate class name");
	is_int(tp_trace_schema_add(s, "bad\"name", fields, 1), -EINVAL, "quote in a class name");
	is_int(tp_trace_schema_add(s, "", fields, 1), -EINVAL, "empty class name");
	for (int i = 0; i < 4; i++) {
		static const char *const bad[] = {"_x", "1x", "a-b", ""};
		struct tp_trace_field_desc d = {bad[i], TP_TRACE_INT, 32, false, 10, 0};

		is_int(tp_trace_schema_add(s, "x", &d, 1), -EINVAL, "field name \"%s\" refused",
		       bad[i]);
	}
	f[0] = (struct tp_trace_field_desc){"x", TP_TRACE_INT, 12, false, 10, 0};
	is_int(tp_trace_schema_add(s, "x", f, 1), -EINVAL, "12-bit integer refused");
	f[0] = (struct tp_trace_field_desc){"x", TP_TRACE_INT, 32, false, 8, 0};
	is_int(tp_trace_schema_add(s, "x", f, 1), -EINVAL, "base 8 refused");
	f[0] = (struct tp_trace_field_desc){"x", TP_TRACE_ARRAY, 32, false, 10, 0};
	is_int(tp_trace_schema_add(s, "x", f, 1), -EINVAL, "empty fixed array refused");
	f[0] = (struct tp_trace_field_desc){"data", TP_TRACE_BYTES};
	f[1] = (struct tp_trace_field_desc){"data_length", TP_TRACE_INT, 32, false, 10, 0};
	is_int(tp_trace_schema_add(s, "x", f, 2), -EINVAL,
	       "a field named like another's length field refused");
	f[1].name = "data";
	is_int(tp_trace_schema_add(s, "x", f, 2), -EINVAL, "two fields with one name refused");
	for (int i = 0; i <= TP_TRACE_MAX_FIELDS; i++) {
		char *name = malloc(8);

		snprintf(name, 8, "f%d", i);
		f[i] = (struct tp_trace_field_desc){name, TP_TRACE_INT, 8, false, 10, 0};
	}
	is_int(tp_trace_schema_add(s, "x", f, TP_TRACE_MAX_FIELDS + 1), -EINVAL,
	       "more than %d fields refused", TP_TRACE_MAX_FIELDS);
	is_int(tp_trace_schema_add(s, "x", f, TP_TRACE_MAX_FIELDS), 2, "%d fields accepted",
	       TP_TRACE_MAX_FIELDS);
	for (int i = 0; i <= TP_TRACE_MAX_FIELDS; i++)
		free((char *)f[i].name);
	is_int(tp_trace_schema_count(s), 3, "three classes");
	is_int(tp_trace_schema_find(s, "a:close"), 1, "find by name");
	is_int(tp_trace_schema_find(s, "nope"), -ENOENT, "find a missing name");
	got = tp_trace_schema_fields(s, 0, &n);
	ok(got && n == 5 && !strcmp(got[2].name, "path") && got[4].count == 3 && got[0].base == 10,
	   "fields kept in order with their attributes");
	is_str(got[1].name, "addr", "the registry owns copies of the names");
	ok(!tp_trace_schema_fields(s, 3, &n) && !tp_trace_schema_name(s, 3), "no class 3");
	tp_trace_schema_free(s);
	tp_trace_schema_free(NULL);
}

static uint64_t now_ns(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void test_errors(const char *tmp)
{
	struct tp_trace_opts bad = {.packet_size = 1000};
	struct tp_trace_writer *w;
	char *dir = util_path(tmp, "errors"), *ww = util_path(tmp, "worldw");

	is_int(tp_trace_writer_new(dir, &bad, &w), -EINVAL, "packet size below 4 KiB refused");
	bad.packet_size = 4100;
	is_int(tp_trace_writer_new(dir, &bad, &w), -EINVAL, "packet size not a multiple of 8");
	is_int(tp_trace_writer_new(dir, NULL, &w), 0, "writer with default options");
	is_int(tp_trace_writer_packet_size(w), 65536, "default packet size is 64 KiB");
	is_int(tp_trace_writer_close(w), 0, "empty trace closed");
	is_int(tp_trace_writer_new(dir, NULL, &w), -EEXIST, "an existing trace is not overwritten");
	mkdir(ww, 0777);
	chmod(ww, 0777);
	is_int(tp_trace_writer_new(ww, NULL, &w), -EPERM, "a world-writable directory refused");
	tp_trace_writer_free(NULL);
	free(dir);
	free(ww);
}

static void test_metadata(const char *tmp)
{
	struct tp_trace_writer *w;
	char *dir = util_path(tmp, "meta"), *path = util_path(dir, "metadata"), *text, *p;
	size_t len;
	long long offset_s;
	uint64_t real = now_ns(CLOCK_REALTIME), mono = now_ns(CLOCK_MONOTONIC);

	is_int(tp_trace_writer_new(dir, NULL, &w), 0, "writer");
	is_int(tp_trace_writer_add_class(w, "t:ev", fields, 5), 0, "class added");
	is_int(tp_trace_writer_sync(w), 0, "metadata written");
	text = util_read(path, &len);
	ok(text && !strncmp(text, "/* CTF 1.8 */\n", 14), "metadata starts with the CTF 1.8 mark");
	ok(text && strstr(text, "byte_order = le;") && strstr(text, "uint32_t magic;") &&
	       strstr(text, "uint8_t uuid[16];") && strstr(text, "uint32_t stream_id;"),
	   "packet header: magic, uuid, stream_id");
	ok(text && strstr(text, "tp_clock_t timestamp_begin;") &&
	       strstr(text, "uint64_t events_discarded;") && strstr(text, "uint64_t content_size;"),
	   "packet context");
	ok(text && strstr(text, "int32_t _pid;") && strstr(text, "int32_t _tid;"),
	   "event context: pid and tid");
	ok(text && strstr(text, "name = \"t:ev\";") && strstr(text, "string _path;") &&
	       strstr(text, "uint8_t _buf[_buf_length];") &&
	       strstr(text, "signed = false; base = 16; } _regs[3];"),
	   "event block with typed fields");
	p = text ? strstr(text, "offset_s = ") : NULL;
	ok(p && sscanf(p, "offset_s = %lld", &offset_s) == 1, "clock offset_s");
	/* The origin of the monotonic clock is boot time, as an absolute date. */
	ok(p && llabs(offset_s - (long long)((real - mono) / 1000000000u)) <= 1,
	   "clock offset: realtime - monotonic (%lld)", p ? offset_s : 0);
	is_int(tp_trace_writer_close(w), 0, "closed");
	free(text);
	free(path);
	free(dir);
}

static int write_events(const char *dir, enum tp_trace_clock clock, int n, uint64_t *disc)
{
	struct tp_trace_opts o = {.packet_size = 4096, .clock = clock};
	struct tp_trace_writer *w;
	struct tp_trace_producer p;
	int err, id;

	if ((err = tp_trace_writer_new(dir, &o, &w)))
		return err;
	id = tp_trace_writer_add_class(w, "t:ev", fields, 5);
	tp_trace_writer_producer_init(w, &p);
	ok(!tp_trace_reserve(&p, (uint16_t)id, 5000), "an event larger than a packet is refused");
	for (int i = 0; i < n; i++) {
		char path[32];
		int len = snprintf(path, sizeof(path), "/p/%d", i);
		uint8_t *e = tp_trace_reserve_at(&p, (uint16_t)id, 4 + 8 + len + 1 + 4 + 2 + 24,
						 tp_trace_clock_now(clock), 77, 100 + i % 4);

		if (!e)
			return -ENOSPC;
		e = tp_trace_put_u32(e, (uint32_t)-i);
		e = tp_trace_put_u64(e, 0x7f0000000000ull + (uint64_t)i);
		e = tp_trace_put_str(e, path, (size_t)len);
		e = tp_trace_put_bytes(e, "\xab\xcd", 2);
		for (int j = 0; j < 3; j++)
			e = tp_trace_put_u64(e, (uint64_t)(i * 3 + j));
		tp_trace_commit(&p);
	}
	*disc = p.discarded;
	err = tp_trace_producer_fini(&p);
	return tp_trace_writer_close(w) ?: err;
}

static int check_events(struct tp_trace_reader *r, int n, uint64_t t0, uint64_t t1)
{
	const struct tp_trace_event *ev;
	int i = 0, bad = 0, err;

	while ((err = tp_trace_reader_next(r, &ev)) > 0) {
		const struct tp_trace_field *f;
		char path[32];

		snprintf(path, sizeof(path), "/p/%d", i);
		bad += strcmp(ev->name, "t:ev") || ev->pid != 77 || ev->tid != 100 + i % 4;
		bad += ev->ts < t0 || ev->ts > t1 || ev->nr_fields != 6;
		bad += !(f = tp_trace_event_field(ev, "num")) || f->s != -i || !f->is_signed;
		bad += !(f = tp_trace_event_field(ev, "addr")) || f->u != 0x7f0000000000ull + i ||
		       f->base != 16;
		bad += !(f = tp_trace_event_field(ev, "path")) || f->type != TP_TRACE_STRING ||
		       strcmp(f->str, path);
		bad += !(f = tp_trace_event_field(ev, "buf_length")) || f->u != 2;
		bad += !(f = tp_trace_event_field(ev, "buf")) || f->type != TP_TRACE_BYTES ||
		       f->count != 2 || memcmp(f->data, "\xab\xcd", 2);
		bad += !(f = tp_trace_event_field(ev, "regs")) || f->type != TP_TRACE_ARRAY ||
		       f->count != 3 || tp_trace_field_elem(f, 2) != (uint64_t)(i * 3 + 2) ||
		       tp_trace_field_elem(f, 3) != 0;
		i++;
	}
	is_int(err, 0, "reader ends without error");
	is_int(bad, 0, "every event decoded with its values");
	return i;
}

static void test_roundtrip(const char *tmp, enum tp_trace_clock clock, const char *name)
{
	char *dir = util_path(tmp, name), *mpath = util_path(dir, "metadata");
	char *spath = util_path(dir, "stream_0"), *meta, *stream;
	uint64_t t0 = now_ns(CLOCK_REALTIME) - 1000000000u, t1, disc = 0;
	struct tp_trace_reader *r;
	struct tp_trace_mem_stream ms;
	size_t mlen, slen;

	is_int(write_events(dir, clock, 300, &disc), 0, "%s: 300 events written", name);
	is_int(disc, 1, "%s: the oversized event counted as discarded", name);
	t1 = now_ns(CLOCK_REALTIME) + 1000000000u;
	is_int(tp_trace_reader_open(dir, &r), 0, "%s: reader opens the directory", name);
	/* Timestamps are absolute: within a second of the wall clock around the writes. */
	is_int(check_events(r, 300, t0, t1), 300, "%s: 300 events read", name);
	is_int(tp_trace_reader_discarded(r), 1, "%s: the reader sees the discard", name);
	is_int(tp_trace_reader_nr_streams(r), 1, "%s: one stream", name);
	tp_trace_reader_close(r);
	meta = util_read(mpath, &mlen);
	stream = util_read(spath, &slen);
	ok(meta && stream && slen % 4096 == 0 && slen >= 4 * 4096,
	   "%s: fixed-size packets (%zu bytes)", name, slen);
	ms = (struct tp_trace_mem_stream){stream, slen};
	is_int(tp_trace_reader_open_mem(meta, mlen, &ms, 1, &r), 0, "%s: open_mem", name);
	is_int(check_events(r, 300, t0, t1), 300, "%s: 300 events read from memory", name);
	tp_trace_reader_close(r);
	free(meta);
	free(stream);
	free(mpath);
	free(spath);
	free(dir);
}

static void test_best_clock(void)
{
	char cs[32] = "";
	FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
	bool tsc = f && fgets(cs, sizeof(cs), f) && !strcmp(cs, "tsc\n");

	is_int(tp_trace_clock_best(), tsc ? TP_TRACE_CLOCK_TSC : TP_TRACE_CLOCK_MONOTONIC,
	       "best clock follows the kernel's clocksource (%s)", tsc ? "tsc" : "not tsc");
	if (f)
		fclose(f);
}

int main(void)
{
	char *tmp = util_tmpdir();

	test_schema();
	test_errors(tmp);
	test_metadata(tmp);
	test_roundtrip(tmp, TP_TRACE_CLOCK_MONOTONIC, "monotonic");
	test_roundtrip(tmp, TP_TRACE_CLOCK_TSC, "tsc");
	test_best_clock();
	util_rmtree(tmp);
	free(tmp);
	return tap_done();
}
