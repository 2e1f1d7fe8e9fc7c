/* Frames of `tracepad trace`: one line each on the output, and typed events of the trace
 * store (one class a tracepoint, "tracepoint_N", and "tracepoint_N_step" for its
 * while-stepping frames; each collected value a named field: an integer of its size and
 * signedness, or the bytes of a memory range), with the .maps and .tracepoints side files;
 * and their reading back for `tracepad frames`. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/procfs.h"
#include "tracept/engine.h"
#include "trace/read/trace-read.h"

#define HDR_FIELDS 4 /* tracepoint, step, pc, unavailable */

static const struct tp_trace_field_desc hdr[HDR_FIELDS] = {
    {"tracepoint", TP_TRACE_INT, 32},
    {"step", TP_TRACE_INT, 32},
    {"pc", TP_TRACE_INT, 64, false, 16},
    {"unavailable", TP_TRACE_INT, 64, false, 16},
};

/* Field names unique in a class, none a header's: "x", then "x_2", "x_3"... */
static void fix_names(struct tp_items *it)
{
	for (int i = 0; i < it->n; i++) {
		char *n = it->v[i].name, base[48];

		snprintf(base, sizeof(base), "%.40s", n);
		for (int k = 2;; k++) {
			bool clash = false;

			for (int h = 0; h < HDR_FIELDS; h++)
				clash |= !strcmp(hdr[h].name, n);
			for (int j = 0; j < i; j++)
				clash |= !strcmp(it->v[j].name, n);
			if (!clash)
				break;
			snprintf(n, sizeof(it->v[i].name), "%s_%d", base, k);
		}
	}
}

static int add_class(struct session *s, struct tracepoint *tp, struct tp_items *it, bool step)
{
	struct tp_trace_field_desc d[HDR_FIELDS + TP_MAX_ITEMS];
	char name[64];

	memcpy(d, hdr, sizeof(hdr));
	for (int i = 0; i < it->n; i++) {
		const struct tp_item *x = &it->v[i];

		d[HDR_FIELDS + i] = (struct tp_trace_field_desc){
		    .name = x->name,
		    .type = x->mem && !x->scalar ? TP_TRACE_BYTES : TP_TRACE_INT,
		    .bits = x->mem && !x->scalar ? 0 : (uint8_t)(x->size * 8),
		    .is_signed = x->is_signed,
		    .base = x->hex ? 16 : 10,
		};
	}
	snprintf(name, sizeof(name), "tracepoint_%d%s", tp->num, step ? "_step" : "");
	return tp_trace_writer_add_class(s->w, name, d, HDR_FIELDS + (size_t)it->n);
}

static int copy_maps(struct session *s, const char *dir)
{
	char src[64], dst[4096], buf[8192];
	FILE *in, *out;
	size_t n;

	snprintf(src, sizeof(src), "/proc/%d/maps", s->pid);
	snprintf(dst, sizeof(dst), "%s/%s", dir, TP_TRACE_MAPS_FILE);
	in = fopen(src, "r");
	out = fopen(dst, "w");
	/* Mappings with a file only: tracepad's own (the SSOL areas) have none. */
	while (in && out && fgets(buf, sizeof(buf), in)) {
		struct tp_maps_ent e;

		n = strlen(buf);
		if (!tp_maps_parse_line(buf, n, &e) && e.path_len)
			fputs(buf, out);
	}
	if (in)
		fclose(in);
	if (!out || fclose(out))
		return -EIO;
	snprintf(dst, sizeof(dst), "%s/%s", dir, TP_TRACEPT_FILE);
	out = fopen(dst, "w");
	if (!out)
		return -EIO;
	for (int i = 0; i < s->ntps; i++)
		fprintf(out, "%d\t0x%" PRIx64 "\t%s\t%s\n", s->tps[i].num, s->tps[i].addr,
			s->tps[i].where, s->tps[i].spec->loc.text);
	return fclose(out) ? -EIO : 0;
}

