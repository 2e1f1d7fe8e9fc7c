/* One ELF file at rest, over libelf: probing, symbols by name (with symbol versions), and
 * main() of a stripped program found by decoding its entry code with the arch decoder. */
#include "elf/symbols.h"
#include "elf/file.h"
#include "base/log.h"
#include "arch/arch.h"

#include <ctype.h>
#include <gelf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How far into _start to look for the load of main's address: glibc's _start sets %rdi
 * within its first dozen instructions. */
#define ENTRY_SCAN_BYTES 128
#define ENTRY_SCAN_INSNS 40

/* .gnu.version entries: the version index, and the bit of a non-default ("name@VER")
 * version; <elf.h> has no names for them. */
#define VERSYM_VERSION 0x7fff
#define VERSYM_HIDDEN 0x8000

/* @any: any ELF file; else x86-64 ET_EXEC/ET_DYN only. */
static int check_ehdr(struct tp_elf_file *f, bool any)
{
	GElf_Ehdr ehdr;

	if (elf_kind(f->elf) != ELF_K_ELF || !gelf_getehdr(f->elf, &ehdr))
		return -ENOEXEC;
	f->type = ehdr.e_type;
	f->entry = ehdr.e_entry;
	if (any)
		return 0;
	if (ehdr.e_ident[EI_CLASS] != ELFCLASS64 || ehdr.e_machine != EM_X86_64)
		return -EINVAL;
	if (ehdr.e_type != ET_EXEC && ehdr.e_type != ET_DYN)
		return -EINVAL;
	return 0;
}

static int file_open(struct tp_elf_file *f, const char *path, bool any)
{
	struct stat sb;
	int err;

	memset(f, 0, sizeof(*f));
	f->fd = -1;
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOSYS;
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0) {
		err = -errno;
		goto err_out;
	}
	/* libelf would read a directory or a FIFO as an empty, non-ELF file anyway; this
	 * keeps a FIFO from blocking us. */
	if (fstat(f->fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		err = -ENOEXEC;
		goto err_close;
	}
	f->elf = elf_begin(f->fd, ELF_C_READ_MMAP, NULL);
	if (!f->elf) {
		err = -ENOEXEC;
		goto err_close;
	}
	err = check_ehdr(f, any);
	if (err)
		goto err_close;
	return 0;

err_close:
	tp_elf_file_close(f);
err_out:
	tp_dbg("elf: %s: %s\n", path, strerror(-err));
	return err;
}

int tp_elf_file_open(struct tp_elf_file *f, const char *path)
{
	return file_open(f, path, false);
}

int tp_elf_file_open_any(struct tp_elf_file *f, const char *path)
{
	return file_open(f, path, true);
}

int tp_elf_file_open_mem(struct tp_elf_file *f, void *buf, size_t len)
{
	int err;

	memset(f, 0, sizeof(*f));
	f->fd = -1;
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOSYS;
	f->elf = elf_memory(buf, len);
	if (!f->elf)
		return -ENOEXEC;
	err = check_ehdr(f, false);
	if (err)
		tp_elf_file_close(f);
	return err;
}

void tp_elf_file_close(struct tp_elf_file *f)
{
	if (f->elf)
		elf_end(f->elf);
	if (f->fd >= 0)
		close(f->fd);
	f->elf = NULL;
	f->fd = -1;
}

/* Version names of .gnu.version_d, indexed by version index. */
struct verdefs {
	const char **names;
	size_t n;
};

static void read_verdefs(Elf *elf, Elf_Scn *scn, struct verdefs *vd)
{
	GElf_Shdr shdr;
	Elf_Data *data;
	size_t off = 0;

	if (!gelf_getshdr(scn, &shdr) || !(data = elf_getdata(scn, NULL)))
		return;
	for (size_t i = 0; i < shdr.sh_info; i++) {
		GElf_Verdef def;
		GElf_Verdaux aux;
		const char *name;

		if (!gelf_getverdef(data, off, &def))
			break;
		if (def.vd_ndx >= vd->n) {
			size_t n = def.vd_ndx + 8;
			const char **names = realloc(vd->names, n * sizeof(*names));

			if (!names)
				break;
			memset(names + vd->n, 0, (n - vd->n) * sizeof(*names));
			vd->names = names;
			vd->n = n;
		}
		/* The base definition (the soname) is no version a symbol is bound to. */
		if (!(def.vd_flags & VER_FLG_BASE) &&
		    gelf_getverdaux(data, off + def.vd_aux, &aux) &&
		    (name = elf_strptr(elf, shdr.sh_link, aux.vda_name)))
			vd->names[def.vd_ndx] = name;
		if (!def.vd_next)
			break;
		off += def.vd_next;
	}
}

