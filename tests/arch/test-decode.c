/* Golden tests of tp_arch_decode and friends: lengths, mnemonics, kinds, flags and
 * branch/RIP-relative fields of known byte sequences, and decoding from a SIGTRAP
 * handler as the agent does. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <ucontext.h>

#include "arch/arch.h"
#include "tap.h"

#define ADDR 0x401000ull

struct dcase {
	const char *what;
	uint8_t bytes[16];
	uint8_t n;
	uint8_t len;
	const char *mnemonic;
	uint8_t kind;
	uint8_t flags;
	uint8_t disp_offset;
	uint8_t imm_offset;
	uint8_t imm_size;
	uint64_t target;
	const char *text; /* Intel syntax at ADDR, or NULL */
};

#define B(...) {__VA_ARGS__}, sizeof((uint8_t[]){__VA_ARGS__})

static const struct dcase cases[] = {
    /* mov rbp, rsp */
    {"mov reg", B(0x48, 0x89, 0xe5), 3, "mov", TP_INSN_OTHER, 0, 0, 0, 0, 0, "mov rbp, rsp"},
    /* mov rax, qword ptr [rip+0x10] */
    {"mov rip-rel load", B(0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00), 7, "mov", TP_INSN_OTHER,
     TP_INSN_F_RIPREL, 3, 0, 0, ADDR + 7 + 0x10, NULL},
    /* lea rdi, [rip-0x20] */
    {"lea rip-rel", B(0x48, 0x8d, 0x3d, 0xe0, 0xff, 0xff, 0xff), 7, "lea", TP_INSN_OTHER,
     TP_INSN_F_RIPREL, 3, 0, 0, ADDR + 7 - 0x20, "lea rdi, [0x0000000000400FE7]"},
    /* mov dword ptr [rip+0x10], 1: the disp is followed by an imm32 */
    {"mov rip-rel store imm", B(0xc7, 0x05, 0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00), 10,
     "mov", TP_INSN_OTHER, TP_INSN_F_RIPREL, 2, 0, 0, ADDR + 10 + 0x10, NULL},
    /* call 0x401105 (rel32 0x100) */
    {"call rel32", B(0xe8, 0x00, 0x01, 0x00, 0x00), 5, "call", TP_INSN_CALL, TP_INSN_F_RELBR, 0, 1,
     4, ADDR + 5 + 0x100, "call 0x0000000000401105"},
    /* call qword ptr [rip+0x10] */
    {"call [rip+x]", B(0xff, 0x15, 0x10, 0x00, 0x00, 0x00), 6, "call", TP_INSN_CALL,
     TP_INSN_F_INDIRECT | TP_INSN_F_RIPREL, 2, 0, 0, ADDR + 6 + 0x10, NULL},
    /* call rax */
    {"call reg", B(0xff, 0xd0), 2, "call", TP_INSN_CALL, TP_INSN_F_INDIRECT, 0, 0, 0, 0,
     "call rax"},
    /* jmp 0x401012 (rel8 0x10) */
    {"jmp rel8", B(0xeb, 0x10), 2, "jmp", TP_INSN_JMP, TP_INSN_F_RELBR, 0, 1, 1, ADDR + 0x12, NULL},
    /* jmp 0x400ffb (rel32 -10) */
    {"jmp rel32 back", B(0xe9, 0xf6, 0xff, 0xff, 0xff), 5, "jmp", TP_INSN_JMP, TP_INSN_F_RELBR, 0,
     1, 4, ADDR + 5 - 10, NULL},
    /* jmp qword ptr [rip+0] (the PLT/-fno-plt form) */
    {"jmp [rip+x]", B(0xff, 0x25, 0x00, 0x00, 0x00, 0x00), 6, "jmp", TP_INSN_JMP,
     TP_INSN_F_INDIRECT | TP_INSN_F_RIPREL, 2, 0, 0, ADDR + 6, NULL},
    /* notrack jmp rax (switch tables under CET) */
    {"notrack jmp reg", B(0x3e, 0xff, 0xe0), 3, "jmp", TP_INSN_JMP, TP_INSN_F_INDIRECT, 0, 0, 0, 0,
     NULL},
    /* jz 0x401000 (rel8 -2: a jump to itself) */
    {"jcc rel8", B(0x74, 0xfe), 2, "jz", TP_INSN_JCC, TP_INSN_F_RELBR, 0, 1, 1, ADDR,
     "jz 0x0000000000401000"},
    /* jnz 0x401106 (rel32 0x100) */
    {"jcc rel32", B(0x0f, 0x85, 0x00, 0x01, 0x00, 0x00), 6, "jnz", TP_INSN_JCC, TP_INSN_F_RELBR, 0,
     2, 4, ADDR + 6 + 0x100, NULL},
    /* loop 0x401012 */
    {"loop", B(0xe2, 0x10), 2, "loop", TP_INSN_JCC, TP_INSN_F_RELBR, 0, 1, 1, ADDR + 0x12, NULL},
    /* jrcxz 0x401012 */
    {"jrcxz", B(0xe3, 0x10), 2, "jrcxz", TP_INSN_JCC, TP_INSN_F_RELBR, 0, 1, 1, ADDR + 0x12, NULL},
    /* ret */
    {"ret", B(0xc3), 1, "ret", TP_INSN_RET, 0, 0, 0, 0, 0, "ret"},
    /* rep ret (AMD branch-predictor idiom): not a string instruction */
    {"rep ret", B(0xf3, 0xc3), 2, "ret", TP_INSN_RET, 0, 0, 0, 0, 0, NULL},
    /* ret 8 */
    {"ret imm16", B(0xc2, 0x08, 0x00), 3, "ret", TP_INSN_RET, 0, 0, 0, 0, 0, NULL},
    /* syscall */
    {"syscall", B(0x0f, 0x05), 2, "syscall", TP_INSN_SYSCALL, 0, 0, 0, 0, 0, "syscall"},
    /* sysenter */
    {"sysenter", B(0x0f, 0x34), 2, "sysenter", TP_INSN_SYSCALL, 0, 0, 0, 0, 0, NULL},
    /* int 0x80 */
    {"int 0x80", B(0xcd, 0x80), 2, "int", TP_INSN_SYSCALL, 0, 0, 0, 0, 0, NULL},
    /* int3 */
    {"int3", B(0xcc), 1, "int3", TP_INSN_INT3, 0, 0, 0, 0, 0, "int3"},
    /* int 0x03 (two-byte form) */
    {"int 3", B(0xcd, 0x03), 2, "int", TP_INSN_INT, 0, 0, 0, 0, 0, NULL},
    /* ud2 */
    {"ud2", B(0x0f, 0x0b), 2, "ud2", TP_INSN_INT, 0, 0, 0, 0, 0, NULL},
    /* hlt */
    {"hlt", B(0xf4), 1, "hlt", TP_INSN_INT, 0, 0, 0, 0, 0, NULL},
    /* rep movsb */
    {"rep movsb", B(0xf3, 0xa4), 2, "movsb", TP_INSN_OTHER, TP_INSN_F_REP, 0, 0, 0, 0, "rep movsb"},
    /* movsb (no prefix) */
    {"movsb", B(0xa4), 1, "movsb", TP_INSN_OTHER, 0, 0, 0, 0, 0, NULL},
    /* repne scasb */
    {"repne scasb", B(0xf2, 0xae), 2, "scasb", TP_INSN_OTHER, TP_INSN_F_REP, 0, 0, 0, 0,
     "repne scasb"},
    /* rep stosq */
    {"rep stosq", B(0xf3, 0x48, 0xab), 3, "stosq", TP_INSN_OTHER, TP_INSN_F_REP, 0, 0, 0, 0, NULL},
    /* pause (f3 90): an f3 prefix that is no rep */
    {"pause", B(0xf3, 0x90), 2, "pause", TP_INSN_OTHER, 0, 0, 0, 0, 0, NULL},
    /* endbr64 */
    {"endbr64", B(0xf3, 0x0f, 0x1e, 0xfa), 4, "endbr64", TP_INSN_OTHER, 0, 0, 0, 0, 0, "endbr64"},
    /* push rbp */
    {"push", B(0x55), 1, "push", TP_INSN_OTHER, 0, 0, 0, 0, 0, "push rbp"},
    /* pop r12 */
    {"pop r12", B(0x41, 0x5c), 2, "pop", TP_INSN_OTHER, 0, 0, 0, 0, 0, "pop r12"},
    /* nop */
    {"nop", B(0x90), 1, "nop", TP_INSN_OTHER, 0, 0, 0, 0, 0, "nop"},
    /* xchg ax, ax (66 90) */
    {"nop2", B(0x66, 0x90), 2, "nop", TP_INSN_OTHER, 0, 0, 0, 0, 0, NULL},
    /* nop dword ptr [rax+rax*1+0x0] (NOP5, the marker-site nop) */
    {"nop5", B(0x0f, 0x1f, 0x44, 0x00, 0x00), 5, "nop", TP_INSN_OTHER, 0, 0, 0, 0, 0, NULL},
    /* nop word ptr cs:[rax+rax*1+0x0] */
    {"nop10", B(0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00), 10, "nop",
     TP_INSN_OTHER, 0, 0, 0, 0, 0, NULL},
    /* vmovdqa ymm0, ymmword ptr [rip+0x100] (VEX, RIP-relative) */
    {"avx rip-rel", B(0xc5, 0xfd, 0x6f, 0x05, 0x00, 0x01, 0x00, 0x00), 8, "vmovdqa", TP_INSN_OTHER,
     TP_INSN_F_RIPREL, 4, 0, 0, ADDR + 8 + 0x100, NULL},
    /* vpaddd ymm0, ymm1, ymm2 */
    {"avx2", B(0xc5, 0xf5, 0xfe, 0xc2), 4, "vpaddd", TP_INSN_OTHER, 0, 0, 0, 0, 0,
     "vpaddd ymm0, ymm1, ymm2"},
    /* vaddps zmm0, zmm1, zmm2 (EVEX) */
    {"avx512", B(0x62, 0xf1, 0x74, 0x48, 0x58, 0xc2), 6, "vaddps", TP_INSN_OTHER, 0, 0, 0, 0, 0,
     NULL},
    /* xbegin 0x401106: its abort path is a conditional relative branch */
    {"xbegin", B(0xc7, 0xf8, 0x00, 0x01, 0x00, 0x00), 6, "xbegin", TP_INSN_JCC, TP_INSN_F_RELBR, 0,
     2, 4, ADDR + 6 + 0x100, NULL},
    /* lock cmpxchg qword ptr [rip+0x8], rcx */
    {"lock cmpxchg rip-rel", B(0xf0, 0x48, 0x0f, 0xb1, 0x0d, 0x08, 0x00, 0x00, 0x00), 9, "cmpxchg",
     TP_INSN_OTHER, TP_INSN_F_RIPREL, 5, 0, 0, ADDR + 9 + 8, NULL},
    /* mov rax, fs:[0x28] (stack protector): absolute, not RIP-relative */
    {"mov fs abs", B(0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00), 9, "mov", TP_INSN_OTHER,
     0, 0, 0, 0, 0, "mov rax, fs:[0x0000000000000028]"},
};

