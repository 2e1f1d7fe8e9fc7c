/* tracepad markers: the static tracepoints of <tracepad/tracepoint.h>: list the sites of a
 * program at rest (its .note.tracepad) or of a live process with their state, enable or
 * disable them in a live process over ptrace, and record the events of a launched program or
 * of a running process into a trace through libtracepad's rings and control table
 * (src/markers/ctl.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arch/arch.h"
#include "cli/cli.h"
#include "cli/trace-read.h"
#include "base/log.h"
#include "base/paths.h"
#include "base/procfs.h"
#include "elf/file.h"
#include "elf/symbols.h"
#include "proc/proc.h"
#include "trace/trace.h"
/* The runtime's record layout and field rules, without registering sites of our own. */
#define TP_NO_SITE_REGISTRATION
#include "markers/ctl.h"
#include "markers/record.h"

#define NOTE_OWNER "tracepad"
#define NOTE_TYPE_SITE 1
#define POINT_F_ENABLED 1u
/* Offsets in struct tp_site_desc and struct tp_point (<tracepad/tracepoint.h>, x86-64). */
#define DESC_POINT 0
#define DESC_FILE 24
#define DESC_LINE 32
#define POINT_FLAGS 8

static const uint8_t nop5[5] = {0x0f, 0x1f, 0x44, 0x00, 0x00};

static const char usage_text[] =
    "usage: tracepad markers list [-p PID | PROGRAM...]\n"
    "       tracepad markers enable -p PID GLOB\n"
    "       tracepad markers disable -p PID GLOB\n"
    "       tracepad markers record [-e GLOB] --trace DIR -- PROGRAM [ARGS...]\n"
    "       tracepad markers record -p PID [-e GLOB] --trace DIR [--duration S]\n"
    "\n"
    "List the static tracepoints (<tracepad/tracepoint.h>) of programs or libraries at rest,\n"
    "or of a running process with the state of each site; enable or disable the points whose\n"
    "name matches GLOB (fnmatch, comma-separated alternatives) in a running process; record\n"
    "the events of a launched program's points, or of a running process that uses\n"
    "libtracepad until Ctrl-C, --duration or its exit, into a trace directory that\n"
    "tracepad dump shows with each event's formatted text.\n"
    "\n"
    "  -p, --pid PID     the running process (list: every object it has mapped)\n"
    "  -e, --enable GLOB record: the points enabled (default: all); with -p, those it\n"
    "                    enables are disabled again at the end\n"
    "  -t, --trace DIR   record: the trace directory to create\n"
    "      --duration S  record -p: stop after S seconds\n"
    "  -h, --help        show this help\n";

struct site {
	const char *object;	     /* owned by the site list */
	uint64_t addr, target, desc; /* runtime (or link-time at rest) */
	char *name, *fmt, *types, *file;
	unsigned line;
};

struct sites {
	struct site *v;
	size_t n, cap;
	char **objects;
	size_t nobjects;
};

static void sites_free(struct sites *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].name);
		free(s->v[i].fmt);
		free(s->v[i].types);
		free(s->v[i].file);
	}
	free(s->v);
	for (size_t i = 0; i < s->nobjects; i++)
		free(s->objects[i]);
	free(s->objects);
	memset(s, 0, sizeof(*s));
}

static struct site *sites_add(struct sites *s)
{
	if (s->n == s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : 32;
		struct site *v = realloc(s->v, ncap * sizeof(*v));

		if (!v)
			return NULL;
		s->v = v;
		s->cap = ncap;
	}
	memset(&s->v[s->n], 0, sizeof(s->v[0]));
	return &s->v[s->n++];
}

/* ---- the file at rest ---- */

struct notes_ctx {
	struct sites *out;
	struct tp_elf_file *f;
	const char *object;
	uint64_t bias;
	int n;
};

static int read_note(void *arg, const struct tp_elf_note *nt)
{
	struct notes_ctx *c = arg;
	uint64_t q[6];
	struct site *s;

	if (nt->type != NOTE_TYPE_SITE || nt->owner_size != sizeof(NOTE_OWNER) ||
	    memcmp(nt->owner, NOTE_OWNER, sizeof(NOTE_OWNER)) || nt->desc_size != sizeof(q))
		return 0;
	memcpy(q, nt->desc, sizeof(q));
	if (!q[0])
		return 0; /* a site in code the linker dropped */
	if (!(s = sites_add(c->out)))
		return -ENOMEM;
	s->object = c->object;
	s->addr = q[0] + c->bias;
	s->target = q[1] + c->bias;
	s->desc = q[2] + c->bias;
	s->name = tp_elf_file_string(c->f, q[3]);
	s->fmt = tp_elf_file_string(c->f, q[4]);
	s->types = tp_elf_file_string(c->f, q[5]);
	uint64_t file = tp_elf_file_pointer(c->f, q[2] + DESC_FILE);
	uint32_t line = 0;
	if (file)
		s->file = tp_elf_file_string(c->f, file);
	if (!tp_elf_file_read(c->f, q[2] + DESC_LINE, &line, sizeof(line)))
		s->line = line;
	c->n++;
	return 0;
}

/* Add the sites of the notes of @path; addresses are link-time + @bias.  Returns the number
 * of sites, or -errno. */
static int read_notes(struct sites *out, const char *path, uint64_t bias, bool *is_elf)
{
	struct notes_ctx c = {.out = out, .bias = bias};
	struct tp_elf_file f;
	char **objs;
	int err;

	*is_elf = false;
	err = tp_elf_file_open_any(&f, path);
	if (err)
		return err;
	*is_elf = true;
	objs = realloc(out->objects, (out->nobjects + 1) * sizeof(*objs));
	if (!objs || !(objs[out->nobjects] = strdup(path))) {
		if (objs)
			out->objects = objs;
		err = -ENOMEM;
		goto out;
	}
	out->objects = objs;
	c.object = objs[out->nobjects++];
	c.f = &f;
	err = tp_elf_file_foreach_note(&f, ".note.tracepad", read_note, &c);
out:
	tp_elf_file_close(&f);
	return err ? err : c.n;
}

