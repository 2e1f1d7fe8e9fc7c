/* Typed arguments and return values of traced calls: prototypes read from DWARF with libdw
 * (or the built-in libc table), argument locations after the SysV x86-64 calling convention,
 * and strace-like text of the values read from a stopped thread. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

#include "arch/arch.h"
#include "calls/proto.h"
#include "base/log.h"
#include "elf/file.h"
#include "elf/symbols.h"
#include "proc/proc.h"

#define STR_MAX 32     /* characters of a string shown, as strace's default -s */
#define MAX_ENUMS 4096 /* enumerators kept per enum type */
#define MAX_PARAMS 64

enum kind {
	K_VOID,
	K_INT, /* signed, @size bytes */
	K_UINT,
	K_BOOL,
	K_CHAR,
	K_PTR,
	K_STR, /* char *: the string it points to */
	K_BUF, /* const void * whose length is the next argument (write) */
	K_HEX,
	K_OCT,
	K_FLOAT,
	K_DOUBLE,
	K_LDOUBLE, /* x87 80-bit, passed in memory, returned in st0 */
	K_ENUM,
	K_STRUCT,    /* by value: {...}; passing follows cls[] */
	K_OTHER_SSE, /* __float128 and friends: one xmm register, shown as "?" */
};

/* SysV classes of an eightbyte. */
enum cls { C_NONE, C_INT, C_SSE, C_MEM };

struct enumv {
	uint64_t val;
	char *name;
};

struct ptype {
	uint8_t kind;
	bool is_signed; /* K_ENUM */
	uint8_t cls[2]; /* K_STRUCT: class of each eightbyte, cls[0] == C_MEM for memory */
	uint32_t size;
	uint32_t nenums;
	struct enumv *enums;
};

struct tp_proto {
	struct ptype ret;
	struct ptype *params;
	int nparams;
	bool variadic;
	bool needs_fp;
	char fail; /* as tp_libc_proto.fail */
};

/* One object's debug information, opened once. */
struct dwobj {
	char *path;
	Dwfl *dwfl;
	Dwfl_Module *mod; /* NULL: no usable ELF */
	bool libc;	  /* libc or a sibling: the table's failure conventions apply */
	struct dwobj *next;
};

struct entry {
	struct dwobj *obj;
	uint64_t vaddr;
	struct tp_proto *proto; /* NULL: raw registers */
	struct entry *next;
};

struct tp_protos {
	struct dwobj *objs;
	struct entry **buckets;
	size_t nbuckets, nentries;
};

/* ---- output ---- */

struct out {
	char *buf;
	size_t len, pos;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->pos + 1 >= o->len)
		return;
	va_start(ap, fmt);
	n = vsnprintf(o->buf + o->pos, o->len - o->pos, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	o->pos += (size_t)n < o->len - o->pos ? (size_t)n : o->len - o->pos - 1;
}

/* One character as C writes it inside quotes; @next decides whether an octal escape needs
 * its three digits. */
static void put_escaped(struct out *o, unsigned char c, int next, char quote)
{
	static const char esc[] = "\aa\bb\tt\nn\vv\ff\rr";
	const char *e = c ? memchr(esc, c, sizeof(esc) - 1) : NULL;

	if (e && (e - esc) % 2 == 0)
		put(o, "\\%c", e[1]);
	else if (c == quote || c == '\\')
		put(o, "\\%c", c);
	else if (isprint(c))
		put(o, "%c", c);
	else if (next >= '0' && next <= '7')
		put(o, "\\%03o", c);
	else
		put(o, "\\%o", c);
}

static void put_quoted(struct out *o, const uint8_t *s, size_t n, bool more)
{
	put(o, "\"");
	for (size_t i = 0; i < n; i++)
		put_escaped(o, s[i], i + 1 < n ? s[i + 1] : -1, '"');
	put(o, more ? "\"..." : "\"");
}

