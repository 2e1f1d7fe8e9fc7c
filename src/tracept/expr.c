/* The compiler of tracepoint expressions: a C-like language over registers ($rax, $sp,
 * $pc, $arg1..$arg6), memory (*ADDR, *(type *)X), DWARF variables, members, elements and
 * integer arithmetic, compiled by recursive descent straight into the bytecode of expr.h,
 * with every name, type and location resolved here, once. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracept/tracept-priv.h"

/* What a compiled (sub)expression left on the stack. */
struct val {
	bool lval;    /* its address (in memory) rather than its value */
	bool untyped; /* *INTEGER: memory of no declared type (read as a long) */
	struct tp_ty ty;
};

struct cc {
	struct tp_scope *sc;
	const char *s, *p; /* text, position */
	int col0;
	struct tp_code *out;
	struct tp_expr_error *err;
	bool failed;
	int depth; /* of unary(): nesting is bounded, the stack of the tracer too */
};

static int fail(struct cc *c, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct cc *c, const char *at, const char *fmt, ...)
{
	va_list ap;

	if (c->failed)
		return -EINVAL;
	c->failed = true;
	c->err->col = c->col0 + (int)(at - c->s) + 1;
	va_start(ap, fmt);
	vsnprintf(c->err->msg, sizeof(c->err->msg), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static void emit(struct cc *c, const void *b, size_t n)
{
	if (c->out->len + n > sizeof(c->out->code)) {
		fail(c, c->p, "expression too long");
		return;
	}
	memcpy(c->out->code + c->out->len, b, n);
	c->out->len += n;
}

static void op(struct cc *c, uint8_t o)
{
	emit(c, &o, 1);
}

static void op1(struct cc *c, uint8_t o, uint8_t imm)
{
	op(c, o);
	emit(c, &imm, 1);
}

static void konst(struct cc *c, uint64_t v)
{
	op(c, TP_OP_CONST);
	emit(c, &v, 8);
}

static void skip(struct cc *c)
{
	while (*c->p == ' ' || *c->p == '\t')
		c->p++;
}

static bool eat(struct cc *c, const char *tok)
{
	size_t n = strlen(tok);

	skip(c);
	if (strncmp(c->p, tok, n))
		return false;
	/* "<" is not the start of "<<" or "<=", "&" not of "&&", "|" not of "||". */
	if (n == 1 && strchr("<>&|=!", tok[0]) && c->p[1] &&
	    (c->p[1] == '=' || (c->p[1] == tok[0] && tok[0] != '=' && tok[0] != '!')))
		return false;
	if (n == 1 && tok[0] == '-' && c->p[1] == '>')
		return false;
	c->p += n;
	return true;
}

static bool is_id(char ch, bool first)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
	       (!first && ch >= '0' && ch <= '9');
}

static size_t ident(const char *p)
{
	size_t n = 0;

	if (!is_id(p[0], true))
		return 0;
	while (is_id(p[n], false))
		n++;
	return n;
}

static void int_ty(struct tp_ty *t, unsigned size, bool sgn)
{
	memset(t, 0, sizeof(*t));
	t->kind = TY_INT;
	t->size = size;
	t->is_signed = sgn;
}

static bool scalar(const struct tp_ty *t)
{
	return (t->kind == TY_INT || t->kind == TY_PTR) &&
	       (t->size == 1 || t->size == 2 || t->size == 4 || t->size == 8);
}

/* Turn what is on the stack into a value: load an lvalue, decay an array. */
static int rvalue(struct cc *c, struct val *v, const char *at)
{
	if (!v->lval)
		return 0;
	if (v->ty.kind == TY_ARRAY) {
		struct tp_ty e;

		tp_scope_elem(&v->ty, &e);
		v->ty.kind = TY_PTR;
		v->ty.size = 8;
		v->lval = false;
		return 0;
	}
	if (!scalar(&v->ty))
		return fail(c, at, "a %s is not a number",
			    v->ty.kind == TY_STRUCT ? "struct" : "value of this type");
	op1(c, TP_OP_LOAD, (uint8_t)(v->ty.size | (v->ty.is_signed ? TP_EXPR_SIGNED : 0)));
	v->lval = false;
	return 0;
}

static int expr(struct cc *c, struct val *v, int minprec);

/* (TYPE): a builtin integer type with pointers. */
static bool cast_type(struct cc *c, struct tp_ty *t)
{
	static const struct {
		const char *name;
		uint8_t size;
		bool sgn;
	} names[] = {
	    {"unsigned long long", 8, false},
	    {"long long", 8, true},
	    {"unsigned long", 8, false},
	    {"unsigned int", 4, false},
	    {"unsigned short", 2, false},
	    {"unsigned char", 1, false},
	    {"signed char", 1, true},
	    {"unsigned", 4, false},
	    {"long", 8, true},
	    {"int", 4, true},
	    {"short", 2, true},
	    {"char", 1, true},
	    {"void", 0, false},
	    {"int8_t", 1, true},
	    {"int16_t", 2, true},
	    {"int32_t", 4, true},
	    {"int64_t", 8, true},
	    {"uint8_t", 1, false},
	    {"uint16_t", 2, false},
	    {"uint32_t", 4, false},
	    {"uint64_t", 8, false},
	    {"size_t", 8, false},
	    {"ssize_t", 8, true},
	    {"uintptr_t", 8, false},
	    {"intptr_t", 8, true},
	};
	const char *save = c->p;
	unsigned depth = 0;

	skip(c);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		size_t n = strlen(names[i].name);

		if (strncmp(c->p, names[i].name, n) || is_id(c->p[n], false))
			continue;
		c->p += n;
		while (eat(c, "*"))
			depth++;
		if (!eat(c, ")") || (!names[i].size && !depth))
			break;
		memset(t, 0, sizeof(*t));
		if (depth) {
			t->kind = TY_PTR;
			t->size = 8;
			t->bdepth = (uint8_t)(depth - 1);
			t->bsize = names[i].size;
			t->bsigned = names[i].sgn;
		} else {
			int_ty(t, names[i].size, names[i].sgn);
		}
		return true;
	}
	c->p = save;
	return false;
}

