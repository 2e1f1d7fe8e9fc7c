/* Test helper: prints a trace through our reader as JSON lines, one event per line, then a
 * summary line {"events": N, "discarded": D}, for the python tests to compare with what
 * babeltrace2 prints.  Exit status 1 with {"error": -errno} on malformed input. */
#include "trace/trace.h"

#include <inttypes.h>
#include <stdio.h>

static void put_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c > 0x7e)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* babeltrace2 prints base-16 integers as their unsigned bits: so do we. */
static void put_int(const struct tp_trace_field *f, uint64_t v)
{
	if (f->base == 16)
		printf("%" PRIu64, f->bits < 64 ? v & ((UINT64_C(1) << f->bits) - 1) : v);
	else if (f->is_signed)
		printf("%" PRId64, (int64_t)v);
	else
		printf("%" PRIu64, v);
}

static void put_field(const struct tp_trace_field *f)
{
	put_str(f->name);
	putchar(':');
	switch (f->type) {
	case TP_TRACE_INT:
		put_int(f, f->u);
		break;
	case TP_TRACE_STRING:
		put_str(f->str);
		break;
	default:
		putchar('[');
		for (uint32_t i = 0; i < f->count; i++) {
			if (i)
				putchar(',');
			put_int(f, tp_trace_field_elem(f, i));
		}
		putchar(']');
	}
}

int main(int argc, char **argv)
{
	struct tp_trace_reader *r;
	const struct tp_trace_event *ev;
	uint64_t n = 0;
	int err;

	if (argc != 2) {
		fprintf(stderr, "usage: %s TRACE_DIR\n", argv[0]);
		return 2;
	}
	err = tp_trace_reader_open(argv[1], &r);
	if (err) {
		printf("{\"error\":%d}\n", err);
		return 1;
	}
	while ((err = tp_trace_reader_next(r, &ev)) > 0) {
		printf("{\"cycles\":%" PRIu64 ",\"ts\":%" PRIu64 ",\"name\":", ev->cycles, ev->ts);
		put_str(ev->name);
		printf(",\"stream\":%u,\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",\"fields\":{",
		       ev->stream, ev->pid, ev->tid);
		for (uint32_t i = 0; i < ev->nr_fields; i++) {
			if (i)
				putchar(',');
			put_field(&ev->fields[i]);
		}
		printf("}}\n");
		n++;
	}
	if (err < 0) {
		printf("{\"error\":%d}\n", err);
		tp_trace_reader_close(r);
		return 1;
	}
	printf("{\"events\":%" PRIu64 ",\"discarded\":%" PRIu64 ",\"streams\":%zu}\n", n,
	       tp_trace_reader_discarded(r), tp_trace_reader_nr_streams(r));
	tp_trace_reader_close(r);
	return 0;
}