/* ---- the live process ---- */

static char *proc_string(pid_t pid, uint64_t addr)
{
	char buf[512];
	ssize_t n = tp_proc_read(pid, addr, buf, sizeof(buf) - 1);

	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	return strdup(buf);
}

struct process_ctx {
	struct sites *out;
	pid_t pid;
	int err;
};

static int process_map(void *arg, const struct tp_maps_ent *e)
{
	struct process_ctx *c = arg;
	struct sites *out = c->out;
	const char *path = e->path;
	uint64_t bias = 0;
	bool seen = false, is_elf;
	size_t first;

	if (!tp_maps_exec(e) || path[0] != '/' || e->deleted)
		return 0;
	for (size_t i = 0; i < out->nobjects; i++)
		seen |= !strcmp(out->objects[i], path);
	if (seen || tp_elf_map_bias(path, e->start, e->offset, &bias))
		return 0;
	first = out->n;
	if (read_notes(out, path, bias, &is_elf) < 0)
		return 0;
	for (size_t i = first; i < out->n; i++) {
		struct site *s = &out->v[i];
		uint64_t file = 0;
		uint32_t ln = 0;
		ssize_t r;

		free(s->file);
		s->file = NULL;
		r = tp_proc_read(c->pid, s->desc + DESC_FILE, &file, sizeof(file));
		if (r < 0) {
			c->err = (int)r;
			return 1;
		}
		if (r == sizeof(file) && file)
			s->file = proc_string(c->pid, file);
		if (tp_proc_read(c->pid, s->desc + DESC_LINE, &ln, sizeof(ln)) == sizeof(ln))
			s->line = ln;
	}
	return 0;
}

/* The sites of every executable file mapping of @pid, at runtime addresses, their source
 * from the process memory.  Returns 0 or -errno (-ESRCH, -EPERM for /proc/PID/mem). */
static int read_process(struct sites *out, pid_t pid)
{
	struct process_ctx c = {out, pid, 0};
	int err = tp_maps_foreach(pid, process_map, &c);

	if (err < 0)
		return err == -ENOENT ? -ESRCH : err;
	return c.err;
}

enum site_state { SITE_DISABLED, SITE_ENABLED, SITE_UNKNOWN, SITE_UNREADABLE };

static enum site_state site_state(pid_t pid, const struct site *s, uint8_t bytes[5])
{
	uint8_t jmp[5];

	if (tp_proc_read(pid, s->addr, bytes, 5) != 5)
		return SITE_UNREADABLE;
	if (!memcmp(bytes, nop5, 5))
		return SITE_DISABLED;
	if (!tp_arch_emit_jmp(jmp, s->addr, s->target) && !memcmp(bytes, jmp, 5))
		return SITE_ENABLED;
	return SITE_UNKNOWN;
}

static uint64_t point_of(pid_t pid, const struct site *s)
{
	uint64_t point = 0;

	if (tp_proc_read(pid, s->desc + DESC_POINT, &point, sizeof(point)) != sizeof(point))
		return 0;
	return point;
}

/* 1 enabled, 0 not, -1 unreadable */
static int point_enabled(pid_t pid, uint64_t point)
{
	uint32_t flags;

	if (!point || tp_proc_read(pid, point + POINT_FLAGS, &flags, sizeof(flags)) != 4)
		return -1;
	return (flags & POINT_F_ENABLED) ? 1 : 0;
}

/* ---- output ---- */

static void print_site(const struct site *s, const char *state, const char *point)
{
	printf("%-24s 0x%-14" PRIx64, s->name ? s->name : "?", s->addr);
	if (state)
		printf(" %-8s %-8s", state, point);
	printf(" %-6s", s->types && *s->types ? s->types : "-");
	if (s->file)
		printf(" %s:%u", s->file, s->line);
	else
		printf(" ?");
	printf(" \"%s\"\n", s->fmt ? s->fmt : "");
}

