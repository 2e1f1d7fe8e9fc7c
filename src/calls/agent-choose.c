/* `tracepad calls` without --engine: the agent engine when it prints what the ptrace engine
 * would for these options and this program, as far as that can be known before tracing starts
 * (a launched program's file and the libraries it needs, -p's objects and threads now); the
 * ptrace engine otherwise. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/hooks-abi.h"
#include "base/log.h"
#include "base/paths.h"
#include "base/procfs.h"
#include "calls/agent-priv.h"
#include "elf/file.h"
#include "elf/symbols.h"

/* Hook sites kept free for what the agent engine adds to a selection: the stack walkers,
 * the loader's r_brk, IFUNC implementations. */
#define SPARE_SITES 32
#define OBJS_MAX 512

struct objs {
	char *path[OBJS_MAX];
	int n;
};

static int obj_add(void *arg, const char *path)
{
	struct objs *o = arg;

	for (int i = 0; i < o->n; i++)
		if (!strcmp(o->path[i], path))
			return 0;
	if (o->n == OBJS_MAX)
		return -E2BIG;
	o->path[o->n] = strdup(path);
	return o->path[o->n] ? (o->n++, 0) : -ENOMEM;
}

static int mapped_add(void *arg, const struct tp_maps_ent *e)
{
	return tp_maps_exec(e) && e->path_len && e->path[0] == '/' && !e->deleted
		   ? obj_add(arg, e->path)
		   : 0;
}

