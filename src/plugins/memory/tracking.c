/* The built-in `memory` plugin of `tracepad calls`: follows libc's allocator calls and, when a
 * process exits, sorts the blocks it still holds as valgrind's memcheck does (definitely,
 * indirectly and possibly lost, still reachable), reported by allocation backtrace
 * (report.c).  This half: the blocks and sites of each process, the plugin's callbacks. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/user.h>
#include <unistd.h>

#include "base/log.h"
#include "plugins/memory/memory-priv.h"

/* c->user of an allocator call nested in another one. */
static char nested_call;

static enum mem_fn fn_of(const char *name)
{
	size_t len;

	if (!name)
		return FN_NONE;
	len = strcspn(name, "@"); /* "realloc@@GLIBC_2.2.5" */
	for (size_t i = 0; i < sizeof(fn_names) / sizeof(fn_names[0]); i++)
		if (strlen(fn_names[i].name) == len && !strncmp(fn_names[i].name, name, len))
			return fn_names[i].fn;
	return FN_NONE;
}

/* --- the live blocks of one process --- */

static struct block *blocks_find(const struct block_table *t, uint64_t addr)
{
	uint64_t *i = tp_hash_get(&t->index, addr);

	return i ? &t->pool[*i] : NULL;
}

static int blocks_add(struct block_table *t, uint64_t addr, uint64_t size, uint32_t site)
{
	struct block *b = blocks_find(t, addr);
	uint64_t i;

	if (b) { /* its free() escaped us: the new block replaces it */
		b->size = size;
		b->site = site;
		return 0;
	}
	if (t->free_head) {
		i = t->free_head - 1;
	} else {
		if (t->npool == t->cap) {
			size_t cap = t->cap ? t->cap * 2 : 1024;
			struct block *pool = realloc(t->pool, cap * sizeof(*pool));

			if (!pool)
				return -ENOMEM;
			t->pool = pool;
			t->cap = cap;
		}
		i = t->npool;
	}
	if (tp_hash_put(&t->index, addr, i))
		return -ENOMEM;
	if (t->free_head)
		t->free_head = t->pool[i].size;
	else
		t->npool++;
	t->pool[i] = (struct block){addr, size, site};
	t->used++;
	return 0;
}

static bool blocks_drop(struct block_table *t, uint64_t addr)
{
	uint64_t *v = tp_hash_get(&t->index, addr), i;

	if (!v)
		return false;
	i = *v;
	tp_hash_del(&t->index, addr);
	t->pool[i] = (struct block){.addr = 0, .size = t->free_head};
	t->free_head = i + 1;
	t->used--;
	return true;
}

static void blocks_release(struct block_table *t)
{
	tp_hash_release(&t->index);
	free(t->pool);
	memset(t, 0, sizeof(*t));
}

/* --- allocation sites --- */

struct site_key {
	int pid;
	unsigned n;
	const uint64_t *pcs;
};

static uint64_t site_hash(const struct site_key *k)
{
	uint64_t h = tp_hash_mix((uint64_t)k->pid + k->n);

	for (unsigned i = 0; i < k->n; i++)
		h = tp_hash_mix(h ^ k->pcs[i]);
	return h;
}

static bool site_is(void *arg, uint64_t i, const void *key)
{
	const struct site *s = ((struct mem *)arg)->sites[i];
	const struct site_key *k = key;

	return s->pid == k->pid && s->n == k->n && !memcmp(s->pcs, k->pcs, k->n * sizeof(*k->pcs));
}

/* The index of backtrace @pcs in process @pid, added if new; 0 when out of memory. */
static uint32_t site_intern(struct mem *m, int pid, const uint64_t *pcs, unsigned n)
{
	struct site_key k = {pid, n, pcs};
	uint64_t slot, *i = tp_hash_get_by(&m->site_index, site_hash(&k), &k, site_is, m, &slot);
	struct site *s;

	if (i)
		return (uint32_t)*i;
	if (m->nsites == m->sites_cap) {
		size_t cap = m->sites_cap * 2;
		struct site **v = realloc(m->sites, cap * sizeof(*v));

		if (!v)
			goto err_nomem;
		m->sites = v;
		m->sites_cap = cap;
	}
	s = malloc(sizeof(*s) + n * sizeof(*pcs));
	if (!s)
		goto err_nomem;
	s->pid = pid;
	s->n = n;
	memcpy(s->pcs, pcs, n * sizeof(*pcs));
	if (tp_hash_put(&m->site_index, slot, m->nsites)) {
		free(s);
		goto err_nomem;
	}
	m->sites[m->nsites] = s;
	return m->nsites++;

err_nomem:
	m->lost_track = true;
	return 0;
}

