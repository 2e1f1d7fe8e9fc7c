/* A program with a point that receives data only its owner should see: run setuid by another
 * user with TRACEPAD_MARKERS='*', it must print nothing but its own line (issue 14). */
#include <tracepad/tracepoint.h>

#include <stdio.h>

TP_POINT(secret_point);

int main(void)
{
	TP_TRACE(secret_point, "secret %s", "root-only data");
	printf("enabled %d\n", tp_point_enabled(&secret_point));
	return 0;
}
