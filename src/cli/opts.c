/* Option helpers shared by the subcommands: -p PID, --duration SECONDS, -o FILE, and a trace
 * DIR opened with one-line errors.  Each prints "tracepad CMD: ..." and gives the exit
 * status, so that every subcommand refuses bad input the same way. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "elf/symbols.h"

/* ---- -p PID, --duration S ---- */

int tp_cli_parse_pid(const char *cmd, const char *arg, pid_t *pid)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (*end || !*arg || errno || v <= 0 || v > INT_MAX) {
		tp_cli_error(cmd, "-p: '%s' is not a process id", arg);
		return 2;
	}
	*pid = (pid_t)v;
	return 0;
}

int tp_cli_parse_duration(const char *cmd, const char *arg, double *seconds)
{
	char *end;
	double v = strtod(arg, &end);

	if (*end || !*arg || !(v > 0) || v > 1e9) {
		tp_cli_error(cmd, "--duration: '%s' is not a number of seconds", arg);
		return 2;
	}
	*seconds = v;
	return 0;
}

/* ---- trace DIR ---- */

/* A trace that fails to read because of a file named "maps" most likely got it from a
 * producer that did not know the name must be hidden from CTF readers. */
static const char *maps_hint(const char *dir)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/maps", dir);
	if (!lstat(path, &st) && S_ISREG(st.st_mode))
		return " (the file 'maps' is taken for a stream: name it " TP_TRACE_MAPS_FILE ")";
	return "";
}

static void warn_bad_lines(const char *cmd, const char *path, const struct tp_trace_bad_lines *b)
{
	if (b->count)
		tp_cli_error(cmd, "warning: %s:%lu: %lu malformed line%s ignored", path, b->first,
			     b->count, b->count > 1 ? "s" : "");
}

