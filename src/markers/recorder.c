/* The ring recorder of tracepad markers: the control table in which libtracepad declares
 * its points' classes and formats, the trace they are added to in table order, the rings
 * drained into it, and the recording of a launched program. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "markers/recorder.h"
#include "trace/read/trace-read.h"
#include "trace/trace.h"
/* The runtime's record layout and field rules, without registering sites of our own. */
#define TP_NO_SITE_REGISTRATION
#include "markers/ctl.h"
#include "markers/record.h"

static int ctl_new(struct tp_markers_recorder *r)
{
	struct tp_mctl_hdr *h;

	r->ctl_fd = memfd_create("tracepad-markers", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (r->ctl_fd < 0)
		return -errno;
	/* The runtime refuses a table that could shrink under it; neither side resizes it. */
	if (ftruncate(r->ctl_fd, (off_t)TP_MCTL_SIZE) ||
	    fcntl(r->ctl_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		return -errno;
	h = mmap(NULL, TP_MCTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, r->ctl_fd, 0);
	if (h == MAP_FAILED)
		return -errno;
	r->ctl = h;
	h->version = TP_MCTL_VERSION;
	h->hdr_size = sizeof(*h);
	h->nr_classes = TP_MCTL_CLASSES;
	h->nr_formats = TP_MCTL_FORMATS;
	h->classes_off = TP_MCTL_CLASSES_OFF;
	h->formats_off = TP_MCTL_FORMATS_OFF;
	h->total_size = TP_MCTL_SIZE;
	__atomic_store_n(&h->magic, TP_MCTL_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

void tp_markers_rec_free(struct tp_markers_recorder *r)
{
	tp_trace_consumer_free(r->cons);
	tp_trace_writer_free(r->w);
	if (r->ctl)
		munmap(r->ctl, TP_MCTL_SIZE);
	if (r->ctl_fd >= 0)
		close(r->ctl_fd);
	for (uint32_t i = 0; i < r->nclasses; i++) {
		free(r->cls_point[i]);
		free(r->cls_types[i]);
	}
	free(r->cls_point);
	free(r->cls_types);
	for (uint32_t i = 0; i < r->nformats; i++)
		free(r->formats[i].text);
	free(r->formats);
	memset(r, 0, sizeof(*r));
	r->ctl_fd = -1;
}

int tp_markers_rec_new(struct tp_markers_recorder *r, const char *dir,
		       const struct tp_markers_sites *known, const struct tp_trace_ring_opts *ropts,
		       char *errbuf, size_t errlen)
{
	struct tp_trace_opts topts = {.clock = tp_trace_clock_best()};
	int err;

	memset(r, 0, sizeof(*r));
	r->ctl_fd = -1;
	r->dir = dir;
	r->known = known;
	r->cls_point = calloc(TP_MCTL_CLASSES, sizeof(char *));
	r->cls_types = calloc(TP_MCTL_CLASSES, sizeof(char *));
	r->formats = calloc(TP_MCTL_FORMATS, sizeof(*r->formats));
	if (!r->cls_point || !r->cls_types || !r->formats) {
		err = -ENOMEM;
		goto err;
	}
	if ((err = tp_trace_writer_new(dir, &topts, &r->w)))
		goto err;
	if ((err = ctl_new(r)) || (err = tp_trace_writer_sync(r->w)) ||
	    (err = tp_trace_consumer_new(r->w, ropts, &r->cons)))
		goto err;
	return 0;
err:
	snprintf(errbuf, errlen, "record: --trace %s: %s", dir, strerror(-err));
	tp_markers_rec_free(r);
	return err;
}

#define IDENT_CHARS "_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

static bool class_name_ok(const char *n)
{
	if (!((*n >= 'A' && *n <= 'Z') || (*n >= 'a' && *n <= 'z')))
		return false;
	for (const char *p = n; *p; p++)
		if (!(*p == '_' || (*p >= '0' && *p <= '9') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= 'a' && *p <= 'z')))
			return false;
	return strlen(n) <= TP_TRACE_NAME_MAX - 8;
}

/* A point with one signature (argument types) among the sites known at rest and the classes
 * seen so far is named as itself, one with several per signature ("rec_two_sl"); a name
 * taken already gets a number. */
static char *class_name(struct tp_markers_recorder *r, const char *point, const char *types)
{
	bool other = false;
	char *base, *name;

	for (size_t i = 0; r->known && i < r->known->n && !other; i++) {
		const struct tp_markers_site *s = &r->known->v[i];
		other = s->name && s->types && !strcmp(s->name, point) && strcmp(s->types, types);
	}
	for (uint32_t i = 0; i < r->nclasses && !other; i++)
		other = r->cls_point[i] && !strcmp(r->cls_point[i], point) &&
			strcmp(r->cls_types[i], types);
	if (asprintf(&base, other ? "%s%s_%s" : "%s%s", class_name_ok(point) ? "" : "tp_", point,
		     *types ? types : "v") < 0)
		return NULL;
	name = strdup(base);
	for (int k = 2; name && tp_trace_schema_find(tp_trace_writer_schema(r->w), name) >= 0;
	     k++) {
		free(name);
		if (asprintf(&name, "%s_%d", base, k) < 0)
			name = NULL;
	}
	free(base);
	return name;
}

/* Copy a string of the table (written by the traced process: untrusted). */
static char *table_str(const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	return n < max ? strndup(s, n) : NULL;
}

static int rec_add_class(struct tp_markers_recorder *r, const struct tp_mctl_class *c, bool final)
{
	struct tp_trace_field_desc f[TP_MARKERS_MAX_FIELDS];
	char *point = NULL, *types = NULL, *name = NULL, *names = NULL;
	char namebuf[TP_MAX_ARGS][TP_MARKERS_NAME_MAX], given[TP_MAX_ARGS][TP_MARKERS_NAME_MAX];
	int nf = -EINVAL, id;

	if (c && __atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) == 1) {
		point = table_str(c->name, sizeof(c->name));
		types = table_str(c->types, sizeof(c->types));
		if (point && strlen(point) + 1 < sizeof(c->name))
			names = table_str(c->name + strlen(point) + 1,
					  sizeof(c->name) - strlen(point) - 1);
		if (point && types && *point && strspn(point, IDENT_CHARS) == strlen(point))
			nf = tp_markers_fields_of(types, f);
		if (nf > 0 && names)
			tp_markers_name_fields(f, nf, names, namebuf);
		if (nf > 0)
			tp_markers_fields_apply(r->fields, point, f, nf, given);
	} else if (!final) {
		return -EAGAIN; /* being written */
	}
	/* A slot the program never completed (it died writing it) or that is malformed keeps
	 * its id with a class no event of the runtime uses. */
	if (nf < 0) {
		free(point);
		free(types);
		point = strdup("");
		types = strdup("");
		nf = 0;
		if (asprintf(&name, "tp_unknown_%u", r->nclasses) < 0)
			name = NULL;
	} else {
		name = class_name(r, point, types);
	}
	if (!name || !point || !types) {
		id = -ENOMEM;
		goto out;
	}
	id = tp_trace_writer_add_class(r->w, name, f, (size_t)nf);
	if (id >= 0 && (uint32_t)id != r->nclasses)
		id = -EPROTO;
	if (id < 0)
		goto out;
	r->cls_point[r->nclasses] = point;
	r->cls_types[r->nclasses++] = types;
	point = types = NULL;
out:
	free(point);
	free(types);
	free(name);
	free(names);
	return id < 0 ? id : 0;
}

/* "ID\tCLASS\tTYPES\tFORMAT" lines, the format with C escapes for \, tab, newline and
 * control bytes: tracepad dump reads them (src/trace/read/trace-read.c). */
static int rec_write_formats(struct tp_markers_recorder *r)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	FILE *f;
	int fd, err = 0;

	snprintf(tmp, sizeof(tmp), "%s/%s.tmp", r->dir, TP_TRACE_FORMATS_FILE);
	snprintf(path, sizeof(path), "%s/%s", r->dir, TP_TRACE_FORMATS_FILE);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		return err;
	}
	fprintf(f, "# tracepad markers formats 1: id, event class, argument types, format\n");
	for (uint32_t i = 0; i < r->nformats; i++) {
		const struct rec_format *m = &r->formats[i];
		const char *cls = tp_trace_schema_name(tp_trace_writer_schema(r->w), m->cls);

		if (!m->text || !cls)
			continue;
		fprintf(f, "%u\t%s\t%s\t", i, cls, r->cls_types[m->cls]);
		for (const unsigned char *p = (const unsigned char *)m->text; *p; p++) {
			if (*p == '\\')
				fputs("\\\\", f);
			else if (*p == '\t')
				fputs("\\t", f);
			else if (*p == '\n')
				fputs("\\n", f);
			else if (*p < 0x20 || *p == 0x7f)
				fprintf(f, "\\x%02x", *p);
			else
				fputc(*p, f);
		}
		fputc('\n', f);
	}
	if (fflush(f) || ferror(f))
		err = -(errno ? errno : EIO);
	if (fclose(f) && !err)
		err = -(errno ? errno : EIO);
	if (!err && rename(tmp, path))
		err = -errno;
	if (err)
		unlink(tmp);
	r->formats_dirty = false;
	return err;
}

int tp_markers_rec_poll(struct tp_markers_recorder *r, bool final)
{
	const struct tp_mctl_hdr *h = r->ctl;
	const struct tp_mctl_class *cls = (const void *)((const char *)h + TP_MCTL_CLASSES_OFF);
	const struct tp_mctl_format *fmt = (const void *)((const char *)h + TP_MCTL_FORMATS_OFF);
	uint32_t nc = __atomic_load_n(&h->next_class, __ATOMIC_ACQUIRE);
	uint32_t nf = __atomic_load_n(&h->next_format, __ATOMIC_ACQUIRE);
	bool added = false;
	int err = 0;

	nc = nc < TP_MCTL_CLASSES ? nc : TP_MCTL_CLASSES;
	nf = nf < TP_MCTL_FORMATS ? nf : TP_MCTL_FORMATS;
	while (r->nclasses < nc) {
		if ((err = rec_add_class(r, &cls[r->nclasses], final)) == -EAGAIN)
			break;
		if (err)
			return err;
		added = true;
	}
	err = 0;
	/* Classes first: the metadata must describe them before their events are read. */
	if (added && (err = tp_trace_writer_sync(r->w)))
		return err;
	while (r->nformats < nf) {
		const struct tp_mctl_format *m = &fmt[r->nformats];
		struct rec_format *o = &r->formats[r->nformats];

		if (__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE) != 1 && !final)
			break;
		if (__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE) == 1 &&
		    m->class_id < r->nclasses) {
			o->text = table_str(m->fmt, sizeof(m->fmt));
			o->cls = m->class_id;
			o->cut = m->truncated;
		}
		r->nformats++;
		r->formats_dirty = true;
	}
	if (h->dropped && !r->warned_dropped) {
		r->warned_dropped = true;
		tp_warn("record: %u site%s could not be described (too many points or formats); "
			"their events are not recorded",
			h->dropped, h->dropped == 1 ? "" : "s");
	}
	if (r->formats_dirty && (err = rec_write_formats(r)))
		return err;
	err = tp_trace_consumer_poll(r->cons);
	return err < 0 ? err : 0;
}