/* --- processes and threads --- */

static struct mem_proc *proc_find(struct mem *m, int pid)
{
	for (struct mem_proc *p = m->procs; p; p = p->next)
		if (p->pid == pid)
			return p;
	return NULL;
}

static struct mem_proc *proc_get(struct mem *m, int pid)
{
	struct mem_proc *p = proc_find(m, pid);

	if (p)
		return p;
	p = calloc(1, sizeof(*p));
	if (!p) {
		m->lost_track = true;
		return NULL;
	}
	p->pid = pid;
	p->next = m->procs;
	m->procs = p;
	return p;
}

static void proc_drop(struct mem *m, int pid)
{
	for (struct mem_proc **pp = &m->procs; *pp; pp = &(*pp)->next) {
		struct mem_proc *p = *pp;

		if (p->pid != pid)
			continue;
		*pp = p->next;
		blocks_release(&p->blocks);
		free(p->xregs);
		free(p);
		return;
	}
}

static struct mem_thread *thread_find(struct mem *m, int tid)
{
	if (m->last && m->last->tid == tid)
		return m->last;
	for (struct mem_thread *t = m->threads; t; t = t->next)
		if (t->tid == tid)
			return m->last = t;
	return NULL;
}

static void threads_drop(struct mem *m, int pid, int tid)
{
	struct mem_thread **tp = &m->threads;

	while (*tp) {
		struct mem_thread *t = *tp;

		if (t->pid == pid && (tid < 0 || t->tid == tid)) {
			*tp = t->next;
			if (m->last == t)
				m->last = NULL;
			free(t);
		} else {
			tp = &t->next;
		}
	}
}

/* --- the calls --- */

/* fn_of(@name), remembered by the name's address (one compare instead of ten). */
static enum mem_fn fn_known(struct mem *m, const char *name)
{
	unsigned i = (unsigned)(tp_hash_mix((uintptr_t)name) % 16);
	enum mem_fn fn;

	if (name && m->fns[i].name == name)
		for (size_t k = 0; m->fns[i].text[k] == name[k]; k++) /* inline: a few bytes */
			if (!name[k])
				return m->fns[i].fn;
	fn = fn_of(name);
	if (name && strlen(name) < sizeof(m->fns[i].text)) {
		m->fns[i].name = name;
		strcpy(m->fns[i].text, name);
		m->fns[i].fn = fn;
	}
	return fn;
}

static void mem_call(void *priv, struct tracepad_call *c)
{
	struct mem *m = priv;
	enum mem_fn fn = fn_known(m, c->function);
	struct mem_thread *t;
	struct mem_proc *p;

	if (fn == FN_NONE)
		return;
	t = thread_find(m, c->tid);
	if (t && t->pid != c->pid) { /* a tid reused by another process */
		threads_drop(m, t->pid, t->tid);
		t = NULL;
	}
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t) {
			m->lost_track = true;
			return;
		}
		t->pid = c->pid;
		t->tid = c->tid;
		t->next = m->threads;
		m->threads = t;
	}
	/* Inside another allocator call of this thread: glibc's own business (realloc(NULL, n)
	 * calls malloc), counted once.  At that call's depth or above, it was left without
	 * returning (longjmp out of a signal handler) and is over. */
	if (t->busy && c->depth > t->depth) {
		c->user = &nested_call;
		return;
	}
	/* Threads that exited before this call are gone for good: only those that exit with
	 * the process keep their registers for the leak check. */
	p = proc_find(m, c->pid);
	if (p) {
		p->nxregs = 0;
		p->last_exit_tid = 0;
	}
	t->busy = true;
	t->depth = c->depth;
	t->fn = fn;
	memcpy(t->args, c->args, sizeof(t->args));
	t->site = 0;
	if (fn != FN_FREE && m->bt_depth && m->h.backtrace) {
		uint64_t pcs[BT_MAX];
		int n = m->h.backtrace(m->h.ctx, c->tid, pcs, m->bt_depth);

		if (n > 0)
			t->site = site_intern(m, c->pid, pcs, n);
	}
	c->user = t;
}

static void record_alloc(struct mem *m, struct mem_proc *p, uint64_t addr, uint64_t size,
			 uint32_t site)
{
	if (!addr)
		return;
	p->allocs++;
	p->bytes += size;
	if (blocks_add(&p->blocks, addr, size, site))
		m->lost_track = true;
}

