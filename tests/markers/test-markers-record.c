/* The ring record of a marker event: event-class fields, exact encoding, the round trip
 * back to the same formatted text, and refusal of short buffers and malformed records. */
#include "markers/record.h"

#include "tap.h"

#include <errno.h>

static TP_POINT(rec_point);

int main(void)
{
	static const char types[] = {TP_ARG_I8,	 TP_ARG_U16,	TP_ARG_I32, TP_ARG_U64,
				     TP_ARG_PTR, TP_ARG_DOUBLE, TP_ARG_STR, 0};
	struct tp_site_desc d = {&rec_point, "%d %u %d %llu %p %.2f %s", types, "f.c", 1, 7};
	union tp_arg a[8] = {{.i = -5},		{.u = 65535},	       {.i = -70000},
			     {.u = 1ull << 40}, {.p = (void *)0x1234}, {.d = 2.5},
			     {.s = "hi"}};
	struct tp_trace_field_desc f[TP_MARKERS_MAX_FIELDS];
	uint8_t buf[128];
	char direct[128], via[128];

	is_int(tp_markers_fields(&d, f), 8, "fmt + 7 fields");
	ok(!strcmp(f[0].name, "fmt") && f[0].type == TP_TRACE_INT && f[0].bits == 32, "fmt u32");
	ok(f[1].type == TP_TRACE_INT && f[1].bits == 8 && f[1].is_signed, "a0 int8");
	ok(f[2].bits == 16 && !f[2].is_signed, "a1 uint16");
	ok(f[3].bits == 32 && f[3].is_signed, "a2 int32");
	ok(f[4].bits == 64 && !f[4].is_signed && f[4].base == 10, "a3 uint64");
	ok(f[5].bits == 64 && f[5].base == 16, "a4 pointer in hex");
	ok(f[6].type == TP_TRACE_FLOAT && f[6].bits == 64 && !strcmp(f[6].name, "a5"),
	   "a5 double as a 64-bit float");
	ok(!strcmp(f[7].name, "a6") && f[7].type == TP_TRACE_STRING, "a6 string");

	/* 4 fmt + 1 + 2 + 4 + 8 + 8 + 8 + 3 ("hi\0") */
	is_int(tp_markers_record_size(&d, a), 38, "record size");
	is_int(tp_markers_encode(&d, 9, a, buf, 37), -ENOSPC, "one byte short: -ENOSPC");
	is_int(tp_markers_encode(&d, 9, a, buf, sizeof(buf)), 38, "encoded size");
	static const uint8_t head[] = {
	    0x09, 0x00, 0x00, 0x00,			    /* fmt id 9 */
	    0xfb,					    /* int8 -5 */
	    0xff, 0xff,					    /* uint16 65535 */
	    0x90, 0xee, 0xfe, 0xff,			    /* int32 -70000 */
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, /* 1 << 40 */
	};
	ok(!memcmp(buf, head, sizeof(head)), "golden bytes of the integer fields");
	ok(!memcmp(buf + 35, "hi", 3), "string NUL-terminated at the end");

	union tp_arg back[8];
	uint32_t id = 0;
	is_int(tp_markers_decode(&d, buf, 38, &id, back), 0, "decode");
	is_int(id, 9, "format id back");
	is_int(back[0].i, -5, "int8 sign-extended back");
	is_int(back[2].i, -70000, "int32 sign-extended back");
	tp_markers_format(&d, a, direct, sizeof(direct));
	tp_markers_format(&d, back, via, sizeof(via));
	is_str(via, direct, "same text from the record");
	is_str(via, "-5 65535 -70000 1099511627776 0x1234 2.50 hi", "text");
	is_int(tp_markers_decode(&d, buf, 37, &id, back), -EINVAL, "truncated record refused");
	is_int(tp_markers_decode(&d, buf, 20, &id, back), -EINVAL, "cut integers refused");

	char big[400];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	static const char stype[] = {TP_ARG_STR, 0};
	struct tp_site_desc ds = {&rec_point, "%s", stype, "f.c", 2, 1};
	union tp_arg sa = {.s = big};
	is_int(tp_markers_record_size(&ds, &sa), 4 + TP_MARKERS_STR_MAX + 1, "long string cut");
	union tp_arg na = {.s = NULL};
	is_int(tp_markers_encode(&ds, 1, &na, buf, sizeof(buf)), 5, "NULL string: empty");

	/* issue 14: what the recorder encodes is read safely first */
	static const char two[] = {TP_ARG_STR, TP_ARG_STR, 0};
	struct tp_site_desc d2 = {&rec_point, "%s %s", two, "f.c", 3, 2};
	union tp_arg bad[2] = {{.s = NULL}, {.s = (const char *)16}};
	struct tp_markers_safe_args safe;
	const union tp_arg *sv = tp_markers_safe_args(&d2, bad, &safe);
	ssize_t len = tp_markers_encode(&d2, 1, sv, buf, sizeof(buf));
	ok(len > 0 && !tp_markers_decode(&d2, buf, (size_t)len, &id, back), "bad pointers encode");
	tp_markers_format(&d2, back, via, sizeof(via));
	is_str(via, "(null) (bad pointer)", "NULL and a bad pointer recorded as markers");
	ok(tp_markers_safe_args(&d, a, &safe) != a, "strings are copied");
	ok(tp_markers_safe_args(&ds, &sa, &safe)[0].s != big, "the copy is the runtime's");
	return tap_done();
}
