/* Address -> object:function+offset for a live (or since exited) process: its executable
 * mappings from /proc/PID/maps, each object's symbols loaded from its ELF file on first use
 * and kept sorted for binary search, DWARF lines from libdwfl on request. */
#include "elf/symbols.h"
#include "base/log.h"
#include "base/procfs.h"
#include "elf/file.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

/* How many symbols before the nearest one to try when it does not cover the address: a
 * local symbol may sit inside a bigger function (assembly labels, aliases of a tail). */
#define COVER_LOOKBACK 4

enum obj_kind {
	OBJ_FILE,
	OBJ_VDSO,
	OBJ_NOFILE, /* anonymous code, [vsyscall], ...: no symbols */
};

struct sym {
	uint64_t addr, end;	/* end: addr + size, or the section's end for size 0 */
	uint32_t name, version; /* offsets into the object's pool; 0 is "" */
	uint8_t type, bind;
	bool hidden, dynsym, sized;
};

struct obj {
	char *path;
	char *alt_path; /* /proc/PID/map_files/..., for deleted or unreachable files */
	enum obj_kind kind;

	bool loads_tried;
	struct tp_elf_load *loads;
	size_t nloads;
	bool bias_known;
	uint64_t bias;

	bool syms_tried;
	struct sym *syms;
	size_t nsyms;
	uint32_t *by_addr; /* functions, one per address */
	size_t naddr;
	uint32_t *by_name; /* every symbol, by name then preference */
	char *pool;
	size_t poollen, poolcap;

	bool dwfl_tried;
	Dwfl *dwfl;
	Dwfl_Module *mod;
};

struct map_ent {
	struct tp_map map;
	struct obj *obj;
	bool bias_known;
};

struct tp_symtab {
	struct map_ent *maps; /* sorted by start, not overlapping */
	size_t nmaps, mapcap;
	struct obj **objs; /* in order of first appearance */
	size_t nobjs, objcap;
	struct obj *main_obj;
};

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
	size_t n = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return p;
	while (n < need)
		n *= 2;
	q = realloc(p, n * elem);
	if (q)
		*cap = n;
	return q;
}

/* The vdso is the same image in every 64-bit process on this kernel, so ours stands in for
 * the traced process's, which may be gone by the time a report is written. */
static void *copy_own_vdso(size_t *len)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)getauxval(AT_SYSINFO_EHDR);
	size_t size, phend;
	void *buf;

	if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG))
		return NULL;
	size = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
	phend = eh->e_phoff + (size_t)eh->e_phnum * eh->e_phentsize;
	if (size < phend)
		size = phend;
	if (size > (1 << 20))
		return NULL;
	buf = malloc(size);
	if (buf)
		memcpy(buf, eh, size);
	*len = size;
	return buf;
}

/* Open the object's ELF: its path, else the process's map_files link, else our vdso. */
static int obj_open(struct obj *o, struct tp_elf_file *f, void **mem)
{
	size_t len;
	int err;

	*mem = NULL;
	if (o->kind == OBJ_VDSO) {
		*mem = copy_own_vdso(&len);
		if (!*mem)
			return -ENOENT;
		err = tp_elf_file_open_mem(f, *mem, len);
		if (err) {
			free(*mem);
			*mem = NULL;
		}
		return err;
	}
	if (o->kind != OBJ_FILE)
		return -ENOENT;
	err = tp_elf_file_open(f, o->path);
	if (err && o->alt_path)
		err = tp_elf_file_open(f, o->alt_path);
	return err;
}

static void obj_load_loads(struct obj *o)
{
	struct tp_elf_file f;
	void *mem;
	int n;

	if (o->loads_tried)
		return;
	o->loads_tried = true;
	if (obj_open(o, &f, &mem))
		return;
	n = tp_elf_file_loads(&f, &o->loads);
	o->nloads = n > 0 ? n : 0;
	tp_elf_file_close(&f);
	free(mem);
}

