/* The DWARF scope of a tracepoint's pc (libdw): variables visible there, their locations
 * turned into bytecode over registers once (DW_OP_fbreg through the frame base and the
 * CFA of the call frame information, breg, reg, addr, location lists), and their types. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <dwarf.h>
#include <elfutils/libdwfl.h>

#include "base/log.h"
#include "tracept/tracept-priv.h"

struct tp_scope {
	Dwfl *dwfl;
	Dwfl_Module *mod;
	Dwarf *dw;
	uint64_t bias; /* runtime - link-time */
	uint64_t pc;   /* link-time */
	Dwarf_Die *scopes;
	int nscopes;
	int fn; /* index of the innermost subprogram in scopes, -1 if none */
};

/* DWARF register numbers (the x86-64 psABI) to user_regs_struct indexes. */
static const int8_t dwreg[17] = {
    TP_UREG_RAX, TP_UREG_RDX, TP_UREG_RCX, TP_UREG_RBX, TP_UREG_RSI, TP_UREG_RDI,
    TP_UREG_RBP, TP_UREG_RSP, TP_UREG_R8,  TP_UREG_R9,	TP_UREG_R10, TP_UREG_R11,
    TP_UREG_R12, TP_UREG_R13, TP_UREG_R14, TP_UREG_R15, TP_UREG_RIP,
};

struct tp_scope *tp_scope_open(const char *path, uint64_t bias, uint64_t pc)
{
	static const Dwfl_Callbacks cbs = {
	    .find_elf = dwfl_build_id_find_elf,
	    .find_debuginfo = dwfl_standard_find_debuginfo,
	    .section_address = dwfl_offline_section_address,
	};
	struct tp_scope *sc = calloc(1, sizeof(*sc));
	Dwarf_Addr dwbias = 0;
	Dwarf_Die *cu;

	if (!sc)
		return NULL;
	sc->bias = bias;
	sc->pc = pc - bias;
	sc->fn = -1;
	sc->dwfl = dwfl_begin(&cbs);
	if (!sc->dwfl)
		return sc;
	dwfl_report_begin(sc->dwfl);
	sc->mod = dwfl_report_elf(sc->dwfl, path, path, -1, 0, true);
	dwfl_report_end(sc->dwfl, NULL, NULL);
	if (!sc->mod)
		return sc;
	sc->dw = dwfl_module_getdwarf(sc->mod, &dwbias);
	if (!sc->dw)
		return sc;
	cu = dwfl_module_addrdie(sc->mod, sc->pc, &dwbias);
	if (!cu)
		return sc;
	sc->nscopes = dwarf_getscopes(cu, sc->pc - dwbias, &sc->scopes);
	if (sc->nscopes < 0)
		sc->nscopes = 0;
	for (int i = 0; i < sc->nscopes; i++) {
		int tag = dwarf_tag(&sc->scopes[i]);

		if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
			sc->fn = i;
			break;
		}
	}
	return sc;
}

void tp_scope_free(struct tp_scope *sc)
{
	if (!sc)
		return;
	free(sc->scopes);
	if (sc->dwfl)
		dwfl_end(sc->dwfl);
	free(sc);
}

bool tp_scope_has_dwarf(const struct tp_scope *sc)
{
	return sc && sc->dw;
}

const char *tp_scope_function(struct tp_scope *sc)
{
	return sc && sc->fn >= 0 ? dwarf_diename(&sc->scopes[sc->fn]) : NULL;
}

/* ---- types ---- */

