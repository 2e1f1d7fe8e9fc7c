/* Compile test (C11): a second unit using a point defined elsewhere. */
#include <tracepad/tracepoint.h>

TP_POINT_DECLARE(cpoint);
void second(void);

void second(void)
{
	TP_TRACE(cpoint, "second %ld %c", 123456789012L, 'q');
}