static void ent_bias(struct map_ent *e)
{
	struct obj *o = e->obj;

	if (e->bias_known)
		return;
	e->bias_known = true;
	e->map.bias = e->map.start - e->map.offset;
	if (o->kind == OBJ_NOFILE)
		return;
	obj_load_loads(o);
	tp_elf_loads_bias(o->loads, o->nloads, e->map.start, e->map.offset, &e->map.bias);
	if (!o->bias_known) {
		o->bias_known = true;
		o->bias = e->map.bias;
	}
}

static uint32_t pool_add(struct obj *o, const char *s, size_t len)
{
	uint32_t off;
	char *p;

	if (!len)
		return 0;
	if (o->poollen + len + 1 > UINT32_MAX)
		return 0;
	p = grow(o->pool, &o->poolcap, o->poollen + len + 1, 1);
	if (!p)
		return 0;
	o->pool = p;
	off = o->poollen;
	memcpy(p + off, s, len);
	p[off + len] = '\0';
	o->poollen += len + 1;
	return off;
}

struct collect {
	struct obj *o;
	size_t cap;
	int err;
	bool symtab_seen; /* a .symtab symbol came */
	bool debug;	  /* walking the separate debug file: its .symtab only */
};

static int collect_sym(void *arg, const struct tp_elf_sym *s)
{
	struct collect *c = arg;
	struct obj *o = c->o;
	struct sym *syms, *d;

	if (c->debug && s->dynsym)
		return 0;
	if (!s->dynsym)
		c->symtab_seen = true;
	syms = grow(o->syms, &c->cap, o->nsyms + 1, sizeof(*syms));
	if (!syms) {
		c->err = -ENOMEM;
		return c->err;
	}
	o->syms = syms;
	d = &syms[o->nsyms];
	/* Versions are kept apart so that reports show the plain name. */
	d->name = pool_add(o, s->name, s->namelen);
	d->version = s->version ? pool_add(o, s->version, strlen(s->version)) : 0;
	if (!d->name) {
		c->err = -ENOMEM;
		return c->err;
	}
	d->addr = s->value;
	d->end = s->size ? s->value + s->size : s->sec_end;
	d->sized = s->size != 0;
	d->type = s->type;
	d->bind = s->bind;
	d->hidden = s->hidden;
	d->dynsym = s->dynsym;
	o->nsyms++;
	return 0;
}

static int rank(const struct sym *s)
{
	return (s->hidden ? 0 : 2) + (s->dynsym ? 0 : 1);
}

