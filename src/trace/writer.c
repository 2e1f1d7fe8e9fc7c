/* The CTF writer: a trace directory with its metadata and one stream file per producer.
 * Packets reach the files through tp_trace_stream_write, from the tracer's own producers
 * (below) or from the consumer of the shared-memory rings. */
#include "trace/trace-priv.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

struct tp_trace_stream {
	int fd;
	uint32_t producer;
	uint64_t seq_num;
	uint64_t discarded;
	uint64_t ts_end;
	uint64_t offset;
};

struct tp_trace_writer {
	int dirfd;
	struct tp_trace_schema *schema;
	struct tp_trace_meta meta;
	char hostname[65];
	uint32_t packet_size;
	size_t classes_written; /* by the last metadata write; SIZE_MAX before the first */
	pthread_mutex_t lock;	/* streams and the error, for tracers with several threads */
	struct tp_trace_stream **streams;
	size_t nr_streams, cap;
	int error;
	/* TSC clock: calibration start and the anchor of the clock offset. */
	uint64_t tsc_a, raw_a, tsc_b;
	int64_t real_b;
};

static int64_t ts_ns(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Clock offset such that origin + value / freq is the time since the epoch. */
static void set_offset(struct tp_trace_writer *w, int64_t off_ns)
{
	int64_t s = off_ns / 1000000000, ns = off_ns % 1000000000;

	if (ns < 0) {
		s--;
		ns += 1000000000;
	}
	w->meta.offset_s = s;
	w->meta.offset = (uint64_t)((unsigned __int128)ns * w->meta.freq / 1000000000u);
}

static void tsc_offset(struct tp_trace_writer *w)
{
	unsigned __int128 b_ns = (unsigned __int128)w->tsc_b * 1000000000u / w->meta.freq;

	set_offset(w, w->real_b - (int64_t)b_ns);
}

/* TSC frequency against CLOCK_MONOTONIC_RAW; refined at close over the whole trace. */
static void tsc_calibrate(struct tp_trace_writer *w, bool final)
{
	uint64_t tsc = tp_trace_clock_now(TP_TRACE_CLOCK_TSC);
	int64_t raw = ts_ns(CLOCK_MONOTONIC_RAW);

	if (!final) {
		w->tsc_a = tsc;
		w->raw_a = raw;
		do {
			raw = ts_ns(CLOCK_MONOTONIC_RAW);
		} while (raw - (int64_t)w->raw_a < 20000000);
		tsc = tp_trace_clock_now(TP_TRACE_CLOCK_TSC);
		w->real_b = ts_ns(CLOCK_REALTIME);
		w->tsc_b = tsc;
	} else if (raw - (int64_t)w->raw_a < 1000000000) {
		return;
	}
	w->meta.freq = (uint64_t)((unsigned __int128)(tsc - w->tsc_a) * 1000000000u /
				  (uint64_t)(raw - (int64_t)w->raw_a));
	if (!w->meta.freq)
		w->meta.freq = 1;
	tsc_offset(w);
}

static void clock_init(struct tp_trace_writer *w)
{
	if (w->meta.clock == TP_TRACE_CLOCK_TSC) {
		tsc_calibrate(w, false);
	} else {
		int64_t m0 = ts_ns(CLOCK_MONOTONIC), r = ts_ns(CLOCK_REALTIME);
		int64_t m1 = ts_ns(CLOCK_MONOTONIC);

		w->meta.freq = 1000000000u;
		set_offset(w, r - (m0 + (m1 - m0) / 2));
	}
}

enum tp_trace_clock tp_trace_clock_best(void)
{
	char buf[16] = "";
	int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
		      O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, buf, sizeof(buf) - 1) < 0)
			buf[0] = 0;
		close(fd);
	}
	return !strcmp(buf, "tsc\n") ? TP_TRACE_CLOCK_TSC : TP_TRACE_CLOCK_MONOTONIC;
}

