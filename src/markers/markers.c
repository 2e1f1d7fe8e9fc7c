/* libtracepad: the runtime of <tracepad/tracepoint.h>.  Keeps the sites of every loaded object,
 * enables and disables points by patching their sites, and delivers events to a consumer
 * (by default: formatted lines on stderr; under `tracepad markers record`: binary events in
 * the trace store's shared-memory rings). */
#include "markers-priv.h"

#include "arch/arch.h"
#include "record.h"
#include "rt/rt.h"
#include "trace/trace.h"

#include <errno.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

pthread_mutex_t tp_markers_lock = PTHREAD_MUTEX_INITIALIZER;
struct tp_markers_object *tp_markers_objects;
static char *env_globs;
static bool env_read;

struct consumer {
	tp_consumer_fn fn;
	void *ctx;
};
#define CONSUMER_SLOTS 64
/* Runtime-private bit of tp_point.flags: the point's first site was registered. */
#define POINT_F_SEEN 0x80000000u
static struct consumer *_Atomic consumer;

static const uint8_t nop5[5] = TP_ARCH_NOP5;

/* The patch that takes site @s to state @on, into @p: returns 1, or 0 when the site is in
 * that state already, or -errno. */
static int site_prepare(struct tp_site *s, bool on, struct tp_rt_patch *p)
{
	uint8_t jmp[5];
	struct tp_insn insn;
	int err;

	if (!s->addr || !s->target)
		return -EINVAL; /* a site in code the linker dropped */
	if ((err = tp_arch_emit_jmp(jmp, s->addr, s->target)))
		return err;
	/* The record says where the site is; confirm it is one 5-byte instruction there. */
	if (tp_arch_decode((const void *)s->addr, 5, s->addr, &insn) || insn.len != 5)
		return -EILSEQ;
	if (!memcmp((const void *)s->addr, on ? jmp : nop5, 5))
		return 0;
	memset(p, 0, sizeof(*p));
	p->addr = s->addr;
	p->len = 5;
	memcpy(p->from, on ? nop5 : jmp, 5);
	memcpy(p->to, on ? jmp : nop5, 5);
	/* a thread that meets the temporary int3 goes where the site will lead */
	p->dest = on ? s->target : s->addr + 5;
	return 1;
}

/* Sites patched in one batch of src/rt's patcher: one membarrier a step for all. */
#define SITE_BATCH 32

struct site_batch {
	struct tp_rt_patch p[SITE_BATCH];
	struct tp_site *site[SITE_BATCH];
	unsigned n;
	bool on;
	int done, first_err;
};

static void batch_error(struct site_batch *b, int err)
{
	if (!b->first_err)
		b->first_err = err;
}

static void batch_flush(struct site_batch *b)
{
	if (!b->n)
		return;
	tp_rt_patch_batch(b->p, b->n);
	for (unsigned i = 0; i < b->n; i++) {
		if (b->p[i].err) {
			batch_error(b, b->p[i].err);
			continue;
		}
		b->site[i]->state = b->on;
		b->done++;
	}
	b->n = 0;
}

static void batch_add(struct site_batch *b, struct tp_site *s)
{
	int r = site_prepare(s, b->on, &b->p[b->n]);

	if (r < 0) {
		batch_error(b, r);
	} else if (!r) {
		s->state = b->on;
		b->done++;
	} else {
		b->site[b->n++] = s;
		if (b->n == SITE_BATCH)
			batch_flush(b);
	}
}

static int site_set(struct tp_site *s, bool on)
{
	struct site_batch b = {.on = on};

	batch_add(&b, s);
	batch_flush(&b);
	return b.first_err;
}

/* Patch every site of @point; the first error is returned after trying all sites. */
static int point_set_locked(struct tp_point *point, bool on)
{
	struct site_batch b = {.on = on};

	if (on)
		point->flags |= TP_POINT_F_ENABLED;
	else
		point->flags &= ~TP_POINT_F_ENABLED;
	for (struct tp_markers_object *o = tp_markers_objects; o; o = o->next)
		for (struct tp_site *s = o->start; s < o->stop; s++)
			if (s->desc && s->desc->point == point)
				batch_add(&b, s);
	batch_flush(&b);
	return b.first_err ? b.first_err : b.done;
}

TP_PUBLIC int tp_point_enable(struct tp_point *point)
{
	if (!point)
		return -EINVAL;
	pthread_mutex_lock(&tp_markers_lock);
	tp_markers_session_poll_locked();
	int ret = point_set_locked(point, true);
	pthread_mutex_unlock(&tp_markers_lock);
	return ret;
}

