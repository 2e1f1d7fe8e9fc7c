/* Compile test (C11): points in two translation units of one program. */
#include <tracepad/tracepoint.h>

TP_POINT(cpoint);
TP_POINT(coff);
void second(void);

int main(void)
{
	TP_TRACE(cpoint, "c %d %u %s %.1f", -3, 7u, "s", 1.5);
	TP_TRACE(coff, "never %d", 1);
	second();
	return 0;
}