static bool glob_match(const char *globs, const char *name)
{
	const char *p = globs;

	while (*p) {
		size_t len = strcspn(p, ",");
		char pat[256];

		if (len < sizeof(pat)) {
			memcpy(pat, p, len);
			pat[len] = '\0';
			if (!fnmatch(pat, name, 0))
				return true;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return false;
}

static int proc_error(const char *what, pid_t pid, int err)
{
	char why[256];

	if (err == -ESRCH) {
		tp_cli_error("markers", "-p %d: no such process", (int)pid);
	} else if (err == -EPERM || err == -EACCES) {
		if (tp_proc_perm_reason(pid, why, sizeof(why)))
			snprintf(why, sizeof(why), "permission denied");
		tp_cli_error("markers", "-p %d: cannot %s: %s", (int)pid, what, why);
	} else {
		tp_cli_error("markers", "-p %d: cannot %s: %s", (int)pid, what, strerror(-err));
	}
	return 2;
}

static int do_list_files(char **files, int n)
{
	int ret = 0;

	for (int i = 0; i < n; i++) {
		struct sites s = {0};
		bool is_elf;
		int err = read_notes(&s, files[i], 0, &is_elf);

		if (err < 0) {
			tp_cli_error("markers", "%s: %s", files[i],
				     err == -ENOEXEC ? "not an ELF file" : strerror(-err));
			ret = 2;
		} else {
			if (n > 1)
				printf("# %s\n", files[i]);
			for (size_t j = 0; j < s.n; j++)
				print_site(&s.v[j], NULL, NULL);
			if (!s.n)
				fprintf(stderr, "tracepad markers: %s: no tracepoints\n", files[i]);
		}
		sites_free(&s);
	}
	return ret;
}

static int do_list_pid(pid_t pid)
{
	struct sites s = {0};
	const char *last = NULL;
	int err = read_process(&s, pid);

	if (err) {
		sites_free(&s);
		return proc_error("read its memory", pid, err);
	}
	for (size_t i = 0; i < s.n; i++) {
		uint8_t b[5];
		char unk[32];
		const char *state;
		int pe = point_enabled(pid, point_of(pid, &s.v[i]));

		switch (site_state(pid, &s.v[i], b)) {
		case SITE_DISABLED:
			state = "disabled";
			break;
		case SITE_ENABLED:
			state = "enabled";
			break;
		case SITE_UNKNOWN:
			snprintf(unk, sizeof(unk), "unknown:%02x%02x%02x%02x%02x", b[0], b[1], b[2],
				 b[3], b[4]);
			state = unk;
			break;
		default:
			state = "unreadable";
			break;
		}
		if (s.v[i].object != last && s.v[i].object)
			printf("# %s\n", last = s.v[i].object);
		print_site(&s.v[i], state, pe < 0 ? "point:?" : pe ? "point:on" : "point:off");
	}
	if (!s.n)
		fprintf(stderr, "tracepad markers: -p %d: no tracepoints\n", (int)pid);
	sites_free(&s);
	return 0;
}

/* Patch the matching sites of a stopped process; returns the exit status. */
static int set_sites(struct tp_proc *p, pid_t pid, struct sites *s, const char *glob, bool on,
		     int *changed, int *refused)
{
	pid_t tids[1024];
	uint64_t pcs[1024];
	int ntids = tp_proc_tasks(p, tids, 1024);
	bool *ok = calloc(s->n ? s->n : 1, sizeof(*ok));

	if (!ok)
		return -ENOMEM;
	if (ntids > 1024)
		ntids = 1024;
	for (int t = 0; t < ntids; t++)
		if (tp_proc_get_pc(tids[t], &pcs[t]))
			pcs[t] = 0;
	for (size_t i = 0; i < s->n; i++) {
		struct site *st = &s->v[i];
		uint8_t cur[5], jmp[5];
		const uint8_t *want, *from;
		int busy = -1, err;

		if (!st->name || !glob_match(glob, st->name))
			continue;
		if ((err = tp_arch_emit_jmp(jmp, st->addr, st->target))) {
			tp_warn("site %s at 0x%" PRIx64 ": jmp out of reach; left alone", st->name,
				st->addr);
			(*refused)++;
			continue;
		}
		want = on ? jmp : nop5;
		from = on ? nop5 : jmp;
		if (tp_proc_read(pid, st->addr, cur, 5) != 5) {
			tp_warn("site %s at 0x%" PRIx64 ": unreadable; left alone", st->name,
				st->addr);
			(*refused)++;
			continue;
		}
		if (!memcmp(cur, want, 5)) {
			ok[i] = true;
			continue;
		}
		if (memcmp(cur, from, 5)) {
			tp_warn("site %s at 0x%" PRIx64
				": unexpected bytes %02x %02x %02x %02x %02x; left alone",
				st->name, st->addr, cur[0], cur[1], cur[2], cur[3], cur[4]);
			(*refused)++;
			continue;
		}
		/* A thread stopped inside the 5 bytes would resume into a torn instruction. */
		for (int t = 0; t < ntids; t++)
			if (pcs[t] > st->addr && pcs[t] < st->addr + 5)
				busy = t;
		if (busy >= 0) {
			tp_warn("site %s at 0x%" PRIx64
				": thread %d is stopped inside it; left alone",
				st->name, st->addr, (int)tids[busy]);
			(*refused)++;
			continue;
		}
		if ((err = tp_proc_write(pid, st->addr, want, 5))) {
			tp_warn("site %s at 0x%" PRIx64 ": write failed: %s", st->name, st->addr,
				strerror(-err));
			(*refused)++;
			continue;
		}
		ok[i] = true;
		(*changed)++;
	}
	/* The runtime patches sites registered later (dlopen) by the point's flag: keep it in
	 * agreement, without touching the runtime's private bits.  A point none of whose sites
	 * could be enabled is not marked enabled. */
	for (size_t i = 0; i < s->n; i++) {
		uint64_t point;
		uint32_t flags, nflags;

		if (!s->v[i].name || !glob_match(glob, s->v[i].name) || (on && !ok[i]))
			continue;
		point = point_of(pid, &s->v[i]);
		if (!point ||
		    tp_proc_read(pid, point + POINT_FLAGS, &flags, sizeof(flags)) != sizeof(flags))
			continue;
		nflags = on ? flags | POINT_F_ENABLED : flags & ~POINT_F_ENABLED;
		if (nflags != flags)
			tp_proc_write(pid, point + POINT_FLAGS, &nflags, sizeof(nflags));
	}
	free(ok);
	return 0;
}

static int do_set(pid_t pid, const char *glob, bool on)
{
	struct sites s = {0};
	struct tp_proc *p = NULL;
	int err, changed = 0, refused = 0, matched = 0, ret = 0;

	err = read_process(&s, pid);
	if (err) {
		ret = proc_error("read its memory", pid, err);
		goto out;
	}
	if (!s.n) {
		tp_cli_error("markers", "-p %d: the process has no tracepoints", (int)pid);
		ret = 2;
		goto out;
	}
	for (size_t i = 0; i < s.n; i++)
		matched += s.v[i].name && glob_match(glob, s.v[i].name);
	if (!matched) {
		tp_cli_error("markers", "-p %d: no point matches '%s'", (int)pid, glob);
		ret = 2;
		goto out;
	}
	err = tp_proc_attach(pid, 0, &p);
	if (err) {
		ret = proc_error("attach", pid, err);
		goto out;
	}
	err = set_sites(p, pid, &s, glob, on, &changed, &refused);
	if (err)
		tp_warn("-p %d: %s", (int)pid, strerror(-err));
	err = tp_proc_detach(p);
	if (err)
		tp_warn("-p %d: detach: %s", (int)pid, strerror(-err));
	printf("%s %d site%s (%d matching, %d refused)\n", on ? "enabled" : "disabled", changed,
	       changed == 1 ? "" : "s", matched, refused);
	ret = refused ? 1 : 0;
out:
	sites_free(&s);
	return ret;
}

/* ---- record ---- */

/* A trace being recorded: the writer, the rings' consumer, and the control table in which
 * libtracepad declares classes and formats (src/markers/ctl.h).  Classes are added to the
 * trace in table order, so that a class id in the rings is its index in the table. */
struct recorder {
	const char *dir;
	struct tp_trace_writer *w;
	struct tp_trace_consumer *cons;
	int ctl_fd;
	struct tp_mctl_hdr *ctl;
	const struct sites *known; /* the sites at rest, for naming classes */
	uint32_t nclasses, nformats;
	char **cls_point, **cls_types; /* by class id */
	struct rec_format {
		char *text;
		uint32_t cls;
		bool cut;
	} * formats;
	bool formats_dirty;
	bool warned_dropped;
};

static int ctl_new(struct recorder *r)
{
	struct tp_mctl_hdr *h;

	r->ctl_fd = memfd_create("tracepad-markers", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (r->ctl_fd < 0)
		return -errno;
	/* The runtime refuses a table that could shrink under it; neither side resizes it. */
	if (ftruncate(r->ctl_fd, (off_t)TP_MCTL_SIZE) ||
	    fcntl(r->ctl_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		return -errno;
	h = mmap(NULL, TP_MCTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, r->ctl_fd, 0);
	if (h == MAP_FAILED)
		return -errno;
	r->ctl = h;
	h->version = TP_MCTL_VERSION;
	h->hdr_size = sizeof(*h);
	h->nr_classes = TP_MCTL_CLASSES;
	h->nr_formats = TP_MCTL_FORMATS;
	h->classes_off = TP_MCTL_CLASSES_OFF;
	h->formats_off = TP_MCTL_FORMATS_OFF;
	h->total_size = TP_MCTL_SIZE;
	__atomic_store_n(&h->magic, TP_MCTL_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

static void rec_free(struct recorder *r)
{
	tp_trace_consumer_free(r->cons);
	tp_trace_writer_free(r->w);
	if (r->ctl)
		munmap(r->ctl, TP_MCTL_SIZE);
	if (r->ctl_fd >= 0)
		close(r->ctl_fd);
	for (uint32_t i = 0; i < r->nclasses; i++) {
		free(r->cls_point[i]);
		free(r->cls_types[i]);
	}
	free(r->cls_point);
	free(r->cls_types);
	for (uint32_t i = 0; i < r->nformats; i++)
		free(r->formats[i].text);
	free(r->formats);
	memset(r, 0, sizeof(*r));
	r->ctl_fd = -1;
}

/* Prints one line and returns -errno on failure. */
static int rec_new(struct recorder *r, const char *dir, const struct sites *known,
		   const struct tp_trace_ring_opts *ropts)
{
	struct tp_trace_opts topts = {.clock = tp_trace_clock_best()};
	int err;

	memset(r, 0, sizeof(*r));
	r->ctl_fd = -1;
	r->dir = dir;
	r->known = known;
	r->cls_point = calloc(TP_MCTL_CLASSES, sizeof(char *));
	r->cls_types = calloc(TP_MCTL_CLASSES, sizeof(char *));
	r->formats = calloc(TP_MCTL_FORMATS, sizeof(*r->formats));
	if (!r->cls_point || !r->cls_types || !r->formats) {
		err = -ENOMEM;
		goto err;
	}
	if ((err = tp_trace_writer_new(dir, &topts, &r->w)))
		goto err;
	if ((err = ctl_new(r)) || (err = tp_trace_writer_sync(r->w)) ||
	    (err = tp_trace_consumer_new(r->w, ropts, &r->cons)))
		goto err;
	return 0;
err:
	tp_cli_error("markers", "record: --trace %s: %s", dir, strerror(-err));
	rec_free(r);
	return err;
}

#define IDENT_CHARS "_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

static bool class_name_ok(const char *n)
{
	if (!((*n >= 'A' && *n <= 'Z') || (*n >= 'a' && *n <= 'z')))
		return false;
	for (const char *p = n; *p; p++)
		if (!(*p == '_' || (*p >= '0' && *p <= '9') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= 'a' && *p <= 'z')))
			return false;
	return strlen(n) <= TP_TRACE_NAME_MAX - 8;
}

/* A point with one signature (argument types) among the sites known at rest and the classes
 * seen so far is named as itself, one with several per signature ("rec_two_sl"); a name
 * taken already gets a number. */
static char *class_name(struct recorder *r, const char *point, const char *types)
{
	bool other = false;
	char *base, *name;

	for (size_t i = 0; r->known && i < r->known->n && !other; i++) {
		const struct site *s = &r->known->v[i];
		other = s->name && s->types && !strcmp(s->name, point) && strcmp(s->types, types);
	}
	for (uint32_t i = 0; i < r->nclasses && !other; i++)
		other = r->cls_point[i] && !strcmp(r->cls_point[i], point) &&
			strcmp(r->cls_types[i], types);
	if (asprintf(&base, other ? "%s%s_%s" : "%s%s", class_name_ok(point) ? "" : "tp_", point,
		     *types ? types : "v") < 0)
		return NULL;
	name = strdup(base);
	for (int k = 2; name && tp_trace_schema_find(tp_trace_writer_schema(r->w), name) >= 0;
	     k++) {
		free(name);
		if (asprintf(&name, "%s_%d", base, k) < 0)
			name = NULL;
	}
	free(base);
	return name;
}

/* Copy a string of the table (written by the traced process: untrusted). */
static char *table_str(const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	return n < max ? strndup(s, n) : NULL;
}

static int rec_add_class(struct recorder *r, const struct tp_mctl_class *c, bool final)
{
	struct tp_trace_field_desc f[TP_MARKERS_MAX_FIELDS];
	char *point = NULL, *types = NULL, *name = NULL;
	int nf = -EINVAL, id;

	if (c && __atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) == 1) {
		point = table_str(c->name, sizeof(c->name));
		types = table_str(c->types, sizeof(c->types));
		if (point && types && *point && strspn(point, IDENT_CHARS) == strlen(point))
			nf = tp_markers_fields_of(types, f);
	} else if (!final) {
		return -EAGAIN; /* being written */
	}
	/* A slot the program never completed (it died writing it) or that is malformed keeps
	 * its id with a class no event of the runtime uses. */
	if (nf < 0) {
		free(point);
		free(types);
		point = strdup("");
		types = strdup("");
		nf = 0;
		if (asprintf(&name, "tp_unknown_%u", r->nclasses) < 0)
			name = NULL;
	} else {
		name = class_name(r, point, types);
	}
	if (!name || !point || !types) {
		id = -ENOMEM;
		goto out;
	}
	id = tp_trace_writer_add_class(r->w, name, f, (size_t)nf);
	if (id >= 0 && (uint32_t)id != r->nclasses)
		id = -EPROTO;
	if (id < 0)
		goto out;
	r->cls_point[r->nclasses] = point;
	r->cls_types[r->nclasses++] = types;
	point = types = NULL;
out:
	free(point);
	free(types);
	free(name);
	return id < 0 ? id : 0;
}

/* "ID\tCLASS\tTYPES\tFORMAT" lines, the format with C escapes for \, tab, newline and
 * control bytes: tracepad dump reads them (src/cli/trace-read.c). */
static int rec_write_formats(struct recorder *r)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	FILE *f;
	int fd, err = 0;

	snprintf(tmp, sizeof(tmp), "%s/%s.tmp", r->dir, TP_CLI_FORMATS_FILE);
	snprintf(path, sizeof(path), "%s/%s", r->dir, TP_CLI_FORMATS_FILE);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		return err;
	}
	fprintf(f, "# tracepad markers formats 1: id, event class, argument types, format\n");
	for (uint32_t i = 0; i < r->nformats; i++) {
		const struct rec_format *m = &r->formats[i];
		const char *cls = tp_trace_schema_name(tp_trace_writer_schema(r->w), m->cls);

		if (!m->text || !cls)
			continue;
		fprintf(f, "%u\t%s\t%s\t", i, cls, r->cls_types[m->cls]);
		for (const unsigned char *p = (const unsigned char *)m->text; *p; p++) {
			if (*p == '\\')
				fputs("\\\\", f);
			else if (*p == '\t')
				fputs("\\t", f);
			else if (*p == '\n')
				fputs("\\n", f);
			else if (*p < 0x20 || *p == 0x7f)
				fprintf(f, "\\x%02x", *p);
			else
				fputc(*p, f);
		}
		fputc('\n', f);
	}
	if (fflush(f) || ferror(f))
		err = -(errno ? errno : EIO);
	if (fclose(f) && !err)
		err = -(errno ? errno : EIO);
	if (!err && rename(tmp, path))
		err = -errno;
	if (err)
		unlink(tmp);
	r->formats_dirty = false;
	return err;
}

/* Drain the rings and take what the runtime declared.  @final: the program is gone or
 * stopped for good, entries it left half-written are closed. */
static int rec_poll(struct recorder *r, bool final)
{
	const struct tp_mctl_hdr *h = r->ctl;
	const struct tp_mctl_class *cls = (const void *)((const char *)h + TP_MCTL_CLASSES_OFF);
	const struct tp_mctl_format *fmt = (const void *)((const char *)h + TP_MCTL_FORMATS_OFF);
	uint32_t nc = __atomic_load_n(&h->next_class, __ATOMIC_ACQUIRE);
	uint32_t nf = __atomic_load_n(&h->next_format, __ATOMIC_ACQUIRE);
	bool added = false;
	int err = 0;

	nc = nc < TP_MCTL_CLASSES ? nc : TP_MCTL_CLASSES;
	nf = nf < TP_MCTL_FORMATS ? nf : TP_MCTL_FORMATS;
	while (r->nclasses < nc) {
		if ((err = rec_add_class(r, &cls[r->nclasses], final)) == -EAGAIN)
			break;
		if (err)
			return err;
		added = true;
	}
	err = 0;
	/* Classes first: the metadata must describe them before their events are read. */
	if (added && (err = tp_trace_writer_sync(r->w)))
		return err;
	while (r->nformats < nf) {
		const struct tp_mctl_format *m = &fmt[r->nformats];
		struct rec_format *o = &r->formats[r->nformats];

		if (__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE) != 1 && !final)
			break;
		if (__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE) == 1 &&
		    m->class_id < r->nclasses) {
			o->text = table_str(m->fmt, sizeof(m->fmt));
			o->cls = m->class_id;
			o->cut = m->truncated;
		}
		r->nformats++;
		r->formats_dirty = true;
	}
	if (h->dropped && !r->warned_dropped) {
		r->warned_dropped = true;
		tp_warn("record: %u site%s could not be described (too many points or formats); "
			"their events are not recorded",
			h->dropped, h->dropped == 1 ? "" : "s");
	}
	if (r->formats_dirty && (err = rec_write_formats(r)))
		return err;
	err = tp_trace_consumer_poll(r->cons);
	return err < 0 ? err : 0;
}

/* Free the pages of a memfd that a process we leave may still map. */
static void punch(int fd)
{
	struct stat st;

	if (fd >= 0 && !fstat(fd, &st))
		fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, st.st_size);
}

