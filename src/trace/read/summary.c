/* The summary of tracepad report: events per class, discarded events per stream, the time
 * span.  Each stream is read on its own (the reader over that stream's file alone) so that
 * discards are attributed to the stream whose packets record them. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace/read/summary.h"

/* One line into rp->error. */
#define ERRMSG(...) snprintf(rp->error, sizeof(rp->error), __VA_ARGS__)

/* The stream files, exactly as tp_trace_reader_open lists them. */
static int list_streams(struct tp_trace_summary *rp, int dirfd)
{
	char **names;
	size_t n;
	int err = tp_trace_dir_streams(dirfd, &names, &n);

	if (err)
		return err;
	rp->st = calloc(n ? n : 1, sizeof(*rp->st));
	if (!rp->st) {
		while (n--)
			free(names[n]);
		free(names);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		rp->st[i].file = names[i];
	rp->nr_st = n;
	free(names);
	return 0;
}

static struct tp_trace_summary_class *class_get(struct tp_trace_summary *rp, uint32_t id,
						const char *name)
{
	size_t i;

	if ((rp->nr_cls + 1) * 2 > rp->cap_cls) {
		size_t ncap = rp->cap_cls ? rp->cap_cls * 2 : 64;
		struct tp_trace_summary_class *nc = calloc(ncap, sizeof(*nc));

		if (!nc)
			return NULL;
		for (size_t j = 0; j < rp->cap_cls; j++) {
			if (!rp->cls[j].used)
				continue;
			i = (rp->cls[j].id * 2654435761u) & (ncap - 1);
			while (nc[i].used)
				i = (i + 1) & (ncap - 1);
			nc[i] = rp->cls[j];
		}
		free(rp->cls);
		rp->cls = nc;
		rp->cap_cls = ncap;
	}
	i = (id * 2654435761u) & (rp->cap_cls - 1);
	while (rp->cls[i].used && rp->cls[i].id != id)
		i = (i + 1) & (rp->cap_cls - 1);
	if (!rp->cls[i].used) {
		rp->cls[i].name = strdup(name);
		if (!rp->cls[i].name)
			return NULL;
		rp->cls[i].used = true;
		rp->cls[i].id = id;
		rp->nr_cls++;
	}
	return &rp->cls[i];
}

/* Read stream @i alone.  Returns 0, or -errno with rp->error set. */
static int read_stream(struct tp_trace_summary *rp, int dirfd, const char *meta, size_t mlen,
		       size_t i)
{
	struct tp_trace_summary_stream *s = &rp->st[i];
	struct tp_trace_mem_stream ms = {NULL, 0};
	const struct tp_trace_event *ev;
	struct tp_trace_reader *r;
	struct stat st;
	int fd, err, status = 0;

	fd = openat(dirfd, s->file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		status = -errno;
		ERRMSG("%s/%s: %s", rp->dir, s->file, strerror(errno));
		if (fd >= 0)
			close(fd);
		return status == -ENOMEM ? -EIO : status;
	}
	if (st.st_size > 0) {
		ms.data = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (ms.data == MAP_FAILED) {
			status = -errno;
			ERRMSG("%s/%s: %s", rp->dir, s->file, strerror(errno));
			close(fd);
			return status == -ENOMEM ? -EIO : status;
		}
		ms.size = (size_t)st.st_size;
	}
	close(fd);
	err = tp_trace_reader_open_mem(meta, mlen, &ms, 1, &r);
	if (err) {
		ERRMSG("%s: cannot read the trace: %s", rp->dir, strerror(-err));
		status = err == -ENOMEM ? -ENOMEM : -EBADMSG;
		goto out;
	}
	while ((err = tp_trace_reader_next(r, &ev)) > 0) {
		struct tp_trace_summary_class *c = class_get(rp, ev->id, ev->name);

		if (!c) {
			ERRMSG("out of memory");
			status = -ENOMEM;
			break;
		}
		c->count++;
		if (!rp->events || ev->ts < rp->first)
			rp->first = ev->ts;
		if (!rp->events || ev->ts > rp->last)
			rp->last = ev->ts;
		rp->events++;
		s->events++;
	}
	if (err < 0) {
		ERRMSG("%s: corrupt trace: stream %s after %" PRIu64 " events: %s", rp->dir,
		       s->file, s->events, strerror(-err));
		status = -EBADMSG;
	}
	s->discarded = tp_trace_reader_discarded(r);
	rp->discarded += s->discarded;
	tp_trace_reader_close(r);
out:
	if (ms.size)
		munmap((void *)ms.data, ms.size);
	return status;
}

static int cmp_classes(const void *a, const void *b)
{
	const struct tp_trace_summary_class *x = a, *y = b;

	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	return strcmp(x->name, y->name);
}

int tp_trace_summary_read(struct tp_trace_summary *rp, const char *dir, size_t nr_streams)
{
	char *meta = NULL;
	size_t mlen = 0, n;
	int err, dirfd;

	memset(rp, 0, sizeof(*rp));
	rp->dir = dir;
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	err = dirfd < 0 ? -errno : tp_trace_dir_metadata(dirfd, &meta, &mlen);
	if (!err)
		err = list_streams(rp, dirfd);
	if (!err && rp->nr_st != nr_streams) {
		ERRMSG("%s: the stream files changed while they were read", dir);
		err = -EBADMSG;
		goto out;
	}
	if (err) {
		ERRMSG("%s: %s", dir, strerror(-err));
		err = err == -ENOMEM ? -ENOMEM : -EIO;
		goto out;
	}
	for (size_t i = 0; i < rp->nr_st && !err; i++)
		err = read_stream(rp, dirfd, meta, mlen, i);
	if (err)
		goto out;
	/* Compact the hash table into a sorted list. */
	n = 0;
	for (size_t i = 0; i < rp->cap_cls; i++) {
		struct tp_trace_summary_class c = rp->cls[i];

		if (!c.used)
			continue;
		rp->cls[i] = (struct tp_trace_summary_class){.used = false};
		rp->cls[n++] = c;
	}
	rp->nr_cls = n;
	if (n)
		qsort(rp->cls, n, sizeof(*rp->cls), cmp_classes);
out:
	free(meta);
	if (dirfd >= 0)
		close(dirfd);
	return err;
}

void tp_trace_summary_fini(struct tp_trace_summary *rp)
{
	for (size_t i = 0; i < rp->cap_cls; i++)
		free(rp->cls[i].name);
	free(rp->cls);
	for (size_t i = 0; i < rp->nr_st; i++)
		free(rp->st[i].file);
	free(rp->st);
	rp->cls = NULL;
	rp->st = NULL;
	rp->nr_st = rp->cap_cls = rp->nr_cls = 0;
}

double tp_trace_summary_rate(const struct tp_trace_summary *rp)
{
	uint64_t d = rp->last - rp->first;

	return d ? (double)rp->events * 1e9 / (double)d : 0.0;
}