/* A NUL-terminated string of the tracee, strace style. */
static void put_string(struct out *o, pid_t pid, uint64_t addr)
{
	uint8_t s[STR_MAX + 1];
	ssize_t got;
	uint8_t *nul;

	if (!addr) {
		put(o, "NULL");
		return;
	}
	got = tp_proc_read(pid, addr, s, sizeof(s));
	if (got <= 0) {
		put(o, "%#llx", (unsigned long long)addr);
		return;
	}
	nul = memchr(s, 0, got);
	if (nul)
		put_quoted(o, s, nul - s, false);
	else
		put_quoted(o, s, got > STR_MAX ? STR_MAX : got, true);
}

static void put_buffer(struct out *o, pid_t pid, uint64_t addr, uint64_t len)
{
	uint8_t s[STR_MAX];
	size_t want = len > STR_MAX ? STR_MAX : len;
	ssize_t got;

	if (!addr) {
		put(o, "NULL");
		return;
	}
	got = tp_proc_read(pid, addr, s, want);
	if (got < (ssize_t)want) {
		put(o, "%#llx", (unsigned long long)addr);
		return;
	}
	put_quoted(o, s, want, len > want);
}

/* The shortest text that reads back as the same value. */
static void put_double(struct out *o, double d, int maxprec, bool is_float)
{
	char t[48];

	for (int prec = 1; prec <= maxprec; prec++) {
		snprintf(t, sizeof(t), "%.*g", prec, d);
		if (is_float ? (float)strtod(t, NULL) == (float)d : strtod(t, NULL) == d)
			break;
	}
	put(o, "%s", t);
}

/* ---- values ---- */

static uint64_t trunc_u(uint64_t v, unsigned size)
{
	return size >= 8 ? v : v & ((1ULL << (size * 8)) - 1);
}

static int64_t trunc_s(uint64_t v, unsigned size)
{
	unsigned shift = size >= 8 ? 0 : 64 - size * 8;

	return (int64_t)(v << shift) >> shift;
}

/* A value gathered from its registers or stack slot: up to 16 bytes. */
struct val {
	bool have;
	uint8_t b[16];
};

static uint64_t val_u64(const struct val *v)
{
	uint64_t x;

	memcpy(&x, v->b, sizeof(x));
	return x;
}

static void put_value(struct out *o, pid_t pid, const struct ptype *t, const struct val *v,
		      const struct val *next)
{
	uint64_t x = val_u64(v);

	if (!v->have) {
		put(o, "?");
		return;
	}
	switch (t->kind) {
	case K_VOID:
		put(o, "void");
		break;
	case K_INT:
		put(o, "%lld", (long long)trunc_s(x, t->size));
		break;
	case K_UINT:
		put(o, "%llu", (unsigned long long)trunc_u(x, t->size));
		break;
	case K_BOOL:
		x = trunc_u(x, t->size);
		if (x <= 1)
			put(o, "%s", x ? "true" : "false");
		else
			put(o, "%llu", (unsigned long long)x);
		break;
	case K_CHAR:
		put(o, "'");
		put_escaped(o, (unsigned char)x, -1, '\'');
		put(o, "'");
		break;
	case K_PTR:
		if (x)
			put(o, "%#llx", (unsigned long long)x);
		else
			put(o, "NULL");
		break;
	case K_STR:
		put_string(o, pid, x);
		break;
	case K_BUF:
		if (next && next->have)
			put_buffer(o, pid, x, val_u64(next));
		else
			put(o, "%#llx", (unsigned long long)x);
		break;
	case K_HEX:
		put(o, "%#llx", (unsigned long long)trunc_u(x, t->size));
		break;
	case K_OCT:
		put(o, "%#llo", (unsigned long long)trunc_u(x, t->size));
		break;
	case K_FLOAT: {
		float f;

		memcpy(&f, v->b, sizeof(f));
		put_double(o, f, 9, true);
		break;
	}
	case K_DOUBLE: {
		double d;

		memcpy(&d, v->b, sizeof(d));
		put_double(o, d, 17, false);
		break;
	}
	case K_LDOUBLE: {
		long double ld = 0;

		memcpy(&ld, v->b, 10);
		put(o, "%Lg", ld);
		break;
	}
	case K_ENUM: {
		uint64_t u = trunc_u(x, t->size);

		for (uint32_t i = 0; i < t->nenums; i++) {
			if (trunc_u(t->enums[i].val, t->size) == u) {
				put(o, "%s", t->enums[i].name);
				return;
			}
		}
		if (t->is_signed)
			put(o, "%lld", (long long)trunc_s(x, t->size));
		else
			put(o, "%llu", (unsigned long long)u);
		break;
	}
	case K_STRUCT:
		put(o, "{...}");
		break;
	default:
		put(o, "?");
		break;
	}
}

