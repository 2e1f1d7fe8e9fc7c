/* Which functions `tracepad calls` traces: -e patterns over OBJECT:FUNCTION, and the
 * function symbols of an ELF object they are matched against. */
#ifndef TP_CALLS_SELECT_H
#define TP_CALLS_SELECT_H

#include <stdbool.h>
#include <stdint.h>

struct tp_select;

/* Parse the -e arguments (each a comma-separated list of OBJECT:FUNCTION, FUNCTION, or
 * ltrace's FUNCTION@OBJECT; the ':' of OBJECT is the first one not in a C++ "::").  On a malformed
 * pattern returns NULL with a one-line reason in @err. */
struct tp_select *tp_select_new(char *const *args, int nargs, char *err, size_t errlen);
void tp_select_free(struct tp_select *s);
/* Add one more argument (a plugin's choice), applied after the others. */
int tp_select_add(struct tp_select *s, const char *arg, char *err, size_t errlen);
/* Is @fn of object @obj (a path) selected, given whether the default selection holds it?
 * @dfn: its demangled name (C++), or NULL; a pattern matches either name.  Each pattern
 * that matches it is marked as having matched a function. */
bool tp_select_match(struct tp_select *s, const char *obj, const char *fn, const char *dfn,
		     bool dflt);
/* Warn (tp_warn) of each pattern of the -e arguments (not those added) that has matched no
 * function; returns how many. */
int tp_select_warn_unmatched(const struct tp_select *s);
/* Could @obj hold a selected function at all (to skip reading objects no pattern names)? */
bool tp_select_may_match(const struct tp_select *s, const char *obj, bool dflt_any);
/* Should object @obj be read with its separate debug file's symbols (tp_fsyms_read)?  When
 * it is the program (@main: its functions are the default selection) or a pattern of @s
 * or of @csel (NULL: none) may name a function of it; the default selection of a
 * library's functions, the program's imports, needs only its .dynsym. */
bool tp_select_wants_debug(const struct tp_select *s, const struct tp_select *csel, const char *obj,
			   bool main);
/* Function @fn of an object that may match nothing (skipped): a deselection that names it
 * has matched a function all the same. */
void tp_select_note(struct tp_select *s, const char *obj, const char *fn, const char *dfn);
/* Has @s patterns at all (otherwise names need not be demangled to be matched)?  Has it a
 * deselection that tp_select_note could still mark? */
bool tp_select_has_patterns(const struct tp_select *s);
bool tp_select_wants_notes(const struct tp_select *s);
/* The demangled name of C++ symbol @sym (malloc'd), or NULL: errno EINVAL when @sym is not
 * a mangled name (_Z...), ENOMEM (demangle.c). */
char *tp_calls_demangle(const char *sym);

/* A defined function of an object, with all the names at its address. */
struct tp_fsym {
	uint64_t vaddr; /* link-time */
	uint64_t size;
	bool ifunc; /* STT_GNU_IFUNC: vaddr is the resolver */
	int nnames;
	const char **names; /* best first: global, then weak, then local; no '_' prefix first */
};

struct tp_fsyms {
	struct tp_fsym *f;
	int n;
	const char **imports; /* undefined function symbols of .dynsym (names without version) */
	int nimports;
	void *shared; /* the cache entry the tables belong to, or NULL: they are @out's own */
};

/* The function symbols of ELF @path (.symtab and .dynsym); with @debug, those of a stripped
 * object's separate debug file's .symtab too (found as elf/file.h's tp_elf_debug_file()
 * finds it: libc6-dbg's thousands of local functions, a few ms to read and sort), which
 * only a selection by name needs.  Read-only: the tables of a file read before with the
 * same @debug and unchanged since (same inode, size and mtime) are shared.  Returns 0 or
 * -errno. */
int tp_fsyms_read(const char *path, bool debug, struct tp_fsyms *out);
void tp_fsyms_release(struct tp_fsyms *fs);

/* Basename of @path. */
const char *tp_select_base(const char *path);

#endif
