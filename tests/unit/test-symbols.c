/* TAP tests of src/elf/symbols: ELF probing and lookups at rest (checked against nm and
 * objdump), main() of stripped programs, and address resolution in live processes (checked
 * against dl_iterate_phdr, dlsym and what the target program prints about itself). */
#include "elf/symbols.h"
#include "tap.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* argv[1..4]: the target PIE, PIE stripped, non-PIE, non-PIE stripped. */
static const char *target, *target_s, *target_np, *target_nps;
static char tmpdir[] = "/tmp/test-symbols-XXXXXX";

/* Big enough that address + 3 is still inside it; kept out of line so it has a symbol. */
__attribute__((noinline, used)) int tp_test_known_function(int x)
{
	int r = 0;

	for (int i = 0; i < x; i++)
		r += i * x;
	return r;
}

static const char *tmpfile_with(const char *name, const void *data, size_t len)
{
	static char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len)
		printf("# cannot write %s\n", path);
	close(fd);
	return path;
}

/* An ELF header only, enough for the class/machine/type checks. */
static const char *fake_elf(const char *name, int class, int machine, int type)
{
	unsigned char buf[sizeof(Elf64_Ehdr)] = {0};
	Elf64_Ehdr *h64 = (Elf64_Ehdr *)buf;
	Elf32_Ehdr *h32 = (Elf32_Ehdr *)buf;

	memcpy(buf, ELFMAG, SELFMAG);
	buf[EI_CLASS] = class;
	buf[EI_DATA] = ELFDATA2LSB;
	buf[EI_VERSION] = EV_CURRENT;
	if (class == ELFCLASS64) {
		h64->e_type = type;
		h64->e_machine = machine;
		h64->e_version = EV_CURRENT;
		h64->e_ehsize = sizeof(Elf64_Ehdr);
		return tmpfile_with(name, buf, sizeof(Elf64_Ehdr));
	}
	h32->e_type = type;
	h32->e_machine = machine;
	h32->e_version = EV_CURRENT;
	h32->e_ehsize = sizeof(Elf32_Ehdr);
	return tmpfile_with(name, buf, sizeof(Elf32_Ehdr));
}

/* Entry and first PT_LOAD read with <elf.h> only, to check tp_elf_probe against. */
static int raw_headers(const char *path, uint64_t *entry, uint64_t *first_load)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	FILE *fp = fopen(path, "rb");
	int ret = -1;

	if (!fp)
		return -1;
	if (fread(&eh, sizeof(eh), 1, fp) != 1)
		goto out;
	*entry = eh.e_entry;
	for (int i = 0; i < eh.e_phnum; i++) {
		if (fseek(fp, eh.e_phoff + (long)i * eh.e_phentsize, SEEK_SET) ||
		    fread(&ph, sizeof(ph), 1, fp) != 1)
			goto out;
		if (ph.p_type == PT_LOAD) {
			*first_load = ph.p_vaddr & ~0xfffULL;
			ret = 0;
			break;
		}
	}
out:
	fclose(fp);
	return ret;
}

/* Value and size of @name in `nm @opts @path` output (name as nm prints it). */
static int nm_symbol(const char *opts, const char *path, const char *name, uint64_t *value,
		     uint64_t *size)
{
	char cmd[PATH_MAX + 64], line[512], n[256], t[8];
	unsigned long long v, s;
	int ret = -1;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "nm -S %s '%s' 2>/dev/null", opts, path);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		if (sscanf(line, "%llx %llx %7s %255s", &v, &s, t, n) == 4 && !strcmp(n, name)) {
			*value = v;
			if (size)
				*size = s;
			ret = 0;
		}
	}
	pclose(p);
	return ret;
}

