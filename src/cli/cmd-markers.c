/* tracepad markers: the static tracepoints of <tracepad/tracepoint.h>: list the sites of a
 * program at rest (its .note.tracepad) or of a live process with their state, enable or
 * disable them in a live process, and record the events of a launched program or of a
 * running process into a trace (the engine: src/markers/tracer.h). */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <getopt.h>
#include <inttypes.h>
#include <libelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "markers/tracer.h"
#include "proc/proc.h"

#define NOTE_OWNER "tracepad"
#define NOTE_TYPE_SITE 1
/* Offsets in struct tp_site_desc (<tracepad/tracepoint.h>, x86-64). */
#define DESC_FILE 24
#define DESC_LINE 32

/* The readers of notes and of processes below keep their names until they move to src/elf. */
#define site tp_markers_site
#define sites tp_markers_sites
#define sites_add tp_markers_sites_add
#define sites_free tp_markers_sites_free

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

static int proc_error(const char *what, pid_t pid, int err)
{
	char msg[512];

	tp_markers_proc_error(msg, sizeof(msg), what, pid, err);
	tp_cli_error("markers", "%s", msg);
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
	const char *last = NULL, *state, *point;
	char unk[32];
	int err = read_process(&s, pid);

	if (err) {
		sites_free(&s);
		return proc_error("read its memory", pid, err);
	}
	for (size_t i = 0; i < s.n; i++) {
		state = tp_markers_site_state(pid, &s.v[i], unk, &point);
		if (s.v[i].object != last && s.v[i].object)
			printf("# %s\n", last = s.v[i].object);
		print_site(&s.v[i], state, point);
	}
	if (!s.n)
		fprintf(stderr, "tracepad markers: -p %d: no tracepoints\n", (int)pid);
	sites_free(&s);
	return 0;
}

static int do_set(pid_t pid, const char *glob, bool on)
{
	struct sites s = {0};
	int err, changed = 0, refused = 0, matched, ret = 2;
	char msg[512];

	err = read_process(&s, pid);
	matched = err ? 0 : (int)tp_markers_count_matching(&s, glob);
	if (err)
		ret = proc_error("read its memory", pid, err);
	else if (!s.n)
		tp_cli_error("markers", "-p %d: the process has no tracepoints", (int)pid);
	else if (!matched)
		tp_cli_error("markers", "-p %d: no point matches '%s'", (int)pid, glob);
	else if (tp_markers_switch(pid, &s, glob, on, &changed, &refused, msg, sizeof(msg)))
		tp_cli_error("markers", "%s", msg);
	else {
		printf("%s %d site%s (%d matching, %d refused)\n", on ? "enabled" : "disabled",
		       changed, changed == 1 ? "" : "s", matched, refused);
		ret = refused ? 1 : 0;
	}
	sites_free(&s);
	return ret;
}

/* ---- record ---- */

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

static int do_record(const char *glob, const char *dir, char **argv)
{
	struct sites s = {0};
	char *path, msg[PATH_MAX + 64] = "";
	bool is_elf;
	int err, ret = 2;

	if (!(path = find_program(argv[0])))
		return 2;
	/* The notes at rest only help name the classes (libtracepad declares them): a script
	 * or a wrapper such as valgrind is run all the same. */
	err = read_notes(&s, path, 0, &is_elf);
	if (err == -ENOENT || err == -EACCES) {
		tp_cli_error("markers", "record: %s: %s", path, strerror(-err));
		goto out;
	}
	if (err >= 0)
		read_needed(&s, path);
	if (!s.n)
		fprintf(stderr,
			"tracepad markers: %s: no tracepoints (a library it loads may have "
			"some)\n",
			path);
	ret = tp_markers_record_launch(dir, &s, glob, argv, msg, sizeof(msg));
	if (msg[0])
		tp_cli_error("markers", "%s", msg);
out:
	free(path);
	sites_free(&s);
	return ret;
}

static int do_record_pid(pid_t pid, const char *glob, const char *dir, double duration)
{
	struct sites s = {0};
	char msg[PATH_MAX + 64] = "";
	int err = read_process(&s, pid), ret;

	if (err)
		ret = proc_error("read its memory", pid, err);
	else
		ret = tp_markers_record_pid(pid, &s, read_process, glob, dir, duration, msg,
					    sizeof(msg));
	if (msg[0])
		tp_cli_error("markers", "%s", msg);
	sites_free(&s);
	return ret;
}

/* One line on stderr, exit status 2: the arguments are wrong. */
#define REFUSE(...) return (tp_cli_error("markers", __VA_ARGS__), 2)

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
	    strcmp(sub, "record"))
		REFUSE("unknown subcommand '%s' (list, enable, disable, record)", sub);
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
			if (tp_cli_parse_duration("markers", optarg, &duration))
				return 2;
			break;
		case 'p':
			if (tp_cli_parse_pid("markers", optarg, &pid))
				return 2;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	elf_version(EV_CURRENT);
	if ((glob || dir || duration) && strcmp(sub, "record"))
		REFUSE("%s: -e, --trace and --duration belong to record", sub);
	if (!strcmp(sub, "record")) {
		if (!dir)
			REFUSE("record: --trace DIR is required");
		if (glob && !*glob)
			REFUSE("record: -e: empty GLOB");
		if (pid && optind < argc)
			REFUSE("record: give either -p PID or a PROGRAM, not both");
		if (duration && !pid)
			REFUSE("record: --duration goes with -p PID");
		if (pid)
			return do_record_pid(pid, glob ? glob : "*", dir, duration);
		if (optind >= argc)
			REFUSE("record: give a PROGRAM to launch or -p PID");
		return do_record(glob ? glob : "*", dir, argv + optind);
	}
	if (!strcmp(sub, "list")) {
		if (pid && optind < argc)
			REFUSE("give either -p PID or programs, not both");
		if (pid)
			return do_list_pid(pid);
		if (optind >= argc)
			REFUSE("list: give a PROGRAM or -p PID");
		return do_list_files(argv + optind, argc - optind);
	}
	if (!pid)
		REFUSE("%s: -p PID is required", sub);
	if (optind != argc - 1)
		REFUSE("%s: give exactly one GLOB", sub);
	return do_set(pid, argv[optind], !strcmp(sub, "enable"));
}
