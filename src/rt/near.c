/* The near-code allocator: executable memory within rel32 reach of the code it serves (out-
 * of-line copies of displaced instructions, jump pads), since breakpoints in the program
 * and in libc are more than 2 GiB apart.  Arenas are never writable while code on them may
 * run: they are r-x from the start and written through /proc/self/mem; where the kernel
 * refuses that, every allocation gets pages of its own, r-x once written. */
#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "arch/arch.h"
#include "rt/raw.h"
#include "rt/rt.h"

#define PAGE 4096ull
#define ARENA_SIZE (16 * PAGE)
/* 256 pads each (PAD_CODE): rt's 4096 fill 16, more where the sites are far apart */
#define ARENAS 64
/* Any byte of an arena this close to @near is in rel32 reach of it, with room to spare. */
#define REACH (1ull << 30)

static struct arena {
	int claimed;
	uint64_t base;	       /* published last */
	uint32_t used;	       /* bump allocation by CAS */
	uint8_t private_pages; /* no /proc/self/mem: whole pages, r-x once written */
} arenas[ARENAS];

static uint64_t dist(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

/* Fill a new arena with int3 (a stray jump into it traps); the write also tells whether
 * /proc/self/mem works here. */
static int arena_fill(uint64_t base, int *private_pages)
{
	static uint8_t fill[PAGE];
	struct tp_rt_code c;
	int ok = 1;

	for (uint64_t i = 0; i < PAGE; i++)
		fill[i] = TP_ARCH_INT3;
	tp_rt_code_open(&c);
	for (uint64_t off = 0; ok && c.fd >= 0 && off < ARENA_SIZE; off += PAGE)
		ok = tp_raw4(SYS_pwrite64, c.fd, fill, PAGE, (long)(base + off)) == (long)PAGE;
	if (c.fd < 0 || !ok) {
		/* nothing runs here yet: the pages may be writable until their first use */
		if (tp_raw3(SYS_mprotect, base, ARENA_SIZE, PROT_READ | PROT_WRITE))
			ok = 0;
		else {
			for (uint64_t i = 0; i < ARENA_SIZE; i++)
				((volatile uint8_t *)(uintptr_t)base)[i] = TP_ARCH_INT3;
			*private_pages = ok = 1;
		}
	}
	tp_rt_code_close(&c);
	return ok ? 0 : -EACCES;
}

/* The @i-th place tried for an arena serving @near (0: none left): 16 MiB steps below it.
 * Code in the lowest GiB (a program that is not PIE, at 0x400000) has no room for those:
 * 64 KiB steps below it down to 1 MiB, then 1 MiB steps from 256 MiB above it. */
static uint64_t hint_at(uint64_t near, int i)
{
	uint64_t top = near & ~0xfffffull, low = near & ~0xffffull;

	if (top >= 64 * 0x1000000ull)
		return i < 64 ? top - (uint64_t)i * 0x1000000ull : 0;
	if (low >= 0x100000ull + (uint64_t)i * 0x10000ull)
		return low - (uint64_t)i * 0x10000ull;
	return i < 256 ? top + 0x10000000ull + (uint64_t)i * 0x100000ull : 0;
}

static struct arena *arena_new(uint64_t near)
{
	int private_pages = 0;
	uint64_t hint;

	/* below @near: above the program's text come its data and its heap, which must keep
	 * room to grow; MAP_FIXED_NOREPLACE is only a hint on old kernels: check reach */
	for (int i = 1; (hint = hint_at(near, i)) != 0; i++) {
		long p = tp_raw6(SYS_mmap, (long)hint, ARENA_SIZE, PROT_READ | PROT_EXEC,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

		if (tp_raw_failed(p))
			continue;
		if (dist((uint64_t)p, near) >= REACH || arena_fill((uint64_t)p, &private_pages)) {
			tp_raw2(SYS_munmap, p, ARENA_SIZE);
			continue;
		}
		for (int a = 0; a < ARENAS; a++) {
			int zero = 0;

			if (!__atomic_compare_exchange_n(&arenas[a].claimed, &zero, 1, 0,
							 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				continue;
			arenas[a].private_pages = (uint8_t)private_pages;
			__atomic_store_n(&arenas[a].base, (uint64_t)p, __ATOMIC_RELEASE);
			return &arenas[a];
		}
		tp_raw2(SYS_munmap, p, ARENA_SIZE);
		return NULL;
	}
	return NULL;
}

static uint64_t arena_take(struct arena *a, size_t size)
{
	uint32_t used = __atomic_load_n(&a->used, __ATOMIC_RELAXED), next;

	do {
		uint32_t at = used;

		if (a->private_pages)
			at = (uint32_t)((at + PAGE - 1) & ~(PAGE - 1));
		next = at + (uint32_t)size;
		if (next > ARENA_SIZE)
			return 0;
		if (__atomic_compare_exchange_n(&a->used, &used, next, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED))
			return a->base + at;
	} while (1);
}

uint64_t tp_rt_near_alloc(uint64_t near, size_t size)
{
	struct arena *a;
	uint64_t p;

	if (!size || size > PAGE)
		return 0;
	size = (size + 15) & ~(size_t)15;
	for (int i = 0; i < ARENAS; i++) {
		a = &arenas[i];
		uint64_t base = __atomic_load_n(&a->base, __ATOMIC_ACQUIRE);

		if (base && dist(base, near) < REACH && (p = arena_take(a, size)))
			return p;
	}
	a = arena_new(near);
	return a ? arena_take(a, size) : 0;
}

static struct arena *arena_of(uint64_t pc)
{
	for (int i = 0; i < ARENAS; i++) {
		uint64_t base = __atomic_load_n(&arenas[i].base, __ATOMIC_ACQUIRE);

		if (base && pc - base < ARENA_SIZE)
			return &arenas[i];
	}
	return NULL;
}

int tp_rt_near_contains(uint64_t pc)
{
	return arena_of(pc) != NULL;
}

int tp_rt_near_write(uint64_t at, const void *code, size_t len)
{
	struct arena *a = arena_of(at);
	struct tp_rt_code c;
	int err;

	if (!a || at + len > a->base + ARENA_SIZE)
		return -EINVAL;
	if (a->private_pages) {
		/* the allocation's own pages, writable until now and never run yet */
		uint64_t lo = at & ~(PAGE - 1), hi = (at + len + PAGE - 1) & ~(PAGE - 1);

		for (size_t i = 0; i < len; i++)
			((volatile uint8_t *)(uintptr_t)at)[i] = ((const uint8_t *)code)[i];
		return (int)tp_raw3(SYS_mprotect, lo, hi - lo, PROT_READ | PROT_EXEC);
	}
	/* no mprotect fallback here: the arena was found writable through /proc/self/mem */
	tp_rt_code_open(&c);
	err = c.fd >= 0 && tp_raw4(SYS_pwrite64, c.fd, code, len, (long)at) == (long)len ? 0 : -EIO;
	tp_rt_code_close(&c);
	return err;
}
