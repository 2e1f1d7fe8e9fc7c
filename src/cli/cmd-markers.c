/* tracepad markers: the static tracepoints of <tracepad/tracepoint.h>: list the sites of a
 * program at rest (its .note.tracepad) or of a live process with their state, enable or
 * disable them in a live process over ptrace (until the agent has a control channel), and
 * record a launched program's events into a trace through libtracepad's rings. */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <gelf.h>
#include <getopt.h>
#include <inttypes.h>
#include <libelf.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arch/arch.h"
#include "cli/cli.h"
#include "common/log.h"
#include "proc/proc.h"
#include "trace/trace.h"

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
    "\n"
    "List the static tracepoints (<tracepad/tracepoint.h>) of programs or libraries at rest,\n"
    "or of a running process with the state of each site; enable or disable the points whose\n"
    "name matches GLOB (fnmatch, comma-separated alternatives) in a running process; record\n"
    "the events of a launched program's points into a trace directory.\n"
    "\n"
    "  -p, --pid PID     the running process (list: every object it has mapped)\n"
    "  -e, --enable GLOB record: the points enabled from the start (default: all)\n"
    "  -t, --trace DIR   record: the trace directory to create\n"
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

/* @len bytes at link-time address @vaddr from the file's allocated sections. */
static int elf_read(Elf *e, uint64_t vaddr, void *buf, size_t len)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(e, scn))) {
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_ALLOC) ||
		    sh.sh_type == SHT_NOBITS)
			continue;
		if (vaddr < sh.sh_addr || vaddr + len > sh.sh_addr + sh.sh_size)
			continue;
		d = elf_getdata(scn, NULL);
		if (!d || !d->d_buf || vaddr - sh.sh_addr + len > d->d_size)
			return -EIO;
		memcpy(buf, (const char *)d->d_buf + (vaddr - sh.sh_addr), len);
		return 0;
	}
	return -ENOENT;
}

static char *elf_string(Elf *e, uint64_t vaddr)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(e, scn))) {
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_ALLOC) ||
		    sh.sh_type == SHT_NOBITS)
			continue;
		if (vaddr < sh.sh_addr || vaddr >= sh.sh_addr + sh.sh_size)
			continue;
		d = elf_getdata(scn, NULL);
		if (!d || !d->d_buf || vaddr - sh.sh_addr >= d->d_size)
			return NULL;
		const char *p = (const char *)d->d_buf + (vaddr - sh.sh_addr);
		return strndup(p, d->d_size - (vaddr - sh.sh_addr));
	}
	return NULL;
}

/* A pointer stored at @vaddr as the loader would see it relative to the object: the word in
 * the file, or the addend of its R_X86_64_RELATIVE relocation (position-independent code). */
static uint64_t elf_pointer(Elf *e, uint64_t vaddr)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	uint64_t v = 0;

	if (elf_read(e, vaddr, &v, sizeof(v)) || v)
		return v;
	while ((scn = elf_nextscn(e, scn))) {
		Elf_Data *d;
		GElf_Rela r;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA || !sh.sh_entsize)
			continue;
		d = elf_getdata(scn, NULL);
		for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
			if (gelf_getrela(d, (int)i, &r) && r.r_offset == vaddr &&
			    GELF_R_TYPE(r.r_info) == R_X86_64_RELATIVE)
				return (uint64_t)r.r_addend;
		}
	}
	return 0;
}

/* Add the sites of the notes of @path; addresses are link-time + @bias.  Returns the number
 * of sites, or -errno. */
