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
	uint64_t *i = tp_hash_get(&rp->cls_index, id);
	struct tp_trace_summary_class *c;

	if (i)
		return &rp->cls[*i];
	if (rp->nr_cls == rp->cap_cls) {
		size_t ncap = rp->cap_cls ? rp->cap_cls * 2 : 64;

		c = realloc(rp->cls, ncap * sizeof(*c));
		if (!c)
			return NULL;
		rp->cls = c;
		rp->cap_cls = ncap;
	}
	c = &rp->cls[rp->nr_cls];
	*c = (struct tp_trace_summary_class){.id = id, .name = strdup(name)};
	if (!c->name)
		return NULL;
	if (tp_hash_put(&rp->cls_index, id, rp->nr_cls)) {
		free(c->name);
		return NULL;
	}
	rp->nr_cls++;
	return c;
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
	size_t mlen = 0;
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
	tp_hash_release(&rp->cls_index); /* the order changes: indexes are stale */
	if (rp->nr_cls)
		qsort(rp->cls, rp->nr_cls, sizeof(*rp->cls), cmp_classes);
out:
	free(meta);
	if (dirfd >= 0)
		close(dirfd);
	return err;
}

void tp_trace_summary_fini(struct tp_trace_summary *rp)
{
	for (size_t i = 0; i < rp->nr_cls; i++)
		free(rp->cls[i].name);
	free(rp->cls);
	tp_hash_release(&rp->cls_index);
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
