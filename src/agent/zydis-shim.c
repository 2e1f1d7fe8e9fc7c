/* The agent loads Zydis only once it counts, and only after the engines' sync point, so
 * that the dynamic loader's work for it (thousands of relocations) is never counted as the
 * program's.  These definitions stand in for Zydis's entry points that the arch code calls
 * and forward to the library loaded by tp_zydis_load(). */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <Zydis/Zydis.h>

#include "agent/agent-priv.h"
#include "rt/raw.h"
#include "rt/rt.h"

static struct {
	ZyanStatus (*decoder_init)(ZydisDecoder *, ZydisMachineMode, ZydisStackWidth);
	ZyanStatus (*decode_full)(const ZydisDecoder *, const void *, ZyanUSize,
				  ZydisDecodedInstruction *, ZydisDecodedOperand *);
	ZyanStatus (*calc_abs)(const ZydisDecodedInstruction *, const ZydisDecodedOperand *,
			       ZyanU64, ZyanU64 *);
	const char *(*mnemonic_string)(ZydisMnemonic);
	ZyanStatus (*formatter_init)(ZydisFormatter *, ZydisFormatterStyle);
	ZyanStatus (*format)(const ZydisFormatter *, const ZydisDecodedInstruction *,
			     const ZydisDecodedOperand *, ZyanU8, char *, ZyanUSize, ZyanU64,
			     void *);
	ZyanStatus (*encode_abs)(ZydisEncoderRequest *, void *, ZyanUSize *, ZyanU64);
	ZyanStatus (*nop_fill)(void *, ZyanUSize);
} zy;

static void *handle;

int tp_zydis_load(void)
{
	static const char *const names[] = {"libZydis.so.4.0", "libZydis.so.4", "libZydis.so"};
	void *h = NULL;

	for (size_t i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!h)
		return -1;
	zy.decoder_init = dlsym(h, "ZydisDecoderInit");
	zy.decode_full = dlsym(h, "ZydisDecoderDecodeFull");
	zy.calc_abs = dlsym(h, "ZydisCalcAbsoluteAddress");
	zy.mnemonic_string = dlsym(h, "ZydisMnemonicGetString");
	zy.formatter_init = dlsym(h, "ZydisFormatterInit");
	zy.format = dlsym(h, "ZydisFormatterFormatInstruction");
	zy.encode_abs = dlsym(h, "ZydisEncoderEncodeInstructionAbsolute");
	zy.nop_fill = dlsym(h, "ZydisEncoderNopFill");
	if (!zy.encode_abs || !zy.nop_fill) /* the code writer's encoder */
		return -1;
	handle = h;
	tp_agent_text_of(zy.decode_full, &tp_ag.zydis_start, &tp_ag.zydis_end);
	return zy.decoder_init && zy.decode_full && zy.calc_abs && zy.mnemonic_string ? 0 : -1;
}

#define NOT_LOADED ZYAN_STATUS_INVALID_OPERATION

ZyanStatus ZydisDecoderInit(ZydisDecoder *d, ZydisMachineMode m, ZydisStackWidth w)
{
	return zy.decoder_init ? zy.decoder_init(d, m, w) : NOT_LOADED;
}

ZyanStatus ZydisDecoderDecodeFull(const ZydisDecoder *d, const void *buf, ZyanUSize len,
				  ZydisDecodedInstruction *insn,
				  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT])
{
	return zy.decode_full ? zy.decode_full(d, buf, len, insn, ops) : NOT_LOADED;
}

ZyanStatus ZydisCalcAbsoluteAddress(const ZydisDecodedInstruction *insn,
				    const ZydisDecodedOperand *op, ZyanU64 addr, ZyanU64 *out)
{
	return zy.calc_abs ? zy.calc_abs(insn, op, addr, out) : NOT_LOADED;
}

const char *ZydisMnemonicGetString(ZydisMnemonic m)
{
	return zy.mnemonic_string ? zy.mnemonic_string(m) : NULL;
}

ZyanStatus ZydisFormatterInit(ZydisFormatter *f, ZydisFormatterStyle s)
{
	return zy.formatter_init ? zy.formatter_init(f, s) : NOT_LOADED;
}

ZyanStatus ZydisFormatterFormatInstruction(const ZydisFormatter *f,
					   const ZydisDecodedInstruction *insn,
					   const ZydisDecodedOperand *ops, ZyanU8 n, char *buf,
					   ZyanUSize len, ZyanU64 addr, void *user)
{
	return zy.format ? zy.format(f, insn, ops, n, buf, len, addr, user) : NOT_LOADED;
}

ZyanStatus ZydisEncoderEncodeInstructionAbsolute(ZydisEncoderRequest *req, void *buf,
						 ZyanUSize *len, ZyanU64 addr)
{
	return zy.encode_abs ? zy.encode_abs(req, buf, len, addr) : NOT_LOADED;
}

ZyanStatus ZydisEncoderNopFill(void *buf, ZyanUSize len)
{
	return zy.nop_fill ? zy.nop_fill(buf, len) : NOT_LOADED;
}