static void ty_of(Dwarf_Die *type, struct tp_ty *t)
{
	Dwarf_Die d, sub, elem;
	Dwarf_Attribute a;
	Dwarf_Word w;
	int bs;

	memset(t, 0, sizeof(*t));
	if (!type || dwarf_peel_type(type, &d) != 0) {
		t->kind = TY_VOID;
		return;
	}
	bs = dwarf_bytesize(&d);
	t->size = bs > 0 ? (uint64_t)bs : 0;
	switch (dwarf_tag(&d)) {
	case DW_TAG_base_type:
		if (!dwarf_formudata(dwarf_attr(&d, DW_AT_encoding, &a), &w)) {
			if (w == DW_ATE_float || w == DW_ATE_complex_float) {
				t->kind = TY_OTHER;
				return;
			}
			t->is_signed = w == DW_ATE_signed || w == DW_ATE_signed_char;
		}
		t->kind = TY_INT;
		return;
	case DW_TAG_enumeration_type:
		t->kind = TY_INT;
		t->is_signed = true;
		return;
	case DW_TAG_pointer_type:
	case DW_TAG_reference_type:
		t->kind = TY_PTR;
		t->size = 8;
		if (dwarf_attr_integrate(&d, DW_AT_type, &a) && dwarf_formref_die(&a, &elem)) {
			t->has_die = true;
			t->die = elem;
		}
		return;
	case DW_TAG_structure_type:
	case DW_TAG_union_type:
	case DW_TAG_class_type:
		t->kind = TY_STRUCT;
		t->has_die = true;
		t->die = d;
		return;
	case DW_TAG_array_type: {
		struct tp_ty et;

		if (!dwarf_attr_integrate(&d, DW_AT_type, &a) || !dwarf_formref_die(&a, &elem))
			break;
		t->kind = TY_ARRAY;
		t->has_die = true;
		t->die = elem;
		if (dwarf_child(&d, &sub) == 0 && dwarf_tag(&sub) == DW_TAG_subrange_type) {
			if (!dwarf_formudata(dwarf_attr(&sub, DW_AT_count, &a), &w))
				t->count = w;
			else if (!dwarf_formudata(dwarf_attr(&sub, DW_AT_upper_bound, &a), &w))
				t->count = w + 1;
		}
		ty_of(&elem, &et);
		t->size = t->count * et.size;
		return;
	}
	default:
		break;
	}
	t->kind = TY_OTHER;
}

int tp_scope_elem(const struct tp_ty *t, struct tp_ty *out)
{
	Dwarf_Die d;

	if (t->kind != TY_PTR && t->kind != TY_ARRAY)
		return -EINVAL;
	if (t->has_die) {
		d = t->die;
		ty_of(&d, out);
		return 0;
	}
	memset(out, 0, sizeof(*out));
	if (t->bdepth) {
		out->kind = TY_PTR;
		out->size = 8;
		out->bdepth = t->bdepth - 1;
		out->bsize = t->bsize;
		out->bsigned = t->bsigned;
	} else if (t->bsize) {
		out->kind = TY_INT;
		out->size = t->bsize;
		out->is_signed = t->bsigned;
	} else {
		out->kind = TY_VOID;
	}
	return 0;
}

int tp_scope_member(struct tp_scope *sc, const struct tp_ty *t, const char *name, uint64_t *off,
		    struct tp_ty *out)
{
	Dwarf_Die d = t->die, m, mt;
	Dwarf_Attribute a;
	Dwarf_Word w;

	(void)sc;
	if (t->kind != TY_STRUCT || dwarf_child(&d, &m) != 0)
		return -ENOENT;
	do {
		const char *n = dwarf_diename(&m);

		if (dwarf_tag(&m) != DW_TAG_member || !n || strcmp(n, name))
			continue;
		if (dwarf_hasattr(&m, DW_AT_bit_size))
			return -ENOTSUP;
		*off = 0;
		if (!dwarf_formudata(dwarf_attr(&m, DW_AT_data_member_location, &a), &w))
			*off = w;
		if (!dwarf_attr_integrate(&m, DW_AT_type, &a) || !dwarf_formref_die(&a, &mt))
			return -ENOENT;
		ty_of(&mt, out);
		return 0;
	} while (dwarf_siblingof(&m, &m) == 0);
	return -ENOENT;
}

/* ---- locations ---- */

struct emit {
	uint8_t *p;
	size_t len, cap;
	bool over;
};

static void put(struct emit *e, const void *b, size_t n)
{
	if (e->len + n > e->cap) {
		e->over = true;
		return;
	}
	memcpy(e->p + e->len, b, n);
	e->len += n;
}

