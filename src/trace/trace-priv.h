/* Internals shared by the files of src/trace: the binary layout of our CTF packets, the
 * shared-memory ring protocol, and the writer's stream interface used by the consumer. */
#ifndef TP_TRACE_PRIV_H
#define TP_TRACE_PRIV_H

#include "trace/trace.h"

/* Every field of our packets is little-endian and byte-aligned (align = 8 in the TSDL), so
 * a packet header + context is a fixed 76-byte prefix. */
#define TP_TRACE_MAGIC 0xC1FC1FC1u
#define TP_PKT_MAGIC 0
#define TP_PKT_UUID 4
#define TP_PKT_STREAM_ID 20
#define TP_PKT_TS_BEGIN 24
#define TP_PKT_TS_END 32
#define TP_PKT_CONTENT_SIZE 40 /* bits */
#define TP_PKT_PACKET_SIZE 48  /* bits */
#define TP_PKT_SEQ_NUM 56
#define TP_PKT_DISCARDED 64 /* cumulative for the stream, as LTTng does */
#define TP_PKT_PRODUCER 72
#define TP_PKT_HDR 76

#define TP_TRACE_MIN_PACKET 4096u
#define TP_TRACE_MAX_PACKET (64u << 20)

static inline uint64_t tp_get_u64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static inline uint32_t tp_get_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

/* Write the header and the context of a packet being opened. */
void tp_trace_packet_open(uint8_t *pkt, const uint8_t uuid[16], uint32_t producer,
			  uint64_t ts_begin);
/* Fill the context fields known when a packet is closed. */
void tp_trace_packet_close(uint8_t *pkt, uint32_t content, uint32_t size, uint64_t ts_end,
			   uint64_t discarded);

/* ---- Shared memory ------------------------------------------------------------------------
 * [header][ring control blocks][ring 0: nr_subbufs packets][ring 1]...
 * The consumer writes the header once before any producer maps the memfd, and only the cons
 * word of each control block afterwards; producers write the rest of the control blocks and
 * the packets.  Each side treats what the other wrote as untrusted.
 *
 * pos = seq << 32 | bytes.  bytes > 0: packet seq is open with that many committed bytes
 * (header included) and every packet before it is closed, its context complete.  bytes = 0:
 * no packet is open, the next one will be seq.  A producer opens packet seq only when
 * seq - cons < nr_subbufs, so pos never runs more than nr_subbufs ahead of cons. */
#define TP_SHM_MAGIC 0x31474e4952505455ull /* "UTPRING1" */
#define TP_SHM_VERSION 2

struct tp_shm_hdr {
	uint64_t magic;
	uint32_t version, hdr_size;
	uint32_t nr_rings, nr_subbufs, packet_size, flags;
	uint32_t clock, ring_ctl_size;
	uint64_t ctl_off, data_off, total_size, wait_ns;
	uint8_t uuid[16];
	uint32_t consumer_gone; /* set when the consumer goes away: no_loss stops waiting */
	uint32_t pad;
	uint64_t ringless; /* events of producers that found no free ring: discarded */
};

enum { TP_SHM_RING_FREE = 0, TP_SHM_RING_CLAIMED = 1 };

struct tp_shm_ring {
	/* Written by the producer. */
	uint64_t pos;
	uint64_t last_ts; /* of the last committed event */
	uint64_t discarded;
	uint32_t state;
	int32_t pid, tid;
	uint8_t pad0[64 - 36];
	/* Written by the consumer. */
	uint64_t cons; /* packets consumed */
	uint8_t pad1[56];
};

_Static_assert(sizeof(struct tp_shm_ring) == 128, "ring control block is two cache lines");

#define TP_SHM_MAX_RINGS 4096u
#define TP_SHM_MAX_SUBBUFS 4096u

/* Validates a header against the mapping size; 0 or -EINVAL.  Used by both sides. */
int tp_trace_shm_check(const struct tp_shm_hdr *h, size_t map_size);

/* ---- Writer internals used by the consumer ------------------------------------------- */

struct tp_trace_stream;

/* A new stream file in the trace directory, stream_N; @producer (the packets' producer_id)
 * UINT32_MAX means N. */
int tp_trace_writer_stream_new(struct tp_trace_writer *w, uint32_t producer,
			       struct tp_trace_stream **out);
/* Write one packet of @w's packet size from a private buffer: the framing fields (magic,
 * uuid, sizes, sequence number, producer id) are rewritten from what the writer knows,
 * timestamps and discard counts clamped to stay monotonic, the padding zeroed.  @content is
 * the committed size in bytes, already checked to lie in [TP_PKT_HDR, packet size]. */
int tp_trace_stream_write(struct tp_trace_writer *w, struct tp_trace_stream *st, uint8_t *pkt,
			  uint32_t content);
/* Discards the stream has recorded so far (its last packet's counter). */
uint64_t tp_trace_stream_discarded(const struct tp_trace_stream *st);
const uint8_t *tp_trace_writer_uuid(const struct tp_trace_writer *w);
/* Record an error for tp_trace_writer_close to return. */
void tp_trace_writer_error(struct tp_trace_writer *w, int err);

/* ---- Producer backends ------------------------------------------------------------------ */

bool tp_trace_writer_switch(struct tp_trace_producer *p, uint64_t total, uint64_t ts);
int tp_trace_writer_producer_fini(struct tp_trace_producer *p);
bool tp_trace_shm_switch(struct tp_trace_producer *p, uint64_t total, uint64_t ts);
int tp_trace_shm_producer_fini(struct tp_trace_producer *p);

/* ---- Metadata ------------------------------------------------------------------------- */

struct tp_trace_meta {
	uint8_t uuid[16];
	enum tp_trace_clock clock;
	uint64_t freq;	  /* Hz */
	int64_t offset_s; /* clock origin, seconds since the epoch */
	uint64_t offset;  /* plus this many cycles */
	const char *hostname;
};

/* TSDL text of a trace; *out is malloc'd and NUL-terminated. */
int tp_trace_metadata_format(const struct tp_trace_schema *s, const struct tp_trace_meta *m,
			     char **out, size_t *len);
void tp_trace_uuid_str(const uint8_t uuid[16], char out[37]);

#endif
