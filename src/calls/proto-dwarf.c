/* Prototypes of traced functions: from DWARF with libdw (debug files found by elfutils'
 * standard lookup), or from the built-in libc table, cached per object and address. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

#include "base/hash.h"
#include "base/log.h"
#include "calls/proto-priv.h"
#include "elf/symbols.h"

/* One object's debug information, opened once, and the prototypes found in it by link-time
 * address (a NULL prototype, stored too, means raw registers). */
struct dwobj {
	char *path;
	Dwfl *dwfl;
	Dwfl_Module *mod; /* NULL: no usable ELF */
	bool libc;	  /* libc or a sibling: the table's failure conventions apply */
	struct tp_hash protos;
	struct dwobj *next;
};

struct tp_protos {
	struct dwobj *objs;
};

/* ---- prototypes from the libc table ---- */

static void letter_type(char c, struct ptype *t)
{
	static const struct {
		char c;
		uint8_t kind, size;
	} kinds[] = {
	    {'v', K_VOID, 0},	{'i', K_INT, 4}, {'u', K_UINT, 4}, {'l', K_INT, 8},
	    {'z', K_UINT, 8},	{'p', K_PTR, 8}, {'s', K_STR, 8},  {'b', K_BUF, 8},
	    {'c', K_CHAR, 4},	{'x', K_HEX, 4}, {'X', K_HEX, 8},  {'o', K_OCT, 4},
	    {'d', K_DOUBLE, 8},
	};

	memset(t, 0, sizeof(*t));
	t->kind = K_PTR;
	t->size = 8;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(*kinds); i++) {
		if (kinds[i].c == c) {
			t->kind = kinds[i].kind;
			t->size = kinds[i].size;
		}
	}
}

static bool is_fp(const struct ptype *t)
{
	return t->kind == K_FLOAT || t->kind == K_DOUBLE || t->kind == K_LDOUBLE ||
	       t->kind == K_OTHER_SSE ||
	       (t->kind == K_STRUCT && (t->cls[0] == C_SSE || t->cls[1] == C_SSE));
}

static void proto_free(struct tp_proto *p)
{
	if (!p)
		return;
	for (int i = -1; i < p->nparams; i++) {
		struct ptype *t = i < 0 ? &p->ret : &p->params[i];

		for (uint32_t k = 0; k < t->nenums; k++)
			free(t->enums[k].name);
		free(t->enums);
	}
	free(p->params);
	free(p);
}

static struct tp_proto *proto_from_table(const struct tp_libc_proto *e)
{
	const char *s = strchr(e->sig, ':') + 1;
	struct tp_proto *p = calloc(1, sizeof(*p));
	size_t n = strlen(s);

	if (!p)
		return NULL;
	p->params = calloc(n ? n : 1, sizeof(*p->params));
	if (!p->params) {
		free(p);
		return NULL;
	}
	letter_type(e->sig[0], &p->ret);
	for (; *s; s++) {
		if (*s == '.')
			p->variadic = true;
		else
			letter_type(*s, &p->params[p->nparams++]);
	}
	p->fail = e->fail;
	p->needs_fp = is_fp(&p->ret);
	for (int i = 0; i < p->nparams; i++)
		p->needs_fp |= is_fp(&p->params[i]);
	return p;
}

/* ---- prototypes from DWARF ---- */

/* Through typedefs and qualifiers; false for void. */
static bool strip_type(Dwarf_Die *die)
{
	for (int depth = 0; depth < 64; depth++) {
		Dwarf_Attribute at;

		switch (dwarf_tag(die)) {
		case DW_TAG_typedef:
		case DW_TAG_const_type:
		case DW_TAG_volatile_type:
		case DW_TAG_restrict_type:
		case DW_TAG_atomic_type:
			if (!dwarf_attr_integrate(die, DW_AT_type, &at) ||
			    !dwarf_formref_die(&at, die))
				return false;
			break;
		default:
			return true;
		}
	}
	return false;
}