/* The address objdump shows for the last %rdi load before the first call in _start. */
static int objdump_main(const char *path, uint64_t entry, uint64_t *main_addr)
{
	char cmd[PATH_MAX + 128], line[512];
	int ret = -1;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "objdump -d --no-show-raw-insn --start-address=%#" PRIx64
		 " --stop-address=%#" PRIx64 " '%s' 2>/dev/null",
		 entry, entry + 64, path);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		char *hash = strchr(line, '#');

		if (strstr(line, "call"))
			break;
		if (strstr(line, ",%rdi") && strstr(line, "lea") && hash) {
			*main_addr = strtoull(hash + 1, NULL, 16);
			ret = 0;
		}
	}
	pclose(p);
	return ret;
}

/* Bounds of section @name, read with libelf. */
static int section_bounds(const char *path, const char *name, uint64_t *lo, uint64_t *hi)
{
	int fd = open(path, O_RDONLY), ret = -1;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	Elf *elf;

	if (fd < 0)
		return -1;
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (elf && !elf_getshdrstrndx(elf, &shstrndx)) {
		while ((scn = elf_nextscn(elf, scn))) {
			GElf_Shdr sh;
			const char *n;

			if (gelf_getshdr(scn, &sh) && (n = elf_strptr(elf, shstrndx, sh.sh_name)) &&
			    !strcmp(n, name)) {
				*lo = sh.sh_addr;
				*hi = sh.sh_addr + sh.sh_size;
				ret = 0;
			}
		}
	}
	elf_end(elf);
	close(fd);
	return ret;
}

static void test_probe(void)
{
	struct tp_elf_info info;
	uint64_t entry = 0, first_load = 1;
	char head[2] = "";
	const char *p;
	FILE *fp;
	int rc;

	rc = tp_elf_probe("/bin/true", &info);
	is_int(rc, 0, "probe /bin/true");
	ok(raw_headers("/bin/true", &entry, &first_load) == 0, "read /bin/true headers");
	ok(info.is_dyn, "/bin/true is PIE");
	ok(!info.is_static, "/bin/true is dynamic");
	ok(!info.has_symtab, "/bin/true is stripped");
	is_int(info.entry, entry, "/bin/true entry");
	is_int(info.first_load, first_load, "/bin/true first load");

	is_int(tp_elf_probe(target, &info), 0, "probe target");
	ok(info.has_symtab && info.is_dyn && !info.is_static, "target: PIE with .symtab");
	is_int(tp_elf_probe(target_s, &info), 0, "probe stripped target");
	ok(!info.has_symtab, "stripped target has no .symtab");
	is_int(tp_elf_probe(target_np, &info), 0, "probe non-PIE target");
	ok(!info.is_dyn && info.has_symtab, "non-PIE target is ET_EXEC");
	ok(raw_headers(target_np, &entry, &first_load) == 0, "read non-PIE headers");
	is_int(info.first_load, first_load, "non-PIE first load");
	is_int(info.entry, entry, "non-PIE entry");

	fp = fopen("/usr/bin/ldd", "r");
	if (fp && fread(head, 1, 2, fp) == 2 && !memcmp(head, "#!", 2))
		is_int(tp_elf_probe("/usr/bin/ldd", NULL), -ENOEXEC, "ldd (a script): -ENOEXEC");
	if (fp)
		fclose(fp);
	p = tmpfile_with("script.sh", "#!/bin/sh\nexit 0\n", 17);
	is_int(tp_elf_probe(p, &info), -ENOEXEC, "shell script: -ENOEXEC");
	p = tmpfile_with("empty", "", 0);
	is_int(tp_elf_probe(p, &info), -ENOEXEC, "empty file: -ENOEXEC");
	p = tmpfile_with("magic-only", ELFMAG, SELFMAG);
	is_int(tp_elf_probe(p, &info), -ENOEXEC, "truncated ELF: -ENOEXEC");
	is_int(tp_elf_probe("/", &info), -ENOEXEC, "directory: -ENOEXEC");
	is_int(tp_elf_probe("/nonexistent/tp-file", &info), -ENOENT, "missing file: -ENOENT");
	p = tmpfile_with("unreadable", "x", 1);
	chmod(p, 0);
	/* root reads mode-000 files; only another user can see -EACCES. */
	if (geteuid() != 0)
		is_int(tp_elf_probe(p, &info), -EACCES, "unreadable file: -EACCES");

	p = fake_elf("elf32", ELFCLASS32, EM_386, ET_EXEC);
	is_int(tp_elf_probe(p, &info), -EINVAL, "32-bit i386 ELF: -EINVAL");
	p = fake_elf("aarch64", ELFCLASS64, EM_AARCH64, ET_DYN);
	is_int(tp_elf_probe(p, &info), -EINVAL, "aarch64 ELF: -EINVAL");
	p = fake_elf("rel", ELFCLASS64, EM_X86_64, ET_REL);
	is_int(tp_elf_probe(p, &info), -EINVAL, "x86-64 relocatable: -EINVAL");
	p = fake_elf("exec", ELFCLASS64, EM_X86_64, ET_EXEC);
	is_int(tp_elf_probe(p, &info), 0, "x86-64 ET_EXEC header: accepted");
}