static uint64_t section_end(Elf *elf, unsigned shndx)
{
	Elf_Scn *scn = elf_getscn(elf, shndx);
	GElf_Shdr shdr;

	if (!scn || !gelf_getshdr(scn, &shdr) || !(shdr.sh_flags & SHF_ALLOC))
		return UINT64_MAX;
	return shdr.sh_addr + shdr.sh_size;
}

static int walk_symtab(struct tp_elf_file *f, Elf_Scn *scn, const GElf_Shdr *shdr, Elf_Data *versym,
		       const struct verdefs *vd, tp_elf_sym_fn fn, void *arg)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	bool dyn = shdr->sh_type == SHT_DYNSYM;
	size_t n;

	if (!data || !shdr->sh_entsize)
		return 0;
	n = shdr->sh_size / shdr->sh_entsize;
	for (size_t i = 1; i < n; i++) {
		struct tp_elf_sym s = {.dynsym = dyn};
		const char *at;
		GElf_Sym sym;
		int ret;

		if (!gelf_getsym(data, i, &sym))
			break;
		s.type = GELF_ST_TYPE(sym.st_info);
		s.bind = GELF_ST_BIND(sym.st_info);
		if (s.type != STT_FUNC && s.type != STT_OBJECT && s.type != STT_GNU_IFUNC)
			continue;
		if (sym.st_shndx == SHN_UNDEF || sym.st_shndx == SHN_ABS ||
		    sym.st_shndx == SHN_COMMON)
			continue;
		s.name = elf_strptr(f->elf, shdr->sh_link, sym.st_name);
		if (!s.name || !*s.name)
			continue;
		s.namelen = strlen(s.name);
		s.value = sym.st_value;
		s.size = sym.st_size;
		s.sec_end =
		    sym.st_shndx < SHN_LORESERVE ? section_end(f->elf, sym.st_shndx) : UINT64_MAX;
		if (dyn && versym) {
			GElf_Versym v;

			if (gelf_getversym(versym, i, &v)) {
				unsigned ndx = v & VERSYM_VERSION;

				s.hidden = v & VERSYM_HIDDEN;
				if (ndx < vd->n)
					s.version = vd->names[ndx];
			}
		} else if (!dyn && (at = strchr(s.name, '@'))) {
			/* The static linker keeps "name@@VER" for the default version and
			 * "name@VER" for the others in .symtab. */
			s.namelen = at - s.name;
			s.hidden = at[1] != '@';
			s.version = at + (s.hidden ? 1 : 2);
		}
		ret = fn(arg, &s);
		if (ret)
			return ret;
	}
	return 0;
}

int tp_elf_file_foreach_sym(struct tp_elf_file *f, tp_elf_sym_fn fn, void *arg)
{
	static const Elf64_Word passes[] = {SHT_SYMTAB, SHT_DYNSYM};
	struct verdefs vd = {0};
	Elf_Data *versym = NULL;
	Elf_Scn *scn = NULL;
	int ret = 0;

	while ((scn = elf_nextscn(f->elf, scn))) {
		GElf_Shdr shdr;

		if (!gelf_getshdr(scn, &shdr))
			continue;
		if (shdr.sh_type == SHT_GNU_versym)
			versym = elf_getdata(scn, NULL);
		else if (shdr.sh_type == SHT_GNU_verdef)
			read_verdefs(f->elf, scn, &vd);
	}
	for (size_t p = 0; p < sizeof(passes) / sizeof(passes[0]) && !ret; p++) {
		scn = NULL;
		while (!ret && (scn = elf_nextscn(f->elf, scn))) {
			GElf_Shdr shdr;

			if (gelf_getshdr(scn, &shdr) && shdr.sh_type == passes[p])
				ret = walk_symtab(f, scn, &shdr, versym, &vd, fn, arg);
		}
	}
	free(vd.names);
	return ret;
}

