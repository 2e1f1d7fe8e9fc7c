/* The patcher: live code changes of N bytes, in batches, with the int3 protocol (int3 on
 * every first byte, sync cores, tails, sync, first bytes, sync).  A client of the SIGTRAP
 * dispatcher sends a thread that meets a temporary int3 on its way.  Bytes are written
 * through /proc/self/mem opened for one batch, so no page is ever writable and executable;
 * if the kernel refuses that, the page is made RWX for the duration of one write. */
#include <errno.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#include "arch/arch.h"
#include "rt/raw.h"
#include "rt/rt.h"

enum sync_mode { SYNC_UNSET, SYNC_CORE, SYNC_EXPEDITED, SYNC_TLB };

static enum sync_mode sync_mode;
static uint64_t tlb_page;
static unsigned patch_delay_us;
static int busy;
static int client_registered;

/* Read by the trap client: the patches of the batch step in progress. */
#define BATCH 64
static struct {
	uint64_t addr, dest;
} active[BATCH];
/* Sites patched lately: a thread that trapped on their int3 just before it was replaced may
 * get its signal only now; it re-executes the site's final instruction. */
#define RECENT 64
static uint64_t recent[RECENT];
static unsigned recent_next;
static unsigned long traps;

static int sync_init(void)
{
	long p;

	if (!tp_raw3(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0)) {
		sync_mode = SYNC_CORE;
		return 0;
	}
	/* x86 returns from the IPI with iret, which serialises: a plain expedited barrier
	 * also makes the other cores refetch. */
	if (!tp_raw3(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0)) {
		sync_mode = SYNC_EXPEDITED;
		return 0;
	}
	/* Last resort (kernels without membarrier): an mprotect of a touched page shoots down
	 * the TLB of every CPU running this mm, with an IPI each. */
	p = tp_raw6(SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tp_raw_failed(p))
		return (int)p;
	tlb_page = (uint64_t)p;
	sync_mode = SYNC_TLB;
	return 0;
}

