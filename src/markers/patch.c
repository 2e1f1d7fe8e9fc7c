/* Cross-modifying code for libtracepad: int3 on the first byte, sync cores, tail bytes, sync,
 * first byte, sync.  A SIGTRAP handler sends a thread that meets the int3 on its way.  Bytes
 * are written through /proc/self/mem, so no page is ever writable and executable; if the
 * kernel refuses that, the page is made RWX with mprotect for the duration of one write. */
#include "patch.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

const uint8_t tp_markers_nop5[5] = {0x0f, 0x1f, 0x44, 0x00, 0x00};

enum sync_mode { SYNC_UNSET, SYNC_CORE, SYNC_EXPEDITED, SYNC_TLB };

static enum sync_mode sync_mode;
static void *tlb_page;
static int mem_fd = -1;
static pid_t mem_fd_pid;
static unsigned patch_delay_us;

/* Read by the SIGTRAP handler: the site being patched and where its int3 leads. */
static _Atomic uintptr_t cur_addr, cur_dest;
/* Sites patched lately: a thread that trapped on their int3 just before it was replaced may
 * get its signal only now; it re-executes the site's final instruction. */
#define RECENT 64
static _Atomic uintptr_t recent[RECENT];
static unsigned recent_next;
static struct sigaction old_trap;
static _Atomic unsigned long traps;

static int sync_init(void)
{
	if (!syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0)) {
		sync_mode = SYNC_CORE;
		return 0;
	}
	/* x86 returns from the IPI with iret, which serialises: a plain expedited barrier
	 * also makes the other cores refetch. */
	if (!syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0)) {
		sync_mode = SYNC_EXPEDITED;
		return 0;
	}
	/* Last resort (kernels without membarrier): an mprotect of a touched page shoots down
	 * the TLB of every CPU running this mm, with an IPI each. */
	tlb_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tlb_page == MAP_FAILED)
		return -errno;
	sync_mode = SYNC_TLB;
	return 0;
}

static void sync_cores(void)
{
	switch (sync_mode) {
	case SYNC_CORE:
		syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0);
		break;
	case SYNC_EXPEDITED:
		syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
		break;
	default:
		*(volatile char *)tlb_page = 1;
		mprotect(tlb_page, 4096, PROT_READ);
		mprotect(tlb_page, 4096, PROT_READ | PROT_WRITE);
		break;
	}
}

static void delay(void)
{
	if (!patch_delay_us)
		return;
	struct timespec ts = {patch_delay_us / 1000000, (patch_delay_us % 1000000) * 1000L};
	nanosleep(&ts, NULL);
}

static int write_mprotect(uintptr_t addr, const void *buf, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t lo = addr & ~(uintptr_t)(pg - 1);
	uintptr_t hi = (addr + len + pg - 1) & ~(uintptr_t)(pg - 1);

	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC))
		return -errno;
	memcpy((void *)addr, buf, len);
	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC))
		return -errno;
	return 0;
}

static int write_code(uintptr_t addr, const void *buf, size_t len)
{
	/* A fork inherits the descriptor, which still names the parent's memory. */
	if (mem_fd >= 0 && mem_fd_pid != getpid()) {
		close(mem_fd);
		mem_fd = -1;
	}
	if (mem_fd < 0) {
		mem_fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
		mem_fd_pid = getpid();
	}
	if (mem_fd >= 0 && pwrite(mem_fd, buf, len, (off_t)addr) == (ssize_t)len)
		return 0;
	return write_mprotect(addr, buf, len);
}

static void chain(int sig, siginfo_t *si, void *uc)
{
	if (old_trap.sa_flags & SA_SIGINFO) {
		old_trap.sa_sigaction(sig, si, uc);
	} else if (old_trap.sa_handler == SIG_IGN) {
		return;
	} else if (old_trap.sa_handler == SIG_DFL) {
		signal(sig, SIG_DFL);
		raise(sig);
	} else {
		old_trap.sa_handler(sig);
	}
}

static void on_sigtrap(int sig, siginfo_t *si, void *uc_)
{
	ucontext_t *uc = uc_;
	uintptr_t ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP] - 1;

	if (ip == atomic_load(&cur_addr)) {
		atomic_fetch_add_explicit(&traps, 1, memory_order_relaxed);
		uc->uc_mcontext.gregs[REG_RIP] = (greg_t)atomic_load(&cur_dest);
		return;
	}
	for (unsigned i = 0; i < RECENT; i++) {
		if (atomic_load(&recent[i]) == ip && *(volatile uint8_t *)ip != 0xcc) {
			atomic_fetch_add_explicit(&traps, 1, memory_order_relaxed);
			uc->uc_mcontext.gregs[REG_RIP] = (greg_t)ip;
			return;
		}
	}
	chain(sig, si, uc_);
}

/* The handler stays installed after a patch: a thread can trap on the int3 and receive its
 * SIGTRAP only after the patch ended (the trap and the delivery are not atomic with respect
 * to membarrier), and the handler must still be ours then.  Traps elsewhere are chained. */
static int trap_install(void)
{
	struct sigaction cur, sa;

	if (sigaction(SIGTRAP, NULL, &cur))
		return -errno;
	if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigtrap)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigtrap;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTRAP, &sa, &old_trap))
		return -errno;
	return 0;
}

unsigned long tp_markers_patch_traps(void)
{
	return atomic_load(&traps);
}

void tp_markers_patch_set_delay(unsigned usec)
{
	patch_delay_us = usec;
}

int tp_markers_patch(uintptr_t addr, const uint8_t from[5], const uint8_t to[5], uintptr_t dest)
{
	volatile const uint8_t *p = (volatile const uint8_t *)addr;
	const uint8_t int3 = 0xcc;
	int err;

	if (sync_mode == SYNC_UNSET && (err = sync_init()))
		return err;
	for (int i = 0; i < 5; i++)
		if (p[i] != from[i])
			return -EILSEQ;
	if ((err = trap_install()))
		return err;

	atomic_store(&cur_dest, dest);
	atomic_store(&cur_addr, addr);
	if ((err = write_code(addr, &int3, 1)))
		goto out;
	sync_cores();
	delay();
	for (int i = 1; i < 5; i++) {
		if (p[i] != from[i]) {
			err = -EILSEQ;
			goto undo;
		}
	}
	if ((err = write_code(addr + 1, to + 1, 4)))
		goto undo;
	sync_cores();
	delay();
	if (p[0] != int3) {
		err = -EILSEQ;
		goto out;
	}
	if ((err = write_code(addr, to, 1)))
		goto out;
	sync_cores();
	delay();
	goto out;

undo:
	/* Someone changed the tail under us: put the first byte back, touch nothing else. */
	write_code(addr, from, 1);
	sync_cores();
out:
	atomic_store(&recent[recent_next++ % RECENT], addr);
	atomic_store(&cur_addr, 0);
	return err;
}
