/* Golden-byte tests of the code writer (tp_arch_put_*, labels, tp_arch_emit_*): each
 * expected line carries its disassembly; targets beyond +-2 GiB, labels forward and
 * backward, rel8 overflow, and the errors of a full buffer or a bad label. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "arch/arch.h"
#include "tap.h"

#define PC 0x401000ull
#define FAR 0x7ff000000000ull /* > 2 GiB from PC */

static int same_bytes(const uint8_t *got, size_t gotlen, const uint8_t *want, size_t wantlen)
{
	if (gotlen != wantlen || memcmp(got, want, wantlen)) {
		printf("#   got ");
		for (size_t i = 0; i < gotlen; i++)
			printf("%02x ", got[i]);
		printf("\n#   want ");
		for (size_t i = 0; i < wantlen; i++)
			printf("%02x ", want[i]);
		printf("\n");
		return 0;
	}
	return 1;
}

/* Finish writer @w and compare what it wrote with @want. */
static void golden(const char *what, struct tp_arch_writer *w, const uint8_t *want, size_t n)
{
	size_t len = 0;

	is_int(tp_arch_writer_finish(w, &len), 0, "%s: written", what);
	ok(same_bytes(w->buf, len, want, n), "%s: bytes", what);
}

static uint8_t buf[512];

static struct tp_arch_writer *fresh(struct tp_arch_writer *w, uint64_t pc)
{
	memset(buf, 0, sizeof(buf));
	tp_arch_writer_init(w, buf, sizeof(buf), pc);
	return w;
}

static void test_simple(void)
{
	struct tp_arch_writer w;

	fresh(&w, PC);
	tp_arch_put_int3(&w);
	tp_arch_put_syscall(&w);
	tp_arch_put_push_reg(&w, TP_REG_R12);
	tp_arch_put_pop_reg(&w, TP_REG_RAX);
	tp_arch_put_lea_rsp(&w, -TP_ARCH_RED_ZONE);
	tp_arch_put_mov_reg_u64(&w, TP_REG_R11, 0x7f1234560005ull);
	tp_arch_put_call_reg(&w, TP_REG_R11);
	tp_arch_put_nop(&w, 5);
	tp_arch_put_ret(&w);
	{
		static const uint8_t want[] = {
		    0xcc,			  /* int3 */
		    0x0f, 0x05,			  /* syscall */
		    0x41, 0x54,			  /* push r12 */
		    0x58,			  /* pop rax */
		    0x48, 0x8d, 0x64, 0x24, 0x80, /* lea rsp, [rsp-0x80] */
		    0x49, 0xbb, 0x05, 0x00, 0x56,
		    0x34, 0x12, 0x7f, 0x00, 0x00, /* mov r11, 0x7f1234560005 */
		    0x41, 0xff, 0xd3,		  /* call r11 */
		    0x0f, 0x1f, 0x44, 0x00, 0x00, /* nop dword [rax+rax*1+0] */
		    0xc3,			  /* ret */
		};

		golden("simple", &w, want, sizeof(want));
	}
	is_int(buf[0], TP_ARCH_INT3, "TP_ARCH_INT3 is what int3 encodes to");
	fresh(&w, PC);
	tp_arch_put_nop(&w, 5);
	{
		static const uint8_t want[] = TP_ARCH_NOP5; /* the tracepoint site's nop */

		golden("TP_ARCH_NOP5 is the 5-byte nop", &w, want, sizeof(want));
	}
}

