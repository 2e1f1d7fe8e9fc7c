/* A shared library with its own tracepoints, dlopened by test-markers. */
#include <tracepad/tracepoint.h>

TP_POINT(lib_point);

__attribute__((visibility("default"))) void plugin_run(int n)
{
	TP_TRACE(lib_point, "lib %d %s", n, "x");
}