static void op(struct emit *e, uint8_t o)
{
	put(e, &o, 1);
}

static void konst(struct emit *e, uint64_t v)
{
	op(e, TP_OP_CONST);
	put(e, &v, 8);
}

static int reg(struct emit *e, Dwarf_Word r)
{
	uint8_t i;

	if (r >= sizeof(dwreg))
		return -ENOTSUP;
	i = (uint8_t)dwreg[r];
	op(e, TP_OP_REG);
	put(e, &i, 1);
	return 0;
}

static int cfa(struct tp_scope *sc, struct emit *e);

/* Translate a DWARF expression; *@value: it computes a value rather than an address. */
static int dwexpr(struct tp_scope *sc, const Dwarf_Op *ops, size_t n, struct emit *e, bool *value,
		  int depth)
{
	*value = false;
	if (depth > 4)
		return -ENOTSUP;
	for (size_t i = 0; i < n; i++) {
		uint8_t a = ops[i].atom;
		int r = 0;

		if (a >= DW_OP_lit0 && a <= DW_OP_lit31) {
			konst(e, a - DW_OP_lit0);
		} else if (a >= DW_OP_breg0 && a <= DW_OP_breg31) {
			r = reg(e, a - DW_OP_breg0);
			konst(e, ops[i].number);
			op(e, TP_OP_ADD);
		} else if (a >= DW_OP_reg0 && a <= DW_OP_reg31) {
			if (n != 1)
				return -ENOTSUP;
			r = reg(e, a - DW_OP_reg0);
			*value = true;
		} else {
			switch (a) {
			case DW_OP_addr:
				konst(e, ops[i].number + sc->bias);
				break;
			case DW_OP_regx:
				if (n != 1)
					return -ENOTSUP;
				r = reg(e, ops[i].number);
				*value = true;
				break;
			case DW_OP_bregx:
				r = reg(e, ops[i].number);
				konst(e, ops[i].number2);
				op(e, TP_OP_ADD);
				break;
			case DW_OP_fbreg: {
				Dwarf_Attribute fa;
				Dwarf_Op *fops;
				size_t fn;
				bool v;

				if (sc->fn < 0 ||
				    !dwarf_attr_integrate(&sc->scopes[sc->fn], DW_AT_frame_base,
							  &fa) ||
				    dwarf_getlocation_addr(&fa, sc->pc, &fops, &fn, 1) != 1)
					return -ENOTSUP;
				r = dwexpr(sc, fops, fn, e, &v, depth + 1);
				konst(e, ops[i].number);
				op(e, TP_OP_ADD);
				break;
			}
			case DW_OP_call_frame_cfa:
				r = cfa(sc, e);
				break;
			case DW_OP_const1u:
			case DW_OP_const2u:
			case DW_OP_const4u:
			case DW_OP_const8u:
			case DW_OP_constu:
			case DW_OP_const1s:
			case DW_OP_const2s:
			case DW_OP_const4s:
			case DW_OP_const8s:
			case DW_OP_consts:
				konst(e, ops[i].number);
				break;
			case DW_OP_plus_uconst:
				konst(e, ops[i].number);
				op(e, TP_OP_ADD);
				break;
			case DW_OP_plus:
				op(e, TP_OP_ADD);
				break;
			case DW_OP_minus:
				op(e, TP_OP_SUB);
				break;
			case DW_OP_deref:
				op(e, TP_OP_LOAD);
				op(e, 8);
				break;
			case DW_OP_stack_value:
				if (i + 1 != n)
					return -ENOTSUP;
				*value = true;
				break;
			default:
				return -ENOTSUP;
			}
		}
		if (r)
			return r;
	}
	return e->over ? -E2BIG : 0;
}

