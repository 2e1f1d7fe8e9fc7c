/* bench/markers: instantiates the LTTng-UST probes of lttng-tp.h in the benchmark program
 * itself (a statically linked provider, the cheapest way LTTng-UST offers). */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "lttng-tp.h"
