/* Switching the static tracepoints of a stopped process over ptrace (enable, disable) and the
 * `-p` protocol of tracepad markers record: the request written into libtracepad's
 * tp__markers_remote, the points enabled for the session and disabled after it. */
#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "arch/arch.h"
#include "base/log.h"
#include "elf/symbols.h"
#include "markers/recorder.h"
#include "proc/proc.h"
/* The runtime's record layout, without registering sites of our own. */
#define TP_NO_SITE_REGISTRATION
#include "markers/ctl.h"

#define POINT_F_ENABLED 1u
/* Offsets in struct tp_site_desc and struct tp_point (<tracepad/tracepoint.h>, x86-64). */
#define DESC_POINT 0
#define POINT_FLAGS 8

static const uint8_t nop5[5] = TP_ARCH_NOP5;

void tp_markers_sites_free(struct tp_markers_sites *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].name);
		free(s->v[i].fmt);
		free(s->v[i].types);
		free(s->v[i].file);
	}
	free(s->v);
	for (size_t i = 0; i < s->nobjects; i++)
		free(s->objects[i]);
	free(s->objects);
	memset(s, 0, sizeof(*s));
}

struct tp_markers_site *tp_markers_sites_add(struct tp_markers_sites *s)
{
	if (s->n == s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : 32;
		struct tp_markers_site *v = realloc(s->v, ncap * sizeof(*v));

		if (!v)
			return NULL;
		s->v = v;
		s->cap = ncap;
	}
	memset(&s->v[s->n], 0, sizeof(s->v[0]));
	return &s->v[s->n++];
}

enum site_state { SITE_DISABLED, SITE_ENABLED, SITE_UNKNOWN, SITE_UNREADABLE };

static enum site_state site_state(pid_t pid, const struct tp_markers_site *s, uint8_t bytes[5])
{
	uint8_t jmp[5];

	if (tp_proc_read(pid, s->addr, bytes, 5) != 5)
		return SITE_UNREADABLE;
	if (!memcmp(bytes, nop5, 5))
		return SITE_DISABLED;
	if (!tp_arch_emit_jmp(jmp, s->addr, s->target) && !memcmp(bytes, jmp, 5))
		return SITE_ENABLED;
	return SITE_UNKNOWN;
}

static uint64_t point_of(pid_t pid, const struct tp_markers_site *s)
{
	uint64_t point = 0;

	if (tp_proc_read(pid, s->desc + DESC_POINT, &point, sizeof(point)) != sizeof(point))
		return 0;
	return point;
}

/* 1 enabled, 0 not, -1 unreadable */
static int point_enabled(pid_t pid, uint64_t point)
{
	uint32_t flags;

	if (!point || tp_proc_read(pid, point + POINT_FLAGS, &flags, sizeof(flags)) != 4)
		return -1;
	return (flags & POINT_F_ENABLED) ? 1 : 0;
}

