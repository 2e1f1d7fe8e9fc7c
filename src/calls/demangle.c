/* C++ names as the source spells them (ns::Widget::get(int) const) for `tracepad calls`'
 * output and -e patterns: the toolchain's demangler, libstdc++'s __cxa_demangle (the
 * Itanium C++ ABI's), asked only about names that are mangled (_Z...). */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#include "calls/select.h"

/* Declared by <cxxabi.h> for C++; extern "C" by the ABI, so callable from C. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

char *tp_calls_demangle(const char *sym)
{
	char *d;
	int status = 0;

	/* Only Itanium-mangled names: C names are never looked at (no cost for C programs). */
	if (sym[0] != '_' || sym[1] != 'Z') {
		errno = EINVAL;
		return NULL;
	}
	d = __cxa_demangle(sym, NULL, NULL, &status);
	if (!d || status) {
		free(d);
		errno = status == -1 ? ENOMEM : EINVAL;
		return NULL;
	}
	return d;
}
