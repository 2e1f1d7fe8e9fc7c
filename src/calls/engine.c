/* The engine of `tracepad calls`: processes, their objects (followed through r_debug), the
 * selected functions' breakpoints, and what happens at each entry and return stop. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arch/arch.h"
#include "calls/engine.h"
#include "base/log.h"
#include "base/procfs.h"
#include "elf/file.h"

/* ---- small helpers ---- */

uint64_t tp_calls_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* realloc() of the array at *@pp to @size bytes that leaves it alone on failure. */
static int grow(void *pp, size_t size)
{
	void **p = pp;
	void *n = realloc(*p, size ? size : 1);

	if (!n)
		return -ENOMEM;
	*p = n;
	return 0;
}

/* Functions whose return is never hooked: they return twice, are entered by a jump, or read
 * their own return address. */
static bool no_return_hook(const char *name)
{
	static const char *const names[] = {
	    "_start",
	    "setjmp",
	    "_setjmp",
	    "__setjmp",
	    "sigsetjmp",
	    "__sigsetjmp",
	    "getcontext",
	    "__getcontext",
	    "swapcontext",
	    "vfork",
	    "__vfork",
	    "__restore_rt",
	    "_dl_start_user",
	    "mcount",
	    "_mcount",
	    "__fentry__",
	    "savectx",
	    "__libc_vfork",
	    "__sigsetjmp_cancel",
	};

	if (!strncmp(name, "_dl_runtime_resolve", 19) || !strncmp(name, "_dl_runtime_profile", 19))
		return true;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(name, names[i]))
			return true;
	return false;
}

/* Functions that read their own return address to find their caller's object (glibc's
 * dl* family): it stays in place and their returns are caught at the return site.  Others
 * that read it are found by their code (tp_bp_insert()). */
bool tp_calls_caller_sensitive(const char *name)
{
	static const char *const names[] = {"dlopen", "dlmopen", "dlsym", "dlvsym"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(name, names[i]))
			return true;
	return false;
}

/* Start-up and profiling code of a program that is never part of the default selection. */
bool tp_calls_crt_name(const char *name)
{
	static const char *const names[] = {
	    "_start",
	    "_init",
	    "_fini",
	    "deregister_tm_clones",
	    "register_tm_clones",
	    "__do_global_dtors_aux",
	    "frame_dummy",
	    "__libc_csu_init",
	    "__libc_csu_fini",
	    "_dl_relocate_static_pie",
	    "mcount",
	    "_mcount",
	    "__fentry__",
	    "__gmon_start__",
	    "__cxa_finalize",
	};

	if (!strncmp(name, "__x86.get_pc_thunk", 18))
		return true;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(name, names[i]))
			return true;
	return false;
}

/* Functions of the unwinders that walk a stack and so must find real return addresses. */
static enum fkind internal_kind(const char *name)
{
	if (!strcmp(name, "_Unwind_RaiseException") || !strcmp(name, "_Unwind_Resume_or_Rethrow") ||
	    !strcmp(name, "_Unwind_ForcedUnwind"))
		return F_UNWIND;
	if (!strcmp(name, "_Unwind_Backtrace"))
		return F_BACKTRACE;
	if (!strcmp(name, "__cxa_begin_catch"))
		return F_CATCH;
	if (!strcmp(name, "sigaction") || !strcmp(name, "__sigaction"))
		return F_SIGACTION;
	if (!strcmp(name, "execve") || !strcmp(name, "execveat") || !strcmp(name, "fexecve"))
		return F_EXEC;
	return F_TRACED;
}

/* ---- functions of an image ---- */

struct func *tp_calls_func_find(struct image *im, uint64_t addr)
{
	uint64_t *v = tp_hash_get(&im->funcs, addr);

	return v ? (struct func *)(uintptr_t)*v : NULL;
}

static int func_put(struct image *im, struct func *f)
{
	return tp_hash_put(&im->funcs, f->addr, (uintptr_t)f);
}

static void func_free(struct func *f)
{
	free(f->name);
	free(f);
}

struct funcs_walk {
	struct object *obj;
	struct tp_hash *to;
	int err;
};

