/* Taking over a program at its execve stop (see dbt.h).  The runtime and libZydis are
 * loaded here, on the tracer side, by a small ELF loader: their segments are mapped from
 * their files into the stopped program (page cache pages, nothing copied), the pages their
 * relocations write are written into it relocated, and libZydis's few libc imports are
 * bound to the runtime's own functions.  The program's loader never sees either object. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <unistd.h>

#include <Zydis/Zydis.h>

#include "base/paths.h"
#include "dbt/dbt.h"
#include "dbt/rt-abi.h"
#include "proc/inject.h"

#define PAGE 4096ull

struct image {
	const char *file; /* the file, mapped read-only */
	size_t size;
	const char *path;
	uint64_t span, base;
	const Elf64_Sym *syms;
	size_t nsyms;
	const char *strs;
	size_t strsz;
	/* the pages that relocations (and a .bss's first bytes) write, laid out as loaded */
	uint8_t *patch;
	uint64_t patch_lo, patch_hi;
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
	if (im->file)
		munmap((void *)im->file, im->size);
	free(im->patch);
}

static const void *at_off(const struct image *im, uint64_t off, uint64_t len)
{
	return off <= im->size && len <= im->size - off ? im->file + off : NULL;
}

static const Elf64_Phdr *phdrs(const struct image *im, int *n)
{
	const Elf64_Ehdr *eh = (const void *)im->file;

	*n = eh->e_phnum;
	return (const void *)(im->file + eh->e_phoff);
}

/* The file's bytes at address @vaddr of the image (@len of them in one segment's file
 * part), NULL when there are none. */
static const void *at_vaddr(const struct image *im, uint64_t vaddr, uint64_t len)
{
	int n;
	const Elf64_Phdr *ph = phdrs(im, &n);

	for (int i = 0; i < n; i++)
		if (ph[i].p_type == PT_LOAD && vaddr >= ph[i].p_vaddr &&
		    vaddr - ph[i].p_vaddr <= ph[i].p_filesz &&
		    len <= ph[i].p_filesz - (vaddr - ph[i].p_vaddr))
			return at_off(im, ph[i].p_offset + (vaddr - ph[i].p_vaddr), len);
	return NULL;
}

/* Map the file (read-only: only what is read of it is faulted in) and check its
 * headers and segments. */
static int image_read(struct ctx *c, struct image *im, const char *path)
{
	const Elf64_Ehdr *eh;
	const Elf64_Phdr *ph;
	const Elf64_Shdr *sh;
	struct stat st;
	void *m = MAP_FAILED;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	memset(im, 0, sizeof(*im));
	im->path = path;
	if (fd >= 0 && !fstat(fd, &st) && st.st_size > 0)
		m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED) {
		int err = errno ? -errno : -EIO;

		if (fd >= 0)
			close(fd);
		return fail(c, err, "cannot read %s%s", path, "");
	}
	close(fd);
	im->file = m;
	im->size = (size_t)st.st_size;
	eh = at_off(im, 0, sizeof(*eh));
	if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_type != ET_DYN ||
	    eh->e_machine != EM_X86_64 ||
	    !(ph = at_off(im, eh->e_phoff, eh->e_phnum * sizeof(*ph))) ||
	    !(sh = at_off(im, eh->e_shoff, eh->e_shnum * sizeof(*sh))))
		return fail(c, -ENOEXEC, "%s: not an x86-64 shared object%s", path, "");
	for (int i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		/* mapped from the file page by page, as ld.so does */
		if (ph[i].p_filesz > ph[i].p_memsz || (ph[i].p_offset - ph[i].p_vaddr) % PAGE ||
		    !at_off(im, ph[i].p_offset, ph[i].p_filesz))
			return fail(c, -ENOEXEC, "%s: bad segment%s", path, "");
		if (ph[i].p_vaddr + ph[i].p_memsz > im->span)
			im->span = ph[i].p_vaddr + ph[i].p_memsz;
	}
	im->span = (im->span + PAGE - 1) & ~(PAGE - 1);
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

		if (type == R_X86_64_NONE)
			continue;
		if (r[i].r_offset < im->patch_lo || r[i].r_offset + 8 > im->patch_hi)
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
		default:
			return fail(c, -ENOEXEC, "%s: a relocation the loader does not know%s",
				    im->path, "");
		}
		memcpy(im->patch + (r[i].r_offset - im->patch_lo), &v, 8);
	}
	return 0;
}

