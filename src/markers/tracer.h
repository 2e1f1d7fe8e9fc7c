/* The tracer side of static tracepoints (tracepad markers): the sites of a program or process,
 * switching them in a stopped process over ptrace, the recorder that drains libtracepad's
 * rings and control table into a trace, and the `-p` protocol that hands a running process
 * tracepad's memfds.  Dynamic tracepoints will reuse the control table and the recorder. */
#ifndef TP_MARKERS_TRACER_H
#define TP_MARKERS_TRACER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "trace/trace.h"

/* Rings of a recording: one per thread firing at a time.  Their memory is a sparse memfd
 * whose pages exist only once a thread writes them, so many rings cost address space, not
 * memory; threads beyond them have their events counted as discarded. */
#define TP_MARKERS_RINGS 256

/* One site of a point: a NOP5 that becomes a jmp to @target when enabled. */
struct tp_markers_site {
	const char *object;	     /* owned by the site list */
	uint64_t addr, target, desc; /* runtime (or link-time at rest) */
	char *name, *fmt, *types, *file;
	unsigned line;
};

struct tp_markers_sites {
	struct tp_markers_site *v;
	size_t n, cap;
	char **objects;
	size_t nobjects;
};

void tp_markers_sites_free(struct tp_markers_sites *s);
/* A zeroed site at the end of @s, or NULL on no memory. */
struct tp_markers_site *tp_markers_sites_add(struct tp_markers_sites *s);
/* Reads the sites of every object mapped by a process, at runtime addresses. */
typedef int (*tp_markers_read_fn)(struct tp_markers_sites *out, pid_t pid);

/* Add the sites of the notes of the object @path; addresses are link-time + @bias; *@is_elf
 * tells whether it is an ELF file at all.  Returns the number of sites, or -errno. */
int tp_markers_read_notes(struct tp_markers_sites *out, const char *path, uint64_t bias,
			  bool *is_elf);
/* Add the sites of the libraries @path needs directly, found as the loader would. */
void tp_markers_read_needed(struct tp_markers_sites *out, const char *path);
/* The sites of every executable file mapping of @pid, at runtime addresses, their source
 * from the process memory.  Returns 0 or -errno (-ESRCH, -EPERM for /proc/PID/mem). */
int tp_markers_read_process(struct tp_markers_sites *out, pid_t pid);

/* Does @name match one of the comma-separated fnmatch globs of @globs? */
bool tp_markers_glob_match(const char *globs, const char *name);
/* How many sites of @s have a name matching @glob. */
size_t tp_markers_count_matching(const struct tp_markers_sites *s, const char *glob);

/* State of a site of a live process: "enabled", "disabled", "unknown:XXXXXXXXXX" (its
 * bytes, in @buf, 32 bytes) or "unreadable"; *@point: "point:on", "point:off", "point:?". */
const char *tp_markers_site_state(pid_t pid, const struct tp_markers_site *s, char *buf,
				  const char **point);

/* "-p PID: cannot WHAT: why" (with the reason ptrace is refused) into @buf. */
void tp_markers_proc_error(char *buf, size_t len, const char *what, pid_t pid, int err);

/* enable/disable -p: attach, patch the sites matching @glob (bytes checked, never under a
 * stopped thread's pc), detach.  *@changed, *@refused count sites.  -errno of the attach
 * (@err set), else 0. */
int tp_markers_switch(pid_t pid, struct tp_markers_sites *s, const char *glob, bool on,
		      int *changed, int *refused, char *err, size_t errlen);

/* A trace being recorded from libtracepad's rings and control table (src/markers/ctl.h). */
struct tp_markers_recorder;

/* Record the points matching @glob of a launched program (@argv, execvp'd) until it ends
 * or *@stop becomes non-zero (the caller's signal handlers set it to the signal: the trace
 * is closed, the program runs on to its own end, its rings discarding): its exit status as
 * a shell gives it (128 + *@stop when stopped); 2 after a failure with @err set (if the
 * failure was not the program's).  @known: the sites at rest, to name classes (may be
 * empty). */
int tp_markers_record_launch(const char *dir, const struct tp_markers_sites *known,
			     const char *glob, const char *const *fields, char **argv,
			     volatile sig_atomic_t *stop, char *err, size_t errlen);

/* Record the points matching @glob of running process @pid (its sites in @s) until *@stop
 * becomes non-zero, @duration seconds (0: none) or its exit, through libtracepad's remote
 * channel; the points enabled for it are disabled again.  Returns the exit status: 0, 1
 * when sites were refused or the trace could not be completed, 2 with @err set on
 * failure. */
int tp_markers_record_pid(pid_t pid, struct tp_markers_sites *s, tp_markers_read_fn read_sites,
			  const char *glob, const char *const *fields, const char *dir,
			  double duration, volatile sig_atomic_t *stop, char *err, size_t errlen);
/* --fields POINT=NAME,NAME,...: the names given to a point's fields, by position (an empty
 * one keeps the format's), over those its formats give (@fields of the two above: such
 * specs, NULL-terminated; the first whose POINT glob matches applies).  0, or -EINVAL with a
 * one-line reason in @err (a name a field may not take, twice, more than 8). */
int tp_markers_fields_check(const char *spec, char *err, size_t errlen);

#endif