static void test_push(void)
{
	struct tp_arch_writer w;

	fresh(&w, PC);
	tp_arch_put_push_u64(&w, 0x401005);
	tp_arch_put_push_u64(&w, 0xffffffff80000000ull);
	tp_arch_put_push_u64(&w, 0x7f1234560005ull);
	tp_arch_put_push_u64(&w, 0x80000005ull);
	{
		static const uint8_t want[] = {
		    0x68, 0x05, 0x10, 0x40, 0x00,	      /* push 0x401005 */
		    0x68, 0x00, 0x00, 0x00, 0x80,	      /* push -0x80000000 (sign-extended) */
		    0x48, 0x8d, 0x64, 0x24, 0xf8,	      /* lea rsp, [rsp-0x8] */
		    0xc7, 0x04, 0x24, 0x05, 0x00, 0x56, 0x34, /* mov dword [rsp], 0x34560005 */
		    0xc7, 0x44, 0x24, 0x04, 0x12, 0x7f, 0x00, 0x00, /* mov dword [rsp+4], 0x7f12 */
		    0x48, 0x8d, 0x64, 0x24, 0xf8,		    /* lea rsp, [rsp-0x8] */
		    0xc7, 0x04, 0x24, 0x05, 0x00, 0x00, 0x80, /* mov dword [rsp], 0x80000005 */
		    0xc7, 0x44, 0x24, 0x04, 0x00, 0x00, 0x00, 0x00, /* mov dword [rsp+4], 0 */
		};

		golden("push_u64", &w, want, sizeof(want));
	}
}

static void test_branches(void)
{
	struct tp_arch_writer w;

	fresh(&w, PC);
	tp_arch_put_jmp(&w, PC + 0x10, TP_ARCH_BR_AUTO);
	tp_arch_put_jmp(&w, PC + 0x10, TP_ARCH_BR_32);
	tp_arch_put_jmp(&w, PC + 0x1000, TP_ARCH_BR_AUTO);
	tp_arch_put_jcc(&w, TP_CC_E, PC, TP_ARCH_BR_AUTO);
	tp_arch_put_jcc(&w, TP_CC_G, PC, TP_ARCH_BR_32);
	tp_arch_put_call(&w, PC + 0x1000);
	tp_arch_put_jmp_far(&w, FAR);
	{
		static const uint8_t want[] = {
		    0xeb, 0x0e,				/* 401000: jmp 0x401010 (rel8) */
		    0xe9, 0x09, 0x00, 0x00, 0x00,	/* 401002: jmp 0x401010 (rel32) */
		    0xe9, 0xf4, 0x0f, 0x00, 0x00,	/* 401007: jmp 0x402000 */
		    0x74, 0xf2,				/* 40100c: jz 0x401000 */
		    0x0f, 0x8f, 0xec, 0xff, 0xff, 0xff, /* 40100e: jnle 0x401000 */
		    0xe8, 0xe7, 0x0f, 0x00, 0x00,	/* 401014: call 0x402000 */
		    0xff, 0x25, 0x00, 0x00, 0x00, 0x00, /* 401019: jmp qword [rip+0] */
		    0x00, 0x00, 0x00, 0x00, 0xf0, 0x7f, 0x00, 0x00, /* dq 0x7ff000000000 */
		};

		golden("branches", &w, want, sizeof(want));
	}
}

static void test_far(void)
{
	struct tp_arch_writer w;
	size_t n = 1;

	fresh(&w, PC);
	tp_arch_put_jmp(&w, FAR, TP_ARCH_BR_AUTO);
	is_int(tp_arch_writer_finish(&w, &n), -ERANGE, "jmp > 2 GiB: -ERANGE");
	is_int(n, 0, "jmp > 2 GiB: nothing written");
	fresh(&w, PC);
	tp_arch_put_call(&w, FAR);
	is_int(tp_arch_writer_finish(&w, NULL), -ERANGE, "call > 2 GiB: -ERANGE");
	fresh(&w, PC);
	tp_arch_put_jcc(&w, TP_CC_NE, FAR, TP_ARCH_BR_32);
	is_int(tp_arch_writer_finish(&w, NULL), -ERANGE, "jcc > 2 GiB: -ERANGE");
	/* Exactly at the edge of rel32: jmp at PC reaches PC + 5 + INT32_MAX, not one more. */
	fresh(&w, PC);
	tp_arch_put_jmp(&w, PC + 5 + INT32_MAX, TP_ARCH_BR_32);
	{
		static const uint8_t want[] = {
		    0xe9, 0xff, 0xff, 0xff, 0x7f, /* jmp 0x80401004 */
		};

		golden("jmp to the last byte in reach", &w, want, sizeof(want));
	}
	fresh(&w, PC);
	tp_arch_put_jmp(&w, PC + 5 + INT32_MAX + 1ull, TP_ARCH_BR_32);
	is_int(tp_arch_writer_finish(&w, NULL), -ERANGE, "one byte further: -ERANGE");
	/* Stubs high in the address space reach a target there. */
	fresh(&w, FAR);
	tp_arch_put_jmp(&w, FAR - 0x10000, TP_ARCH_BR_AUTO);
	tp_arch_put_call(&w, FAR + 0x7fff0000ull);
	{
		static const uint8_t want[] = {
		    0xe9, 0xfb, 0xff, 0xfe, 0xff, /* jmp 0x7fefffff0000 */
		    0xe8, 0xf6, 0xff, 0xfe, 0x7f, /* call 0x7ff07fff0000 */
		};

		golden("high stubs", &w, want, sizeof(want));
	}
}

