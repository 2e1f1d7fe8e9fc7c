/* Recording sessions of libtracepad: events of enabled sites go as binary records into the
 * trace store's shared-memory rings of `tracepad markers record`, with their classes and
 * format strings declared in the control table (ctl.h).  A session starts from the
 * environment of a launched program, or at the request tracepad writes into
 * tp__markers_remote of a running one.  What runs when an event fires takes no lock, makes no
 * allocation and may run in a signal handler. */
#include "markers-priv.h"

#include "ctl.h"
#include "record.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

TP_PUBLIC struct tp_markers_remote tp__markers_remote = {
    .magic = TP_MREMOTE_MAGIC,
    .version = TP_MREMOTE_VERSION,
    .size = sizeof(struct tp_markers_remote),
};
#define remote tp__markers_remote

/* desc -> class id and format id, filled under the lock, read lock-free when firing. */
#define CLASS_SLOTS 4096
struct class_slot {
	const struct tp_site_desc *_Atomic desc;
	uint32_t id, fmt_id;
};

struct session {
	struct tp_trace_shm shm;
	struct tp_mctl_hdr *ctl;
	size_t ctl_size;
	bool remote; /* from tp__markers_remote: dropped at tracepad's stop request */
	struct class_slot map[CLASS_SLOTS];
};

/* The session declared to (sessions are never freed: a thread may still be using one). */
static struct session *cur;
static pthread_key_t ring_key;
static bool ring_key_ok;
/* Per thread: the session its producer belongs to, and the state of its ring.  A thread
 * that gets no ring (all taken) or fires while exiting has its events counted as discarded
 * (tp_trace_shm_discard_ringless), never written elsewhere; a ringless one tries again now
 * and then, as rings come free when threads exit. */
enum { ST_NONE, ST_RING, ST_RINGLESS, ST_GONE };
#define RINGLESS_RETRY 256 /* events between two tries */
static __thread struct session *tls_session;
static __thread struct tp_trace_producer tls_prod;
static __thread int tls_state;
static __thread unsigned tls_ringless;

/* Events fired while tracepad's request to start a session waited for a thread to serve it:
 * the new session counts them as discarded (see tp_markers_session_event). */
static uint64_t pending_lost;

static size_t slot_of(const struct tp_site_desc *desc)
{
	return ((uintptr_t)desc >> 3) * 0x9e3779b97f4a7c15ull >> 52; /* 12 bits */
}

/* A slot whose site's object was unloaded: lookups go past it, it is never reused (a new
 * object at the same address must not inherit the class of the old one). */
#define SLOT_GONE ((const struct tp_site_desc *)1)

static const struct class_slot *class_find(const struct session *s, const struct tp_site_desc *desc)
{
	size_t i = slot_of(desc);

	for (size_t n = 0; n < CLASS_SLOTS; n++, i = (i + 1) % CLASS_SLOTS) {
		const struct class_slot *c = &s->map[i];
		const struct tp_site_desc *d = atomic_load_explicit(&c->desc, memory_order_acquire);

		if (d == desc)
			return c;
		if (!d)
			return NULL;
	}
	return NULL;
}

static bool ready(const uint32_t *flag)
{
	return __atomic_load_n(flag, __ATOMIC_ACQUIRE) == 1;
}

/* Index of a ready entry equal to the one wanted, else of a new one claimed and filled; -1
 * when the table is full. */
/* The class entry's name is "POINT\0NAMES": the field names (tp_markers_names_of) after the
 * point's, when both fit, so that sites whose formats name their fields differently get
 * classes of their own; a reader of the name alone sees the point. */
static long class_id(struct tp_mctl_hdr *h, const char *name, const char *types, const char *names)
{
	struct tp_mctl_class *tab = (void *)((char *)h + TP_MCTL_CLASSES_OFF);
	uint32_t n = __atomic_load_n(&h->next_class, __ATOMIC_ACQUIRE);
	size_t len = strlen(name);

	if (len + 1 + strlen(names) + 1 > TP_MCTL_NAME_MAX)
		names = "";
	for (uint32_t i = 0; i < n && i < TP_MCTL_CLASSES; i++)
		if (ready(&tab[i].ready) && !strncmp(tab[i].name, name, TP_MCTL_NAME_MAX) &&
		    !strncmp(tab[i].types, types, TP_MCTL_TYPES_MAX) &&
		    (len + 1 >= TP_MCTL_NAME_MAX ||
		     !strncmp(tab[i].name + len + 1, names, TP_MCTL_NAME_MAX - len - 1)))
			return i;
	uint32_t i = __atomic_fetch_add(&h->next_class, 1, __ATOMIC_ACQ_REL);
	if (i >= TP_MCTL_CLASSES)
		return -1;
	strcpy(tab[i].name, name);
	if (*names)
		strcpy(tab[i].name + len + 1, names);
	strcpy(tab[i].types, types);
	__atomic_store_n(&tab[i].ready, 1, __ATOMIC_RELEASE);
	return i;
}

