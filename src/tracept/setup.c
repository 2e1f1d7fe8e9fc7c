/* `tracepad trace` before the first hit: a launched program is run to its entry point (the
 * loader has mapped its libraries by then), every location is resolved (function,
 * FILE:LINE, *ADDR, LIB:FUNCTION) and checked to be the start of an instruction, its
 * condition and collect lists compiled in the DWARF scope of its pc, and its int3 planted
 * through src/bp. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "arch/arch.h"
#include "base/log.h"
#include "proc/inject.h"
#include "tracept/engine.h"

int tp_tracept_to_entry(struct session *s)
{
	const struct tp_proc_run_to how = {TP_RESUME_CONT, s->o->stop, NULL, NULL, &s->status};
	uint64_t entry;

	if (tp_proc_auxv(s->pid, AT_ENTRY, &entry))
		return -EIO;
	/* a static program starts there: nothing to run */
	return tp_proc_run_to(s->p, s->pid, entry, &how);
}

void tp_tracept_where(struct session *s, uint64_t pc, char *buf, size_t len)
{
	struct tp_symloc l;
	const char *base;
	int n;

	if (tp_symtab_lookup(s->syms, pc, true, &l)) {
		snprintf(buf, len, "0x%" PRIx64, pc);
		return;
	}
	base = strrchr(l.object, '/') ? strrchr(l.object, '/') + 1 : l.object;
	if (l.function)
		n = snprintf(buf, len, "%s+0x%" PRIx64, l.function, l.offset);
	else
		n = snprintf(buf, len, "%s+0x%" PRIx64, base, l.offset);
	if (l.file && n >= 0 && (size_t)n < len)
		snprintf(buf + n, len - n, " (%s:%d)",
			 strrchr(l.file, '/') ? strrchr(l.file, '/') + 1 : l.file, l.line);
}

/* An expression error: "WHERE: MESSAGE at column N". */
static void say(const struct tp_tracept_text *t, const struct tp_expr_error *err)
{
	if (err->col > 0)
		tp_err("%s: %s at column %d", t->where, err->msg, err->col);
	else
		tp_err("%s: %s", t->where, err->msg);
}

/* Is @addr the start of an instruction of the function around it? */
static int check_boundary(struct session *s, const struct tp_tracept_text *t, uint64_t addr)
{
	struct tp_symloc l;
	uint64_t pc;

	if (!tp_symtab_find_map(s->syms, addr)) {
		tp_err("%s: 0x%" PRIx64 " is not in the program's code", t->where, addr);
		return -EINVAL;
	}
	if (tp_symtab_lookup(s->syms, addr, false, &l) || !l.function || !l.func_addr) {
		tp_err("%s: 0x%" PRIx64 " is in no known function: tracepad cannot tell whether an "
		       "instruction starts there",
		       t->where, addr);
		return -EINVAL;
	}
	for (pc = l.func_addr; pc < addr;) {
		uint8_t b[TP_ARCH_MAX_INSN_LEN];
		struct tp_insn in;
		ssize_t n = tp_proc_read(s->pid, pc, b, sizeof(b));

		if (n <= 0 || tp_arch_decode(b, (size_t)n, pc, &in))
			break;
		pc += in.len;
	}
	if (pc != addr) {
		tp_err("%s: 0x%" PRIx64 " is inside an instruction of %s", t->where, addr,
		       l.function);
		return -EINVAL;
	}
	return 0;
}

/* Does every call reach @to from the entry @from, falling through?  Optimized code may
 * branch around what the line table calls the end of its prologue (an early return): the
 * tracepoint stays at the entry then, so that it counts every call. */
static bool straight(struct session *s, uint64_t from, uint64_t to)
{
	while (from < to) {
		uint8_t b[TP_ARCH_MAX_INSN_LEN];
		struct tp_insn in;
		ssize_t n = tp_proc_read(s->pid, from, b, sizeof(b));

		if (n <= 0 || tp_arch_decode(b, (size_t)n, from, &in) || in.kind != TP_INSN_OTHER)
			return false;
		from += in.len;
	}
	return from == to;
}