static int open_dir(const char *dir)
{
	struct stat st;
	int fd;

	if (mkdir(dir, 0755) && errno != EEXIST)
		return -errno;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || (st.st_mode & S_IWOTH) || st.st_uid != geteuid()) {
		close(fd);
		return -EPERM;
	}
	if (!faccessat(fd, "metadata", F_OK, AT_SYMLINK_NOFOLLOW)) {
		close(fd);
		return -EEXIST;
	}
	return fd;
}

int tp_trace_writer_new(const char *dir, const struct tp_trace_opts *opts,
			struct tp_trace_writer **out)
{
	struct tp_trace_writer *w;
	struct utsname u;
	int err;

	if (opts && opts->packet_size &&
	    (opts->packet_size % 8 || opts->packet_size < TP_TRACE_MIN_PACKET ||
	     opts->packet_size > TP_TRACE_MAX_PACKET))
		return -EINVAL;
	if (opts && opts->clock != TP_TRACE_CLOCK_MONOTONIC && opts->clock != TP_TRACE_CLOCK_TSC)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->classes_written = SIZE_MAX;
	w->packet_size = opts && opts->packet_size ? opts->packet_size : TP_TRACE_DEFAULT_PACKET;
	w->meta.clock = opts ? opts->clock : TP_TRACE_CLOCK_MONOTONIC;
	if (opts && opts->hostname)
		snprintf(w->hostname, sizeof(w->hostname), "%s", opts->hostname);
	else if (!uname(&u))
		snprintf(w->hostname, sizeof(w->hostname), "%s", u.nodename);
	w->meta.hostname = w->hostname;
	if (getrandom(w->meta.uuid, 16, 0) != 16) {
		err = -EIO;
		goto err_free;
	}
	w->meta.uuid[6] = (w->meta.uuid[6] & 0x0f) | 0x40; /* RFC 4122 version 4 */
	w->meta.uuid[8] = (w->meta.uuid[8] & 0x3f) | 0x80;
	w->schema = tp_trace_schema_new();
	if (!w->schema) {
		err = -ENOMEM;
		goto err_free;
	}
	w->dirfd = open_dir(dir);
	if (w->dirfd < 0) {
		err = w->dirfd;
		goto err_schema;
	}
	pthread_mutex_init(&w->lock, NULL);
	clock_init(w);
	err = tp_trace_writer_sync(w);
	if (err)
		goto err_dir;
	*out = w;
	return 0;

err_dir:
	close(w->dirfd);
	pthread_mutex_destroy(&w->lock);
err_schema:
	tp_trace_schema_free(w->schema);
err_free:
	free(w);
	return err;
}

static int write_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Readers may look at the trace while it is written: replace the metadata atomically. */
static int write_metadata(struct tp_trace_writer *w)
{
	char *text;
	size_t len;
	int fd, err;

	err = tp_trace_metadata_format(w->schema, &w->meta, &text, &len);
	if (err)
		return err;
	unlinkat(w->dirfd, ".metadata.tmp", 0);
	fd = openat(w->dirfd, ".metadata.tmp", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		err = -errno;
		goto out;
	}
	err = write_all(fd, text, len, 0);
	if (close(fd) && !err)
		err = -errno;
	if (!err && renameat(w->dirfd, ".metadata.tmp", w->dirfd, "metadata"))
		err = -errno;
	if (err)
		unlinkat(w->dirfd, ".metadata.tmp", 0);
out:
	free(text);
	return err;
}

int tp_trace_writer_sync(struct tp_trace_writer *w)
{
	size_t n = tp_trace_schema_count(w->schema);
	int err;

	if (w->classes_written == n)
		return 0;
	err = write_metadata(w);
	if (!err)
		w->classes_written = n;
	return err;
}

struct tp_trace_schema *tp_trace_writer_schema(struct tp_trace_writer *w)
{
	return w->schema;
}

int tp_trace_writer_add_class(struct tp_trace_writer *w, const char *name,
			      const struct tp_trace_field_desc *fields, size_t nr_fields)
{
	return tp_trace_schema_add(w->schema, name, fields, nr_fields);
}