/* Final drain and close; prints one line and returns 1 on failure, else 0.  @release: the
 * program runs on and maps the memfds until libtracepad next runs there, so their memory is
 * given back now (its mapping then reads zeros). */
static int rec_close(struct recorder *r, bool release)
{
	int err = rec_poll(r, true), e2, ring = -1;

	e2 = tp_trace_consumer_flush(r->cons);
	if (!err && e2 < 0)
		err = e2;
	if (release)
		ring = dup(tp_trace_consumer_fd(r->cons));
	tp_trace_consumer_free(r->cons);
	r->cons = NULL;
	if (release) {
		punch(ring);
		punch(r->ctl_fd);
		if (ring >= 0)
			close(ring);
	}
	e2 = tp_trace_writer_close(r->w);
	r->w = NULL;
	if (!err && e2 < 0)
		err = e2;
	rec_free(r);
	if (err) {
		tp_cli_error("markers", "record: trace: %s", strerror(-err));
		return 1;
	}
	return 0;
}

static int add_needed(void *arg, const char *lib)
{
	bool is_elf;

	read_notes(arg, lib, 0, &is_elf);
	return 0;
}

static volatile sig_atomic_t record_child, record_stop;

/* tracepad stays alive to flush the trace: an interrupt is passed on to the program. */
static void record_forward(int sig)
{
	if (record_child > 0)
		kill(record_child, sig);
}