static void test_labels(void)
{
	struct tp_arch_writer w;
	int top, out, mid;

	fresh(&w, PC);
	top = tp_arch_label_new(&w);
	out = tp_arch_label_new(&w);
	mid = tp_arch_label_new(&w);
	ok(top == 0 && out == 1 && mid == 2, "labels are numbered from 0");
	tp_arch_label_bind(&w, top);
	tp_arch_put_jcc_label(&w, TP_CC_E, out, TP_ARCH_BR_8);	   /* forward, rel8 */
	tp_arch_put_jmp_label(&w, out, TP_ARCH_BR_AUTO);	   /* forward: rel32 */
	tp_arch_put_jcc_label(&w, TP_CC_NE, top, TP_ARCH_BR_AUTO); /* backward: rel8 */
	tp_arch_put_jmp_label(&w, top, TP_ARCH_BR_32);		   /* backward, rel32 */
	tp_arch_put_call_label(&w, mid);
	tp_arch_label_bind(&w, mid);
	tp_arch_put_int3(&w);
	tp_arch_label_bind(&w, out);
	tp_arch_put_ret(&w);
	{
		static const uint8_t want[] = {
		    0x74, 0x12,			  /* 401000: top: jz out (0x401014) */
		    0xe9, 0x0d, 0x00, 0x00, 0x00, /* 401002: jmp out */
		    0x75, 0xf7,			  /* 401007: jnz top */
		    0xe9, 0xf2, 0xff, 0xff, 0xff, /* 401009: jmp top */
		    0xe8, 0x00, 0x00, 0x00, 0x00, /* 40100e: call mid (0x401013) */
		    0xcc,			  /* 401013: mid: int3 */
		    0xc3,			  /* 401014: out: ret */
		};

		golden("labels", &w, want, sizeof(want));
	}
}

static void test_rel8_reach(void)
{
	struct tp_arch_writer w;
	uint8_t pad[200] = {0};
	int l;

	/* Forward rel8 across 200 bytes: an error when resolved. */
	fresh(&w, PC);
	l = tp_arch_label_new(&w);
	tp_arch_put_jmp_label(&w, l, TP_ARCH_BR_8);
	tp_arch_put_data(&w, pad, sizeof(pad));
	tp_arch_label_bind(&w, l);
	is_int(tp_arch_writer_finish(&w, NULL), -ERANGE, "forward rel8 over 200 bytes: -ERANGE");

	/* The same with AUTO is rel32 from the start. */
	fresh(&w, PC);
	l = tp_arch_label_new(&w);
	tp_arch_put_jmp_label(&w, l, TP_ARCH_BR_AUTO);
	tp_arch_put_data(&w, pad, sizeof(pad));
	tp_arch_label_bind(&w, l);
	is_int(tp_arch_writer_finish(&w, NULL), 0, "forward AUTO over 200 bytes resolves");
	ok(same_bytes(buf, 5, (const uint8_t[]){0xe9, 0xc8, 0x00, 0x00, 0x00}, 5),
	   "  e9 c8 00 00 00: jmp +200 (rel32)");

	/* Forward rel8 to exactly +127 fits. */
	fresh(&w, PC);
	l = tp_arch_label_new(&w);
	tp_arch_put_jcc_label(&w, TP_CC_B, l, TP_ARCH_BR_8);
	tp_arch_put_data(&w, pad, 127);
	tp_arch_label_bind(&w, l);
	is_int(tp_arch_writer_finish(&w, NULL), 0, "forward rel8 to +127 resolves");
	ok(same_bytes(buf, 2, (const uint8_t[]){0x72, 0x7f}, 2), "  72 7f: jb +127");

	/* Backward: AUTO widens what rel8 cannot reach; a forced rel8 is refused at once. */
	fresh(&w, PC);
	l = tp_arch_label_new(&w);
	tp_arch_label_bind(&w, l);
	tp_arch_put_data(&w, pad, 127);
	tp_arch_put_jmp_label(&w, l, TP_ARCH_BR_AUTO);
	tp_arch_put_jmp_label(&w, l, TP_ARCH_BR_8);
	is_int(tp_arch_writer_finish(&w, NULL), -ERANGE, "backward rel8 to -134: -ERANGE");
	ok(same_bytes(buf + 127, 5, (const uint8_t[]){0xe9, 0x7c, 0xff, 0xff, 0xff}, 5),
	   "  e9 7c ff ff ff: backward AUTO jmp -132 widened to rel32");
}

