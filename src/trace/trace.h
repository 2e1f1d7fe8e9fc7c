/* The trace store: event classes, CTF 1.8 traces written from the tracer or drained from
 * per-thread ring buffers in shared memory, and a reader for the traces we write.  Formats
 * and the shared-memory protocol are described in trace-priv.h. */
#ifndef TP_TRACE_TRACE_H
#define TP_TRACE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ---- Event classes ---------------------------------------------------------------------- */

enum tp_trace_ftype {
	TP_TRACE_INT,	 /* integer of 8, 16, 32 or 64 bits */
	TP_TRACE_STRING, /* NUL-terminated */
	TP_TRACE_BYTES,	 /* uint32 length, then that many bytes */
	TP_TRACE_ARRAY,	 /* a fixed count of integers (register blocks) */
	TP_TRACE_SEQ,	 /* uint32 count, then that many integers */
	TP_TRACE_FLOAT,	 /* IEEE-754 binary32 or binary64 (bits = 32 or 64) */
};

struct tp_trace_field_desc {
	const char *name; /* [A-Za-z][A-Za-z0-9_]*, at most TP_TRACE_NAME_MAX */
	enum tp_trace_ftype type;
	uint8_t bits; /* INT, ARRAY, SEQ: 8, 16, 32 or 64; FLOAT: 32 or 64 */
	bool is_signed;
	uint8_t base;	/* display base: 10 (0 means 10) or 16 */
	uint32_t count; /* ARRAY only */
};

#define TP_TRACE_NAME_MAX 127
#define TP_TRACE_MAX_FIELDS 64
#define TP_TRACE_MAX_CLASSES 65535

struct tp_trace_schema;

struct tp_trace_schema *tp_trace_schema_new(void);
void tp_trace_schema_free(struct tp_trace_schema *s);
/* Returns the new class id (ids are dense, from 0) or -errno. */
int tp_trace_schema_add(struct tp_trace_schema *s, const char *name,
			const struct tp_trace_field_desc *fields, size_t nr_fields);
int tp_trace_schema_find(const struct tp_trace_schema *s, const char *name);
size_t tp_trace_schema_count(const struct tp_trace_schema *s);
const char *tp_trace_schema_name(const struct tp_trace_schema *s, unsigned int id);
/* Fields of class @id; NULL if there is no such class. */
const struct tp_trace_field_desc *tp_trace_schema_fields(const struct tp_trace_schema *s,
							 unsigned int id, size_t *nr_fields);

/* ---- Encoding helpers for payloads (little-endian, no alignment: every CTF field we
 * declare has align = 8 bits) ------------------------------------------------------------ */

static inline uint8_t *tp_trace_put_u8(uint8_t *p, uint8_t v)
{
	*p = v;
	return p + 1;
}

static inline uint8_t *tp_trace_put_u16(uint8_t *p, uint16_t v)
{
	memcpy(p, &v, 2);
	return p + 2;
}

static inline uint8_t *tp_trace_put_u32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
	return p + 4;
}

static inline uint8_t *tp_trace_put_u64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
	return p + 8;
}

/* A FLOAT field of 64 bits. */
static inline uint8_t *tp_trace_put_f64(uint8_t *p, double v)
{
	memcpy(p, &v, 8);
	return p + 8;
}

/* A string field takes len + 1 bytes. */
static inline uint8_t *tp_trace_put_str(uint8_t *p, const char *s, size_t len)
{
	memcpy(p, s, len);
	p[len] = 0;
	return p + len + 1;
}

/* A BYTES field takes 4 + len bytes; a SEQ field 4 + count * elem_size. */
static inline uint8_t *tp_trace_put_bytes(uint8_t *p, const void *data, uint32_t len)
{
	p = tp_trace_put_u32(p, len);
	memcpy(p, data, len);
	return p + len;
}

/* ---- Producers ----------------------------------------------------------------------------
 * A producer owns one stream: the tracer writes straight to a stream file (writer
 * backend), a thread of a traced program writes into its ring buffer in shared memory (shm
 * backend).  Both fill CTF packets in place with the same code:
 *
 *	p = tp_trace_reserve(prod, id, 12);
 *	if (p) { p = tp_trace_put_u32(p, fd); tp_trace_put_u64(p, addr); tp_trace_commit(prod); }
 *
 * reserve takes no lock and makes no system call unless the packet is full.  A NULL return
 * means the event was discarded and counted.  One thread at a time per producer; reserve
 * must be followed by commit (or by another reserve, which abandons the first). */

enum tp_trace_clock {
	TP_TRACE_CLOCK_MONOTONIC = 0, /* clock_gettime(CLOCK_MONOTONIC) through the vDSO */
	TP_TRACE_CLOCK_TSC,	      /* raw rdtsc; the metadata clock has the TSC frequency */
};