static void test_lookup(void)
{
	uint64_t v = 0, s = 0, nv = 1, ns = 1, v14 = 0, v225 = 0;
	Dl_info dli;

	ok(nm_symbol("", target, "tp_target_alpha", &nv, &ns) == 0, "nm finds tp_target_alpha");
	is_int(tp_elf_lookup(target, "tp_target_alpha", &v, &s), 0, "lookup tp_target_alpha");
	is_int(v, nv, "tp_target_alpha value as nm");
	is_int(s, ns, "tp_target_alpha size as nm");
	ok(nm_symbol("", target, "tp_target_counter", &nv, &ns) == 0, "nm finds the variable");
	is_int(tp_elf_lookup(target, "tp_target_counter", &v, &s), 0, "lookup a variable");
	ok(v == nv && s == ns && s == sizeof(int), "variable value and size as nm");
	is_int(tp_elf_lookup(target_np, "main", &v, NULL), 0, "lookup main, non-PIE");
	ok(nm_symbol("", target_np, "main", &nv, NULL) == 0 && v == nv, "non-PIE main as nm");
	is_int(tp_elf_lookup(target, "tp_no_such_symbol", &v, &s), -ENOENT, "missing symbol");
	is_int(tp_elf_lookup(target_s, "tp_target_alpha", &v, &s), -ENOENT,
	       "stripped: no local symbol");
	is_int(tp_elf_lookup("/nonexistent/x", "main", &v, &s), -ENOENT, "missing file");

	/* memcpy has two versions in libc; the default one (@@) must win. */
	ok(dladdr((void *)getpid, &dli) && dli.dli_fname, "dladdr finds libc");
	if (!dli.dli_fname)
		return;
	ok(nm_symbol("-D --with-symbol-versions", dli.dli_fname, "memcpy@@GLIBC_2.14", &v14,
		     NULL) == 0 &&
	       nm_symbol("-D --with-symbol-versions", dli.dli_fname, "memcpy@GLIBC_2.2.5", &v225,
			 NULL) == 0 &&
	       v14 != v225,
	   "nm: libc has two memcpy versions");
	is_int(tp_elf_lookup(dli.dli_fname, "memcpy", &v, NULL), 0, "lookup memcpy in libc");
	is_int(v, v14, "memcpy resolves to the default version");
	is_int(tp_elf_lookup(dli.dli_fname, "memcpy@GLIBC_2.2.5", &v, NULL), 0,
	       "lookup memcpy@GLIBC_2.2.5");
	is_int(v, v225, "explicit old version");
	is_int(tp_elf_lookup(dli.dli_fname, "memcpy@@GLIBC_2.14", &v, NULL), 0,
	       "lookup memcpy@@GLIBC_2.14");
	is_int(v, v14, "explicit default version");
	is_int(tp_elf_lookup(dli.dli_fname, "memcpy@GLIBC_9.9", &v, NULL), -ENOENT,
	       "unknown version");
}