static int cmp_by_name(const void *a, const void *b, void *arg)
{
	const struct obj *o = arg;
	const struct sym *x = &o->syms[*(const uint32_t *)a], *y = &o->syms[*(const uint32_t *)b];
	int c = strcmp(o->pool + x->name, o->pool + y->name);

	if (c)
		return c;
	if (rank(x) != rank(y))
		return rank(y) - rank(x);
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

static int underscores(const char *s)
{
	int n = 0;

	while (s[n] == '_')
		n++;
	return n;
}

/* Among aliases at one address the name shown is the one a person would write: sized,
 * global, default version, fewest leading underscores, shortest ("getpid" over
 * "__getpid", "malloc" over "__libc_malloc"). */
static int cmp_by_addr(const void *a, const void *b, void *arg)
{
	const struct obj *o = arg;
	const struct sym *x = &o->syms[*(const uint32_t *)a], *y = &o->syms[*(const uint32_t *)b];
	const char *xn = o->pool + x->name, *yn = o->pool + y->name;
	size_t xl, yl;
	int c;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->sized != y->sized)
		return x->sized ? -1 : 1;
	if ((x->bind == STB_LOCAL) != (y->bind == STB_LOCAL))
		return x->bind == STB_LOCAL ? 1 : -1;
	if (x->hidden != y->hidden)
		return x->hidden ? 1 : -1;
	c = underscores(xn) - underscores(yn);
	if (c)
		return c;
	xl = strlen(xn);
	yl = strlen(yn);
	if (xl != yl)
		return xl < yl ? -1 : 1;
	if (x->bind != y->bind)
		return x->bind == STB_GLOBAL ? -1 : 1;
	c = strcmp(xn, yn);
	if (c)
		return c;
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

static void obj_debug_syms(struct obj *o, struct collect *c)
{
	const char *path = access(o->path, R_OK) && o->alt_path ? o->alt_path : o->path;
	char *debug = tp_elf_debug_file(path);
	struct tp_elf_file f;

	if (!debug)
		return;
	if (!tp_elf_file_open(&f, debug)) {
		c->debug = true;
		tp_elf_file_foreach_sym(&f, collect_sym, c);
		c->debug = false;
		tp_elf_file_close(&f);
	}
	free(debug);
}

static int obj_load_syms(struct obj *o)
{
	struct collect c = {.o = o};
	struct tp_elf_file f;
	size_t n = 0;
	void *mem;
	int err;

	if (o->syms_tried)
		return o->by_name ? 0 : -ENOENT;
	o->syms_tried = true;
	err = obj_open(o, &f, &mem);
	if (err)
		return err;
	/* Offset 0 is the empty string, which stands for "no version". */
	o->pool = calloc(1, 64);
	o->poolcap = o->pool ? 64 : 0;
	o->poollen = 1;
	if (o->pool)
		tp_elf_file_foreach_sym(&f, collect_sym, &c);
	else
		c.err = -ENOMEM;
	tp_elf_file_close(&f);
	free(mem);
	/* A stripped object: its .symtab from the separate debug file when one is installed. */
	if (!c.err && !c.symtab_seen && o->kind == OBJ_FILE)
		obj_debug_syms(o, &c);
	err = c.err;
	if (err)
		goto err_free;

	o->by_name = malloc((o->nsyms ? o->nsyms : 1) * sizeof(*o->by_name));
	o->by_addr = malloc((o->nsyms ? o->nsyms : 1) * sizeof(*o->by_addr));
	if (!o->by_name || !o->by_addr) {
		err = -ENOMEM;
		goto err_free;
	}
	for (size_t i = 0; i < o->nsyms; i++) {
		o->by_name[i] = i;
		if (o->syms[i].type != STT_OBJECT)
			o->by_addr[n++] = i;
	}
	qsort_r(o->by_name, o->nsyms, sizeof(*o->by_name), cmp_by_name, o);
	qsort_r(o->by_addr, n, sizeof(*o->by_addr), cmp_by_addr, o);
	o->naddr = 0;
	for (size_t i = 0; i < n; i++) {
		if (o->naddr &&
		    o->syms[o->by_addr[o->naddr - 1]].addr == o->syms[o->by_addr[i]].addr)
			continue;
		o->by_addr[o->naddr++] = o->by_addr[i];
	}
	tp_dbg("symbols: %s: %zu symbols, %zu functions\n", o->path, o->nsyms, o->naddr);
	return 0;

err_free:
	free(o->by_name);
	free(o->by_addr);
	free(o->syms);
	o->by_name = o->by_addr = NULL;
	o->syms = NULL;
	o->nsyms = o->naddr = 0;
	return err;
}

static const struct sym *obj_find_addr(struct obj *o, uint64_t addr)
{
	size_t lo = 0, hi = o->naddr;

	/* The last function starting at or before @addr. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (o->syms[o->by_addr[mid]].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo, k = 0; i > 0 && k <= COVER_LOOKBACK; i--, k++) {
		const struct sym *s = &o->syms[o->by_addr[i - 1]];

		if (addr < s->end || (s->end == s->addr && addr == s->addr))
			return s;
	}
	return NULL;
}

static const struct sym *obj_find_name(struct obj *o, const char *name)
{
	const char *at = strchr(name, '@');
	size_t len = at ? (size_t)(at - name) : strlen(name);
	const char *ver = at ? at + (at[1] == '@' ? 2 : 1) : NULL;
	size_t lo = 0, hi = o->nsyms;

	/* The first symbol whose name is not below @name (up to its version). */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *n = o->pool + o->syms[o->by_name[mid]].name;
		int c = strncmp(n, name, len);

		if (!c && n[len])
			c = 1;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < o->nsyms; i++) {
		const struct sym *s = &o->syms[o->by_name[i]];
		const char *n = o->pool + s->name;

		if (strncmp(n, name, len) || n[len])
			break;
		if (!ver || !strcmp(o->pool + s->version, ver))
			return s;
	}
	return NULL;
}

