/* Taking over a program at its execve stop (see dbt.h).  The runtime and libZydis are
 * loaded here, on the tracer side, by a small ELF loader: their segments are laid out in
 * one buffer, relocated for the address they will have, written into the stopped program
 * and protected; libZydis's few libc imports are bound to the runtime's own functions.
 * The program's loader never sees either object. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <unistd.h>

#include <Zydis/Zydis.h>

#include "dbt/dbt.h"
#include "dbt/rt-abi.h"
#include "proc/inject.h"

#define PAGE 4096ull

struct image {
	char *file;
	size_t size;
	const char *path;
	uint8_t *mem; /* the laid-out image */
	uint64_t span, base;
	const Elf64_Sym *syms;
	size_t nsyms;
	const char *strs;
	size_t strsz;
};

struct ctx {
	struct tp_proc *p;
	pid_t pid;
	char *err;
	size_t errlen;
};

static int fail(struct ctx *c, int err, const char *fmt, const char *a, const char *b)
{
	snprintf(c->err, c->errlen, fmt, a, b);
	return err;
}

static int inject(struct ctx *c, long nr, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3,
		  uint64_t a4, uint64_t a5, int64_t *ret)
{
	const uint64_t args[6] = {a0, a1, a2, a3, a4, a5};
	int err = tp_proc_inject_syscall(c->p, c->pid, c->pid, nr, args, ret);

	if (!err && *ret < 0 && *ret > -4096)
		err = (int)*ret;
	return err;
}

static int map_fixed(struct ctx *c, uint64_t at, uint64_t size, int prot, int flags, int fd)
{
	int64_t ret;
	int err = inject(c, SYS_mmap, at, size, (uint64_t)prot,
			 (uint64_t)(flags | MAP_FIXED_NOREPLACE), (uint64_t)(int64_t)fd, 0, &ret);

	if (!err && (uint64_t)ret != at)
		err = -EEXIST;
	return err;
}

static void image_free(struct image *im)
{
	free(im->file);
	free(im->mem);
}

static const void *at_off(const struct image *im, uint64_t off, uint64_t len)
{
	return off <= im->size && len <= im->size - off ? im->file + off : NULL;
}

/* Read the file and lay its PT_LOAD segments out as they will be mapped. */
static int image_read(struct ctx *c, struct image *im, const char *path)
{
	const Elf64_Ehdr *eh;
	const Elf64_Phdr *ph;
	const Elf64_Shdr *sh;
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	memset(im, 0, sizeof(*im));
	im->path = path;
	if (fd < 0 || fstat(fd, &st) || !(im->file = malloc((size_t)st.st_size)) ||
	    read(fd, im->file, (size_t)st.st_size) != st.st_size) {
		int err = -errno ? -errno : -EIO;

		if (fd >= 0)
			close(fd);
		return fail(c, err, "cannot read %s%s", path, "");
	}
	close(fd);
	im->size = (size_t)st.st_size;
	eh = at_off(im, 0, sizeof(*eh));
	if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_type != ET_DYN ||
	    eh->e_machine != EM_X86_64 ||
	    !(ph = at_off(im, eh->e_phoff, eh->e_phnum * sizeof(*ph))) ||
	    !(sh = at_off(im, eh->e_shoff, eh->e_shnum * sizeof(*sh))))
		return fail(c, -ENOEXEC, "%s: not an x86-64 shared object%s", path, "");
	for (int i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr + ph[i].p_memsz > im->span)
			im->span = ph[i].p_vaddr + ph[i].p_memsz;
	im->span = (im->span + PAGE - 1) & ~(PAGE - 1);
	im->mem = calloc(1, im->span);
	if (!im->mem)
		return -ENOMEM;
	for (int i = 0; i < eh->e_phnum; i++) {
		const void *src = at_off(im, ph[i].p_offset, ph[i].p_filesz);

		if (ph[i].p_type != PT_LOAD)
			continue;
		if (!src || ph[i].p_filesz > ph[i].p_memsz)
			return fail(c, -ENOEXEC, "%s: bad segment%s", path, "");
		memcpy(im->mem + ph[i].p_vaddr, src, ph[i].p_filesz);
	}
	for (int i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum)
			continue;
		im->syms = at_off(im, sh[i].sh_offset, sh[i].sh_size);
		im->nsyms = sh[i].sh_size / sizeof(Elf64_Sym);
		im->strs = at_off(im, sh[sh[i].sh_link].sh_offset, sh[sh[i].sh_link].sh_size);
		im->strsz = sh[sh[i].sh_link].sh_size;
	}
	if (!im->syms || !im->strs)
		return fail(c, -ENOEXEC, "%s: no dynamic symbols%s", path, "");
	return 0;
}