static const struct {
	const char *name;
	uint8_t idx;
} regnames[] = {
    {"rax", TP_UREG_RAX},	  {"rbx", TP_UREG_RBX},		{"rcx", TP_UREG_RCX},
    {"rdx", TP_UREG_RDX},	  {"rsi", TP_UREG_RSI},		{"rdi", TP_UREG_RDI},
    {"rbp", TP_UREG_RBP},	  {"rsp", TP_UREG_RSP},		{"r8", TP_UREG_R8},
    {"r9", TP_UREG_R9},		  {"r10", TP_UREG_R10},		{"r11", TP_UREG_R11},
    {"r12", TP_UREG_R12},	  {"r13", TP_UREG_R13},		{"r14", TP_UREG_R14},
    {"r15", TP_UREG_R15},	  {"rip", TP_UREG_RIP},		{"eflags", TP_UREG_EFLAGS},
    {"fs_base", TP_UREG_FS_BASE}, {"gs_base", TP_UREG_GS_BASE}, {"sp", TP_UREG_RSP},
    {"pc", TP_UREG_RIP},	  {"fp", TP_UREG_RBP},		{"arg1", TP_UREG_RDI},
    {"arg2", TP_UREG_RSI},	  {"arg3", TP_UREG_RDX},	{"arg4", TP_UREG_RCX},
    {"arg5", TP_UREG_R8},	  {"arg6", TP_UREG_R9},
};

int tp_expr_reg_index(const char *name, size_t n)
{
	for (size_t i = 0; i < sizeof(regnames) / sizeof(regnames[0]); i++)
		if (strlen(regnames[i].name) == n && !strncmp(regnames[i].name, name, n))
			return regnames[i].idx;
	return -1;
}