static void obj_free(struct obj *o)
{
	if (!o)
		return;
	if (o->dwfl)
		dwfl_end(o->dwfl);
	free(o->path);
	free(o->alt_path);
	free(o->loads);
	free(o->syms);
	free(o->by_addr);
	free(o->by_name);
	free(o->pool);
	free(o);
}

struct tp_symtab *tp_symtab_new(void)
{
	return calloc(1, sizeof(struct tp_symtab));
}

void tp_symtab_free(struct tp_symtab *st)
{
	if (!st)
		return;
	for (size_t i = 0; i < st->nobjs; i++)
		obj_free(st->objs[i]);
	free(st->objs);
	free(st->maps);
	free(st);
}

static struct obj *get_obj(struct tp_symtab *st, const char *path, const char *alt_path)
{
	struct obj **objs, *o;

	for (size_t i = 0; i < st->nobjs; i++) {
		o = st->objs[i];
		if (!strcmp(o->path, path)) {
			if (!o->alt_path && alt_path)
				o->alt_path = strdup(alt_path);
			return o;
		}
	}
	objs = grow(st->objs, &st->objcap, st->nobjs + 1, sizeof(*objs));
	if (!objs)
		return NULL;
	st->objs = objs;
	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->path = strdup(path);
	o->alt_path = alt_path ? strdup(alt_path) : NULL;
	if (!o->path) {
		obj_free(o);
		return NULL;
	}
	if (!strcmp(path, "[vdso]"))
		o->kind = OBJ_VDSO;
	else if (path[0] == '[')
		o->kind = OBJ_NOFILE;
	else
		o->kind = OBJ_FILE;
	st->objs[st->nobjs++] = o;
	return o;
}

/* Insert a mapping; older ones it overlaps keep only the parts outside it, so that code
 * recorded before an unmap still resolves unless something else took its place. */
static int insert_map(struct tp_symtab *st, uint64_t start, uint64_t end, uint64_t offset,
		      const char *path, const char *alt_path)
{
	struct map_ent *maps, *e;
	size_t first, last, i, nkeep = 0;
	struct map_ent pieces[2];
	struct obj *o;

	if (start >= end)
		return -EINVAL;
	if (!path || !*path)
		path = "[anon]";
	o = get_obj(st, path, alt_path);
	if (!o)
		return -ENOMEM;

	/* The overlapped range [first, last). */
	for (first = 0; first < st->nmaps && st->maps[first].map.end <= start; first++)
		;
	for (last = first; last < st->nmaps && st->maps[last].map.start < end; last++)
		;
	if (last == first + 1) {
		e = &st->maps[first];
		if (e->map.start == start && e->map.end == end && e->map.offset == offset &&
		    e->obj == o)
			return 0;
	}
	if (last > first) {
		e = &st->maps[first];
		if (e->map.start < start) {
			pieces[nkeep] = *e;
			pieces[nkeep].map.end = start;
			nkeep++;
		}
		e = &st->maps[last - 1];
		if (e->map.end > end) {
			pieces[nkeep] = *e;
			pieces[nkeep].map.offset += end - e->map.start;
			pieces[nkeep].map.start = end;
			/* The bias is the object's, not the piece's: it stays valid. */
			nkeep++;
		}
	}
	maps = grow(st->maps, &st->mapcap, st->nmaps - (last - first) + nkeep + 1, sizeof(*maps));
	if (!maps)
		return -ENOMEM;
	st->maps = maps;
	/* Make room for nkeep + 1 entries where last - first were. */
	memmove(&maps[first + nkeep + 1], &maps[last], (st->nmaps - last) * sizeof(*maps));
	st->nmaps = st->nmaps - (last - first) + nkeep + 1;
	i = first;
	if (nkeep && pieces[0].map.start < start)
		maps[i++] = pieces[0];
	maps[i] = (struct map_ent){
	    .map = {.start = start, .end = end, .offset = offset, .path = o->path},
	    .obj = o,
	};
	i++;
	if (nkeep && pieces[nkeep - 1].map.start >= end)
		maps[i] = pieces[nkeep - 1];
	return 0;
}

