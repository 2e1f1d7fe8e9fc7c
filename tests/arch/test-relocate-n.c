/* Golden-byte tests of tp_arch_relocate_n: several instructions moved at once, rel8 branches
 * widened, RIP-relative operands and calls re-aimed, and the refusals (a branch of the
 * function into the range, out of reach, past the function's end, undecodable bytes). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arch/arch.h"
#include "tap.h"

#define FN 0x401000ull
#define TO 0x500000ull
#define FAR 0x7ff000000000ull /* > 2 GiB from FN */

/* The function under test, then padding that belongs to no function. */
static const uint8_t fn_code[] = {
    0x55,					    /* 401000: push rbp */
    0x48, 0x89, 0xe5,				    /* 401001: mov rbp, rsp */
    0x85, 0xff,					    /* 401004: test edi, edi */
    0x74, 0x0c,					    /* 401006: jz 0x401014 */
    0x48, 0x8b, 0x05, 0xf1, 0x0f, 0x00, 0x00,	    /* 401008: mov rax, [rip+0xff1] (0x402000) */
    0xe8, 0xec, 0x0f, 0x00, 0x00,		    /* 40100f: call 0x402000 */
    0xe2, 0xea,					    /* 401014: loop 0x401000 */
    0x5d,					    /* 401016: pop rbp */
    0xc3,					    /* 401017: ret */
    0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, /* padding */
};
#define FN_LEN 0x18

static const struct tp_arch_fn fn = {.code = fn_code, .len = FN_LEN, .addr = FN};

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

static uint8_t out[256];
static struct tp_arch_reloc res;

/* Relocate @n bytes of the function from FN + @off to @to. */
static int reloc(uint64_t off, size_t n, uint64_t to, const struct tp_arch_fn *f, size_t *len)
{
	struct tp_arch_writer w;
	int err;

	memset(out, 0, sizeof(out));
	tp_arch_writer_init(&w, out, sizeof(out), to);
	err = tp_arch_relocate_n(&w, fn_code + off, sizeof(fn_code) - off, FN + off, n, f, &res);
	if (!err)
		err = tp_arch_writer_finish(&w, len);
	return err;
}

/* Relocate @n bytes at FN + @off to TO: @cov bytes are covered, @want is written. */
static void golden(const char *what, uint64_t off, size_t n, size_t cov, const uint8_t *want,
		   size_t wantlen)
{
	size_t len = 0;

	is_int(reloc(off, n, TO, &fn, &len), 0, "%s: relocates", what);
	is_int(res.covered, cov, "%s: covers %zu bytes", what, cov);
	ok(same_bytes(out, len, want, wantlen), "%s: bytes", what);
}

static void test_moves(void)
{
	{
		static const uint8_t want[] = {
		    0x55,	      /* 500000: push rbp */
		    0x48, 0x89, 0xe5, /* 500001: mov rbp, rsp */
		    0x85, 0xff,	      /* 500004: test edi, edi */
		};

		golden("prologue", 0, 5, 6, want, sizeof(want));
	}
	is_int(res.ninsn, 3, "prologue: 3 instructions");
	ok(res.falls_through, "prologue: falls through");

	{
		static const uint8_t want[] = {
		    0x85, 0xff,				      /* 500000: test edi, edi */
		    0x0f, 0x84, 0x0c, 0x10, 0xf0, 0xff,	      /* 500002: jz 0x401014 */
		    0x48, 0x8b, 0x05, 0xf1, 0x1f, 0xf0, 0xff, /* 500008: mov rax, [0x402000] */
		};

		golden("jz rel8 widened, rip-relative re-aimed", 4, 5, 11, want, sizeof(want));
	}

	{
		static const uint8_t want[] = {
		    0x68, 0x14, 0x10, 0x40, 0x00, /* 500000: push 0x401014 */
		    0xe9, 0xf6, 0x1f, 0xf0, 0xff, /* 500005: jmp 0x402000 */
		};

		golden("call becomes push + jmp", 0xf, 5, 5, want, sizeof(want));
	}

	/* The loop's own target is the function's start: a branch to the range's first byte is
	 * no branch into it (it reaches the patched jump, which is fine). */
	{
		static const uint8_t want[] = {
		    0xe2, 0x02,			  /* 500000: loop 0x500004 */
		    0xeb, 0x05,			  /* 500002: jmp 0x500009 */
		    0xe9, 0xf7, 0x0f, 0xf0, 0xff, /* 500004: jmp 0x401000 */
		    0x5d,			  /* 500009: pop rbp */
		};

		golden("loop widened by a hop", 0x14, 3, 3, want, sizeof(want));
	}

	{
		static const uint8_t want[] = {
		    0x5d, /* 500000: pop rbp */
		    0xc3, /* 500001: ret */
		};

		golden("epilogue", 0x16, 2, 2, want, sizeof(want));
	}
	ok(!res.falls_through, "epilogue: ends in ret, no jump back needed");
}

