/* Internals shared by symbols-elf.c (one ELF file at rest) and symbols.c (the per-process
 * table): opening an x86-64 ELF with libelf and walking its defined symbols. */
#ifndef TP_ELF_SYMBOLS_PRIV_H
#define TP_ELF_SYMBOLS_PRIV_H

#include <gelf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tp_elf_file {
	int fd; /* -1 for an image in memory */
	Elf *elf;
	GElf_Ehdr ehdr;
};

/* Open @path and check it is an x86-64 ET_EXEC/ET_DYN; errors as tp_elf_probe(). */
int tp_elf_file_open(struct tp_elf_file *f, const char *path);
/* Same over an image in memory (the vdso); @buf must outlive @f. */
int tp_elf_file_open_mem(struct tp_elf_file *f, void *buf, size_t len);
void tp_elf_file_close(struct tp_elf_file *f);

/* A defined function or data symbol, as handed to a tp_elf_sym_fn. */
struct tp_elf_sym {
	const char *name;    /* may carry "@VER" or "@@VER" (.symtab of a versioned object) */
	size_t namelen;	     /* length of the name without its version */
	const char *version; /* NULL when unversioned */
	bool hidden;	     /* a non-default version ("name@VER", VERSYM_HIDDEN) */
	bool dynsym;	     /* from .dynsym rather than .symtab */
	uint8_t type, bind;  /* STT_FUNC/STT_OBJECT/STT_GNU_IFUNC, STB_* */
	uint64_t value, size;
	uint64_t sec_end; /* end of the symbol's section, UINT64_MAX if unknown */
};

/* Called for each symbol; a non-zero return stops the walk and is returned. */
typedef int (*tp_elf_sym_fn)(void *arg, const struct tp_elf_sym *sym);

/* Walk the defined FUNC/OBJECT/IFUNC symbols of .symtab, then of .dynsym. */
int tp_elf_file_foreach_sym(struct tp_elf_file *f, tp_elf_sym_fn fn, void *arg);

/* The PT_LOAD segments, as needed to turn a mapping into a load bias. */
struct tp_elf_load {
	uint64_t vaddr, offset, filesz, memsz;
	bool exec;
};

/* Fill a malloc'ed array of the PT_LOAD segments; returns their count or -errno. */
int tp_elf_file_loads(struct tp_elf_file *f, struct tp_elf_load **out);

/* Load bias of a mapping at @start of file offset @offset, given the object's segments:
 * the mapping's first byte is at link-time address p_vaddr + (offset - p_offset) of the
 * segment that holds it (an executable one when two share the page). */
int tp_elf_loads_bias(const struct tp_elf_load *loads, size_t n, uint64_t start, uint64_t offset,
		      uint64_t *bias);

#endif
