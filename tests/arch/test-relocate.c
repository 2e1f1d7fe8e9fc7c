/* Golden-byte tests of tp_arch_relocate and tp_arch_emit_jmp, including targets beyond
 * +-2 GiB, and relocated copies of real code run from a page mapped near it. */
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arch/arch.h"
#include "tap.h"

#define FROM 0x401000ull /* a non-PIE text address: return addresses fit imm32 */
#define TO 0x402000ull
#define HIGH 0x7f1234560000ull /* a shared-library address */
#define FAR 0x7ff000000000ull  /* > 2 GiB from FROM */

static int relocate(const uint8_t *in, size_t n, uint64_t from, uint64_t to, uint8_t *out,
		    size_t *outlen)
{
	return tp_arch_relocate(in, n, from, to, out, 64, outlen);
}

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

#define GOLDEN(what, in, from, to, ...)                                                            \
	do {                                                                                       \
		static const uint8_t want_[] = {__VA_ARGS__};                                      \
		uint8_t out_[64];                                                                  \
		size_t n_ = 0;                                                                     \
		int err_ = relocate(in, sizeof(in), from, to, out_, &n_);                          \
		is_int(err_, 0, "%s: relocates", what);                                            \
		ok(same_bytes(out_, n_, want_, sizeof(want_)), "%s: bytes", what);                 \
	} while (0)

static void test_riprel(void)
{
	/* mov rax, qword ptr [rip+0x10]  -> operand at FROM + 7 + 0x10 = 0x401017 */
	static const uint8_t load[] = {0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00};
	/* mov dword ptr [rip+0x10], eax -> operand at 0x401016 */
	static const uint8_t store[] = {0x89, 0x05, 0x10, 0x00, 0x00, 0x00};
	/* mov dword ptr [rip+0x10], 0x2a -> operand at 0x40101a: disp is before an imm32 */
	static const uint8_t store_imm[] = {0xc7, 0x05, 0x10, 0x00, 0x00,
					    0x00, 0x2a, 0x00, 0x00, 0x00};
	/* cmp byte ptr [rip+0x10], 0x7 -> operand at 0x401017: disp before an imm8 */
	static const uint8_t cmp_imm8[] = {0x80, 0x3d, 0x10, 0x00, 0x00, 0x00, 0x07};
	/* vmovdqa ymm0, ymmword ptr [rip+0x100] -> operand at 0x401108 */
	static const uint8_t vload[] = {0xc5, 0xfd, 0x6f, 0x05, 0x00, 0x01, 0x00, 0x00};
	/* jmp qword ptr [rip+0x0] -> slot at 0x401006 */
	static const uint8_t jmpmem[] = {0xff, 0x25, 0x00, 0x00, 0x00, 0x00};
	/* call qword ptr [rip+0x10] -> slot at 0x401016 */
	static const uint8_t callmem[] = {0xff, 0x15, 0x10, 0x00, 0x00, 0x00};

	GOLDEN("rip-rel load", load, FROM, TO, 0x48, 0x8b, 0x05, 0x10, 0xf0, 0xff,
	       0xff); /* mov rax, [rip-0xff0] */
	GOLDEN("rip-rel load, moved down", load, FROM, FROM - 0x100, 0x48, 0x8b, 0x05, 0x10, 0x01,
	       0x00, 0x00); /* mov rax, [rip+0x110] */
	GOLDEN("rip-rel store", store, FROM, TO, 0x89, 0x05, 0x10, 0xf0, 0xff,
	       0xff); /* mov [rip-0xff0], eax */
	GOLDEN("rip-rel store imm32", store_imm, FROM, TO, 0xc7, 0x05, 0x10, 0xf0, 0xff,
	       0xff,			/* mov dword ptr [rip-0xff0], */
	       0x2a, 0x00, 0x00, 0x00); /*   0x2a */
	GOLDEN("rip-rel cmp imm8", cmp_imm8, FROM, TO, 0x80, 0x3d, 0x10, 0xf0, 0xff, 0xff,
	       0x07); /* cmp byte ptr [rip-0xff0], 7 */
	GOLDEN("rip-rel avx load", vload, FROM, TO, 0xc5, 0xfd, 0x6f, 0x05, 0x00, 0xf1, 0xff,
	       0xff); /* vmovdqa ymm0, [rip-0xf00] */
	GOLDEN("jmp [rip+x]", jmpmem, FROM, TO, 0xff, 0x25, 0x00, 0xf0, 0xff,
	       0xff); /* jmp qword ptr [rip-0x1000] */
	GOLDEN("call [rip+x]", callmem, FROM, TO, 0xff, 0x15, 0x10, 0xf0, 0xff,
	       0xff); /* call qword ptr [rip-0xff0] */

	/* Far but in reach: the copy still addresses the same operand and keeps its imm32. */
	{
		uint64_t to = FROM + 0x70000000;
		struct tp_insn orig, copy;
		uint8_t out[64];
		size_t n = 0;

		is_int(relocate(store_imm, sizeof(store_imm), FROM, to, out, &n), 0,
		       "store imm32 moved 1.75 GiB");
		tp_arch_decode(store_imm, sizeof(store_imm), FROM, &orig);
		is_int(tp_arch_decode(out, n, to, &copy), 0, "copy decodes");
		is_int(copy.target, orig.target, "copy addresses the same operand");
		ok(same_bytes(out + 6, n - 6, store_imm + 6, 4), "imm32 unchanged");
	}
}

