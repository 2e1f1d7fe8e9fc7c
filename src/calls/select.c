/* -e patterns (globs over OBJECT:FUNCTION or ltrace's FUNCTION@OBJECT, '!' to deselect,
 * applied in order; C++ names match mangled or demangled) and the function symbols of an object,
 * from its .symtab and .dynsym, or its separate debug file's .symtab when it has none (src/elf). */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "calls/select.h"
#include "elf/file.h"

struct pat {
	bool neg;
	bool hit;  /* matched a function of an object scanned */
	char *obj; /* NULL: any object */
	char *fn;
	char *text; /* as given */
};

struct tp_select {
	struct pat *p;
	int n;
	bool from_default; /* the first pattern deselects: start from the default selection */
	int nuser;	   /* the first ones are the user's (-e); then plugins' */
};

const char *tp_select_base(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

static bool glob_ok(const char *g)
{
	for (const char *c = g; *c; c++) {
		if (*c == '\\' && c[1])
			c++;
		else if (*c == '[' && !strchr(c + 1, ']'))
			return false;
	}
	return true;
}

/* The ':' between OBJECT and FUNCTION: the first one that is not half of a C++ "::". */
static char *obj_colon(char *tok)
{
	char *c = tok;

	while ((c = strchr(c, ':'))) {
		if (c[1] != ':')
			return c;
		c += 2;
	}
	return NULL;
}

static int add_one(struct tp_select *s, char *tok, char *err, size_t errlen)
{
	struct pat pt = {.text = strdup(tok)}, *n;
	char *colon, *at, *obj, *fn;
	int r = -EINVAL;

	if (!pt.text)
		return -ENOMEM;
	if (*tok == '!') {
		pt.neg = true;
		tok++;
	}
	colon = obj_colon(tok);
	at = strchr(tok, '@');
	if (colon && obj_colon(colon + 1)) {
		snprintf(err, errlen, "bad pattern '%s': more than one ':'", tok);
		goto err;
	}
	if (at && (colon || strchr(at + 1, '@'))) {
		snprintf(err, errlen, "bad pattern '%s': FUNCTION@OBJECT takes one '@' and no ':'",
			 tok);
		goto err;
	}
	if (at) {
		/* ltrace's spelling, malloc@libc.so.6: the object after the '@'. */
		*at = 0;
		obj = at + 1;
		fn = tok;
		if (!*fn || !*obj) {
			snprintf(err, errlen, "bad pattern '%s@%s': empty %s", fn, obj,
				 *fn ? "object" : "function");
			goto err;
		}
	} else {
		if (colon)
			*colon = 0;
		if (!*tok || (colon && !colon[1])) {
			snprintf(err, errlen, "bad pattern '%s%s': empty %s", colon ? tok : "",
				 colon ? ":" : "",
				 *tok	 ? "function"
				 : colon ? "object"
					 : "pattern");
			goto err;
		}
		obj = colon ? tok : NULL;
		fn = colon ? colon + 1 : tok;
	}
	if (!glob_ok(fn) || (obj && !glob_ok(obj))) {
		snprintf(err, errlen, "bad pattern '%s': unbalanced '['", glob_ok(fn) ? obj : fn);
		goto err;
	}
	pt.obj = obj ? strdup(obj) : NULL;
	pt.fn = strdup(fn);
	n = realloc(s->p, (s->n + 1) * sizeof(*n));
	if (n)
		s->p = n;
	if (!pt.fn || (obj && !pt.obj) || !n) {
		r = -ENOMEM;
		goto err;
	}
	if (!s->n)
		s->from_default = pt.neg;
	s->p[s->n++] = pt;
	return 0;

err:
	free(pt.obj);
	free(pt.fn);
	free(pt.text);
	return r;
}

/* The next ',' that separates patterns: not one inside a C++ parameter list's parentheses
 * ("ns::sum(double, double)"); the end of @p when none. */
static char *next_comma(char *p)
{
	int depth = 0;

	for (; *p && (*p != ',' || depth > 0); p++)
		depth += *p == '(' ? 1 : *p == ')' && depth > 0 ? -1 : 0;
	return p;
}

int tp_select_add(struct tp_select *s, const char *arg, char *err, size_t errlen)
{
	char *copy = strdup(arg), *tok, *end, *next;
	int r = 0;

	if (!copy)
		return -ENOMEM;
	if (!*copy || copy[strlen(copy) - 1] == ',' || *copy == ',' || strstr(copy, ",,")) {
		snprintf(err, errlen, "bad pattern '%s': empty pattern", arg);
		free(copy);
		return -EINVAL;
	}
	for (tok = copy; tok && !r; tok = next) {
		end = next_comma(tok);
		next = *end ? end + 1 : NULL;
		*end = 0;
		r = add_one(s, tok, err, errlen);
	}
	free(copy);
	return r;
}

struct tp_select *tp_select_new(char *const *args, int nargs, char *err, size_t errlen)
{
	struct tp_select *s = calloc(1, sizeof(*s));

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->from_default = true;
	for (int i = 0; i < nargs; i++) {
		if (tp_select_add(s, args[i], err, errlen)) {
			tp_select_free(s);
			return NULL;
		}
	}
	s->nuser = s->n;
	return s;
}

void tp_select_free(struct tp_select *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->n; i++) {
		free(s->p[i].obj);
		free(s->p[i].fn);
		free(s->p[i].text);
	}
	free(s->p);
	free(s);
}