static int prot_of(const Elf64_Phdr *ph)
{
	return (ph->p_flags & PF_R ? PROT_READ : 0) | (ph->p_flags & PF_W ? PROT_WRITE : 0) |
	       (ph->p_flags & PF_X ? PROT_EXEC : 0);
}

/* What segment @i's loading writes, [*lo, *hi) (empty: lo >= hi): the words relocations
 * write, and the bytes of its .bss that share a page with its file part. */
static void seg_patch(const Elf64_Phdr *ph, const Elf64_Rela *r, size_t n, uint64_t *lo,
		      uint64_t *hi)
{
	uint64_t fe = ph->p_vaddr + ph->p_filesz, me = ph->p_vaddr + ph->p_memsz;

	*lo = UINT64_MAX;
	*hi = 0;
	for (size_t i = 0; i < n; i++) {
		if (ELF64_R_TYPE(r[i].r_info) == R_X86_64_NONE || r[i].r_offset < ph->p_vaddr ||
		    r[i].r_offset >= me)
			continue;
		*lo = r[i].r_offset < *lo ? r[i].r_offset : *lo;
		*hi = r[i].r_offset + 8 > *hi ? r[i].r_offset + 8 : *hi;
	}
	if (me > fe && fe % PAGE) {
		uint64_t pe = (fe + PAGE - 1) & ~(PAGE - 1);

		*lo = fe < *lo ? fe : *lo;
		*hi = (pe < me ? pe : me) > *hi ? (pe < me ? pe : me) : *hi;
	}
}

/* Map @im at @base in the program from its file (open there as @fd), relocated, imports
 * from @imports: the whole span reserved first, then each segment mapped over it as ld.so
 * does; the pages relocations write become the program's own copies, written through
 * /proc/PID/mem, so only they are copied. */
