/* libFuzzer target for the formatter of recorded values (tp_trace_format), which applies
 * format strings read from a trace's .formats file to typed arguments.
 * Input: a type string (at most 8 codes of <tracepad/tracepoint.h>, unknown codes kept: the
 * formatter must cope), a NUL, then the format string; the arguments take fixed values
 * per type.  The text goes into a small buffer, then into one that holds it all, and both
 * must agree. */
#include "trace/trace.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const strs[] = {"", "text", "%s%n%d", "\xff\xfe"};
	union tp_trace_value args[8];
	char types[9], small[16], *big, *fmt;
	const uint8_t *nul = memchr(data, 0, size);
	size_t nt = nul ? (size_t)(nul - data) : 0;
	int n, m;

	if (!nul || nt > 8)
		return 0;
	memcpy(types, data, nt);
	types[nt] = 0;
	fmt = malloc(size - nt);
	if (!fmt)
		return 0;
	memcpy(fmt, nul + 1, size - nt - 1);
	fmt[size - nt - 1] = 0;
	for (size_t i = 0; i < nt; i++) {
		switch (types[i]) {
		case 's':
			args[i].s = strs[i % 4];
			break;
		case 'd':
			args[i].d = i % 2 ? -1.5e300 : 0.1 * (double)i;
			break;
		default:
			args[i].i = i % 2 ? INT64_MIN : (int64_t)i * 1000003;
		}
	}
	n = tp_trace_format(fmt, types, args, nt, small, sizeof(small));
	big = malloc(n >= 0 ? (size_t)n + 1 : 1);
	if (big && n >= 0) {
		m = tp_trace_format(fmt, types, args, nt, big, (size_t)n + 1);
		/* Same length, and the small buffer holds the start of the whole text (%c of 0
		 * writes a NUL: compared as bytes). */
		if (m != n || memcmp(small, big,
				     (size_t)n < sizeof(small) - 1 ? (size_t)n : sizeof(small) - 1))
			abort();
	}
	free(big);
	free(fmt);
	return 0;
}