static int read_notes(struct sites *out, const char *path, uint64_t bias, bool *is_elf)
{
	int fd, n = 0, err = 0;
	Elf_Scn *scn = NULL;
	char **objs;
	Elf *e;

	*is_elf = false;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (!e || elf_kind(e) != ELF_K_ELF) {
		err = -ENOEXEC;
		goto out;
	}
	*is_elf = true;
	objs = realloc(out->objects, (out->nobjects + 1) * sizeof(*objs));
	if (!objs || !(objs[out->nobjects] = strdup(path))) {
		if (objs)
			out->objects = objs;
		err = -ENOMEM;
		goto out;
	}
	out->objects = objs;
	const char *object = objs[out->nobjects++];
	size_t shstrndx;
	if (elf_getshdrstrndx(e, &shstrndx))
		goto out;
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		GElf_Nhdr nh;
		size_t off = 0, noff, doff;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		const char *sname = elf_strptr(e, shstrndx, sh.sh_name);
		if (!sname || strcmp(sname, ".note.tracepad"))
			continue;
		d = elf_getdata(scn, NULL);
		while (d && (off = gelf_getnote(d, off, &nh, &noff, &doff)) > 0) {
			const char *name = (const char *)d->d_buf + noff;
			uint64_t q[6];
			struct site *s;

			if (nh.n_type != NOTE_TYPE_SITE || nh.n_namesz != sizeof(NOTE_OWNER) ||
			    memcmp(name, NOTE_OWNER, sizeof(NOTE_OWNER)) ||
			    nh.n_descsz != sizeof(q))
				continue;
			memcpy(q, (const char *)d->d_buf + doff, sizeof(q));
			if (!q[0])
				continue; /* a site in code the linker dropped */
			if (!(s = sites_add(out))) {
				err = -ENOMEM;
				goto out;
			}
			s->object = object;
			s->addr = q[0] + bias;
			s->target = q[1] + bias;
			s->desc = q[2] + bias;
			s->name = elf_string(e, q[3]);
			s->fmt = elf_string(e, q[4]);
			s->types = elf_string(e, q[5]);
			uint64_t file = elf_pointer(e, q[2] + DESC_FILE);
			uint32_t line = 0;
			if (file)
				s->file = elf_string(e, file);
			if (!elf_read(e, q[2] + DESC_LINE, &line, sizeof(line)))
				s->line = line;
			n++;
		}
	}
out:
	elf_end(e);
	close(fd);
	return err ? err : n;
}

/* ---- the live process ---- */

/* bias of the object mapped at @start from file @offset, from its PT_LOAD headers */
static int map_bias(const char *path, uint64_t start, uint64_t offset, uint64_t *bias)
{
	uint64_t pgmask = ~((uint64_t)sysconf(_SC_PAGESIZE) - 1);
	int fd = open(path, O_RDONLY | O_CLOEXEC), err = -ENOENT;
	size_t nph = 0;
	Elf *e;

	if (fd < 0)
		return -errno;
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (e && elf_kind(e) == ELF_K_ELF && !elf_getphdrnum(e, &nph)) {
		for (size_t i = 0; i < nph; i++) {
			GElf_Phdr ph;

			if (!gelf_getphdr(e, (int)i, &ph) || ph.p_type != PT_LOAD)
				continue;
			if ((ph.p_offset & pgmask) > offset || offset >= ph.p_offset + ph.p_filesz)
				continue;
			*bias = start - (ph.p_vaddr - ph.p_offset + offset);
			err = 0;
			break;
		}
	}
	elf_end(e);
	close(fd);
	return err;
}

static char *proc_string(pid_t pid, uint64_t addr)
{
	char buf[512];
	ssize_t n = tp_proc_read(pid, addr, buf, sizeof(buf) - 1);

	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	return strdup(buf);
}

/* The sites of every executable file mapping of @pid, at runtime addresses, their source
 * from the process memory.  Returns 0 or -errno (-ESRCH, -EPERM for /proc/PID/mem). */
