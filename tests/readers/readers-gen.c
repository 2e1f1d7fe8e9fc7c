/* Test helper: writes small traces with known events and times for test-readers.py, with the
 * trace library's writer.  Prints one JSON line with what the test needs to know.
 *   readers-gen calls DIR     nested func_entry/func_exit (func strings) in 2 threads, plus
 *                             tick and msg events
 *   readers-gen addrs DIR     func_entry/func_exit with addr fields and a .maps file
 *   readers-gen discard DIR   2 streams with 3 and 5 discarded events
 *   readers-gen plain DIR     3 tick events, no calls */
#include "trace/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct tp_trace_writer *w;
static struct tp_trace_producer prod[2];
static uint64_t base;
static int c_entry, c_exit, c_tick, c_msg, c_sample;

static void die(const char *what, int err)
{
	fprintf(stderr, "readers-gen: %s: %s\n", what, strerror(-err));
	exit(1);
}

static const struct tp_trace_field_desc func_fields[] = {
    {"func", TP_TRACE_STRING, 0, false, 0, 0},
};
static const struct tp_trace_field_desc addr_fields[] = {
    {"addr", TP_TRACE_INT, 64, false, 16, 0},
};
static const struct tp_trace_field_desc tick_fields[] = {
    {"n", TP_TRACE_INT, 32, false, 10, 0},
    {"pc", TP_TRACE_INT, 64, false, 16, 0},
};
static const struct tp_trace_field_desc msg_fields[] = {
    {"text", TP_TRACE_STRING, 0, false, 0, 0},	{"data", TP_TRACE_BYTES, 0, false, 0, 0},
    {"regs", TP_TRACE_ARRAY, 64, false, 16, 3}, {"vals", TP_TRACE_SEQ, 32, true, 10, 0},
    {"delta", TP_TRACE_INT, 64, true, 10, 0},
};
static const struct tp_trace_field_desc sample_fields[] = {
    {"pc", TP_TRACE_INT, 64, false, 16, 0},
    {"ret_addr", TP_TRACE_INT, 64, false, 16, 0},
    {"count", TP_TRACE_INT, 32, false, 10, 0},
};

static void open_trace(const char *dir, int nprod, bool addrs)
{
	struct tp_trace_opts o = {.packet_size = 4096, .clock = TP_TRACE_CLOCK_MONOTONIC};
	int err = tp_trace_writer_new(dir, &o, &w);

	if (err)
		die("writer", err);
	c_entry = tp_trace_writer_add_class(w, "func_entry", addrs ? addr_fields : func_fields, 1);
	c_exit = tp_trace_writer_add_class(w, "func_exit", addrs ? addr_fields : func_fields, 1);
	c_tick = tp_trace_writer_add_class(w, "tick", tick_fields, 2);
	c_msg = tp_trace_writer_add_class(w, "msg", msg_fields, 5);
	c_sample = tp_trace_writer_add_class(w, "sample", sample_fields, 3);
	if (c_entry < 0 || c_exit < 0 || c_tick < 0 || c_msg < 0 || c_sample < 0)
		die("class", -EINVAL);
	for (int i = 0; i < nprod; i++)
		if ((err = tp_trace_writer_producer_init(w, &prod[i])))
			die("producer", err);
	base = tp_trace_clock_now(TP_TRACE_CLOCK_MONOTONIC);
}

static void close_trace(int nprod)
{
	int err;

	for (int i = 0; i < nprod; i++)
		if ((err = tp_trace_producer_fini(&prod[i])))
			die("fini", err);
	if ((err = tp_trace_writer_close(w)))
		die("close", err);
}

/* Thread k of pid 4242 (tid 4242 + k) writes on producer k. */
static uint8_t *ev(int k, int id, uint32_t size, uint64_t off)
{
	uint8_t *p = tp_trace_reserve_at(&prod[k], (uint16_t)id, size, base + off, 4242, 4242 + k);

	if (!p)
		die("reserve", -ENOSPC);
	return p;
}