/* The type @die refers to with DW_AT_type, stripped; false for void. */
static bool type_of(Dwarf_Die *die, Dwarf_Die *type)
{
	Dwarf_Attribute at;

	if (!dwarf_attr_integrate(die, DW_AT_type, &at) || !dwarf_formref_die(&at, type))
		return false;
	return strip_type(type);
}

static uint64_t die_size(Dwarf_Die *die)
{
	Dwarf_Word size;

	return dwarf_aggregate_size(die, &size) ? 0 : size;
}

static void merge(uint8_t cls[2], uint64_t off, uint64_t size, uint8_t c)
{
	for (uint64_t k = off / 8; k <= (off + (size ? size : 1) - 1) / 8 && k < 2; k++) {
		if (cls[k] == C_NONE || c == C_INT)
			cls[k] = c;
	}
}

/* Classes of the eightbytes of an aggregate passed by value (psABI 3.2.3); -1: memory. */
static int classify(Dwarf_Die *type, uint64_t off, uint8_t cls[2], int depth)
{
	Dwarf_Die child, elem;
	Dwarf_Attribute at;
	Dwarf_Word enc = 0, w;
	uint64_t size = die_size(type), esize, count;

	if (depth > 16 || off >= 16)
		return off >= 16 ? -1 : 0;
	switch (dwarf_tag(type)) {
	case DW_TAG_base_type:
		dwarf_formudata(dwarf_attr(type, DW_AT_encoding, &at), &enc);
		if (enc == DW_ATE_float && size <= 8) {
			merge(cls, off, size, C_SSE);
		} else if (enc == DW_ATE_complex_float && size <= 16) {
			merge(cls, off, size, C_SSE);
		} else if (enc == DW_ATE_float || enc == DW_ATE_complex_float) {
			return -1; /* long double: x87, memory */
		} else {
			merge(cls, off, size, C_INT);
		}
		return 0;
	case DW_TAG_structure_type:
	case DW_TAG_class_type:
	case DW_TAG_union_type:
		if (dwarf_child(type, &child))
			return 0;
		do {
			uint64_t moff = 0;

			if (dwarf_tag(&child) != DW_TAG_member &&
			    dwarf_tag(&child) != DW_TAG_inheritance)
				continue;
			if (dwarf_tag(type) != DW_TAG_union_type) {
				if (!dwarf_formudata(
					dwarf_attr(&child, DW_AT_data_member_location, &at), &w))
					moff = w;
				else if (!dwarf_formudata(
					     dwarf_attr(&child, DW_AT_data_bit_offset, &at), &w))
					moff = w / 8;
			}
			if (!type_of(&child, &elem))
				continue;
			if (classify(&elem, off + moff, cls, depth + 1))
				return -1;
		} while (!dwarf_siblingof(&child, &child));
		return 0;
	case DW_TAG_array_type:
		if (!type_of(type, &elem))
			return 0;
		esize = die_size(&elem);
		count = esize ? size / esize : 0;
		for (uint64_t i = 0; i < count && off + i * esize < 16; i++)
			if (classify(&elem, off + i * esize, cls, depth + 1))
				return -1;
		return 0;
	default:
		merge(cls, off, size ? size : 8, C_INT);
		return 0;
	}
}

static int read_enums(Dwarf_Die *type, struct ptype *t)
{
	Dwarf_Die child, under;
	Dwarf_Attribute at;
	Dwarf_Word enc;
	size_t cap = 0;

	if (type_of(type, &under) && dwarf_tag(&under) == DW_TAG_base_type &&
	    !dwarf_formudata(dwarf_attr(&under, DW_AT_encoding, &at), &enc))
		t->is_signed = enc == DW_ATE_signed || enc == DW_ATE_signed_char;
	if (dwarf_child(type, &child))
		return 0;
	do {
		Dwarf_Sword sv;
		const char *name;

		if (dwarf_tag(&child) != DW_TAG_enumerator || t->nenums >= MAX_ENUMS)
			continue;
		name = dwarf_diename(&child);
		if (!name || dwarf_formsdata(dwarf_attr(&child, DW_AT_const_value, &at), &sv))
			continue;
		if (sv < 0)
			t->is_signed = true;
		if (t->nenums == cap) {
			struct enumv *n;

			cap = cap ? 2 * cap : 8;
			n = realloc(t->enums, cap * sizeof(*n));
			if (!n)
				return -ENOMEM;
			t->enums = n;
		}
		t->enums[t->nenums].val = (uint64_t)sv;
		t->enums[t->nenums].name = strdup(name);
		if (!t->enums[t->nenums].name)
			return -ENOMEM;
		t->nenums++;
	} while (!dwarf_siblingof(&child, &child));
	return 0;
}