static int primary(struct cc *c, struct val *v)
{
	const char *at;
	size_t n;

	skip(c);
	at = c->p;
	memset(v, 0, sizeof(*v));
	if (*c->p >= '0' && *c->p <= '9') {
		char *end;
		unsigned long long x;

		errno = 0;
		x = strtoull(c->p, &end, 0);
		if (errno || is_id(*end, false))
			return fail(c, at, "bad number");
		c->p = end;
		konst(c, x);
		int_ty(&v->ty, x > 0x7fffffff ? 8 : 4, x <= 0x7fffffffffffffffull);
		return 0;
	}
	if (*c->p == '\'' && c->p[1] && c->p[1] != '\\' && c->p[2] == '\'') {
		konst(c, (uint8_t)c->p[1]);
		c->p += 3;
		int_ty(&v->ty, 4, true);
		return 0;
	}
	if (*c->p == '$') {
		int idx;

		n = ident(c->p + 1);
		idx = n ? tp_expr_reg_index(c->p + 1, n) : -1;
		if (idx < 0)
			return fail(c, at, "unknown register '%.*s'", (int)(n + 1), c->p);
		c->p += n + 1;
		op1(c, TP_OP_REG, (uint8_t)idx);
		int_ty(&v->ty, 8, false);
		return 0;
	}
	if ((n = ident(c->p))) {
		char name[128];
		struct tp_var var;
		int r;

		if (n >= sizeof(name))
			return fail(c, at, "name too long");
		memcpy(name, c->p, n);
		name[n] = 0;
		r = c->sc ? tp_scope_var(c->sc, name, &var) : -ENOENT;
		if (r == -ENOENT)
			return fail(c, at, "no variable '%s' here%s", name,
				    c->sc && tp_scope_has_dwarf(c->sc) ? ""
								       : " (no debug information)");
		if (r)
			return fail(c, at, "'%s': a location tracepad cannot read", name);
		if (var.kind == VAR_NONE)
			return fail(c, at, "'%s' is optimized out at this pc", name);
		emit(c, var.code, var.len);
		c->p += n;
		v->ty = var.ty;
		v->lval = var.kind == VAR_MEM;
		if (!v->lval && !scalar(&v->ty))
			return fail(c, at, "'%s': a value of this type in a register", name);
		return 0;
	}
	if (eat(c, "(")) {
		if (expr(c, v, 0))
			return -EINVAL;
		if (!eat(c, ")"))
			return fail(c, c->p, "expected ')'");
		return 0;
	}
	return fail(c, at, "expected an operand");
}

static int postfix(struct cc *c, struct val *v)
{
	if (primary(c, v))
		return -EINVAL;
	for (;;) {
		const char *at;
		bool arrow;

		skip(c);
		at = c->p;
		if (eat(c, "[")) {
			struct val i;
			struct tp_ty e;

			if (v->ty.kind == TY_ARRAY && v->lval) {
				/* the array's address is on the stack */
			} else if (rvalue(c, v, at) || v->ty.kind != TY_PTR) {
				return fail(c, at,
					    "subscript of something not an array or pointer");
			}
			tp_scope_elem(&v->ty, &e);
			if (e.kind == TY_VOID || !e.size)
				return fail(c, at, "subscript of a pointer to void");
			if (expr(c, &i, 0) || rvalue(c, &i, at))
				return -EINVAL;
			if (!eat(c, "]"))
				return fail(c, c->p, "expected ']'");
			konst(c, e.size);
			op(c, TP_OP_MUL);
			op(c, TP_OP_ADD);
			v->ty = e;
			v->lval = true;
			continue;
		}
		if ((arrow = eat(c, "->")) || eat(c, ".")) {
			const char *nm;
			char name[128];
			uint64_t off;
			struct tp_ty mt, st = v->ty;
			size_t n;

			if (arrow) {
				if (rvalue(c, v, at) || v->ty.kind != TY_PTR ||
				    tp_scope_elem(&v->ty, &st))
					return fail(c, at, "'->' on something not a pointer");
			} else if (!v->lval) {
				return fail(c, at, "'.' on something not in memory");
			}
			if (st.kind != TY_STRUCT)
				return fail(c, at, "'%s' on something not a struct",
					    arrow ? "->" : ".");
			skip(c);
			nm = c->p;
			n = ident(nm);
			if (!n || n >= sizeof(name))
				return fail(c, nm, "expected a member name");
			memcpy(name, nm, n);
			name[n] = 0;
			if (tp_scope_member(c->sc, &st, name, &off, &mt))
				return fail(c, nm, "no member '%s' (or a bit-field)", name);
			c->p += n;
			konst(c, off);
			op(c, TP_OP_ADD);
			v->ty = mt;
			v->lval = true;
			continue;
		}
		return 0;
	}
}

