/* Unit tests of tracepoint expressions: compiled without debug information (registers,
 * constants, casts, memory through the read callback) and evaluated; errors and their
 * columns; collect lists; the evaluator on malformed and random bytecode. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "tap.h"
#include "tracept/tracept-priv.h"

static uint8_t memory[64];

static int fake_read(void *arg, uint64_t addr, void *buf, size_t len)
{
	(void)arg;
	if (addr < 0x1000 || addr + len > 0x1000 + sizeof(memory))
		return -EFAULT;
	memcpy(buf, memory + (addr - 0x1000), len);
	return 0;
}

static uint64_t regs[TP_UREG_COUNT];

/* Compile @text as a condition and evaluate it; *@r gets the result or the error. */
static int eval(const char *text, uint64_t *v)
{
	struct tp_code c;
	struct tp_expr_error err;
	int r = tp_expr_compile_cond(NULL, text, 0, &c, &err);

	if (r) {
		printf("#   %s: %s at column %d\n", text, err.msg, err.col);
		return r;
	}
	return tp_expr_eval(c.code, c.len, regs, fake_read, NULL, v, NULL);
}

static void value(const char *text, int64_t want)
{
	uint64_t v = 0xdeadbeef;
	int r = eval(text, &v);

	ok(r == 0 && (int64_t)v == want, "%s = %lld", text, (long long)want);
	if (r || (int64_t)v != want)
		printf("#   r=%d got %lld\n", r, (long long)v);
}

static void error_at(const char *text, int col, const char *msg)
{
	struct tp_code c;
	struct tp_expr_error err;
	int r = tp_expr_compile_cond(NULL, text, 4, &c, &err);

	ok(r == -EINVAL && err.col == col && strstr(err.msg, msg),
	   "'%s': \"%s\" at column %d (after 4 columns)", text, msg, col);
	if (r != -EINVAL || err.col != col || !strstr(err.msg, msg))
		printf("#   r=%d: \"%s\" at column %d\n", r, err.msg, err.col);
}

