/* The plugin registry: plugins built into tracepad and shared objects named by path, loaded
 * for a host (an engine such as `tracepad calls`), whose events it hands to every plugin. */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "plugins/plugins.h"

struct loaded {
	struct tracepad_plugin pl;
	void *dl; /* NULL: built in */
};

struct tp_plugins {
	const struct tracepad_host *host;
	struct loaded *v;
	int n;
};

typedef int (*init_fn)(const struct tracepad_host *, const char *, struct tracepad_plugin *);

static const struct {
	const char *name;
	init_fn init;
} builtin[] = {
    {"memory", tp_plugin_memory_init},
};

struct tp_plugins *tp_plugins_new(const struct tracepad_host *host)
{
	struct tp_plugins *ps = calloc(1, sizeof(*ps));

	if (!ps)
		return NULL;
	ps->host = host;
	return ps;
}

void tp_plugins_free(struct tp_plugins *ps)
{
	if (!ps)
		return;
	for (int i = 0; i < ps->n; i++) {
		if (ps->v[i].pl.fini)
			ps->v[i].pl.fini(ps->v[i].pl.priv);
		if (ps->v[i].dl)
			dlclose(ps->v[i].dl);
	}
	free(ps->v);
	free(ps);
}

int tp_plugins_count(const struct tp_plugins *ps)
{
	return ps ? ps->n : 0;
}

/* The init function of plugin @name: a path (dlopen'd into *@dl) or a built-in name. */
static int find_init(const char *name, init_fn *init, void **dl)
{
	if (!strchr(name, '/')) {
		for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++)
			if (!strcmp(builtin[i].name, name))
				*init = builtin[i].init;
		if (*init)
			return 0;
		tp_err("unknown plugin '%s' (built-in: memory; or a path to a shared object)",
		       name);
		return -ENOENT;
	}
	*dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!*dl) {
		tp_err("cannot load plugin %s: %s", name, dlerror());
		return -ENOENT;
	}
	*(void **)init = dlsym(*dl, "tracepad_plugin_init");
	if (!*init) {
		tp_err("plugin %s has no tracepad_plugin_init()", name);
		dlclose(*dl);
		*dl = NULL;
		return -ENOENT;
	}
	return 0;
}

int tp_plugins_load(struct tp_plugins *ps, const char *spec)
{
	struct loaded pl = {0}, *n;
	init_fn init = NULL;
	char *name, *args;
	int r;

	name = strdup(spec);
	if (!name)
		return -ENOMEM;
	args = strchr(name, ':');
	if (args)
		*args++ = 0;
	r = find_init(name, &init, &pl.dl);
	if (r)
		goto err_name;
	r = init(ps->host, args, &pl.pl);
	if (r) {
		tp_err("plugin %s: initialisation failed: %s", name, strerror(r < 0 ? -r : r));
		r = r < 0 ? r : -r;
		goto err_dl;
	}
	n = realloc(ps->v, (ps->n + 1) * sizeof(*n));
	if (!n) {
		tp_err("plugin %s: out of memory", name);
		r = -ENOMEM;
		goto err_fini;
	}
	ps->v = n;
	ps->v[ps->n++] = pl;
	free(name);
	return 0;

err_fini:
	if (pl.pl.fini)
		pl.pl.fini(pl.pl.priv);
err_dl:
	if (pl.dl)
		dlclose(pl.dl);
err_name:
	free(name);
	return r;
}

void tp_plugins_call(struct tp_plugins *ps, struct tracepad_call *c)
{
	for (int i = 0; ps && i < ps->n; i++)
		if (ps->v[i].pl.call)
			ps->v[i].pl.call(ps->v[i].pl.priv, c);
}

void tp_plugins_ret(struct tp_plugins *ps, struct tracepad_call *c)
{
	for (int i = 0; ps && i < ps->n; i++)
		if (ps->v[i].pl.ret)
			ps->v[i].pl.ret(ps->v[i].pl.priv, c);
}

void tp_plugins_process(struct tp_plugins *ps, int pid, enum tracepad_proc_event ev)
{
	for (int i = 0; ps && i < ps->n; i++)
		if (ps->v[i].pl.process)
			ps->v[i].pl.process(ps->v[i].pl.priv, pid, ev);
}

void tp_plugins_thread(struct tp_plugins *ps, int pid, int tid, enum tracepad_thread_event ev)
{
	for (int i = 0; ps && i < ps->n; i++)
		if (ps->v[i].pl.thread)
			ps->v[i].pl.thread(ps->v[i].pl.priv, pid, tid, ev);
}
