/* What libtracepad and `tracepad markers record` share besides the rings: the control table
 * (a memfd tracepad creates, where the runtime declares the event classes and format strings
 * of the sites it registers, so classes of libraries dlopen'ed later reach the trace), and
 * the remote block, a variable of libtracepad that tracepad writes over ptrace to start and
 * stop recording a running process.  Layouts are x86-64, both sides compiled from this file;
 * each side treats what the other wrote as untrusted. */
#ifndef TP_MARKERS_CTL_H
#define TP_MARKERS_CTL_H

#include <stddef.h>
#include <stdint.h>

/* ---- the control table ----
 * [hdr][classes: nr_classes entries][formats: nr_formats entries].  A runtime claims an entry
 * with an atomic increment of next_class/next_format (several processes may share the table:
 * an exec'ed child inherits it), fills it, then sets ready with a release store.  An entry's
 * index is its id: the event class id in the rings, the "fmt" field of an event.  tracepad
 * adds the classes to the trace in index order, the formats go to the trace's .formats. */
#define TP_MCTL_MAGIC 0x314c54434b52414dull /* "MARKCTL1" */
#define TP_MCTL_VERSION 1
#define TP_MCTL_CLASSES 2048u
#define TP_MCTL_FORMATS 4096u
#define TP_MCTL_NAME_MAX 112 /* with the NUL */
#define TP_MCTL_TYPES_MAX 12 /* with the NUL; at most TP_MAX_ARGS codes are used */
#define TP_MCTL_FMT_MAX 500  /* with the NUL; longer formats are cut */

struct tp_mctl_hdr {
	uint64_t magic;
	uint32_t version, hdr_size;
	uint32_t nr_classes, nr_formats;
	uint64_t classes_off, formats_off, total_size;
	uint32_t next_class, next_format; /* claimed so far (may exceed the capacity) */
	uint32_t dropped;		  /* sites left without a class: table full, bad name */
	uint32_t pad;
};

struct tp_mctl_class {
	uint32_t ready;
	char types[TP_MCTL_TYPES_MAX];
	char name[TP_MCTL_NAME_MAX];
};

struct tp_mctl_format {
	uint32_t ready;
	uint32_t class_id;
	uint32_t truncated;
	char fmt[TP_MCTL_FMT_MAX];
};

_Static_assert(sizeof(struct tp_mctl_class) == 128, "class entry");
_Static_assert(sizeof(struct tp_mctl_format) == 512, "format entry");

#define TP_MCTL_CLASSES_OFF 64ull
#define TP_MCTL_FORMATS_OFF (TP_MCTL_CLASSES_OFF + TP_MCTL_CLASSES * 128ull)
#define TP_MCTL_SIZE (TP_MCTL_FORMATS_OFF + TP_MCTL_FORMATS * 512ull)

/* ---- the remote block: `tp__markers_remote` in libtracepad ----
 * To start a session, tracepad stops every thread, writes tracer_pid, ring_fd and ctl_fd
 * (its own descriptors of the two memfds) and then increments req.  The runtime acts on it
 * at the next event, registration or enable/disable call of the process: it opens
 * /proc/<tracer_pid>/fd/<fd> for both, maps them, closes its descriptors, declares the
 * classes of every registered site, publishes the session in `session` and copies req to
 * done (err: 0 or -errno of the attempt).  To stop, tracepad (threads stopped) zeroes
 * `session`, sets tracer_pid to 0 and increments req; the runtime then drops its mappings
 * (replaced by anonymous memory, so that a thread still writing an event is harmless). */
#define TP_MREMOTE_MAGIC 0x31544f4d45524d54ull /* "TMREMOT1" */
#define TP_MREMOTE_VERSION 1
#define TP_MREMOTE_SYMBOL "tp__markers_remote"

struct tp_markers_remote {
	uint64_t magic;
	uint32_t version, size;
	uint32_t req;  /* tracepad */
	uint32_t done; /* runtime */
	int32_t tracer_pid, ring_fd, ctl_fd;
	int32_t err;	  /* runtime */
	uint64_t session; /* runtime: the session recorded into (0: none); tracepad zeroes it */
	uint64_t ring_base, ring_size, ctl_base, ctl_size; /* runtime, for information */
};

/* tracepad writes both descriptors at once. */
_Static_assert(offsetof(struct tp_markers_remote, ctl_fd) ==
		   offsetof(struct tp_markers_remote, ring_fd) + 4,
	       "ring_fd, ctl_fd adjacent");

#endif