/* @loc[0..@n): the address of the tracepoint. */
static int resolve(struct session *s, const struct tp_tracept_text *t, const char *loc, size_t n,
		   uint64_t *addr)
{
	char name[512], *colon, *end;
	const struct tp_map *m;
	uint64_t link;

	if (!n || n >= sizeof(name)) {
		tp_err("%s: expected a location at column %d", t->where, t->col0 + 1);
		return -EINVAL;
	}
	memcpy(name, loc, n);
	name[n] = 0;
	if (name[0] == '*') {
		errno = 0;
		*addr = strtoull(name + 1, &end, 0);
		if (errno || end == name + 1 || *end) {
			tp_err("%s: bad address '%s'", t->where, name + 1);
			return -EINVAL;
		}
		return check_boundary(s, t, *addr);
	}
	colon = strrchr(name, ':');
	if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
		char exe[PATH_MAX], proc[64];
		uint64_t bias;
		ssize_t k;

		*colon = 0;
		snprintf(proc, sizeof(proc), "/proc/%d/exe", s->pid);
		k = readlink(proc, exe, sizeof(exe) - 1);
		if (k <= 0 || tp_elf_exe_bias(s->pid, &bias)) {
			tp_err("%s: cannot read the program's file", t->where);
			return -EINVAL;
		}
		exe[k] = 0;
		if (tp_dwarf_line_addr(exe, name, atoi(colon + 1), &link)) {
			tp_err("%s: no code at %s:%s (or no line information)", t->where, name,
			       colon + 1);
			return -EINVAL;
		}
		*addr = link + bias;
		return check_boundary(s, t, *addr);
	}
	if (tp_symtab_find_symbol(s->syms, name, addr)) {
		/* LIB:FUNCTION may come with a dlopen: pending until then (launched programs
		 * with a loader: its r_brk tells when objects come). */
		if (colon)
			return -EAGAIN;
		tp_err("%s: no function '%s' in the program or its libraries", t->where, name);
		return -EINVAL;
	}
	m = tp_symtab_find_map(s->syms, *addr);
	if (m && !tp_dwarf_after_prologue(m->path, *addr - m->bias, &link) &&
	    straight(s, *addr, link + m->bias))
		*addr = link + m->bias;
	return 0;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
}

/* "collect a, b" or "a, b" */
static int compile_list(struct tp_scope *sc, const struct tp_tracept_text *t,
			struct tp_items *items)
{
	struct tp_expr_error err;
	const char *p = t->text;
	int r;

	while (is_space(*p))
		p++;
	if (!strncmp(p, "collect", 7) && (is_space(p[7]) || !p[7]))
		p += 7;
	r = tp_expr_compile_collect(sc, p, t->col0 + (int)(p - t->text), items, &err);
	if (r == -EINVAL)
		say(t, &err);
	return r;
}

static uint32_t mem_bytes(const struct tp_items *it)
{
	uint32_t n = 0;

	for (int i = 0; i < it->n; i++)
		if (it->v[i].mem)
			n += it->v[i].size;
	return n;
}

