/* bench/markers, LTTng-UST's side: two tracepoints with the same fields as the tracepad site
 * (an int and a string), "on" enabled by the driver's session and "off" never enabled. */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER tpmarkers

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./lttng-tp.h"

#if !defined(TP_BENCH_MARKERS_LTTNG_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define TP_BENCH_MARKERS_LTTNG_TP_H

#include <lttng/tracepoint.h>

/* clang-format off */
LTTNG_UST_TRACEPOINT_EVENT_CLASS(tpmarkers, ev,
	LTTNG_UST_TP_ARGS(int, n, const char *, s),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_integer(int, n, n)
		lttng_ust_field_string(s, s)
	)
)
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(tpmarkers, ev, tpmarkers, off,
	LTTNG_UST_TP_ARGS(int, n, const char *, s))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(tpmarkers, ev, tpmarkers, on,
	LTTNG_UST_TP_ARGS(int, n, const char *, s))
/* clang-format on */

#endif

#include <lttng/tracepoint-event.h>
