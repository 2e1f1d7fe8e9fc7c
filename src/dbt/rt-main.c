/* The code-cache runtime's start and its own small libc: tracepad maps this object into
 * the program at its execve stop and points the thread here, before the program's loader
 * ran.  It sets up the thread's %gs block, translates the first block and enters it. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <asm/prctl.h>

#include <Zydis/Zydis.h>

#include "dbt/rt-client.h"
#include "dbt/rt-priv.h"
#include "rt/raw.h"

struct tp_dbt_rt tp_dbt;

/* ---- what libZydis imports, bound here by the launcher's loader (default visibility:
 * they are looked up in this object's dynamic symbols) ---- */
#define TP_DBT_EXPORT __attribute__((visibility("default")))

TP_DBT_EXPORT void *memcpy(void *d, const void *s, size_t n)
{
	void *ret = d;

	__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
	return ret;
}

TP_DBT_EXPORT void *memset(void *d, int c, size_t n)
{
	void *ret = d;

	__asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
	return ret;
}

TP_DBT_EXPORT int memcmp(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;

	for (; n; n--, x++, y++)
		if (*x != *y)
			return *x - *y;
	return 0;
}

TP_DBT_EXPORT size_t strlen(const char *s)
{
	size_t n = 0;

	while (s[n])
		n++;
	return n;
}

TP_DBT_EXPORT void __assert_fail(const char *expr, const char *file, unsigned line, const char *fn)
{
	tp_dbt_fail("libZydis: assertion failed", line);
	tp_raw2(SYS_kill, tp_raw0(SYS_getpid), 6);
	for (;;)
		tp_raw1(SYS_exit_group, 134);
}

TP_DBT_EXPORT void __stack_chk_fail(void)
{
	__assert_fail("stack smashed", "", 0, "");
}

/* ---- the decoder's entry points, forwarded to the privately loaded libZydis ---- */
#define ZY(i, type) ((type)(uintptr_t)tp_dbt.boot->zydis[i])

ZyanStatus ZydisDecoderInit(ZydisDecoder *d, ZydisMachineMode m, ZydisStackWidth w)
{
	return ZY(TP_DBT_ZY_DECODER_INIT,
		  ZyanStatus(*)(ZydisDecoder *, ZydisMachineMode, ZydisStackWidth))(d, m, w);
}

ZyanStatus ZydisDecoderDecodeFull(const ZydisDecoder *d, const void *buf, ZyanUSize len,
				  ZydisDecodedInstruction *insn,
				  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT])
{
	return ZY(TP_DBT_ZY_DECODE_FULL,
		  ZyanStatus(*)(const ZydisDecoder *, const void *, ZyanUSize,
				ZydisDecodedInstruction *, ZydisDecodedOperand *))(d, buf, len,
										   insn, ops);
}

ZyanStatus ZydisDecoderDecodeInstruction(const ZydisDecoder *d, ZydisDecoderContext *ctx,
					 const void *buf, ZyanUSize len,
					 ZydisDecodedInstruction *insn)
{
	return ZY(TP_DBT_ZY_DECODE_INSN,
		  ZyanStatus(*)(const ZydisDecoder *, ZydisDecoderContext *, const void *,
				ZyanUSize, ZydisDecodedInstruction *))(d, ctx, buf, len, insn);
}

ZyanStatus ZydisDecoderDecodeOperands(const ZydisDecoder *d, const ZydisDecoderContext *ctx,
				      const ZydisDecodedInstruction *insn, ZydisDecodedOperand *ops,
				      ZyanU8 n)
{
	return ZY(TP_DBT_ZY_DECODE_OPS,
		  ZyanStatus(*)(const ZydisDecoder *, const ZydisDecoderContext *,
				const ZydisDecodedInstruction *, ZydisDecodedOperand *,
				ZyanU8))(d, ctx, insn, ops, n);
}

ZyanStatus ZydisCalcAbsoluteAddress(const ZydisDecodedInstruction *insn,
				    const ZydisDecodedOperand *op, ZyanU64 addr, ZyanU64 *out)
{
	return ZY(TP_DBT_ZY_CALC_ABS,
		  ZyanStatus(*)(const ZydisDecodedInstruction *, const ZydisDecodedOperand *,
				ZyanU64, ZyanU64 *))(insn, op, addr, out);
}

const char *ZydisMnemonicGetString(ZydisMnemonic m)
{
	return ZY(TP_DBT_ZY_MNEMONIC_STRING, const char *(*)(ZydisMnemonic))(m);
}

/* The arch library's formatter is linked in but never called here. */
ZyanStatus ZydisFormatterInit(ZydisFormatter *f, ZydisFormatterStyle s)
{
	return ZYAN_STATUS_INVALID_OPERATION;
}

