/* bench/trace, LTTng-UST's side: the tracepoint provider, with the fields of tracepad's
 * "bench" event class (4 x uint64, 32 bytes of payload). */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER tpbench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./lttng-tp.h"

#if !defined(TP_BENCH_LTTNG_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define TP_BENCH_LTTNG_TP_H

#include <lttng/tracepoint.h>
#include <stdint.h>

/* clang-format off */
LTTNG_UST_TRACEPOINT_EVENT(tpbench, bench,
	LTTNG_UST_TP_ARGS(uint64_t, a, uint64_t, b, uint64_t, c, uint64_t, d),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_integer(uint64_t, a, a)
		lttng_ust_field_integer(uint64_t, b, b)
		lttng_ust_field_integer(uint64_t, c, c)
		lttng_ust_field_integer(uint64_t, d, d)
	)
)
/* clang-format on */

#endif

#include <lttng/tracepoint-event.h>
