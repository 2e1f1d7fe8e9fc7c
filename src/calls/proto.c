/* Typed arguments and return values of traced calls: argument locations after the SysV
 * x86-64 calling convention, strace-like text of the values read from a stopped thread, and
 * errno's place in a thread.  Prototypes come from proto-dwarf.c. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch/arch.h"
#include "base/log.h"
#include "calls/proto-priv.h"
#include "elf/file.h"
#include "elf/symbols.h"
#include "proc/proc.h"

/* ---- output ---- */

/* @n bytes of @s, cut as vsnprintf would cut them. */
static void put_mem(struct out *o, const char *s, size_t n)
{
	if (o->pos + 1 >= o->len)
		return;
	if (n > o->len - o->pos - 1)
		n = o->len - o->pos - 1;
	memcpy(o->buf + o->pos, s, n);
	o->pos += n;
	o->buf[o->pos] = 0;
}

/* printf's %llu (and %lld of a negative value with @neg) and %#llx, without stdio: the
 * common values of every line (vsnprintf was most of a call's cost for the agent engine). */
static void put_dec(struct out *o, uint64_t x, bool neg)
{
	static const char two[] = "00010203040506070809101112131415161718192021222324252627282930"
				  "31323334353637383940414243444546474849505152535455565758596061"
				  "62636465666768697071727374757677787980818283848586878889909192"
				  "93949596979899";
	/* clang-format off */
	static const uint64_t pow10[20] = {
	    1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
	    10000000000ull, 100000000000ull, 1000000000000ull, 10000000000000ull,
	    100000000000000ull, 1000000000000000ull, 10000000000000000ull,
	    100000000000000000ull, 1000000000000000000ull, 10000000000000000000ull};
	/* clang-format on */
	char b[24], *d;
	/* its digits from its bits (log10 2 ~ 1233 / 4096), one comparison to correct: a
	 * division by 10 a digit, each waiting for the one before, was most of this */
	uint64_t y = x | 1; /* as many digits as x (a power of 10 is even), 0 one */
	unsigned k = (64u - (unsigned)__builtin_clzll(y)) * 1233 >> 12;
	size_t n = k + 1 - (y < pow10[k]) + neg;

	/* written in place, backwards, when it fits (no copy: a call of memcpy a value) */
	d = o->pos + n < o->len ? o->buf + o->pos + n : b + sizeof(b);
	if (d != b + sizeof(b))
		*d = 0;
	/* four digits at a time, as two pairs: chains of divisions half as long */
	for (; x >= 10000; x /= 10000) {
		uint32_t r = (uint32_t)(x % 10000), h = r / 100;

		d -= 4;
		memcpy(d, two + 2 * h, 2);
		memcpy(d + 2, two + 2 * (r - 100 * h), 2);
	}
	if (x >= 100) {
		d -= 2;
		memcpy(d, two + 2 * (x % 100), 2);
		x /= 100;
	}
	if (x >= 10) {
		d -= 2;
		memcpy(d, two + 2 * x, 2);
	} else {
		*--d = (char)('0' + x);
	}
	if (neg)
		*--d = '-';
	if (d == o->buf + o->pos)
		o->pos += n;
	else
		put_mem(o, d, n);
}

/* %#llx (@prefixed false) or 0x%llx. */
static void put_hex_as(struct out *o, uint64_t x, bool prefixed)
{
	char b[24];
	int i = sizeof(b);

	do
		b[--i] = "0123456789abcdef"[x & 15];
	while (x >>= 4);
	if (prefixed || b[i] != '0') {
		b[--i] = 'x';
		b[--i] = '0';
	}
	put_mem(o, b + i, sizeof(b) - (size_t)i);
}

static void put_hex(struct out *o, uint64_t x)
{
	put_hex_as(o, x, false);
}