static void test_unchanged(void)
{
	static const uint8_t ret[] = {0xc3};		     /* ret */
	static const uint8_t syscall[] = {0x0f, 0x05};	     /* syscall */
	static const uint8_t jmpreg[] = {0x3e, 0xff, 0xe0};  /* notrack jmp rax */
	static const uint8_t callreg[] = {0x41, 0xff, 0xd3}; /* call r11 */
	static const uint8_t movabs[] = {0x48, 0xb8, 0x88, 0x77, 0x66,
					 0x55, 0x44, 0x33, 0x22, 0x11}; /* movabs rax, imm64 */
	static const uint8_t rep[] = {0xf3, 0x48, 0xa5};		/* rep movsq */
	static const uint8_t endbr[] = {0xf3, 0x0f, 0x1e, 0xfa};	/* endbr64 */

	GOLDEN("ret", ret, FROM, FAR, 0xc3);
	GOLDEN("syscall", syscall, FROM, FAR, 0x0f, 0x05);
	GOLDEN("jmp reg", jmpreg, FROM, FAR, 0x3e, 0xff, 0xe0);
	GOLDEN("call reg", callreg, FROM, FAR, 0x41, 0xff, 0xd3);
	GOLDEN("movabs", movabs, FROM, FAR, 0x48, 0xb8, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22,
	       0x11);
	GOLDEN("rep movsq", rep, FROM, FAR, 0xf3, 0x48, 0xa5);
	GOLDEN("endbr64", endbr, FROM, FAR, 0xf3, 0x0f, 0x1e, 0xfa);
}