int tp_symtab_add_map(struct tp_symtab *st, uint64_t start, uint64_t end, uint64_t offset,
		      const char *path)
{
	return insert_map(st, start, end, offset, path, NULL);
}

struct load_pid {
	struct tp_symtab *st;
	pid_t pid;
	int err;
};

static int load_pid_map(void *arg, const struct tp_maps_ent *e)
{
	struct load_pid *lp = arg;
	char alt[96];

	if (!tp_maps_exec(e))
		return 0;
	snprintf(alt, sizeof(alt), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)lp->pid,
		 e->start, e->end);
	lp->err = insert_map(lp->st, e->start, e->end, e->offset, e->path,
			     e->path[0] == '/' ? alt : NULL);
	return lp->err;
}

int tp_symtab_load_pid(struct tp_symtab *st, pid_t pid)
{
	struct load_pid lp = {st, pid, 0};
	char fname[64], exe[PATH_MAX], *del;
	ssize_t len;
	int err;

	snprintf(fname, sizeof(fname), "/proc/%d/exe", (int)pid);
	len = readlink(fname, exe, sizeof(exe) - 1);
	exe[len > 0 ? len : 0] = '\0';
	del = strstr(exe, " (deleted)");
	if (del && !del[10])
		*del = '\0';

	err = tp_maps_foreach(pid, load_pid_map, &lp);
	if (err && !lp.err)
		return err; /* /proc/PID/maps could not be read */
	for (size_t i = 0; exe[0] && i < st->nobjs; i++) {
		if (!strcmp(st->objs[i]->path, exe)) {
			st->main_obj = st->objs[i];
			break;
		}
	}
	return err;
}

static struct map_ent *find_ent(struct tp_symtab *st, uint64_t addr)
{
	size_t lo = 0, hi = st->nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (st->maps[mid].map.start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || addr >= st->maps[lo - 1].map.end)
		return NULL;
	ent_bias(&st->maps[lo - 1]);
	return &st->maps[lo - 1];
}

const struct tp_map *tp_symtab_find_map(struct tp_symtab *st, uint64_t addr)
{
	struct map_ent *e = find_ent(st, addr);

	return e ? &e->map : NULL;
}

static void obj_line(struct obj *o, uint64_t addr, struct tp_symloc *out)
{
	static const Dwfl_Callbacks cbs = {
	    .find_elf = dwfl_build_id_find_elf,
	    .find_debuginfo = dwfl_standard_find_debuginfo,
	    .section_address = dwfl_offline_section_address,
	};
	Dwfl_Line *line;
	const char *file;
	int lineno = 0;

	if (!o->dwfl_tried) {
		const char *path = o->path;

		o->dwfl_tried = true;
		if (o->kind != OBJ_FILE)
			return;
		if (access(path, R_OK) && o->alt_path)
			path = o->alt_path;
		o->dwfl = dwfl_begin(&cbs);
		if (!o->dwfl)
			return;
		dwfl_report_begin(o->dwfl);
		/* Base 0 with p_vaddr added keeps addresses link-time, as our symbols are. */
		o->mod = dwfl_report_elf(o->dwfl, o->path, path, -1, 0, true);
		dwfl_report_end(o->dwfl, NULL, NULL);
		if (!o->mod) {
			tp_dbg("symbols: %s: %s\n", o->path, dwfl_errmsg(-1));
			dwfl_end(o->dwfl);
			o->dwfl = NULL;
			return;
		}
	}
	if (!o->mod)
		return;
	line = dwfl_module_getsrc(o->mod, addr);
	if (!line)
		return;
	file = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
	if (!file)
		return;
	out->file = file;
	out->line = lineno;
}

