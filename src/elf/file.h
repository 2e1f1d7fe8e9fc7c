/* ELF files at rest for the rest of src/ (libelf stays inside src/elf): opening an x86-64
 * ELF, walking its symbols, notes, dynamic section and segments, reading link-time addresses,
 * the one load-bias rule, and the library search of DT_NEEDED entries.  Symbols of live
 * processes are in elf/symbols.h. */
#ifndef TP_ELF_FILE_H
#define TP_ELF_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct Elf; /* libelf's handle: only src/elf looks inside */

struct tp_elf_file {
	int fd; /* -1 for an image in memory */
	struct Elf *elf;
	unsigned type;	/* e_type: ET_EXEC, ET_DYN (others only from tp_elf_file_open_any) */
	uint64_t entry; /* e_entry */
};

/* Open @path and check it is an x86-64 ET_EXEC/ET_DYN; errors as tp_elf_probe(). */
int tp_elf_file_open(struct tp_elf_file *f, const char *path);
/* Open any ELF file (any class, machine or type: object files too); -ENOEXEC if not ELF. */
int tp_elf_file_open_any(struct tp_elf_file *f, const char *path);
/* Same as tp_elf_file_open() over an image in memory (the vdso); @buf must outlive @f. */
int tp_elf_file_open_mem(struct tp_elf_file *f, void *buf, size_t len);
/* Accepts a file never opened or already closed (fd -1, elf NULL). */
void tp_elf_file_close(struct tp_elf_file *f);

/* ---- symbols ---- */

/* A symbol, as handed to a tp_elf_sym_fn. */
struct tp_elf_sym {
	const char *name;    /* may carry "@VER" or "@@VER" (.symtab of a versioned object) */
	size_t namelen;	     /* length of the name without its version */
	const char *version; /* NULL when unversioned */
	bool hidden;	     /* a non-default version ("name@VER", VERSYM_HIDDEN) */
	bool dynsym;	     /* from .dynsym rather than .symtab */
	bool undef;	     /* undefined (SHN_UNDEF): an import (raw walk only) */
	uint8_t type, bind;  /* STT_FUNC/STT_OBJECT/STT_GNU_IFUNC, STB_* */
	uint64_t value, size;
	uint64_t sec_end; /* end of the symbol's section, UINT64_MAX if unknown */
};

/* Called for each symbol; a non-zero return stops the walk and is returned. */
typedef int (*tp_elf_sym_fn)(void *arg, const struct tp_elf_sym *sym);

/* Walk the defined FUNC/OBJECT/IFUNC symbols of .symtab, then of .dynsym. */
int tp_elf_file_foreach_sym(struct tp_elf_file *f, tp_elf_sym_fn fn, void *arg);
/* Walk every named symbol of every symbol table in section order, undefined ones included,
 * without interpreting versions (namelen is the whole name, version NULL). */
int tp_elf_file_foreach_sym_raw(struct tp_elf_file *f, tp_elf_sym_fn fn, void *arg);
/* Does @path import @name (an undefined symbol of .dynsym)? */
bool tp_elf_imports(const char *path, const char *name);

/* The separate debug file of @path (build ID under /usr/lib/debug/.build-id, or
 * .gnu_debuglink), malloc'ed, or NULL when @path has a .symtab of its own or none is
 * installed. */
char *tp_elf_debug_file(const char *path);

/* ---- notes ---- */

struct tp_elf_note {
	uint32_t type;
	const char *owner; /* n_namesz bytes, the NUL included */
	size_t owner_size;
	const void *desc;
	size_t desc_size;
};

/* Walk the notes of the SHT_NOTE sections named @section (every note section when NULL). */
int tp_elf_file_foreach_note(struct tp_elf_file *f, const char *section,
			     int (*fn)(void *arg, const struct tp_elf_note *n), void *arg);

/* ---- link-time addresses ---- */

/* @len bytes at link-time address @vaddr from the file's allocated sections: 0, -ENOENT (no
 * section holds them) or -EIO. */
int tp_elf_file_read(struct tp_elf_file *f, uint64_t vaddr, void *buf, size_t len);
/* The NUL-terminated string at @vaddr, malloc'ed, or NULL. */
char *tp_elf_file_string(struct tp_elf_file *f, uint64_t vaddr);
/* A pointer stored at @vaddr as the loader would see it relative to the object: the word in
 * the file, or the addend of its R_X86_64_RELATIVE relocation (position-independent code);
 * 0 if none. */
uint64_t tp_elf_file_pointer(struct tp_elf_file *f, uint64_t vaddr);
/* Up to @len bytes of @path's PT_LOAD segments at link-time address @vaddr (what the loader
 * maps there, before any breakpoint): the count, or -errno (-ENOENT: not in a segment). */
ssize_t tp_elf_read_loaded(const char *path, uint64_t vaddr, void *buf, size_t len);

/* ---- TLS ---- */

/* Offset from the thread pointer of TLS symbol @name (or the first of @names found) of a
 * statically linked program (variant II: its TLS block ends at the thread pointer).
 * Returns 0, -ENOENT (no such symbol, or not a static program with TLS) or -errno. */
int tp_elf_static_tls_offset(const char *path, const char *const *names, size_t nnames,
			     int64_t *tpoff);

/* ---- segments and load bias ---- */

/* The PT_LOAD segments, as needed to turn a mapping into a load bias. */
struct tp_elf_load {
	uint64_t vaddr, offset, filesz, memsz;
	bool exec;
};

/* Fill a malloc'ed array of the PT_LOAD segments; returns their count or -errno. */
int tp_elf_file_loads(struct tp_elf_file *f, struct tp_elf_load **out);

/* The load-bias rule, the one every part of tracepad uses: a mapping at @start of file offset
 * @offset has its first byte at link-time address p_vaddr + (offset - p_offset) of the
 * segment that holds it (an executable one when two share the page).  0 or -ENOENT. */
int tp_elf_loads_bias(const struct tp_elf_load *loads, size_t n, uint64_t start, uint64_t offset,
		      uint64_t *bias);
/* Same for the file @path (opened, read and closed). */
int tp_elf_map_bias(const char *path, uint64_t start, uint64_t offset, uint64_t *bias);

/* ---- libraries ---- */

/* The first readable file named @name in the colon-separated directories @dirs ("$ORIGIN" at
 * the start of an entry is @origin), malloc'ed, or NULL. */
char *tp_elf_search_dirs(const char *name, const char *dirs, const char *origin);
/* Hand each library @path needs directly (DT_NEEDED) to @fn, found as the loader would in
 * the common cases: a name with a '/' as it is, else LD_LIBRARY_PATH, DT_RUNPATH (or
 * DT_RPATH), then the system's directories (/etc/ld.so.cache is not read).  Libraries not
 * found are skipped.  Returns 0, what @fn returned, or -errno. */
int tp_elf_foreach_needed(const char *path, int (*fn)(void *arg, const char *lib), void *arg);

#endif