/* Threads of process @pid, or -1. */
static int threads_of(pid_t pid)
{
	char dir[64];
	DIR *d;
	int n = 0;

	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	d = opendir(dir);
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* -p's process: its file first, then the objects it has mapped code of now.  A reason to use
 * the ptrace engine, or NULL. */
static const char *objects_of(pid_t pid, struct objs *ob)
{
	char link[64], exe[PATH_MAX];
	struct tp_elf_info info;
	ssize_t n;
	int nt;

	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	n = readlink(link, exe, sizeof(exe) - 1);
	if (n <= 0)
		return "its file unread";
	exe[n] = 0;
	if (tp_elf_probe(exe, &info))
		return "its file not found (deleted?)";
	if (info.is_static)
		return "a static program";
	nt = threads_of(pid);
	/* one ring a thread: more would lose calls */
	if (nt < 0 || nt > RINGS)
		return "-p: more threads than the agent's rings";
	if (obj_add(ob, exe) || tp_maps_foreach(pid, mapped_add, ob))
		return "-p: its objects unread";
	return NULL;
}

/* The objects of the program: a launched one's file first, then the libraries it needs.  A
 * reason to use the ptrace engine, or NULL. */
static const char *objects(const struct tp_calls_opts *o, struct objs *ob)
{
	char exe[PATH_MAX];
	struct tp_elf_info info;

	if (o->pid)
		return objects_of(o->pid, ob);
	if (tp_path_find_program(o->argv[0], exe, sizeof(exe)))
		return "its file not found";
	if (tp_elf_probe(exe, &info))
		return "not an ELF file of this machine (a script?)";
	if (info.is_static)
		return "a static program";
	if (obj_add(ob, exe))
		return "out of memory";
	for (int i = 0; i < ob->n; i++)
		if (tp_elf_foreach_needed(ob->path[i], obj_add, ob) < 0)
			return "its libraries unread";
	return NULL;
}

struct pick {
	struct tp_select *sel, *csel;
	const char *const *imports; /* the program's */
	int nimports;
	unsigned n;
	const char *why;
	char sensitive[128]; /* a selected function whose return only the ptrace engine follows */
	bool dlopen;
};

static bool is_import(const struct pick *p, const char *name)
{
	for (int i = 0; i < p->nimports; i++)
		if (!strcmp(p->imports[i], name))
			return true;
	return false;
}

/* The functions of object @path that engine.c would select, counted. */
static void scan(struct pick *p, const char *path, const struct tp_fsyms *fs, bool main)
{
	bool libc = !strncmp(tp_select_base(path), "libc.so", 7);
	bool pats = tp_select_has_patterns(p->sel) || p->csel;

	for (int i = 0; i < fs->n; i++) {
		const struct tp_fsym *f = &fs->f[i];
		bool sel = false;

		for (int k = 0; k < f->nnames; k++) {
			const char *nm = f->names[k];
			bool dflt = main ? !tp_calls_crt_name(nm) : is_import(p, nm);
			char *dn = pats ? tp_calls_demangle(nm) : NULL;

			sel |= tp_select_match(p->sel, path, nm, dn, dflt) ||
			       (p->csel && tp_select_match(p->csel, path, nm, dn, false));
			free(dn);
			p->dlopen |= libc && !strcmp(nm, "dlopen");
		}
		p->n += sel;
		for (int k = 0; sel && !p->sensitive[0] && k < f->nnames; k++)
			if (tp_calls_caller_sensitive(f->names[k]))
				snprintf(p->sensitive, sizeof(p->sensitive), "%s", f->names[k]);
	}
}

static const char *selection(const struct tp_calls_opts *o, const struct objs *ob, struct pick *p)
{
	struct tp_fsyms main;
	char err[256];
	bool libc = false;

	/* copies: the session's patterns learn which of them matched (warnings at the end) */
	p->sel = tp_select_new(o->patterns, o->npatterns, err, sizeof(err));
	p->csel = o->ncallers ? tp_select_new(o->callers, o->ncallers, err, sizeof(err)) : NULL;
	if (!p->sel || (o->ncallers && !p->csel))
		return "its selection";
	if (tp_fsyms_read(ob->path[0], true, &main))
		return "its symbols unread";
	p->imports = main.imports;
	p->nimports = main.nimports;
	scan(p, ob->path[0], &main, true);
	for (int i = 1; i < ob->n; i++) {
		struct tp_fsyms fs;

		libc |= !strncmp(tp_select_base(ob->path[i]), "libc.so", 7);
		if (tp_fsyms_read(ob->path[i],
				  tp_select_wants_debug(p->sel, p->csel, ob->path[i], false), &fs))
			continue;
		scan(p, ob->path[i], &fs, false);
		tp_fsyms_release(&fs);
	}
	tp_fsyms_release(&main);
	if (!libc || !p->dlopen)
		return "no libc with dlopen (glibc 2.34 or later) to load the agent";
	/* dlopen, dlsym & co. pick their caller's object by the return address: the agent
	 * leaves it in place and cannot catch their return (= <return not followed>), the
	 * ptrace engine catches it at the return site */
	if (p->sensitive[0]) {
		snprintf(p->sensitive + strlen(p->sensitive),
			 sizeof(p->sensitive) - strlen(p->sensitive),
			 " selected: its return would not be followed");
		return p->sensitive;
	}
	if (p->n + SPARE_SITES > TP_HK_MAX_FUNCS)
		return "more functions selected than the agent has hook sites";
	return NULL;
}

bool tp_calls_agent_fits(const struct tp_calls_opts *o)
{
	struct objs ob = {.n = 0};
	struct pick p = {0};
	const char *why = !o->agent	? "the agent not found"
			  : o->syscalls ? "-S (the agent's loading changes the first system calls)"
			  : o->follow	? "-f (the programs the children run are unknown)"
			  : o->nplugins ? "--plugin"
			  : getenv("TRACEPAD_CALLS_SYNC")
			      ? "TRACEPAD_CALLS_SYNC (the ptrace engine's)"
			      : NULL;

	if (!why)
		why = objects(o, &ob);
	if (!why)
		why = selection(o, &ob, &p);
	if (why)
		tp_dbg("calls: the ptrace engine: %s", why);
	else
		tp_dbg("calls: the agent engine: %u functions selected", p.n);
	tp_select_free(p.sel);
	tp_select_free(p.csel);
	while (ob.n)
		free(ob.path[--ob.n]);
	return !why;
}