static void test_branches(void)
{
	/* jmp rel8 +0x10 -> 0x401012 */
	static const uint8_t jmp8[] = {0xeb, 0x10};
	/* jmp rel32 +0x100 -> 0x401105 */
	static const uint8_t jmp32[] = {0xe9, 0x00, 0x01, 0x00, 0x00};
	/* bnd jmp rel32 +0x100 -> 0x401106 */
	static const uint8_t bndjmp[] = {0xf2, 0xe9, 0x00, 0x01, 0x00, 0x00};
	/* jz rel8 -2 -> 0x401000 */
	static const uint8_t jz8[] = {0x74, 0xfe};
	/* jg rel8 +0x20 -> 0x401022 */
	static const uint8_t jg8[] = {0x7f, 0x20};
	/* jnz rel32 +0x100 -> 0x401106 */
	static const uint8_t jnz32[] = {0x0f, 0x85, 0x00, 0x01, 0x00, 0x00};
	/* ds jno rel8 +0x10 (branch-hint prefix) -> 0x401013 */
	static const uint8_t hinted[] = {0x3e, 0x71, 0x10};
	/* xbegin rel32 +0x100 -> 0x401106 */
	static const uint8_t xbegin[] = {0xc7, 0xf8, 0x00, 0x01, 0x00, 0x00};
	/* loop rel8 -2 -> 0x401000 */
	static const uint8_t loop[] = {0xe2, 0xfe};
	/* jecxz rel8 +0x10 (67 prefix) -> 0x401013 */
	static const uint8_t jecxz[] = {0x67, 0xe3, 0x10};

	GOLDEN("jmp rel8 widened", jmp8, FROM, TO, 0xe9, 0x0d, 0xf0, 0xff,
	       0xff); /* jmp 0x401012 (rel32 -0xff3) */
	GOLDEN("jmp rel32", jmp32, FROM, TO, 0xe9, 0x00, 0xf1, 0xff,
	       0xff); /* jmp 0x401105 (rel32 -0xf00) */
	GOLDEN("bnd jmp loses its prefix", bndjmp, FROM, TO, 0xe9, 0x01, 0xf1, 0xff,
	       0xff); /* jmp 0x401106 */
	GOLDEN("jz rel8 widened", jz8, FROM, TO, 0x0f, 0x84, 0xfa, 0xef, 0xff,
	       0xff); /* jz 0x401000 (rel32 -0x1006) */
	GOLDEN("jg rel8 widened", jg8, FROM, TO, 0x0f, 0x8f, 0x1c, 0xf0, 0xff,
	       0xff); /* jg 0x401022 (rel32 -0xfe4) */
	GOLDEN("jnz rel32", jnz32, FROM, TO, 0x0f, 0x85, 0x00, 0xf1, 0xff, 0xff); /* jnz 0x401106 */
	GOLDEN("hinted jno", hinted, FROM, TO, 0x0f, 0x81, 0x0d, 0xf0, 0xff,
	       0xff); /* jno 0x401013 */
	GOLDEN("xbegin", xbegin, FROM, TO, 0xc7, 0xf8, 0x00, 0xf1, 0xff,
	       0xff);					    /* xbegin 0x401106 */
	GOLDEN("loop hop-over", loop, FROM, TO, 0xe2, 0x02, /* loop +2 (to the jmp rel32) */
	       0xeb, 0x05,		      /* jmp short over it (not taken: fall through) */
	       0xe9, 0xf7, 0xef, 0xff, 0xff); /* jmp 0x401000 (from 0x402009) */
	GOLDEN("jecxz hop-over keeps 67", jecxz, FROM, TO, 0x67, 0xe3, 0x02, /* jecxz +2 */
	       0xeb, 0x05,						     /* jmp short +5 */
	       0xe9, 0x09, 0xf0, 0xff, 0xff); /* jmp 0x401013 (from 0x40200a) */
}

static void test_call(void)
{
	/* call rel32 +0x100 -> 0x401105, returns to 0x401005 */
	static const uint8_t call[] = {0xe8, 0x00, 0x01, 0x00, 0x00};
	uint8_t out[64];
	size_t n;
	struct tp_insn in;
	uint64_t ret = HIGH + 5, pushed = 0;
	uint32_t half;

	GOLDEN("call, low return address", call, FROM, TO, 0x68, 0x05, 0x10, 0x40,
	       0x00,			      /* push 0x401005 */
	       0xe9, 0xfb, 0xf0, 0xff, 0xff); /* jmp 0x401105 (rel32 -0xf05 from 0x40200a) */

	/* From a shared library: the return address needs all 64 bits. */
	is_int(relocate(call, sizeof(call), HIGH, HIGH + 0x10000, out, &n), 0, "call high");
	is_int(n, 25, "call high: 25 bytes");
	/* lea rsp, [rsp-8] */
	is_int(tp_arch_decode(out, n, HIGH + 0x10000, &in), 0, "lea decodes");
	is_str(tp_arch_mnemonic_name(in.mnemonic), "lea", "first is lea (no flags)");
	is_int(in.len, 5, "lea length");
	ok(same_bytes(out, 5, (const uint8_t[]){0x48, 0x8d, 0x64, 0x24, 0xf8}, 5),
	   "lea rsp, [rsp-8]");
	/* mov dword ptr [rsp], lo32 */
	is_int(tp_arch_decode(out + 5, n - 5, 0, &in), 0, "mov lo decodes");
	is_str(tp_arch_mnemonic_name(in.mnemonic), "mov", "second is mov");
	is_int(in.len, 7, "mov lo length");
	ok(same_bytes(out + 5, 3, (const uint8_t[]){0xc7, 0x04, 0x24}, 3), "mov dword [rsp]");
	memcpy(&half, out + 8, 4);
	pushed = half;
	/* mov dword ptr [rsp+4], hi32 */
	is_int(tp_arch_decode(out + 12, n - 12, 0, &in), 0, "mov hi decodes");
	is_int(in.len, 8, "mov hi length");
	ok(same_bytes(out + 12, 4, (const uint8_t[]){0xc7, 0x44, 0x24, 0x04}, 4),
	   "mov dword [rsp+4]");
	memcpy(&half, out + 16, 4);
	pushed |= (uint64_t)half << 32;
	is_int(pushed, ret, "pushed value is the original return address");
	/* jmp rel32 to the original target */
	is_int(tp_arch_decode(out + 20, n - 20, HIGH + 0x10000 + 20, &in), 0, "jmp decodes");
	is_int(in.kind, TP_INSN_JMP, "last is jmp");
	is_int(in.len, 5, "jmp rel32");
	is_int(in.target, HIGH + 5 + 0x100, "jmp goes to the call target");

	/* A negative imm32 would sign-extend to a kernel address: never use push there. */
	is_int(relocate(call, sizeof(call), 0x80000000ull, 0x80001000ull, out, &n), 0,
	       "call at 2 GiB");
	is_int(n, 25, "call at 2 GiB: return address 0x80000005 needs the long form");
}

