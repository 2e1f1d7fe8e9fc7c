/* A library whose dlopen depends on its caller: libdlplug.so is only in this library's
 * RUNPATH ($ORIGIN/plugins), which glibc's dlopen picks by its return address. */
#include <dlfcn.h>

#include "dlorigin.h"

int dlorigin_plugin_value(void)
{
	void *h = dlopen("libdlplug.so", RTLD_NOW);
	int (*value)(void);
	int v = -1;

	if (!h)
		return -1;
	value = (int (*)(void))dlsym(h, "plug_value");
	if (value)
		v = value();
	dlclose(h);
	return v;
}