int main(void)
{
	uint64_t v;
	int32_t m32 = -5;
	uint32_t u32 = 0xfffffffe;

	regs[TP_UREG_RDI] = 42;
	regs[TP_UREG_RSI] = 0x1000;
	regs[TP_UREG_RSP] = 0x7ffff000;
	regs[TP_UREG_RAX] = (uint64_t)-7;
	memcpy(memory, &m32, 4);
	memcpy(memory + 8, &u32, 4);
	memory[16] = 0x80;

	value("1 + 2 * 3", 7);
	value("(1 + 2) * 3", 9);
	value("$rdi", 42);
	value("$arg1 % 7 == 0", 1);
	value("$arg1 % 5", 2);
	value("-7 / 2", -3);
	value("-7 % 2", -1);
	value("1 << 4 | 3", 19);
	value("0x10 >> 2", 4);
	value("5 > 3 && 2 >= 2 && 1 < 2 && 2 <= 2 && 3 != 4", 1);
	value("5 < 3 || 0", 0);
	value("!0 + !5 + ~0", 0);
	value("*(int *)$rsi", -5);
	value("*(int *)$rsi < 0", 1);
	value("*(unsigned int *)($rsi + 8)", 0xfffffffe);
	value("*(char *)($rsi + 16)", -128);
	value("*(unsigned char *)($rsi + 16)", 128);
	value("((int *)$rsi)[2]", -2);
	value("*((int *)$rsi + 2)", -2);
	value("(int)$rax", -7);
	value("(unsigned char)$rax", 249);
	value("(short)65535", -1);
	value("'a'", 97);
	/* && and || read their right side only when it decides. */
	value("0 && *(int *)0", 0);
	value("1 || *(int *)0", 1);
	ok(eval("*(int *)8", &v) == -EFAULT, "a read of unmapped memory: -EFAULT");
	ok(eval("$rdi / 0", &v) == -EDOM, "a division by zero: -EDOM");
	value("(long)-9223372036854775807 - 1 == -9223372036854775807 - 1", 1);

	error_at("$rdi +", 11, "expected an operand");
	error_at("(1 + 2", 11, "expected ')'");
	error_at("1 2", 7, "unexpected '2'");
	error_at("$nosuch", 5, "unknown register");
	error_at("x", 5, "no variable 'x' here");
	error_at("$rdi->x", 9, "not a pointer");
	error_at("*(void *)$rdi", 5, "pointer to void");
	error_at("", 5, "expected an operand");
	error_at("12abc", 5, "bad number");
	{
		char deep[300];

		memset(deep, '(', 200);
		strcpy(deep + 200, "1");
		error_at(deep, 5 + 64, "nested too deeply");
	}

	{
		struct tp_items it = {0};
		struct tp_expr_error err;
		int r = tp_expr_compile_collect(NULL, "$regs, $rdi, *(char *)$rsi@16, *$rsp@3", 0,
						&it, &err);

		ok(r == 0 && it.n == 18 + 3, "collect: $regs is 18 registers, then 3 more");
		ok(r == 0 && !strcmp(it.v[18].name, "rdi") && it.v[18].hex && !it.v[18].mem,
		   "collect: $rdi is a value named rdi, in hex");
		ok(r == 0 && it.v[19].mem && it.v[19].size == 16 && it.v[19].fixed,
		   "collect: *(char *)$rsi@16 is 16 bytes at an address known from registers");
		ok(r == 0 && it.v[20].mem && it.v[20].size == 3,
		   "collect: *$rsp@3 (an untyped address) is 3 bytes");
		tp_items_free(&it);
		r = tp_expr_compile_collect(NULL, "*(short *)($rsi + 2), *(int *)*(long *)$rsp", 0,
					    &it, &err);
		ok(r == 0 && it.n == 2 && it.v[0].mem && it.v[0].scalar && it.v[0].fixed &&
		       it.v[0].size == 2 && it.v[0].is_signed,
		   "collect: a short at an address from registers: read with the ranges");
		ok(r == 0 && it.n == 2 && it.v[1].scalar && !it.v[1].fixed,
		   "collect: an int behind a pointer: its address needs a read");
		tp_items_free(&it);
		r = tp_expr_compile_collect(NULL, "$rdi, , $rsi", 10, &it, &err);
		ok(r == -EINVAL && err.col == 17, "collect: an empty item at its column");
		tp_items_free(&it);
		r = tp_expr_compile_collect(NULL, "$args", 0, &it, &err);
		ok(r == -EINVAL && strstr(err.msg, "no debug information"),
		   "collect: $args without debug information");
		tp_items_free(&it);
	}

	/* Which registers a program reads (the agent reads the segment bases only then): a
	 * register index inside a constant is not a read. */
	{
		struct tp_code c;
		struct tp_expr_error err;
		int r = tp_expr_compile_cond(NULL, "$rdi == 25 && $fs_base != 0", 0, &c, &err);

		ok(r == 0 && tp_expr_reads_reg(c.code, c.len, TP_UREG_FS_BASE) &&
		       tp_expr_reads_reg(c.code, c.len, TP_UREG_RDI) &&
		       !tp_expr_reads_reg(c.code, c.len, TP_UREG_GS_BASE) &&
		       !tp_expr_reads_reg(c.code, c.len, TP_UREG_RAX),
		   "reads_reg: $fs_base and $rdi, not $gs_base nor $rax");
		r = tp_expr_compile_cond(NULL, "$rax + 21 > 0 && $gs_base", 0, &c, &err);
		ok(r == 0 && tp_expr_reads_reg(c.code, c.len, TP_UREG_GS_BASE) &&
		       !tp_expr_reads_reg(c.code, c.len, TP_UREG_FS_BASE),
		   "reads_reg: $gs_base after a jump, not the constant 21 (TP_UREG_FS_BASE)");
	}

	/* The evaluator never trusts its code: malformed programs are refused. */
	{
		static const uint8_t no_end[] = {TP_OP_CONST, 1, 0, 0, 0, 0, 0, 0, 0};
		static const uint8_t underflow[] = {TP_OP_ADD, TP_OP_END};
		static const uint8_t bad_reg[] = {TP_OP_REG, 200, TP_OP_END};
		static const uint8_t bad_jump[] = {TP_OP_JMP, 0xff, 0x7f, TP_OP_END};
		static const uint8_t bad_size[] = {TP_OP_REG, 0, TP_OP_LOAD, 3, TP_OP_END};
		static const uint8_t short_const[] = {TP_OP_CONST, 1, 2};
		uint8_t overflow[TP_EXPR_STACK * 2 + 2];
		uint8_t rnd[64];
		uint32_t seed = 12345;
		int bad = 0;

		ok(tp_expr_eval(no_end, sizeof(no_end), regs, fake_read, NULL, &v, NULL) == -EINVAL,
		   "no END: -EINVAL");
		ok(tp_expr_eval(underflow, 2, regs, fake_read, NULL, &v, NULL) == -EINVAL,
		   "a stack underflow: -EINVAL");
		ok(tp_expr_eval(bad_reg, 3, regs, fake_read, NULL, &v, NULL) == -EINVAL,
		   "a register out of range: -EINVAL");
		ok(tp_expr_eval(bad_jump, 4, regs, fake_read, NULL, &v, NULL) == -EINVAL,
		   "a jump out of the code: -EINVAL");
		ok(tp_expr_eval(bad_size, 5, regs, fake_read, NULL, &v, NULL) == -EINVAL,
		   "a load of 3 bytes: -EINVAL");
		ok(tp_expr_eval(short_const, 3, regs, fake_read, NULL, &v, NULL) == -EINVAL,
		   "a cut immediate: -EINVAL");
		for (size_t i = 0; i < sizeof(overflow); i += 2) {
			overflow[i] = TP_OP_REG;
			overflow[i + 1] = 0;
		}
		ok(tp_expr_eval(overflow, sizeof(overflow), regs, fake_read, NULL, &v, NULL) ==
		       -EINVAL,
		   "a stack overflow: -EINVAL");
		/* Random programs: any result, never a crash (the sanitized build checks). */
		for (int k = 0; k < 100000; k++) {
			int r;

			for (size_t i = 0; i < sizeof(rnd); i++) {
				seed = seed * 1103515245 + 12345;
				rnd[i] = (uint8_t)(seed >> 16) % (TP_OP_COUNT + 2);
			}
			r = tp_expr_eval(rnd, sizeof(rnd), regs, fake_read, NULL, &v, NULL);
			bad += r != 0 && r != -EINVAL && r != -EFAULT && r != -EDOM;
		}
		ok(bad == 0, "100000 random programs: 0 or -EINVAL/-EFAULT/-EDOM");
	}
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