static void call(int k, bool entry, const char *func, uint64_t off)
{
	size_t n = strlen(func);

	tp_trace_put_str(ev(k, entry ? c_entry : c_exit, (uint32_t)n + 1, off), func, n);
	tp_trace_commit(&prod[k]);
}

static void tick(int k, uint32_t n, uint64_t pc, uint64_t off)
{
	uint8_t *p = ev(k, c_tick, 12, off);

	p = tp_trace_put_u32(p, n);
	tp_trace_put_u64(p, pc);
	tp_trace_commit(&prod[k]);
}

static void msg(int k, const char *text, const uint8_t *data, uint32_t dlen, const uint64_t regs[3],
		const int32_t *vals, uint32_t nvals, int64_t delta, uint64_t off)
{
	size_t tlen = strlen(text);
	uint8_t *p = ev(k, c_msg, (uint32_t)(tlen + 1 + 4 + dlen + 24 + 4 + 4 * nvals + 8), off);

	p = tp_trace_put_str(p, text, tlen);
	p = tp_trace_put_bytes(p, data, dlen);
	for (int i = 0; i < 3; i++)
		p = tp_trace_put_u64(p, regs[i]);
	p = tp_trace_put_u32(p, nvals);
	for (uint32_t i = 0; i < nvals; i++)
		p = tp_trace_put_u32(p, (uint32_t)vals[i]);
	tp_trace_put_u64(p, (uint64_t)delta);
	tp_trace_commit(&prod[k]);
}

static int gen_calls(const char *dir)
{
	static const uint8_t data[] = {0xde, 0xad, 0xbe, 0xef};
	static const uint64_t regs1[3] = {1, 0x10, UINT64_MAX}, regs2[3] = {0, 0, 0};
	static const int32_t vals[] = {-1, 2, -3};

	open_trace(dir, 2, false);
	/* Thread 0: main { parse { lex lex } emit } */
	call(0, true, "main", 0);
	call(0, true, "parse", 100);
	tick(0, 1, 0x401000, 120);
	call(0, true, "lex", 150);
	call(0, false, "lex", 400);
	call(0, true, "lex", 500);
	call(0, false, "lex", 700);
	call(0, false, "parse", 1000);
	call(0, true, "emit", 1200);
	msg(0, "hello \"world\"\n", data, 4, regs1, vals, 3, -5, 1300);
	call(0, false, "emit", 1500);
	call(0, false, "main", 2000);
	/* Thread 1: an exit without entry, then worker { lex compute... } left open. */
	call(1, false, "orphan", 10);
	call(1, true, "worker", 50);
	call(1, true, "lex", 300);
	tick(1, 2, 0x402000, 350);
	call(1, false, "lex", 600);
	call(1, true, "compute", 900);
	msg(1, "bye", (const uint8_t *)"", 0, regs2, vals, 0, 7, 2500);
	close_trace(2);
	printf("{\"events\": 19}\n");
	return 0;
}

/* Functions whose addresses the addrs trace records; long enough for +8 to stay inside. */
__attribute__((noinline)) int gen_lex(volatile int *p)
{
	int s = 0;

	for (int i = 0; i < *p; i++)
		s += p[i] * 3;
	return s;
}

__attribute__((noinline)) int gen_parse(volatile int *p)
{
	int s = 1;

	for (int i = 0; i < *p; i++)
		s *= gen_lex(p + i) + 7;
	return s;
}

/* The executable mappings of this process: the main program in the short form, the others
 * as /proc/self/maps lines, which the maps file also accepts. */
