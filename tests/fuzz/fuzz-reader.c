/* libFuzzer target for the CTF reader (tests/fuzz/README.md says how to build and run it).
 * Input: u32 metadata length, metadata text, then up to 4 streams, each a u32 length and
 * its bytes; lengths are clamped to what is left, so every input is a valid split. */
#include "trace/trace.h"

#include <stdint.h>
#include <string.h>

static uint32_t take_len(const uint8_t **p, size_t *left)
{
	uint32_t n = 0;

	if (*left >= 4) {
		memcpy(&n, *p, 4);
		*p += 4;
		*left -= 4;
	} else {
		*left = 0;
	}
	return n > *left ? (uint32_t)*left : n;
}

volatile uint64_t fuzz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tp_trace_mem_stream streams[4];
	struct tp_trace_reader *r;
	const struct tp_trace_event *ev;
	const uint8_t *p = data;
	size_t left = size, n = 0;
	uint32_t mlen = take_len(&p, &left);
	const char *meta = (const char *)p;
	uint64_t sum = 0;
	int err;

	p += mlen;
	left -= mlen;
	while (left && n < 4) {
		uint32_t len = take_len(&p, &left);

		streams[n++] = (struct tp_trace_mem_stream){p, len};
		p += len;
		left -= len;
	}
	if (tp_trace_reader_open_mem(meta, mlen, streams, n, &r))
		return 0;
	/* Touch every decoded value so that the sanitizers see every read. */
	for (int i = 0; i < 100000 && (err = tp_trace_reader_next(r, &ev)) != 0; i++) {
		if (err < 0)
			continue;
		sum += ev->ts + (uint64_t)ev->pid + strlen(ev->name);
		for (uint32_t f = 0; f < ev->nr_fields; f++) {
			const struct tp_trace_field *fl = &ev->fields[f];

			sum += strlen(fl->name) + fl->u;
			if (fl->type == TP_TRACE_STRING)
				sum += strlen(fl->str);
			for (uint32_t k = 0; fl->type != TP_TRACE_STRING && k < fl->count; k++)
				sum += tp_trace_field_elem(fl, k);
		}
	}
	sum += tp_trace_reader_discarded(r);
	tp_trace_reader_close(r);
	fuzz_sink = sum;
	return 0;
}