int tp_symtab_lookup(struct tp_symtab *st, uint64_t addr, bool want_line, struct tp_symloc *out)
{
	struct map_ent *e = find_ent(st, addr);
	const struct sym *s = NULL;
	struct obj *o;
	uint64_t link;

	memset(out, 0, sizeof(*out));
	out->object = "?";
	if (!e)
		return -ENOENT;
	o = e->obj;
	out->object = o->path;
	link = addr - e->map.bias;
	if (o->kind != OBJ_NOFILE && !obj_load_syms(o))
		s = obj_find_addr(o, link);
	if (s) {
		out->function = o->pool + s->name;
		out->func_addr = s->addr + e->map.bias;
		out->offset = link - s->addr;
	} else {
		out->offset = link;
	}
	if (want_line)
		obj_line(o, link, out);
	return 0;
}

/* "libc" names libc.so.6 or libc-2.31.so but not libcap.so.2; a full path names itself. */
static bool obj_matches(const struct obj *o, const char *spec, size_t len, bool loose)
{
	const char *base = strrchr(o->path, '/');

	if (strlen(o->path) == len && !memcmp(o->path, spec, len))
		return true;
	base = base ? base + 1 : o->path;
	if (strncmp(base, spec, len))
		return false;
	return loose || base[len] == '\0' || base[len] == '.' || base[len] == '-';
}

static int obj_symbol(struct tp_symtab *st, struct obj *o, const char *name, uint64_t *addr)
{
	const struct sym *s;

	uint64_t link;

	if (o->kind == OBJ_NOFILE || obj_load_syms(o))
		return -ENOENT;
	s = obj_find_name(o, name);
	if (s) {
		link = s->addr;
	} else if (o == st->main_obj && !strcmp(name, "main")) {
		/* A stripped program: where to stop "at main" is still known. */
		if (tp_elf_find_main(o->path, &link) &&
		    (!o->alt_path || tp_elf_find_main(o->alt_path, &link)))
			return -ENOENT;
	} else {
		return -ENOENT;
	}
	if (!o->bias_known) {
		for (size_t i = 0; i < st->nmaps && !o->bias_known; i++)
			if (st->maps[i].obj == o)
				ent_bias(&st->maps[i]);
	}
	if (!o->bias_known)
		return -ENOENT;
	*addr = link + o->bias;
	return 0;
}

int tp_symtab_find_symbol(struct tp_symtab *st, const char *name, uint64_t *addr)
{
	const char *colon = strchr(name, ':');
	size_t speclen;

	if (!colon) {
		if (st->main_obj && !obj_symbol(st, st->main_obj, name, addr))
			return 0;
		for (size_t i = 0; i < st->nobjs; i++)
			if (st->objs[i] != st->main_obj && !obj_symbol(st, st->objs[i], name, addr))
				return 0;
		return -ENOENT;
	}
	speclen = colon - name;
	/* Exact names and word-bounded prefixes first, then any prefix ("libpthr"). */
	for (int loose = 0; loose < 2; loose++) {
		for (size_t i = 0; i < st->nobjs; i++) {
			struct obj *o = st->objs[i];

			if (obj_matches(o, name, speclen, loose) &&
			    !obj_symbol(st, o, colon + 1, addr))
				return 0;
		}
	}
	return -ENOENT;
}

struct exe_walk {
	const char *exe;
	uint64_t *bias;
};

static int exe_mapping(void *arg, const struct tp_maps_ent *e)
{
	struct exe_walk *w = arg;

	if (!e->path_len || strcmp(e->path, w->exe))
		return 0;
	return tp_elf_map_bias(e->path, e->start, e->offset, w->bias) ? -ENOENT : 1;
}

int tp_elf_exe_bias(pid_t pid, uint64_t *bias)
{
	char link[64], exe[PATH_MAX];
	struct exe_walk w = {exe, bias};
	ssize_t n;
	int err;

	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	n = readlink(link, exe, sizeof(exe) - 1);
	if (n < 0)
		return -errno;
	exe[n] = 0;
	err = tp_maps_foreach(pid, exe_mapping, &w);
	return err == 1 ? 0 : err ? err : -ENOENT;
}
