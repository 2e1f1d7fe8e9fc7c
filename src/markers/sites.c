/* The sites of static tracepoints: from the .note.tracepad of an object at rest, of the
 * libraries a program needs, and of every object a live process has mapped (with their
 * source file and line read from the process). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/procfs.h"
#include "elf/file.h"
#include "markers/tracer.h"
#include "proc/proc.h"

#define NOTE_OWNER "tracepad"
#define NOTE_TYPE_SITE 1
/* Offsets in struct tp_site_desc (<tracepad/tracepoint.h>, x86-64). */
#define DESC_FILE 24
#define DESC_LINE 32

struct notes_ctx {
	struct tp_markers_sites *out;
	struct tp_elf_file *f;
	const char *object;
	uint64_t bias;
	int n;
};

static int read_note(void *arg, const struct tp_elf_note *nt)
{
	struct notes_ctx *c = arg;
	uint64_t q[6];
	struct tp_markers_site *s;

	if (nt->type != NOTE_TYPE_SITE || nt->owner_size != sizeof(NOTE_OWNER) ||
	    memcmp(nt->owner, NOTE_OWNER, sizeof(NOTE_OWNER)) || nt->desc_size != sizeof(q))
		return 0;
	memcpy(q, nt->desc, sizeof(q));
	if (!q[0])
		return 0; /* a site in code the linker dropped */
	if (!(s = tp_markers_sites_add(c->out)))
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
int tp_markers_read_notes(struct tp_markers_sites *out, const char *path, uint64_t bias,
			  bool *is_elf)
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

/* ---- a live process ---- */

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
	struct tp_markers_sites *out;
	pid_t pid;
	int err;
};

static int process_map(void *arg, const struct tp_maps_ent *e)
{
	struct process_ctx *c = arg;
	struct tp_markers_sites *out = c->out;
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
	if (tp_markers_read_notes(out, path, bias, &is_elf) < 0)
		return 0;
	for (size_t i = first; i < out->n; i++) {
		struct tp_markers_site *s = &out->v[i];
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
int tp_markers_read_process(struct tp_markers_sites *out, pid_t pid)
{
	struct process_ctx c = {out, pid, 0};
	int err = tp_maps_foreach(pid, process_map, &c);

	if (err < 0)
		return err == -ENOENT ? -ESRCH : err;
	return c.err;
}

static int add_needed(void *arg, const char *lib)
{
	bool is_elf;

	tp_markers_read_notes(arg, lib, 0, &is_elf);
	return 0;
}

void tp_markers_read_needed(struct tp_markers_sites *out, const char *path)
{
	tp_elf_foreach_needed(path, add_needed, out);
}