static void write_maps(const char *dir)
{
	char path[4096], *line = NULL, exe[4096];
	size_t cap = 0;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	FILE *in = fopen("/proc/self/maps", "r"), *out;

	snprintf(path, sizeof(path), "%s/.maps", dir);
	out = fopen(path, "w");
	if (!in || !out || n <= 0)
		die("maps", -errno);
	exe[n] = 0;
	fprintf(out, "# start end offset path\n");
	while (getline(&line, &cap, in) > 0) {
		uint64_t start, end, off;
		char perms[8];
		int pos = 0;

		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*s %n", &start, &end,
			   perms, &off, &pos) < 4 ||
		    perms[2] != 'x')
			continue;
		if (pos && !strncmp(line + pos, exe, (size_t)n) && line[pos + n] == '\n')
			fprintf(out, "%" PRIx64 " %" PRIx64 " %" PRIx64 " %s\n", start, end, off,
				exe);
		else
			fputs(line, out);
	}
	free(line);
	fclose(in);
	if (fclose(out))
		die("maps", -errno);
}

static void addr_call(bool entry, uint64_t addr, uint64_t off)
{
	tp_trace_put_u64(ev(0, entry ? c_entry : c_exit, 8, off), addr);
	tp_trace_commit(&prod[0]);
}

static void sample(uint64_t pc, uint64_t ret, uint32_t count, uint64_t off)
{
	uint8_t *p = ev(0, c_sample, 20, off);

	p = tp_trace_put_u64(p, pc);
	p = tp_trace_put_u64(p, ret);
	tp_trace_put_u32(p, count);
	tp_trace_commit(&prod[0]);
}

static int gen_addrs(const char *dir)
{
	uint64_t parse = (uint64_t)(uintptr_t)gen_parse, lex = (uint64_t)(uintptr_t)gen_lex;

	open_trace(dir, 1, true);
	write_maps(dir);
	addr_call(true, parse, 0);
	sample(lex + 4, parse + 8, 3, 100);
	addr_call(true, lex, 200);
	addr_call(false, lex, 500);
	addr_call(true, 0x10, 600);
	sample(0x10, 0x20, 4, 620);
	addr_call(false, 0x10, 650);
	addr_call(false, parse, 900);
	close_trace(1);
	printf("{\"events\": 8, \"gen_parse\": %" PRIu64 ", \"gen_lex\": %" PRIu64 "}\n", parse,
	       lex);
	return 0;
}

/* An event larger than a packet is discarded and counted by the writer's producer. */
static void oversized(int k, uint64_t off)
{
	if (tp_trace_reserve_at(&prod[k], (uint16_t)c_tick, 8192, base + off, 4242, 4242 + k))
		die("oversized event accepted", -EINVAL);
}

static int gen_discard(const char *dir)
{
	uint64_t d0, d1;

	open_trace(dir, 2, false);
	for (uint32_t i = 0; i < 5; i++)
		tick(0, i, 0, 10 * i);
	for (uint32_t i = 0; i < 3; i++)
		oversized(0, 60 + i);
	for (uint32_t i = 5; i < 10; i++)
		tick(0, i, 0, 100 + 10 * i);
	for (uint32_t i = 0; i < 4; i++)
		tick(1, 100 + i, 0, 5 + 10 * i);
	for (uint32_t i = 0; i < 5; i++)
		oversized(1, 300 + i);
	d0 = prod[0].discarded;
	d1 = prod[1].discarded;
	close_trace(2);
	printf("{\"events\": 14, \"discarded\": [%" PRIu64 ", %" PRIu64 "]}\n", d0, d1);
	return 0;
}

static int gen_plain(const char *dir)
{
	open_trace(dir, 1, false);
	for (uint32_t i = 0; i < 3; i++)
		tick(0, i, 0x1000 * i, 100 * i);
	close_trace(1);
	printf("{\"events\": 3}\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "calls"))
		return gen_calls(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "addrs"))
		return gen_addrs(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "discard"))
		return gen_discard(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "plain"))
		return gen_plain(argv[2]);
	fprintf(stderr, "usage: readers-gen calls|addrs|discard|plain DIR\n");
	return 2;
}