static void test_find_main(void)
{
	static const char *const sysprogs[] = {"/bin/true", "/bin/ls"};
	uint64_t want = 0, got = 0, od = 1, lo = 0, hi = 0;
	struct tp_elf_info info;

	ok(nm_symbol("", target, "main", &want, NULL) == 0, "nm: main of target");
	is_int(tp_elf_find_main(target, &got), 0, "find_main target");
	is_int(got, want, "find_main target = symbol");
	got = 0;
	is_int(tp_elf_find_main(target_s, &got), 0, "find_main stripped PIE");
	is_int(got, want, "stripped PIE: decoded main = unstripped symbol");

	ok(nm_symbol("", target_np, "main", &want, NULL) == 0, "nm: main of non-PIE target");
	got = 0;
	is_int(tp_elf_find_main(target_nps, &got), 0, "find_main stripped non-PIE");
	is_int(got, want, "stripped non-PIE: decoded main = unstripped symbol");

	for (size_t i = 0; i < sizeof(sysprogs) / sizeof(sysprogs[0]); i++) {
		const char *p = sysprogs[i];

		got = 0;
		is_int(tp_elf_find_main(p, &got), 0, "find_main %s", p);
		ok(section_bounds(p, ".text", &lo, &hi) == 0 && got >= lo && got < hi,
		   "%s: main %#" PRIx64 " in .text [%#" PRIx64 ", %#" PRIx64 ")", p, got, lo, hi);
		if (tp_elf_probe(p, &info) == 0 && objdump_main(p, info.entry, &od) == 0)
			is_int(got, od, "%s: main as objdump's lea into %%rdi", p);
	}
	got = 0;
	is_int(tp_elf_find_main("/nonexistent/x", &got), -ENOENT, "find_main missing file");
}

struct phdr_find {
	const char *needle; /* "" for the main program */
	uint64_t addr;
	int found;
};

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct phdr_find *f = arg;

	if ((!*f->needle && !*info->dlpi_name) ||
	    (*f->needle && strstr(info->dlpi_name, f->needle))) {
		f->addr = info->dlpi_addr;
		f->found = 1;
		return 1;
	}
	return 0;
}

static uint64_t loader_bias(const char *needle)
{
	struct phdr_find f = {.needle = needle};

	dl_iterate_phdr(phdr_cb, &f);
	return f.found ? f.addr : UINT64_MAX;
}