int tp_elf_file_foreach_sym_raw(struct tp_elf_file *f, tp_elf_sym_fn fn, void *arg)
{
	Elf_Scn *scn = NULL;
	int ret = 0;

	while (!ret && (scn = elf_nextscn(f->elf, scn))) {
		GElf_Shdr shdr;
		Elf_Data *data;
		size_t n;

		if (!gelf_getshdr(scn, &shdr) ||
		    (shdr.sh_type != SHT_SYMTAB && shdr.sh_type != SHT_DYNSYM) ||
		    !shdr.sh_entsize || !(data = elf_getdata(scn, NULL)))
			continue;
		n = shdr.sh_size / shdr.sh_entsize;
		for (size_t i = 1; i < n && !ret; i++) {
			struct tp_elf_sym s = {.dynsym = shdr.sh_type == SHT_DYNSYM};
			GElf_Sym sym;

			if (!gelf_getsym(data, (int)i, &sym))
				continue;
			s.name = elf_strptr(f->elf, shdr.sh_link, sym.st_name);
			if (!s.name || !*s.name)
				continue;
			s.namelen = strlen(s.name);
			s.type = GELF_ST_TYPE(sym.st_info);
			s.bind = GELF_ST_BIND(sym.st_info);
			s.undef = sym.st_shndx == SHN_UNDEF;
			s.value = sym.st_value;
			s.size = sym.st_size;
			s.sec_end = UINT64_MAX;
			ret = fn(arg, &s);
		}
	}
	return ret;
}

struct imports_arg {
	const char *name;
};

static int import_is(void *arg, const struct tp_elf_sym *s)
{
	return s->dynsym && s->undef && !strcmp(s->name, ((struct imports_arg *)arg)->name);
}

bool tp_elf_imports(const char *path, const char *name)
{
	struct imports_arg a = {name};
	struct tp_elf_file f;
	bool found;

	if (tp_elf_file_open_any(&f, path))
		return false;
	found = tp_elf_file_foreach_sym_raw(&f, import_is, &a) > 0;
	tp_elf_file_close(&f);
	return found;
}

int tp_elf_file_loads(struct tp_elf_file *f, struct tp_elf_load **out)
{
	struct tp_elf_load *loads;
	size_t phnum, n = 0;

	*out = NULL;
	if (elf_getphdrnum(f->elf, &phnum) < 0)
		return -ENOEXEC;
	loads = calloc(phnum ? phnum : 1, sizeof(*loads));
	if (!loads)
		return -ENOMEM;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(f->elf, i, &ph) || ph.p_type != PT_LOAD)
			continue;
		loads[n++] = (struct tp_elf_load){.vaddr = ph.p_vaddr,
						  .offset = ph.p_offset,
						  .filesz = ph.p_filesz,
						  .memsz = ph.p_memsz,
						  .exec = ph.p_flags & PF_X};
	}
	*out = loads;
	return n;
}

int tp_elf_loads_bias(const struct tp_elf_load *loads, size_t n, uint64_t start, uint64_t offset,
		      uint64_t *bias)
{
	uint64_t pgmask = ~((uint64_t)sysconf(_SC_PAGESIZE) - 1);
	const struct tp_elf_load *best = NULL;

	for (size_t i = 0; i < n; i++) {
		const struct tp_elf_load *l = &loads[i];

		if ((l->offset & pgmask) > offset || offset >= l->offset + l->filesz)
			continue;
		if (!best || (l->exec && !best->exec))
			best = l;
	}
	if (!best)
		return -ENOENT;
	*bias = start - (best->vaddr - best->offset + offset);
	return 0;
}

int tp_elf_map_bias(const char *path, uint64_t start, uint64_t offset, uint64_t *bias)
{
	struct tp_elf_load *loads;
	struct tp_elf_file f;
	int n, err;

	err = tp_elf_file_open_any(&f, path);
	if (err)
		return err;
	n = tp_elf_file_loads(&f, &loads);
	tp_elf_file_close(&f);
	if (n < 0)
		return n;
	err = tp_elf_loads_bias(loads, (size_t)n, start, offset, bias);
	free(loads);
	return err;
}