static void test_errors(void)
{
	struct tp_arch_writer w;
	uint8_t small[4];
	int l = 0;

	tp_arch_writer_init(&w, small, sizeof(small), PC);
	tp_arch_put_int3(&w);
	tp_arch_put_jmp(&w, PC + 0x100, TP_ARCH_BR_32);
	is_int(tp_arch_writer_finish(&w, NULL), -ENOSPC, "jmp rel32 into 3 free bytes: -ENOSPC");
	tp_arch_put_int3(&w);
	is_int(w.len, 1, "after an error nothing more is written");

	fresh(&w, PC);
	l = tp_arch_label_new(&w);
	tp_arch_put_jmp_label(&w, l, TP_ARCH_BR_AUTO);
	is_int(tp_arch_writer_finish(&w, NULL), -EINVAL, "unbound label: -EINVAL");

	fresh(&w, PC);
	tp_arch_put_jmp_label(&w, 3, TP_ARCH_BR_AUTO);
	is_int(tp_arch_writer_finish(&w, NULL), -EINVAL, "label never made: -EINVAL");

	fresh(&w, PC);
	l = tp_arch_label_new(&w);
	tp_arch_label_bind(&w, l);
	tp_arch_label_bind(&w, l);
	is_int(tp_arch_writer_finish(&w, NULL), -EINVAL, "label bound twice: -EINVAL");

	fresh(&w, PC);
	for (int i = 0; i <= TP_ARCH_WRITER_LABELS; i++)
		l = tp_arch_label_new(&w);
	is_int(l, -1, "one label too many: -1");
	is_int(tp_arch_writer_finish(&w, NULL), -E2BIG, "one label too many: -E2BIG");

	fresh(&w, PC);
	l = tp_arch_label_new(&w);
	for (int i = 0; i <= TP_ARCH_WRITER_FIXUPS; i++)
		tp_arch_put_jmp_label(&w, l, TP_ARCH_BR_AUTO);
	is_int(tp_arch_writer_finish(&w, NULL), -E2BIG, "one forward reference too many: -E2BIG");

	tp_arch_writer_init(&w, NULL, 16, PC);
	is_int(tp_arch_writer_finish(&w, NULL), -EINVAL, "no buffer: -EINVAL");
}

