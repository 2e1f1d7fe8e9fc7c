/* libtracepad: the runtime of <tracepad/tracepoint.h>.  Keeps the sites of every loaded object,
 * enables and disables points by patching their sites, and delivers events to a consumer
 * (by default: formatted lines on stderr; under `tracepad markers record`: binary events in
 * the trace store's shared-memory rings). */
#include <tracepad/tracepoint.h>

#include "arch/arch.h"
#include "patch.h"
#include "record.h"

#include <errno.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TP_PUBLIC __attribute__((visibility("default")))

/* One registered object: its section range, referenced once per translation unit. */
struct object {
	struct object *next;
	struct tp_site *start, *stop;
	unsigned refs;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct object *objects;
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

/* `tracepad markers record` (see docs/tracepad-markers.1): TRACEPAD_MARKERS_FD is the memfd
 * of its rings, TRACEPAD_MARKERS_CLASSES maps "point:types" keys to event class ids as
 * "name:types=id,..." (tracepad built the classes from the same .note.tracepad). */
static struct tp_trace_shm ring_shm;
static bool ring_on;
static pthread_key_t ring_key;
static char *env_classes;
/* Per thread: 0 no ring yet, 1 producer claimed, -1 none (rings full, exited, or a forked
 * child, which must not write into its parent's ring). */
static __thread struct tp_trace_producer ring_prod;
static __thread int ring_state;

/* desc -> class id, filled at registration (under the lock), read lock-free when firing. */
#define CLASS_SLOTS 4096
struct class_slot {
	const struct tp_site_desc *_Atomic desc;
	uint32_t id, fmt_id;
};
static struct class_slot class_map[CLASS_SLOTS];

static int site_set(struct tp_site *s, bool on)
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
	if (on) {
		if (!memcmp((const void *)s->addr, jmp, 5))
			return (s->state = 1), 0;
		err = tp_markers_patch(s->addr, tp_markers_nop5, jmp, s->target);
	} else {
		if (!memcmp((const void *)s->addr, tp_markers_nop5, 5))
			return (s->state = 0), 0;
		err = tp_markers_patch(s->addr, jmp, tp_markers_nop5, s->addr + 5);
	}
	if (!err)
		s->state = on;
	return err;
}

/* Patch every site of @point; the first error is returned after trying all sites. */
static int point_set_locked(struct tp_point *point, bool on)
{
	int n = 0, first_err = 0;

	if (on)
		point->flags |= TP_POINT_F_ENABLED;
	else
		point->flags &= ~TP_POINT_F_ENABLED;
	for (struct object *o = objects; o; o = o->next) {
		for (struct tp_site *s = o->start; s < o->stop; s++) {
			if (!s->desc || s->desc->point != point)
				continue;
			int err = site_set(s, on);
			if (err && !first_err)
				first_err = err;
			else if (!err)
				n++;
		}
	}
	return first_err ? first_err : n;
}

TP_PUBLIC int tp_point_enable(struct tp_point *point)
{
	if (!point)
		return -EINVAL;
	pthread_mutex_lock(&lock);
	int ret = point_set_locked(point, true);
	pthread_mutex_unlock(&lock);
	return ret;
}