/* Where the next argument is, after the SysV x86-64 rules. */
struct argpos {
	pid_t pid;
	const struct user_regs_struct *regs;
	const struct user_fpregs_struct *fp;
	int gi, si;  /* next free integer / SSE argument register */
	uint64_t sp; /* next stack slot */
};

static uint64_t gpr(const struct user_regs_struct *r, int i)
{
	const unsigned long long v[6] = {r->rdi, r->rsi, r->rdx, r->rcx, r->r8, r->r9};

	return v[i];
}

/* A stack-passed argument of @size bytes; @nread of them are kept (0 for a struct). */
static void stack_slot(struct argpos *a, struct val *v, uint64_t size, unsigned align, size_t nread)
{
	if (align > 8)
		a->sp = (a->sp + align - 1) & ~(uint64_t)(align - 1);
	v->have = !nread || tp_proc_read(a->pid, a->sp, v->b, nread) == (ssize_t)nread;
	a->sp += (size + 7) & ~(uint64_t)7;
}

static void fetch_arg(struct argpos *a, const struct ptype *t, struct val *v)
{
	int nint = 0, nsse = 0, n8;
	uint64_t x;

	memset(v, 0, sizeof(*v));
	switch (t->kind) {
	case K_FLOAT:
	case K_DOUBLE:
	case K_OTHER_SSE:
		if (a->si < 8) {
			if (a->fp) {
				memcpy(v->b, &a->fp->xmm_space[4 * a->si], 16);
				v->have = true;
			}
			a->si++;
		} else if (t->kind == K_OTHER_SSE) {
			stack_slot(a, v, 16, 16, 16);
		} else {
			stack_slot(a, v, 8, 8, 8);
		}
		return;
	case K_LDOUBLE:
		stack_slot(a, v, 16, 16, 16);
		return;
	case K_STRUCT:
		n8 = (t->size + 7) / 8;
		if (t->cls[0] == C_MEM || n8 > 2) {
			stack_slot(a, v, t->size, 8, 0);
			return;
		}
		for (int k = 0; k < n8; k++) {
			if (t->cls[k] == C_SSE)
				nsse++;
			else
				nint++;
		}
		if (a->gi + nint <= 6 && a->si + nsse <= 8) {
			a->gi += nint;
			a->si += nsse;
			v->have = true;
		} else {
			stack_slot(a, v, t->size, 8, 0);
		}
		return;
	default:
		if (a->gi < 6) {
			x = gpr(a->regs, a->gi++);
			memcpy(v->b, &x, sizeof(x));
			v->have = true;
		} else {
			stack_slot(a, v, 8, 8, 8);
		}
		return;
	}
}

static bool ret_in_memory(const struct ptype *t)
{
	return t->kind == K_STRUCT && (t->cls[0] == C_MEM || t->size > 16);
}

static void fetch_ret(const struct ptype *t, const struct user_regs_struct *regs,
		      const struct user_fpregs_struct *fp, struct val *v)
{
	uint64_t x = regs->rax;

	memset(v, 0, sizeof(*v));
	switch (t->kind) {
	case K_VOID:
	case K_STRUCT:
		v->have = true;
		break;
	case K_FLOAT:
	case K_DOUBLE:
	case K_OTHER_SSE:
		if (fp) {
			memcpy(v->b, &fp->xmm_space[0], 16);
			v->have = true;
		}
		break;
	case K_LDOUBLE:
		if (fp) {
			memcpy(v->b, &fp->st_space[0], 10);
			v->have = true;
		}
		break;
	default:
		memcpy(v->b, &x, sizeof(x));
		v->have = true;
		break;
	}
}