static const char *sym_name(const struct image *im, const Elf64_Sym *s)
{
	return s->st_name < im->strsz ? im->strs + s->st_name : "";
}

/* Address of the symbol @name that @im defines, 0 when none. */
static uint64_t image_sym(const struct image *im, const char *name)
{
	for (size_t i = 1; i < im->nsyms; i++) {
		const Elf64_Sym *s = &im->syms[i];

		if (s->st_shndx != SHN_UNDEF && !strcmp(sym_name(im, s), name))
			return im->base + s->st_value;
	}
	return 0;
}

static int relocate(struct ctx *c, struct image *im, const Elf64_Rela *r, size_t n,
		    const struct image *imports)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t type = ELF64_R_TYPE(r[i].r_info), si = ELF64_R_SYM(r[i].r_info);
		uint64_t v = 0;

		if (r[i].r_offset + 8 > im->span)
			return fail(c, -ENOEXEC, "%s: bad relocation%s", im->path, "");
		if (si) {
			const Elf64_Sym *s = si < im->nsyms ? &im->syms[si] : NULL;

			if (!s)
				return fail(c, -ENOEXEC, "%s: bad symbol%s", im->path, "");
			if (s->st_shndx != SHN_UNDEF)
				v = im->base + s->st_value;
			else if (imports && (v = image_sym(imports, sym_name(im, s))))
				;
			else if (ELF64_ST_BIND(s->st_info) != STB_WEAK)
				return fail(c, -ENOEXEC, "%s: cannot bind %s", im->path,
					    sym_name(im, s));
		}
		switch (type) {
		case R_X86_64_RELATIVE:
			v = im->base + (uint64_t)r[i].r_addend;
			break;
		case R_X86_64_GLOB_DAT:
		case R_X86_64_JUMP_SLOT:
			break;
		case R_X86_64_64:
			v += (uint64_t)r[i].r_addend;
			break;
		case R_X86_64_NONE:
			continue;
		default:
			return fail(c, -ENOEXEC, "%s: a relocation the loader does not know%s",
				    im->path, "");
		}
		memcpy(im->mem + r[i].r_offset, &v, 8);
	}
	return 0;
}