int tp_tracept_live_link(pid_t pid, char *buf, size_t len)
{
	const char *run = getenv("XDG_RUNTIME_DIR");
	int n;

	/* the uid in the name: /tmp is shared by every user */
	n = snprintf(buf, len, "%s/tracepad-%u-trace-%d", run && *run ? run : "/tmp",
		     (unsigned)getuid(), (int)pid);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* The link that lets `frames -p PID --live` find the trace; a reader without it only loses
 * the -p shortcut (it can still be given DIR). */
static void live_link(struct session *s, const char *dir, bool on)
{
	char link[PATH_MAX], real[PATH_MAX];

	if (tp_tracept_live_link(s->pid, link, sizeof(link)))
		return;
	unlink(link);
	if (on && (!realpath(dir, real) || symlink(real, link)))
		tp_warn("cannot make %s for live readers: %s", link, strerror(errno));
}

int tp_tracept_frames_open(struct session *s, const char *dir)
{
	struct tp_trace_opts opts = {.packet_size = 256 * 1024, .clock = TP_TRACE_CLOCK_MONOTONIC};
	int r = tp_trace_writer_new(dir, &opts, &s->w);

	if (r) {
		tp_err("cannot write a trace into %s: %s", dir,
		       r == -EEXIST ? "it already holds one" : strerror(-r));
		return -EINVAL;
	}
	for (int i = 0; i < s->ntps && !r; i++) {
		struct tracepoint *tp = &s->tps[i];

		if (tp->pending)
			continue; /* its class comes when it is planted */
		tp->class_id = add_class(s, tp, &tp->items, false);
		tp->step_class_id =
		    tp->spec->while_stepping ? add_class(s, tp, &tp->step_items, true) : -1;
		if (tp->class_id < 0)
			r = tp->class_id;
		else if (tp->spec->while_stepping && tp->step_class_id < 0)
			r = tp->step_class_id;
	}
	if (!r)
		r = tp_trace_writer_producer_init(s->w, &s->prod);
	if (!r)
		r = copy_maps(s, dir);
	if (r) {
		tp_err("cannot write a trace into %s: %s", dir, strerror(-r));
		tp_trace_writer_free(s->w);
		s->w = NULL;
		return r;
	}
	s->prod_ok = true;
	live_link(s, dir, true);
	return 0;
}

void tp_tracept_frames_add(struct session *s, struct tracepoint *tp)
{
	if (!s->w)
		return;
	/* The new object's mapping, for the readers to resolve its pcs. */
	if (copy_maps(s, s->o->trace_dir))
		tp_warn("cannot rewrite %s/%s", s->o->trace_dir, TP_TRACE_MAPS_FILE);
	tp->class_id = add_class(s, tp, &tp->items, false);
	tp->step_class_id = tp->spec->while_stepping ? add_class(s, tp, &tp->step_items, true) : -1;
	if (tp->class_id < 0 || (tp->spec->while_stepping && tp->step_class_id < 0)) {
		tp_warn("%s: no event class for its frames: they are not written",
			tp->spec->loc.where);
		tp->class_id = -1;
	}
}

int tp_tracept_frames_close(struct session *s)
{
	int r, r2;

	if (!s->w)
		return 0;
	r = s->prod_ok ? tp_trace_producer_fini(&s->prod) : 0;
	r2 = tp_trace_writer_close(s->w);
	s->w = NULL;
	live_link(s, NULL, false); /* after the last frames: a live reader's sign to end */
	if (r || r2)
		tp_err("writing the trace: %s", strerror(-(r ? r : r2)));
	return r ? r : r2;
}

static void put_frame(struct session *s, struct tracepoint *tp, const struct tp_items *items,
		      pid_t tid, const struct frame *f)
{
	uint32_t size = 4 + 4 + 8 + 8;
	uint8_t *e, *q;

	if (tp->class_id < 0 || (f->step && tp->step_class_id < 0)) {
		s->lost++;
		return;
	}
	for (int i = 0; i < items->n; i++)
		size += items->v[i].mem && !items->v[i].scalar ? 4 + items->v[i].size
							       : items->v[i].size;
	e = tp_trace_reserve_at(&s->prod, (uint16_t)(f->step ? tp->step_class_id : tp->class_id),
				size, tp_trace_clock_now(s->prod.clock), s->pid, tid);
	if (!e) {
		s->lost++;
		return;
	}
	q = tp_trace_put_u32(e, (uint32_t)tp->num);
	q = tp_trace_put_u32(q, f->step);
	q = tp_trace_put_u64(q, f->pc);
	q = tp_trace_put_u64(q, f->unavail);
	for (int i = 0; i < items->n; i++) {
		const struct tp_item *x = &items->v[i];

		if (x->mem && !x->scalar) {
			/* An unreadable range keeps its length, zeroed: the field stays typed. */
			if (f->unavail & (1ull << i))
				memset(f->mem[i], 0, x->size);
			q = tp_trace_put_bytes(q, f->mem[i], x->size);
			continue;
		}
		memcpy(q, &f->val[i], x->size); /* little-endian: the low bytes */
		q += x->size;
	}
	tp_trace_commit(&s->prod);
	/* the frames so far reach the file for live readers (tracepad frames --live); a
	 * failed write is the writer's error, reported at the end */
	tp_trace_writer_producer_flush(&s->prod, TP_TRACEPT_LIVE_NS);
}

static void print_int(FILE *o, const struct tp_item *x, uint64_t v)
{
	if (x->size < 8)
		v &= (1ull << (x->size * 8)) - 1;
	if (x->hex)
		fprintf(o, "0x%" PRIx64, v);
	else if (x->is_signed)
		fprintf(o, "%" PRId64,
			x->size == 1   ? (int8_t)v
			: x->size == 2 ? (int16_t)v
			: x->size == 4 ? (int32_t)v
				       : (int64_t)v);
	else
		fprintf(o, "%" PRIu64, v);
}

void tp_tracept_frame_out(struct session *s, struct tracepoint *tp, const struct tp_items *items,
			  pid_t tid, const struct frame *f)
{
	FILE *o = s->o->out;
	char where[256];

	s->frames++;
	if (s->w)
		put_frame(s, tp, items, tid, f);
	if (s->o->quiet)
		return;
	if (f->step) {
		tp_tracept_where(s, f->pc, where, sizeof(where));
		fprintf(o, "#%d.%u [%d] %s:", tp->num, f->step, tid, where);
	} else {
		fprintf(o, "#%d [%d] %s:", tp->num, tid, tp->where);
	}
	for (int i = 0; i < items->n; i++) {
		const struct tp_item *x = &items->v[i];

		fprintf(o, " %s=", x->text);
		if (f->unavail & (1ull << i)) {
			fputs("<unavailable>", o);
		} else if (x->mem && !x->scalar) {
			fputc('<', o);
			for (uint32_t k = 0; k < x->size && k < 64; k++)
				fprintf(o, "%02x", f->mem[i][k]);
			fputs(x->size > 64 ? "...>" : ">", o);
		} else {
			print_int(o, x, f->val[i]);
		}
	}
	fputc('\n', o);
}

void tp_tracept_fix_names(struct tp_items *it)
{
	fix_names(it);
}

/* ---- reading back ---- */

bool tp_tracept_frame_info(const struct tp_trace_event *ev, unsigned *tp, unsigned *step,
			   uint64_t *pc)
{
	const struct tp_trace_field *a, *b, *c;

	if (strncmp(ev->name, "tracepoint_", 11))
		return false;
	a = tp_trace_event_field(ev, "tracepoint");
	b = tp_trace_event_field(ev, "step");
	c = tp_trace_event_field(ev, "pc");
	if (!a || !b || !c || a->type != TP_TRACE_INT || b->type != TP_TRACE_INT ||
	    c->type != TP_TRACE_INT)
		return false;
	*tp = (unsigned)a->u;
	*step = (unsigned)b->u;
	*pc = c->u;
	return true;
}

static void where_of(struct tp_symtab *syms, uint64_t pc, char *buf, size_t len,
		     struct tp_symloc *l)
{
	memset(l, 0, sizeof(*l));
	if (!syms || tp_symtab_lookup(syms, pc, true, l) || !l->function) {
		snprintf(buf, len, "0x%" PRIx64, pc);
		return;
	}
	if (l->file)
		snprintf(buf, len, "0x%" PRIx64 " %s+0x%" PRIx64 " (%s:%d)", pc, l->function,
			 l->offset, strrchr(l->file, '/') ? strrchr(l->file, '/') + 1 : l->file,
			 l->line);
	else
		snprintf(buf, len, "0x%" PRIx64 " %s+0x%" PRIx64, pc, l->function, l->offset);
}

void tp_tracept_frame_line(FILE *f, const struct tp_trace_event *ev, uint64_t idx,
			   struct tp_symtab *syms)
{
	unsigned tp, step;
	uint64_t pc;
	struct tp_symloc l;
	char where[512];

	if (!tp_tracept_frame_info(ev, &tp, &step, &pc))
		return;
	where_of(syms, pc, where, sizeof(where), &l);
	if (step)
		fprintf(f, "%6" PRIu64 "  tp %u.%u  tid %" PRId64 "  %s\n", idx, tp, step, ev->tid,
			where);
	else
		fprintf(f, "%6" PRIu64 "  tp %u  tid %" PRId64 "  %s\n", idx, tp, ev->tid, where);
}

static void source_line(FILE *f, const char *file, int line)
{
	char *buf = NULL;
	size_t cap = 0;
	int n = 0;
	FILE *in = file ? fopen(file, "r") : NULL;

	if (!in)
		return;
	while (getline(&buf, &cap, in) > 0)
		if (++n == line) {
			fprintf(f, "%d\t%s%s", line, buf, strchr(buf, '\n') ? "" : "\n");
			break;
		}
	free(buf);
	fclose(in);
}

void tp_tracept_frame_dump(FILE *f, const struct tp_trace_event *ev, uint64_t idx,
			   struct tp_symtab *syms, const char *dir)
{
	const struct tp_trace_field *un = tp_trace_event_field(ev, "unavailable");
	unsigned tp, step;
	uint64_t pc;
	struct tp_symloc l;
	char where[512];

	(void)dir;
	if (!tp_tracept_frame_info(ev, &tp, &step, &pc))
		return;
	fprintf(f, "frame %" PRIu64 ": tracepoint %u", idx, tp);
	if (step)
		fprintf(f, ", step %u", step);
	fprintf(f, ", thread %" PRId64 "\n", ev->tid);
	where_of(syms, pc, where, sizeof(where), &l);
	fprintf(f, "pc %s\n", where);
	if (l.file) {
		const struct tp_map *m = tp_symtab_find_map(syms, pc);
		char *src = m ? tp_dwarf_source_path(m->path, pc - m->bias) : NULL;

		source_line(f, src ? src : l.file, l.line);
		free(src);
	}
	for (uint32_t i = HDR_FIELDS, item = 0; i < ev->nr_fields; i++) {
		const struct tp_trace_field *x = &ev->fields[i];

		if (tp_trace_field_hidden(ev, i))
			continue; /* the length of the bytes that follow */
		fprintf(f, "  %s = ", x->name);
		if (un && item < 64 && un->u & (1ull << item))
			fputs("<unavailable>", f);
		else
			tp_trace_print_value(f, x);
		fputc('\n', f);
		item++;
	}
}

bool tp_tracept_frame_at_line(const struct tp_trace_event *ev, struct tp_symtab *syms,
			      const char *file, int line)
{
	unsigned tp, step;
	uint64_t pc;
	struct tp_symloc l;
	const char *base;
	size_t n = strlen(file), fl;

	if (!syms || !tp_tracept_frame_info(ev, &tp, &step, &pc) ||
	    tp_symtab_lookup(syms, pc, true, &l) || !l.file || l.line != line)
		return false;
	fl = strlen(l.file);
	base = l.file + fl - (n < fl ? n : fl);
	return !strcmp(base, file) && (n == fl || base[-1] == '/');
}