const char *tp_markers_site_state(pid_t pid, const struct tp_markers_site *s, char *buf,
				  const char **point)
{
	int pe = point_enabled(pid, point_of(pid, s));
	uint8_t b[5];

	*point = pe < 0 ? "point:?" : pe ? "point:on" : "point:off";
	switch (site_state(pid, s, b)) {
	case SITE_DISABLED:
		return "disabled";
	case SITE_ENABLED:
		return "enabled";
	case SITE_UNKNOWN:
		snprintf(buf, 32, "unknown:%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4]);
		return buf;
	default:
		return "unreadable";
	}
}

bool tp_markers_glob_match(const char *globs, const char *name)
{
	const char *p = globs;

	while (*p) {
		size_t len = strcspn(p, ",");
		char pat[256];

		if (len < sizeof(pat)) {
			memcpy(pat, p, len);
			pat[len] = '\0';
			if (!fnmatch(pat, name, 0))
				return true;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return false;
}

size_t tp_markers_count_matching(const struct tp_markers_sites *s, const char *glob)
{
	size_t n = 0;

	for (size_t i = 0; i < s->n; i++)
		n += s->v[i].name && tp_markers_glob_match(glob, s->v[i].name);
	return n;
}

void tp_markers_proc_error(char *buf, size_t len, const char *what, pid_t pid, int err)
{
	char why[256];

	if (err == -ESRCH) {
		snprintf(buf, len, "-p %d: no such process", (int)pid);
	} else if (err == -EPERM || err == -EACCES) {
		if (tp_proc_perm_reason(pid, why, sizeof(why)))
			snprintf(why, sizeof(why), "permission denied");
		snprintf(buf, len, "-p %d: cannot %s: %s", (int)pid, what, why);
	} else {
		snprintf(buf, len, "-p %d: cannot %s: %s", (int)pid, what, strerror(-err));
	}
}

/* tp_markers_proc_error into @errbuf; the exit status 2. */
#define PROC_ERROR(what, pid, err) (tp_markers_proc_error(errbuf, errlen, what, pid, err), 2)
/* One line into @errbuf. */
#define ERRMSG(...) snprintf(errbuf, errlen, __VA_ARGS__)

static int set_sites(struct tp_proc *p, pid_t pid, struct tp_markers_sites *s, const char *glob,
		     bool on, int *changed, int *refused)
{
	pid_t tids[1024];
	uint64_t pcs[1024];
	int ntids = tp_proc_tasks(p, tids, 1024);
	bool *ok = calloc(s->n ? s->n : 1, sizeof(*ok));

	if (!ok)
		return -ENOMEM;
	if (ntids > 1024)
		ntids = 1024;
	for (int t = 0; t < ntids; t++)
		if (tp_proc_get_pc(tids[t], &pcs[t]))
			pcs[t] = 0;
	for (size_t i = 0; i < s->n; i++) {
		struct tp_markers_site *st = &s->v[i];
		uint8_t cur[5], jmp[5];
		const uint8_t *want, *from;
		int busy = -1, err;

		if (!st->name || !tp_markers_glob_match(glob, st->name))
			continue;
		if ((err = tp_arch_emit_jmp(jmp, st->addr, st->target))) {
			tp_warn("site %s at 0x%" PRIx64 ": jmp out of reach; left alone", st->name,
				st->addr);
			(*refused)++;
			continue;
		}
		want = on ? jmp : nop5;
		from = on ? nop5 : jmp;
		if (tp_proc_read(pid, st->addr, cur, 5) != 5) {
			tp_warn("site %s at 0x%" PRIx64 ": unreadable; left alone", st->name,
				st->addr);
			(*refused)++;
			continue;
		}
		if (!memcmp(cur, want, 5)) {
			ok[i] = true;
			continue;
		}
		if (memcmp(cur, from, 5)) {
			tp_warn("site %s at 0x%" PRIx64
				": unexpected bytes %02x %02x %02x %02x %02x; left alone",
				st->name, st->addr, cur[0], cur[1], cur[2], cur[3], cur[4]);
			(*refused)++;
			continue;
		}
		/* A thread stopped inside the 5 bytes would resume into a torn instruction. */
		for (int t = 0; t < ntids; t++)
			if (pcs[t] > st->addr && pcs[t] < st->addr + 5)
				busy = t;
		if (busy >= 0) {
			tp_warn("site %s at 0x%" PRIx64
				": thread %d is stopped inside it; left alone",
				st->name, st->addr, (int)tids[busy]);
			(*refused)++;
			continue;
		}
		if ((err = tp_proc_write(pid, st->addr, want, 5))) {
			tp_warn("site %s at 0x%" PRIx64 ": write failed: %s", st->name, st->addr,
				strerror(-err));
			(*refused)++;
			continue;
		}
		ok[i] = true;
		(*changed)++;
	}
	/* The runtime patches sites registered later (dlopen) by the point's flag: keep it in
	 * agreement, without touching the runtime's private bits.  A point none of whose sites
	 * could be enabled is not marked enabled. */
	for (size_t i = 0; i < s->n; i++) {
		uint64_t point;
		uint32_t flags, nflags;

		if (!s->v[i].name || !tp_markers_glob_match(glob, s->v[i].name) || (on && !ok[i]))
			continue;
		point = point_of(pid, &s->v[i]);
		if (!point ||
		    tp_proc_read(pid, point + POINT_FLAGS, &flags, sizeof(flags)) != sizeof(flags))
			continue;
		nflags = on ? flags | POINT_F_ENABLED : flags & ~POINT_F_ENABLED;
		if (nflags != flags)
			tp_proc_write(pid, point + POINT_FLAGS, &nflags, sizeof(nflags));
	}
	free(ok);
	return 0;
}

int tp_markers_switch(pid_t pid, struct tp_markers_sites *s, const char *glob, bool on,
		      int *changed, int *refused, char *errbuf, size_t errlen)
{
	struct tp_proc *p = NULL;
	int err = tp_proc_attach(pid, 0, &p);

	if (err) {
		tp_markers_proc_error(errbuf, errlen, "attach", pid, err);
		return err;
	}
	err = set_sites(p, pid, s, glob, on, changed, refused);
	if (err)
		tp_warn("-p %d: %s", (int)pid, strerror(-err));
	err = tp_proc_detach(p);
	if (err)
		tp_warn("-p %d: detach: %s", (int)pid, strerror(-err));
	return 0;
}

/* ---- record -p: a running process ---- */

/* Where libtracepad's tp__markers_remote is in @pid, checked: 0, or the exit status with
 * @errbuf set. */
static int find_remote(pid_t pid, uint64_t *addr, struct tp_markers_remote *rm, char *errbuf,
		       size_t errlen)
{
	struct tp_symtab *st = tp_symtab_new();
	int err = st ? tp_symtab_load_pid(st, pid) : -ENOMEM;

	if (!err)
		err = tp_symtab_find_symbol(st, TP_MREMOTE_SYMBOL, addr);
	tp_symtab_free(st);
	if (err == -ENOENT) {
		ERRMSG("record: -p %d: the process does not use libtracepad (no %s)", (int)pid,
		       TP_MREMOTE_SYMBOL);
		return 2;
	}
	if (err)
		return PROC_ERROR("read its symbols", pid, err);
	if (tp_proc_read(pid, *addr, rm, sizeof(*rm)) != sizeof(*rm))
		return PROC_ERROR("read its memory", pid, -EIO);
	if (rm->magic != TP_MREMOTE_MAGIC || rm->version != TP_MREMOTE_VERSION ||
	    rm->size != sizeof(*rm)) {
		ERRMSG("record: -p %d: its libtracepad speaks another protocol", (int)pid);
		return 2;
	}
	return 0;
}

#define REMOTE_FIELD(f) (remote + offsetof(struct tp_markers_remote, f))

/* Names of the points among @s matching @glob that are (@on) or are not enabled now,
 * comma-separated (a glob matching exactly them), or NULL on no memory.  "" for none. */
static char *points_in_state(pid_t pid, const struct tp_markers_sites *s, const char *glob, int on)
{
	size_t len = 0;
	char *out = strdup("");

	for (size_t i = 0; out && i < s->n; i++) {
		const char *n = s->v[i].name;
		bool dup = false;

		if (!n || !tp_markers_glob_match(glob, n) ||
		    point_enabled(pid, point_of(pid, &s->v[i])) != on)
			continue;
		for (size_t j = 0; j < i && !dup; j++)
			dup = s->v[j].name && !strcmp(s->v[j].name, n) &&
			      tp_markers_glob_match(glob, n);
		if (dup)
			continue;
		char *o = realloc(out, len + strlen(n) + 2);
		if (!o) {
			free(out);
			return NULL;
		}
		out = o;
		len += (size_t)sprintf(out + len, "%s%s", len ? "," : "", n);
	}
	return out;
}

/* Stop the session: under ptrace, zero the runtime's session, ask it to drop its mappings,
 * and disable the points record enabled, also at sites registered since (dlopen). */
static int record_pid_stop(pid_t pid, uint64_t remote, const char *ours,
			   tp_markers_read_fn read_process)
{
	struct tp_proc *p = NULL;
	struct tp_markers_sites s = {0};
	uint64_t zero = 0;
	uint32_t req = 0;
	int32_t nopid = 0;
	int err, changed = 0, refused = 0;

	if ((err = tp_proc_attach(pid, 0, &p)))
		return err;
	if ((err = tp_proc_write(pid, REMOTE_FIELD(session), &zero, sizeof(zero))) ||
	    (err = tp_proc_write(pid, REMOTE_FIELD(tracer_pid), &nopid, sizeof(nopid))) ||
	    tp_proc_read(pid, REMOTE_FIELD(req), &req, sizeof(req)) != sizeof(req))
		goto out;
	req++;
	if ((err = tp_proc_write(pid, REMOTE_FIELD(req), &req, sizeof(req))))
		goto out;
	if (*ours && !(err = read_process(&s, pid)))
		err = set_sites(p, pid, &s, ours, false, &changed, &refused);
out:
	tp_proc_detach(p);
	tp_markers_sites_free(&s);
	return err;
}

/* Refuse a process recorded by a tracepad still alive (a launched program's session has no
 * tracer pid).  A request not yet acted on with no tracer is a stop (the runtime acts on
 * requests at its points' events, and the stop disabled them): no obstacle, whatever
 * session it would end.  0 or the exit status. */
static int check_free(pid_t pid, const struct tp_markers_remote *rm, char *errbuf, size_t errlen)
{
	bool alive = rm->tracer_pid > 0 && (!kill(rm->tracer_pid, 0) || errno == EPERM);
	bool stopping = rm->req != rm->done && rm->tracer_pid <= 0;

	if ((rm->session && !stopping && (!rm->tracer_pid || alive)) ||
	    (rm->req != rm->done && alive)) {
		ERRMSG("record: -p %d: the process is being recorded already", (int)pid);
		return 2;
	}
	return 0;
}

/* With every thread stopped, so that the request and the enabled sites appear at once:
 * write the request, enable the matching points that are off.  *@ours: the points enabled
 * here, to disable at the end.  0 or the exit status. */
static int record_pid_start(pid_t pid, uint64_t remote, const struct tp_markers_remote *rm,
			    struct tp_markers_recorder *r, struct tp_markers_sites *s,
			    const char *glob, char **ours, int *refused,
			    tp_markers_read_fn read_process, char *errbuf, size_t errlen)
{
	int32_t me = (int32_t)getpid(), fds[2] = {tp_trace_consumer_fd(r->cons), r->ctl_fd};
	uint32_t req = rm->req + 1;
	struct tp_proc *p = NULL;
	int err, changed = 0;

	if ((err = tp_proc_attach(pid, 0, &p)))
		return PROC_ERROR("attach", pid, err);
	/* req last: the runtime reads the rest once it sees req change. */
	if ((err = tp_proc_write(pid, REMOTE_FIELD(tracer_pid), &me, sizeof(me))) ||
	    (err = tp_proc_write(pid, REMOTE_FIELD(ring_fd), fds, sizeof(fds))) ||
	    (err = tp_proc_write(pid, REMOTE_FIELD(req), &req, sizeof(req)))) {
		tp_proc_detach(p);
		return PROC_ERROR("write its memory", pid, err);
	}
	*ours = points_in_state(pid, s, glob, 0);
	if (*ours && **ours) {
		set_sites(p, pid, s, *ours, true, &changed, refused);
		/* Those whose sites were all refused were not enabled: not ours to disable. */
		char *on = points_in_state(pid, s, *ours, 1);
		free(*ours);
		*ours = on;
	}
	tp_proc_detach(p);
	if (!*ours) {
		ERRMSG("record: out of memory");
		record_pid_stop(pid, remote, "", read_process);
		return 1;
	}
	return 0;
}

enum record_end { END_ASKED, END_GONE, END_FAILED };

/* Drain until SIGINT/SIGTERM, @duration, the process's exit, or libtracepad's report that it
 * could not take the memfds. */
static enum record_end record_pid_wait(pid_t pid, uint64_t remote, struct tp_markers_recorder *r,
				       double duration, volatile sig_atomic_t *stop, char *errbuf,
				       size_t errlen)
{
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	enum record_end end = END_ASKED;
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!*stop) {
		struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
		struct tp_markers_remote rm;
		int err;

		if ((err = tp_markers_rec_poll(r, false)))
			tp_warn("record: %s", strerror(-err));
		if (pidfd >= 0 ? poll(&pfd, 1, 20) > 0
			       : (usleep(20000), kill(pid, 0) && errno == ESRCH)) {
			end = END_GONE;
			break;
		}
		if (tp_proc_read(pid, remote, &rm, sizeof(rm)) == sizeof(rm) && rm.req == rm.done &&
		    rm.err) {
			ERRMSG("record: -p %d: the process could not open tracepad's shared memory "
			       "(/proc/%d/fd): %s",
			       (int)pid, (int)getpid(), strerror(-rm.err));
			end = END_FAILED;
			break;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (duration > 0 &&
		    (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9 >=
			duration)
			break;
	}
	if (pidfd >= 0)
		close(pidfd);
	return end;
}

int tp_markers_record_pid(pid_t pid, struct tp_markers_sites *s, tp_markers_read_fn read_process,
			  const char *glob, const char *const *fields, const char *dir,
			  double duration, volatile sig_atomic_t *stop, char *errbuf, size_t errlen)
{
	/* A running process never waits for tracepad (which may die without telling it): a
	 * full ring discards, and the trace counts it. */
	struct tp_trace_ring_opts ropts = {.nr_rings = TP_MARKERS_RINGS, .nr_subbufs = 8};
	struct tp_markers_remote rm;
	struct tp_markers_recorder r = {.ctl_fd = -1};
	char closeerr[256];
	enum record_end end;
	uint64_t remote;
	char *ours = NULL;
	int err, ret = 2, refused = 0;

	if (!s->n) {
		ERRMSG("record: -p %d: the process has no tracepoints", (int)pid);
		goto out;
	}
	if (!tp_markers_count_matching(s, glob)) {
		ERRMSG("record: -p %d: no point matches '%s'", (int)pid, glob);
		goto out;
	}
	if ((ret = find_remote(pid, &remote, &rm, errbuf, errlen)) ||
	    (ret = check_free(pid, &rm, errbuf, errlen)))
		goto out;
	ret = 2;
	if (tp_markers_rec_new(&r, dir, s, &ropts, errbuf, errlen))
		goto out;
	r.fields = fields;
	if ((ret = record_pid_start(pid, remote, &rm, &r, s, glob, &ours, &refused, read_process,
				    errbuf, errlen)))
		goto out;
	/* The caller's handlers only set *@stop: a second Ctrl-C does not cut the stop short. */
	end = record_pid_wait(pid, remote, &r, duration, stop, errbuf, errlen);
	if (end != END_GONE && (err = record_pid_stop(pid, remote, ours, read_process)) &&
	    err != -ESRCH)
		tp_warn("record: -p %d: stopping: %s", (int)pid, strerror(-err));
	ret = tp_markers_rec_close(&r, end != END_GONE, closeerr, sizeof(closeerr)) ? 1 : 0;
	if (ret && end == END_FAILED) /* two errors: the first in @errbuf */
		tp_err("%s", closeerr);
	else if (ret)
		ERRMSG("%s", closeerr);
	if (end == END_FAILED)
		ret = 2;
	else if (refused && !ret)
		ret = 1; /* as enable: some sites were refused */
out:
	tp_markers_rec_free(&r);
	free(ours);
	return ret;
}