/* Map @im at @base in the program, relocated, imports from @imports. */
static int image_load(struct ctx *c, struct image *im, uint64_t base, const struct image *imports)
{
	const Elf64_Ehdr *eh = (const void *)im->file;
	const Elf64_Phdr *ph = (const void *)(im->file + eh->e_phoff);
	uint64_t rela = 0, relasz = 0, jmprel = 0, pltsz = 0;
	int err;

	im->base = base;
	for (int i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type != PT_DYNAMIC)
			continue;
		for (uint64_t off = ph[i].p_vaddr;
		     off + sizeof(Elf64_Dyn) <= im->span && off < ph[i].p_vaddr + ph[i].p_memsz;
		     off += sizeof(Elf64_Dyn)) {
			const Elf64_Dyn *d = (const void *)(im->mem + off);

			if (d->d_tag == DT_NULL)
				break;
			if (d->d_tag == DT_RELA)
				rela = d->d_un.d_ptr;
			else if (d->d_tag == DT_RELASZ)
				relasz = d->d_un.d_val;
			else if (d->d_tag == DT_JMPREL)
				jmprel = d->d_un.d_ptr;
			else if (d->d_tag == DT_PLTRELSZ)
				pltsz = d->d_un.d_val;
		}
	}
	if (rela + relasz > im->span || jmprel + pltsz > im->span)
		return fail(c, -ENOEXEC, "%s: bad dynamic section%s", im->path, "");
	/* the tables are read from a copy: relocating may write over them (RELRO data) */
	{
		size_t n1 = relasz / sizeof(Elf64_Rela), n2 = pltsz / sizeof(Elf64_Rela);
		Elf64_Rela *r = malloc((n1 + n2 + 1) * sizeof(*r));

		if (!r)
			return -ENOMEM;
		memcpy(r, im->mem + rela, n1 * sizeof(*r));
		memcpy(r + n1, im->mem + jmprel, n2 * sizeof(*r));
		err = relocate(c, im, r, n1 + n2, imports);
		free(r);
		if (err)
			return err;
	}
	err = map_fixed(c, base, im->span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
	if (err)
		return fail(c, err, "cannot map %s into the program: %s", im->path, strerror(-err));
	err = tp_proc_write(c->pid, base, im->mem, im->span);
	for (int i = 0; !err && i < eh->e_phnum; i++) {
		uint64_t s = ph[i].p_vaddr & ~(PAGE - 1), e = ph[i].p_vaddr + ph[i].p_memsz;
		int prot = (ph[i].p_flags & PF_R ? PROT_READ : 0) |
			   (ph[i].p_flags & PF_W ? PROT_WRITE : 0) |
			   (ph[i].p_flags & PF_X ? PROT_EXEC : 0);
		int64_t ret;

		if (ph[i].p_type != PT_LOAD)
			continue;
		e = (e + PAGE - 1) & ~(PAGE - 1);
		err = inject(c, SYS_mprotect, base + s, e - s, (uint64_t)prot, 0, 0, 0, &ret);
	}
	if (err)
		return fail(c, err, "cannot load %s into the program: %s", im->path,
			    strerror(-err));
	return 0;
}

const char *tp_dbt_runtime_path(const char *agent)
{
	static char path[PATH_MAX];
	static const char *const rel[] = {"../dbt/", ""};
	const char *env = getenv("TRACEPAD_DBT_RT"), *slash;

	if (env && *env)
		return access(env, R_OK) ? NULL : env;
	if (!agent || !(slash = strrchr(agent, '/')))
		return NULL;
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(path, sizeof(path), "%.*s/%stracepad-dbt-rt.so", (int)(slash - agent),
			 agent, rel[i]);
		if (!access(path, R_OK))
			return path;
	}
	return NULL;
}

static const char *const zydis_names[TP_DBT_ZY_COUNT] = {
    [TP_DBT_ZY_DECODER_INIT] = "ZydisDecoderInit",
    [TP_DBT_ZY_DECODE_FULL] = "ZydisDecoderDecodeFull",
    [TP_DBT_ZY_CALC_ABS] = "ZydisCalcAbsoluteAddress",
    [TP_DBT_ZY_MNEMONIC_STRING] = "ZydisMnemonicGetString",
    [TP_DBT_ZY_ENCODE_ABS] = "ZydisEncoderEncodeInstructionAbsolute",
    [TP_DBT_ZY_NOP_FILL] = "ZydisEncoderNopFill",
};

/* $TRACEPAD_DBT_CACHE_SIZE: the code cache's size in bytes (K or M after the number), to
 * test its flushes; 0 when unset (the runtime's default), -1 when it is not a size. */
static int64_t cache_size_env(void)
{
	const char *env = getenv("TRACEPAD_DBT_CACHE_SIZE");
	char *end;
	unsigned long long n;

	if (!env || !*env)
		return 0;
	errno = 0;
	n = strtoull(env, &end, 10);
	if (*end == 'K' || *end == 'k' || *end == 'M' || *end == 'm')
		n <<= (*end++ | 0x20) == 'k' ? 10 : 20;
	return errno || *end || !n || n > (1ull << 40) ? -1 : (int64_t)n;
}