static int read_process(struct sites *out, pid_t pid)
{
	char fname[64], *line = NULL;
	size_t cap = 0;
	FILE *fp;
	int err = 0;

	snprintf(fname, sizeof(fname), "/proc/%d/maps", (int)pid);
	fp = fopen(fname, "re");
	if (!fp)
		return errno == ENOENT ? -ESRCH : -errno;
	while (getline(&line, &cap, fp) > 0) {
		uint64_t start, end, offset, bias = 0;
		char perms[8];
		int pos = 0;
		bool seen = false, is_elf;
		size_t first;

		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*s %n", &start, &end,
			   perms, &offset, &pos) < 4 ||
		    !pos || perms[2] != 'x' || line[pos] != '/')
			continue;
		char *path = line + pos;
		path[strcspn(path, "\n")] = '\0';
		for (size_t i = 0; i < out->nobjects; i++)
			seen |= !strcmp(out->objects[i], path);
		if (seen || map_bias(path, start, offset, &bias))
			continue;
		first = out->n;
		if (read_notes(out, path, bias, &is_elf) < 0)
			continue;
		for (size_t i = first; i < out->n; i++) {
			struct site *s = &out->v[i];
			uint64_t file = 0;
			uint32_t ln = 0;
			ssize_t r;

			free(s->file);
			s->file = NULL;
			r = tp_proc_read(pid, s->desc + DESC_FILE, &file, sizeof(file));
			if (r < 0) {
				err = (int)r;
				goto out;
			}
			if (r == sizeof(file) && file)
				s->file = proc_string(pid, file);
			if (tp_proc_read(pid, s->desc + DESC_LINE, &ln, sizeof(ln)) == sizeof(ln))
				s->line = ln;
		}
	}
out:
	free(line);
	fclose(fp);
	return err;
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

#define MAX_ARGS 8 /* TP_MAX_ARGS */

/* The fields of a class, by the rules of libtracepad's tp_markers_fields (src/markers/
 * record.c), which encodes the payloads: "fmt" u32, then a0..a7; integers by size and sign,
 * pointers as hex u64, doubles as their IEEE-754 bits in a hex u64 named "aN_f64bits",
 * strings as strings.
 * (<tracepad/tracepoint.h> cannot be included here: it registers the including program's
 * sites with libtracepad.)  Returns the number of fields or -EINVAL. */
static int record_fields(const char *types, struct tp_trace_field_desc out[1 + MAX_ARGS])
{
	static const char *const names[MAX_ARGS] = {"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"};
	static const char *const dbl_names[MAX_ARGS] = {"a0_f64bits", "a1_f64bits", "a2_f64bits",
							"a3_f64bits", "a4_f64bits", "a5_f64bits",
							"a6_f64bits", "a7_f64bits"};
	size_t n = strlen(types);

	if (n > MAX_ARGS)
		return -EINVAL;
	memset(out, 0, sizeof(out[0]) * (n + 1));
	out[0] = (struct tp_trace_field_desc){.name = "fmt", .type = TP_TRACE_INT, .bits = 32};
	for (size_t i = 0; i < n; i++) {
		static const char codes[] = "bBhHiIlLpd";
		static const uint8_t bits[] = {8, 8, 16, 16, 32, 32, 64, 64, 64, 64};
		const char *c = strchr(codes, types[i]);
		struct tp_trace_field_desc *f = &out[i + 1];

		f->name = types[i] == 'd' ? dbl_names[i] : names[i];
		if (types[i] == 's') {
			f->type = TP_TRACE_STRING;
			continue;
		}
		if (!c)
			return -EINVAL;
		f->type = TP_TRACE_INT;
		f->bits = bits[c - codes];
		f->is_signed = strchr("bhil", types[i]) != NULL;
		f->base = types[i] == 'p' || types[i] == 'd' ? 16 : 10;
	}
	return (int)n + 1;
}

/* One event class per distinct (point name, argument types): the key the runtime finds in
 * TRACEPAD_MARKERS_CLASSES.  Sites of a point with the same types but other formats share
 * the class; their "fmt" field (FNV-1a of the format) tells them apart. */
