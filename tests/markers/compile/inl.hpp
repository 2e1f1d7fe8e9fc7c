/* Compile test (C++17): a site in an inline function emitted by two units (COMDAT). */
#include <tracepad/tracepoint.h>

TP_POINT_DECLARE(cxx_point);
inline void inl(int n)
{
	TP_TRACE(cxx_point, "inl %d", n);
}
void second();