static int keep_func(void *arg, uint64_t addr, uint64_t *v)
{
	struct funcs_walk *w = arg;
	struct func *f = (struct func *)(uintptr_t)*v;

	if (f->obj != w->obj && tp_hash_put(w->to, addr, *v))
		w->err = -ENOMEM;
	return w->err;
}

static int free_func_of(void *arg, uint64_t addr, uint64_t *v)
{
	struct func *f = (struct func *)(uintptr_t)*v;

	(void)addr;
	if (!arg || f->obj == arg)
		func_free(f);
	return 0;
}

/* Drop the functions of an unmapped object (the table is rebuilt without them).  Returns 0
 * or -ENOMEM (nothing dropped). */
static int funcs_drop_object(struct image *im, struct object *o)
{
	struct tp_hash kept = {0};
	struct funcs_walk w = {o, &kept, 0};

	tp_hash_foreach(&im->funcs, keep_func, &w);
	if (w.err) {
		tp_hash_release(&kept);
		return w.err;
	}
	tp_hash_foreach(&im->funcs, free_func_of, o);
	tp_hash_release(&im->funcs);
	im->funcs = kept;
	return 0;
}

/* ---- objects ---- */

struct mapline {
	uint64_t start, end, offset;
	bool x;
	char *path;
};

struct read_maps {
	struct mapline *v;
	int n;
};

static int read_maps_one(void *arg, const struct tp_maps_ent *e)
{
	struct read_maps *rm = arg;

	if (e->path[0] != '/' || e->deleted)
		return 0;
	char *path;

	if (grow(&rm->v, (rm->n + 1) * sizeof(*rm->v)) || !(path = strdup(e->path)))
		return -ENOMEM;
	rm->v[rm->n++] = (struct mapline){e->start, e->end, e->offset, tp_maps_exec(e), path};
	return 0;
}

static int read_maps(pid_t pid, struct mapline **out, int *n)
{
	struct read_maps rm = {0};
	int err = tp_maps_foreach(pid, read_maps_one, &rm);

	if (err) {
		while (rm.n)
			free(rm.v[--rm.n].path);
		free(rm.v);
		return err;
	}
	*out = rm.v;
	*n = rm.n;
	return 0;
}

static struct object *object_find(struct image *im, const char *path)
{
	for (int i = 0; i < im->nobjs; i++)
		if (!strcmp(im->objs[i]->path, path))
			return im->objs[i];
	return NULL;
}

static void object_free(struct object *o)
{
	if (!o)
		return;
	free(o->path);
	free(o);
}

/* Insert the breakpoint of one function; @tid is a stopped task of the process. */
int tp_calls_func_add(struct session *s, struct image *im, pid_t tid, struct object *o,
		      uint64_t addr, const char *name, enum fkind kind)
{
	struct func *f = tp_calls_func_find(im, addr);
	unsigned flags = 0;
	int r;

	if (f)
		return -EEXIST;
	if (kind == F_TRACED || kind == F_RESOLVER || kind == F_SIGACTION || kind == F_EXEC ||
	    kind == F_EXIT)
		flags = no_return_hook(name) || addr == im->entry ? 0
			: tp_calls_caller_sensitive(name)	  ? TP_BP_RETURN | TP_BP_RETURN_SITE
								  : TP_BP_RETURN;
	/* --engine agent: the agent hooks the functions itself (agent.c) */
	r = s->agent ? 0 : tp_bp_insert(im->bps, tid, addr, flags);
	if (r && r != -EEXIST) {
		if (kind == F_TRACED && !s->insert_err) {
			s->insert_err = r;
			snprintf(s->insert_what, sizeof(s->insert_what), "%s:%s", o->base, name);
		}
		s->insert_failed += kind == F_TRACED;
		tp_dbg("calls: no breakpoint at %s:%s (0x%" PRIx64 "): %s", o->base, name, addr,
		       strerror(-r));
		return r;
	}
	/* Without its entry, the breakpoint stays in the table of src/bp: taken out when the
	 * error ends the tracing. */
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->addr = addr;
	f->kind = kind;
	f->hooked = flags & TP_BP_RETURN;
	/* Shown as the source spells it unless --demangle=no: the only name kept. */
	f->name = s->o->mangled ? NULL : tp_calls_demangle(name);
	if (!f->name)
		f->name = strdup(name);
	f->shown = kind == F_TRACED;
	f->obj = o;
	if (!f->name || func_put(im, f)) {
		free(f->name);
		free(f);
		return -ENOMEM;
	}
	if (kind == F_TRACED)
		s->ntraced++;
	return 0;
}