/* Free the pages of a memfd that a process we leave may still map. */
static void punch(int fd)
{
	struct stat st;

	if (fd >= 0 && !fstat(fd, &st))
		fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, st.st_size);
}

int tp_markers_rec_close(struct tp_markers_recorder *r, bool release, char *errbuf, size_t errlen)
{
	int err = tp_markers_rec_poll(r, true), e2, ring = -1;

	e2 = tp_trace_consumer_flush(r->cons);
	if (!err && e2 < 0)
		err = e2;
	if (release)
		ring = dup(tp_trace_consumer_fd(r->cons));
	tp_trace_consumer_free(r->cons);
	r->cons = NULL;
	if (release) {
		punch(ring);
		punch(r->ctl_fd);
		if (ring >= 0)
			close(ring);
	}
	e2 = tp_trace_writer_close(r->w);
	r->w = NULL;
	if (!err && e2 < 0)
		err = e2;
	tp_markers_rec_free(r);
	if (err) {
		snprintf(errbuf, errlen, "record: trace: %s", strerror(-err));
		return 1;
	}
	return 0;
}

/* @prog as execvp would find it, for reading its notes. */

int tp_markers_record_launch(const char *dir, const struct tp_markers_sites *known,
			     const char *glob, const char *const *fields, char **argv,
			     volatile sig_atomic_t *stop, char *errbuf, size_t errlen)
{
	struct tp_trace_ring_opts ropts = {
	    .nr_rings = TP_MARKERS_RINGS,
	    .flags = TP_TRACE_NO_LOSS,
	    .wait_ns = 1000000000ull, /* a stalled tracepad must not hang the program */
	};
	struct tp_markers_recorder r = {.ctl_fd = -1};
	int err, ret = 2, st = 0, fd;
	pid_t pid;

	if (tp_markers_rec_new(&r, dir, known, &ropts, errbuf, errlen))
		goto out;
	r.fields = fields;
	fd = tp_trace_consumer_fd(r.cons);
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		snprintf(errbuf, errlen, "record: fork: %s", strerror(errno));
		goto out;
	}
	if (!pid) {
		char fd_s[16], ctl_s[16];

		snprintf(fd_s, sizeof(fd_s), "%d", fd);
		snprintf(ctl_s, sizeof(ctl_s), "%d", r.ctl_fd);
		/* the memfds are close-on-exec: the program gets them through exec */
		fcntl(fd, F_SETFD, 0);
		fcntl(r.ctl_fd, F_SETFD, 0);
		if (setenv("TRACEPAD_MARKERS_FD", fd_s, 1) ||
		    setenv("TRACEPAD_MARKERS_CTL", ctl_s, 1) || setenv("TRACEPAD_MARKERS", glob, 1))
			_exit(127);
		execvp(argv[0], argv);
		/* the program's stderr, as a shell would say it */
		fprintf(stderr, "tracepad markers: record: %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			tp_err("record: waitpid: %s", strerror(errno));
			break;
		}
		if (w || *stop)
			break;
		if ((err = tp_markers_rec_poll(&r, false)))
			tp_warn("record: %s", strerror(-err));
		usleep(20000);
	}
	/* everything committed reaches the trace, even if the program was killed */
	if (tp_markers_rec_close(&r, false, errbuf, errlen))
		goto out;
	if (*stop)
		ret = 128 + *stop; /* the program's status is not ours to know */
	else if (WIFEXITED(st))
		ret = WEXITSTATUS(st);
	else if (WIFSIGNALED(st))
		ret = 128 + WTERMSIG(st);
out:
	tp_markers_rec_free(&r);
	return ret;
}
