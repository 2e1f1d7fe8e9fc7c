/* Target of markers-names: events whose formats name their fields ("bytes=%d from=%s"),
 * partly ("len: %zu %d"), twice the same word, and not at all; prints "fired K". */
#include <stdio.h>

#include <tracepad/tracepoint.h>

TP_POINT(net_recv);
TP_POINT(net_len);
TP_POINT(net_dup);
TP_POINT(net_plain);

int main(void)
{
	int n = 0;

	for (int i = 0; i < 3; i++) {
		TP_TRACE(net_recv, "bytes=%d from=%s", 100 + i, "peer");
		TP_TRACE(net_len, "len: %zu %d", (size_t)i, -i);
		TP_TRACE(net_dup, "x=%d x=%d int=%d", i, 2 * i, 3 * i);
		TP_TRACE(net_plain, "plain %d", i);
		n += 4;
	}
	printf("fired %d\n", n);
	return 0;
}