static bool is_import(struct image *im, const char *name)
{
	for (int i = 0; i < im->nimports; i++)
		if (!strcmp(im->imports[i], name))
			return true;
	return false;
}

/* The name a function is traced under, or NULL when not selected; *@target: it is one of
 * -C's functions. */
static const char *selected_name(struct session *s, struct image *im, struct object *o,
				 const struct tp_fsym *fs, bool *target)
{
	const char *sel = NULL;
	bool pats = tp_select_has_patterns(s->sel) || s->csel;

	/* Every name is matched: each pattern learns whether it matched a function. */
	for (int k = 0; k < fs->nnames; k++) {
		const char *n = fs->names[k];
		bool dflt = o->main ? !tp_calls_crt_name(n) : is_import(im, n);
		/* C++ names are matched demangled too (only _Z... ones are demangled). */
		char *dn = pats ? tp_calls_demangle(n) : NULL;
		bool c = s->csel && tp_select_match(s->csel, o->path, n, dn, false);

		if ((tp_select_match(s->sel, o->path, n, dn, dflt) || c) && !sel)
			sel = n;
		*target |= c;
		free(dn);
	}
	return sel;
}

/* Each name of @fs for the deselections that name it (its object is not scanned). */
static void note_names(struct session *s, struct object *o, const struct tp_fsym *fs)
{
	if (!tp_select_wants_notes(s->sel))
		return;
	for (int k = 0; k < fs->nnames; k++) {
		char *dn = tp_calls_demangle(fs->names[k]);

		tp_select_note(s->sel, o->path, fs->names[k], dn);
		free(dn);
	}
}

/* Read the functions of a newly mapped object and plant its breakpoints.  Returns 0 (an
 * object or function that cannot be traced is skipped) or -ENOMEM. */
static int object_scan(struct session *s, struct image *im, pid_t tid, struct object *o)
{
	struct tp_fsyms fs;
	bool want = tp_select_may_match(s->sel, o->path, o->main || im->nimports > 0) ||
		    (s->csel && tp_select_may_match(s->csel, o->path, false));
	int r;

	o->debug_syms = tp_select_wants_debug(s->sel, s->csel, o->path, o->main);
	r = tp_fsyms_read(o->path, o->debug_syms, &fs);
	if (r) {
		tp_dbg("calls: %s: %s", o->path, strerror(-r));
		return 0;
	}
	for (int i = 0; o->main && i < fs.nimports; i++) {
		char *imp = strdup(fs.imports[i]);

		if (!imp || grow(&im->imports, (im->nimports + 1) * sizeof(char *))) {
			free(imp);
			r = -ENOMEM;
			goto out;
		}
		im->imports[im->nimports++] = imp;
	}
	for (int i = 0; i < fs.n; i++) {
		const struct tp_fsym *f = &fs.f[i];
		uint64_t addr = f->vaddr + o->bias;
		enum fkind kind = F_TRACED;
		const char *name = NULL;
		bool shown = false, target = false;

		/* GCC's .cold parts are jumped to, not called: [rsp] is no return address. */
		if (addr < o->lo || addr >= o->hi || strstr(f->names[0], ".cold"))
			continue;
		for (int k = 0; k < f->nnames && kind == F_TRACED; k++)
			if ((kind = internal_kind(f->names[k])) != F_TRACED)
				name = f->names[k];
		for (int k = 0; k < f->nnames && kind == F_TRACED && s->nexit_calls; k++)
			if (o == im->libc && !strcmp(f->names[k], "_exit")) {
				kind = F_EXIT;
				name = f->names[k];
			}
		if ((kind == F_TRACED || kind == F_SIGACTION || kind == F_EXEC || kind == F_EXIT) &&
		    want) {
			const char *sel = selected_name(s, im, o, f, &target);

			if (sel && kind != F_TRACED)
				shown = true;
			if (sel)
				name = sel;
		} else if (!want) {
			/* Not selectable here, but a deselection may name it (the warning). */
			note_names(s, o, f);
		}
		if (!name)
			continue;
		if (kind == F_TRACED && f->ifunc)
			kind = F_RESOLVER;
		r = tp_calls_func_add(s, im, tid, o, addr, name, kind);
		if (r == -ENOMEM)
			goto out;
		if (!r && shown)
			tp_calls_func_find(im, addr)->shown = true;
		if (!r && target)
			tp_calls_func_find(im, addr)->target = true;
		if (!r && kind == F_RESOLVER && im->live) {
			/* The loader resolved it already (BIND_NOW, or attached late): ask the
			 * resolver, which answers as it did to the loader. */
			uint64_t args[6] = {0}, impl = 0;

			if (!tp_bp_call(im->bps, tid, addr, args, &impl))
				tp_calls_resolved(s, im, tid, tp_calls_func_find(im, addr), impl);
		}
	}
	r = 0;
out:
	tp_fsyms_release(&fs);
	return r;
}