int tp_proto_format_args(const struct tp_proto *p, pid_t pid, const struct user_regs_struct *regs,
			 const struct user_fpregs_struct *fp, char *buf, size_t len)
{
	struct out o = {.buf = buf, .len = len};
	struct argpos a = {.pid = pid, .regs = regs, .fp = fp, .sp = regs->rsp + 8};
	struct val vals[MAX_PARAMS];

	if (!buf || !len)
		return -EINVAL;
	buf[0] = 0;
	if (!p) {
		static const char *const names[] = {"rdi", "rsi", "rdx", "rcx", "r8", "r9"};

		for (int i = 0; i < 6; i++)
			put(&o, "%s%s=0x%llx", i ? ", " : "", names[i],
			    (unsigned long long)gpr(regs, i));
		return o.pos;
	}
	/* A struct returned in memory: its address is a hidden first argument. */
	if (ret_in_memory(&p->ret))
		a.gi = 1;
	/* All values first: a buffer's length is the argument after it. */
	for (int i = 0; i < p->nparams; i++)
		fetch_arg(&a, &p->params[i], &vals[i]);
	for (int i = 0; i < p->nparams; i++) {
		if (i)
			put(&o, ", ");
		put_value(&o, pid, &p->params[i], &vals[i],
			  i + 1 < p->nparams ? &vals[i + 1] : NULL);
	}
	if (p->variadic)
		put(&o, "%s...", p->nparams ? ", " : "");
	return o.pos;
}

/* The failure and, for functions that return their error number, that number. */
static bool failed(const struct tp_proto *p, const struct user_regs_struct *regs, int *err)
{
	uint64_t x = regs->rax;

	*err = -1;
	switch (p->fail) {
	case 'm':
		return p->ret.size == 4 ? (int32_t)x == -1 : (int64_t)x == -1;
	case 'n':
		return !x;
	case 'M':
		return x == UINT64_MAX;
	case 'e':
		*err = (int32_t)x;
		return *err != 0;
	default:
		return false;
	}
}

bool tp_proto_failed(const struct tp_proto *p, const struct user_regs_struct *regs)
{
	int err;

	return p && failed(p, regs, &err);
}

bool tp_proto_needs_fp(const struct tp_proto *p)
{
	return p && p->needs_fp;
}

int tp_proto_format_ret(const struct tp_proto *p, pid_t pid, const struct user_regs_struct *regs,
			const struct user_fpregs_struct *fp, int errno_val, char *buf, size_t len,
			bool *failedp)
{
	struct out o = {.buf = buf, .len = len};
	struct val v;
	bool f = false;
	int err;

	if (!buf || !len)
		return -EINVAL;
	buf[0] = 0;
	if (!p) {
		put(&o, "0x%llx", (unsigned long long)regs->rax);
		goto out;
	}
	fetch_ret(&p->ret, regs, fp, &v);
	f = failed(p, regs, &err);
	/* MAP_FAILED and SIG_ERR read as strace shows them; a void value is shown as the word,
	 * the memory of a struct is not read. */
	if (f && p->fail == 'M')
		put(&o, "-1");
	else
		put_value(&o, pid, &p->ret, &v, NULL);
	/* pthread_* return their error; a negative value is none (and errno is not theirs). */
	if (f && err < 0 && p->fail != 'e')
		err = errno_val;
	if (f && err >= 0) {
		const char *name = strerrorname_np(err);

		if (name)
			put(&o, " %s (%s)", name, strerror(err));
		else
			put(&o, " %d (%s)", err, strerror(err));
	}
out:
	if (failedp)
		*failedp = f;
	return o.pos;
}

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

static size_t hash(const struct dwobj *o, uint64_t vaddr, size_t n)
{
	uint64_t h = ((uintptr_t)o ^ vaddr) * 0x9e3779b97f4a7c15ULL;

	return (h >> 32) & (n - 1);
}

static int grow(struct tp_protos *ps)
{
	size_t n = ps->nbuckets ? 2 * ps->nbuckets : 256;
	struct entry **b = calloc(n, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < ps->nbuckets; i++) {
		for (struct entry *e = ps->buckets[i], *next; e; e = next) {
			size_t h = hash(e->obj, e->vaddr, n);

			next = e->next;
			e->next = b[h];
			b[h] = e;
		}
	}
	free(ps->buckets);
	ps->buckets = b;
	ps->nbuckets = n;
	return 0;
}

