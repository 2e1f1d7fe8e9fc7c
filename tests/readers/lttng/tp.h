/* The tracepoint provider of the LTTng-UST fixture: one event of each field kind that
 * LTTng-UST 2.13 writes (integers of every width and sign, hex, float, string, array,
 * sequence, enum), so the reader is checked against what a real LTTng trace holds. */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER tpfix

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./tp.h"

#if !defined(TP_FIX_LTTNG_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define TP_FIX_LTTNG_TP_H

#include <lttng/tracepoint.h>
#include <stdint.h>

/* clang-format off */
LTTNG_UST_TRACEPOINT_ENUM(tpfix, colour,
	LTTNG_UST_TP_ENUM_VALUES(
		lttng_ust_field_enum_value("red", 0)
		lttng_ust_field_enum_value("green", 1)
		lttng_ust_field_enum_range("blue", 2, 9)
	)
)

LTTNG_UST_TRACEPOINT_EVENT(tpfix, ints,
	LTTNG_UST_TP_ARGS(int, i, uint8_t, u8, int16_t, s16, uint64_t, u64, int64_t, s64),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_integer(int, i, i)
		lttng_ust_field_integer(uint8_t, u8, u8)
		lttng_ust_field_integer(int16_t, s16, s16)
		lttng_ust_field_integer(uint64_t, u64, u64)
		lttng_ust_field_integer_hex(int64_t, s64hex, s64)
	)
)

LTTNG_UST_TRACEPOINT_EVENT(tpfix, misc,
	LTTNG_UST_TP_ARGS(const char *, s, const int *, arr, unsigned int, n, double, d, int, c),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_string(str, s)
		lttng_ust_field_array(int, arr, arr, 3)
		lttng_ust_field_sequence(int, seq, arr, unsigned int, n)
		lttng_ust_field_float(double, dbl, d)
		lttng_ust_field_enum(tpfix, colour, int, colour, c)
		lttng_ust_field_array_text(char, txt, s, 4)
	)
)
/* clang-format on */

#endif

#include <lttng/tracepoint-event.h>