/* The dynamic loader: find r_debug; plant the breakpoint at r_brk, or watch for ld.so to
 * set it (a launched program at its first instruction). */
static void watch_loader(struct session *s, struct image *im, pid_t tid, struct object *o)
{
	uint64_t rd, brk = 0;

	if (im->rdebug || tp_elf_lookup(o->path, "_r_debug", &rd, NULL))
		return;
	im->rdebug = rd + o->bias;
	im->ldso = o;
	/* Before ld.so has run, r_brk is still 0; it will be _dl_debug_state, which ld.so
	 * exports, so the breakpoint goes there at once.  The watchpoint on r_brk is only for
	 * a loader that does not export it: some virtual machines never fire debug registers. */
	if (tp_proc_read(im->pid, im->rdebug + TP_ARCH_R_DEBUG_BRK, &brk, 8) != 8 || !brk) {
		brk = 0;
		if (!tp_elf_lookup(o->path, "_dl_debug_state", &brk, NULL))
			brk += o->bias;
	}
	if (brk) {
		im->rbrk = brk;
		tp_calls_func_add(s, im, tid, o, brk, "_dl_debug_state", F_RBRK);
	} else if (!tp_proc_watch_write(tid, im->rdebug + TP_ARCH_R_DEBUG_BRK)) {
		im->watch_tid = tid;
	}
}

/* Compare the objects mapped now with those known: scan new ones, forget unmapped ones.
 * Returns 0 or -errno (-ENOMEM: the objects known may be incomplete). */