ZyanStatus ZydisFormatterFormatInstruction(const ZydisFormatter *f,
					   const ZydisDecodedInstruction *insn,
					   const ZydisDecodedOperand *ops, ZyanU8 n, char *buf,
					   ZyanUSize len, ZyanU64 addr, void *user)
{
	return ZYAN_STATUS_INVALID_OPERATION;
}

ZyanStatus ZydisEncoderEncodeInstructionAbsolute(ZydisEncoderRequest *req, void *buf,
						 ZyanUSize *len, ZyanU64 addr)
{
	return ZY(TP_DBT_ZY_ENCODE_ABS, ZyanStatus(*)(ZydisEncoderRequest *, void *, ZyanUSize *,
						      ZyanU64))(req, buf, len, addr);
}

ZyanStatus ZydisEncoderNopFill(void *buf, ZyanUSize len)
{
	return ZY(TP_DBT_ZY_NOP_FILL, ZyanStatus(*)(void *, ZyanUSize))(buf, len);
}

/* ---- the runtime ---- */

void *tp_dbt_alloc(size_t size)
{
	static uint64_t populated;
	uint64_t at = (tp_dbt.heap + 63) & ~63ull;

	if (at + size > tp_dbt.heap_end || at + size < at)
		return NULL;
	tp_dbt.heap = at + size;
	/* a step at a time, never past the heap's end (the start-up stack follows) */
	if (tp_dbt.heap > populated) {
		uint64_t from = populated > at ? populated : at & ~4095ull,
			 to =
			     (tp_dbt.heap + TP_DBT_POPULATE_STEP - 1) & ~(TP_DBT_POPULATE_STEP - 1);

		if (to > tp_dbt.heap_end)
			to = tp_dbt.heap_end;
		tp_dbt_populate(from, to - from, 1);
		populated = to;
	}
	return (void *)(uintptr_t)at; /* the heap is fresh anonymous memory: zeroed */
}