static void record_interrupt(int sig)
{
	record_stop = sig;
}

static int do_record(const char *glob, const char *dir, char **argv)
{
	struct tp_trace_ring_opts ropts = {
	    .nr_rings = 64,
	    .flags = TP_TRACE_NO_LOSS,
	    .wait_ns = 1000000000ull, /* a stalled tracepad must not hang the program */
	};
	struct sigaction sa = {.sa_handler = record_forward}, old_int, old_term;
	struct recorder r = {.ctl_fd = -1};
	struct sites s = {0};
	char path[PATH_MAX];
	bool is_elf;
	int err, ret = 2, st = 0, fd;
	pid_t pid;

	/* Not found: the launch says so. */
	if (tp_path_find_program(argv[0], path, sizeof(path)))
		snprintf(path, sizeof(path), "%s", argv[0]);
	/* The notes at rest only help name the classes (libtracepad declares them): a script
	 * or a wrapper such as valgrind is run all the same. */
	err = read_notes(&s, path, 0, &is_elf);
	if (err == -ENOENT || err == -EACCES) {
		tp_cli_error("markers", "record: %s: %s", path, strerror(-err));
		goto out;
	}
	if (err >= 0)
		tp_elf_foreach_needed(path, add_needed, &s);
	if (!s.n)
		fprintf(stderr,
			"tracepad markers: %s: no tracepoints (a library it loads may have "
			"some)\n",
			path);
	if (rec_new(&r, dir, &s, &ropts))
		goto out;
	fd = tp_trace_consumer_fd(r.cons);
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		tp_cli_error("markers", "record: fork: %s", strerror(errno));
		goto out;
	}
	if (!pid) {
		char fd_s[16], ctl_s[16];

		snprintf(fd_s, sizeof(fd_s), "%d", fd);
		snprintf(ctl_s, sizeof(ctl_s), "%d", r.ctl_fd);
		/* the memfds are close-on-exec: the program gets them through exec */
		fcntl(fd, F_SETFD, 0);
		fcntl(r.ctl_fd, F_SETFD, 0);
		if (setenv("TRACEPAD_MARKERS_FD", fd_s, 1) ||
		    setenv("TRACEPAD_MARKERS_CTL", ctl_s, 1) || setenv("TRACEPAD_MARKERS", glob, 1))
			_exit(127);
		execvp(argv[0], argv);
		fprintf(stderr, "tracepad markers: record: %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	record_child = pid;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			tp_cli_error("markers", "record: waitpid: %s", strerror(errno));
			break;
		}
		if (w)
			break;
		if ((err = rec_poll(&r, false)))
			tp_warn("record: %s", strerror(-err));
		usleep(20000);
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	record_child = 0;
	/* everything committed reaches the trace, even if the program was killed */
	if (rec_close(&r, false))
		goto out;
	if (WIFEXITED(st))
		ret = WEXITSTATUS(st);
	else if (WIFSIGNALED(st))
		ret = 128 + WTERMSIG(st);
out:
	rec_free(&r);
	sites_free(&s);
	return ret;
}

