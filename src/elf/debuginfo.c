/* Separate debug files: the file that holds the symbol table (and DWARF) of a stripped
 * object, found by elfutils' standard lookup: /usr/lib/debug/.build-id/xx/yyyy.debug from the
 * build ID, else .gnu_debuglink next to the object, in .debug/ and under /usr/lib/debug. */
#include "elf/file.h"
#include "base/log.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

char *tp_elf_debug_file(const char *path)
{
	static const Dwfl_Callbacks cbs = {
	    .find_elf = dwfl_build_id_find_elf,
	    .find_debuginfo = dwfl_standard_find_debuginfo,
	    .section_address = dwfl_offline_section_address,
	};
	const char *debugfile = NULL;
	char *out = NULL;
	Dwfl_Module *mod;
	Dwfl *dwfl;

	dwfl = dwfl_begin(&cbs);
	if (!dwfl)
		return NULL;
	dwfl_report_begin(dwfl);
	mod = dwfl_report_offline(dwfl, path, path, -1);
	dwfl_report_end(dwfl, NULL, NULL);
	/* Reading the symbol table looks for the debug file when the object has no .symtab. */
	if (mod && dwfl_module_getsymtab(mod) >= 0)
		dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, NULL, &debugfile);
	if (debugfile && strcmp(debugfile, path))
		out = strdup(debugfile);
	if (out)
		tp_dbg("elf: %s: symbols from %s", path, out);
	dwfl_end(dwfl);
	return out;
}
