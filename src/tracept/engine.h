/* Inside the engine of `tracepad trace`: the session, its tracepoints and frames, shared by
 * engine.c (the event loop), setup.c (locations and compiling) and frames.c (output). */
#ifndef TP_TRACEPT_ENGINE_H
#define TP_TRACEPT_ENGINE_H

#include "bp/bp.h"
#include "elf/symbols.h"
#include "proc/proc.h"
#include "tracept/tracept-priv.h"
#include "tracept/tracept.h"

struct tracepoint {
	int num; /* 1-based, as in the output */
	const struct tp_tracept_spec *spec;
	uint64_t addr;
	char where[256]; /* "f+0x8 (t.c:12)" */
	bool has_cond;
	struct tp_code cond;
	struct tp_items items, step_items;
	uint32_t mem_bytes, step_mem_bytes; /* room for the memory ranges of a frame */
	uint64_t hits, collected, discarded, errors;
	int class_id, step_class_id;
};

/* The values of one frame, as collected. */
struct frame {
	uint64_t pc;
	unsigned step;	  /* 0: the hit; k: after the k-th single step */
	uint64_t unavail; /* bit i: item i could not be read */
	uint64_t val[TP_MAX_ITEMS];
	uint8_t *mem[TP_MAX_ITEMS];
	uint8_t *buf; /* room for the memory ranges */
};

struct session {
	const struct tp_tracept_opts *o;
	struct tp_proc *p;
	struct tp_bps *bps;
	struct tp_symtab *syms;
	pid_t pid;
	bool launched, gone;
	int status;
	struct tracepoint *tps;
	int ntps;
	uint8_t *scratch; /* frame buffers */
	struct tp_trace_writer *w;
	struct tp_trace_producer prod;
	bool prod_ok;
	uint64_t frames, lost;
};

/* setup.c: run a launched program to its entry, resolve and compile every tracepoint,
 * plant them.  0, -EINVAL after a one-line error (bad input), or -errno. */
int tp_tracept_to_entry(struct session *s);
int tp_tracept_setup(struct session *s);
/* The one-line form of @pc. */
void tp_tracept_where(struct session *s, uint64_t pc, char *buf, size_t len);

/* frames.c */
/* Make the field names of @it unique ("x", "x_2"), none a frame header's. */
void tp_tracept_fix_names(struct tp_items *it);
int tp_tracept_frames_open(struct session *s, const char *dir);
int tp_tracept_frames_close(struct session *s);
void tp_tracept_frame_out(struct session *s, struct tracepoint *t, const struct tp_items *items,
			  pid_t tid, const struct frame *f);

#endif