/* ---- record -p: a running process ---- */

/* Where libtracepad's tp__markers_remote is in @pid, checked: 0, or prints one line and
 * returns the exit status. */
static int find_remote(pid_t pid, uint64_t *addr, struct tp_markers_remote *rm)
{
	struct tp_symtab *st = tp_symtab_new();
	int err = st ? tp_symtab_load_pid(st, pid) : -ENOMEM;

	if (!err)
		err = tp_symtab_find_symbol(st, TP_MREMOTE_SYMBOL, addr);
	tp_symtab_free(st);
	if (err == -ENOENT) {
		tp_cli_error("markers",
			     "record: -p %d: the process does not use libtracepad (no %s)",
			     (int)pid, TP_MREMOTE_SYMBOL);
		return 2;
	}
	if (err)
		return proc_error("read its symbols", pid, err);
	if (tp_proc_read(pid, *addr, rm, sizeof(*rm)) != sizeof(*rm))
		return proc_error("read its memory", pid, -EIO);
	if (rm->magic != TP_MREMOTE_MAGIC || rm->version != TP_MREMOTE_VERSION ||
	    rm->size != sizeof(*rm)) {
		tp_cli_error("markers", "record: -p %d: its libtracepad speaks another protocol",
			     (int)pid);
		return 2;
	}
	return 0;
}