/* Only frees of blocks seen allocated count, as memcheck's do: glibc frees memory it got
 * without malloc (a thread's tcache, at its exit), which memcheck never sees at all. */
static void record_free(struct mem_proc *p, uint64_t addr)
{
	if (addr && blocks_drop(&p->blocks, addr))
		p->frees++;
}

static void mem_ret(void *priv, struct tracepad_call *c)
{
	struct mem *m = priv;
	struct mem_thread *t = thread_find(m, c->tid);
	struct mem_proc *p;
	uint64_t size, addr = c->retval, old, page;

	if (!t || c->user != t || !t->busy)
		return;
	t->busy = false;
	p = proc_get(m, c->pid);
	if (!p)
		return;
	switch (t->fn) {
	case FN_MALLOC:
	case FN_VALLOC:
		record_alloc(m, p, addr, t->args[0], t->site);
		break;
	case FN_PVALLOC:
		page = (uint64_t)sysconf(_SC_PAGESIZE);
		size = t->args[0] ? (t->args[0] + page - 1) & ~(uint64_t)(page - 1) : page;
		record_alloc(m, p, addr, size, t->site);
		break;
	case FN_CALLOC:
		if (!__builtin_mul_overflow(t->args[0], t->args[1], &size))
			record_alloc(m, p, addr, size, t->site);
		break;
	case FN_MEMALIGN:
		record_alloc(m, p, addr, t->args[1], t->site);
		break;
	case FN_POSIX_MEMALIGN:
		if ((int)c->retval != 0)
			break;
		if (m->h.read(m->h.ctx, c->pid, t->args[0], &addr, sizeof(addr)) != sizeof(addr)) {
			m->lost_track = true;
			break;
		}
		record_alloc(m, p, addr, t->args[2], t->site);
		break;
	case FN_REALLOC:
	case FN_REALLOCARRAY:
		old = t->args[0];
		if (t->fn == FN_REALLOC)
			size = t->args[1];
		else if (__builtin_mul_overflow(t->args[1], t->args[2], &size))
			break; /* ENOMEM, the old block stays */
		if (addr) {
			record_free(p, old);
			record_alloc(m, p, addr, size, t->site);
		} else if (!size) {
			record_free(p, old); /* glibc frees on realloc(p, 0) */
		}
		break;
	case FN_FREE:
		record_free(p, t->args[0]);
		break;
	case FN_NONE:
		break;
	}
}

/* --- the leak check --- */

static void mem_process(void *priv, int pid, enum tracepad_proc_event ev)
{
	struct mem *m = priv;
	struct mem_proc *p;
	int err;

	switch (ev) {
	case TRACEPAD_PROC_START:
		/* A new image, or a child: it holds none of the blocks we know of. */
		proc_drop(m, pid);
		threads_drop(m, pid, -1);
		proc_get(m, pid);
		break;
	case TRACEPAD_PROC_EXIT:
	case TRACEPAD_PROC_DETACH:
		/* At detach (Ctrl-C, --duration, -p): what the blocks allocated while traced
		 * have become so far, every thread still stopped. */
		p = proc_find(m, pid);
		if (!p)
			break;
		p->detached = ev == TRACEPAD_PROC_DETACH;
		err = tp_mem_leak_check(m, p);
		if (err)
			tp_warn("memory: leak check of pid %d failed: %s", pid, strerror(-err));
		proc_drop(m, pid);
		threads_drop(m, pid, -1);
		break;
	}
}

static void mem_thread(void *priv, int pid, int tid, enum tracepad_thread_event ev)
{
	struct mem *m = priv;
	struct mem_proc *p = proc_find(m, pid);

	if (ev != TRACEPAD_THREAD_EXIT)
		return;
	threads_drop(m, pid, tid);
	if (!p)
		return;
	p->last_exit_tid = tid;
	if (!m->h.regs)
		return;
	if (p->nxregs == p->xregs_cap) {
		size_t cap = p->xregs_cap ? p->xregs_cap * 2 : 8;
		struct exit_regs *v = realloc(p->xregs, cap * sizeof(*v));

		if (!v)
			return; /* its registers will be read at the process's exit, if they can be
				 */
		p->xregs = v;
		p->xregs_cap = cap;
	}
	if (!m->h.regs(m->h.ctx, tid, p->xregs[p->nxregs].regs, NREGS))
		p->xregs[p->nxregs++].tid = tid;
}

