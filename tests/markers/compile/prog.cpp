/* Compile test (C++17): the main unit. */
#include "inl.hpp"

TP_POINT(cxx_point);

int main()
{
	inl(1);
	second();
	return 0;
}