static void sync_cores(void)
{
	switch (sync_mode) {
	case SYNC_CORE:
		tp_raw3(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0);
		break;
	case SYNC_EXPEDITED:
		tp_raw3(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
		break;
	default:
		*(volatile char *)(uintptr_t)tlb_page = 1;
		tp_raw3(SYS_mprotect, tlb_page, 4096, PROT_READ);
		tp_raw3(SYS_mprotect, tlb_page, 4096, PROT_READ | PROT_WRITE);
		break;
	}
}

static void delay(void)
{
	struct timespec ts;

	if (!patch_delay_us)
		return;
	ts.tv_sec = patch_delay_us / 1000000;
	ts.tv_nsec = (long)(patch_delay_us % 1000000) * 1000L;
	tp_raw2(SYS_nanosleep, &ts, 0);
}

/* The bytes at @addr equal @want. */
static int same(uint64_t addr, const uint8_t *want, size_t len)
{
	uint8_t now[TP_RT_PATCH_MAX];

	if (tp_rt_mem_read(addr, now, len))
		return 0;
	for (size_t i = 0; i < len; i++)
		if (now[i] != want[i])
			return 0;
	return 1;
}

static int on_trap(siginfo_t *si, ucontext_t *uc, void *ctx)
{
	greg_t *g = uc->uc_mcontext.gregs;
	uint64_t ip = (uint64_t)g[REG_RIP] - 1;
	uint8_t b;

	if (si->si_code != SI_KERNEL)
		return 0; /* not an int3 */
	/* A second round when a recent site holds an int3 again: a new patch of it began
	 * after the first scan of the active ones (its entry is published before its int3). */
	for (int round = 0; round < 3; round++) {
		int again = 0;

		for (unsigned i = 0; i < BATCH; i++) {
			if (__atomic_load_n(&active[i].addr, __ATOMIC_ACQUIRE) != ip)
				continue;
			uint64_t dest = __atomic_load_n(&active[i].dest, __ATOMIC_RELAXED);
			if (!dest)
				return 0;
			__atomic_fetch_add(&traps, 1, __ATOMIC_RELAXED);
			g[REG_RIP] = (greg_t)dest;
			return 1;
		}
		for (unsigned i = 0; i < RECENT && !again; i++) {
			if (__atomic_load_n(&recent[i], __ATOMIC_ACQUIRE) != ip ||
			    tp_rt_mem_read(ip, &b, 1))
				continue;
			if (b == TP_ARCH_INT3) {
				again = 1;
				continue;
			}
			__atomic_fetch_add(&traps, 1, __ATOMIC_RELAXED);
			g[REG_RIP] = (greg_t)ip;
			return 1;
		}
		if (!again)
			break;
	}
	return 0;
}

/* Put the first byte back after a failed step; the step's own sync follows. */
static void undo(struct tp_rt_code *c, struct tp_rt_patch *e, int err)
{
	tp_rt_code_write(c, e->addr, e->from, 1);
	e->err = err;
}

static void patch_chunk(struct tp_rt_code *c, struct tp_rt_patch *p, size_t n)
{
	const uint8_t int3 = TP_ARCH_INT3;
	int tails = 0;

	for (size_t i = 0; i < n; i++) {
		struct tp_rt_patch *e = &p[i];

		e->err = 0;
		if (!e->len || e->len > TP_RT_PATCH_MAX) {
			e->err = -EINVAL;
			continue;
		}
		if (!same(e->addr, e->from, e->len)) {
			e->err = -EILSEQ;
			continue;
		}
		__atomic_store_n(&active[i].dest, e->dest, __ATOMIC_RELAXED);
		__atomic_store_n(&active[i].addr, e->addr, __ATOMIC_RELEASE);
		e->err = tp_rt_code_write(c, e->addr, &int3, 1);
		tails |= e->len > 1;
	}
	sync_cores();
	delay();
	if (tails) {
		for (size_t i = 0; i < n; i++) {
			struct tp_rt_patch *e = &p[i];
			int err;

			if (e->err || e->len < 2)
				continue;
			/* Someone changed the tail under us: put the first byte back, touch
			 * nothing else. */
			if (!same(e->addr + 1, e->from + 1, e->len - 1u))
				undo(c, e, -EILSEQ);
			else if ((err = tp_rt_code_write(c, e->addr + 1, e->to + 1, e->len - 1u)))
				undo(c, e, err);
		}
		sync_cores();
		delay();
	}
	for (size_t i = 0; i < n; i++) {
		struct tp_rt_patch *e = &p[i];

		if (e->err)
			continue;
		if (!same(e->addr, &int3, 1))
			e->err = -EILSEQ;
		else
			e->err = tp_rt_code_write(c, e->addr, e->to, 1);
	}
	sync_cores();
	delay();
	for (size_t i = 0; i < n; i++) {
		struct tp_rt_patch *e = &p[i];

		if (!e->err && !same(e->addr, e->to, e->len))
			e->err = -EILSEQ;
		if (__atomic_load_n(&active[i].addr, __ATOMIC_RELAXED))
			__atomic_store_n(&recent[recent_next++ % RECENT], e->addr,
					 __ATOMIC_RELEASE);
		__atomic_store_n(&active[i].addr, 0, __ATOMIC_RELEASE);
	}
}

int tp_rt_patch_batch(struct tp_rt_patch *p, size_t n)
{
	struct tp_rt_code c;
	int err;

	if (__atomic_exchange_n(&busy, 1, __ATOMIC_ACQUIRE))
		return -EBUSY;
	if (sync_mode == SYNC_UNSET && (err = sync_init()))
		goto out;
	if (!client_registered) {
		if ((err = tp_rt_trap_register(on_trap, NULL)))
			goto out;
		client_registered = 1;
	}
	/* The dispatcher stays installed after a batch: a thread can trap on an int3 and
	 * receive its SIGTRAP only after the batch ended (the trap and the delivery are not
	 * atomic with respect to membarrier), and the handler must still be ours then. */
	if ((err = tp_rt_trap_chain()))
		goto out;
	tp_rt_code_open(&c);
	for (size_t i = 0; i < n; i += BATCH)
		patch_chunk(&c, p + i, n - i < BATCH ? n - i : BATCH);
	tp_rt_code_close(&c);
	for (size_t i = 0; i < n && !err; i++)
		err = p[i].err;
out:
	__atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
	return err;
}

int tp_rt_patch(uint64_t addr, const void *from, const void *to, size_t len, uint64_t dest)
{
	struct tp_rt_patch p = {.addr = addr, .dest = dest, .len = (uint8_t)len};

	if (!len || len > TP_RT_PATCH_MAX)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		p.from[i] = ((const uint8_t *)from)[i];
		p.to[i] = ((const uint8_t *)to)[i];
	}
	return tp_rt_patch_batch(&p, 1);
}

void tp_rt_patch_set_delay(unsigned usec)
{
	patch_delay_us = usec;
}

unsigned long tp_rt_patch_traps(void)
{
	return __atomic_load_n(&traps, __ATOMIC_RELAXED);
}