/* @die: the DIE that has the type as DW_AT_type (a parameter or the function). */
static int dwarf_type(Dwarf_Die *die, struct ptype *t)
{
	Dwarf_Die type, pointee;
	Dwarf_Attribute at;
	Dwarf_Word enc = 0, cc;
	const char *name;
	uint64_t size;

	memset(t, 0, sizeof(*t));
	if (!type_of(die, &type)) {
		t->kind = K_VOID;
		return 0;
	}
	size = die_size(&type);
	t->size = size;
	switch (dwarf_tag(&type)) {
	case DW_TAG_base_type:
		dwarf_formudata(dwarf_attr(&type, DW_AT_encoding, &at), &enc);
		name = dwarf_diename(&type);
		switch (enc) {
		case DW_ATE_boolean:
			t->kind = K_BOOL;
			break;
		case DW_ATE_float:
			t->kind = size == 4 ? K_FLOAT : size == 8 ? K_DOUBLE : K_OTHER_SSE;
			if (name && !strcmp(name, "long double"))
				t->kind = K_LDOUBLE;
			break;
		case DW_ATE_signed:
		case DW_ATE_signed_char:
		case DW_ATE_unsigned:
		case DW_ATE_unsigned_char:
		case DW_ATE_UTF:
			if (name && !strcmp(name, "char"))
				t->kind = K_CHAR;
			else if (size > 8)
				t->kind = K_STRUCT; /* __int128: two registers, {...} */
			else
				t->kind = enc == DW_ATE_signed || enc == DW_ATE_signed_char
					      ? K_INT
					      : K_UINT;
			break;
		default:
			t->kind = K_STRUCT; /* complex: passed as its parts */
			break;
		}
		break;
	case DW_TAG_pointer_type:
	case DW_TAG_reference_type:
	case DW_TAG_rvalue_reference_type:
		t->kind = K_PTR;
		t->size = 8;
		if (dwarf_tag(&type) == DW_TAG_pointer_type && type_of(&type, &pointee) &&
		    dwarf_tag(&pointee) == DW_TAG_base_type && (name = dwarf_diename(&pointee)) &&
		    !strcmp(name, "char"))
			t->kind = K_STR;
		break;
	case DW_TAG_enumeration_type:
		t->kind = K_ENUM;
		if (!t->size)
			t->size = 4;
		return read_enums(&type, t);
	case DW_TAG_structure_type:
	case DW_TAG_class_type:
	case DW_TAG_union_type:
		/* A C++ class that is not trivially copyable goes by invisible reference. */
		if (!dwarf_formudata(dwarf_attr(&type, DW_AT_calling_convention, &at), &cc) &&
		    cc == DW_CC_pass_by_reference) {
			t->kind = K_PTR;
			t->size = 8;
			break;
		}
		t->kind = K_STRUCT;
		break;
	default:
		t->kind = K_PTR; /* pointers to members, unknown tags: one register */
		t->size = 8;
		break;
	}
	if (t->kind == K_STRUCT) {
		if (size > 16 || classify(&type, 0, t->cls, 0))
			t->cls[0] = C_MEM;
		else if (dwarf_tag(&type) == DW_TAG_base_type)
			merge(t->cls, 0, size, enc == DW_ATE_complex_float ? C_SSE : C_INT);
	}
	return 0;
}