struct rec_class {
	const char *name, *types; /* borrowed from the site list */
	char *cname;
};

static bool class_name_ok(const char *n)
{
	if (!((*n >= 'A' && *n <= 'Z') || (*n >= 'a' && *n <= 'z')))
		return false;
	for (; *n; n++)
		if (!(*n == '_' || (*n >= '0' && *n <= '9') || (*n >= 'A' && *n <= 'Z') ||
		      (*n >= 'a' && *n <= 'z')))
			return false;
	return strlen(n) <= TP_TRACE_NAME_MAX;
}

/* Register the classes of @s with @w in note order (ids from 0) and build the value of
 * TRACEPAD_MARKERS_CLASSES: "name:types=id,...". */
static int record_classes(struct tp_trace_writer *w, const struct sites *s, char **env)
{
	struct rec_class *cls = calloc(s->n ? s->n : 1, sizeof(*cls));
	size_t n = 0, len = 0;
	char *out = NULL;
	int err = 0;

	if (!cls)
		return -ENOMEM;
	for (size_t i = 0; i < s->n; i++) {
		const struct site *st = &s->v[i];
		bool seen = false;

		if (!st->name || !st->types || strlen(st->types) > MAX_ARGS)
			continue;
		for (size_t k = 0; k < n && !seen; k++)
			seen = !strcmp(cls[k].name, st->name) && !strcmp(cls[k].types, st->types);
		if (!seen)
			cls[n++] = (struct rec_class){st->name, st->types, NULL};
	}
	for (size_t k = 0; k < n; k++) {
		struct tp_trace_field_desc f[1 + MAX_ARGS];
		bool alone = true;
		int nf;

		for (size_t j = 0; j < n; j++)
			if (j != k && !strcmp(cls[j].name, cls[k].name))
				alone = false;
		/* A point with one signature is named as itself; otherwise per signature. */
		if (asprintf(&cls[k].cname, alone ? "%s%s%s" : "%s%s_%s",
			     class_name_ok(cls[k].name) ? "" : "tp_", cls[k].name,
			     alone ? "" : (*cls[k].types ? cls[k].types : "v")) < 0) {
			cls[k].cname = NULL;
			err = -ENOMEM;
			goto out;
		}
		if (!class_name_ok(cls[k].cname)) {
			tp_cli_error("markers",
				     "record: point name '%s' cannot name an event class",
				     cls[k].name);
			err = -EINVAL;
			goto out;
		}
		if ((nf = record_fields(cls[k].types, f)) < 0) {
			tp_cli_error("markers", "record: point %s: unknown argument types '%s'",
				     cls[k].name, cls[k].types);
			err = nf;
			goto out;
		}
		int id = tp_trace_writer_add_class(w, cls[k].cname, f, (size_t)nf);
		if (id < 0) {
			tp_cli_error("markers", "record: event class %s: %s", cls[k].cname,
				     strerror(-id));
			err = id;
			goto out;
		}
		size_t need = strlen(cls[k].name) + strlen(cls[k].types) + 16;
		char *o = realloc(out, len + need);
		if (!o) {
			err = -ENOMEM;
			goto out;
		}
		out = o;
		len += (size_t)snprintf(out + len, need, "%s%s:%s=%d", len ? "," : "", cls[k].name,
					cls[k].types, id);
	}
	if (!out && !(out = strdup("")))
		err = -ENOMEM;
out:
	for (size_t k = 0; k < n; k++)
		free(cls[k].cname);
	free(cls);
	if (err) {
		free(out);
		return err;
	}
	*env = out;
	return 0;
}

/* @prog as execvp would find it, for reading its notes. */
static char *find_program(const char *prog)
{
	const char *path = getenv("PATH");

	if (strchr(prog, '/') || !path)
		return strdup(prog);
	for (const char *p = path; *p;) {
		size_t len = strcspn(p, ":");
		char *full;

		if (asprintf(&full, "%.*s/%s", (int)len, len ? p : ".", prog) < 0)
			return NULL;
		if (!access(full, X_OK))
			return full;
		free(full);
		p += len;
		if (*p == ':')
			p++;
	}
	return strdup(prog);
}