int tp_calls_objects_sync(struct session *s, struct image *im, pid_t tid)
{
	struct mapline *m = NULL;
	int n = 0, r;

	r = read_maps(im->pid, &m, &n);
	if (r)
		return r;
	for (int i = 0; i < im->nobjs; i++)
		im->objs[i]->seen = false;
	int first_new = im->nobjs;

	for (int i = 0; i < n; i++) {
		struct object *o;
		struct tp_elf_info info;
		uint64_t base = UINT64_MAX, lo = UINT64_MAX, hi = 0, bias;

		if (!m[i].x)
			continue;
		o = object_find(im, m[i].path);
		if (o) {
			o->seen = true;
			continue;
		}
		for (int k = 0; k < n; k++) {
			if (strcmp(m[k].path, m[i].path))
				continue;
			if (m[k].offset == 0 && m[k].start < base)
				base = m[k].start;
			if (m[k].x && m[k].start < lo)
				lo = m[k].start;
			if (m[k].x && m[k].end > hi)
				hi = m[k].end;
		}
		if (base == UINT64_MAX || tp_elf_probe(m[i].path, &info) ||
		    tp_elf_map_bias(m[i].path, base, 0, &bias))
			continue;
		o = calloc(1, sizeof(*o));
		if (o)
			o->path = strdup(m[i].path);
		if (!o || !o->path || grow(&im->objs, (im->nobjs + 1) * sizeof(*im->objs))) {
			object_free(o);
			r = -ENOMEM;
			goto out;
		}
		o->base = tp_select_base(o->path);
		o->lo = lo;
		o->hi = hi;
		o->bias = bias;
		o->main = !strcmp(o->path, im->exe);
		o->seen = true;
		im->objs[im->nobjs++] = o;
		if (o->main) {
			im->is_static = info.is_static;
			im->entry = info.entry + o->bias;
		}
		if (!strncmp(o->base, "libc.so", 7) || (o->main && info.is_static))
			im->libc = o;
	}
	/* The program first: its imports are the default selection in the other objects. */
	for (int i = first_new; i < im->nobjs && !r; i++)
		if (im->objs[i]->main)
			r = object_scan(s, im, tid, im->objs[i]);
	for (int i = first_new; i < im->nobjs && !r; i++) {
		if (im->objs[i]->main)
			continue;
		if (!strncmp(im->objs[i]->base, "ld-", 3))
			watch_loader(s, im, tid, im->objs[i]);
		r = object_scan(s, im, tid, im->objs[i]);
	}
	for (int i = 0; i < im->nobjs && !r;) {
		struct object *o = im->objs[i];

		if (o->seen) {
			i++;
			continue;
		}
		r = funcs_drop_object(im, o);
		if (r)
			break;
		tp_bp_forget(im->bps, o->lo, o->hi);
		if (im->libc == o) {
			im->libc = NULL;
			im->errno_state = 0;
		}
		object_free(o);
		im->objs[i] = im->objs[--im->nobjs];
	}
	if (im->uw && !r)
		tp_unwinder_refresh(im->uw);
out:
	for (int i = 0; i < n; i++)
		free(m[i].path);
	free(m);
	return r;
}

/* ---- images ---- */

struct image *tp_calls_image_new(struct session *s, pid_t pid, pid_t tid, bool live)
{
	struct image *im;
	char link[64];
	ssize_t n;
	int r;

	if (grow(&s->imgs, (s->nimgs + 1) * sizeof(*s->imgs)))
		goto err_nomem;
	im = calloc(1, sizeof(*im));
	if (!im)
		goto err_nomem;
	im->pid = pid;
	snprintf(link, sizeof(link), "/proc/%d/exe", pid);
	n = readlink(link, im->exe, sizeof(im->exe) - 1);
	im->exe[n > 0 ? n : 0] = 0;
	im->live = live;
	im->started = live;
	im->bps = tp_bps_new(s->p, pid);
	if (!im->bps)
		goto err_free;
	if (s->async)
		tp_bps_set_async(im->bps, tp_calls_async_return, s);
	/* Known from here on, also when what follows fails: its breakpoints are taken out
	 * with the others'. */
	s->imgs[s->nimgs++] = im;
	r = tp_calls_objects_sync(s, im, tid);
	im->live = false;
	if (r == -ENOMEM)
		goto err_nomem;
	return im;

err_free:
	free(im);
err_nomem:
	errno = ENOMEM;
	return NULL;
}

/* A fork child: the same objects, functions and breakpoints, in its copy of the memory. */
struct clone_walk {
	struct image *parent, *im;
};

/* A copy of a parent's function for the child, pointing at the child's copy of its object. */
static int clone_func(void *arg, uint64_t addr, uint64_t *v)
{
	struct clone_walk *w = arg;
	struct func *f = (struct func *)(uintptr_t)*v, *c = malloc(sizeof(*c));
	int oi = 0;

	(void)addr;
	if (c) {
		*c = *f;
		c->name = strdup(f->name);
	}
	if (!c || !c->name || func_put(w->im, c)) {
		if (c)
			free(c->name);
		free(c);
		return -ENOMEM;
	}
	while (w->parent->objs[oi] != f->obj)
		oi++;
	c->obj = w->im->objs[oi];
	return 0;
}

struct image *tp_calls_image_fork(struct session *s, struct image *parent, pid_t pid)
{
	struct clone_walk w;
	struct image *im;