static void test_live_self(void)
{
	uint64_t fn = (uintptr_t)tp_test_known_function, addr = 0;
	uint64_t getpid_addr = (uintptr_t)dlsym(RTLD_DEFAULT, "getpid");
	uint64_t vdso = getauxval(AT_SYSINFO_EHDR), strlen_addr;
	struct tp_symtab *st = tp_symtab_new();
	const struct tp_map *m;
	struct tp_symloc loc;
	char exe[PATH_MAX];
	ssize_t n;
	uint8_t *anon;
	void *libc;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	ok(st != NULL, "symtab_new");
	is_int(tp_symtab_load_pid(st, getpid()), 0, "load_pid(self)");

	m = tp_symtab_find_map(st, fn);
	ok(m && !strcmp(m->path, exe), "map of a test function is the test executable");
	ok(m && m->bias == loader_bias(""), "main program bias as dl_iterate_phdr");
	is_int(tp_symtab_lookup(st, fn, false, &loc), 0, "lookup own function");
	is_str(loc.function, "tp_test_known_function", "own function name");
	is_int(loc.offset, 0, "own function offset 0");
	is_int(loc.func_addr, fn, "own function runtime address");
	is_str(loc.object, exe, "own function object");
	is_int(tp_symtab_lookup(st, fn + 3, false, &loc), 0, "lookup own function + 3");
	is_str(loc.function, "tp_test_known_function", "+3: same function");
	is_int(loc.offset, 3, "+3: offset 3");

	is_int(tp_symtab_lookup(st, getpid_addr, false, &loc), 0, "lookup getpid");
	ok(strstr(loc.object, "libc.so.6") != NULL, "getpid is in %s", loc.object);
	is_str(loc.function, "getpid", "getpid named as the user writes it");
	is_int(loc.offset, 0, "getpid offset 0");
	m = tp_symtab_find_map(st, getpid_addr);
	ok(m && m->bias == loader_bias("libc.so.6"), "libc bias as dl_iterate_phdr");
	/* From libc's handle: a sanitizer's interceptor may stand in for RTLD_DEFAULT's. */
	libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	strlen_addr = libc ? (uintptr_t)dlsym(libc, "strlen") : 0;
	if (libc)
		dlclose(libc);
	is_int(tp_symtab_lookup(st, strlen_addr, false, &loc), 0, "lookup strlen");
	/* strlen is an IFUNC: its implementation (__strlen_avx2...) is a local symbol, gone
	 * with libc's .symtab, so only the object is certain. */
	ok(strstr(loc.object, "libc.so.6") != NULL, "strlen is in %s", loc.object);

	is_int(tp_symtab_find_symbol(st, "libc:getpid", &addr), 0, "find libc:getpid");
	is_int(addr, getpid_addr, "libc:getpid = dlsym");
	addr = 0;
	is_int(tp_symtab_find_symbol(st, "libc.so.6:getpid", &addr), 0, "find libc.so.6:getpid");
	is_int(addr, getpid_addr, "libc.so.6:getpid = dlsym");
	addr = 0;
	is_int(tp_symtab_find_symbol(st, "getpid", &addr), 0, "find getpid anywhere");
	is_int(addr, getpid_addr, "getpid = dlsym");
	addr = 0;
	is_int(tp_symtab_find_symbol(st, "tp_test_known_function", &addr), 0, "find own function");
	is_int(addr, fn, "own function address");
	is_int(tp_symtab_find_symbol(st, "libcnosuch:getpid", &addr), -ENOENT, "unknown object");
	is_int(tp_symtab_find_symbol(st, "tp_no_such_function", &addr), -ENOENT,
	       "unknown function");

	if (vdso) {
		addr = 0;
		is_int(tp_symtab_find_symbol(st, "[vdso]:__vdso_clock_gettime", &addr), 0,
		       "find [vdso]:__vdso_clock_gettime");
		m = tp_symtab_find_map(st, addr);
		ok(m && !strcmp(m->path, "[vdso]") && m->start == vdso, "vdso symbol in [vdso]");
		is_int(tp_symtab_lookup(st, addr, false, &loc), 0, "lookup in vdso");
		ok(loc.function && strstr(loc.function, "clock_gettime") && loc.offset == 0,
		   "vdso function named %s", loc.function ? loc.function : "(none)");
	}

	/* Anonymous code, kept after it is unmapped. */
	anon = mmap(NULL, 3 * 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ok(anon != MAP_FAILED, "mmap anonymous code");
	if (anon != MAP_FAILED) {
		tp_symtab_load_pid(st, getpid());
		is_int(tp_symtab_lookup(st, (uintptr_t)anon + 4100, false, &loc), 0,
		       "lookup anonymous code");
		ok(!strcmp(loc.object, "[anon]") && !loc.function && loc.offset == 4100,
		   "anonymous: [anon]+4100, got %s+%" PRIu64, loc.object, loc.offset);
		munmap(anon, 3 * 4096);
		is_int(tp_symtab_load_pid(st, getpid()), 0, "reload after munmap");
		is_int(tp_symtab_lookup(st, (uintptr_t)anon + 4100, false, &loc), 0,
		       "unmapped code still resolves");
		is_str(loc.object, "[anon]", "unmapped code: [anon]");
	}
	is_int(tp_symtab_lookup(st, 8, false, &loc), -ENOENT, "address 8: no mapping");
	is_str(loc.object, "?", "unknown object is ?");
	tp_symtab_free(st);
	tp_symtab_free(NULL);
}

/* Mappings added by hand, and a later mapping cutting into an earlier one. */
static void test_add_map(void)
{
	struct tp_symtab *st = tp_symtab_new();
	uint64_t alpha = 0, base = 0x7f0000000000ULL, text_vaddr = 0, text_off = 0, size = 0;
	struct tp_symloc loc;
	const struct tp_map *m;
	int fd = open(target, O_RDONLY);
	Elf *elf;
	size_t n = 0;

	/* The executable segment of the target, mapped by hand at @base. */
	elf_version(EV_CURRENT);
	elf = fd >= 0 ? elf_begin(fd, ELF_C_READ, NULL) : NULL;
	if (elf && !elf_getphdrnum(elf, &n)) {
		for (size_t i = 0; i < n; i++) {
			GElf_Phdr ph;

			if (gelf_getphdr(elf, i, &ph) && ph.p_type == PT_LOAD &&
			    (ph.p_flags & PF_X)) {
				text_vaddr = ph.p_vaddr & ~0xfffULL;
				text_off = ph.p_offset & ~0xfffULL;
				size = (ph.p_vaddr + ph.p_memsz - text_vaddr + 0xfff) & ~0xfffULL;
			}
		}
	}
	elf_end(elf);
	close(fd);
	ok(size != 0, "target has an executable segment");
	tp_elf_lookup(target, "tp_target_alpha", &alpha, NULL);

	is_int(tp_symtab_add_map(st, base + text_vaddr, base + text_vaddr + size, text_off, target),
	       0, "add_map target text");
	is_int(tp_symtab_add_map(st, 0x10000, 0x10000, 0, NULL), -EINVAL, "empty map refused");
	m = tp_symtab_find_map(st, base + alpha);
	ok(m && m->bias == base, "bias of a hand-made mapping");
	is_int(tp_symtab_lookup(st, base + alpha + 1, true, &loc), 0, "lookup alpha + 1");
	is_str(loc.function, "tp_target_alpha", "hand-made map: function");
	is_int(loc.offset, 1, "hand-made map: offset");

	is_int(tp_symtab_add_map(st, 0x10000, 0x20000, 0, NULL), 0, "add anonymous map");
	is_int(tp_symtab_add_map(st, 0x14000, 0x15000, 0, "[vsyscall]"), 0, "cut into it");
	is_int(tp_symtab_lookup(st, 0x12000, false, &loc), 0, "left part");
	ok(!strcmp(loc.object, "[anon]") && loc.offset == 0x2000, "left part: [anon]+0x2000");
	is_int(tp_symtab_lookup(st, 0x14010, false, &loc), 0, "new map");
	ok(!strcmp(loc.object, "[vsyscall]") && loc.offset == 0x10, "new map: [vsyscall]+0x10");
	is_int(tp_symtab_lookup(st, 0x18000, false, &loc), 0, "right part");
	ok(!strcmp(loc.object, "[anon]") && loc.offset == 0x8000, "right part: [anon]+0x8000");
	is_int(tp_symtab_lookup(st, 0x20000, false, &loc), -ENOENT, "end is exclusive");
	tp_symtab_free(st);
}

struct child {
	pid_t pid;
	int in_fd;
	FILE *out;
	uint64_t alpha, beta, main;
	int alpha_line, beta_line;
};

static int spawn_target(const char *path, struct child *c)
{
	int in[2], out[2];
	char line[256];
	int got = 0;

	memset(c, 0, sizeof(*c));
	if (pipe(in) || pipe(out))
		return -1;
	c->pid = fork();
	if (c->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		execl(path, path, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	c->in_fd = in[1];
	c->out = fdopen(out[0], "r");
	while (got < 3 && fgets(line, sizeof(line), c->out)) {
		unsigned long long a;
		int l;

		if (sscanf(line, "alpha %llx %d", &a, &l) == 2) {
			c->alpha = a;
			c->alpha_line = l;
			got++;
		} else if (sscanf(line, "beta %llx %d", &a, &l) == 2) {
			c->beta = a;
			c->beta_line = l;
			got++;
		} else if (sscanf(line, "main %llx", &a) == 1) {
			c->main = a;
			got++;
		}
	}
	return got == 3 ? 0 : -1;
}

static int reap_target(struct child *c)
{
	int status = 0;

	close(c->in_fd);
	if (c->out)
		fclose(c->out);
	waitpid(c->pid, &status, 0);
	return status;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = s ? strlen(s) : 0, b = strlen(suffix);

	return a >= b && !strcmp(s + a - b, suffix);
}

static void test_live_target(void)
{
	struct tp_symtab *st = tp_symtab_new();
	uint64_t alpha_link = 0, main_link = 0, addr = 0;
	const struct tp_map *m;
	struct tp_symloc loc;
	struct child c;

	ok(spawn_target(target, &c) == 0, "target started and printed its addresses");
	is_int(tp_symtab_load_pid(st, c.pid), 0, "load_pid(target)");
	is_int(tp_symtab_lookup(st, c.alpha, true, &loc), 0, "lookup alpha with line");
	is_str(loc.function, "tp_target_alpha", "alpha: function");
	is_int(loc.offset, 0, "alpha: offset");
	ok(ends_with(loc.file, "/symbols-target.c"), "alpha: file %s", loc.file ? loc.file : "");
	is_int(loc.line, c.alpha_line, "alpha: line");
	is_int(tp_symtab_lookup(st, c.beta, true, &loc), 0, "lookup a statement in beta");
	is_str(loc.function, "tp_target_beta", "beta: function");
	ok(loc.offset > 0, "beta: inside the function (+%" PRIu64 ")", loc.offset);
	is_int(loc.line, c.beta_line, "beta: line of the statement");
	is_int(tp_symtab_find_symbol(st, "tp_target_alpha", &addr), 0, "find alpha in main exe");
	is_int(addr, c.alpha, "alpha: runtime address");
	is_int(tp_symtab_find_symbol(st, "symbols-target:main", &addr), 0, "find target:main");
	is_int(addr, c.main, "main: runtime address");
	is_int(reap_target(&c), 0, "target exited cleanly");
	/* A report is written after the process is gone: the table still answers. */
	is_int(tp_symtab_lookup(st, c.alpha + 2, true, &loc), 0, "lookup after exit");
	ok(loc.function && !strcmp(loc.function, "tp_target_alpha") && loc.offset == 2,
	   "after exit: tp_target_alpha+2");
	tp_symtab_free(st);

	/* Stripped: no function, but the offset from the bias is the link-time address. */
	st = tp_symtab_new();
	tp_elf_lookup(target, "tp_target_alpha", &alpha_link, NULL);
	ok(spawn_target(target_s, &c) == 0, "stripped target started");
	is_int(tp_symtab_load_pid(st, c.pid), 0, "load_pid(stripped target)");
	is_int(tp_symtab_lookup(st, c.alpha, true, &loc), 0, "lookup alpha, stripped");
	ok(!loc.function && loc.offset == alpha_link && !loc.file,
	   "stripped: no symbol, offset %#" PRIx64 " = link-time alpha", loc.offset);
	m = tp_symtab_find_map(st, c.main);
	ok(m && tp_elf_find_main(target_s, &main_link) == 0 && m->bias + main_link == c.main,
	   "stripped: bias + decoded main = runtime main");
	addr = 0;
	is_int(tp_symtab_find_symbol(st, "main", &addr), 0, "find main, stripped");
	is_int(addr, c.main, "stripped: main found by decoding");
	is_int(reap_target(&c), 0, "stripped target exited cleanly");
	tp_symtab_free(st);
}

int main(int argc, char **argv)
{
	char cmd[64];

	if (argc < 5) {
		fprintf(stderr,
			"usage: %s TARGET TARGET-STRIPPED TARGET-NOPIE "
			"TARGET-NOPIE-STRIPPED\n",
			argv[0]);
		return 2;
	}
	target = argv[1];
	target_s = argv[2];
	target_np = argv[3];
	target_nps = argv[4];
	if (!mkdtemp(tmpdir))
		return 2;
	signal(SIGPIPE, SIG_IGN);

	test_probe();
	test_lookup();
	test_find_main();
	test_live_self();
	test_add_map();
	test_live_target();

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd))
		printf("# cannot remove %s\n", tmpdir);
	return tap_done();
}