TP_PUBLIC int tp_point_disable(struct tp_point *point)
{
	if (!point)
		return -EINVAL;
	pthread_mutex_lock(&lock);
	int ret = point_set_locked(point, false);
	pthread_mutex_unlock(&lock);
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

	for (struct object *o = objects; o; o = o->next) {
		for (struct tp_site *s = o->start; s < o->stop; s++) {
			if (!s->desc || !s->desc->point->name ||
			    !glob_match(globs, s->desc->point->name))
				continue;
			bool seen = false;
			/* Skip points already handled by an earlier site. */
			for (struct object *q = objects; q && !seen; q = q->next) {
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
	pthread_mutex_lock(&lock);
	int ret = points_set_locked(glob, true);
	pthread_mutex_unlock(&lock);
	return ret;
}

TP_PUBLIC int tp_points_disable(const char *glob)
{
	if (!glob || !*glob)
		return -EINVAL;
	pthread_mutex_lock(&lock);
	int ret = points_set_locked(glob, false);
	pthread_mutex_unlock(&lock);
	return ret;
}

TP_PUBLIC int tp_sites_foreach(int (*fn)(const struct tp_site *site, void *ctx), void *ctx)
{
	int ret = 0;

	pthread_mutex_lock(&lock);
	for (struct object *o = objects; o && !ret; o = o->next)
		for (struct tp_site *s = o->start; s < o->stop && !ret; s++)
			if (s->desc)
				ret = fn(s, ctx);
	pthread_mutex_unlock(&lock);
	return ret;
}

/* FNV-1a: the "fmt" field of a recorded event identifies its site's format string. */
static uint32_t fmt_hash(const char *s)
{
	uint32_t h = 2166136261u;

	for (; s && *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

static size_t class_slot_of(const struct tp_site_desc *desc)
{
	return ((uintptr_t)desc >> 3) * 0x9e3779b97f4a7c15ull >> 52; /* 12 bits */
}

/* The class id of @desc in TRACEPAD_MARKERS_CLASSES, or -1 if tracepad did not describe it
 * (a library it did not read). */
static long class_lookup_env(const struct tp_site_desc *desc)
{
	const char *name = desc->point->name, *types = desc->types ? desc->types : "";
	size_t nl = strlen(name), tl = strlen(types);

	for (const char *p = env_classes; p && *p;) {
		const char *end = strchr(p, ',');
		if (!strncmp(p, name, nl) && p[nl] == ':' && !strncmp(p + nl + 1, types, tl) &&
		    p[nl + 1 + tl] == '=')
			return strtol(p + nl + 2 + tl, NULL, 10);
		if (!end)
			break;
		p = end + 1;
	}
	return -1;
}

static void class_add_locked(const struct tp_site_desc *desc)
{
	size_t i = class_slot_of(desc);

	for (size_t n = 0; n < CLASS_SLOTS; n++, i = (i + 1) % CLASS_SLOTS) {
		struct class_slot *c = &class_map[i];
		const struct tp_site_desc *d = atomic_load_explicit(&c->desc, memory_order_relaxed);

		if (d == desc)
			return;
		if (d)
			continue;
		long id = class_lookup_env(desc);
		if (id < 0 || id > 65535)
			return;
		c->id = (uint32_t)id;
		c->fmt_id = fmt_hash(desc->fmt);
		atomic_store_explicit(&c->desc, desc, memory_order_release);
		return;
	}
}

static const struct class_slot *class_find(const struct tp_site_desc *desc)
{
	size_t i = class_slot_of(desc);

	for (size_t n = 0; n < CLASS_SLOTS; n++, i = (i + 1) % CLASS_SLOTS) {
		const struct class_slot *c = &class_map[i];
		const struct tp_site_desc *d = atomic_load_explicit(&c->desc, memory_order_acquire);

		if (d == desc)
			return c;
		if (!d)
			return NULL;
	}
	return NULL;
}

static void ring_thread_exit(void *arg)
{
	tp_trace_producer_fini(arg);
	ring_state = -1;
}

static void ring_atfork_child(void)
{
	ring_state = -1;
}

/* Under the lock, once, before the first object is registered. */
static void ring_init_locked(void)
{
	const char *fd_s = getenv("TRACEPAD_MARKERS_FD");
	const char *cls = getenv("TRACEPAD_MARKERS_CLASSES");
	char *end;
	long fd;

	if (!fd_s || !*fd_s)
		return;
	fd = strtol(fd_s, &end, 10);
	if (*end || fd < 0 || fd > __INT_MAX__ || !cls)
		return;
	env_classes = strdup(cls);
	if (!env_classes || pthread_key_create(&ring_key, ring_thread_exit))
		return;
	if (tp_trace_shm_attach(&ring_shm, (int)fd))
		return;
	pthread_atfork(NULL, NULL, ring_atfork_child);
	ring_on = true;
}

/* Record an event into the calling thread's ring; dropped when its site has no class. */
static void ring_event(const struct tp_site_desc *desc, const union tp_arg *args)
{
	const struct class_slot *c = class_find(desc);
	uint8_t *p;

	if (!c || ring_state < 0)
		return;
	if (!ring_state) {
		if (tp_trace_shm_producer_init(&ring_shm, &ring_prod)) {
			ring_state = -1;
			return;
		}
		ring_state = 1;
		pthread_setspecific(ring_key, &ring_prod);
	}
	size_t size = tp_markers_record_size(desc, args);
	p = tp_trace_reserve(&ring_prod, (uint16_t)c->id, (uint32_t)size);
	if (!p)
		return;
	tp_markers_encode(desc, c->fmt_id, args, p, size);
	tp_trace_commit(&ring_prod);
}

TP_PUBLIC void tp__sites_register(struct tp_site *start, struct tp_site *stop)
{
	struct object *o;

	if (!start || start >= stop)
		return;
	pthread_mutex_lock(&lock);
	for (o = objects; o; o = o->next) {
		if (o->start == start) {
			o->refs++;
			goto out;
		}
	}
	/* Read here, not in a constructor of ours: in a static link the program's constructors,
	 * which register its sites, may run before this library's. */
	if (!env_read) {
		const char *e = getenv("TRACEPAD_MARKERS");
		env_read = true;
		if (e && *e)
			env_globs = strdup(e);
		ring_init_locked();
	}
	o = calloc(1, sizeof(*o));
	if (!o)
		goto out;
	o->start = start;
	o->stop = stop;
	o->refs = 1;
	o->next = objects;
	objects = o;
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
	if (ring_on)
		for (struct tp_site *s = start; s < stop; s++)
			if (s->desc && s->desc->point->name)
				class_add_locked(s->desc);
	for (struct tp_site *s = start; s < stop; s++)
		if (s->desc && (s->desc->point->flags & TP_POINT_F_ENABLED))
			site_set(s, true);
out:
	pthread_mutex_unlock(&lock);
}

TP_PUBLIC void tp__sites_unregister(struct tp_site *start, struct tp_site *stop)
{
	pthread_mutex_lock(&lock);
	for (struct object **pp = &objects; *pp; pp = &(*pp)->next) {
		struct object *o = *pp;
		if (o->start != start || --o->refs)
			continue;
		*pp = o->next;
		free(o);
		break;
	}
	pthread_mutex_unlock(&lock);
}

TP_PUBLIC void tp_markers_set_consumer(tp_consumer_fn fn, void *ctx)
{
	/* A thread may still be inside the previous consumer's record: slots are reused only
	 * after CONSUMER_SLOTS further changes instead of being freed under that thread. */
	static struct consumer slots[CONSUMER_SLOTS];
	static unsigned next;
	struct consumer *c = NULL;

	pthread_mutex_lock(&lock);
	if (fn) {
		c = &slots[next++ % CONSUMER_SLOTS];
		c->fn = fn;
		c->ctx = ctx;
	}
	atomic_store_explicit(&consumer, c, memory_order_release);
	pthread_mutex_unlock(&lock);
}

TP_PUBLIC void tp__markers_set_patch_delay(unsigned usec)
{
	tp_markers_patch_set_delay(usec);
}

TP_PUBLIC unsigned long tp__markers_trap_count(void)
{
	return tp_markers_patch_traps();
}

TP_PUBLIC struct tp_point *tp_point_find(const char *name)
{
	struct tp_point *found = NULL;

	if (!name)
		return NULL;
	pthread_mutex_lock(&lock);
	for (struct object *o = objects; o && !found; o = o->next)
		for (struct tp_site *s = o->start; s < o->stop && !found; s++)
			if (s->desc && s->desc->point->name && !strcmp(s->desc->point->name, name))
				found = s->desc->point;
	pthread_mutex_unlock(&lock);
	return found;
}

struct out {
	char *buf;
	size_t len, pos;
};

static void out_add(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_add(struct out *o, const char *fmt, ...)
{
	va_list ap;
	size_t room = o->pos < o->len ? o->len - o->pos : 0;

	va_start(ap, fmt);
	int n = vsnprintf(room ? o->buf + o->pos : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->pos += (size_t)n;
}

static bool is_signed_code(char t)
{
	return t == TP_ARG_I8 || t == TP_ARG_I16 || t == TP_ARG_I32 || t == TP_ARG_I64;
}

/* The value of an integer argument as its own C type would print with %u/%x: a negative
 * int is 32 bits of ones, not 64. */
static unsigned long long as_unsigned(char t, union tp_arg a)
{
	switch (t) {
	case TP_ARG_I8:
		return (uint8_t)a.i;
	case TP_ARG_I16:
		return (uint16_t)a.i;
	case TP_ARG_I32:
		return (uint32_t)a.i;
	case TP_ARG_PTR:
		return (uintptr_t)a.p;
	case TP_ARG_DOUBLE:
		return (unsigned long long)a.d;
	default:
		return a.u;
	}
}

static long long as_signed(char t, union tp_arg a)
{
	if (t == TP_ARG_DOUBLE)
		return (long long)a.d;
	if (t == TP_ARG_PTR)
		return (long long)(intptr_t)a.p;
	return is_signed_code(t) ? a.i : (long long)a.u;
}

TP_PUBLIC int tp_markers_format(const struct tp_site_desc *desc, const union tp_arg *args,
				char *buf, size_t len)
{
	struct out o = {buf, len, 0};
	const char *f = desc->fmt;
	unsigned ai = 0;

	if (len)
		buf[0] = 0;
	while (*f) {
		if (*f != '%') {
			const char *pct = strchr(f, '%');
			size_t n = pct ? (size_t)(pct - f) : strlen(f);
			out_add(&o, "%.*s", (int)n, f);
			f += n;
			continue;
		}
		if (f[1] == '%') {
			out_add(&o, "%%");
			f += 2;
			continue;
		}
		/* Keep flags, width and precision; drop length modifiers (the type is known). */
		char spec[32];
		size_t sl = 0;
		const char *p = f + 1;
		spec[sl++] = '%';
		while (*p && strchr("-+ #0123456789.", *p) && sl < 20)
			spec[sl++] = *p++;
		while (*p && strchr("hlLqjzt", *p))
			p++;
		char conv = *p;
		if (!conv)
			break;
		f = p + 1;
		if (ai >= desc->nargs) {
			out_add(&o, "<?>");
			continue;
		}
		char t = desc->types[ai];
		union tp_arg a = args[ai++];
		switch (conv) {
		case 'd':
		case 'i':
			memcpy(spec + sl, "lld", 4);
			out_add(&o, spec, as_signed(t, a));
			break;
		case 'u':
		case 'x':
		case 'X':
		case 'o':
			spec[sl] = 'l';
			spec[sl + 1] = 'l';
			spec[sl + 2] = conv;
			spec[sl + 3] = 0;
			out_add(&o, spec, as_unsigned(t, a));
			break;
		case 'c':
			memcpy(spec + sl, "c", 2);
			out_add(&o, spec, (int)(unsigned char)as_unsigned(t, a));
			break;
		case 's':
			memcpy(spec + sl, "s", 2);
			if (t == TP_ARG_STR)
				out_add(&o, spec, a.s ? a.s : "(null)");
			else
				out_add(&o, "<not a string>");
			break;
		case 'p':
			memcpy(spec + sl, "p", 2);
			out_add(&o, spec, t == TP_ARG_PTR || t == TP_ARG_STR ? a.p : (void *)0);
			break;
		case 'f':
		case 'F':
		case 'e':
		case 'E':
		case 'g':
		case 'G':
		case 'a':
		case 'A':
			spec[sl] = conv;
			spec[sl + 1] = 0;
			out_add(&o, spec,
				t == TP_ARG_DOUBLE  ? a.d
				: is_signed_code(t) ? (double)a.i
						    : (double)a.u);
			break;
		default:
			out_add(&o, "<bad %%%c>", conv);
			break;
		}
	}
	if (o.pos > (size_t)__INT_MAX__)
		return -EOVERFLOW;
	return (int)o.pos;
}

static void print_event(const struct tp_site_desc *desc, const union tp_arg *args)
{
	char line[1024];
	int n = snprintf(line, sizeof(line), "%s: ", desc->point->name);
	int m = tp_markers_format(desc, args, line + n, sizeof(line) - (size_t)n - 1);

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

	if (c)
		c->fn(desc, args, c->ctx);
	else if (ring_on)
		ring_event(desc, args);
	else
		print_event(desc, args);
}