static long format_id(struct tp_mctl_hdr *h, uint32_t cls, const char *fmt)
{
	struct tp_mctl_format *tab = (void *)((char *)h + TP_MCTL_FORMATS_OFF);
	uint32_t n = __atomic_load_n(&h->next_format, __ATOMIC_ACQUIRE);
	size_t len = strlen(fmt);
	bool cut = len >= TP_MCTL_FMT_MAX;

	for (uint32_t i = 0; i < n && i < TP_MCTL_FORMATS; i++)
		if (ready(&tab[i].ready) && tab[i].class_id == cls && tab[i].truncated == cut &&
		    !strncmp(tab[i].fmt, fmt, TP_MCTL_FMT_MAX - 1))
			return i;
	uint32_t i = __atomic_fetch_add(&h->next_format, 1, __ATOMIC_ACQ_REL);
	if (i >= TP_MCTL_FORMATS)
		return -1;
	tab[i].class_id = cls;
	tab[i].truncated = cut;
	if (cut)
		len = TP_MCTL_FMT_MAX - 1;
	memcpy(tab[i].fmt, fmt, len);
	tab[i].fmt[len] = 0;
	__atomic_store_n(&tab[i].ready, 1, __ATOMIC_RELEASE);
	return i;
}

static void declare(struct session *s, const struct tp_site_desc *desc)
{
	struct tp_trace_field_desc f[TP_MARKERS_MAX_FIELDS];
	const char *name = desc->point->name;
	size_t i = slot_of(desc);
	char names[TP_MCTL_NAME_MAX];
	long cls, fmt;

	for (size_t n = 0; n < CLASS_SLOTS; n++, i = (i + 1) % CLASS_SLOTS) {
		struct class_slot *c = &s->map[i];
		const struct tp_site_desc *d = atomic_load_explicit(&c->desc, memory_order_relaxed);

		if (d == desc)
			return;
		if (d)
			continue;
		/* What tracepad could not turn into an event class is not declared. */
		if (name)
			tp_markers_names_of(desc->fmt, desc->nargs, names, sizeof(names));
		if (!name || strlen(name) >= TP_MCTL_NAME_MAX || tp_markers_fields(desc, f) < 0 ||
		    (cls = class_id(s->ctl, name, desc->types, names)) < 0 ||
		    (fmt = format_id(s->ctl, (uint32_t)cls, desc->fmt ? desc->fmt : "")) < 0) {
			__atomic_fetch_add(&s->ctl->dropped, 1, __ATOMIC_RELAXED);
			return;
		}
		c->id = (uint32_t)cls;
		c->fmt_id = (uint32_t)fmt;
		atomic_store_explicit(&c->desc, desc, memory_order_release);
		return;
	}
	__atomic_fetch_add(&s->ctl->dropped, 1, __ATOMIC_RELAXED);
}

static void declare_sites(struct session *s, struct tp_site *start, struct tp_site *stop)
{
	for (struct tp_site *st = start; st < stop; st++)
		if (st->desc && st->desc->point)
			declare(s, st->desc);
}