/* OBJECT matches the whole path, the file name, or the file name cut before ".so" or
 * before any '.' after it: libz, libz.so, libz.so.1 (the soname), libz.so.1.2 and
 * libz.so.1.2.13 all name /usr/lib/x86_64-linux-gnu/libz.so.1.2.13. */
static bool obj_match(const char *glob, const char *path)
{
	const char *base = tp_select_base(path), *so = strstr(base, ".so"), *dot;
	char cut[256];

	if (!fnmatch(glob, base, 0) || !fnmatch(glob, path, 0))
		return true;
	for (dot = so; dot && (size_t)(dot - base) < sizeof(cut); dot = strchr(dot + 1, '.')) {
		memcpy(cut, base, dot - base);
		cut[dot - base] = 0;
		if (!fnmatch(glob, cut, 0))
			return true;
	}
	return false;
}

static bool fn_match(const struct pat *pt, const char *fn, const char *dfn)
{
	return !fnmatch(pt->fn, fn, 0) || (dfn && !fnmatch(pt->fn, dfn, 0));
}

bool tp_select_match(struct tp_select *s, const char *obj, const char *fn, const char *dfn,
		     bool dflt)
{
	bool sel = s->from_default && dflt;

	for (int i = 0; i < s->n; i++) {
		struct pat *pt = &s->p[i];

		if ((!pt->obj || obj_match(pt->obj, obj)) && fn_match(pt, fn, dfn)) {
			sel = !pt->neg;
			pt->hit = true;
		}
	}
	return sel;
}

int tp_select_warn_unmatched(const struct tp_select *s)
{
	int n = 0;

	for (int i = 0; i < s->nuser; i++)
		if (!s->p[i].hit) {
			tp_warn("pattern '%s' matched no function", s->p[i].text);
			n++;
		}
	return n;
}

bool tp_select_has_patterns(const struct tp_select *s)
{
	return s->n > 0;
}

bool tp_select_wants_notes(const struct tp_select *s)
{
	for (int i = 0; i < s->nuser; i++)
		if (s->p[i].neg && !s->p[i].hit)
			return true;
	return false;
}

bool tp_select_may_match(const struct tp_select *s, const char *obj, bool dflt_any)
{
	if (s->from_default && dflt_any)
		return true;
	for (int i = 0; i < s->n; i++)
		if (!s->p[i].neg && (!s->p[i].obj || obj_match(s->p[i].obj, obj)))
			return true;
	return false;
}

bool tp_select_wants_debug(const struct tp_select *s, const struct tp_select *csel, const char *obj,
			   bool main)
{
	return main || tp_select_may_match(s, obj, false) ||
	       (csel && tp_select_may_match(csel, obj, false));
}

void tp_select_note(struct tp_select *s, const char *obj, const char *fn, const char *dfn)
{
	for (int i = 0; i < s->nuser; i++) {
		struct pat *pt = &s->p[i];

		if (pt->neg && !pt->hit && (!pt->obj || obj_match(pt->obj, obj)) &&
		    fn_match(pt, fn, dfn))
			pt->hit = true;
	}
}