static void test_emit(void)
{
	uint8_t out[16];
	size_t n = 0;

	is_int(tp_arch_emit_jmp(out, PC, PC + 0x100), 0, "emit_jmp");
	ok(same_bytes(out, 5, (const uint8_t[]){0xe9, 0xfb, 0x00, 0x00, 0x00}, 5),
	   "  e9 fb 00 00 00: jmp 0x401100");
	is_int(tp_arch_emit_jmp(out, PC, FAR), -ERANGE, "emit_jmp > 2 GiB: -ERANGE");
	is_int(tp_arch_emit_call(out, PC, PC - 0x1000), 0, "emit_call");
	ok(same_bytes(out, 5, (const uint8_t[]){0xe8, 0xfb, 0xef, 0xff, 0xff}, 5),
	   "  e8 fb ef ff ff: call 0x400000");
	is_int(tp_arch_emit_syscall(out), 0, "emit_syscall");
	ok(same_bytes(out, TP_ARCH_SYSCALL_LEN, (const uint8_t[]){0x0f, 0x05}, 2),
	   "  0f 05: syscall");
	is_int(tp_arch_emit_call_int3(out, sizeof(out), PC, PC + 0x20, &n), 0, "emit_call_int3");
	ok(same_bytes(out, n, (const uint8_t[]){0xe8, 0x1b, 0x00, 0x00, 0x00, 0xcc}, 6),
	   "  e8 1b 00 00 00 cc: call 0x401020; int3");
	is_int(tp_arch_emit_call_int3(out, 5, PC, PC + 0x20, &n), -ENOSPC,
	       "emit_call_int3 into 5 bytes: -ENOSPC");
}

static void test_return_stub(void)
{
	/* At 0x7f0000001000 for the record at 0x7f0000002000 (rec). */
	static const uint8_t want[] = {
	    0x48, 0x89, 0x05, 0x11, 0x10, 0x00, 0x00,	    /* mov [rec+RAX], rax */
	    0x48, 0x89, 0x15, 0x12, 0x10, 0x00, 0x00,	    /* mov [rec+RDX], rdx */
	    0x66, 0x0f, 0xd6, 0x05, 0x12, 0x10, 0x00, 0x00, /* movq [rec+XMM0], xmm0 */
	    0x0f, 0x31,					    /* rdtsc */
	    0x89, 0x05, 0x12, 0x10, 0x00, 0x00,		    /* mov [rec+TSC], eax */
	    0x89, 0x15, 0x10, 0x10, 0x00, 0x00,		    /* mov [rec+TSC+4], edx */
	    0x48, 0x8b, 0x05, 0xe5, 0x0f, 0x00, 0x00,	    /* mov rax, [rec+ERRNO_AT] */
	    0x8b, 0x00,					    /* mov eax, [rax] */
	    0x89, 0x05, 0x05, 0x10, 0x00, 0x00,		    /* mov [rec+ERRNO], eax */
	    0x48, 0x8b, 0x05, 0xde, 0x0f, 0x00, 0x00,	    /* mov rax, [rec+RAX] */
	    0x48, 0x8b, 0x15, 0xdf, 0x0f, 0x00, 0x00,	    /* mov rdx, [rec+RDX] */
	    0xff, 0x35, 0xc1, 0x0f, 0x00, 0x00,		    /* push [rec+RET] */
	    0xc7, 0x05, 0xaf, 0x0f, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, /* mov dword [rec], 1 */
	    0xc3,							/* ret */
	};
	/* bp's layout (src/bp/rstub.h) */
	static const struct tp_arch_rstub_layout layout = {.done = 0,
							   .ret = 8,
							   .errno_at = 16,
							   .rax = 24,
							   .rdx = 32,
							   .xmm0 = 40,
							   .tsc = 48,
							   .err = 56};
	uint8_t out[128];
	size_t n = 0;

	is_int(tp_arch_emit_return_stub(out, sizeof(out), 0x7f0000001000ull, 0x7f0000002000ull,
					&layout, &n),
	       0, "return stub");
	ok(same_bytes(out, n, want, sizeof(want)), "return stub: bytes");
	is_int(tp_arch_emit_return_stub(out, 40, 0x7f0000001000ull, 0x7f0000002000ull, &layout, &n),
	       -ENOSPC, "return stub in 40 bytes: -ENOSPC");
	is_int(
	    tp_arch_emit_return_stub(out, sizeof(out), 0x7f0000001000ull, 0x100000ull, &layout, &n),
	    -EINVAL, "return stub with its record > 2 GiB away: -EINVAL");
}

int main(void)
{
	test_simple();
	test_push();
	test_branches();
	test_far();
	test_labels();
	test_rel8_reach();
	test_errors();
	test_emit();
	test_return_stub();
	return tap_done();
}