int tp_elf_probe(const char *path, struct tp_elf_info *info)
{
	uint64_t pgmask = ~((uint64_t)sysconf(_SC_PAGESIZE) - 1);
	struct tp_elf_file f;
	bool interp = false, dynamic = false, have_load = false;
	Elf_Scn *scn = NULL;
	size_t phnum;
	int err;

	err = tp_elf_file_open(&f, path);
	if (err)
		return err;
	if (!info)
		goto out;
	memset(info, 0, sizeof(*info));
	info->is_dyn = f.type == ET_DYN;
	info->entry = f.entry;
	if (elf_getphdrnum(f.elf, &phnum) < 0)
		phnum = 0;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(f.elf, i, &ph))
			continue;
		if (ph.p_type == PT_INTERP)
			interp = true;
		else if (ph.p_type == PT_DYNAMIC)
			dynamic = true;
		else if (ph.p_type == PT_LOAD && !have_load) {
			have_load = true;
			info->first_load = ph.p_vaddr & pgmask;
		}
	}
	info->is_static = !interp && !dynamic;
	while ((scn = elf_nextscn(f.elf, scn))) {
		GElf_Shdr shdr;

		if (gelf_getshdr(scn, &shdr) && shdr.sh_type == SHT_SYMTAB) {
			info->has_symtab = true;
			break;
		}
	}
out:
	tp_elf_file_close(&f);
	return 0;
}

struct name_query {
	const char *base;
	size_t baselen;
	const char *version; /* NULL: any, the default one preferred */
	bool func_only;
	int best_score;
	uint64_t value, size;
};

static void parse_query(struct name_query *q, const char *name)
{
	const char *at = strchr(name, '@');

	memset(q, 0, sizeof(*q));
	q->base = name;
	q->baselen = at ? (size_t)(at - name) : strlen(name);
	if (at)
		q->version = at + (at[1] == '@' ? 2 : 1);
	q->best_score = -1;
}

static int match_name(void *arg, const struct tp_elf_sym *s)
{
	struct name_query *q = arg;
	int score;

	if (s->namelen != q->baselen || memcmp(s->name, q->base, q->baselen))
		return 0;
	if (q->func_only && s->type == STT_OBJECT)
		return 0;
	if (q->version && (!s->version || strcmp(s->version, q->version)))
		return 0;
	/* The default version wins, then .symtab (walked first) over .dynsym. */
	score = (s->hidden ? 0 : 2) + (s->dynsym ? 0 : 1);
	if (score > q->best_score) {
		q->best_score = score;
		q->value = s->value;
		q->size = s->size;
	}
	return 0;
}

int tp_elf_lookup(const char *path, const char *name, uint64_t *vaddr, uint64_t *size)
{
	struct tp_elf_file f;
	struct name_query q;
	int err;

	err = tp_elf_file_open(&f, path);
	if (err)
		return err;
	parse_query(&q, name);
	tp_elf_file_foreach_sym(&f, match_name, &q);
	tp_elf_file_close(&f);
	if (q.best_score < 0)
		return -ENOENT;
	if (vaddr)
		*vaddr = q.value;
	if (size)
		*size = q.size;
	return 0;
}

static const struct tp_elf_load *load_of(const struct tp_elf_load *loads, int n, uint64_t vaddr,
					 bool in_file)
{
	for (int i = 0; i < n; i++) {
		uint64_t len = in_file ? loads[i].filesz : loads[i].memsz;

		if (vaddr >= loads[i].vaddr && vaddr - loads[i].vaddr < len)
			return &loads[i];
	}
	return NULL;
}

/* The link-time value that a dynamic relocation stores at @where, for the GOT slot that an
 * unrelaxed "mov main@GOTPCREL(%rip), %rdi" reads. */
static int reloc_value(struct tp_elf_file *f, uint64_t where, uint64_t *value)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(f->elf, scn))) {
		Elf_Data *data, *symdata;
		GElf_Shdr shdr;

		if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != SHT_RELA || !shdr.sh_entsize ||
		    !(data = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 0; i < shdr.sh_size / shdr.sh_entsize; i++) {
			GElf_Rela r;
			GElf_Sym sym;
			unsigned type;

			if (!gelf_getrela(data, i, &r) || r.r_offset != where)
				continue;
			type = GELF_R_TYPE(r.r_info);
			if (type == R_X86_64_RELATIVE) {
				*value = r.r_addend;
				return 0;
			}
			if (type != R_X86_64_GLOB_DAT && type != R_X86_64_64)
				continue;
			symdata = elf_getdata(elf_getscn(f->elf, shdr.sh_link), NULL);
			if (!symdata || !gelf_getsym(symdata, GELF_R_SYM(r.r_info), &sym) ||
			    sym.st_shndx == SHN_UNDEF)
				continue;
			*value = sym.st_value + r.r_addend;
			return 0;
		}
	}
	return -ENOENT;
}

