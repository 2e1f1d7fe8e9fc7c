/* The evaluator of tracepoint bytecode (expr.h): freestanding, bounds-checked, so that the
 * agent can run it inside the traced program as the tracer does. */
#include <errno.h>
#include <string.h>

#include "tracept/expr.h"

static uint64_t extend(uint64_t v, unsigned sz)
{
	unsigned bits = (sz & 0x7f) * 8;

	if (bits == 0 || bits >= 64)
		return v;
	v &= (UINT64_C(1) << bits) - 1;
	if ((sz & TP_EXPR_SIGNED) && (v >> (bits - 1)) & 1)
		v |= ~((UINT64_C(1) << bits) - 1);
	return v;
}

static int valid_size(unsigned sz)
{
	sz &= 0x7f;
	return sz == 1 || sz == 2 || sz == 4 || sz == 8;
}

int tp_expr_reads_reg(const uint8_t *code, size_t len, unsigned reg)
{
	size_t pc = 0;

	while (pc < len) {
		uint8_t op = code[pc++];

		switch (op) {
		case TP_OP_END:
			return 0;
		case TP_OP_CONST:
			pc += 8;
			break;
		case TP_OP_REG:
			if (pc < len && code[pc] == reg)
				return 1;
			pc++;
			break;
		case TP_OP_LOAD:
		case TP_OP_EXT:
			pc++;
			break;
		case TP_OP_JZ:
		case TP_OP_JNZ:
		case TP_OP_JMP:
			pc += 2;
			break;
		}
	}
	return 0;
}

int tp_expr_eval(const uint8_t *code, size_t len, const uint64_t *regs, tp_expr_read_fn read,
		 void *arg, uint64_t *out, uint64_t *fault)
{
	uint64_t st[TP_EXPR_STACK], a, b;
	size_t pc = 0;
	int sp = 0;

	while (pc < len) {
		uint8_t op = code[pc++];
		uint16_t off;

		if (op == TP_OP_END) {
			if (sp != 1)
				return -EINVAL;
			*out = st[0];
			return 0;
		}
		switch (op) {
		case TP_OP_CONST:
			if (len - pc < 8 || sp == TP_EXPR_STACK)
				return -EINVAL;
			memcpy(&st[sp++], code + pc, 8);
			pc += 8;
			continue;
		case TP_OP_REG:
			if (pc >= len || code[pc] >= TP_UREG_COUNT || sp == TP_EXPR_STACK)
				return -EINVAL;
			st[sp++] = regs[code[pc++]];
			continue;
		case TP_OP_LOAD:
			if (pc >= len || !valid_size(code[pc]) || sp < 1)
				return -EINVAL;
			a = 0;
			if (read(arg, st[sp - 1], &a, code[pc] & 0x7f)) {
				if (fault)
					*fault = st[sp - 1];
				return -EFAULT;
			}
			st[sp - 1] = extend(a, code[pc++]);
			continue;
		case TP_OP_EXT:
			if (pc >= len || !valid_size(code[pc]) || sp < 1)
				return -EINVAL;
			st[sp - 1] = extend(st[sp - 1], code[pc++]);
			continue;
		case TP_OP_NEG:
		case TP_OP_NOT:
		case TP_OP_LNOT:
			if (sp < 1)
				return -EINVAL;
			a = st[sp - 1];
			st[sp - 1] = op == TP_OP_NEG ? -a : op == TP_OP_NOT ? ~a : !a;
			continue;
		case TP_OP_JZ:
		case TP_OP_JNZ:
		case TP_OP_JMP:
			if (len - pc < 2)
				return -EINVAL;
			memcpy(&off, code + pc, 2);
			pc += 2;
			if (op != TP_OP_JMP) {
				if (sp < 1)
					return -EINVAL;
				a = st[--sp];
				if ((op == TP_OP_JZ) != (a == 0))
					continue;
			}
			if (off > len - pc)
				return -EINVAL;
			pc += off;
			continue;
		default:
			break;
		}
		if (op >= TP_OP_COUNT || sp < 2)
			return -EINVAL;
		b = st[--sp];
		a = st[sp - 1];
		switch (op) {
		case TP_OP_ADD:
			a += b;
			break;
		case TP_OP_SUB:
			a -= b;
			break;
		case TP_OP_MUL:
			a *= b;
			break;
		case TP_OP_DIVS:
		case TP_OP_MODS:
			if (!b)
				return -EDOM;
			if ((int64_t)b == -1)
				a = op == TP_OP_DIVS ? -a : 0; /* INT64_MIN / -1 must not trap */
			else
				a = op == TP_OP_DIVS ? (uint64_t)((int64_t)a / (int64_t)b)
						     : (uint64_t)((int64_t)a % (int64_t)b);
			break;
		case TP_OP_DIVU:
		case TP_OP_MODU:
			if (!b)
				return -EDOM;
			a = op == TP_OP_DIVU ? a / b : a % b;
			break;
		case TP_OP_AND:
			a &= b;
			break;
		case TP_OP_OR:
			a |= b;
			break;
		case TP_OP_XOR:
			a ^= b;
			break;
		case TP_OP_SHL:
			a = b >= 64 ? 0 : a << b;
			break;
		case TP_OP_SHRS:
			a = (uint64_t)((int64_t)a >> (b >= 64 ? 63 : b));
			break;
		case TP_OP_SHRU:
			a = b >= 64 ? 0 : a >> b;
			break;
		case TP_OP_EQ:
			a = a == b;
			break;
		case TP_OP_NE:
			a = a != b;
			break;
		case TP_OP_LTS:
			a = (int64_t)a < (int64_t)b;
			break;
		case TP_OP_LTU:
			a = a < b;
			break;
		case TP_OP_LES:
			a = (int64_t)a <= (int64_t)b;
			break;
		case TP_OP_LEU:
			a = a <= b;
			break;
		default:
			return -EINVAL;
		}
		st[sp - 1] = a;
	}
	return -EINVAL; /* no TP_OP_END */
}
