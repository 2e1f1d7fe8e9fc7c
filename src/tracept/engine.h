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
	bool pending;	 /* LIB:FUNCTION of an object not loaded yet: resolved at r_brk stops */
	bool fast;	 /* placed by the agent (fast.c), counted there */
	bool dead;	 /* failed to resolve or compile once its object came */
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
	bool late;     /* resolving pending tracepoints: errors are warnings */
	uint64_t rbrk; /* the loader's _dl_debug_state, while tracepoints are pending */
	bool rbrk_planted;
	uint32_t room; /* bytes of s->scratch */
	int status;
	struct tracepoint *tps;
	int ntps;
	uint8_t *scratch; /* frame buffers */
	struct tp_trace_writer *w;
	struct tp_trace_producer prod;
	bool prod_ok;
	uint64_t frames, lost;
	struct fast *fast; /* fast tracepoints (fast.c), or NULL */
	int nnormal;	   /* tracepoints over ptrace (pending ones included) */
};

/* setup.c: run a launched program to its entry, resolve and compile every tracepoint,
 * plant them.  0, -EINVAL after a one-line error (bad input), or -errno. */
int tp_tracept_to_entry(struct session *s);
int tp_tracept_setup(struct session *s);
/* At the loader's r_brk stop of @tid: resolve, compile and plant the pending tracepoints
 * whose object is loaded now. */
void tp_tracept_retry(struct session *s, pid_t tid);
/* The one-line form of @pc. */
void tp_tracept_where(struct session *s, uint64_t pc, char *buf, size_t len);

/* fast.c: load the agent and place the fast tracepoints (every thread stopped); drain
 * their rings into frames; take them out again (every thread stopped) and compare the
 * text; free.  fast_run: all tracepoints fast, the program runs without ptrace until it
 * ends or *@stopped. */
int tp_tracept_fast_start(struct session *s);
uint64_t tp_tracept_fast_drain(struct session *s); /* frames drained */
int tp_tracept_fast_stop(struct session *s);
int tp_tracept_fast_run(struct session *s, bool *stopped);
void tp_tracept_fast_end(struct session *s);

/* frames.c */
/* Make the field names of @it unique ("x", "x_2"), none a frame header's. */
void tp_tracept_fix_names(struct tp_items *it);
int tp_tracept_frames_open(struct session *s, const char *dir);
int tp_tracept_frames_close(struct session *s);
/* The event class of a tracepoint resolved late. */
void tp_tracept_frames_add(struct session *s, struct tracepoint *tp);
void tp_tracept_frame_out(struct session *s, struct tracepoint *t, const struct tp_items *items,
			  pid_t tid, const struct frame *f);

#endif