void tp_dbt_populate(uint64_t at, uint64_t len, int write)
{
	uint64_t s = at & ~4095ull, e = (at + len + 4095) & ~4095ull;

	tp_raw3(SYS_madvise, s, e - s, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
}

_Static_assert(TP_DBT_SPACE_AT >= TP_DBT_MAP_AT + TP_DBT_MAP_SIZE,
	       "the runtime's address space overlaps the repositories");

long tp_dbt_mmap(size_t size, int prot, int flags, int fd)
{
	static uint64_t next = TP_DBT_SPACE_AT;
	uint64_t len = (size + 0xffff) & ~0xffffull,
		 at = __atomic_fetch_add(&next, len, __ATOMIC_RELAXED);

	if (at + len > TP_DBT_SPACE_END)
		return -ENOMEM;
	return tp_raw6(SYS_mmap, at, size, prot, flags | MAP_FIXED_NOREPLACE, fd, 0);
}

long tp_dbt_gettid(void)
{
	return tp_raw0(SYS_gettid);
}

static void put_hex(char *out, size_t *at, size_t cap, uint64_t v)
{
	static const char digits[] = "0123456789abcdef";
	char tmp[16];
	int n = 0;

	do {
		tmp[n++] = digits[v & 15];
		v >>= 4;
	} while (v);
	if (*at + 2 < cap) {
		out[(*at)++] = '0';
		out[(*at)++] = 'x';
	}
	while (n && *at + 1 < cap)
		out[(*at)++] = tmp[--n];
}

void tp_dbt_fail(const char *what, uint64_t pc)
{
	struct tp_agent_ctl *ctl = tp_dbt.ctl;
	size_t i = 0, cap = sizeof(ctl->error);

	if (!ctl || tp_dbt.failed++)
		return;
	for (; what[i] && i + 1 < cap; i++)
		ctl->error[i] = what[i];
	if (pc && i + 4 < cap) {
		ctl->error[i++] = ' ';
		ctl->error[i++] = 'a';
		ctl->error[i++] = 't';
		ctl->error[i++] = ' ';
		put_hex(ctl->error, &i, cap, pc);
	}
	ctl->error[i] = 0;
	__atomic_or_fetch(&ctl->state, TP_AGENT_ST_ERROR, __ATOMIC_RELEASE);
}

/* The control block's entry of @t, taken once (at the thread's creation, so that slots
 * are in creation order); NULL when they are all taken. */
static struct tp_agent_thread *slot_of(struct tp_agent_ctl *ctl, struct tp_dbt_thread *t)
{
	struct tp_agent_thread *th = (void *)((char *)ctl + ctl->threads_off);

	if (!t->slot)
		t->slot = __atomic_add_fetch(&ctl->nthreads, 1, __ATOMIC_RELAXED);
	if (t->slot > ctl->max_threads) {
		__atomic_or_fetch(&ctl->state, TP_AGENT_ST_THREADS_FULL, __ATOMIC_RELAXED);
		return NULL;
	}
	th[t->slot - 1].tid = t->tid;
	th[t->slot - 1].block = (uint64_t)(uintptr_t)t;
	return &th[t->slot - 1];
}

void tp_dbt_flush(struct tp_dbt_thread *t)
{
	struct tp_agent_ctl *ctl = tp_dbt.ctl;
	struct tp_agent_thread *th;
	uint64_t n;

	/* a forked child runs on in its copy of the cache, uncounted as by the other engines */
	if (!ctl || tp_raw0(SYS_getpid) != tp_dbt.pid)
		return;
	tp_dbt_client_flush(t);
	n = tp_dbt_count(t) - t->flushed;
	t->flushed += n;
	th = slot_of(ctl, t);
	if (!th) {
		__atomic_add_fetch(&ctl->overflow_count, n, __ATOMIC_RELEASE);
		return;
	}
	__atomic_add_fetch(&th->count, n, __ATOMIC_RELEASE);
}

void tp_dbt_slot(struct tp_dbt_thread *t)
{
	if (tp_dbt.ctl && tp_raw0(SYS_getpid) == tp_dbt.pid)
		slot_of(tp_dbt.ctl, t);
}

void tp_dbt_flush_all(void)
{
	/* threads still running are killed by the exit or exec now under way: what they
	 * counted so far is theirs */
	for (struct tp_dbt_thread *t = tp_dbt.threads; t; t = t->link)
		tp_dbt_flush(t);
	tp_dbt_client_process_exit();
}

/* ---- threads ---- */

#define THREAD_STACK TP_DBT_T_STACK_SIZE
#define THREAD_BLOCK ((sizeof(struct tp_dbt_thread) + 4095) & ~(size_t)4095)
#define THREAD_TABLE ((size_t)16 * TP_DBT_IBL_SIZE)
_Static_assert(THREAD_BLOCK == TP_DBT_T_TABLE_AT,
	       "the lookup finds the table at %gs:TP_DBT_T_TABLE_AT");
_Static_assert(offsetof(struct tp_dbt_thread, cells) == TP_DBT_T_CELLS, "the count's cells");
_Static_assert(offsetof(struct tp_dbt_thread, count) == TP_DBT_T_COUNT &&
		   offsetof(struct tp_dbt_thread, self) == TP_DBT_T_SELF &&
		   offsetof(struct tp_dbt_thread, flushed) == TP_DBT_T_FLUSHED,
	       "what an interrupted tracepad reads of a thread's block");
#define THREAD_ALT (4096 + TP_DBT_ALT_SIZE) /* a guard page, then the alternate stack */
const uint64_t tp_dbt_client_tls_at = THREAD_BLOCK + THREAD_TABLE; /* clients' data */

/* The clients' data, rounded to pages: the alternate stack's guard page follows it. */
static size_t client_tls(void)
{
	return (tp_dbt_client_tls_size() + 4095) & ~(size_t)4095;
}

struct tp_dbt_thread *tp_dbt_thread_new(void)
{
	/* the stack first, so that overflowing it faults below the mapping */
	long at =
	    tp_dbt_mmap(THREAD_STACK + THREAD_BLOCK + THREAD_TABLE + client_tls() + THREAD_ALT,
			PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1);
	struct tp_dbt_thread *t;

	if (tp_raw_failed(at))
		return NULL;
	t = (void *)(uintptr_t)(at + THREAD_STACK);
	t->self = (uint64_t)(uintptr_t)t;
	t->stack = (uint64_t)(uintptr_t)t;
	t->direct = (uint64_t)(uintptr_t)&tp_dbt_rt_direct;
	t->ibl = (uint64_t)(uintptr_t)&tp_dbt_rt_ibl;
	t->miss = (uint64_t)(uintptr_t)&tp_dbt_rt_miss;
	t->gate = (uint64_t)(uintptr_t)&tp_dbt_rt_gate;
	t->table = (uint64_t)(uintptr_t)at + THREAD_STACK + THREAD_BLOCK;
	t->alt = t->table + THREAD_TABLE + client_tls() + 4096;
	/* the first thread's lookup table is probed all over at once (a fault a page); other
	 * threads' fault as they are used, a page of memory each */
	if (!tp_dbt.threads)
		tp_dbt_populate(t->table, THREAD_TABLE, 1);
	tp_raw3(SYS_mprotect, t->alt - 4096, 4096, PROT_NONE);
	/* every block but the first is made for the program's clone or fork by the gate, in the
	 * C code its entry into the runtime went to after saving the program's x87/SSE
	 * registers below the frame it pushed (rt-entry.S): the new thread starts with them */
	if (tp_dbt.main) {
		const struct tp_dbt_thread *self = tp_dbt_self();

		memcpy(t->fx, (const void *)(uintptr_t)((self->frame - sizeof(t->fx)) & ~63ull),
		       sizeof(t->fx));
		t->has_fx = 1;
	}
	t->link = tp_dbt.threads;
	tp_dbt_client_thread_new(t);
	__atomic_store_n(&tp_dbt.threads, t, __ATOMIC_RELEASE);
	return t;
}

void tp_dbt_thread_start(struct tp_dbt_thread *t)
{
	tp_raw2(SYS_arch_prctl, ARCH_SET_GS, t);
	t->tid = (int32_t)tp_dbt_gettid();
	if (!t->forked)
		tp_dbt_slot(t); /* its tid beside its block */
	/* a thread starts without an alternate stack, a process keeps its parent's */
	tp_dbt_sig_thread(t, t->forked ? &t->prog_ss : NULL);
	if (t->forked) {
		/* the parent held the lock as it cloned: this process's copy is free */
		tp_dbt_fork_sync_done(t->sync, t->entry);
		tp_dbt.lock = 0;
	}
	/* a signal from here on finds the program at its first instruction (rt-signal.c) */
	t->prsp = t->regs.rsp;
	t->next = t->entry;
	/* the program's x87/SSE registers (C uses xmm ones): none is used from here on */
	if (t->has_fx)
		__asm__ volatile("fxrstor64 %0" : : "m"(*(const uint8_t(*)[512])t->fx));
	tp_raw4(SYS_rt_sigprocmask, SIG_SETMASK, &t->mask, NULL, 8);
	tp_dbt_rt_enter(&t->regs, t->entry);
	__builtin_unreachable();
}

/* A futex lock of three states (free, taken, taken with waiters). */
void tp_dbt_lock(void)
{
	int c = 0;

	if (__atomic_compare_exchange_n(&tp_dbt.lock, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	if (c != 2)
		c = __atomic_exchange_n(&tp_dbt.lock, 2, __ATOMIC_ACQUIRE);
	while (c) {
		tp_raw4(SYS_futex, &tp_dbt.lock, FUTEX_WAIT_PRIVATE, 2, NULL);
		c = __atomic_exchange_n(&tp_dbt.lock, 2, __ATOMIC_ACQUIRE);
	}
}

void tp_dbt_unlock(void)
{
	if (__atomic_fetch_sub(&tp_dbt.lock, 1, __ATOMIC_RELEASE) != 1) {
		__atomic_store_n(&tp_dbt.lock, 0, __ATOMIC_RELEASE);
		tp_raw3(SYS_futex, &tp_dbt.lock, FUTEX_WAKE_PRIVATE, 1);
	}
}

static int boot_ok(const struct tp_dbt_boot *b)
{
	if (b->magic != TP_DBT_BOOT_MAGIC)
		return 0;
	for (int i = 0; i < TP_DBT_ZY_COUNT; i++)
		if (!b->zydis[i])
			return 0;
	return 1;
}

TP_DBT_EXPORT __attribute__((noreturn)) void tp_dbt_rt_main(struct tp_dbt_boot *b)
{
	struct tp_dbt_thread *t;
	uint64_t first;

	if (!boot_ok(b))
		tp_raw1(SYS_exit_group, 127);
	tp_dbt.boot = b;
	tp_dbt.ctl = (struct tp_agent_ctl *)(uintptr_t)b->ctl;
	tp_dbt.pid = b->pid;
	tp_dbt.heap = (uint64_t)(uintptr_t)(b + 1);
	tp_dbt.heap_end = b->heap_end;
	/* the block table alone spans 1024 pages, each a fault (costly in a VM) */
	tp_raw3(SYS_madvise, TP_DBT_HEAP_AT, TP_DBT_HEAP_SIZE, MADV_HUGEPAGE);
	t = tp_dbt_client_init() ? NULL : tp_dbt_thread_new();
	if (!t || tp_raw2(SYS_arch_prctl, ARCH_SET_GS, t) || tp_dbt_cache_init()) {
		tp_dbt_fail("the code cache could not start", 0);
		tp_raw1(SYS_exit_group, 127);
	}
	tp_dbt.main = t;
	t->tid = b->pid;
	tp_dbt_sig_thread(t, NULL);
	t->fs = b->regs.fs_base;
	tp_dbt_slot(t);
	if (tp_dbt.ctl)
		__atomic_or_fetch(&tp_dbt.ctl->state, TP_AGENT_ST_ACTIVE, __ATOMIC_RELEASE);
	first = tp_dbt_dispatch_indirect(b->regs.rip, NULL);
	if (!first)
		tp_raw1(SYS_exit_group, 127);
	tp_dbt_rt_enter(&b->regs, first);
	__builtin_unreachable();
}