static struct tp_proto *proto_from_die(Dwarf_Die *subprogram)
{
	Dwarf_Die fn = *subprogram, child;
	Dwarf_Attribute at;
	Dwarf_Word cc;
	struct tp_proto *p;
	int cap = 0;

	/* Functions whose calling convention GCC changed are not called the usual way. */
	if (!dwarf_formudata(dwarf_attr_integrate(subprogram, DW_AT_calling_convention, &at),
			     &cc) &&
	    cc == DW_CC_nocall)
		return NULL;
	/* An out-of-line instance: its declaration has the full parameter list. */
	for (int i = 0; i < 8 && dwarf_attr(&fn, DW_AT_abstract_origin, &at); i++)
		if (!dwarf_formref_die(&at, &fn))
			return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	if (dwarf_type(subprogram, &p->ret))
		goto err;
	if (!dwarf_child(&fn, &child)) {
		do {
			int tag = dwarf_tag(&child);

			if (tag == DW_TAG_unspecified_parameters)
				p->variadic = true;
			if (tag != DW_TAG_formal_parameter)
				continue;
			if (p->nparams == MAX_PARAMS)
				break;
			if (p->nparams == cap) {
				struct ptype *n;

				cap = cap ? 2 * cap : 8;
				n = realloc(p->params, cap * sizeof(*n));
				if (!n)
					goto err;
				p->params = n;
			}
			if (dwarf_type(&child, &p->params[p->nparams++]))
				goto err;
		} while (!dwarf_siblingof(&child, &child));
	}
	p->needs_fp = is_fp(&p->ret);
	for (int i = 0; i < p->nparams; i++)
		p->needs_fp |= is_fp(&p->params[i]);
	return p;

err:
	proto_free(p);
	return NULL;
}

static bool starts_at(Dwarf_Die *die, Dwarf_Addr pc)
{
	Dwarf_Addr lo, base, start, end;
	ptrdiff_t off = 0;

	if (!dwarf_lowpc(die, &lo) && lo == pc)
		return true;
	if (!dwarf_entrypc(die, &lo) && lo == pc)
		return true;
	/* Hot and cold parts: one of the ranges starts at the entry. */
	while ((off = dwarf_ranges(die, off, &base, &start, &end)) > 0)
		if (start == pc)
			return true;
	return false;
}

/* The DW_TAG_subprogram whose entry is @vaddr. */
static int find_subprogram(struct dwobj *o, uint64_t vaddr, Dwarf_Die *out)
{
	Dwarf_Addr bias;
	Dwarf_Die *cu, *scopes;
	int n, err = -ENOENT;

	if (!o->mod)
		return -ENOENT;
	cu = dwfl_module_addrdie(o->mod, vaddr, &bias);
	/* The assembler describes its functions without types (glibc's string functions). */
	if (!cu || dwarf_srclang(cu) == DW_LANG_Mips_Assembler)
		return -ENOENT;
	n = dwarf_getscopes(cu, vaddr - bias, &scopes);
	for (int i = 0; i < n; i++) {
		if (dwarf_tag(&scopes[i]) == DW_TAG_subprogram) {
			if (starts_at(&scopes[i], vaddr - bias)) {
				*out = scopes[i];
				err = 0;
			}
			break;
		}
	}
	if (n > 0)
		free(scopes);
	return err;
}

/* ---- the cache ---- */

static bool libc_like(const char *path)
{
	static const char *const prefixes[] = {"libc.so", "libc-", "libpthread", "libdl",
					       "libm.so", "libm-", "librt",	 "libresolv"};
	const char *base = strrchr(path, '/');
	struct tp_elf_info info;

	base = base ? base + 1 : path;
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(*prefixes); i++)
		if (!strncmp(base, prefixes[i], strlen(prefixes[i])))
			return true;
	/* A static program carries its libc. */
	return !tp_elf_probe(path, &info) && info.is_static;
}