/* ---- symbols ---- */

/* Objects whose function tables stay read (tp_fsyms_read): a program, its libc and ld.so,
 * and a few more, as the agent engine's choice, set-up and scan read them in turn. */
#define FSYMS_CACHED 8

static void fsyms_free(struct tp_fsyms *fs);

struct raw {
	uint64_t vaddr, size;
	int rank; /* lower is a better name */
	bool ifunc;
	char *name;
};

static int rank_of(const struct tp_elf_sym *sym, const char *name)
{
	int b = sym->bind;
	int r = b == STB_GLOBAL ? 0 : b == STB_WEAK ? 4 : 8;

	if (name[0] == '_')
		r += name[1] == '_' ? 2 : 1;
	return r;
}

static size_t underscores(const char *s)
{
	size_t n = 0;

	while (s[n] == '_')
		n++;
	return n;
}

/* By address, then the name a person would write first, as symbols.c names functions: global
 * over weak over local, then fewest leading underscores and shortest (libc6-dbg's
 * "__libc_cleanup_push_defer" over its local alias "__GI___libc_cleanup_push_defer"). */
static int cmp_raw(const void *a, const void *b)
{
	const struct raw *x = a, *y = b;
	size_t xu, yu, xl, yl;

	if (x->vaddr != y->vaddr)
		return x->vaddr < y->vaddr ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank - y->rank;
	xu = underscores(x->name);
	yu = underscores(y->name);
	if (xu != yu)
		return xu < yu ? -1 : 1;
	xl = strlen(x->name);
	yl = strlen(y->name);
	if (xl != yl)
		return xl < yl ? -1 : 1;
	return strcmp(x->name, y->name);
}

static char *unversioned(const char *name)
{
	const char *at = strchr(name, '@');

	return at ? strndup(name, at - name) : strdup(name);
}

static int push_import(struct tp_fsyms *out, const char *name)
{
	const char **n;
	char *c = unversioned(name);

	if (!c)
		return -ENOMEM;
	n = realloc(out->imports, (out->nimports + 1) * sizeof(*n));
	if (!n) {
		free(c);
		return -ENOMEM;
	}
	out->imports = n;
	out->imports[out->nimports++] = c;
	return 0;
}

struct read_syms {
	struct raw *raws;
	int nraw, cap;
	struct tp_fsyms *out;
	bool symtab_seen; /* a .symtab symbol came */
	bool debug;	  /* walking the separate debug file: its defined .symtab symbols only */
};