/* ---- libZydis's imports of libc bound to the agent's own (own-libc.c) ---- */

void tp_agent_no_finalize(void *dso) TP_HIDDEN;

static void *own_of(const char *name)
{
	static const struct {
		const char *name;
		void *fn;
	} own[] = {
	    {"memcpy", (void *)memcpy},	  {"memset", (void *)memset},
	    {"memmove", (void *)memmove}, {"memcmp", (void *)memcmp},
	    {"strlen", (void *)strlen},	  {"__cxa_finalize", (void *)tp_agent_no_finalize},
	};

	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
		const char *a = own[i].name, *b = name;

		while (*a && *a == *b)
			a++, b++;
		if (!*a && !*b)
			return own[i].fn;
	}
	return NULL;
}

struct relro {
	uint64_t base, lo, hi;
};

static int relro_of(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct relro *r = arg;

	(void)size;
	if (info->dlpi_addr != r->base)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
			r->lo = r->base + info->dlpi_phdr[i].p_vaddr;
			r->hi = r->lo + info->dlpi_phdr[i].p_memsz;
		}
	return 1;
}

/* One GOT slot, read-only after relocation (RELRO, BIND_NOW): written through /proc/self/mem,
 * else made writable for the store where the RELRO range is known (dl_iterate_phdr sees no
 * object in a static program's dlopen'ed libc), else a checked write (never a fault). */
static int put_slot(struct tp_rt_code *c, uint64_t slot, void *fn, const struct relro *r)
{
	uint64_t page = slot & ~4095ull;

	if (c->fd >= 0 && tp_raw4(SYS_pwrite64, c->fd, &fn, 8, (long)slot) == 8)
		return 0;
	if (slot < r->lo || slot + 8 > r->hi)
		return tp_rt_mem_write(slot, &fn, 8) ? -1 : 0;
	if (tp_raw3(SYS_mprotect, page, 4096, PROT_READ | PROT_WRITE))
		return -1;
	__atomic_store_n((void **)(uintptr_t)slot, fn, __ATOMIC_RELEASE);
	tp_raw3(SYS_mprotect, page, 4096, PROT_READ);
	return 0;
}

static int rebind_relocs(struct tp_rt_code *c, const ElfW(Rela) * rel, size_t size,
			 const ElfW(Sym) * syms, const char *strs, const struct relro *r)
{
	for (size_t i = 0; rel && i < size / sizeof(*rel); i++) {
		uint32_t type = ELF64_R_TYPE(rel[i].r_info), sym = ELF64_R_SYM(rel[i].r_info);
		void *fn;

		if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || !sym)
			continue;
		fn = own_of(strs + syms[sym].st_name);
		if (fn && put_slot(c, r->base + rel[i].r_offset, fn, r))
			return -1;
	}
	return 0;
}

/* libZydis calls libc's memcpy, memset and strlen (and __cxa_finalize from its destructor):
 * while the hooks' pads are placed (an injected call under ptrace, or a dlopen's sync in a
 * hook), a pad of one of those would be hit by the placing code.  Its GOT slots are pointed
 * at the agent's own, once, so that those functions can be hooked like any other.  (A
 * program that loaded libZydis itself would share that copy: its calls of those functions
 * from libZydis would go untraced.) */
int tp_zydis_own_libc(void)
{
	static int done;
	struct link_map *lm = NULL;
	const ElfW(Sym) *syms = NULL;
	const char *strs = NULL;
	const ElfW(Rela) *rela = NULL, *jmprel = NULL;
	size_t relasz = 0, pltrelsz = 0;
	struct relro r = {0, 0, 0};
	struct tp_rt_code c;
	int bad;

	if (done)
		return 0;
	if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &lm) || !lm || !lm->l_ld)
		return -1;
	r.base = lm->l_addr;
	for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
		/* the loader relocates these in place where the dynamic section is writable */
		uint64_t p = d->d_un.d_ptr < r.base ? d->d_un.d_ptr + r.base : d->d_un.d_ptr;

		switch (d->d_tag) {
		case DT_SYMTAB:
			syms = (const ElfW(Sym) *)(uintptr_t)p;
			break;
		case DT_STRTAB:
			strs = (const char *)(uintptr_t)p;
			break;
		case DT_RELA:
			rela = (const ElfW(Rela) *)(uintptr_t)p;
			break;
		case DT_RELASZ:
			relasz = d->d_un.d_val;
			break;
		case DT_JMPREL:
			jmprel = (const ElfW(Rela) *)(uintptr_t)p;
			break;
		case DT_PLTRELSZ:
			pltrelsz = d->d_un.d_val;
			break;
		}
	}
	if (!syms || !strs)
		return -1;
	dl_iterate_phdr(relro_of, &r);
	tp_rt_code_open(&c);
	bad = rebind_relocs(&c, rela, relasz, syms, strs, &r) ||
	      rebind_relocs(&c, jmprel, pltrelsz, syms, strs, &r);
	tp_rt_code_close(&c);
	if (bad)
		return -1;
	done = 1;
	return 0;
}