static void test_errors(void)
{
	static const uint8_t load[] = {0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00};
	static const uint8_t jmp8[] = {0xeb, 0x10};
	static const uint8_t jz8[] = {0x74, 0x10};
	static const uint8_t call[] = {0xe8, 0x00, 0x01, 0x00, 0x00};
	static const uint8_t loop[] = {0xe2, 0xfe};
	static const uint8_t jmpmem[] = {0xff, 0x25, 0x00, 0x00, 0x00, 0x00};
	/* mov eax, dword ptr [eip+0x10] */
	static const uint8_t eiprel[] = {0x67, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00};
	/* xbegin rel16 */
	static const uint8_t xbegin16[] = {0x66, 0xc7, 0xf8, 0x00, 0x01};
	/* push es: invalid in 64-bit mode */
	static const uint8_t invalid[] = {0x06};
	uint8_t out[64];
	size_t n;

	is_int(relocate(load, sizeof(load), FROM, FAR, out, &n), -ERANGE, "rip-rel > 2 GiB");
	is_int(relocate(jmp8, sizeof(jmp8), FROM, FAR, out, &n), -ERANGE, "jmp > 2 GiB");
	is_int(relocate(jz8, sizeof(jz8), FROM, FAR, out, &n), -ERANGE, "jcc > 2 GiB");
	is_int(relocate(call, sizeof(call), FROM, FAR, out, &n), -ERANGE, "call > 2 GiB");
	is_int(relocate(loop, sizeof(loop), FROM, FAR, out, &n), -ERANGE, "loop > 2 GiB");
	is_int(relocate(jmpmem, sizeof(jmpmem), FROM, FAR, out, &n), -ERANGE, "jmp [rip] > 2 GiB");
	/* Exactly at the edge: a disp of INT32_MAX still fits, one more does not. */
	is_int(relocate(load, sizeof(load), FROM, FROM + 0x17 - 7 - 0x7fffffffull, out, &n), 0,
	       "rip-rel at +2 GiB - 1");
	is_int(relocate(load, sizeof(load), FROM + 0x100000000ull,
			FROM + 0x100000000ull + 0x17 - 7 + 0x80000000ull, out, &n),
	       0, "rip-rel at -2 GiB");
	is_int(relocate(load, sizeof(load), FROM, FROM + 0x17 - 7 - 0x80000000ull, out, &n),
	       -ERANGE, "rip-rel at +2 GiB");

	is_int(relocate(eiprel, sizeof(eiprel), FROM, TO, out, &n), -ENOTSUP, "eip-relative");
	is_int(relocate(xbegin16, sizeof(xbegin16), FROM, TO, out, &n), -ENOTSUP, "xbegin rel16");
	is_int(relocate(invalid, sizeof(invalid), FROM, TO, out, &n), -EINVAL, "invalid bytes");
	is_int(relocate(load, 3, FROM, TO, out, &n), -EINVAL, "truncated");
	is_int(tp_arch_relocate(NULL, 4, FROM, TO, out, 64, &n), -EINVAL, "NULL input");

	is_int(tp_arch_relocate(load, sizeof(load), FROM, TO, out, 6, &n), -ENOSPC,
	       "rip-rel: no room");
	is_int(tp_arch_relocate(jz8, sizeof(jz8), FROM, TO, out, 5, &n), -ENOSPC,
	       "jcc widened: no room");
	is_int(tp_arch_relocate(jz8, sizeof(jz8), FROM, TO, out, 6, &n), 0, "jcc: exact room");
	is_int(tp_arch_relocate(call, sizeof(call), FROM, TO, out, 9, &n), -ENOSPC,
	       "call: no room");
	is_int(tp_arch_relocate(call, sizeof(call), HIGH, HIGH, out, 24, &n), -ENOSPC,
	       "call high: no room");
}