/* TSC when the kernel itself keeps time with it (so it found it stable and synchronized
 * across CPUs), else the monotonic clock.  rdtsc costs about 40% of a vDSO clock_gettime. */
enum tp_trace_clock tp_trace_clock_best(void);

#define TP_TRACE_EVENT_HDR 18 /* id u16, timestamp u64, pid s32, tid s32 */

struct tp_trace_producer {
	/* Hot fields, used inline. */
	uint8_t *buf;	   /* current packet */
	uint32_t off;	   /* committed bytes in it */
	uint32_t limit;	   /* packet size, or 0 while no packet is open */
	uint32_t pending;  /* size of the reserved event */
	uint32_t clock;	   /* enum tp_trace_clock */
	uint64_t last_ts;  /* timestamp of the last committed event */
	uint64_t pend_ts;  /* timestamp of the reserved event */
	uint64_t pos_hi;   /* shm: packet sequence number << 32 */
	uint64_t *shm_pos; /* shm: the ring's position word, NULL for the writer backend */
	uint64_t *shm_ts;  /* shm: the ring's last committed timestamp */
	int32_t pid, tid;  /* put in every event by tp_trace_reserve */
	/* Slow path state.  slow and fini are the backend's packet switch and close; both
	 * NULL in a zeroed producer, which discards everything (tracing off). */
	bool (*slow)(struct tp_trace_producer *p, uint64_t total, uint64_t ts);
	int (*fini)(struct tp_trace_producer *p);
	uint32_t ring;		  /* shm: ring index */
	uint64_t seq;		  /* sequence number of the current (or next) packet */
	uint64_t discarded;	  /* events discarded so far on this stream */
	uint64_t nr_events;	  /* events committed in the current packet */
	uint32_t packet_size;	  /* bytes */
	uint32_t flags;		  /* TP_TRACE_NO_LOSS */
	uint64_t wait_ns;	  /* no_loss: give up (and discard) after this long; 0: never */
	uint8_t *data;		  /* shm: first sub-buffer of the ring; writer: its stream */
	uint32_t nr_subbufs;	  /* shm */
	uint32_t stream_id;	  /* producer id put in the packet context */
	const uint64_t *shm_cons; /* shm: sub-buffers consumed so far, written by the consumer */
	uint64_t *shm_discarded;
	uint32_t *shm_state;
	uint8_t uuid[16];
	void *priv; /* writer backend: the writer; shm: the shared header */
};

/* Monotonic timestamp in the producer's clock.  Both clocks are vDSO/instruction reads.
 * (The cycle counter belongs in arch/arch.h once it offers one.) */