static void test_cases(void)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct dcase *c = &cases[i];
		struct tp_insn in;
		char text[128];
		int err;

		err = tp_arch_decode(c->bytes, c->n, ADDR, &in);
		is_int(err, 0, "%s: decodes", c->what);
		is_int(in.len, c->len, "%s: length", c->what);
		is_str(tp_arch_mnemonic_name(in.mnemonic), c->mnemonic, "%s: mnemonic", c->what);
		is_int(in.kind, c->kind, "%s: kind", c->what);
		is_int(in.flags, c->flags, "%s: flags", c->what);
		if (c->flags & TP_INSN_F_RIPREL)
			is_int(in.disp_offset, c->disp_offset, "%s: disp offset", c->what);
		if (c->flags & TP_INSN_F_RELBR) {
			is_int(in.imm_offset, c->imm_offset, "%s: rel offset", c->what);
			is_int(in.imm_size, c->imm_size, "%s: rel size", c->what);
		}
		if (c->flags & (TP_INSN_F_RELBR | TP_INSN_F_RIPREL))
			is_int(in.target, c->target, "%s: target", c->what);
		if (c->text) {
			err = tp_arch_format(c->bytes, c->n, ADDR, text, sizeof(text));
			is_int(err, 0, "%s: formats", c->what);
			is_str(text, c->text, "%s: text", c->what);
		}
	}
}