static int read_pointer(struct tp_elf_file *f, const struct tp_elf_load *loads, int n,
			uint64_t vaddr, uint64_t *value)
{
	const struct tp_elf_load *l = load_of(loads, n, vaddr, true);
	size_t size;
	const char *raw = elf_rawfile(f->elf, &size);
	uint64_t off;

	if (l && raw) {
		off = l->offset + (vaddr - l->vaddr);
		if (off + 8 <= size && vaddr + 8 <= l->vaddr + l->filesz) {
			memcpy(value, raw + off, 8);
			if (*value)
				return 0;
		}
	}
	return reloc_value(f, vaddr, value);
}

static bool is_rdi(const char *op)
{
	return !strcmp(op, "rdi") || !strcmp(op, "edi");
}

/* Decode _start up to its first call: the last write of %rdi before it is main's address
 * (lea rdi,[rip+main] in PIE, mov edi,main otherwise, mov rdi,[GOT] when not relaxed). */
static int main_from_entry(struct tp_elf_file *f, uint64_t *vaddr)
{
	const struct tp_elf_load *l, *target;
	struct tp_elf_load *loads;
	uint64_t entry = f->entry, cand = 0;
	bool have = false;
	const uint8_t *raw, *code;
	size_t rawsize, len, off = 0;
	int n, err = -ENOENT;

	n = tp_elf_file_loads(f, &loads);
	if (n < 0)
		return n;
	l = load_of(loads, n, entry, true);
	raw = (const uint8_t *)elf_rawfile(f->elf, &rawsize);
	if (!l || !l->exec || !raw || l->offset + (entry - l->vaddr) >= rawsize)
		goto out;
	code = raw + l->offset + (entry - l->vaddr);
	len = l->vaddr + l->filesz - entry;
	if (len > ENTRY_SCAN_BYTES)
		len = ENTRY_SCAN_BYTES;
	if (len > rawsize - (code - raw))
		len = rawsize - (code - raw);

	for (int i = 0; i < ENTRY_SCAN_INSNS && off < len; i++) {
		char text[128], op1[32] = "", *src;
		struct tp_insn insn;
		const char *mn;

		if (tp_arch_decode(code + off, len - off, entry + off, &insn))
			break;
		if (insn.kind == TP_INSN_CALL) {
			err = have ? 0 : -ENOENT;
			break;
		}
		if (insn.kind != TP_INSN_OTHER)
			break;
		/* arch.h reports no operands: the destination register comes from the
		 * formatted text, the address from the decoded RIP-relative target. */
		if (tp_arch_format(code + off, len - off, entry + off, text, sizeof(text)))
			break;
		for (char *p = text; *p; p++)
			*p = tolower((unsigned char)*p);
		src = strchr(text, ',');
		if (sscanf(text, "%*s %31[^, ]", op1) == 1 && is_rdi(op1)) {
			mn = tp_arch_mnemonic_name(insn.mnemonic);
			have = false;
			if (!strcmp(mn, "lea") && (insn.flags & TP_INSN_F_RIPREL)) {
				cand = insn.target;
				have = true;
			} else if (!strcmp(mn, "mov") && (insn.flags & TP_INSN_F_RIPREL)) {
				have = !read_pointer(f, loads, n, insn.target, &cand);
			} else if (!strcmp(mn, "mov") && src && !strchr(src, '[')) {
				char *end;

				errno = 0;
				cand = strtoull(src + 1, &end, 0);
				while (*end == ' ')
					end++;
				have = !errno && end != src + 1 && !*end;
			}
		}
		off += insn.len;
	}
	if (!err) {
		target = load_of(loads, n, cand, false);
		if (!target || !target->exec)
			err = -ENOENT;
		else
			*vaddr = cand;
	}
out:
	free(loads);
	return err;
}

int tp_elf_find_main(const char *path, uint64_t *vaddr)
{
	struct tp_elf_file f;
	struct name_query q;
	int err;

	err = tp_elf_file_open(&f, path);
	if (err)
		return err;
	parse_query(&q, "main");
	q.func_only = true;
	tp_elf_file_foreach_sym(&f, match_name, &q);
	if (q.best_score >= 0)
		*vaddr = q.value;
	else
		err = main_from_entry(&f, vaddr);
	tp_elf_file_close(&f);
	return err;
}