/* The canonical frame address at the pc, from .eh_frame or .debug_frame. */
static int cfa(struct tp_scope *sc, struct emit *e)
{
	Dwarf_Addr cbias = 0;
	Dwarf_CFI *cfi = dwfl_module_eh_cfi(sc->mod, &cbias);
	Dwarf_Frame *fr = NULL;
	Dwarf_Op *ops;
	size_t n;
	bool v;
	int r;

	if (!cfi || dwarf_cfi_addrframe(cfi, sc->pc - cbias, &fr)) {
		cfi = dwfl_module_dwarf_cfi(sc->mod, &cbias);
		if (!cfi || dwarf_cfi_addrframe(cfi, sc->pc - cbias, &fr))
			return -ENOTSUP;
	}
	r = dwarf_frame_cfa(fr, &ops, &n) ? -ENOTSUP : dwexpr(sc, ops, n, e, &v, 3);
	free(fr);
	return r;
}

static int var_of(struct tp_scope *sc, Dwarf_Die *die, struct tp_var *v)
{
	struct emit e = {.p = v->code, .cap = sizeof(v->code)};
	Dwarf_Attribute a;
	Dwarf_Die td;
	Dwarf_Op *ops;
	size_t n;
	bool value;
	int r;

	memset(v, 0, sizeof(*v));
	if (dwarf_attr_integrate(die, DW_AT_type, &a) && dwarf_formref_die(&a, &td))
		ty_of(&td, &v->ty);
	if (!dwarf_attr_integrate(die, DW_AT_location, &a)) {
		v->kind = VAR_NONE;
		return 0;
	}
	if (dwarf_getlocation_addr(&a, sc->pc, &ops, &n, 1) != 1 || n == 0) {
		v->kind = VAR_NONE;
		return 0;
	}
	r = dwexpr(sc, ops, n, &e, &value, 0);
	if (r)
		return r;
	v->len = e.len;
	v->kind = value ? VAR_VALUE : VAR_MEM;
	return 0;
}