static int image_load(struct ctx *c, struct image *im, uint64_t base, const struct image *imports,
		      int64_t fd)
{
	int nph;
	const Elf64_Phdr *ph = phdrs(im, &nph);
	uint64_t rela = 0, relasz = 0, jmprel = 0, pltsz = 0, lo, hi;
	const Elf64_Rela *rel = NULL;
	Elf64_Rela *r = NULL;
	size_t n1, n2;
	int64_t ret;
	int err;

	im->base = base;
	for (int i = 0; i < nph; i++) {
		const Elf64_Dyn *d =
		    ph[i].p_type == PT_DYNAMIC ? at_vaddr(im, ph[i].p_vaddr, ph[i].p_filesz) : NULL;

		for (uint64_t k = 0; d && k < ph[i].p_filesz / sizeof(*d) && d[k].d_tag != DT_NULL;
		     k++) {
			if (d[k].d_tag == DT_RELA)
				rela = d[k].d_un.d_ptr;
			else if (d[k].d_tag == DT_RELASZ)
				relasz = d[k].d_un.d_val;
			else if (d[k].d_tag == DT_JMPREL)
				jmprel = d[k].d_un.d_ptr;
			else if (d[k].d_tag == DT_PLTRELSZ)
				pltsz = d[k].d_un.d_val;
		}
	}
	n1 = relasz / sizeof(Elf64_Rela);
	n2 = pltsz / sizeof(Elf64_Rela);
	if ((n1 && !at_vaddr(im, rela, relasz)) || (n2 && !at_vaddr(im, jmprel, pltsz)))
		return fail(c, -ENOEXEC, "%s: bad dynamic section%s", im->path, "");
	/* both tables in one array, in the file's order */
	r = malloc((n1 + n2 + 1) * sizeof(*r));
	if (!r)
		return -ENOMEM;
	if (n1)
		memcpy(r, at_vaddr(im, rela, relasz), n1 * sizeof(*r));
	if (n2)
		memcpy(r + n1, at_vaddr(im, jmprel, pltsz), n2 * sizeof(*r));
	rel = r;
	/* the bytes loading writes, laid out as loaded: the file's, zeros past it */
	im->patch_lo = UINT64_MAX;
	im->patch_hi = 0;
	for (int i = 0; i < nph; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		seg_patch(&ph[i], rel, n1 + n2, &lo, &hi);
		if (lo < hi) {
			im->patch_lo = lo < im->patch_lo ? lo : im->patch_lo;
			im->patch_hi = hi > im->patch_hi ? hi : im->patch_hi;
		}
	}
	if (im->patch_lo < im->patch_hi) {
		if (!(im->patch = calloc(1, im->patch_hi - im->patch_lo))) {
			free(r);
			return -ENOMEM;
		}
		for (int i = 0; i < nph; i++) {
			uint64_t s = ph[i].p_vaddr, e = ph[i].p_vaddr + ph[i].p_filesz;

			s = s > im->patch_lo ? s : im->patch_lo;
			e = e < im->patch_hi ? e : im->patch_hi;
			if (ph[i].p_type == PT_LOAD && s < e)
				memcpy(im->patch + (s - im->patch_lo), at_vaddr(im, s, e - s),
				       e - s);
		}
	}
	err = relocate(c, im, rel, n1 + n2, imports);
	if (err) {
		free(r);
		return err;
	}
	err = map_fixed(c, base, im->span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			-1);
	if (err) {
		free(r);
		return fail(c, err, "cannot map %s into the program: %s", im->path, strerror(-err));
	}
	for (int i = 0; !err && i < nph; i++) {
		uint64_t s = ph[i].p_vaddr & ~(PAGE - 1),
			 fe = (ph[i].p_vaddr + ph[i].p_filesz + PAGE - 1) & ~(PAGE - 1),
			 me = (ph[i].p_vaddr + ph[i].p_memsz + PAGE - 1) & ~(PAGE - 1);
		int prot = ph[i].p_type == PT_LOAD ? prot_of(&ph[i]) : 0;

		if (ph[i].p_type != PT_LOAD)
			continue;
		seg_patch(&ph[i], rel, n1 + n2, &lo, &hi);
		if (lo < hi)
			prot |= PROT_WRITE; /* until its pages are written */
		if (fe > s)
			err = inject(c, SYS_mmap, base + s, fe - s, (uint64_t)prot,
				     MAP_PRIVATE | MAP_FIXED, (uint64_t)fd,
				     ph[i].p_offset - (ph[i].p_vaddr - s), &ret);
		if (!err && me > fe)
			err =
			    inject(c, SYS_mmap, base + fe, me - fe, (uint64_t)prot,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, (uint64_t)-1, 0, &ret);
		if (!err && lo < hi)
			err = tp_proc_write(c->pid, base + lo, im->patch + (lo - im->patch_lo),
					    hi - lo);
		if (!err && lo < hi && !(ph[i].p_flags & PF_W))
			err = inject(c, SYS_mprotect, base + s, me - s, (uint64_t)prot_of(&ph[i]),
				     0, 0, 0, &ret);
	}
	free(r);
	if (err)
		return fail(c, err, "cannot load %s into the program: %s", im->path,
			    strerror(-err));
	return 0;
}

/* image_load() with the file open in the program meanwhile; its path is written at the
 * bottom of the runtime's start-up stack (the heap must stay zeroed: the runtime's
 * allocator hands it out as it is). */
static int image_load_file(struct ctx *c, struct image *im, uint64_t base,
			   const struct image *imports)
{
	const uint64_t at = TP_DBT_HEAP_AT + TP_DBT_HEAP_SIZE - TP_DBT_STACK_SIZE;
	int64_t fd, ret;
	int err = strlen(im->path) >= PATH_MAX
		      ? -ENAMETOOLONG
		      : tp_proc_write(c->pid, at, im->path, strlen(im->path) + 1);

	if (!err)
		err = inject(c, SYS_openat, (uint64_t)AT_FDCWD, at, O_RDONLY | O_CLOEXEC, 0, 0, 0,
			     &fd);
	if (err)
		return fail(c, err, "cannot open %s in the program: %s", im->path, strerror(-err));
	err = image_load(c, im, base, imports, fd);
	inject(c, SYS_close, (uint64_t)fd, 0, 0, 0, 0, 0, &ret);
	return err;
}

