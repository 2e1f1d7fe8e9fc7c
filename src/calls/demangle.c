/* C++ names as the source spells them (ns::Widget::get(int) const) for `tracepad calls`'
 * output and -e patterns: the toolchain's demangler, libstdc++'s __cxa_demangle (the
 * Itanium C++ ABI's), asked only about names that are mangled (_Z...). */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#include "calls/select.h"

/* Declared by <cxxabi.h> for C++; extern "C" by the ABI, so callable from C.  Looked up in
 * libstdc++ at the first mangled name, not linked: loading libstdc++ at every start of
 * tracepad cost 5 ms of CPU here, more than a short `count` run's own work. */
typedef char *demangle_fn(const char *mangled, char *buf, size_t *len, int *status);

static demangle_fn *demangler(void)
{
	static demangle_fn *fn;
	static int tried;
	void *h;

	if (__atomic_load_n(&tried, __ATOMIC_ACQUIRE))
		return __atomic_load_n(&fn, __ATOMIC_ACQUIRE);
	h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
	if (h)
		__atomic_store_n(&fn, (demangle_fn *)dlsym(h, "__cxa_demangle"), __ATOMIC_RELEASE);
	__atomic_store_n(&tried, 1, __ATOMIC_RELEASE);
	return __atomic_load_n(&fn, __ATOMIC_ACQUIRE);
}

char *tp_calls_demangle(const char *sym)
{
	char *d;
	int status = 0;

	/* Only Itanium-mangled names: C names are never looked at (no cost for C programs). */
	if (sym[0] != '_' || sym[1] != 'Z') {
		errno = EINVAL;
		return NULL;
	}
	if (!demangler()) {
		errno = ENOSYS;
		return NULL;
	}
	d = demangler()(sym, NULL, NULL, &status);
	if (!d || status) {
		free(d);
		errno = status == -1 ? ENOMEM : EINVAL;
		return NULL;
	}
	return d;
}