static int boot_write(struct ctx *c, const struct tp_dbt_takeover *o, struct image *rt,
		      struct image *zy, const struct user_regs_struct *regs)
{
	struct tp_dbt_boot *b = calloc(1, sizeof(*b));
	int64_t cache_size = cache_size_env();
	int err;

	if (!b)
		return -ENOMEM;
	if (cache_size < 0) {
		free(b);
		return fail(c, -EINVAL, "TRACEPAD_DBT_CACHE_SIZE is not a size in bytes: %s",
			    getenv("TRACEPAD_DBT_CACHE_SIZE"), "");
	}
	b->cache_size = (uint64_t)cache_size;
	b->magic = TP_DBT_BOOT_MAGIC;
	b->flags = o->boot_flags;
	memcpy(&b->regs, regs, sizeof(b->regs));
	b->pid = c->pid;
	b->heap_end = TP_DBT_HEAP_AT + TP_DBT_HEAP_SIZE - TP_DBT_STACK_SIZE;
	if (o->ctl_fd >= 0) {
		b->ctl = TP_DBT_CTL_AT;
		b->ctl_size = o->ctl_size;
	}
	for (int i = 0; i < TP_DBT_ZY_COUNT; i++)
		if (!(b->zydis[i] = image_sym(zy, zydis_names[i]))) {
			free(b);
			return fail(c, -ENOEXEC, "%s: no %s", zy->path, zydis_names[i]);
		}
	err = tp_proc_write(c->pid, TP_DBT_HEAP_AT, b, sizeof(*b));
	free(b);
	(void)rt;
	return err;
}

int tp_dbt_takeover(struct tp_proc *p, pid_t pid, const struct tp_dbt_takeover *o, char *err,
		    size_t errlen)
{
	struct ctx c = {p, pid, err, errlen};
	struct image rt, zy;
	struct user_regs_struct regs, run;
	Dl_info dl;
	int e;

	memset(&rt, 0, sizeof(rt));
	memset(&zy, 0, sizeof(zy));
	if (!dladdr((void *)&ZydisDecoderInit, &dl) || !dl.dli_fname) {
		snprintf(err, errlen, "cannot find the path of libZydis");
		return -ENOENT;
	}
	e = tp_proc_get_regs(pid, &regs);
	if (!e)
		e = image_read(&c, &rt, o->runtime);
	if (!e)
		e = image_read(&c, &zy, dl.dli_fname);
	if (!e)
		e = image_load(&c, &rt, TP_DBT_RT_AT, NULL);
	if (!e)
		e = image_load(&c, &zy, TP_DBT_ZYDIS_AT, &rt);
	if (!e && (e = map_fixed(&c, TP_DBT_HEAP_AT, TP_DBT_HEAP_SIZE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1)))
		fail(&c, e, "cannot map the runtime's memory: %s%s", strerror(-e), "");
	if (!e && o->ctl_fd >= 0 &&
	    (e = map_fixed(&c, TP_DBT_CTL_AT, o->ctl_size, PROT_READ | PROT_WRITE, MAP_SHARED,
			   o->ctl_fd)))
		fail(&c, e, "cannot map the control block: %s%s", strerror(-e), "");
	if (!e && (e = boot_write(&c, o, &rt, &zy, &regs)) && !err[0])
		snprintf(err, errlen, "cannot write the boot record: %s", strerror(-e));
	if (!e) {
		const Elf64_Ehdr *eh = (const void *)rt.file;

		run = regs;
		run.rip = TP_DBT_RT_AT + eh->e_entry;
		run.rsp = TP_DBT_HEAP_AT + TP_DBT_HEAP_SIZE;
		run.rdi = TP_DBT_HEAP_AT;
		e = tp_proc_set_regs(pid, &run);
	}
	image_free(&rt);
	image_free(&zy);
	return e;
}