static void test_emit_jmp(void)
{
	uint8_t out[5];

	is_int(tp_arch_emit_jmp(out, FROM, TO), 0, "emit jmp");
	/* jmp 0x402000 from 0x401000: rel32 0xffb */
	ok(same_bytes(out, 5, (const uint8_t[]){0xe9, 0xfb, 0x0f, 0x00, 0x00}, 5), "jmp bytes");
	is_int(tp_arch_emit_jmp(out, TO, FROM), 0, "emit jmp backwards");
	/* jmp 0x401000 from 0x402000: rel32 -0x1005 */
	ok(same_bytes(out, 5, (const uint8_t[]){0xe9, 0xfb, 0xef, 0xff, 0xff}, 5),
	   "backward jmp bytes");
	is_int(tp_arch_emit_jmp(out, FROM, FAR), -ERANGE, "jmp > 2 GiB");
	is_int(tp_arch_emit_jmp(out, FAR, FROM), -ERANGE, "jmp > 2 GiB backwards");
}

/*
 * Code to relocate and run.  A tiny leaf of each kind, with its data, in this object so that
 * a page mapped near it can reach both.
 */
__asm__(".pushsection .text\n"
	".p2align 4\n"
	"rt_load:\n"
	"	movq rt_value(%rip), %rax\n"
	"	ret\n"
	"rt_store:\n"
	"	movq %rdi, rt_value(%rip)\n"
	"	ret\n"
	"rt_callsite:\n"
	"	call rt_getret\n"
	"	ret\n"
	"rt_getret:\n"
	"	movq (%rsp), %rax\n"
	"	ret\n"
	"rt_jcc:\n"
	"	xorl %eax, %eax\n"
	"	testq %rdi, %rdi\n"
	"	jz 1f\n"
	"	movl $1, %eax\n"
	"	ret\n"
	"1:	movl $2, %eax\n"
	"	ret\n"
	"rt_loop:\n"
	"	xorl %eax, %eax\n"
	"	movq %rdi, %rcx\n"
	"2:	incl %eax\n"
	"	loop 2b\n"
	"	ret\n"
	".popsection\n"
	".pushsection .data\n"
	".p2align 3\n"
	"rt_value: .quad 0x1122334455667788\n"
	".popsection\n");

extern const uint8_t rt_load[], rt_store[], rt_callsite[], rt_jcc[], rt_loop[];
extern uint64_t rt_value;

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
			munmap(p, page); /* a kernel that took the flag as a hint */
		}
	}
	return NULL;
}

/*
 * Relocate @count instructions of @src, from offset *@off, into @pad at offset @at; advances
 * *@off past them and returns the new @at.  Errors accumulate in *@err.
 */
static size_t copy_insns(uint8_t *pad, size_t at, const uint8_t *src, size_t *off, int count,
			 int *err)
{
	while (count-- > 0) {
		struct tp_insn in;
		size_t n = 0;
		int e;

		e = tp_arch_decode(src + *off, TP_ARCH_MAX_INSN_LEN, (uintptr_t)src + *off, &in);
		if (!e)
			e = tp_arch_relocate(src + *off, in.len, (uintptr_t)src + *off,
					     (uintptr_t)pad + at, pad + at, 64, &n);
		if (e && !*err)
			*err = e;
		if (e)
			return at;
		*off += in.len;
		at += n;
	}
	return at;
}