static void test_refusals(void)
{
	size_t len;
	struct tp_arch_writer w;
	uint8_t small[4];
	static const uint8_t self[] = {
	    0xeb, 0x01, /* 0: jmp 3 */
	    0x90,	/* 2: nop */
	    0x90,	/* 3: nop */
	    0xc3,	/* 4: ret */
	};
	static const uint8_t invalid[] = {0x06, 0x90, 0x90, 0x90, 0x90}; /* push es */

	is_int(reloc(0, FN_LEN, TO, &fn, &len), -EBUSY, "whole function: -EBUSY");
	is_int(res.why, TP_RELOC_BRANCH_INTO, "whole function: its jz lands inside");
	is_int(res.where, 0x401006, "whole function: the jz at 0x401006 is the reason");

	is_int(reloc(0xf, 6, TO, &fn, &len), -EBUSY, "call + loop: -EBUSY");
	is_int(res.where, 0x401006, "call + loop: jz 0x401014 from before the range lands inside");

	is_int(reloc(0x8, 5, FAR, &fn, &len), -ERANGE, "rip-relative from > 2 GiB: -ERANGE");
	is_int(res.why, TP_RELOC_REACH, "rip-relative from > 2 GiB: out of reach");
	is_int(res.where, 0x401008, "rip-relative from > 2 GiB: at the mov");

	is_int(reloc(0xf, 5, FAR, &fn, &len), -ERANGE, "call from > 2 GiB: -ERANGE");
	is_int(res.why, TP_RELOC_REACH, "call from > 2 GiB: out of reach");

	is_int(reloc(0x16, 5, TO, &fn, &len), -ENOTSUP, "past the function's end: -ENOTSUP");
	is_int(res.why, TP_RELOC_FUNC_END, "past the function's end: refused");

	tp_arch_writer_init(&w, small, sizeof(small), TO);
	is_int(tp_arch_relocate_n(&w, fn_code + 0xf, 5, FN + 0xf, 5, &fn, &res), -ENOSPC,
	       "call into 4 bytes: -ENOSPC");
	is_int(res.why, TP_RELOC_SPACE, "call into 4 bytes: no space");

	tp_arch_writer_init(&w, out, sizeof(out), TO);
	is_int(tp_arch_relocate_n(&w, fn_code + 8, 4, FN + 8, 4, &fn, &res), -EINVAL,
	       "instruction cut short: -EINVAL");
	is_int(res.why, TP_RELOC_DECODE, "instruction cut short: cannot decode");

	tp_arch_writer_init(&w, out, sizeof(out), TO);
	is_int(tp_arch_relocate_n(&w, invalid, sizeof(invalid), FN, 5, NULL, &res), -EINVAL,
	       "push es: -EINVAL");
	is_int(res.why, TP_RELOC_DECODE, "push es: cannot decode");

	/* Without the function the range is still checked against itself. */
	tp_arch_writer_init(&w, out, sizeof(out), TO);
	is_int(tp_arch_relocate_n(&w, self, sizeof(self), FN, 4, NULL, &res), -EBUSY,
	       "jmp into its own range: -EBUSY");
	is_int(res.where, FN, "jmp into its own range: the jmp is the reason");
	tp_arch_writer_init(&w, out, sizeof(out), TO);
	is_int(tp_arch_relocate_n(&w, self, sizeof(self), FN, 2, NULL, &res), 0,
	       "jmp alone, target after the range: relocates");
	is_int(tp_arch_writer_finish(&w, &len), 0, "jmp alone: written");
	ok(same_bytes(out, len, (const uint8_t[]){0xe9, 0xfe, 0x0f, 0xf0, 0xff}, 5),
	   "  e9 fe 0f f0 ff: jmp 0x401003");
	ok(!res.falls_through, "jmp alone: does not fall through");
}