/* A global variable of another compilation unit. */
static int global_var(struct tp_scope *sc, const char *name, Dwarf_Die *out)
{
	Dwarf_Off off = 0, next;
	size_t hsize;

	while (dwarf_nextcu(sc->dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
		Dwarf_Die cu, c;

		if (dwarf_offdie(sc->dw, off + hsize, &cu) && dwarf_child(&cu, &c) == 0) {
			do {
				const char *n = dwarf_diename(&c);

				if (dwarf_tag(&c) == DW_TAG_variable && n && !strcmp(n, name) &&
				    dwarf_hasattr(&c, DW_AT_location)) {
					*out = c;
					return 0;
				}
			} while (dwarf_siblingof(&c, &c) == 0);
		}
		off = next;
	}
	return -ENOENT;
}

int tp_scope_var(struct tp_scope *sc, const char *name, struct tp_var *v)
{
	Dwarf_Die die;

	if (!sc->dw)
		return -ENOENT;
	if (sc->nscopes > 0 &&
	    dwarf_getscopevar(sc->scopes, sc->nscopes, name, -1, NULL, 0, 0, &die) >= 0)
		return var_of(sc, &die, v);
	if (global_var(sc, name, &die))
		return -ENOENT;
	return var_of(sc, &die, v);
}

int tp_scope_foreach(struct tp_scope *sc, bool args, int (*fn)(void *arg, const char *name),
		     void *arg)
{
	/* Outermost block first: locals in the order of their declaration. */
	for (int i = sc->fn; i >= 0; i--) {
		Dwarf_Die c;

		if ((i != sc->fn && args) || dwarf_child(&sc->scopes[i], &c) != 0)
			continue;
		do {
			int tag = dwarf_tag(&c);
			const char *n = dwarf_diename(&c);
			int r;

			if (!n || tag != (args ? DW_TAG_formal_parameter : DW_TAG_variable))
				continue;
			r = fn(arg, n);
			if (r)
				return r;
		} while (dwarf_siblingof(&c, &c) == 0);
	}
	return 0;
}

/* ---- source lines ---- */

static Dwfl_Module *open_mod(const char *path, Dwfl **dwfl)
{
	static const Dwfl_Callbacks cbs = {
	    .find_elf = dwfl_build_id_find_elf,
	    .find_debuginfo = dwfl_standard_find_debuginfo,
	    .section_address = dwfl_offline_section_address,
	};
	Dwfl_Module *mod;

	*dwfl = dwfl_begin(&cbs);
	if (!*dwfl)
		return NULL;
	dwfl_report_begin(*dwfl);
	mod = dwfl_report_elf(*dwfl, path, path, -1, 0, true);
	dwfl_report_end(*dwfl, NULL, NULL);
	return mod;
}

int tp_dwarf_line_addr(const char *path, const char *file, int line, uint64_t *addr)
{
	Dwfl *dwfl;
	Dwfl_Module *mod = open_mod(path, &dwfl);
	Dwfl_Line **srcs = NULL;
	size_t n = 0;
	int r = -ENOENT;

	if (mod && dwfl_module_getsrc_file(mod, file, line, 0, &srcs, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			Dwarf_Addr a;
			int l = 0;

			if (!dwfl_lineinfo(srcs[i], &a, &l, NULL, NULL, NULL) || l != line)
				continue;
			if (r || a < *addr)
				*addr = a;
			r = 0;
		}
	}
	free(srcs);
	if (dwfl)
		dwfl_end(dwfl);
	return r;
}

int tp_dwarf_after_prologue(const char *path, uint64_t lowpc, uint64_t *addr)
{
	Dwfl *dwfl;
	Dwfl_Module *mod = open_mod(path, &dwfl);
	Dwarf_Addr bias = 0, hi = 0, lo = 0, best = 0;
	Dwarf_Die *cu, *scopes = NULL;
	Dwarf_Lines *lines;
	size_t n;
	int r = -ENOENT, ns;

	cu = mod ? dwfl_module_addrdie(mod, lowpc, &bias) : NULL;
	if (!cu || dwarf_getsrclines(cu, &lines, &n))
		goto out;
	ns = dwarf_getscopes(cu, lowpc, &scopes);
	for (int i = 0; i < ns; i++) {
		if (dwarf_tag(&scopes[i]) == DW_TAG_subprogram && !dwarf_lowpc(&scopes[i], &lo) &&
		    !dwarf_highpc(&scopes[i], &hi))
			break;
		hi = 0;
	}
	if (!hi || lo != lowpc)
		goto out;
	/* The first row past the entry: a prologue_end mark when the compiler gave one. */
	for (size_t i = 0; i < n; i++) {
		Dwarf_Line *l = dwarf_onesrcline(lines, i);
		Dwarf_Addr a;
		bool pe = false;

		if (dwarf_lineaddr(l, &a) || a <= lowpc || a >= hi)
			continue;
		dwarf_lineprologueend(l, &pe);
		if (pe) {
			best = a;
			break;
		}
		if (!best || a < best)
			best = a;
	}
	if (best) {
		*addr = best;
		r = 0;
	}
out:
	free(scopes);
	if (dwfl)
		dwfl_end(dwfl);
	return r;
}

char *tp_dwarf_source_path(const char *path, uint64_t pc)
{
	Dwfl *dwfl;
	Dwfl_Module *mod = open_mod(path, &dwfl);
	Dwarf_Addr bias = 0;
	Dwarf_Die *cu = mod ? dwfl_module_addrdie(mod, pc, &bias) : NULL;
	Dwarf_Line *line = cu ? dwarf_getsrc_die(cu, pc - bias) : NULL;
	const char *file = line ? dwarf_linesrc(line, NULL, NULL) : NULL;
	Dwarf_Attribute a;
	const char *dir;
	char *out = NULL;

	if (file && file[0] != '/' &&
	    (dir = dwarf_formstring(dwarf_attr(cu, DW_AT_comp_dir, &a))) != NULL) {
		/* A unit compiled with a relative name: from its compilation directory. */
		if (asprintf(&out, "%s/%s", dir, file) < 0)
			out = NULL;
	} else if (file) {
		out = strdup(file);
	}
	if (dwfl)
		dwfl_end(dwfl);
	return out;
}