TP_PUBLIC int tp_point_disable(struct tp_point *point)
{
	if (!point)
		return -EINVAL;
	pthread_mutex_lock(&tp_markers_lock);
	tp_markers_session_poll_locked();
	int ret = point_set_locked(point, false);
	pthread_mutex_unlock(&tp_markers_lock);
	return ret;
}

TP_PUBLIC int tp_point_enabled(const struct tp_point *point)
{
	return point && (point->flags & TP_POINT_F_ENABLED) ? 1 : 0;
}

/* fnmatch over comma-separated alternatives. */
static bool glob_match(const char *globs, const char *name)
{
	const char *p = globs;

	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char one[256];

		if (len && len < sizeof(one)) {
			memcpy(one, p, len);
			one[len] = 0;
			if (!fnmatch(one, name, 0))
				return true;
		}
		if (!end)
			break;
		p = end + 1;
	}
	return false;
}

/* Apply @on to every point whose name matches; each point once even with many sites. */
static int points_set_locked(const char *globs, bool on)
{
	int matched = 0, first_err = 0;

	for (struct tp_markers_object *o = tp_markers_objects; o; o = o->next) {
		for (struct tp_site *s = o->start; s < o->stop; s++) {
			if (!s->desc || !s->desc->point->name ||
			    !glob_match(globs, s->desc->point->name))
				continue;
			bool seen = false;
			/* Skip points already handled by an earlier site. */
			for (struct tp_markers_object *q = tp_markers_objects; q && !seen;
			     q = q->next) {
				for (struct tp_site *t = q->start; t < q->stop; t++) {
					if (q == o && t == s)
						goto first;
					if (t->desc && t->desc->point == s->desc->point) {
						seen = true;
						break;
					}
				}
			}
		first:
			if (seen)
				continue;
			matched++;
			int err = point_set_locked(s->desc->point, on);
			if (err < 0 && !first_err)
				first_err = err;
		}
	}
	if (first_err)
		return first_err;
	return matched ? matched : -ENOENT;
}

TP_PUBLIC int tp_points_enable(const char *glob)
{
	if (!glob || !*glob)
		return -EINVAL;
	pthread_mutex_lock(&tp_markers_lock);
	tp_markers_session_poll_locked();
	int ret = points_set_locked(glob, true);
	pthread_mutex_unlock(&tp_markers_lock);
	return ret;
}

TP_PUBLIC int tp_points_disable(const char *glob)
{
	if (!glob || !*glob)
		return -EINVAL;
	pthread_mutex_lock(&tp_markers_lock);
	tp_markers_session_poll_locked();
	int ret = points_set_locked(glob, false);
	pthread_mutex_unlock(&tp_markers_lock);
	return ret;
}

TP_PUBLIC int tp_sites_foreach(int (*fn)(const struct tp_site *site, void *ctx), void *ctx)
{
	int ret = 0;

	pthread_mutex_lock(&tp_markers_lock);
	for (struct tp_markers_object *o = tp_markers_objects; o && !ret; o = o->next)
		for (struct tp_site *s = o->start; s < o->stop && !ret; s++)
			if (s->desc)
				ret = fn(s, ctx);
	pthread_mutex_unlock(&tp_markers_lock);
	return ret;
}

TP_PUBLIC void tp__sites_register(struct tp_site *start, struct tp_site *stop)
{
	struct tp_markers_object *o;

	if (!start || start >= stop)
		return;
	pthread_mutex_lock(&tp_markers_lock);
	for (o = tp_markers_objects; o; o = o->next) {
		if (o->start == start) {
			o->refs++;
			goto out;
		}
	}
	/* Read here, not in a constructor of ours: in a static link the program's constructors,
	 * which register its sites, may run before this library's. */
	if (!env_read) {
		/* In a secure-execution process (setuid, setgid, capabilities) the environment
		 * is the unprivileged caller's: obeying it would hand them what the program
		 * passes to its points. */
		const char *e = getauxval(AT_SECURE) ? NULL : getenv("TRACEPAD_MARKERS");
		env_read = true;
		if (e && *e)
			env_globs = strdup(e);
		if (!getauxval(AT_SECURE))
			tp_markers_session_env_locked();
	}
	tp_markers_session_poll_locked();
	o = calloc(1, sizeof(*o));
	if (!o)
		goto out;
	o->start = start;
	o->stop = stop;
	o->refs = 1;
	o->next = tp_markers_objects;
	tp_markers_objects = o;
	/* TRACEPAD_MARKERS decides the initial state of a point when its first site appears, and
	 * only then: a point the program disabled since stays disabled when a library with more
	 * of its sites is loaded; a point enabled before covers the new sites too.  Errors leave
	 * a site off; there is nobody to tell at load time. */
	for (struct tp_site *s = start; s < stop; s++) {
		struct tp_point *pt = s->desc ? s->desc->point : NULL;
		if (!pt || (pt->flags & POINT_F_SEEN))
			continue;
		pt->flags |= POINT_F_SEEN;
		if (env_globs && pt->name && glob_match(env_globs, pt->name))
			pt->flags |= TP_POINT_F_ENABLED;
	}
	tp_markers_session_add_locked(start, stop);
	for (struct tp_site *s = start; s < stop; s++)
		if (s->desc && (s->desc->point->flags & TP_POINT_F_ENABLED))
			site_set(s, true);
out:
	pthread_mutex_unlock(&tp_markers_lock);
}