/* The single-instruction API is the same code: its results match. */
static void test_single(void)
{
	uint8_t one[64];
	size_t n1 = 0, n2 = 0;

	is_int(tp_arch_relocate(fn_code + 6, 2, FN + 6, TO, one, sizeof(one), &n1), 0,
	       "tp_arch_relocate jz");
	is_int(reloc(6, 1, TO, &fn, &n2), 0, "tp_arch_relocate_n jz");
	ok(n1 == n2 && !memcmp(one, out, n1), "same bytes from both");
}

/* Real code, relocated into a page near it and run. */
__asm__(".pushsection .text\n"
	".p2align 4\n"
	"rn_fn:\n" /* rdi ? rn_value + rdi : 7 */
	"	xorl %eax, %eax\n"
	"	testq %rdi, %rdi\n"
	"	jz 1f\n"
	"	movq rn_value(%rip), %rax\n"
	"	addq %rdi, %rax\n"
	"	ret\n"
	"1:	movl $7, %eax\n"
	"	ret\n"
	"rn_loop:\n" /* the loop branches back to its second instruction */
	"	xorl %eax, %eax\n"
	"2:	incl %eax\n"
	"	decq %rdi\n"
	"	jnz 2b\n"
	"	ret\n"
	"rn_end:\n"
	".popsection\n"
	".pushsection .data\n"
	".p2align 3\n"
	"rn_value: .quad 1000\n"
	".popsection\n");

extern const uint8_t rn_fn[], rn_loop[], rn_end[];

/* A page within +-1 GiB of @near, so rel32 from it reaches the test's text and data. */
static uint8_t *map_near(uintptr_t near)
{
	long page = sysconf(_SC_PAGESIZE);

	for (uintptr_t d = 1ul << 20; d < 1ul << 30; d += 1ul << 20) {
		for (int sign = -1; sign <= 1; sign += 2) {
			uintptr_t a = ((near & ~(uintptr_t)(page - 1)) + sign * (intptr_t)d);
			void *p = mmap((void *)a, page, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

			if (p == MAP_FAILED)
				continue;
			if (p == (void *)a)
				return p;
			munmap(p, page);
		}
	}
	return NULL;
}

static void test_run(void)
{
	struct tp_arch_fn f = {.code = rn_fn, .len = rn_loop - rn_fn, .addr = (uintptr_t)rn_fn};
	struct tp_arch_fn lf = {
	    .code = rn_loop, .len = rn_end - rn_loop, .addr = (uintptr_t)rn_loop};
	uint8_t *pad = map_near((uintptr_t)rn_fn);
	struct tp_arch_writer w;
	size_t len = 0;
	uint64_t (*fn_pad)(uint64_t);

	ok(pad != NULL, "page mapped within 1 GiB of the test code");
	if (!pad)
		return;
	/* The head of rn_fn (xor, test, jz: 7 bytes) moved, then a jump back. */
	tp_arch_writer_init(&w, pad, 256, (uintptr_t)pad);
	is_int(tp_arch_relocate_n(&w, rn_fn, f.len, f.addr, 6, &f, &res), 0, "rn_fn: relocates");
	is_int(res.covered, 7, "rn_fn: 7 bytes covered");
	ok(res.falls_through, "rn_fn: falls through");
	tp_arch_put_jmp(&w, f.addr + res.covered, TP_ARCH_BR_AUTO);
	is_int(tp_arch_writer_finish(&w, &len), 0, "rn_fn: jump back written");
	is_int(mprotect(pad, sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC), 0, "W^X: sealed");
	fn_pad = (uint64_t(*)(uint64_t))(uintptr_t)pad;
	is_int(fn_pad(0), 7, "relocated rn_fn(0): the widened jz is taken");
	is_int(fn_pad(5), 1005, "relocated rn_fn(5): falls through to the original");

	is_int(tp_arch_relocate_n(&w, rn_loop, lf.len, lf.addr, 5, &lf, &res), -EBUSY,
	       "rn_loop: the loop's jnz lands inside: -EBUSY");
	is_int(res.where, lf.addr + 7, "rn_loop: the jnz is the reason");
	munmap(pad, sysconf(_SC_PAGESIZE));
}

int main(void)
{
	test_moves();
	test_refusals();
	test_single();
	test_run();
	return tap_done();
}
