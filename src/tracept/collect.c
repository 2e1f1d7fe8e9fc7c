/* Collect lists of tracepoints: "EXPR, $regs, $args, $locals, *ADDR@LEN, ..." split into
 * items, each a named field of the frames, compiled by expr.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracept/tracept-priv.h"

static bool is_id(char ch, bool first)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
	       (!first && ch >= '0' && ch <= '9');
}

/* ---- collect lists ---- */

static struct tp_item *item_new(struct tp_items *it)
{
	struct tp_item *v = realloc(it->v, (it->n + 1) * sizeof(*v));

	if (!v)
		return NULL;
	it->v = v;
	memset(&v[it->n], 0, sizeof(v[0]));
	return &v[it->n++];
}

/* A field name from the text: "p->x[2]" gives "p_x_2". */
static void field_name(const char *text, size_t n, char *out, size_t cap)
{
	size_t k = 0;

	for (size_t i = 0; i < n && k + 1 < cap; i++) {
		char ch = text[i];

		if (is_id(ch, false))
			out[k++] = ch;
		else if (k && out[k - 1] != '_' && ch != ' ')
			out[k++] = '_';
	}
	while (k && out[k - 1] == '_')
		k--;
	out[k] = 0;
	if (!k || !is_id(out[0], true)) {
		memmove(out + 1, out, k + 1 < cap - 1 ? k + 1 : cap - 2);
		out[0] = 'v';
		out[cap - 1] = 0;
	}
}

static int add_reg(struct tp_items *it, const char *name, int idx)
{
	struct tp_item *i = item_new(it);

	if (!i)
		return -ENOMEM;
	snprintf(i->name, sizeof(i->name), "%s", name);
	snprintf(i->text, sizeof(i->text), "$%s", name);
	i->size = 8;
	i->hex = true;
	i->c.code[0] = TP_OP_REG;
	i->c.code[1] = (uint8_t)idx;
	i->c.code[2] = TP_OP_END;
	i->c.len = 3;
	return 0;
}

static bool has_load(const struct tp_code *c)
{
	/* A walk of the ops: an immediate may hold the LOAD byte. */
	for (size_t i = 0; i < c->len;) {
		uint8_t o = c->code[i++];

		if (o == TP_OP_LOAD)
			return true;
		i += o == TP_OP_CONST					   ? 8
		     : (o == TP_OP_REG || o == TP_OP_EXT)		   ? 1
		     : (o == TP_OP_JZ || o == TP_OP_JNZ || o == TP_OP_JMP) ? 2
									   : 0;
	}
	return false;
}

/* One item from @text[0..@n) at column @col0. */
static int one_item(struct tp_scope *sc, const char *text, size_t n, int col0, struct tp_items *it,
		    struct tp_expr_error *err);

struct names_ctx {
	struct tp_scope *sc;
	struct tp_items *it;
	struct tp_expr_error *err;
	int col0;
};

static int add_named(void *arg, const char *name)
{
	struct names_ctx *x = arg;
	struct tp_var var;
	int before = x->it->n;

	/* Parameters and locals optimized out here, or in places tracepad cannot read, are
	 * left out of $args and $locals rather than failing the list. */
	if (tp_scope_var(x->sc, name, &var) || var.kind == VAR_NONE)
		return 0;
	if (one_item(x->sc, name, strlen(name), x->col0, x->it, x->err)) {
		if (x->it->n > before)
			x->it->n = before;
		memset(x->err, 0, sizeof(*x->err));
	}
	return 0;
}

static int one_item(struct tp_scope *sc, const char *text, size_t n, int col0, struct tp_items *it,
		    struct tp_expr_error *err)
{
	char buf[256];
	struct tp_item *i;

	while (n && (*text == ' ' || *text == '\t'))
		text++, n--, col0++;
	while (n && (text[n - 1] == ' ' || text[n - 1] == '\t'))
		n--;
	if (n >= sizeof(buf)) {
		err->col = col0 + 1;
		snprintf(err->msg, sizeof(err->msg), "expression too long");
		return -EINVAL;
	}
	memcpy(buf, text, n);
	buf[n] = 0;
	if (!strcmp(buf, "$regs")) {
		static const char *const names[] = {"rip", "rsp", "rbp", "rax", "rbx", "rcx",
						    "rdx", "rsi", "rdi", "r8",	"r9",  "r10",
						    "r11", "r12", "r13", "r14", "r15", "eflags"};

		for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
			if (add_reg(it, names[k], tp_expr_reg_index(names[k], strlen(names[k]))))
				return -ENOMEM;
		return 0;
	}
	if (!strcmp(buf, "$args") || !strcmp(buf, "$locals")) {
		struct names_ctx x = {sc, it, err, col0};

		if (!tp_scope_has_dwarf(sc)) {
			err->col = col0 + 1;
			snprintf(err->msg, sizeof(err->msg), "%.60s: no debug information here",
				 buf);
			return -EINVAL;
		}
		return tp_scope_foreach(sc, buf[1] == 'a', add_named, &x);
	}
	i = item_new(it);
	if (!i)
		return -ENOMEM;
	if (tp_expr_compile_value(sc, buf, col0, i, err))
		goto bad;
	field_name(buf, n, i->name, sizeof(i->name));
	snprintf(i->text, sizeof(i->text), "%.127s", buf);
	i->fixed = i->mem && !has_load(&i->c);
	return 0;
bad:
	it->n--;
	return -EINVAL;
}

int tp_expr_compile_collect(struct tp_scope *sc, const char *text, int col0, struct tp_items *items,
			    struct tp_expr_error *err)
{
	const char *p = text;

	memset(err, 0, sizeof(*err));
	for (;;) {
		const char *e = p;
		int depth = 0, r;

		while (*e && (depth || *e != ',')) {
			depth += *e == '(' || *e == '[';
			depth -= (*e == ')' || *e == ']') && depth;
			e++;
		}
		if (e == p || strspn(p, " \t") == (size_t)(e - p)) {
			err->col = col0 + (int)(p + strspn(p, " \t") - text) + 1;
			snprintf(err->msg, sizeof(err->msg), "expected an expression to collect");
			return -EINVAL;
		}
		r = one_item(sc, p, (size_t)(e - p), col0 + (int)(p - text), items, err);
		if (r)
			return r;
		if (!*e)
			break;
		p = e + 1;
	}
	if (items->n > TP_MAX_ITEMS) {
		err->col = 0;
		snprintf(err->msg, sizeof(err->msg), "%d values collected: at most %d a tracepoint",
			 items->n, TP_MAX_ITEMS);
		return -EINVAL;
	}
	return 0;
}

void tp_items_free(struct tp_items *it)
{
	free(it->v);
	it->v = NULL;
	it->n = 0;
}
