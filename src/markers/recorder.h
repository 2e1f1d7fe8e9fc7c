/* Inside src/markers, tracer side: the recorder shared by the launch (recorder.c) and the
 * `-p` protocol (remote.c). */
#ifndef TP_MARKERS_RECORDER_H
#define TP_MARKERS_RECORDER_H

#include "markers/tracer.h"

struct tp_mctl_hdr;

/* A trace being recorded: the writer, the rings' consumer, and the control table in which
 * libtracepad declares classes and formats (src/markers/ctl.h).  Classes are added to the
 * trace in table order, so that a class id in the rings is its index in the table. */
struct tp_markers_recorder {
	const char *dir;
	struct tp_trace_writer *w;
	struct tp_trace_consumer *cons;
	int ctl_fd;
	struct tp_mctl_hdr *ctl;
	const struct tp_markers_sites *known; /* the sites at rest, for naming classes */
	uint32_t nclasses, nformats;
	char **cls_point, **cls_types; /* by class id */
	struct rec_format {
		char *text;
		uint32_t cls;
		bool cut;
	} * formats;
	const char *const *fields; /* --fields POINT=NAME,... (NULL-terminated), or NULL */
	bool formats_dirty;
	bool warned_dropped;
};

struct tp_trace_field_desc;
/* --fields: name the fields @f (@nf with "fmt") of point @point after the first of @specs
 * whose POINT glob matches it (checked by tp_markers_fields_check), over the format's names;
 * @buf holds the names: [TP_MAX_ARGS][TP_MARKERS_NAME_MAX] of record.h, which fieldnames.c
 * checks against these (fieldnames.c). */
void tp_markers_fields_apply(const char *const *specs, const char *point,
			     struct tp_trace_field_desc *f, int nf, char buf[8][32]);

/* -errno with @errbuf set on failure. */
int tp_markers_rec_new(struct tp_markers_recorder *r, const char *dir,
		       const struct tp_markers_sites *known, const struct tp_trace_ring_opts *ropts,
		       char *errbuf, size_t errlen);
void tp_markers_rec_free(struct tp_markers_recorder *r);
/* Drain the rings and take what the runtime declared.  @final: the program is gone or
 * stopped for good, entries it left half-written are closed. */
int tp_markers_rec_poll(struct tp_markers_recorder *r, bool final);
/* Final drain and close; 1 with @errbuf set on failure, else 0.  @release: the program runs
 * on and maps the memfds until libtracepad next runs there, so their memory is given back
 * now (its mapping then reads zeros). */
int tp_markers_rec_close(struct tp_markers_recorder *r, bool release, char *errbuf, size_t errlen);

#endif