static struct dwobj *get_obj(struct tp_protos *ps, const char *path)
{
	static const Dwfl_Callbacks cbs = {
	    .find_elf = dwfl_build_id_find_elf,
	    .find_debuginfo = dwfl_standard_find_debuginfo,
	    .section_address = dwfl_offline_section_address,
	};
	struct dwobj *o;

	for (o = ps->objs; o; o = o->next)
		if (!strcmp(o->path, path))
			return o;
	o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->path = strdup(path);
	if (!o->path) {
		free(o);
		return NULL;
	}
	o->libc = libc_like(path);
	o->dwfl = dwfl_begin(&cbs);
	if (o->dwfl) {
		dwfl_report_begin(o->dwfl);
		/* Base 0 with p_vaddr added: module addresses are link-time addresses. */
		o->mod = dwfl_report_elf(o->dwfl, path, path, -1, 0, true);
		dwfl_report_end(o->dwfl, NULL, NULL);
		if (!o->mod)
			tp_dbg("proto: %s: %s", path, dwfl_errmsg(-1));
	}
	o->next = ps->objs;
	ps->objs = o;
	return o;
}

struct tp_protos *tp_protos_new(void)
{
	return calloc(1, sizeof(struct tp_protos));
}

static int free_proto(void *arg, uint64_t key, uint64_t *val)
{
	proto_free((struct tp_proto *)(uintptr_t)*val);
	return 0;
}

void tp_protos_free(struct tp_protos *ps)
{
	if (!ps)
		return;
	for (struct dwobj *o = ps->objs, *next; o; o = next) {
		next = o->next;
		tp_hash_foreach(&o->protos, free_proto, NULL);
		tp_hash_release(&o->protos);
		dwfl_end(o->dwfl);
		free(o->path);
		free(o);
	}
	free(ps);
}

/* GCC's clones (f.isra.0, f.constprop.0, f.part.0) take their arguments their own way. */
static bool is_clone(const char *name, size_t len)
{
	return memchr(name, '.', len) != NULL;
}

/* libc's own names of its functions too: __dup2, __libc_malloc. */
static const struct tp_libc_proto *table_lookup(const char *name, size_t len)
{
	static const char *const prefixes[] = {"", "__libc_", "__"};

	for (size_t i = 0; i < sizeof(prefixes) / sizeof(*prefixes); i++) {
		size_t n = strlen(prefixes[i]);

		if (len > n && !strncmp(name, prefixes[i], n))
			if (tp_proto_libc_lookup(name + n, len - n))
				return tp_proto_libc_lookup(name + n, len - n);
	}
	return NULL;
}

static struct tp_proto *build(struct dwobj *o, const char *name, uint64_t vaddr)
{
	size_t len = name ? strcspn(name, "@") : 0;
	const struct tp_libc_proto *tab = NULL;
	struct tp_proto *p = NULL;
	Dwarf_Die die;

	if (name && is_clone(name, len))
		return NULL;
	if (name)
		tab = table_lookup(name, len);
	/* libc's own functions: the table knows what the values mean (strings of write(),
	 * the flags of open()), and gives the same lines whether or not libc's debug info is
	 * installed. */
	if (tab && o->libc)
		return proto_from_table(tab);
	if (!find_subprogram(o, vaddr, &die)) {
		p = proto_from_die(&die);
		return p;
	}
	return tab ? proto_from_table(tab) : NULL;
}

const struct tp_proto *tp_protos_find(struct tp_protos *ps, const char *path, const char *name,
				      uint64_t vaddr)
{
	struct dwobj *o = get_obj(ps, path);
	struct tp_proto *p;
	uint64_t *v;

	if (!o)
		return NULL;
	v = tp_hash_get(&o->protos, vaddr);
	if (v)
		return (struct tp_proto *)(uintptr_t)*v;
	p = build(o, name, vaddr);
	if (tp_hash_put(&o->protos, vaddr, (uintptr_t)p)) {
		proto_free(p);
		return NULL;
	}
	return p;
}
