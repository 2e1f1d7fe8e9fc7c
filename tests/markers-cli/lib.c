/* The shared library that tests/markers-cli's target dlopens: points of its own. */
#include <tracepad/tracepoint.h>

TP_POINT(mc_lib);
TP_POINT(lib_delta);

__attribute__((visibility("default"))) void mc_lib_fire(int i)
{
	TP_TRACE(mc_lib, "lib i=%d", i);
	TP_TRACE(lib_delta, "delta %s", "x");
}
