/* The libraries an object needs, found as the dynamic loader finds them in the common cases
 * (`tracepad markers list PROGRAM` reads their notes too). */
#include "elf/file.h"

#include <errno.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where the loader looks last, after LD_LIBRARY_PATH and the object's run paths. */
static const char sysdirs[] = "/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:"
			      "/lib64:/usr/lib64:/lib:/usr/lib:/usr/local/lib";

char *tp_elf_search_dirs(const char *name, const char *dirs, const char *origin)
{
	for (const char *p = dirs; p && *p;) {
		size_t len = strcspn(p, ":");
		char *full;
		int r;

		if (len >= 7 && !strncmp(p, "$ORIGIN", 7))
			r = asprintf(&full, "%s%.*s/%s", origin, (int)(len - 7), p + 7, name);
		else
			r = asprintf(&full, "%.*s/%s", (int)len, len ? p : ".", name);
		if (r < 0)
			return NULL;
		if (!access(full, R_OK))
			return full;
		free(full);
		p += len;
		if (*p == ':')
			p++;
	}
	return NULL;
}

int tp_elf_foreach_needed(const char *path, int (*fn)(void *arg, const char *lib), void *arg)
{
	char **needed = NULL, *origin = strdup(path), *slash;
	const char *runpath = NULL;
	struct tp_elf_file f;
	Elf_Scn *scn = NULL;
	size_t n = 0;
	int err = 0;

	if (!origin)
		return -ENOMEM;
	slash = strrchr(origin, '/');
	if (slash)
		*slash = 0;
	else
		strcpy(origin, ".");
	err = tp_elf_file_open_any(&f, path);
	if (err)
		goto err_origin;
	while ((scn = elf_nextscn(f.elf, scn))) {
		GElf_Shdr sh;
		GElf_Dyn dyn;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNAMIC ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		for (int i = 0; gelf_getdyn(d, i, &dyn) && dyn.d_tag != DT_NULL; i++) {
			const char *s = elf_strptr(f.elf, sh.sh_link, dyn.d_un.d_val);
			char **v;

			if (!s)
				continue;
			if (dyn.d_tag == DT_RUNPATH || (dyn.d_tag == DT_RPATH && !runpath)) {
				runpath = s;
			} else if (dyn.d_tag == DT_NEEDED &&
				   (v = realloc(needed, (n + 1) * sizeof(*v)))) {
				needed = v;
				needed[n++] = (char *)s;
			}
		}
	}
	for (size_t i = 0; i < n && !err; i++) {
		char *lib = strchr(needed[i], '/') ? strdup(needed[i]) : NULL;

		if (!lib)
			lib = tp_elf_search_dirs(needed[i], getenv("LD_LIBRARY_PATH"), origin);
		if (!lib)
			lib = tp_elf_search_dirs(needed[i], runpath, origin);
		if (!lib)
			lib = tp_elf_search_dirs(needed[i], sysdirs, origin);
		if (lib)
			err = fn(arg, lib);
		free(lib);
	}
	free(needed);
	tp_elf_file_close(&f);
err_origin:
	free(origin);
	return err;
}