static void mem_fini(void *priv)
{
	struct mem *m = priv;

	while (m->procs)
		proc_drop(m, m->procs->pid);
	while (m->threads)
		threads_drop(m, m->threads->pid, -1);
	for (size_t i = 1; i < m->nsites; i++)
		free(m->sites[i]);
	free(m->sites);
	tp_hash_release(&m->site_index);
	free(m);
}

/* "all" or kinds joined by '+' (memcheck's --show-leak-kinds, whose ',' separates the
 * plugin's arguments here). */
static int parse_kinds(const char *s, unsigned *kinds)
{
	static const char *const names[ST_NKINDS] = {
	    [ST_DEFINITE] = "definite",
	    [ST_INDIRECT] = "indirect",
	    [ST_POSSIBLE] = "possible",
	    [ST_REACHABLE] = "reachable",
	};

	*kinds = 0;
	if (!strcmp(s, "all")) {
		*kinds = (1u << ST_NKINDS) - 1;
		return 0;
	}
	while (*s) {
		size_t len = strcspn(s, "+");
		int k;

		for (k = 0; k < ST_NKINDS; k++)
			if (strlen(names[k]) == len && !strncmp(names[k], s, len))
				break;
		if (k == ST_NKINDS)
			return -EINVAL;
		*kinds |= 1u << k;
		s += len + (s[len] == '+');
	}
	return *kinds ? 0 : -EINVAL;
}

static int parse_args(struct mem *m, const char *args)
{
	char *copy, *tok, *save = NULL;
	int err = 0;

	if (!args || !*args)
		return 0;
	copy = strdup(args);
	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long v;

		if (!strcmp(tok, "summary")) {
			m->summary_only = true;
		} else if (!strcmp(tok, "freeres=no") || !strcmp(tok, "freeres=yes")) {
			m->no_freeres = tok[8] == 'n';
		} else if (!strcmp(tok, "json")) {
			m->json = true;
		} else if (!strncmp(tok, "kinds=", 6)) {
			err = parse_kinds(tok + 6, &m->kinds);
			if (err) {
				tp_err("memory: kinds= takes all or definite, indirect, possible, "
				       "reachable joined by '+': %s",
				       tok);
				break;
			}
		} else if (!strncmp(tok, "depth=", 6)) {
			errno = 0;
			v = strtoul(tok + 6, &end, 10);
			if (errno || end == tok + 6 || *end || v > BT_MAX) {
				tp_err("memory: depth must be 0 to %d: %s", BT_MAX, tok);
				err = -EINVAL;
				break;
			}
			m->bt_depth = v;
		} else {
			tp_err("memory: unknown argument %s (depth=N, summary, kinds=K+K, json, "
			       "freeres=no)",
			       tok);
			err = -EINVAL;
			break;
		}
	}
	free(copy);
	return err;
}

int tp_plugin_memory_init(const struct tracepad_host *host, const char *args,
			  struct tracepad_plugin *plugin)
{
	struct mem *m;
	int err;

	if (!host || host->abi != TRACEPAD_PLUGIN_ABI || !host->read || !host->select || !host->out)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->h = *host;
	m->bt_depth = BT_DEFAULT;
	m->kinds = 1u << ST_DEFINITE | 1u << ST_POSSIBLE; /* memcheck's --show-leak-kinds */
	m->sites_cap = 1024;
	m->sites = calloc(m->sites_cap, sizeof(*m->sites));
	m->nsites = 1;
	err = -ENOMEM;
	if (!m->sites)
		goto err_free;
	err = parse_args(m, args);
	if (err)
		goto err_free;
	err = host->select(host->ctx, MEM_SELECT);
	if (err)
		goto err_free;
	/* As memcheck does at exit (--run-cxx-freeres, --run-libc-freeres): the memory the C++
	 * and C libraries keep for the whole run is freed, and those frees counted. */
	if (!m->no_freeres && host->exit_call &&
	    ((err = host->exit_call(host->ctx, "libstdc++:_ZN9__gnu_cxx9__freeresEv")) ||
	     (err = host->exit_call(host->ctx, "libc:__libc_freeres"))))
		goto err_free;
	*plugin = (struct tracepad_plugin){
	    .name = "memory",
	    .priv = m,
	    .call = mem_call,
	    .ret = mem_ret,
	    .process = mem_process,
	    .thread = mem_thread,
	    .fini = mem_fini,
	};
	return 0;

err_free:
	mem_fini(m);
	return err;
}