void tp_calls_put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->pos + 1 >= o->len)
		return;
	if (!strchr(fmt, '%')) {
		put_mem(o, fmt, strlen(fmt));
		return;
	}
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
		tp_calls_put(o, "\\%c", e[1]);
	else if (c == quote || c == '\\')
		tp_calls_put(o, "\\%c", c);
	else if (isprint(c))
		tp_calls_put(o, "%c", c);
	else if (next >= '0' && next <= '7')
		tp_calls_put(o, "\\%03o", c);
	else
		tp_calls_put(o, "\\%o", c);
}

static void put_quoted(struct out *o, const uint8_t *s, size_t n, bool more)
{
	tp_calls_put(o, "\"");
	for (size_t i = 0; i < n; i++)
		put_escaped(o, s[i], i + 1 < n ? s[i + 1] : -1, '"');
	tp_calls_put(o, more ? "\"..." : "\"");
}

/* Characters of a string shown (-s): strace's and ltrace's default. */
static size_t str_size = 32;

void tp_proto_set_string_size(size_t n)
{
	str_size = n < STR_MAX ? n : STR_MAX;
}

size_t tp_proto_string_size(void)
{
	return str_size;
}

static tp_proto_mem_fn mem_fn;
static void *mem_ctx;

void tp_proto_set_mem(tp_proto_mem_fn fn, void *ctx)
{
	mem_fn = fn;
	mem_ctx = ctx;
}

/* The tracee's memory; when @pid <= 0, what the agent engine's record carries. */
static ssize_t mem_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	if (pid > 0)
		return tp_proc_read(pid, addr, buf, len);
	return mem_fn ? mem_fn(mem_ctx, addr, buf, len) : -EFAULT;
}

/* A NUL-terminated string of the tracee, strace style. */
static void put_string(struct out *o, pid_t pid, uint64_t addr)
{
	uint8_t s[STR_MAX + 1];
	ssize_t got;
	uint8_t *nul;

	if (!addr) {
		tp_calls_put(o, "NULL");
		return;
	}
	got = mem_read(pid, addr, s, str_size + 1);
	if (got <= 0) {
		tp_calls_put(o, "%#llx", (unsigned long long)addr);
		return;
	}
	nul = memchr(s, 0, got);
	if (nul)
		put_quoted(o, s, nul - s, false);
	else
		put_quoted(o, s, (size_t)got > str_size ? str_size : (size_t)got, true);
}

static void put_buffer(struct out *o, pid_t pid, uint64_t addr, uint64_t len)
{
	uint8_t s[STR_MAX];
	size_t want = len > str_size ? str_size : len;
	ssize_t got;

	if (!addr) {
		tp_calls_put(o, "NULL");
		return;
	}
	got = mem_read(pid, addr, s, want);
	if (got < (ssize_t)want) {
		tp_calls_put(o, "%#llx", (unsigned long long)addr);
		return;
	}
	put_quoted(o, s, want, len > want);
}