static int unary_(struct cc *c, struct val *v);

static int unary(struct cc *c, struct val *v)
{
	int r;

	if (c->depth >= 64)
		return fail(c, c->p, "expression nested too deeply");
	c->depth++;
	r = unary_(c, v);
	c->depth--;
	return r;
}

static int unary_(struct cc *c, struct val *v)
{
	const char *at;
	struct tp_ty t;

	skip(c);
	at = c->p;
	if (eat(c, "-") || eat(c, "~") || eat(c, "!")) {
		char o = *at;

		if (unary(c, v) || rvalue(c, v, at))
			return -EINVAL;
		if (v->ty.kind != TY_INT && o != '!')
			return fail(c, at, "'%c' of something not an integer", o);
		op(c, o == '-' ? TP_OP_NEG : o == '~' ? TP_OP_NOT : TP_OP_LNOT);
		if (o == '!')
			int_ty(&v->ty, 4, true);
		return 0;
	}
	if (eat(c, "+"))
		return unary(c, v) || rvalue(c, v, at);
	if (eat(c, "*")) {
		if (unary(c, v) || rvalue(c, v, at))
			return -EINVAL;
		if (v->ty.kind == TY_INT) {
			int_ty(&v->ty, 8, true);
			v->untyped = true;
		} else if (tp_scope_elem(&v->ty, &t) || t.kind == TY_VOID) {
			return fail(c, at, "'*' of a pointer to void");
		} else {
			v->ty = t;
		}
		v->lval = true;
		return 0;
	}
	if (eat(c, "&")) {
		if (unary(c, v))
			return -EINVAL;
		if (!v->lval)
			return fail(c, at, "'&' of something not in memory");
		t = v->ty;
		memset(&v->ty, 0, sizeof(v->ty));
		v->ty.kind = TY_PTR;
		v->ty.size = 8;
		if (t.kind == TY_STRUCT || t.has_die || t.kind == TY_ARRAY) {
			/* pointer to the struct: keep its die as the pointee */
			v->ty.has_die = t.kind == TY_STRUCT;
			v->ty.die = t.die;
		}
		if (t.kind == TY_INT) {
			v->ty.bsize = (uint8_t)t.size;
			v->ty.bsigned = t.is_signed;
		}
		v->lval = false;
		return 0;
	}
	if (*c->p == '(') {
		const char *save = c->p;

		c->p++;
		if (cast_type(c, &t)) {
			if (unary(c, v) || rvalue(c, v, at))
				return -EINVAL;
			if (t.kind == TY_INT && t.size < 8)
				op1(c, TP_OP_EXT,
				    (uint8_t)(t.size | (t.is_signed ? TP_EXPR_SIGNED : 0)));
			v->ty = t;
			return 0;
		}
		c->p = save;
	}
	return postfix(c, v);
}

static const struct {
	const char *tok;
	int prec;
} binops[] = {
    {"||", 1}, {"&&", 2}, {"|", 3}, {"^", 4}, {"&", 5}, {"==", 6}, {"!=", 6}, {"<=", 7}, {">=", 7},
    {"<<", 8}, {">>", 8}, {"<", 7}, {">", 7}, {"+", 9}, {"-", 9},  {"*", 10}, {"/", 10}, {"%", 10},
};

static void patch_jump(struct cc *c, size_t at)
{
	uint16_t off = (uint16_t)(c->out->len - at - 2);

	if (!c->failed)
		memcpy(c->out->code + at, &off, 2);
}

