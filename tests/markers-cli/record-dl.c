/* A library the record target loads only with dlopen, after it started: its class must still
 * reach the trace (the runtime declares it when the library registers). */
#include <tracepad/tracepoint.h>

TP_POINT(rec_dl);

__attribute__((visibility("default"))) void rec_dl_fire(int v);

void rec_dl_fire(int v)
{
	TP_TRACE(rec_dl, "dl %s %.3f %d", "late", 1.25 * v, v);
}