/* Skip @count instructions of @src from offset *@off. */
static void skip_insns(const uint8_t *src, size_t *off, int count)
{
	struct tp_insn in;

	while (count-- > 0 && !tp_arch_decode(src + *off, TP_ARCH_MAX_INSN_LEN, 0, &in))
		*off += in.len;
}

static int seal(uint8_t *pad)
{
	return mprotect(pad, sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC);
}

static int unseal(uint8_t *pad)
{
	return mprotect(pad, sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE);
}

static void test_run(void)
{
	uint8_t *pad = map_near((uintptr_t)rt_load);
	size_t at, off;
	int err;

	ok(pad != NULL, "page mapped within 1 GiB of the test code");
	if (!pad)
		return;

	/* mov rax, [rip+rt_value] relocated, then ret. */
	off = 0, err = 0;
	at = copy_insns(pad, 0, rt_load, &off, 1, &err);
	is_int(err, 0, "relocate load");
	ok(at == 7 && pad[2] == 0x05, "load copied as mov rax, [rip+disp32]");
	pad[at] = 0xc3;
	is_int(seal(pad), 0, "W^X: page made executable");
	is_int(((uint64_t(*)(void))pad)(), 0x1122334455667788ull, "relocated load reads rt_value");

	/* mov [rip+rt_value], rdi relocated, then ret. */
	unseal(pad);
	off = 0, err = 0;
	at = copy_insns(pad, 0, rt_store, &off, 1, &err);
	is_int(err, 0, "relocate store");
	pad[at] = 0xc3;
	seal(pad);
	((void (*)(uint64_t))pad)(0xcafef00d);
	is_int(rt_value, 0xcafef00d, "relocated store wrote rt_value");

	/* call rt_getret expanded: the callee reads, then returns to, the original return
	 * address, whose ret returns here. */
	unseal(pad);
	off = 0, err = 0;
	at = copy_insns(pad, 0, rt_callsite, &off, 1, &err);
	is_int(err, 0, "relocate call");
	is_int(at, (uintptr_t)rt_callsite + 5 > 0x7fffffff ? 25 : 10, "call expansion length");
	seal(pad);
	is_int(((uint64_t(*)(void))pad)(), (uintptr_t)rt_callsite + 5,
	       "callee saw the original return address");

	/* xor; test; jz rel8 widened to rel32 (taken: back into the original), then a jmp to the
	 * original fall-through. */
	unseal(pad);
	off = 0, err = 0;
	at = copy_insns(pad, 0, rt_jcc, &off, 3, &err);
	is_int(err, 0, "relocate xor, test, jz");
	ok(at >= 6 && pad[at - 6] == 0x0f && pad[at - 5] == 0x84, "jz widened to 0f 84");
	is_int(tp_arch_emit_jmp(pad + at, (uintptr_t)pad + at, (uintptr_t)rt_jcc + off), 0,
	       "jmp back");
	seal(pad);
	is_int(((int (*)(uint64_t))pad)(0), 2, "relocated jz taken");
	is_int(((int (*)(uint64_t))pad)(7), 1, "relocated jz not taken");

	/* xor eax, eax; loop through the hop-over sequence (taken: into the original loop body),
	 * then a jmp to the original ret.  The copy leaves out "mov rcx, rdi; inc eax", so rcx
	 * comes in as the fourth argument and the count is one less. */
	unseal(pad);
	off = 0, err = 0;
	at = copy_insns(pad, 0, rt_loop, &off, 1, &err);
	skip_insns(rt_loop, &off, 2);
	at = copy_insns(pad, at, rt_loop, &off, 1, &err);
	is_int(err, 0, "relocate xor, loop");
	is_int(tp_arch_emit_jmp(pad + at, (uintptr_t)pad + at, (uintptr_t)rt_loop + off), 0,
	       "jmp to ret");
	seal(pad);
	is_int(((int (*)(long, long, long, long))pad)(0, 0, 0, 4), 3, "loop taken 3 times");
	is_int(((int (*)(long, long, long, long))pad)(0, 0, 0, 1), 0, "loop not taken");

	munmap(pad, sysconf(_SC_PAGESIZE));
}

int main(void)
{
	test_riprel();
	test_unchanged();
	test_branches();
	test_call();
	test_errors();
	test_emit_jmp();
	test_run();
	return tap_done();
}