static void test_trailing_bytes(void)
{
	/* push rbp; mov rbp, rsp: only the first instruction is decoded */
	static const uint8_t prologue[] = {0x55, 0x48, 0x89, 0xe5};
	struct tp_insn in;

	is_int(tp_arch_decode(prologue, sizeof(prologue), ADDR, &in), 0, "prologue decodes");
	is_int(in.len, 1, "prologue: first instruction only");
	is_int(tp_arch_decode(prologue + 1, sizeof(prologue) - 1, ADDR + 1, &in), 0,
	       "second instruction decodes");
	is_int(in.len, 3, "second instruction length");
}

static void test_errors(void)
{
	/* 06: push es, invalid in 64-bit mode */
	static const uint8_t invalid[] = {0x06, 0x90};
	/* mov rax, [rip+disp32] cut after two bytes */
	static const uint8_t cut[] = {0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00};
	/* 15 prefixes then nop: 16 bytes, over the architectural limit */
	static const uint8_t toolong[] = {0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66,
					  0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x90};
	struct tp_insn in;
	char text[64];

	is_int(tp_arch_decode(invalid, sizeof(invalid), ADDR, &in), -EINVAL, "invalid opcode");
	is_int(tp_arch_decode(cut, 2, ADDR, &in), -EINVAL, "truncated modrm");
	is_int(tp_arch_decode(cut, 6, ADDR, &in), -EINVAL, "truncated disp32");
	is_int(tp_arch_decode(cut, sizeof(cut), ADDR, &in), 0, "the same bytes in full decode");
	is_int(tp_arch_decode(toolong, sizeof(toolong), ADDR, &in), -EINVAL, "over 15 bytes");
	is_int(tp_arch_decode(cut, 0, ADDR, &in), -EINVAL, "empty buffer");
	is_int(tp_arch_decode(NULL, 4, ADDR, &in), -EINVAL, "NULL buffer");
	is_int(tp_arch_decode(cut, sizeof(cut), ADDR, NULL), -EINVAL, "NULL out");
	is_int(tp_arch_format(invalid, sizeof(invalid), ADDR, text, sizeof(text)), -EINVAL,
	       "format of invalid bytes");
	is_str(text, "", "format leaves an empty string on error");
}