TP_PUBLIC void tp__sites_unregister(struct tp_site *start, struct tp_site *stop)
{
	pthread_mutex_lock(&tp_markers_lock);
	for (struct tp_markers_object **pp = &tp_markers_objects; *pp; pp = &(*pp)->next) {
		struct tp_markers_object *o = *pp;
		if (o->start != start || --o->refs)
			continue;
		tp_markers_session_remove_locked(o->start, o->stop);
		*pp = o->next;
		free(o);
		break;
	}
	pthread_mutex_unlock(&tp_markers_lock);
}

TP_PUBLIC void tp_markers_set_consumer(tp_consumer_fn fn, void *ctx)
{
	/* A thread may still be inside the previous consumer's record: slots are reused only
	 * after CONSUMER_SLOTS further changes instead of being freed under that thread. */
	static struct consumer slots[CONSUMER_SLOTS];
	static unsigned next;
	struct consumer *c = NULL;

	pthread_mutex_lock(&tp_markers_lock);
	if (fn) {
		c = &slots[next++ % CONSUMER_SLOTS];
		c->fn = fn;
		c->ctx = ctx;
	}
	atomic_store_explicit(&consumer, c, memory_order_release);
	pthread_mutex_unlock(&tp_markers_lock);
}

TP_PUBLIC void tp__markers_set_patch_delay(unsigned usec)
{
	tp_rt_patch_set_delay(usec);
}

TP_PUBLIC unsigned long tp__markers_trap_count(void)
{
	return tp_rt_patch_traps();
}

TP_PUBLIC struct tp_point *tp_point_find(const char *name)
{
	struct tp_point *found = NULL;

	if (!name)
		return NULL;
	pthread_mutex_lock(&tp_markers_lock);
	for (struct tp_markers_object *o = tp_markers_objects; o && !found; o = o->next)
		for (struct tp_site *s = o->start; s < o->stop && !found; s++)
			if (s->desc && s->desc->point->name && !strcmp(s->desc->point->name, name))
				found = s->desc->point;
	pthread_mutex_unlock(&tp_markers_lock);
	return found;
}

TP_PUBLIC int tp_markers_format(const struct tp_site_desc *desc, const union tp_arg *args,
				char *buf, size_t len)
{
	union tp_trace_value v[TP_MAX_ARGS];
	size_t n = desc->nargs < TP_MAX_ARGS ? desc->nargs : TP_MAX_ARGS;

	for (size_t i = 0; i < n; i++)
		memcpy(&v[i], &args[i], sizeof(v[i]));
	return tp_trace_format(desc->fmt, desc->types ? desc->types : "", v, n, buf, len);
}

static void print_event(const struct tp_site_desc *desc, const union tp_arg *args)
{
	struct tp_markers_safe_args safe;
	char line[1024];
	int n = snprintf(line, sizeof(line), "%s: ", desc->point->name);
	int m;

	/* the program's own consumer gets the arguments as they are; the runtime's reads of
	 * them never fault */
	args = tp_markers_safe_args(desc, args, &safe);
	m = tp_markers_format(desc, args, line + n, sizeof(line) - (size_t)n - 1);
	n += m < 0 ? 0 : m;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	if (line[n - 1] != '\n')
		line[n++] = '\n';
	/* One write per event so that lines of concurrent threads do not interleave. */
	ssize_t w = write(2, line, (size_t)n);
	(void)w;
}

TP_PUBLIC void tp__fire(const struct tp_site_desc *desc, const union tp_arg *args)
{
	struct consumer *c = atomic_load_explicit(&consumer, memory_order_acquire);
	/* Recording does not take the events from the program's own consumer. */
	bool recorded = tp_markers_session_event(desc, args);

	if (c)
		c->fn(desc, args, c->ctx);
	else if (!recorded)
		print_event(desc, args);
}
