/* Inside src/tracept: the types of expressions, the DWARF scope of a tracepoint's pc
 * (dwarf.c), the compiled collect items (expr.c), shared by the engine and the frames. */
#ifndef TP_TRACEPT_PRIV_H
#define TP_TRACEPT_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <elfutils/libdw.h>

#include "tracept/expr.h"

/* A C type as far as expressions need it. */
enum tp_ty_kind { TY_VOID, TY_INT, TY_PTR, TY_ARRAY, TY_STRUCT, TY_OTHER };

struct tp_ty {
	enum tp_ty_kind kind;
	bool is_signed;
	uint64_t size;	/* bytes of a value of the type */
	uint64_t count; /* ARRAY: elements */
	/* PTR, ARRAY: the element type is the DWARF die (has_die) or a builtin: @bdepth more
	 * pointers, then an integer of @bsize bytes (0: void). */
	bool has_die;
	Dwarf_Die die; /* STRUCT: the struct; PTR/ARRAY: the element type */
	uint8_t bdepth, bsize;
	bool bsigned;
};

/* The DWARF scope of one pc of one object. */
struct tp_scope;

/* How a variable's value is found. */
enum tp_var_kind {
	VAR_MEM,   /* the code computes its address */
	VAR_VALUE, /* the code computes its value (a register, DW_OP_stack_value) */
	VAR_NONE,  /* optimized out at this pc */
};

struct tp_var {
	enum tp_var_kind kind;
	struct tp_ty ty;
	uint8_t code[128];
	size_t len; /* without TP_OP_END */
};

/* Open the debug information of @path (loaded at @bias) at runtime @pc.  NULL with errno
 * on failure; a scope without DWARF (errno 0 then) still serves registers. */
struct tp_scope *tp_scope_open(const char *path, uint64_t bias, uint64_t pc);
void tp_scope_free(struct tp_scope *sc);
bool tp_scope_has_dwarf(const struct tp_scope *sc);
/* Variable @name visible at the pc (locals, parameters, globals of any unit): 0,
 * -ENOENT, -ENOTSUP (a location tracepad cannot follow). */
int tp_scope_var(struct tp_scope *sc, const char *name, struct tp_var *v);
/* Member @name of struct type @t: its offset and type.  0 or -ENOENT. */
int tp_scope_member(struct tp_scope *sc, const struct tp_ty *t, const char *name, uint64_t *off,
		    struct tp_ty *out);
/* The type pointed to by, or the element of, @t (PTR or ARRAY).  0 or -EINVAL. */
int tp_scope_elem(const struct tp_ty *t, struct tp_ty *out);
/* The names of the function's parameters (@args) or of the locals visible at the pc, in
 * order, to @fn. */
int tp_scope_foreach(struct tp_scope *sc, bool args, int (*fn)(void *arg, const char *name),
		     void *arg);
/* "f" for the innermost function holding the pc, NULL without DWARF. */
const char *tp_scope_function(struct tp_scope *sc);

/* ---- compiled expressions ---- */

struct tp_code {
	uint8_t code[TP_EXPR_MAX_CODE];
	size_t len; /* with TP_OP_END */
};

/* One collected value: a field of the tracepoint's frames. */
struct tp_item {
	char name[64];	/* field name: [A-Za-z][A-Za-z0-9_]* */
	char text[128]; /* as written, for the output */
	bool mem;	/* the code computes an address: @size bytes are read there */
	bool fixed;	/* mem: the address needs no read (batched into one readv) */
	bool scalar;	/* mem: an integer of @size bytes (a value of the frame) */
	bool is_signed, hex;
	uint32_t size; /* bytes: value (1, 2, 4, 8) or memory */
	struct tp_code c;
};

struct tp_items {
	struct tp_item *v;
	int n;
};

#define TP_MAX_ITEMS 56	       /* fields of a frame event besides its header */
#define TP_MAX_MEM (16 * 1024) /* bytes of one memory range */

struct tp_expr_error {
	int col; /* 1-based column in the whole text given, 0 if none */
	char msg[200];
};

/* Compile condition @text, whose first character is column @col0 + 1 of what the user
 * wrote.  0, or -EINVAL with *@err. */
int tp_expr_compile_cond(struct tp_scope *sc, const char *text, int col0, struct tp_code *out,
			 struct tp_expr_error *err);
/* Compile a collect list ("EXPR, $regs, *ADDR@LEN, ...") into items appended to @items. */
int tp_expr_compile_collect(struct tp_scope *sc, const char *text, int col0, struct tp_items *items,
			    struct tp_expr_error *err);
void tp_items_free(struct tp_items *it);
/* One expression of a collect list, "EXPR" or "EXPR@COUNT", into @i (all but its names). */
int tp_expr_compile_value(struct tp_scope *sc, const char *text, int col0, struct tp_item *i,
			  struct tp_expr_error *err);
/* The index of register $@name[0..@n) (rax, sp, pc, arg1...), or -1. */
int tp_expr_reg_index(const char *name, size_t n);

#endif

/* ---- source lines (dwarf.c) ---- */

/* Link-time address of the first statement of @file:@line in object @path (@file matches
 * a unit's source by its last path components).  0, -ENOENT. */
int tp_dwarf_line_addr(const char *path, const char *file, int line, uint64_t *addr);
/* The end of the prologue of the function at link-time @lowpc (the address of its second
 * line-table row), as gdb places a breakpoint on a function: 0 with *@addr, -ENOENT
 * without line information. */
int tp_dwarf_after_prologue(const char *path, uint64_t lowpc, uint64_t *addr);
/* The source file of link-time @pc of object @path, made absolute with its unit's
 * compilation directory (malloc'ed), or NULL. */
char *tp_dwarf_source_path(const char *path, uint64_t pc);