/* The first existing file named @name in the colon-separated directories of @dirs ($ORIGIN is
 * @origin), or NULL. */
static char *lib_search(const char *name, const char *dirs, const char *origin)
{
	for (const char *p = dirs; p && *p;) {
		size_t len = strcspn(p, ":");
		char *full;
		int r;

		if (len >= 7 && !strncmp(p, "$ORIGIN", 7))
			r = asprintf(&full, "%s%.*s/%s", origin, (int)(len - 7), p + 7, name);
		else
			r = asprintf(&full, "%.*s/%s", (int)len, len ? p : ".", name);
		if (r < 0)
			return NULL;
		if (!access(full, R_OK))
			return full;
		free(full);
		p += len;
		if (*p == ':')
			p++;
	}
	return NULL;
}

/* Add the sites of the libraries @path needs directly (DT_NEEDED), found as the loader
 * would in the common cases: LD_LIBRARY_PATH, DT_RUNPATH or DT_RPATH, then the system's
 * directories (/etc/ld.so.cache is not read).  Libraries not found are skipped. */
static void read_needed(struct sites *out, const char *path)
{
	static const char sysdirs[] = "/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:"
				      "/lib64:/usr/lib64:/lib:/usr/lib:/usr/local/lib";
	char **needed = NULL, *origin = strdup(path), *slash;
	const char *runpath = NULL;
	size_t n = 0;
	Elf_Scn *scn = NULL;
	Elf *e = NULL;
	int fd;

	if (!origin)
		return;
	slash = strrchr(origin, '/');
	if (slash)
		*slash = 0;
	else
		strcpy(origin, ".");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || !(e = elf_begin(fd, ELF_C_READ, NULL)))
		goto out;
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		GElf_Dyn dyn;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNAMIC ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		for (int i = 0; gelf_getdyn(d, i, &dyn) && dyn.d_tag != DT_NULL; i++) {
			const char *s = elf_strptr(e, sh.sh_link, dyn.d_un.d_val);
			char **v;

			if (!s)
				continue;
			if (dyn.d_tag == DT_RUNPATH || (dyn.d_tag == DT_RPATH && !runpath)) {
				runpath = s;
			} else if (dyn.d_tag == DT_NEEDED &&
				   (v = realloc(needed, (n + 1) * sizeof(*v)))) {
				needed = v;
				needed[n++] = (char *)s;
			}
		}
	}
	for (size_t i = 0; i < n; i++) {
		char *lib = strchr(needed[i], '/') ? strdup(needed[i]) : NULL;
		bool is_elf;

		if (!lib)
			lib = lib_search(needed[i], getenv("LD_LIBRARY_PATH"), origin);
		if (!lib)
			lib = lib_search(needed[i], runpath, origin);
		if (!lib)
			lib = lib_search(needed[i], sysdirs, origin);
		if (lib)
			read_notes(out, lib, 0, &is_elf);
		free(lib);
	}
out:
	free(needed);
	if (e)
		elf_end(e);
	if (fd >= 0)
		close(fd);
	free(origin);
}

static volatile sig_atomic_t record_child;

/* tracepad stays alive to flush the trace: an interrupt is passed on to the program. */
static void record_forward(int sig)
{
	if (record_child > 0)
		kill(record_child, sig);
}