	if (grow(&s->imgs, (s->nimgs + 1) * sizeof(*s->imgs)))
		goto err_nomem;
	im = calloc(1, sizeof(*im));
	if (!im)
		goto err_nomem;
	*im = *parent;
	im->pid = pid;
	im->uw = NULL;
	im->watch_tid = 0;
	im->objs = NULL;
	im->nobjs = 0;
	im->imports = NULL;
	im->nimports = 0;
	im->funcs = (struct tp_hash){0};
	im->libc = im->ldso = NULL;
	im->bps = tp_bps_clone(parent->bps, pid);
	if (!im->bps)
		goto err_free;
	/* Known from here on (see tp_calls_image_new()); filled as far as memory allows. */
	s->imgs[s->nimgs++] = im;
	if (grow(&im->objs, parent->nobjs * sizeof(*im->objs)) ||
	    grow(&im->imports, parent->nimports * sizeof(char *)))
		goto err_nomem;
	for (int i = 0; i < parent->nobjs; i++) {
		struct object *o = malloc(sizeof(*o));

		if (o) {
			*o = *parent->objs[i];
			o->path = strdup(o->path);
		}
		if (!o || !o->path) {
			free(o);
			goto err_nomem;
		}
		o->base = tp_select_base(o->path);
		im->objs[im->nobjs++] = o;
		if (parent->libc == parent->objs[i])
			im->libc = o;
		if (parent->ldso == parent->objs[i])
			im->ldso = o;
	}
	for (int i = 0; i < parent->nimports; i++) {
		im->imports[i] = strdup(parent->imports[i]);
		if (!im->imports[i])
			goto err_nomem;
		im->nimports++;
	}
	w.parent = parent;
	w.im = im;
	if (tp_hash_foreach(&parent->funcs, clone_func, &w))
		goto err_nomem;
	return im;

err_free:
	free(im);
err_nomem:
	errno = ENOMEM;
	return NULL;
}

/* Free what tracepad holds of an image; the process's memory is not touched. */
void tp_calls_image_free(struct session *s, struct image *im)
{
	if (!im)
		return;
	for (int i = 0; i < s->nimgs; i++)
		if (s->imgs[i] == im) {
			s->imgs[i] = s->imgs[--s->nimgs];
			break;
		}
	tp_hash_foreach(&im->funcs, free_func_of, NULL);
	tp_hash_release(&im->funcs);
	for (int i = 0; i < im->nobjs; i++)
		object_free(im->objs[i]);
	free(im->objs);
	for (int i = 0; i < im->nimports; i++)
		free(im->imports[i]);
	free(im->imports);
	tp_unwinder_free(im->uw);
	tp_bps_free(im->bps);
	free(im);
}

struct image *tp_calls_image_of(struct session *s, pid_t pid)
{
	for (int i = 0; i < s->nimgs; i++)
		if (s->imgs[i]->pid == pid)
			return s->imgs[i];
	return NULL;
}

/* r_brk was written (the watchpoint fired): plant the breakpoint there now. */
int tp_calls_watch_hit(struct session *s, struct image *im, pid_t tid)
{
	uint64_t brk = 0;

	tp_proc_watch_clear(tid);
	im->watch_tid = 0;
	if (tp_proc_read(im->pid, im->rdebug + TP_ARCH_R_DEBUG_BRK, &brk, 8) != 8 || !brk ||
	    !im->ldso)
		return -EIO;
	im->rbrk = brk;
	return tp_calls_func_add(s, im, tid, im->ldso, brk, "_dl_debug_state", F_RBRK);
}

struct object *tp_calls_object_at(struct image *im, uint64_t addr)
{
	for (int i = 0; i < im->nobjs; i++)
		if (addr >= im->objs[i]->lo && addr < im->objs[i]->hi)
			return im->objs[i];
	return NULL;
}

/* An IFUNC resolver returned the implementation: trace that under the selected name. */
void tp_calls_resolved(struct session *s, struct image *im, pid_t tid, struct func *resolver,
		       uint64_t impl)
{
	struct object *o = tp_calls_object_at(im, impl);

	struct func *f;

	if (!o || tp_calls_func_find(im, impl))
		return;
	tp_calls_func_add(s, im, tid, resolver->obj, impl, resolver->name, F_TRACED);
	f = tp_calls_func_find(im, impl);
	if (f)
		f->ifunc_impl = true;
}