#define REMOTE_FIELD(f) (remote + offsetof(struct tp_markers_remote, f))

/* Names of the points among @s matching @glob that are (@on) or are not enabled now,
 * comma-separated (a glob matching exactly them), or NULL on no memory.  "" for none. */
static char *points_in_state(pid_t pid, const struct sites *s, const char *glob, int on)
{
	size_t len = 0;
	char *out = strdup("");

	for (size_t i = 0; out && i < s->n; i++) {
		const char *n = s->v[i].name;
		bool dup = false;

		if (!n || !glob_match(glob, n) || point_enabled(pid, point_of(pid, &s->v[i])) != on)
			continue;
		for (size_t j = 0; j < i && !dup; j++)
			dup = s->v[j].name && !strcmp(s->v[j].name, n) && glob_match(glob, n);
		if (dup)
			continue;
		char *o = realloc(out, len + strlen(n) + 2);
		if (!o) {
			free(out);
			return NULL;
		}
		out = o;
		len += (size_t)sprintf(out + len, "%s%s", len ? "," : "", n);
	}
	return out;
}

/* Stop the session: under ptrace, zero the runtime's session, ask it to drop its mappings,
 * and disable the points record enabled, also at sites registered since (dlopen). */
static int record_pid_stop(pid_t pid, uint64_t remote, const char *ours)
{
	struct tp_proc *p = NULL;
	struct sites s = {0};
	uint64_t zero = 0;
	uint32_t req = 0;
	int32_t nopid = 0;
	int err, changed = 0, refused = 0;

	if ((err = tp_proc_attach(pid, 0, &p)))
		return err;
	if ((err = tp_proc_write(pid, REMOTE_FIELD(session), &zero, sizeof(zero))) ||
	    (err = tp_proc_write(pid, REMOTE_FIELD(tracer_pid), &nopid, sizeof(nopid))) ||
	    tp_proc_read(pid, REMOTE_FIELD(req), &req, sizeof(req)) != sizeof(req))
		goto out;
	req++;
	if ((err = tp_proc_write(pid, REMOTE_FIELD(req), &req, sizeof(req))))
		goto out;
	if (*ours && !(err = read_process(&s, pid)))
		err = set_sites(p, pid, &s, ours, false, &changed, &refused);
out:
	tp_proc_detach(p);
	sites_free(&s);
	return err;
}

/* Refuse a process recorded by a tracepad still alive (a launched program's session has no
 * tracer pid); a stop request not yet acted on is no obstacle.  0 or the exit status. */
static int check_free(pid_t pid, const struct tp_markers_remote *rm)
{
	bool alive = rm->tracer_pid > 0 && (!kill(rm->tracer_pid, 0) || errno == EPERM);

	if ((rm->session && (!rm->tracer_pid || alive)) || (rm->req != rm->done && alive)) {
		tp_cli_error("markers", "record: -p %d: the process is being recorded already",
			     (int)pid);
		return 2;
	}
	return 0;
}

/* With every thread stopped, so that the request and the enabled sites appear at once:
 * write the request, enable the matching points that are off.  *@ours: the points enabled
 * here, to disable at the end.  0 or the exit status. */
static int record_pid_start(pid_t pid, uint64_t remote, const struct tp_markers_remote *rm,
			    struct recorder *r, struct sites *s, const char *glob, char **ours,
			    int *refused)
{
	int32_t me = (int32_t)getpid(), fds[2] = {tp_trace_consumer_fd(r->cons), r->ctl_fd};
	uint32_t req = rm->req + 1;
	struct tp_proc *p = NULL;
	int err, changed = 0;

	if ((err = tp_proc_attach(pid, 0, &p)))
		return proc_error("attach", pid, err);
	/* req last: the runtime reads the rest once it sees req change. */
	if ((err = tp_proc_write(pid, REMOTE_FIELD(tracer_pid), &me, sizeof(me))) ||
	    (err = tp_proc_write(pid, REMOTE_FIELD(ring_fd), fds, sizeof(fds))) ||
	    (err = tp_proc_write(pid, REMOTE_FIELD(req), &req, sizeof(req)))) {
		tp_proc_detach(p);
		return proc_error("write its memory", pid, err);
	}
	*ours = points_in_state(pid, s, glob, 0);
	if (*ours && **ours) {
		set_sites(p, pid, s, *ours, true, &changed, refused);
		/* Those whose sites were all refused were not enabled: not ours to disable. */
		char *on = points_in_state(pid, s, *ours, 1);
		free(*ours);
		*ours = on;
	}
	tp_proc_detach(p);
	if (!*ours) {
		tp_cli_error("markers", "record: out of memory");
		record_pid_stop(pid, remote, "");
		return 1;
	}
	return 0;
}

enum record_end { END_ASKED, END_GONE, END_FAILED };

/* Drain until SIGINT/SIGTERM, @duration, the process's exit, or libtracepad's report that it
 * could not take the memfds. */