static inline uint64_t tp_trace_clock_now(uint32_t clock)
{
	struct timespec t;

#if defined(__x86_64__)
	if (clock == TP_TRACE_CLOCK_TSC) {
		uint32_t lo, hi;

		__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
		return (uint64_t)hi << 32 | lo;
	}
#endif
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The packet switch: false when the event must be discarded (it has been counted). */
bool tp_trace_reserve_slow(struct tp_trace_producer *p, uint64_t total, uint64_t ts);

/* Reserve room for an event with a payload of @size bytes, with an explicit timestamp
 * (clamped so that a stream never goes back in time) and task ids: the tracer describes
 * other processes' threads. */
static inline void *tp_trace_reserve_at(struct tp_trace_producer *p, uint16_t id, uint32_t size,
					uint64_t ts, int32_t pid, int32_t tid)
{
	uint64_t total = (uint64_t)TP_TRACE_EVENT_HDR + size;
	uint8_t *e;

	if (ts < p->last_ts)
		ts = p->last_ts;
	if (__builtin_expect(total > p->limit - p->off, 0)) {
		if (!tp_trace_reserve_slow(p, total, ts))
			return NULL;
	}
	e = p->buf + p->off;
	memcpy(e, &id, 2);
	memcpy(e + 2, &ts, 8);
	memcpy(e + 10, &pid, 4);
	memcpy(e + 14, &tid, 4);
	p->pending = (uint32_t)total;
	p->pend_ts = ts;
	return e + TP_TRACE_EVENT_HDR;
}

static inline void *tp_trace_reserve(struct tp_trace_producer *p, uint16_t id, uint32_t size)
{
	return tp_trace_reserve_at(p, id, size, tp_trace_clock_now(p->clock), p->pid, p->tid);
}

/* Publish the reserved event.  For the shm backend the release store is what makes it
 * visible to the consumer, and what makes it survive a SIGKILL of this process. */
static inline void tp_trace_commit(struct tp_trace_producer *p)
{
	p->off += p->pending;
	p->pending = 0;
	p->last_ts = p->pend_ts;
	p->nr_events++;
	if (p->shm_pos) {
		__atomic_store_n(p->shm_ts, p->last_ts, __ATOMIC_RELAXED);
		__atomic_store_n(p->shm_pos, p->pos_hi | p->off, __ATOMIC_RELEASE);
	}
}

/* Close the producer: the writer backend writes its partial packet, the shm backend closes
 * its packet and gives the ring back.  Returns 0 or -errno (I/O error of the writer). */
int tp_trace_producer_fini(struct tp_trace_producer *p);

/* ---- Writer: a trace directory --------------------------------------------------------- */

struct tp_trace_writer;

struct tp_trace_opts {
	uint32_t packet_size;	   /* bytes, multiple of 8, >= 4096; 0: 64 KiB */
	enum tp_trace_clock clock; /* clock of the producers */
	const char *hostname;	   /* env.hostname; NULL: uname's */
};

#define TP_TRACE_DEFAULT_PACKET (64u * 1024)

/* Creates @dir (mode 0755 less the umask) if it does not exist; refuses a directory that
 * already holds a trace.  The writer owns an empty event-class registry. */
int tp_trace_writer_new(const char *dir, const struct tp_trace_opts *opts,
			struct tp_trace_writer **out);
/* Writes the final metadata, closes every stream; returns the first error seen by any
 * stream or producer of this writer.  Frees @w in every case. */
int tp_trace_writer_close(struct tp_trace_writer *w);
/* Same without reporting errors; accepts NULL. */
void tp_trace_writer_free(struct tp_trace_writer *w);

struct tp_trace_schema *tp_trace_writer_schema(struct tp_trace_writer *w);
/* tp_trace_schema_add on the writer's registry; the metadata is rewritten at the next
 * tp_trace_writer_sync. */
int tp_trace_writer_add_class(struct tp_trace_writer *w, const char *name,
			      const struct tp_trace_field_desc *fields, size_t nr_fields);
/* Writes the metadata file now (atomically replaced) if classes were added. */
int tp_trace_writer_sync(struct tp_trace_writer *w);
uint32_t tp_trace_writer_packet_size(const struct tp_trace_writer *w);
enum tp_trace_clock tp_trace_writer_clock(const struct tp_trace_writer *w);

/* A tracer-side producer writing a new stream file of @w. */
int tp_trace_writer_producer_init(struct tp_trace_writer *w, struct tp_trace_producer *p);
/* Write the open packet of tracer-side producer @p now if it holds events and was opened
 * @age clock units ago or more, so that a reader of the growing trace sees them (a live
 * reader); the packet is padded to the packet size.  Returns 0 or -errno. */
int tp_trace_writer_producer_flush(struct tp_trace_producer *p, uint64_t age);

/* ---- Shared-memory ring buffers -------------------------------------------------------- */

#define TP_TRACE_NO_LOSS 0x1u /* a full ring makes the producer wait instead of discarding */

struct tp_trace_ring_opts {
	uint32_t nr_rings;   /* producers (threads) at a time; 0: 16 */
	uint32_t nr_subbufs; /* packets per ring, >= 2; 0: 8 */
	uint32_t flags;	     /* TP_TRACE_NO_LOSS */
	uint64_t wait_ns;    /* no_loss: discard after waiting this long; 0: wait forever */
};

/* The producer side's view of the shared memory: filled by tp_trace_shm_attach, which
 * validates the consumer's header and keeps a private copy of the geometry. */
struct tp_trace_shm {
	uint8_t *base;
	size_t size;
	uint32_t nr_rings, nr_subbufs, packet_size, flags, clock;
	uint64_t ctl_off, data_off, wait_ns;
	uint8_t uuid[16];
};

/* Map the consumer's memfd.  No malloc, no stdio: safe for the agent. */
int tp_trace_shm_attach(struct tp_trace_shm *shm, int fd);
void tp_trace_shm_detach(struct tp_trace_shm *shm);
/* Claim a free ring for the calling thread; -EBUSY when every ring is taken. */
int tp_trace_shm_producer_init(struct tp_trace_shm *shm, struct tp_trace_producer *p);
/* Count @n events of a thread that has no ring (every ring taken, or it is exiting) as
 * discarded: the consumer gives them their own stream's discard count, so that readers
 * account for them. */
void tp_trace_shm_discard_ringless(struct tp_trace_shm *shm, uint64_t n);

/* ---- Consumer: drains rings into the stream files of a writer -------------------------- */

struct tp_trace_consumer;

int tp_trace_consumer_new(struct tp_trace_writer *w, const struct tp_trace_ring_opts *opts,
			  struct tp_trace_consumer **out);
/* The memfd to give to producers (close-on-exec; dup it to pass it across exec). */
int tp_trace_consumer_fd(const struct tp_trace_consumer *c);
/* Copy every full packet to its stream file.  Returns the number of packets written or
 * -errno; a ring whose producer broke the protocol is dropped with a warning. */
int tp_trace_consumer_poll(struct tp_trace_consumer *c);
/* Final drain once producers are done (exited, stopped or killed): also writes each open
 * packet with what was committed in it, and records discards that no packet carries yet. */
int tp_trace_consumer_flush(struct tp_trace_consumer *c);
void tp_trace_consumer_free(struct tp_trace_consumer *c);

/* ---- Formatting recorded values ---------------------------------------------------------
 * The printf conversions d i u x X o c s p f F e E g G a A and %%, with flags, width and
 * precision, applied to typed values; length modifiers are ignored because the type is
 * known.  @types has one code per value, those of <tracepad/tracepoint.h>: b h i l signed
 * integers of 8..64 bits, B H I L unsigned, p pointer, d double, s string.  A conversion
 * without a value prints "<?>"; %s of a value that is not a string "<not a string>".
 * Returns the length of the whole text (snprintf-like); @buf is NUL-terminated if @len > 0. */
union tp_trace_value {
	int64_t i;  /* signed codes, sign-extended */
	uint64_t u; /* unsigned codes and pointers */
	double d;
	const char *s;
};

int tp_trace_format(const char *fmt, const char *types, const union tp_trace_value *args,
		    size_t nargs, char *buf, size_t len);

/* ---- Reader ----------------------------------------------------------------------------- */

struct tp_trace_reader;

struct tp_trace_field {
	const char *name; /* as babeltrace2 prints it: without the TSDL escape underscore */
	enum tp_trace_ftype type;
	uint8_t bits, base;
	bool is_signed;
	union {
		uint64_t u; /* INT; signed values are sign-extended */
		int64_t s;
		double d; /* FLOAT (a binary32 is widened) */
	};
	const char *label;   /* INT of an enumeration: the value's label, or NULL */
	const char *str;     /* STRING (also text arrays: NUL-terminated copies) */
	const uint8_t *data; /* BYTES, ARRAY, SEQ: raw elements, see tp_trace_field_elem */
	uint32_t count;	     /* BYTES: length; ARRAY, SEQ: element count */
	bool big_endian;
};

struct tp_trace_event {
	const char *name;
	uint32_t id;
	uint32_t stream; /* index of the stream (file) in the trace */
	uint64_t ts;	 /* ns since the epoch */
	uint64_t cycles; /* the raw clock value */
	int64_t pid, tid;
	const struct tp_trace_field *fields;
	uint32_t nr_fields;
};

struct tp_trace_mem_stream {
	const void *data;
	size_t size;
};

int tp_trace_reader_open(const char *dir, struct tp_trace_reader **out);
/* What tp_trace_reader_open reads in a trace directory, for tools that read it apart: the
 * metadata text (malloc'ed, NUL-terminated), and the stream files (regular files not
 * starting with a dot, other than the metadata, in version order; malloc'ed names in a
 * malloc'ed array).  Return 0 or -errno. */
int tp_trace_dir_metadata(int dirfd, char **out, size_t *len);
int tp_trace_dir_streams(int dirfd, char ***names, size_t *nr);
/* Over a metadata text and stream buffers, which must outlive the reader. */
int tp_trace_reader_open_mem(const char *metadata, size_t len,
			     const struct tp_trace_mem_stream *streams, size_t nr_streams,
			     struct tp_trace_reader **out);
void tp_trace_reader_close(struct tp_trace_reader *r);
/* 1 with *ev valid until the next call, 0 at the end, -errno on malformed input (once per
 * bad stream; the others can still be read). Events of all streams come in timestamp order. */
int tp_trace_reader_next(struct tp_trace_reader *r, const struct tp_trace_event **ev);
/* After tp_trace_reader_next returned -errno: the stream file it came from (NULL for a
 * trace in memory) and, in *offset, the byte where its reading stopped.  Only that stream
 * ends: the next calls go on with the others. */
const char *tp_trace_reader_error_at(const struct tp_trace_reader *r, uint64_t *offset);
/* Events the producers discarded, as recorded by the packets read so far. */
uint64_t tp_trace_reader_discarded(const struct tp_trace_reader *r);
size_t tp_trace_reader_nr_streams(const struct tp_trace_reader *r);
/* Element @i of an ARRAY/SEQ/BYTES field (sign-extended for signed elements); 0 when out of
 * range. */
uint64_t tp_trace_field_elem(const struct tp_trace_field *f, uint32_t i);
const struct tp_trace_field *tp_trace_event_field(const struct tp_trace_event *ev,
						  const char *name);

#endif