static int expr(struct cc *c, struct val *v, int minprec)
{
	if (unary(c, v))
		return -EINVAL;
	for (;;) {
		const char *at;
		int prec = 0;
		const char *tok = NULL;
		struct val r;
		bool sgn, ptr;
		uint64_t esize = 1;

		skip(c);
		at = c->p;
		for (size_t i = 0; i < sizeof(binops) / sizeof(binops[0]); i++) {
			size_t n = strlen(binops[i].tok);

			if (strncmp(c->p, binops[i].tok, n))
				continue;
			if (n == 1 && (c->p[1] == '=' || c->p[1] == c->p[0] ||
				       (c->p[0] == '-' && c->p[1] == '>')))
				continue;
			tok = binops[i].tok;
			prec = binops[i].prec;
			break;
		}
		if (!tok || prec <= minprec)
			return 0;
		if (rvalue(c, v, at))
			return -EINVAL;
		c->p += strlen(tok);
		if (prec <= 2) { /* && and ||: the right side only when it decides */
			size_t j;

			op(c, prec == 2 ? TP_OP_JZ : TP_OP_JNZ);
			j = c->out->len;
			emit(c, "\0", 2);
			if (expr(c, &r, prec) || rvalue(c, &r, at))
				return -EINVAL;
			op(c, TP_OP_LNOT);
			op(c, TP_OP_LNOT);
			op(c, TP_OP_JMP);
			emit(c, "\x09\0", 2);
			patch_jump(c, j);
			konst(c, prec == 2 ? 0 : 1);
			int_ty(&v->ty, 4, true);
			continue;
		}
		if (expr(c, &r, prec) || rvalue(c, &r, at))
			return -EINVAL;
		if (v->ty.kind == TY_OTHER || r.ty.kind == TY_OTHER || v->ty.kind == TY_STRUCT ||
		    r.ty.kind == TY_STRUCT)
			return fail(c, at, "'%s' of something not an integer", tok);
		ptr = v->ty.kind == TY_PTR;
		if (ptr && (tok[0] == '+' || tok[0] == '-') && r.ty.kind == TY_INT) {
			struct tp_ty e;

			tp_scope_elem(&v->ty, &e);
			esize = e.size ? e.size : 1;
			if (esize != 1) {
				konst(c, esize);
				op(c, TP_OP_MUL);
			}
			op(c, tok[0] == '+' ? TP_OP_ADD : TP_OP_SUB);
			continue;
		}
		/* The usual arithmetic conversions, on int, long and their unsigned forms. */
		{
			uint64_t sz = v->ty.size > r.ty.size ? v->ty.size : r.ty.size;

			if (sz < 4)
				sz = 4;
			sgn = !((v->ty.size == sz && !v->ty.is_signed && v->ty.size >= 4) ||
				(r.ty.size == sz && !r.ty.is_signed && r.ty.size >= 4)) &&
			      !ptr && r.ty.kind != TY_PTR;
			if (!strcmp(tok, "<<") || !strcmp(tok, ">>")) {
				sz = v->ty.size < 4 ? 4 : v->ty.size;
				sgn = v->ty.is_signed || v->ty.size < 4;
			}
			switch (tok[0]) {
			case '+':
				op(c, TP_OP_ADD);
				break;
			case '-':
				op(c, TP_OP_SUB);
				break;
			case '*':
				op(c, TP_OP_MUL);
				break;
			case '/':
				op(c, sgn ? TP_OP_DIVS : TP_OP_DIVU);
				break;
			case '%':
				op(c, sgn ? TP_OP_MODS : TP_OP_MODU);
				break;
			case '&':
				op(c, TP_OP_AND);
				break;
			case '|':
				op(c, TP_OP_OR);
				break;
			case '^':
				op(c, TP_OP_XOR);
				break;
			case '=':
				op(c, TP_OP_EQ);
				break;
			case '!':
				op(c, TP_OP_NE);
				break;
			case '<':
				if (tok[1] == '<')
					op(c, TP_OP_SHL);
				else
					op(c, tok[1] == '=' ? (sgn ? TP_OP_LES : TP_OP_LEU)
							    : (sgn ? TP_OP_LTS : TP_OP_LTU));
				break;
			case '>':
				if (tok[1] == '>') {
					op(c, sgn ? TP_OP_SHRS : TP_OP_SHRU);
					break;
				}
				/* a > b is b < a: swap through the stack is not possible, so
				 * negate a <= b */
				op(c, tok[1] == '=' ? (sgn ? TP_OP_LTS : TP_OP_LTU)
						    : (sgn ? TP_OP_LES : TP_OP_LEU));
				op(c, TP_OP_LNOT);
				break;
			}
			if (prec == 6 || prec == 7) {
				int_ty(&v->ty, 4, true);
			} else {
				int_ty(&v->ty, (unsigned)sz, sgn);
				if (sz < 8)
					op1(c, TP_OP_EXT,
					    (uint8_t)(sz | (sgn ? TP_EXPR_SIGNED : 0)));
			}
		}
	}
}