uint32_t tp_trace_writer_packet_size(const struct tp_trace_writer *w)
{
	return w->packet_size;
}

enum tp_trace_clock tp_trace_writer_clock(const struct tp_trace_writer *w)
{
	return w->meta.clock;
}

const uint8_t *tp_trace_writer_uuid(const struct tp_trace_writer *w)
{
	return w->meta.uuid;
}

void tp_trace_writer_error(struct tp_trace_writer *w, int err)
{
	pthread_mutex_lock(&w->lock);
	if (!w->error)
		w->error = err;
	pthread_mutex_unlock(&w->lock);
}

int tp_trace_writer_stream_new(struct tp_trace_writer *w, uint32_t producer,
			       struct tp_trace_stream **out)
{
	struct tp_trace_stream *st;
	char name[32];
	int err = 0;

	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	pthread_mutex_lock(&w->lock);
	st->producer = producer == UINT32_MAX ? (uint32_t)w->nr_streams : producer;
	if (w->nr_streams == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 16;
		struct tp_trace_stream **ns = realloc(w->streams, cap * sizeof(*ns));

		if (!ns) {
			err = -ENOMEM;
			goto out;
		}
		w->streams = ns;
		w->cap = cap;
	}
	snprintf(name, sizeof(name), "stream_%zu", w->nr_streams);
	st->fd = openat(w->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (st->fd < 0) {
		err = -errno;
		goto out;
	}
	w->streams[w->nr_streams++] = st;
out:
	pthread_mutex_unlock(&w->lock);
	if (err) {
		free(st);
		return err;
	}
	*out = st;
	return 0;
}

int tp_trace_stream_write(struct tp_trace_writer *w, struct tp_trace_stream *st, uint8_t *pkt,
			  uint32_t content)
{
	uint32_t size = w->packet_size;
	uint64_t begin = tp_get_u64(pkt + TP_PKT_TS_BEGIN), end = tp_get_u64(pkt + TP_PKT_TS_END);
	uint64_t discarded = tp_get_u64(pkt + TP_PKT_DISCARDED);
	int err;

	if (content < TP_PKT_HDR || content > size)
		return -EINVAL;
	if (begin < st->ts_end)
		begin = st->ts_end;
	if (end < begin)
		end = begin;
	if (discarded < st->discarded)
		discarded = st->discarded;
	if (!st->seq_num && discarded) {
		/* babeltrace2 counts discards as the difference with the previous packet and
		 * only says "may have discarded" for a first packet: give it a zero to start. */
		uint8_t *zero = calloc(1, size);

		if (!zero)
			return -ENOMEM;
		tp_trace_packet_open(zero, w->meta.uuid, st->producer, begin);
		tp_trace_packet_close(zero, TP_PKT_HDR, size, begin, 0);
		err = write_all(st->fd, zero, size, st->offset);
		free(zero);
		if (err) {
			tp_trace_writer_error(w, err);
			return err;
		}
		st->offset += size;
		st->seq_num++;
	}
	tp_trace_packet_open(pkt, w->meta.uuid, st->producer, begin);
	tp_trace_packet_close(pkt, content, size, end, discarded);
	tp_trace_put_u64(pkt + TP_PKT_SEQ_NUM, st->seq_num);
	memset(pkt + content, 0, size - content);
	err = write_all(st->fd, pkt, size, st->offset);
	if (err) {
		tp_trace_writer_error(w, err);
		return err;
	}
	st->offset += size;
	st->seq_num++;
	st->ts_end = end;
	st->discarded = discarded;
	return 0;
}

uint64_t tp_trace_stream_discarded(const struct tp_trace_stream *st)
{
	return st->discarded;
}

int tp_trace_writer_close(struct tp_trace_writer *w)
{
	int err;

	if (!w)
		return 0;
	if (w->meta.clock == TP_TRACE_CLOCK_TSC)
		tsc_calibrate(w, true);
	err = write_metadata(w);
	pthread_mutex_lock(&w->lock);
	if (w->error)
		err = w->error;
	pthread_mutex_unlock(&w->lock);
	for (size_t i = 0; i < w->nr_streams; i++) {
		if (close(w->streams[i]->fd) && !err)
			err = -errno;
		free(w->streams[i]);
	}
	free(w->streams);
	close(w->dirfd);
	pthread_mutex_destroy(&w->lock);
	tp_trace_schema_free(w->schema);
	free(w);
	return err;
}

void tp_trace_writer_free(struct tp_trace_writer *w)
{
	tp_trace_writer_close(w);
}

/* ---- The tracer's producers: packets built in a private buffer, written when full ---- */

int tp_trace_writer_producer_init(struct tp_trace_writer *w, struct tp_trace_producer *p)
{
	struct tp_trace_stream *st;
	int err;

	memset(p, 0, sizeof(*p));
	err = tp_trace_writer_stream_new(w, UINT32_MAX, &st);
	if (err)
		return err;
	p->buf = malloc(w->packet_size);
	if (!p->buf)
		return -ENOMEM; /* the stream stays empty and is closed with the writer */
	p->slow = tp_trace_writer_switch;
	p->fini = tp_trace_writer_producer_fini;
	p->priv = w;
	p->data = (uint8_t *)st;
	p->packet_size = w->packet_size;
	p->clock = w->meta.clock;
	p->stream_id = st->producer;
	p->pid = getpid();
	p->tid = gettid();
	memcpy(p->uuid, w->meta.uuid, 16);
	return 0;
}

static int writer_flush(struct tp_trace_producer *p)
{
	struct tp_trace_writer *w = p->priv;
	int err;

	tp_trace_packet_close(p->buf, p->off, p->packet_size, p->last_ts, p->discarded);
	err = tp_trace_stream_write(w, (struct tp_trace_stream *)p->data, p->buf, p->off);
	if (err)
		p->discarded += p->nr_events; /* lost with the packet; never silently */
	p->limit = 0;
	p->off = 0;
	p->nr_events = 0;
	return err;
}

static void writer_open(struct tp_trace_producer *p, uint64_t ts)
{
	tp_trace_packet_open(p->buf, p->uuid, p->stream_id, ts);
	p->off = TP_PKT_HDR;
	p->limit = p->packet_size;
}

bool tp_trace_writer_switch(struct tp_trace_producer *p, uint64_t total, uint64_t ts)
{
	if (total > p->packet_size - TP_PKT_HDR) {
		p->discarded++;
		return false;
	}
	if (p->limit)
		writer_flush(p);
	writer_open(p, ts);
	return true;
}

int tp_trace_writer_producer_flush(struct tp_trace_producer *p, uint64_t age)
{
	uint64_t begin;
	int err;

	if (!p->limit || p->off <= TP_PKT_HDR)
		return 0;
	begin = tp_get_u64(p->buf + TP_PKT_TS_BEGIN);
	if (tp_trace_clock_now(p->clock) - begin < age)
		return 0;
	/* the classes of its events first (a no-op once written), for a reader of the
	 * growing trace; the next reserve opens a new packet (p->limit 0) */
	err = tp_trace_writer_sync(p->priv);
	return err ? err : writer_flush(p);
}

int tp_trace_writer_producer_fini(struct tp_trace_producer *p)
{
	const struct tp_trace_stream *st = (const struct tp_trace_stream *)p->data;
	int err = 0;

	if (!p->limit && p->discarded > st->discarded) {
		uint64_t now = tp_trace_clock_now(p->clock);

		writer_open(p, now > p->last_ts ? now : p->last_ts);
	}
	if (p->limit && (p->off > TP_PKT_HDR || p->discarded > st->discarded))
		err = writer_flush(p);
	free(p->buf);
	memset(p, 0, sizeof(*p));
	return err;
}