static void test_mnemonics(void)
{
	unsigned count = tp_arch_mnemonic_count();
	unsigned named = 0;

	ok(count > 1000, "mnemonic count %u covers the ISA", count);
	is_str(tp_arch_mnemonic_name(count), "invalid", "id == count is invalid");
	is_str(tp_arch_mnemonic_name(~0u), "invalid", "huge id is invalid");
	is_str(tp_arch_mnemonic_name(0), "invalid", "id 0 is Zydis's invalid");
	for (unsigned i = 1; i < count; i++) {
		const char *s = tp_arch_mnemonic_name(i);

		if (s && strcmp(s, "invalid") && s[0] >= 'a' && s[0] <= 'z')
			named++;
	}
	is_int(named, count - 1, "every id below count has a lowercase name");
}

/* The agent decodes from its SIGTRAP handler: do the same on a real int3. */
static volatile struct tp_insn trap_insn;
static volatile int trap_err = 1;

static void on_trap(int sig, siginfo_t *si, void *ctx)
{
	ucontext_t *uc = ctx;
	uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP] - 1;
	struct tp_insn in;

	trap_err = tp_arch_decode((const void *)pc, 1, pc, &in);
	trap_insn = in;
}

static void test_in_signal_handler(void)
{
	struct sigaction sa = {.sa_sigaction = on_trap, .sa_flags = SA_SIGINFO};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGTRAP, &sa, NULL);
	__asm__ volatile("int3" ::: "memory");
	signal(SIGTRAP, SIG_DFL);
	is_int(trap_err, 0, "decode in SIGTRAP handler");
	is_int(trap_insn.kind, TP_INSN_INT3, "handler saw int3");
	is_int(trap_insn.len, 1, "handler: int3 is one byte");
}

int main(void)
{
	test_cases();
	test_trailing_bytes();
	test_errors();
	test_mnemonics();
	test_in_signal_handler();
	return tap_done();
}