struct tp_protos *tp_protos_new(void)
{
	struct tp_protos *ps = calloc(1, sizeof(*ps));

	if (!ps)
		return NULL;
	if (grow(ps)) {
		free(ps);
		return NULL;
	}
	return ps;
}

void tp_protos_free(struct tp_protos *ps)
{
	if (!ps)
		return;
	for (size_t i = 0; i < ps->nbuckets; i++) {
		for (struct entry *e = ps->buckets[i], *next; e; e = next) {
			next = e->next;
			proto_free(e->proto);
			free(e);
		}
	}
	free(ps->buckets);
	for (struct dwobj *o = ps->objs, *next; o; o = next) {
		next = o->next;
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
	struct entry *e;
	size_t h;

	if (!o)
		return NULL;
	h = hash(o, vaddr, ps->nbuckets);
	for (e = ps->buckets[h]; e; e = e->next)
		if (e->obj == o && e->vaddr == vaddr)
			return e->proto;
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->obj = o;
	e->vaddr = vaddr;
	e->proto = build(o, name, vaddr);
	e->next = ps->buckets[h];
	ps->buckets[h] = e;
	if (++ps->nentries > ps->nbuckets)
		grow(ps);
	return e->proto;
}

/* ---- errno ---- */

/* A static program that never calls __errno_location has none linked: its errno is a TLS
 * symbol of the program. */
static int static_errno(const char *path, int64_t *tpoff)
{
	static const char *const names[] = {"errno", "__libc_errno"};

	return tp_elf_static_tls_offset(path, names, 2, tpoff);
}

int tp_errno_tpoff(pid_t pid, const char *libc_path, uint64_t libc_bias, int64_t *tpoff)
{
	uint64_t vaddr, size, off = 0, val = 0;
	bool have_val = false, have_fs = false;
	uint8_t code[64];
	ssize_t len;
	int err;

	err = tp_elf_lookup(libc_path, "__errno_location", &vaddr, &size);
	if (err == -ENOENT)
		return static_errno(libc_path, tpoff);
	if (err)
		return err;
	/* From the file: a breakpoint may sit on the function in memory. */
	len = tp_elf_read_loaded(libc_path, vaddr, code,
				 size && size < sizeof(code) ? size : sizeof(code));
	if (len < 0)
		return len;
	/* glibc: mov rax,[rip+GOT] (TPOFF64 relocated by ld.so) or mov rax,imm (static);
	 * add rax,fs:[0]; ret. */
	for (int i = 0; i < 8 && off < (uint64_t)len; i++) {
		char text[128], *src;
		struct tp_insn insn;
		const char *mn;

		if (tp_arch_decode(code + off, len - off, vaddr + off, &insn) ||
		    tp_arch_format(code + off, len - off, vaddr + off, text, sizeof(text)))
			return -ENOTSUP;
		if (insn.kind != TP_INSN_OTHER)
			break;
		for (char *c = text; *c; c++)
			*c = tolower((unsigned char)*c);
		mn = tp_arch_mnemonic_name(insn.mnemonic);
		src = strchr(text, ',');
		if (strstr(text, "fs:")) {
			have_fs = true;
		} else if ((!strcmp(mn, "mov") || !strcmp(mn, "add")) &&
			   (insn.flags & TP_INSN_F_RIPREL)) {
			if (tp_proc_read(pid, libc_bias + insn.target, &val, sizeof(val)) !=
			    sizeof(val))
				return -EFAULT;
			have_val = true;
		} else if (!strcmp(mn, "mov") && src && !strchr(src, '[')) {
			char *end;

			errno = 0;
			val = strtoull(src + 1, &end, 0);
			have_val = !errno && end != src + 1;
		}
		off += insn.len;
	}
	if (!have_val || !have_fs)
		return -ENOTSUP;
	*tpoff = (int64_t)val;
	return 0;
}
