/* ELF and symbol helpers over elfutils (libelf, libdw): symbols of an ELF file at rest, and
 * address -> object:function+off for a live process from /proc/PID/maps. */
#ifndef TP_ELF_SYMBOLS_H
#define TP_ELF_SYMBOLS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct tp_elf_info {
	bool is_dyn;	     /* ET_DYN (PIE or shared object): loaded at a bias */
	bool is_static;	     /* no PT_INTERP and no PT_DYNAMIC */
	bool has_symtab;     /* .symtab present (not stripped) */
	uint64_t entry;	     /* e_entry, link-time */
	uint64_t first_load; /* p_vaddr of the first PT_LOAD, page-aligned down */
};

/* Check that @path is an x86-64 ELF executable or shared object and describe it.
 * Returns 0, -ENOENT / -EACCES (from open), -ENOEXEC (not an ELF file), -EINVAL (an ELF of
 * another class or machine).  @info may be NULL. */
int tp_elf_probe(const char *path, struct tp_elf_info *info);

/* Link-time address and size of function or object @name, from .symtab then .dynsym
 * (defined symbols only; a versioned name such as "memcpy@GLIBC_2.14" also matches
 * "memcpy").  Returns 0 or -ENOENT, or the errors of tp_elf_probe(). */
int tp_elf_lookup(const char *path, const char *name, uint64_t *vaddr, uint64_t *size);

/* Link-time address of main() of a program that may be stripped: the symbol when present,
 * else decoded from the entry code (_start loads main's address into %rdi before calling
 * __libc_start_main).  Returns 0 or -ENOENT. */
int tp_elf_find_main(const char *path, uint64_t *vaddr);

/* Load bias of the main executable of live process @pid: its first mapping in
 * /proc/PID/maps under the elf/file.h rule.  Returns 0, -ENOENT or -errno. */
int tp_elf_exe_bias(pid_t pid, uint64_t *bias);

/* An executable mapping of a live process. */
struct tp_map {
	uint64_t start, end, offset;
	uint64_t bias;	  /* runtime address - link-time address for this object */
	const char *path; /* owned by the symtab; "[vdso]" etc. for special maps */
};

/* A resolved address. */
struct tp_symloc {
	const char *object;   /* path of the object, never NULL ("?" if unknown) */
	const char *function; /* symbol name, NULL when no symbol covers the address */
	uint64_t offset;      /* from the function's start, or from the object's bias if none */
	uint64_t func_addr;   /* runtime address of the function (0 if none) */
	const char *file;     /* DWARF source file, NULL without debug info */
	int line;	      /* DWARF line, 0 without debug info */
};

/* Symbol tables of the objects mapped into one process, loaded lazily. */
struct tp_symtab;

struct tp_symtab *tp_symtab_new(void);
void tp_symtab_free(struct tp_symtab *st);
/* (Re)read the executable mappings of @pid from /proc/PID/maps; mappings seen before and
 * gone now are kept, so addresses recorded earlier (dlclose'd objects) still resolve.
 * Returns 0 or -errno. */
int tp_symtab_load_pid(struct tp_symtab *st, pid_t pid);
/* Add one mapping by hand (the agent records mappings itself, tests use it too). */
int tp_symtab_add_map(struct tp_symtab *st, uint64_t start, uint64_t end, uint64_t offset,
		      const char *path);
/* The mapping that holds @addr, or NULL. */
const struct tp_map *tp_symtab_find_map(struct tp_symtab *st, uint64_t addr);
/* Resolve @addr; returns 0 (with at least the object known) or -ENOENT.  With @want_line,
 * also looks up DWARF line info when the object has it. */
int tp_symtab_lookup(struct tp_symtab *st, uint64_t addr, bool want_line, struct tp_symloc *out);
/* Runtime address of symbol @name ("fn" in the main executable or any object, or
 * "object:fn" where object is a path or a basename prefix such as "libc").  Returns 0 or
 * -ENOENT. */
int tp_symtab_find_symbol(struct tp_symtab *st, const char *name, uint64_t *addr);

#endif