/* Map tracepad's control table, checking what tracepad wrote in it. */
static int ctl_attach(struct session *s, int fd)
{
	const struct tp_mctl_hdr *h;
	struct stat st;
	void *base;
	int seals;

	if (fstat(fd, &st))
		return -errno;
	seals = fcntl(fd, F_GET_SEALS);
	if (st.st_size < (off_t)TP_MCTL_SIZE || seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EINVAL;
	base = mmap(NULL, TP_MCTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -errno;
	h = base;
	if (h->magic != TP_MCTL_MAGIC || h->version != TP_MCTL_VERSION ||
	    h->hdr_size != sizeof(*h) || h->nr_classes != TP_MCTL_CLASSES ||
	    h->nr_formats != TP_MCTL_FORMATS || h->classes_off != TP_MCTL_CLASSES_OFF ||
	    h->formats_off != TP_MCTL_FORMATS_OFF || h->total_size != TP_MCTL_SIZE) {
		munmap(base, TP_MCTL_SIZE);
		return -EINVAL;
	}
	s->ctl = base;
	s->ctl_size = TP_MCTL_SIZE;
	return 0;
}

static void ring_thread_exit(void *arg)
{
	/* Only a ring of the session still recorded into is given back. */
	if (tls_session &&
	    (uint64_t)(uintptr_t)tls_session == __atomic_load_n(&remote.session, __ATOMIC_ACQUIRE))
		tp_trace_producer_fini(arg);
	tls_state = ST_GONE;
}

static void atfork_child(void)
{
	__atomic_store_n(&remote.session, 0, __ATOMIC_RELAXED);
	cur = NULL;
	tls_state = ST_GONE; /* a child must not write into its parent's ring */
}

/* A session over the two memfds; the classes of every registered site are declared. */
static int session_open(int ring_fd, int ctl_fd, bool is_remote)
{
	struct session *s;
	int err;

	if (!ring_key_ok)
		return -ENOSYS;
	/* mmap, not malloc: this may run where an event fired, in a signal handler. */
	s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED)
		return -errno;
	if ((err = tp_trace_shm_attach(&s->shm, ring_fd)))
		goto err_free;
	if ((err = ctl_attach(s, ctl_fd)))
		goto err_shm;
	s->remote = is_remote;
	for (struct tp_markers_object *o = tp_markers_objects; o; o = o->next)
		declare_sites(s, o->start, o->stop);
	cur = s;
	remote.ring_base = (uintptr_t)s->shm.base;
	remote.ring_size = s->shm.size;
	remote.ctl_base = (uintptr_t)s->ctl;
	remote.ctl_size = s->ctl_size;
	__atomic_store_n(&remote.session, (uint64_t)(uintptr_t)s, __ATOMIC_RELEASE);
	return 0;

err_shm:
	tp_trace_shm_detach(&s->shm);
err_free:
	munmap(s, sizeof(*s));
	return err;
}

/* Give the memory of a session back to tracepad.  Another thread may still be in the middle
 * of an event: anonymous memory replaces the mappings, so its writes land there. */
static void session_drop(struct session *s)
{
	const int prot = PROT_READ | PROT_WRITE;
	const int flags = MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

	mmap(s->shm.base, s->shm.size, prot, flags, -1, 0);
	mmap(s->ctl, s->ctl_size, prot, flags, -1, 0);
	remote.ring_base = remote.ring_size = remote.ctl_base = remote.ctl_size = 0;
}

void tp_markers_session_env_locked(void)
{
	const char *fd_s = getenv("TRACEPAD_MARKERS_FD");
	const char *ctl_s = getenv("TRACEPAD_MARKERS_CTL");
	char *end1 = NULL, *end2 = NULL;
	long fd, ctl;

	if (!pthread_key_create(&ring_key, ring_thread_exit)) {
		ring_key_ok = true;
		pthread_atfork(NULL, NULL, atfork_child);
	}
	if (!fd_s || !*fd_s || !ctl_s || !*ctl_s)
		return;
	fd = strtol(fd_s, &end1, 10);
	ctl = strtol(ctl_s, &end2, 10);
	if (*end1 || *end2 || fd < 0 || fd > __INT_MAX__ || ctl < 0 || ctl > __INT_MAX__)
		return;
	/* The descriptors stay open: a program this one execs records into the same trace. */
	session_open((int)fd, (int)ctl, false);
}

/* "/proc/PID/fd/FD" without stdio (this may run in a signal handler). */
static int open_tracer_fd(int pid, int fd)
{
	char path[64] = "/proc/", *p = path + 6;
	int vals[2] = {pid, fd};

	for (int k = 0; k < 2; k++) {
		char digits[12];
		int n = 0;
		unsigned v = (unsigned)vals[k];

		do
			digits[n++] = (char)('0' + v % 10);
		while ((v /= 10));
		while (n)
			*p++ = digits[--n];
		if (!k) {
			memcpy(p, "/fd/", 4);
			p += 4;
		}
	}
	*p = 0;
	int r = open(path, O_RDWR | O_CLOEXEC);
	return r < 0 ? -errno : r;
}

void tp_markers_session_poll_locked(void)
{
	uint32_t req = __atomic_load_n(&remote.req, __ATOMIC_ACQUIRE);
	int pid = remote.tracer_pid, ring = -1, ctl = -1, err = 0;

	if (req == __atomic_load_n(&remote.done, __ATOMIC_RELAXED))
		return;
	if (cur) {
		__atomic_store_n(&remote.session, 0, __ATOMIC_RELEASE);
		if (cur->remote)
			session_drop(cur);
		cur = NULL;
	}
	if (pid > 0) {
		if ((ring = open_tracer_fd(pid, remote.ring_fd)) < 0)
			err = ring;
		else if ((ctl = open_tracer_fd(pid, remote.ctl_fd)) < 0)
			err = ctl;
		else
			err = session_open(ring, ctl, true);
		if (ring >= 0)
			close(ring);
		if (ctl >= 0)
			close(ctl);
	}
	remote.err = err;
	__atomic_store_n(&remote.done, req, __ATOMIC_RELEASE);
	/* After done: an event counted in pending_lost from here on is taken back by its
	 * thread and recorded (see pending_event()). */
	uint64_t lost = __atomic_exchange_n(&pending_lost, 0, __ATOMIC_ACQ_REL);
	if (cur && lost)
		tp_trace_shm_discard_ringless(&cur->shm, lost);
}

void tp_markers_session_add_locked(struct tp_site *start, struct tp_site *stop)
{
	if (cur)
		declare_sites(cur, start, stop);
}

void tp_markers_session_remove_locked(struct tp_site *start, struct tp_site *stop)
{
	for (struct tp_site *st = start; cur && st < stop; st++) {
		struct class_slot *c =
		    (struct class_slot *)(st->desc ? class_find(cur, st->desc) : NULL);
		if (c)
			atomic_store_explicit(&c->desc, SLOT_GONE, memory_order_release);
	}
}

static void ring_event(struct session *s, const struct tp_site_desc *desc, const union tp_arg *args)
{
	const struct class_slot *c = class_find(s, desc);
	struct tp_markers_safe_args safe;
	uint8_t *p;

	if (!c)
		return;
	args = tp_markers_safe_args(desc, args, &safe);
	if (tls_session != s) {
		tls_session = s;
		tls_state = ST_NONE;
	}
	if (tls_state == ST_GONE || (tls_state == ST_RINGLESS && ++tls_ringless % RINGLESS_RETRY)) {
		tp_trace_shm_discard_ringless(&s->shm, 1);
		return;
	}
	if (tls_state != ST_RING) {
		if (tp_trace_shm_producer_init(&s->shm, &tls_prod)) {
			tls_state = ST_RINGLESS;
			tls_ringless = 0;
			tp_trace_shm_discard_ringless(&s->shm, 1);
			return;
		}
		tls_state = ST_RING;
		pthread_setspecific(ring_key, &tls_prod);
	}
	size_t size = tp_markers_record_size(desc, args);
	p = tp_trace_reserve(&tls_prod, (uint16_t)c->id, (uint32_t)size);
	if (!p)
		return;
	tp_markers_encode(desc, c->fmt_id, args, p, size);
	tp_trace_commit(&tls_prod);
}

static bool request_pending(void)
{
	return __atomic_load_n(&remote.req, __ATOMIC_ACQUIRE) !=
	       __atomic_load_n(&remote.done, __ATOMIC_ACQUIRE);
}

/* Serve tracepad's pending request, or wait a little while another thread serves it.  The
 * wait is bounded: this thread may have interrupted the lock's holder (a site in a signal
 * handler), which cannot go on until it returns. */
#define SERVE_ROUNDS 1000
static void serve_request(void)
{
	for (unsigned round = 0; round < SERVE_ROUNDS && request_pending(); round++) {
		if (!pthread_mutex_trylock(&tp_markers_lock)) {
			tp_markers_session_poll_locked();
			pthread_mutex_unlock(&tp_markers_lock);
			return;
		}
		sched_yield();
	}
}

/* An event while a start request is still pending: counted in pending_lost, which the
 * session takes as discarded once it opens.  If the session opened meanwhile, the count is
 * taken back and the event recorded (false), unless the opening took it already. */
static bool pending_event(void)
{
	uint64_t v;

	__atomic_fetch_add(&pending_lost, 1, __ATOMIC_ACQ_REL);
	if (request_pending())
		return true;
	v = __atomic_load_n(&pending_lost, __ATOMIC_ACQUIRE);
	while (v && !__atomic_compare_exchange_n(&pending_lost, &v, v - 1, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
		;
	return !v;
}

bool tp_markers_session_event(const struct tp_site_desc *desc, const union tp_arg *args)
{
	struct session *s;

	if (__builtin_expect(request_pending(), 0)) {
		serve_request();
		if (request_pending() &&
		    __atomic_load_n(&remote.tracer_pid, __ATOMIC_RELAXED) > 0 && pending_event())
			return true;
	}
	s = (struct session *)(uintptr_t)__atomic_load_n(&remote.session, __ATOMIC_ACQUIRE);
	if (!s)
		/* Points a recorder enabled are its own: while it has no session (it failed to
		 * start one), their events are not the program's output. */
		return __atomic_load_n(&remote.tracer_pid, __ATOMIC_RELAXED) > 0;
	ring_event(s, desc, args);
	return true;
}
