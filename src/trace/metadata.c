/* TSDL (CTF 1.8 metadata) for the traces we write: one stream class whose packets, event
 * headers and contexts have the fixed layout of trace-priv.h, and one event block per class
 * of the registry.  Every field is byte-aligned so that producers never pad. */
#include "trace/trace-priv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

void tp_trace_uuid_str(const uint8_t u[16], char out[37])
{
	snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
		 u[13], u[14], u[15]);
}

static const char *int_type(uint8_t bits, bool is_signed)
{
	static const char *const names[2][4] = {
	    {"uint8_t", "uint16_t", "uint32_t", "uint64_t"},
	    {"int8_t", "int16_t", "int32_t", "int64_t"},
	};
	int i = bits == 8 ? 0 : bits == 16 ? 1 : bits == 32 ? 2 : 3;

	return names[is_signed][i];
}

/* The integer type of a field: a typealias for base 10, an inline one for base 16. */
static void put_int(FILE *f, const struct tp_trace_field_desc *d)
{
	if (d->base == 16)
		fprintf(f, "integer { size = %u; align = 8; signed = %s; base = 16; }", d->bits,
			d->is_signed ? "true" : "false");
	else
		fputs(int_type(d->bits, d->is_signed), f);
}

static void put_field(FILE *f, const struct tp_trace_field_desc *d)
{
	switch (d->type) {
	case TP_TRACE_INT:
		fputs("\t\t", f);
		put_int(f, d);
		fprintf(f, " _%s;\n", d->name);
		break;
	case TP_TRACE_STRING:
		fprintf(f, "\t\tstring _%s;\n", d->name);
		break;
	case TP_TRACE_FLOAT:
		/* IEEE-754: 8 + 24 bits for binary32, 11 + 53 for binary64 (sign in mant_dig). */
		fprintf(f, "\t\tfloating_point { exp_dig = %d; mant_dig = %d; align = 8; } _%s;\n",
			d->bits == 32 ? 8 : 11, d->bits == 32 ? 24 : 53, d->name);
		break;
	case TP_TRACE_BYTES:
		fprintf(f, "\t\tuint32_t _%s_length;\n", d->name);
		fprintf(f, "\t\tuint8_t _%s[_%s_length];\n", d->name, d->name);
		break;
	case TP_TRACE_ARRAY:
		fputs("\t\t", f);
		put_int(f, d);
		fprintf(f, " _%s[%" PRIu32 "];\n", d->name, d->count);
		break;
	case TP_TRACE_SEQ:
		fprintf(f, "\t\tuint32_t _%s_length;\n\t\t", d->name);
		put_int(f, d);
		fprintf(f, " _%s[_%s_length];\n", d->name, d->name);
		break;
	}
}

/* Host names come from the system; keep only what is safe inside a TSDL string. */
static void put_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++)
		if (*s >= 0x20 && *s <= 0x7e && *s != '"' && *s != '\\')
			fputc(*s, f);
	fputc('"', f);
}

static void put_header(FILE *f, const struct tp_trace_meta *m)
{
	char uuid[37];
	const char *clk = m->clock == TP_TRACE_CLOCK_TSC ? "tsc" : "monotonic";

	tp_trace_uuid_str(m->uuid, uuid);
	fputs("/* CTF 1.8 */\n\n", f);
	for (int s = 0; s < 2; s++)
		for (int b = 8; b <= 64; b *= 2)
			fprintf(f,
				"typealias integer { size = %d; align = 8; signed = %s; } := "
				"%s;\n",
				b, s ? "true" : "false", int_type(b, s));
	fprintf(f,
		"\ntrace {\n"
		"\tmajor = 1;\n"
		"\tminor = 8;\n"
		"\tuuid = \"%s\";\n"
		"\tbyte_order = le;\n"
		"\tpacket.header := struct {\n"
		"\t\tuint32_t magic;\n"
		"\t\tuint8_t uuid[16];\n"
		"\t\tuint32_t stream_id;\n"
		"\t};\n"
		"};\n\n",
		uuid);
	fprintf(f, "env {\n\ttracer_name = \"tracepad\";\n\ttracer_version = \"%s\";\n",
#ifdef TP_VERSION
		TP_VERSION
#else
		"0"
#endif
	);
	fputs("\thostname = ", f);
	put_string(f, m->hostname ? m->hostname : "");
	fputs(";\n};\n\n", f);
	fprintf(f,
		"clock {\n"
		"\tname = \"%s\";\n"
		"\tdescription = \"%s\";\n"
		"\tfreq = %" PRIu64 ";\n"
		"\tprecision = 1;\n"
		"\toffset_s = %" PRId64 ";\n"
		"\toffset = %" PRIu64 ";\n"
		"\tabsolute = false;\n"
		"};\n\n",
		clk, m->clock == TP_TRACE_CLOCK_TSC ? "x86 time-stamp counter" : "CLOCK_MONOTONIC",
		m->freq, m->offset_s, m->offset);
	fprintf(f,
		"typealias integer { size = 64; align = 8; signed = false; "
		"map = clock.%s.value; } := tp_clock_t;\n\n",
		clk);
	/* Offsets must match TP_PKT_* and TP_TRACE_EVENT_HDR. */
	fputs("stream {\n"
	      "\tid = 0;\n"
	      "\tpacket.context := struct {\n"
	      "\t\ttp_clock_t timestamp_begin;\n"
	      "\t\ttp_clock_t timestamp_end;\n"
	      "\t\tuint64_t content_size;\n"
	      "\t\tuint64_t packet_size;\n"
	      "\t\tuint64_t packet_seq_num;\n"
	      "\t\tuint64_t events_discarded;\n"
	      "\t\tuint32_t producer_id;\n"
	      "\t};\n"
	      "\tevent.header := struct {\n"
	      "\t\tuint16_t id;\n"
	      "\t\ttp_clock_t timestamp;\n"
	      "\t};\n"
	      "\tevent.context := struct {\n"
	      "\t\tint32_t _pid;\n"
	      "\t\tint32_t _tid;\n"
	      "\t};\n"
	      "};\n\n",
	      f);
}

int tp_trace_metadata_format(const struct tp_trace_schema *s, const struct tp_trace_meta *m,
			     char **out, size_t *len)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);

	if (!f)
		return -errno;
	put_header(f, m);
	for (size_t id = 0; id < tp_trace_schema_count(s); id++) {
		size_t n;
		const struct tp_trace_field_desc *d = tp_trace_schema_fields(s, id, &n);

		fputs("event {\n\tname = ", f);
		put_string(f, tp_trace_schema_name(s, id));
		fprintf(f, ";\n\tid = %zu;\n\tstream_id = 0;\n", id);
		if (n) {
			fputs("\tfields := struct {\n", f);
			for (size_t i = 0; i < n; i++)
				put_field(f, &d[i]);
			fputs("\t};\n", f);
		}
		fputs("};\n\n", f);
	}
	if (fclose(f) || !buf) {
		free(buf);
		return -ENOMEM;
	}
	*out = buf;
	*len = size;
	return 0;
}
