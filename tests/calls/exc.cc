// C++ target of `tracepad calls`: exceptions thrown through 3 traced frames (tpx_f3 -> tpx_f2
// -> tpx_f1) and caught in a traced tpx_catch, between calls of the library, so that the test
// sees whether unwinding still works and later returns are still right.
#include <cstdio>
#include <stdexcept>

extern "C" {
#include "lib.h"
}

#define TPX extern "C" __attribute__((noinline, noipa))

// Odd x returns 5x; even x throws.
TPX int tpx_f3(int x)
{
	if (x % 2 == 0)
		throw std::runtime_error("even");
	return 5 * x;
}

TPX int tpx_f2(int x)
{
	return tpx_f3(x) + 1;
}

TPX int tpx_f1(int x)
{
	return tpx_f2(x) + 1;
}

// 5x + 2 when nothing was thrown, 1000 + x when it was.
TPX int tpx_catch(int x)
{
	try {
		return tpx_f1(x);
	} catch (const std::runtime_error &) {
		return 1000 + x;
	}
}

int main()
{
	for (int x = 1; x <= 4; x++) {
		std::printf("catch %d = %d\n", x, tpx_catch(x));
		std::printf("add %d = %d\n", x, tpc_add(x, 300));
	}
	// Caught in main, an untraced frame, through the 3 traced ones.
	for (int x = 2; x <= 6; x += 2) {
		try {
			std::printf("f1 %d = %d\n", x, tpx_f1(x));
		} catch (const std::runtime_error &e) {
			std::printf("main caught %d %s\n", x, e.what());
		}
		std::printf("add %d = %d\n", x, tpc_add(x, 400));
	}
	return 0;
}
