/* What an ELF file holds at link-time addresses and in its notes: the bytes, strings and
 * relocated pointers of allocated sections (static tracepoint records), the bytes of its
 * segments (code before any breakpoint), note sections, and TLS symbols of static programs. */
#include "elf/file.h"

#include <errno.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The allocated, file-backed section holding [@vaddr, @vaddr + @len), or NULL. */
static Elf_Scn *alloc_section(struct tp_elf_file *f, uint64_t vaddr, size_t len, GElf_Shdr *sh)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(f->elf, scn))) {
		if (!gelf_getshdr(scn, sh) || !(sh->sh_flags & SHF_ALLOC) ||
		    sh->sh_type == SHT_NOBITS)
			continue;
		if (vaddr < sh->sh_addr || vaddr + len > sh->sh_addr + sh->sh_size)
			continue;
		return scn;
	}
	return NULL;
}

int tp_elf_file_read(struct tp_elf_file *f, uint64_t vaddr, void *buf, size_t len)
{
	GElf_Shdr sh;
	Elf_Scn *scn = alloc_section(f, vaddr, len, &sh);
	Elf_Data *d;

	if (!scn)
		return -ENOENT;
	d = elf_getdata(scn, NULL);
	if (!d || !d->d_buf || vaddr - sh.sh_addr + len > d->d_size)
		return -EIO;
	memcpy(buf, (const char *)d->d_buf + (vaddr - sh.sh_addr), len);
	return 0;
}

char *tp_elf_file_string(struct tp_elf_file *f, uint64_t vaddr)
{
	GElf_Shdr sh;
	Elf_Scn *scn = alloc_section(f, vaddr, 1, &sh);
	Elf_Data *d;

	if (!scn)
		return NULL;
	d = elf_getdata(scn, NULL);
	if (!d || !d->d_buf || vaddr - sh.sh_addr >= d->d_size)
		return NULL;
	const char *p = (const char *)d->d_buf + (vaddr - sh.sh_addr);
	return strndup(p, d->d_size - (vaddr - sh.sh_addr));
}

uint64_t tp_elf_file_pointer(struct tp_elf_file *f, uint64_t vaddr)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	uint64_t v = 0;

	if (tp_elf_file_read(f, vaddr, &v, sizeof(v)) || v)
		return v;
	while ((scn = elf_nextscn(f->elf, scn))) {
		Elf_Data *d;
		GElf_Rela r;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA || !sh.sh_entsize)
			continue;
		d = elf_getdata(scn, NULL);
		for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
			if (gelf_getrela(d, (int)i, &r) && r.r_offset == vaddr &&
			    GELF_R_TYPE(r.r_info) == R_X86_64_RELATIVE)
				return (uint64_t)r.r_addend;
		}
	}
	return 0;
}

int tp_elf_file_foreach_note(struct tp_elf_file *f, const char *section,
			     int (*fn)(void *arg, const struct tp_elf_note *n), void *arg)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	int ret = 0;

	if (elf_getshdrstrndx(f->elf, &shstrndx))
		return 0;
	while (!ret && (scn = elf_nextscn(f->elf, scn))) {
		size_t off = 0, noff, doff;
		const char *sname;
		GElf_Shdr sh;
		GElf_Nhdr nh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		sname = elf_strptr(f->elf, shstrndx, sh.sh_name);
		if (section && (!sname || strcmp(sname, section)))
			continue;
		d = elf_getdata(scn, NULL);
		while (!ret && d && (off = gelf_getnote(d, off, &nh, &noff, &doff)) > 0) {
			struct tp_elf_note n = {
			    .type = nh.n_type,
			    .owner = (const char *)d->d_buf + noff,
			    .owner_size = nh.n_namesz,
			    .desc = (const char *)d->d_buf + doff,
			    .desc_size = nh.n_descsz,
			};

			ret = fn(arg, &n);
		}
	}
	return ret;
}

ssize_t tp_elf_read_loaded(const char *path, uint64_t vaddr, void *buf, size_t len)
{
	ssize_t got = -ENOENT;
	struct tp_elf_file f;
	size_t nph;
	int err;

	err = tp_elf_file_open_any(&f, path);
	if (err)
		return err;
	if (elf_getphdrnum(f.elf, &nph)) {
		got = -ENOEXEC;
		goto out;
	}
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(f.elf, i, &ph) || ph.p_type != PT_LOAD || vaddr < ph.p_vaddr ||
		    vaddr >= ph.p_vaddr + ph.p_filesz)
			continue;
		if (len > ph.p_vaddr + ph.p_filesz - vaddr)
			len = ph.p_vaddr + ph.p_filesz - vaddr;
		got = pread(f.fd, buf, len, ph.p_offset + (vaddr - ph.p_vaddr));
		if (got < 0)
			got = -errno;
		break;
	}
out:
	tp_elf_file_close(&f);
	return got;
}

int tp_elf_static_tls_offset(const char *path, const char *const *names, size_t nnames,
			     int64_t *tpoff)
{
	uint64_t tls_size = 0;
	bool tls = false, interp = false;
	struct tp_elf_file f;
	Elf_Scn *scn = NULL;
	int err;
	size_t nph;

	err = tp_elf_file_open_any(&f, path);
	if (err)
		return err;
	err = -ENOENT;
	if (elf_getphdrnum(f.elf, &nph)) {
		err = -ENOEXEC;
		goto out;
	}
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(f.elf, i, &ph))
			continue;
		interp |= ph.p_type == PT_INTERP;
		if (ph.p_type == PT_TLS) {
			uint64_t align = ph.p_align ? ph.p_align : 1;

			tls = true;
			tls_size = (ph.p_memsz + align - 1) / align * align;
		}
	}
	if (!tls || interp)
		goto out;
	while ((scn = elf_nextscn(f.elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || !sh.sh_entsize)
			continue;
		data = elf_getdata(scn, NULL);
		for (size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;

			if (!gelf_getsym(data, i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_TLS)
				continue;
			name = elf_strptr(f.elf, sh.sh_link, sym.st_name);
			for (size_t k = 0; name && k < nnames; k++) {
				if (strcmp(name, names[k]))
					continue;
				*tpoff = (int64_t)sym.st_value - (int64_t)tls_size;
				err = 0;
				goto out;
			}
		}
	}
out:
	tp_elf_file_close(&f);
	return err;
}