const char *tp_dbt_runtime_path(const char *agent)
{
	static char path[PATH_MAX];

	return tp_path_beside(agent, "TRACEPAD_DBT_RT", "dbt", "tracepad-dbt-rt.so", path,
			      sizeof(path));
}

static const char *const zydis_names[TP_DBT_ZY_COUNT] = {
    [TP_DBT_ZY_DECODER_INIT] = "ZydisDecoderInit",
    [TP_DBT_ZY_DECODE_FULL] = "ZydisDecoderDecodeFull",
    [TP_DBT_ZY_CALC_ABS] = "ZydisCalcAbsoluteAddress",
    [TP_DBT_ZY_MNEMONIC_STRING] = "ZydisMnemonicGetString",
    [TP_DBT_ZY_ENCODE_ABS] = "ZydisEncoderEncodeInstructionAbsolute",
    [TP_DBT_ZY_NOP_FILL] = "ZydisEncoderNopFill",
    [TP_DBT_ZY_DECODE_INSN] = "ZydisDecoderDecodeInstruction",
    [TP_DBT_ZY_DECODE_OPS] = "ZydisDecoderDecodeOperands",
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

/* Map the control block (tracepad's fd @fd) into the program at TP_DBT_CTL_AT.  The program
 * has the same fd number as tracepad when it inherited it (a launch); after an execve it
 * may have closed it, and the block is then opened again for the program from tracepad's
 * /proc/PID/fd (its path written into the runtime's heap, mapped already), mapped and
 * closed.  With @close_fd the program's inherited fd is closed once mapped: its fds are
 * its own again. */
static int map_ctl(struct ctx *c, int fd, size_t size, bool close_fd)
{
	char link[64], path[64];
	struct stat mine, theirs;
	int64_t ret, pfd = fd;
	int err;

	snprintf(link, sizeof(link), "/proc/%d/fd/%d", (int)c->pid, fd);
	if (fstat(fd, &mine))
		return -errno;
	if (stat(link, &theirs) || theirs.st_ino != mine.st_ino || theirs.st_dev != mine.st_dev) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)getpid(), fd);
		err = tp_proc_write(c->pid, TP_DBT_HEAP_AT, path, strlen(path) + 1);
		if (!err)
			err = inject(c, SYS_openat, (uint64_t)AT_FDCWD, TP_DBT_HEAP_AT,
				     (uint64_t)(O_RDWR | O_CLOEXEC), 0, 0, 0, &pfd);
		if (err)
			return fail(c, err, "cannot open the control block in the program: %s%s",
				    strerror(-err), "");
		close_fd = true;
	}
	err = map_fixed(c, TP_DBT_CTL_AT, size, PROT_READ | PROT_WRITE, MAP_SHARED, (int)pfd);
	if (err)
		fail(c, err, "cannot map the control block: %s%s", strerror(-err), "");
	if (close_fd) {
		int e = inject(c, SYS_close, (uint64_t)pfd, 0, 0, 0, 0, 0, &ret);

		err = err ? err : e;
	}
	return err;
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
	if (!e && (e = map_fixed(&c, TP_DBT_HEAP_AT, TP_DBT_HEAP_SIZE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1)))
		fail(&c, e, "cannot map the runtime's memory: %s%s", strerror(-e), "");
	if (!e)
		e = image_load_file(&c, &rt, TP_DBT_RT_AT, NULL);
	if (!e)
		e = image_load_file(&c, &zy, TP_DBT_ZYDIS_AT, &rt);
	if (!e && o->ctl_fd >= 0)
		e = map_ctl(&c, o->ctl_fd, o->ctl_size, o->close_fd);
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
