/* tracepad debug: an unmodified gdb debugs a program that runs in the code cache.  The
 * engine (engine.c) lives in libtracepad-interpose.so, preloaded into gdb: the wrappers of
 * interpose.c hand it what gdb asks of the kernel (ptrace, wait, /proc/PID/mem), and it
 * applies seed 003's debug specifications through the cache's repositories (dbt/map.h).
 * gdb.c starts gdb so (the engine of `tracepad debug`). */
#ifndef TP_DEBUG_DEBUG_H
#define TP_DEBUG_DEBUG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* ---- the CLI's side (gdb.c) ---- */

struct tp_debug_opts {
	char *const *gdb_args;	/* given to gdb before the program, NULL-terminated */
	char *const *argv;	/* the program and its arguments */
	const char *interposer; /* libtracepad-interpose.so */
	const char *runtime;	/* tracepad-dbt-rt.so */
	const char *gdb;	/* the gdb to run: "gdb" (PATH) unless $TRACEPAD_GDB */
	const char *report;	/* the file the counts are appended to, NULL: gdb's stderr */
};

/* libtracepad-interpose.so next to @agent (the build tree's or the installed layout), or
 * $TRACEPAD_INTERPOSE; NULL when there is none.  A static buffer. */
const char *tp_debug_interposer_path(const char *agent);

/* Exec gdb with the interposer preloaded and the program loaded (`run` starts it in the
 * code cache).  Returns only on failure: -errno, with a reason in @err. */
int tp_debug_exec_gdb(const struct tp_debug_opts *o, char *err, size_t errlen);

/* The environment the interposer reads in gdb (set by tp_debug_exec_gdb). */
#define TP_DEBUG_ENV_RT "TRACEPAD_DEBUG_RT"	      /* the runtime's path */
#define TP_DEBUG_ENV_PRELOAD "TRACEPAD_DEBUG_PRELOAD" /* LD_PRELOAD as it was, for the program */
#define TP_DEBUG_ENV_REPORT "TRACEPAD_DEBUG_REPORT"   /* -o FILE */

/* ---- the interposer's side (engine.c), called by the wrappers with reentry off ---- */

/* At the interposer's start, before gdb forks a program; at gdb's exit. */
void tp_debug_init(void);
void tp_debug_fini(void);
/* A wait of gdb returned @pid with *@status: take a program over at its exec, roll a stop
 * ahead out of hidden code (*@status may change), forget what exited.  True when the stop
 * is the engine's own, handled (the task resumed): gdb is not to see it. */
bool tp_debug_on_wait(pid_t pid, int *status);
/* ptrace(@req, @pid, @addr, @data) as gdb asked it: true when the engine did it (the result
 * in *@ret, errno set), false when the real call is to be made. */
bool tp_debug_ptrace(int req, pid_t pid, void *addr, void *data, long *ret);
/* An fd gdb opened on @path, or closed. */
void tp_debug_on_open(int fd, const char *path);
void tp_debug_on_close(int fd);
/* pread/pwrite of gdb on fd: true when the engine did it (result in *@ret, errno set). */
bool tp_debug_pread(int fd, void *buf, size_t len, off_t off, ssize_t *ret);
bool tp_debug_pwrite(int fd, const void *buf, size_t len, off_t off, ssize_t *ret);

#endif
