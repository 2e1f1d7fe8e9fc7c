/* A library the record target links with: its points are found through the target's
 * DT_NEEDED and recorded like the executable's. */
#include <tracepad/tracepoint.h>

TP_POINT(rec_lib);

__attribute__((visibility("default"))) void rec_lib_fire(int v);

void rec_lib_fire(int v)
{
	TP_TRACE(rec_lib, "lib %s %d", "in lib", v);
}
