/* Compile test (C++17): a second unit with the same inline function and typed arguments. */
#include "inl.hpp"

#include <string>

enum class color : unsigned char { red = 2 };

void second()
{
	std::string s = "str";
	inl(2);
	TP_TRACE(cxx_point, "enum %d nul %p %s %u %.3f", color::red, nullptr, s.c_str(), 5u, 0.25f);
}