static void start(struct cc *c, struct tp_scope *sc, const char *text, int col0,
		  struct tp_code *out, struct tp_expr_error *err)
{
	memset(c, 0, sizeof(*c));
	c->sc = sc;
	c->s = c->p = text;
	c->col0 = col0;
	c->out = out;
	c->err = err;
	out->len = 0;
	memset(err, 0, sizeof(*err));
}

int tp_expr_compile_cond(struct tp_scope *sc, const char *text, int col0, struct tp_code *out,
			 struct tp_expr_error *err)
{
	struct cc c;
	struct val v;

	start(&c, sc, text, col0, out, err);
	if (expr(&c, &v, 0) || rvalue(&c, &v, c.p))
		return -EINVAL;
	skip(&c);
	if (*c.p)
		return fail(&c, c.p, "unexpected '%c'", *c.p);
	op(&c, TP_OP_END);
	return c.failed ? -EINVAL : 0;
}

/* ---- one collected value ---- */

int tp_expr_compile_value(struct tp_scope *sc, const char *buf, int col0, struct tp_item *i,
			  struct tp_expr_error *err)
{
	const char *at;
	struct cc c;
	struct val v;
	uint64_t count = 0;

	start(&c, sc, buf, col0, &i->c, err);
	if (expr(&c, &v, 0))
		return -EINVAL;
	skip(&c);
	at = c.p;
	if (eat(&c, "@")) {
		char *end;

		skip(&c);
		count = strtoull(c.p, &end, 0);
		if (end == c.p || !count) {
			fail(&c, c.p, "expected a length after '@'");
			return -EINVAL;
		}
		c.p = end;
		if (!v.lval) {
			fail(&c, at, "'@' after something not in memory");
			return -EINVAL;
		}
	}
	skip(&c);
	if (*c.p) {
		fail(&c, c.p, "unexpected '%c'", *c.p);
		return -EINVAL;
	}
	if (count || (v.lval && !scalar(&v.ty))) {
		uint64_t sz = count ? count * (v.untyped ? 1 : v.ty.size) : v.ty.size;

		if (!sz || sz > TP_MAX_MEM) {
			fail(&c, buf, "a memory range of %llu bytes (1 to %u)",
			     (unsigned long long)sz, TP_MAX_MEM);
			return -EINVAL;
		}
		i->mem = true;
		i->size = (uint32_t)sz;
	} else if (v.lval) {
		/* A scalar in memory: its address, read with the item's other ranges. */
		i->mem = i->scalar = true;
		i->size = (uint32_t)v.ty.size;
		i->is_signed = v.ty.is_signed;
		i->hex = v.ty.kind == TY_PTR;
	} else {
		if (rvalue(&c, &v, buf))
			return -EINVAL;
		if (!scalar(&v.ty)) {
			fail(&c, buf, "a value of this type cannot be collected");
			return -EINVAL;
		}
		i->size = (uint32_t)v.ty.size;
		i->is_signed = v.ty.is_signed;
		/* Pointers and bare registers in hex. */
		i->hex =
		    v.ty.kind == TY_PTR || (buf[0] == '$' && ident(buf + 1) == strlen(buf + 1));
	}
	op(&c, TP_OP_END);
	return c.failed ? -EINVAL : 0;
}