int tp_proto_format_string(pid_t pid, uint64_t addr, int64_t len, char *buf, size_t n)
{
	struct out o = {.buf = buf, .len = n};

	if (!n)
		return 0;
	buf[0] = 0;
	if (len < -1) {
		size_t keep = str_size;

		str_size = STR_MAX; /* a path: whole, as strace shows paths */
		put_string(&o, pid, addr);
		str_size = keep;
	} else if (len < 0)
		put_string(&o, pid, addr);
	else
		put_buffer(&o, pid, addr, (uint64_t)len);
	return (int)o.pos;
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
	tp_calls_put(o, "%s", t);
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

/* The kinds whose value is one integer register's (or stack slot's) alone, as put_int()
 * writes them. */
static bool int_kind(const struct ptype *t)
{
	return t->kind == K_INT || t->kind == K_UINT || t->kind == K_PTR || t->kind == K_HEX;
}

/* A value of an int_kind() type. */
static void put_int(struct out *o, const struct ptype *t, uint64_t x)
{
	switch (t->kind) {
	case K_INT: {
		long long i = (long long)trunc_s(x, t->size);

		put_dec(o, i < 0 ? -(uint64_t)i : (uint64_t)i, i < 0);
		break;
	}
	case K_UINT:
		put_dec(o, trunc_u(x, t->size), false);
		break;
	case K_PTR:
		if (x)
			put_hex(o, x);
		else
			tp_calls_put(o, "NULL");
		break;
	case K_HEX:
		put_hex(o, trunc_u(x, t->size));
		break;
	}
}

static void put_value(struct out *o, pid_t pid, const struct ptype *t, const struct val *v,
		      const struct val *next)
{
	uint64_t x = val_u64(v);

	if (!v->have) {
		tp_calls_put(o, "?");
		return;
	}
	if (int_kind(t)) {
		put_int(o, t, x);
		return;
	}
	switch (t->kind) {
	case K_VOID:
		tp_calls_put(o, "void");
		break;
	case K_BOOL:
		x = trunc_u(x, t->size);
		if (x <= 1)
			tp_calls_put(o, "%s", x ? "true" : "false");
		else
			tp_calls_put(o, "%llu", (unsigned long long)x);
		break;
	case K_CHAR:
		tp_calls_put(o, "'");
		put_escaped(o, (unsigned char)x, -1, '\'');
		tp_calls_put(o, "'");
		break;
	case K_STR:
		put_string(o, pid, x);
		break;
	case K_BUF:
		if (next && next->have)
			put_buffer(o, pid, x, val_u64(next));
		else
			tp_calls_put(o, "%#llx", (unsigned long long)x);
		break;
	case K_OCT:
		tp_calls_put(o, "%#llo", (unsigned long long)trunc_u(x, t->size));
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
		tp_calls_put(o, "%Lg", ld);
		break;
	}
	case K_ENUM: {
		uint64_t u = trunc_u(x, t->size);

		for (uint32_t i = 0; i < t->nenums; i++) {
			if (trunc_u(t->enums[i].val, t->size) == u) {
				tp_calls_put(o, "%s", t->enums[i].name);
				return;
			}
		}
		if (t->is_signed)
			tp_calls_put(o, "%lld", (long long)trunc_s(x, t->size));
		else
			tp_calls_put(o, "%llu", (unsigned long long)u);
		break;
	}
	case K_STRUCT:
		tp_calls_put(o, "{...}");
		break;
	default:
		tp_calls_put(o, "?");
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
	v->have = !nread || mem_read(a->pid, a->sp, v->b, nread) == (ssize_t)nread;
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

/* Are @p's arguments all of int_kind() in the integer argument registers, which fetch_arg()
 * takes one each in their order? */
static bool regs_only(const struct tp_proto *p)
{
	if (p->nparams > 6 || ret_in_memory(&p->ret))
		return false;
	for (int i = 0; i < p->nparams; i++)
		if (!int_kind(&p->params[i]))
			return false;
	return true;
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

		/* "%s%s=0x%llx" without stdio: the lines of functions without a prototype */
		for (int i = 0; i < 6; i++) {
			if (i)
				put_mem(&o, ", ", 2);
			put_mem(&o, names[i], strlen(names[i]));
			put_mem(&o, "=", 1);
			put_hex_as(&o, gpr(regs, i), true);
		}
		return o.pos;
	}
	if (regs_only(p)) {
		/* Integers in the registers alone (most prototypes): written straight from them,
		 * as put_value() would (gathering the values first was most of the time). */
		for (int i = 0; i < p->nparams; i++) {
			if (i)
				put_mem(&o, ", ", 2);
			put_int(&o, &p->params[i], gpr(regs, i));
		}
		goto out;
	}
	/* A struct returned in memory: its address is a hidden first argument. */
	if (ret_in_memory(&p->ret))
		a.gi = 1;
	/* All values first: a buffer's length is the argument after it. */
	for (int i = 0; i < p->nparams; i++)
		fetch_arg(&a, &p->params[i], &vals[i]);
	for (int i = 0; i < p->nparams; i++) {
		if (i)
			put_mem(&o, ", ", 2);
		put_value(&o, pid, &p->params[i], &vals[i],
			  i + 1 < p->nparams ? &vals[i + 1] : NULL);
	}
out:
	if (p->variadic)
		tp_calls_put(&o, "%s...", p->nparams ? ", " : "");
	return o.pos;
}

void tp_proto_reads(const struct tp_proto *p, struct tp_proto_reads *r)
{
	const struct user_regs_struct regs = {0};
	struct argpos a = {.pid = 0, .regs = &regs, .sp = 8};
	tp_proto_mem_fn keep = mem_fn;
	int src[MAX_PARAMS];

	memset(r, 0, sizeof(*r));
	if (!p)
		return;
	mem_fn = NULL; /* fetch_arg below only moves through the registers and the slots */
	if (ret_in_memory(&p->ret))
		a.gi = 1;
	for (int i = 0; i < p->nparams && i < MAX_PARAMS; i++) {
		int gi = a.gi, si = a.si;
		uint64_t sp = a.sp;
		struct val v;

		fetch_arg(&a, &p->params[i], &v);
		/* where an integer argument is: its register, or its stack slot */
		src[i] = a.gi == gi + 1				      ? gi
			 : a.gi == gi && a.si == si && a.sp == sp + 8 ? 6 + (int)((sp - 8) / 8)
								      : -1;
	}
	for (int i = 0; i < p->nparams && i < MAX_PARAMS; i++) {
		bool buf = p->params[i].kind == K_BUF;

		if ((p->params[i].kind != K_STR && !buf) || src[i] < 0 ||
		    r->nargs == TP_PROTO_READS_MAX)
			continue;
		/* a buffer's length is the next argument (none: shown as an address) */
		if (buf && (i + 1 >= p->nparams || src[i + 1] < 0))
			continue;
		r->arg[r->nargs].buf = buf;
		r->arg[r->nargs].src = src[i];
		r->arg[r->nargs].len_src = buf ? src[i + 1] : 0;
		r->nargs++;
	}
	r->stack = (unsigned)(a.sp - 8);
	r->nsse = a.si;
	r->nint = a.gi;
	switch (p->ret.kind) {
	case K_FLOAT:
	case K_DOUBLE:
	case K_OTHER_SSE:
		r->ret = TP_PROTO_RET_XMM0;
		break;
	case K_LDOUBLE:
		r->ret = TP_PROTO_RET_ST0;
		break;
	case K_STR:
		r->ret = TP_PROTO_RET_STR;
		break;
	default:
		r->ret = TP_PROTO_RET_INT;
	}
	mem_fn = keep;
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

bool tp_proto_ret_x87(const struct tp_proto *p)
{
	return p && p->ret.kind == K_LDOUBLE;
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
		put_hex_as(&o, regs->rax, true); /* 0x%llx */
		goto out;
	}
	f = failed(p, regs, &err);
	/* MAP_FAILED and SIG_ERR read as strace shows them; a void value is shown as the word,
	 * the memory of a struct is not read. */
	if (f && p->fail == 'M') {
		tp_calls_put(&o, "-1");
	} else if (int_kind(&p->ret)) {
		put_int(&o, &p->ret, regs->rax); /* as fetch_ret() and put_value() */
	} else {
		fetch_ret(&p->ret, regs, fp, &v);
		put_value(&o, pid, &p->ret, &v, NULL);
	}
	/* pthread_* return their error; a negative value is none (and errno is not theirs). */
	if (f && err < 0 && p->fail != 'e')
		err = errno_val;
	if (f && err >= 0) {
		const char *name = strerrorname_np(err);

		if (name)
			tp_calls_put(&o, " %s (%s)", name, strerror(err));
		else
			tp_calls_put(&o, " %d (%s)", err, strerror(err));
	}
out:
	if (failedp)
		*failedp = f;
	return o.pos;
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