static int setup_one(struct session *s, struct tracepoint *tp)
{
	const struct tp_tracept_spec *sp = tp->spec;
	const char *text = sp->loc.text, *cond = NULL, *e;
	struct tp_expr_error err;
	const struct tp_map *m;
	struct tp_scope *sc;
	size_t n;
	int r = 0;

	while (is_space(*text))
		text++;
	for (e = text; *e; e++) {
		if (is_space(*e) && !strncmp(e + 1, "if", 2) && (is_space(e[3]) || !e[3])) {
			cond = e + 3;
			break;
		}
	}
	n = (size_t)(e - text);
	while (n && is_space(text[n - 1]))
		n--;
	r = resolve(s, &sp->loc, text, n, &tp->addr);
	if (r == -EAGAIN) {
		tp->pending = true;
		snprintf(tp->where, sizeof(tp->where), "%.*s (pending)", (int)n, text);
		return 0;
	}
	if (r)
		return r;
	tp->pending = false;
	tp_tracept_where(s, tp->addr, tp->where, sizeof(tp->where));
	m = tp_symtab_find_map(s->syms, tp->addr);
	sc = m ? tp_scope_open(m->path, m->bias, tp->addr) : NULL;
	if (!sc)
		return -ENOMEM;
	if (cond) {
		r = tp_expr_compile_cond(sc, cond, sp->loc.col0 + (int)(cond - sp->loc.text),
					 &tp->cond, &err);
		if (r)
			say(&sp->loc, &err);
		tp->has_cond = !r;
	} else if (sp->cond.text) {
		r = tp_expr_compile_cond(sc, sp->cond.text, sp->cond.col0, &tp->cond, &err);
		if (r)
			say(&sp->cond, &err);
		tp->has_cond = !r;
	}
	for (int i = 0; !r && i < sp->ncollect; i++)
		r = compile_list(sc, &sp->collect[i], &tp->items);
	for (int i = 0; !r && i < sp->nstep_collect; i++)
		r = compile_list(sc, &sp->step_collect[i], &tp->step_items);
	tp_scope_free(sc);
	if (r)
		return r;
	if (tp->items.n > TP_MAX_ITEMS || tp->step_items.n > TP_MAX_ITEMS) {
		tp_err("%s: more than %d values collected", sp->loc.where, TP_MAX_ITEMS);
		return -EINVAL;
	}
	tp_tracept_fix_names(&tp->items);
	tp_tracept_fix_names(&tp->step_items);
	tp->mem_bytes = mem_bytes(&tp->items);
	tp->step_mem_bytes = mem_bytes(&tp->step_items);
	if (tp->mem_bytes > 4 * TP_MAX_MEM || tp->step_mem_bytes > 4 * TP_MAX_MEM) {
		tp_err("%s: more than %u bytes of memory collected a frame", sp->loc.where,
		       4 * TP_MAX_MEM);
		return -EINVAL;
	}
	return 0;
}

/* @tp waits for its object: a breakpoint on the loader's r_brk (_dl_debug_state, called
 * before and after each change of the list of objects), planted once. */
static int pending(struct session *s, struct tracepoint *tp)
{
	int r;

	if (!s->rbrk && tp_symtab_find_symbol(s->syms, "_dl_debug_state", &s->rbrk)) {
		tp_err("%s: no function '%s' in the program or its libraries (nor a loader to "
		       "wait for it)",
		       tp->spec->loc.where, tp->where);
		return -EINVAL;
	}
	tp_warn("%s: not in the objects loaded yet: the tracepoint waits for it",
		tp->spec->loc.where);
	if (s->rbrk_planted)
		return 0;
	r = tp_bp_insert(s->bps, s->pid, s->rbrk, 0);
	s->rbrk_planted = !r || r == -EEXIST;
	return r == -EEXIST ? 0 : r;
}

/* Which tracepoints the agent places: those asked for --fast, but while-stepping (the
 * agent has no stepper for them yet) and pending ones (placed at a stop of the loader, under
 * ptrace) stay int3 tracepoints, with a note; tracepoints at one address share one way. */
static void choose_fast(struct session *s)
{
	for (int i = 0; i < s->ntps; i++) {
		struct tracepoint *tp = &s->tps[i];

		tp->fast = tp->spec->fast;
		if (tp->fast && tp->spec->while_stepping) {
			tp_warn("%s: --while-stepping: a normal tracepoint (int3) instead of a "
				"fast one",
				tp->spec->loc.where);
			tp->fast = false;
		} else if (tp->fast && tp->pending) {
			tp_warn(
			    "%s: not loaded yet: a normal tracepoint (int3) instead of a fast one",
			    tp->spec->loc.where);
			tp->fast = false;
		}
		for (int k = 0; k < i && !tp->pending; k++) {
			if (s->tps[k].pending || s->tps[k].addr != tp->addr ||
			    s->tps[k].fast == tp->fast)
				continue;
			tp_warn("%s: %s tracepoint, as the one before it at %s",
				tp->spec->loc.where, s->tps[k].fast ? "a fast" : "a normal",
				tp->where);
			tp->fast = s->tps[k].fast;
			break;
		}
		s->nnormal += !tp->fast;
	}
}

