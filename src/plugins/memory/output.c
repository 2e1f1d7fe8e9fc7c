/* The memory plugin's report of one process: memcheck's text (records of the kinds asked
 * for, each with its allocation backtrace, then the leak summary) or one JSON object. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/text.h"
#include "plugins/memory/memory-priv.h"

/* The symbol of frame @i of @st ("?" when unknown).  Frames above the first are return
 * addresses: the call is the byte before. */
static void frame_name(struct mem *m, int pid, const struct site *st, unsigned i, char *sym,
		       size_t len)
{
	if (!m->h.symbolize ||
	    m->h.symbolize(m->h.ctx, pid, i ? st->pcs[i] - 1 : st->pcs[i], sym, len) < 0)
		snprintf(sym, len, "?");
}

static void text_record(struct mem *m, int pid, const struct leak_group *g)
{
	FILE *out = m->h.out;
	const struct site *st = g->site ? m->sites[g->site] : NULL;

	if (g->indirect)
		fprintf(out,
			"memory: %" PRIu64 " (%" PRIu64 " direct, %" PRIu64
			" indirect) bytes in %" PRIu64 " blocks are %s\n",
			g->bytes + g->indirect, g->bytes, g->indirect, g->blocks,
			kind_names[g->kind]);
	else
		fprintf(out, "memory: %" PRIu64 " bytes in %" PRIu64 " blocks are %s\n", g->bytes,
			g->blocks, kind_names[g->kind]);
	if (!st) {
		fprintf(out, "    (no backtrace)\n");
		return;
	}
	for (unsigned i = 0; i < st->n; i++) {
		char sym[512];

		frame_name(m, pid, st, i, sym, sizeof(sym));
		fprintf(out, "    #%u 0x%" PRIx64 " %s\n", i, st->pcs[i], sym);
	}
}

static void text_report(struct mem *m, int pid, const struct mem_proc *p,
			const struct leak_result *r)
{
	FILE *out = m->h.out;
	uint64_t hn = 0;

	fprintf(out, "memory: pid %d: in use at %s: %" PRIu64 " bytes in %" PRIu64 " blocks\n",
		r->pid, p->detached ? "detach" : "exit", r->inuse_bytes, r->inuse_blocks);
	fprintf(out,
		"memory: pid %d: total heap usage: %" PRIu64 " allocs, %" PRIu64 " frees, %" PRIu64
		" bytes allocated\n",
		r->pid, p->allocs, p->frees, p->bytes);
	for (size_t i = 0; i < r->ngroups; i++)
		if (m->kinds & (1u << r->groups[i].kind))
			text_record(m, pid, &r->groups[i]);
	fprintf(out, "memory: pid %d: leak summary:\n", r->pid);
	for (int k = 0; k < ST_NKINDS; k++)
		fprintf(out, "memory: %18s: %" PRIu64 " bytes in %" PRIu64 " blocks\n",
			kind_names[k], r->kind_bytes[k], r->kind_blocks[k]);
	for (int h = H_STDSTRING; h < H_N; h++)
		hn += r->heur_blocks[h];
	if (hn) {
		fprintf(out, "memory: %18s  of which reachable via heuristic:\n", "");
		for (int h = H_STDSTRING; h < H_N; h++)
			if (r->heur_blocks[h])
				fprintf(out,
					"memory: %18s    %-19s: %" PRIu64 " bytes in %" PRIu64
					" blocks\n",
					"", heur_names[h], r->heur_bytes[h], r->heur_blocks[h]);
	}
	if (!m->no_freeres && r->nthreads > 1 && !p->detached)
		fprintf(out,
			"memory: pid %d: %d threads at exit: glibc's exit-time frees were not run "
			"(memcheck runs them after killing the other threads)\n",
			r->pid, r->nthreads);
	if (m->lost_track)
		fprintf(out,
			"memory: pid %d: out of memory while tracking: blocks may be missing\n",
			r->pid);
	if (r->short_read)
		fprintf(out, "memory: pid %d: some blocks could not be read whole\n", r->pid);
}

static void json_name(FILE *out, const char *s)
{
	tp_json_str(out, s, strlen(s));
}

static void json_report(struct mem *m, int pid, const struct mem_proc *p,
			const struct leak_result *r)
{
	FILE *out = m->h.out;
	bool first = true;

	fprintf(out,
		"{\"memory\": {\"pid\": %d, \"at\": \"%s\", \"in_use\": {\"bytes\": %" PRIu64
		", \"blocks\": %" PRIu64 "}, \"allocs\": %" PRIu64 ", \"frees\": %" PRIu64
		", \"bytes_allocated\": %" PRIu64 ", \"kinds\": {",
		r->pid, p->detached ? "detach" : "exit", r->inuse_bytes, r->inuse_blocks, p->allocs,
		p->frees, p->bytes);
	for (int k = 0; k < ST_NKINDS; k++) {
		fprintf(out, "%s", k ? ", " : "");
		json_name(out, kind_names[k]);
		fprintf(out, ": {\"bytes\": %" PRIu64 ", \"blocks\": %" PRIu64 "}",
			r->kind_bytes[k], r->kind_blocks[k]);
	}
	fprintf(out, "}, \"reachable_via_heuristic\": {");
	for (int h = H_STDSTRING; h < H_N; h++) {
		fprintf(out, "%s", h > H_STDSTRING ? ", " : "");
		json_name(out, heur_names[h]);
		fprintf(out, ": {\"bytes\": %" PRIu64 ", \"blocks\": %" PRIu64 "}",
			r->heur_bytes[h], r->heur_blocks[h]);
	}
	fprintf(out, "}, \"freeres\": %s, \"records\": [",
		!m->no_freeres && r->nthreads <= 1 && !p->detached ? "true" : "false");
	for (size_t i = 0; i < r->ngroups; i++) {
		const struct leak_group *g = &r->groups[i];
		const struct site *st = g->site ? m->sites[g->site] : NULL;

		if (!(m->kinds & (1u << g->kind)))
			continue;
		fprintf(out, "%s{\"kind\": ", first ? "" : ", ");
		first = false;
		json_name(out, kind_names[g->kind]);
		fprintf(out,
			", \"bytes\": %" PRIu64 ", \"indirect_bytes\": %" PRIu64
			", \"blocks\": %" PRIu64 ", \"backtrace\": [",
			g->bytes, g->indirect, g->blocks);
		for (unsigned f = 0; st && f < st->n; f++) {
			char sym[512];

			frame_name(m, pid, st, f, sym, sizeof(sym));
			fprintf(out, "%s{\"pc\": %" PRIu64 ", \"symbol\": ", f ? ", " : "",
				st->pcs[f]);
			json_name(out, sym);
			fputc('}', out);
		}
		fprintf(out, "]}");
	}
	fprintf(out, "], \"lost_track\": %s, \"short_read\": %s}}\n",
		m->lost_track ? "true" : "false", r->short_read ? "true" : "false");
}

void tp_mem_report(struct mem *m, int pid, const struct mem_proc *p, const struct leak_result *r)
{
	if (m->json)
		json_report(m, pid, p, r);
	else
		text_report(m, pid, p, r);
	fflush(m->h.out);
}