static int do_record(const char *glob, const char *dir, char **argv)
{
	struct tp_trace_opts topts = {.clock = tp_trace_clock_best()};
	struct tp_trace_ring_opts ropts = {
	    .nr_rings = 64,
	    .flags = TP_TRACE_NO_LOSS,
	    .wait_ns = 1000000000ull, /* a stalled tracepad must not hang the program */
	};
	struct tp_trace_consumer *cons = NULL;
	struct tp_trace_writer *w = NULL;
	struct sigaction sa = {.sa_handler = record_forward}, old_int, old_term;
	struct sites s = {0};
	char *path, *classes = NULL;
	bool is_elf;
	int err, ret = 2, st = 0, fd;
	pid_t pid;

	if (!(path = find_program(argv[0])))
		return 2;
	err = read_notes(&s, path, 0, &is_elf);
	if (err < 0) {
		tp_cli_error("markers", "record: %s: %s", path,
			     err == -ENOEXEC ? "not an ELF file" : strerror(-err));
		goto out;
	}
	read_needed(&s, path);
	if (!s.n)
		fprintf(stderr, "tracepad markers: %s: no tracepoints\n", path);
	if ((err = tp_trace_writer_new(dir, &topts, &w))) {
		tp_cli_error("markers", "record: --trace %s: %s", dir, strerror(-err));
		goto out;
	}
	if (record_classes(w, &s, &classes))
		goto out;
	if ((err = tp_trace_writer_sync(w)) || (err = tp_trace_consumer_new(w, &ropts, &cons))) {
		tp_cli_error("markers", "record: --trace %s: %s", dir, strerror(-err));
		goto out;
	}
	fd = tp_trace_consumer_fd(cons);
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		tp_cli_error("markers", "record: fork: %s", strerror(errno));
		goto out;
	}
	if (!pid) {
		char fd_s[16];

		snprintf(fd_s, sizeof(fd_s), "%d", fd);
		/* the memfd is close-on-exec: the program gets it through exec */
		fcntl(fd, F_SETFD, 0);
		if (setenv("TRACEPAD_MARKERS_FD", fd_s, 1) ||
		    setenv("TRACEPAD_MARKERS_CLASSES", classes, 1) ||
		    setenv("TRACEPAD_MARKERS", glob, 1))
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
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			tp_cli_error("markers", "record: waitpid: %s", strerror(errno));
			break;
		}
		if (r)
			break;
		tp_trace_consumer_poll(cons);
		usleep(20000);
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	record_child = 0;
	/* everything committed reaches the trace, even if the program was killed */
	err = tp_trace_consumer_flush(cons);
	tp_trace_consumer_free(cons);
	cons = NULL;
	int cerr = tp_trace_writer_close(w);
	w = NULL;
	if (err < 0 || cerr < 0) {
		tp_cli_error("markers", "record: --trace %s: %s", dir,
			     strerror(-(err < 0 ? err : cerr)));
		goto out;
	}
	if (WIFEXITED(st))
		ret = WEXITSTATUS(st);
	else if (WIFSIGNALED(st))
		ret = 128 + WTERMSIG(st);
out:
	tp_trace_consumer_free(cons);
	tp_trace_writer_free(w);
	free(classes);
	free(path);
	sites_free(&s);
	return ret;
}

int cmd_markers(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"pid", required_argument, NULL, 'p'},
	    {"enable", required_argument, NULL, 'e'},
	    {"trace", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *sub, *glob = NULL, *dir = NULL;
	pid_t pid = 0;
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
	elf_version(EV_CURRENT);
	if ((glob || dir) && strcmp(sub, "record")) {
		tp_cli_error("markers", "%s: -e and --trace belong to record", sub);
		return 2;
	}
	if (!strcmp(sub, "record")) {
		if (pid) {
			tp_cli_error("markers", "record: -p PID is not supported; give a PROGRAM");
			return 2;
		}
		if (!dir) {
			tp_cli_error("markers", "record: --trace DIR is required");
			return 2;
		}
		if (optind >= argc) {
			tp_cli_error("markers", "record: give a PROGRAM to launch");
			return 2;
		}
		if (glob && !*glob) {
			tp_cli_error("markers", "record: -e: empty GLOB");
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