static int read_sym(void *arg, const struct tp_elf_sym *sym)
{
	struct read_syms *rs = arg;
	const char *name = sym->name;
	int type = sym->type;

	if (rs->debug && (sym->dynsym || sym->undef))
		return 0;
	if (!sym->dynsym)
		rs->symtab_seen = true;
	if (sym->undef) {
		if (sym->dynsym && (type == STT_FUNC || type == STT_NOTYPE) &&
		    push_import(rs->out, name))
			return -ENOMEM;
		return 0;
	}
	if ((type != STT_FUNC && type != STT_GNU_IFUNC) || !sym->value)
		return 0;
	if (rs->nraw == rs->cap) {
		int ncap = rs->cap ? 2 * rs->cap : 256;
		struct raw *r = realloc(rs->raws, ncap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		rs->raws = r;
		rs->cap = ncap;
	}
	struct raw *r = &rs->raws[rs->nraw++];

	r->vaddr = sym->value;
	r->size = sym->size;
	r->ifunc = type == STT_GNU_IFUNC;
	r->rank = rank_of(sym, name);
	r->name = unversioned(name);
	if (!r->name)
		return -ENOMEM;
	return 0;
}

static int fsyms_load(const char *path, bool debug, struct tp_fsyms *out)
{
	struct read_syms rs = {.out = out};
	struct tp_elf_file f;
	struct raw *raws;
	int nraw, r;

	memset(out, 0, sizeof(*out));
	r = tp_elf_file_open_any(&f, path);
	if (r)
		return r;
	r = tp_elf_file_foreach_sym_raw(&f, read_sym, &rs);
	/* A stripped object (Debian's libc and ld.so): the .symtab of its separate debug file,
	 * as symbols.c names functions, so that a function only that file names (libc6-dbg's
	 * __libc_start_call_main) can be selected, with its size. */
	if (!r && debug && !rs.symtab_seen) {
		char *dpath = tp_elf_debug_file(path);
		struct tp_elf_file df;

		if (dpath && !tp_elf_file_open_any(&df, dpath)) {
			rs.debug = true;
			r = tp_elf_file_foreach_sym_raw(&df, read_sym, &rs);
			tp_elf_file_close(&df);
		}
		free(dpath);
	}
	raws = rs.raws;
	nraw = rs.nraw;
	if (r)
		goto out;
	if (nraw)
		qsort(raws, nraw, sizeof(*raws), cmp_raw);
	out->f = calloc(nraw ? nraw : 1, sizeof(*out->f));
	if (!out->f) {
		r = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < nraw;) {
		int j = i, k = 0;
		struct tp_fsym *f = &out->f[out->n++];

		while (j < nraw && raws[j].vaddr == raws[i].vaddr)
			j++;
		f->vaddr = raws[i].vaddr;
		f->names = calloc(j - i, sizeof(*f->names));
		if (!f->names) {
			r = -ENOMEM;
			goto out;
		}
		for (int m = i; m < j; m++) {
			int d = 0;

			/* The same name from two tables once (one table may rank it otherwise:
			 * a debug file's .symtab has libc's global names too). */
			while (d < k && strcmp(f->names[d], raws[m].name))
				d++;
			if (d < k)
				free(raws[m].name);
			else
				f->names[k++] = raws[m].name;
			raws[m].name = NULL;
			if (raws[m].size > f->size)
				f->size = raws[m].size;
			f->ifunc |= raws[m].ifunc;
		}
		f->nnames = k;
		i = j;
	}
out:
	for (int i = 0; i < nraw; i++)
		free(raws[i].name);
	free(raws);
	tp_elf_file_close(&f);
	if (r)
		fsyms_free(out);
	return r;
}

/* One entry of the tables read last: the agent engine's choice and set-up and the engine's
 * scan read the same objects, libc among them (11,000 symbols from its debug file, sorted:
 * a few ms a read). */
struct fsyms_cached {
	struct stat st;
	bool debug; /* tp_fsyms_read's */
	struct tp_fsyms fs;
	int refs;      /* tables handed out and not released */
	uint64_t used; /* the tick of its last read, for eviction; 0: a free entry */
};

static struct fsyms_cached fsyms_cache[FSYMS_CACHED];
static uint64_t fsyms_tick;

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

int tp_fsyms_read(const char *path, bool debug, struct tp_fsyms *out)
{
	struct fsyms_cached *c, *victim = NULL;
	struct stat st;
	int r;

	if (stat(path, &st))
		return fsyms_load(path, debug, out); /* its error, as the reader sees it */
	for (c = fsyms_cache; c < fsyms_cache + FSYMS_CACHED; c++) {
		/* by the file, not its name: /lib and /usr/lib are one directory */
		if (c->used && c->debug == debug && same_file(&c->st, &st)) {
			*out = c->fs;
			out->shared = c;
			c->refs++;
			c->used = ++fsyms_tick;
			return 0;
		}
		/* a free entry, else the one read longest ago */
		if (!c->refs && (!victim || c->used < victim->used))
			victim = c;
	}
	r = fsyms_load(path, debug, out);
	if (r || !victim)
		return r;
	fsyms_free(&victim->fs);
	victim->st = st;
	victim->debug = debug;
	victim->fs = *out;
	victim->refs = 1;
	victim->used = ++fsyms_tick;
	out->shared = victim;
	return 0;
}

void tp_fsyms_release(struct tp_fsyms *fs)
{
	struct fsyms_cached *c = fs->shared;

	if (c)
		c->refs--;
	else
		fsyms_free(fs);
	memset(fs, 0, sizeof(*fs));
}

static void fsyms_free(struct tp_fsyms *fs)
{
	for (int i = 0; i < fs->n; i++) {
		for (int k = 0; k < fs->f[i].nnames; k++)
			free((char *)fs->f[i].names[k]);
		free(fs->f[i].names);
	}
	free(fs->f);
	for (int i = 0; i < fs->nimports; i++)
		free((char *)fs->imports[i]);
	free(fs->imports);
	memset(fs, 0, sizeof(*fs));
}