int tp_tracept_setup(struct session *s)
{
	uint32_t room = 0;
	int r;

	s->syms = tp_symtab_new();
	s->bps = tp_bps_new(s->p, s->pid);
	s->tps = calloc(s->o->nspecs, sizeof(*s->tps));
	if (!s->syms || !s->bps || !s->tps)
		return -ENOMEM;
	r = tp_symtab_load_pid(s->syms, s->pid);
	if (r)
		return r;
	/* Every location and expression first: a bad one leaves the program untouched. */
	for (int i = 0; i < s->o->nspecs; i++) {
		struct tracepoint *tp = &s->tps[s->ntps++];

		tp->num = i + 1;
		tp->spec = &s->o->specs[i];
		r = setup_one(s, tp);
		if (r)
			return r;
		if (tp->mem_bytes > room)
			room = tp->mem_bytes;
		if (tp->step_mem_bytes > room)
			room = tp->step_mem_bytes;
	}
	s->scratch = malloc(room + 8);
	s->room = room;
	if (!s->scratch)
		return -ENOMEM;
	choose_fast(s);
	for (int i = 0; i < s->ntps; i++) {
		struct tracepoint *tp = &s->tps[i];
		bool dup = false;

		if (tp->fast)
			continue; /* placed by the agent (fast.c) */
		if (tp->pending) {
			r = pending(s, tp);
			if (r)
				return r;
			continue;
		}
		dup = s->rbrk_planted && tp->addr == s->rbrk;
		for (int k = 0; k < i; k++)
			dup |= !s->tps[k].pending && s->tps[k].addr == tp->addr;
		if (dup)
			continue; /* one int3 serves every tracepoint at an address */
		r = tp_bp_insert(s->bps, s->pid, tp->addr, 0);
		if (r) {
			tp_err("%s: cannot plant a tracepoint at %s: %s", tp->spec->loc.where,
			       tp->where,
			       r == -ENOTSUP  ? "an instruction tracepad cannot run out of line"
			       : r == -ENOMEM ? "no room for its out-of-line copy near it"
					      : strerror(-r));
			return r == -ENOTSUP ? -EINVAL : r;
		}
	}
	return 0;
}

void tp_tracept_retry(struct session *s, pid_t tid)
{
	bool any = false;

	for (int i = 0; i < s->ntps; i++)
		any |= s->tps[i].pending;
	if (!any || tp_symtab_load_pid(s->syms, s->pid))
		return;
	for (int i = 0; i < s->ntps; i++) {
		struct tracepoint *tp = &s->tps[i];
		bool dup = false;
		uint32_t need;
		int r;

		if (!tp->pending)
			continue;
		r = setup_one(s, tp);
		if (tp->pending)
			continue;
		need = tp->mem_bytes > tp->step_mem_bytes ? tp->mem_bytes : tp->step_mem_bytes;
		if (!r && need > s->room) {
			uint8_t *b = realloc(s->scratch, need + 8);

			if (b) {
				s->scratch = b;
				s->room = need;
			}
			r = b ? 0 : -ENOMEM;
		}
		for (int k = 0; !r && k < s->ntps; k++)
			dup |= k != i && !s->tps[k].pending && !s->tps[k].dead &&
			       s->tps[k].addr == tp->addr;
		if (!r && !dup && tp->addr != s->rbrk)
			r = tp_bp_insert(s->bps, tid, tp->addr, 0);
		if (r) {
			if (r != -EINVAL)
				tp_warn("%s: cannot plant a tracepoint at %s: %s",
					tp->spec->loc.where, tp->where, strerror(-r));
			tp->dead = true;
			tp->addr = 0;
			continue;
		}
		tp_info("%s: planted at %s", tp->spec->loc.where, tp->where);
		tp_tracept_frames_add(s, tp);
	}
}