static enum record_end record_pid_wait(pid_t pid, uint64_t remote, struct recorder *r,
				       double duration)
{
	struct sigaction sa = {.sa_handler = record_interrupt}, old_int, old_term;
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	enum record_end end = END_ASKED;
	struct timespec t0, now;

	sigemptyset(&sa.sa_mask);
	record_stop = 0;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!record_stop) {
		struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
		struct tp_markers_remote rm;
		int err;

		if ((err = rec_poll(r, false)))
			tp_warn("record: %s", strerror(-err));
		if (pidfd >= 0 ? poll(&pfd, 1, 20) > 0
			       : (usleep(20000), kill(pid, 0) && errno == ESRCH)) {
			end = END_GONE;
			break;
		}
		if (tp_proc_read(pid, remote, &rm, sizeof(rm)) == sizeof(rm) && rm.req == rm.done &&
		    rm.err) {
			tp_cli_error("markers",
				     "record: -p %d: the process could not open tracepad's shared "
				     "memory (/proc/%d/fd): %s",
				     (int)pid, (int)getpid(), strerror(-rm.err));
			end = END_FAILED;
			break;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (duration > 0 &&
		    (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9 >=
			duration)
			break;
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	if (pidfd >= 0)
		close(pidfd);
	return end;
}

static int do_record_pid(pid_t pid, const char *glob, const char *dir, double duration)
{
	/* A running process never waits for tracepad (which may die without telling it): a
	 * full ring discards, and the trace counts it. */
	struct tp_trace_ring_opts ropts = {.nr_rings = 16, .nr_subbufs = 8};
	struct tp_markers_remote rm;
	struct recorder r = {.ctl_fd = -1};
	struct sites s = {0};
	enum record_end end;
	uint64_t remote;
	char *ours = NULL;
	int err, ret = 2, matched = 0, refused = 0;

	if ((err = read_process(&s, pid))) {
		ret = proc_error("read its memory", pid, err);
		goto out;
	}
	if (!s.n) {
		tp_cli_error("markers", "record: -p %d: the process has no tracepoints", (int)pid);
		goto out;
	}
	for (size_t i = 0; i < s.n; i++)
		matched += s.v[i].name && glob_match(glob, s.v[i].name);
	if (!matched) {
		tp_cli_error("markers", "record: -p %d: no point matches '%s'", (int)pid, glob);
		goto out;
	}
	if ((ret = find_remote(pid, &remote, &rm)) || (ret = check_free(pid, &rm)))
		goto out;
	ret = 2;
	if (rec_new(&r, dir, &s, &ropts))
		goto out;
	if ((ret = record_pid_start(pid, remote, &rm, &r, &s, glob, &ours, &refused)))
		goto out;
	end = record_pid_wait(pid, remote, &r, duration);
	if (end != END_GONE && (err = record_pid_stop(pid, remote, ours)) && err != -ESRCH)
		tp_warn("record: -p %d: stopping: %s", (int)pid, strerror(-err));
	ret = rec_close(&r, end != END_GONE) ? 1 : 0;
	if (end == END_FAILED)
		ret = 2;
	else if (refused && !ret)
		ret = 1; /* as enable: some sites were refused */
out:
	rec_free(&r);
	free(ours);
	sites_free(&s);
	return ret;
}

int cmd_markers(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"pid", required_argument, NULL, 'p'},   {"enable", required_argument, NULL, 'e'},
	    {"trace", required_argument, NULL, 't'}, {"duration", required_argument, NULL, 'D'},
	    {"help", no_argument, NULL, 'h'},	     {NULL, 0, NULL, 0},
	};
	const char *sub, *glob = NULL, *dir = NULL;
	pid_t pid = 0;
	double duration = 0;
	char *end;
	int c;

	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (argc < 2) {
		fputs(usage_text, stderr);
		return 2;
	}
	sub = argv[1];
	if (strcmp(sub, "list") && strcmp(sub, "enable") && strcmp(sub, "disable") &&
	    strcmp(sub, "record")) {
		tp_cli_error("markers", "unknown subcommand '%s' (list, enable, disable, record)",
			     sub);
		return 2;
	}
	argc--;
	argv++;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+p:e:t:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'e':
			glob = optarg;
			break;
		case 't':
			dir = optarg;
			break;
		case 'D':
			duration = strtod(optarg, &end);
			if (*end || !*optarg || !(duration > 0) || duration > 1e9) {
				tp_cli_error("markers",
					     "--duration: '%s' is not a number of seconds", optarg);
				return 2;
			}
			break;
		case 'p': {
			long v = strtol(optarg, &end, 10);

			if (*end || !*optarg || v <= 0 || v > INT_MAX) {
				tp_cli_error("markers", "-p: '%s' is not a process id", optarg);
				return 2;
			}
			pid = (pid_t)v;
			break;
		}
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if ((glob || dir || duration) && strcmp(sub, "record")) {
		tp_cli_error("markers", "%s: -e, --trace and --duration belong to record", sub);
		return 2;
	}
	if (!strcmp(sub, "record")) {
		if (!dir) {
			tp_cli_error("markers", "record: --trace DIR is required");
			return 2;
		}
		if (glob && !*glob) {
			tp_cli_error("markers", "record: -e: empty GLOB");
			return 2;
		}
		if (pid && optind < argc) {
			tp_cli_error("markers",
				     "record: give either -p PID or a PROGRAM, not both");
			return 2;
		}
		if (duration && !pid) {
			tp_cli_error("markers", "record: --duration goes with -p PID");
			return 2;
		}
		if (pid)
			return do_record_pid(pid, glob ? glob : "*", dir, duration);
		if (optind >= argc) {
			tp_cli_error("markers", "record: give a PROGRAM to launch or -p PID");
			return 2;
		}
		return do_record(glob ? glob : "*", dir, argv + optind);
	}
	if (!strcmp(sub, "list")) {
		if (pid && optind < argc) {
			tp_cli_error("markers", "give either -p PID or programs, not both");
			return 2;
		}
		if (pid)
			return do_list_pid(pid);
		if (optind >= argc) {
			tp_cli_error("markers", "list: give a PROGRAM or -p PID");
			return 2;
		}
		return do_list_files(argv + optind, argc - optind);
	}
	if (!pid) {
		tp_cli_error("markers", "%s: -p PID is required", sub);
		return 2;
	}
	if (optind != argc - 1) {
		tp_cli_error("markers", "%s: give exactly one GLOB", sub);
		return 2;
	}
	return do_set(pid, argv[optind], !strcmp(sub, "enable"));
}