int tp_cli_trace_open(struct tp_cli_trace *t, const char *cmd, const char *dir, bool want_maps)
{
	struct tp_trace_bad_lines bad;
	char path[PATH_MAX];
	struct stat st;
	int err;

	memset(t, 0, sizeof(*t));
	t->cmd = cmd;
	t->dir = dir;
	if (stat(dir, &st)) {
		tp_cli_error(cmd, "%s: %s", dir, strerror(errno));
		return 2;
	}
	if (!S_ISDIR(st.st_mode)) {
		tp_cli_error(cmd, "%s: not a trace (a trace is a directory)", dir);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/metadata", dir);
	if (lstat(path, &st) && errno == ENOENT) {
		tp_cli_error(cmd, "%s: not a trace (no metadata file)", dir);
		return 2;
	}
	err = tp_trace_reader_open(dir, &t->r);
	switch (err) {
	case 0:
		break;
	case -ENOMEM:
		tp_cli_error(cmd, "%s: out of memory", dir);
		return 1;
	case -EACCES:
	case -EPERM:
	case -ELOOP:
	case -EMFILE:
	case -ENFILE:
		tp_cli_error(cmd, "%s: %s", dir, strerror(-err));
		return 2;
	case -ENOTSUP:
		tp_cli_error(cmd, "%s: the metadata uses CTF features this reader does not support",
			     dir);
		return 2;
	case -E2BIG:
		tp_cli_error(cmd, "%s: too many stream files", dir);
		return 2;
	default:
		tp_cli_error(cmd, "%s: not a readable trace: malformed metadata (%s)", dir,
			     strerror(-err));
		return 2;
	}
	if (want_maps) {
		snprintf(path, sizeof(path), "%s/%s", dir, TP_TRACE_MAPS_FILE);
		t->syms = tp_trace_maps_load(path, &bad);
		warn_bad_lines(cmd, path, &bad);
	}
	snprintf(path, sizeof(path), "%s/%s", dir, TP_TRACE_FORMATS_FILE);
	t->formats = tp_trace_formats_load(path, &bad);
	warn_bad_lines(cmd, path, &bad);
	return 0;
}

int tp_cli_trace_next(struct tp_cli_trace *t, const struct tp_trace_event **ev)
{
	for (;;) {
		int err = tp_trace_reader_next(t->r, ev);
		const char *name;
		uint64_t off = 0;

		if (err > 0) {
			t->nr_events++;
			return 1;
		}
		if (!err)
			return t->corrupt ? -1 : 0;
		name = tp_trace_reader_error_at(t->r, &off);
		tp_cli_error(t->cmd, "%s: corrupt trace: stream %s at offset %" PRIu64 ": %s%s%s",
			     t->dir, name ? name : "?", off, strerror(-err), maps_hint(t->dir),
			     t->salvage ? "; the other streams are read" : "");
		t->corrupt = true;
		if (!t->salvage)
			return -1;
	}
}

void tp_cli_trace_close(struct tp_cli_trace *t)
{
	tp_trace_reader_close(t->r);
	tp_symtab_free(t->syms);
	tp_trace_formats_free(t->formats);
	t->r = NULL;
	t->syms = NULL;
	t->formats = NULL;
}

/* ---- -o FILE ---- */

/* The temporary file of tp_cli_result_open, renamed over the target by tp_cli_out_close. A
 * command has one output at a time. */
static char out_tmp[PATH_MAX];

FILE *tp_cli_out_open(const char *cmd, const char *path, FILE *dflt)
{
	FILE *f;

	out_tmp[0] = 0;
	if (!path || !strcmp(path, "-"))
		return dflt;
	f = fopen(path, "we");
	if (!f)
		tp_cli_error(cmd, "-o %s: %s", path, strerror(errno));
	return f;
}

FILE *tp_cli_result_open(const char *cmd, const char *path, FILE *dflt)
{
	struct stat st;
	bool exists;
	mode_t mask;
	FILE *f;
	int fd;

	out_tmp[0] = 0;
	if (!path || !strcmp(path, "-"))
		return dflt;
	exists = !stat(path, &st);
	if (exists ? !S_ISREG(st.st_mode) : errno != ENOENT)
		return tp_cli_out_open(cmd, path, dflt); /* a device, a pipe: written as it is */
	if (snprintf(out_tmp, sizeof(out_tmp), "%s.XXXXXX", path) >= (int)sizeof(out_tmp)) {
		out_tmp[0] = 0;
		tp_cli_error(cmd, "-o %s: %s", path, strerror(ENAMETOOLONG));
		return NULL;
	}
	fd = mkostemp(out_tmp, O_CLOEXEC);
	if (fd < 0) {
		tp_cli_error(cmd, "-o %s: %s", path, strerror(errno));
		out_tmp[0] = 0;
		return NULL;
	}
	/* the mode a plain creation would give, or the file's own */
	mask = umask(0);
	umask(mask);
	fchmod(fd, exists ? st.st_mode & 07777 : 0666 & ~mask);
	f = fdopen(fd, "w");
	if (!f) {
		tp_cli_error(cmd, "-o %s: %s", path, strerror(errno));
		close(fd);
		unlink(out_tmp);
		out_tmp[0] = 0;
	}
	return f;
}

int tp_cli_out_close(const char *cmd, FILE *f, const char *path, bool keep)
{
	int err = 0;

	errno = 0;
	if (fflush(f) || ferror(f))
		err = errno ? errno : EIO;
	if (f != stdout && f != stderr && fclose(f) && !err)
		err = errno ? errno : EIO;
	if (out_tmp[0]) {
		if (err || !keep)
			unlink(out_tmp);
		else if (rename(out_tmp, path))
			err = errno;
		out_tmp[0] = 0;
	}
	if (!err)
		return 0;
	tp_cli_error(cmd, "%s: write error: %s",
		     path && strcmp(path, "-") ? path
		     : f == stderr	       ? "stderr"
					       : "stdout",
		     strerror(err));
	return 1;
}
