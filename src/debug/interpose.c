/* libtracepad-interpose.so: preloaded into gdb, it wraps the libc entry points through
 * which gdb 13 sees and changes the program (ptrace, waitpid and wait4, open and close,
 * pread64 and pwrite64 of /proc/PID/task/TID/mem: all it imports of those; no waitid,
 * openat or process_vm_readv, docs/INTERNALS.md) and hands them to the engine.  The
 * engine's own calls of the same functions go straight to libc (a per-thread flag). */
/* pread and pwrite are wrapped under both names: libc's headers must not rename them */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "debug/debug.h"

#define EXPORT __attribute__((visibility("default")))

static __thread int inside;

static long (*real_ptrace)(int, pid_t, void *, void *);
static pid_t (*real_wait4)(pid_t, int *, int, struct rusage *);
static pid_t (*real_waitpid)(pid_t, int *, int);
static int (*real_open)(const char *, int, ...);
static int (*real_close)(int);
static ssize_t (*real_pread64)(int, void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);

static void *next(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);

	if (!f) {
		fprintf(stderr, "tracepad debug: no %s in libc\n", name);
		abort();
	}
	return f;
}

/* tracepad debug -o FILE: where the counts go (appended), instead of gdb's stderr */
static char *report;

static void log_stderr(enum tp_log_level level, const char *fmt, va_list ap)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};

	if (level > TP_LOG_INFO && !getenv("TRACEPAD_DEBUG"))
		return;
	if (level == TP_LOG_INFO && report) {
		FILE *f = fopen(report, "ae");

		if (f) {
			fputs("tracepad debug: ", f);
			vfprintf(f, fmt, ap);
			fputc('\n', f);
			fclose(f);
			return;
		}
	}
	/* info is the tool's result (the count at the program's exit) */
	fprintf(stderr, "tracepad debug: %s%s", level == TP_LOG_INFO ? "" : names[level],
		level == TP_LOG_INFO ? "" : ": ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

__attribute__((constructor)) static void interpose_init(void)
{
	const char *old = getenv(TP_DEBUG_ENV_PRELOAD), *out = getenv(TP_DEBUG_ENV_REPORT);

	real_ptrace = next("ptrace");
	real_wait4 = next("wait4");
	real_waitpid = next("waitpid");
	real_open = next("open");
	real_close = next("close");
	real_pread64 = next("pread64");
	real_pwrite64 = next("pwrite64");
	tp_log_set_callback(log_stderr);
	/* the program gets the environment it would have without tracepad (gdb copies its
	 * own for the inferior after this) */
	if (old && *old)
		setenv("LD_PRELOAD", old, 1);
	else
		unsetenv("LD_PRELOAD");
	unsetenv(TP_DEBUG_ENV_PRELOAD);
	if (out && *out)
		report = strdup(out);
	unsetenv(TP_DEBUG_ENV_REPORT);
	inside = 1;
	tp_debug_init();
	inside = 0;
}

/* gdb exits: the counts of programs it detached, which run on */
__attribute__((destructor)) static void interpose_fini(void)
{
	inside = 1;
	tp_debug_fini();
	inside = 0;
}

EXPORT long ptrace(enum __ptrace_request req, ...)
{
	va_list ap;
	pid_t pid;
	void *addr, *data;
	long ret;

	va_start(ap, req);
	pid = va_arg(ap, pid_t);
	addr = va_arg(ap, void *);
	data = va_arg(ap, void *);
	va_end(ap);
	if (inside)
		return real_ptrace(req, pid, addr, data);
	inside = 1;
	if (!tp_debug_ptrace(req, pid, addr, data, &ret))
		ret = real_ptrace(req, pid, addr, data);
	inside = 0;
	return ret;
}

EXPORT pid_t wait4(pid_t pid, int *status, int options, struct rusage *ru)
{
	int st, e;
	bool hide;
	pid_t r;

	do {
		r = real_wait4(pid, &st, options, ru);
		if (inside || r <= 0)
			break;
		e = errno;
		inside = 1;
		hide = tp_debug_on_wait(r, &st);
		inside = 0;
		errno = e;
	} while (hide);
	if (r > 0 && status)
		*status = st;
	return r;
}

EXPORT pid_t waitpid(pid_t pid, int *status, int options)
{
	return wait4(pid, status, options, NULL);
}

EXPORT int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	int fd;

	if (flags & (O_CREAT | __O_TMPFILE)) {
		va_list ap;

		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	fd = real_open(path, flags, mode);
	if (!inside && fd >= 0 && !strncmp(path, "/proc/", 6)) {
		inside = 1;
		tp_debug_on_open(fd, path);
		inside = 0;
	}
	return fd;
}

EXPORT int close(int fd)
{
	if (!inside) {
		inside = 1;
		tp_debug_on_close(fd);
		inside = 0;
	}
	return real_close(fd);
}

EXPORT ssize_t pread64(int fd, void *buf, size_t len, off_t off)
{
	ssize_t r;

	if (inside)
		return real_pread64(fd, buf, len, off);
	inside = 1;
	if (!tp_debug_pread(fd, buf, len, off, &r))
		r = real_pread64(fd, buf, len, off);
	inside = 0;
	return r;
}

EXPORT ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
{
	ssize_t r;

	if (inside)
		return real_pwrite64(fd, buf, len, off);
	inside = 1;
	if (!tp_debug_pwrite(fd, buf, len, off, &r))
		r = real_pwrite64(fd, buf, len, off);
	inside = 0;
	return r;
}

EXPORT ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
	return pread64(fd, buf, len, off);
}

EXPORT ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
	return pwrite64(fd, buf, len, off);
}
