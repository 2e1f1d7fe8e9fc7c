/* Safe access to the process's own memory: reads and writes that fail with -EFAULT instead
 * of faulting (code inside a program must never crash it), and writes into code pages
 * through a /proc/self/mem descriptor that lives for one batch of writes only. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "rt/raw.h"
#include "rt/rt.h"

#define PAGE 4096ull

static long vm_rw(long nr, uint64_t addr, void *buf, size_t len)
{
	struct iovec l = {buf, len}, r = {(void *)(uintptr_t)addr, len};

	return tp_raw6(nr, tp_raw0(SYS_getpid), (long)&l, 1, (long)&r, 1, 0);
}

int tp_rt_mem_read(uint64_t addr, void *buf, size_t len)
{
	return vm_rw(SYS_process_vm_readv, addr, buf, len) == (long)len ? 0 : -EFAULT;
}

int tp_rt_mem_write(uint64_t addr, const void *buf, size_t len)
{
	return vm_rw(SYS_process_vm_writev, addr, (void *)buf, len) == (long)len ? 0 : -EFAULT;
}

long tp_rt_mem_strcpy(uint64_t addr, char *buf, size_t cap)
{
	size_t n = 0;

	if (!cap)
		return -EINVAL;
	/* page by page: a string may end just before an unmapped page */
	while (n < cap - 1) {
		size_t chunk = (size_t)(PAGE - ((addr + n) & (PAGE - 1)));

		if (chunk > cap - 1 - n)
			chunk = cap - 1 - n;
		if (tp_rt_mem_read(addr + n, buf + n, chunk))
			return -EFAULT;
		for (size_t i = 0; i < chunk; i++)
			if (!buf[n + i])
				return (long)(n + i);
		n += chunk;
	}
	buf[n] = 0;
	return (long)n;
}

void tp_rt_code_open(struct tp_rt_code *c)
{
	long fd = tp_raw3(SYS_open, "/proc/self/mem", O_RDWR | O_CLOEXEC, 0);

	c->fd = fd < 0 ? -1 : (int)fd;
}

void tp_rt_code_close(struct tp_rt_code *c)
{
	if (c->fd >= 0)
		tp_raw1(SYS_close, c->fd);
	c->fd = -1;
}

/* Without /proc/self/mem (a kernel that refuses it): the pages become writable for one
 * write.  They stay executable meanwhile, since other threads may be running them. */
static int write_mprotect(uint64_t addr, const void *buf, size_t len)
{
	uint64_t lo = addr & ~(PAGE - 1), hi = (addr + len + PAGE - 1) & ~(PAGE - 1);
	long r = tp_raw3(SYS_mprotect, lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC);

	if (r)
		return (int)r;
	for (size_t i = 0; i < len; i++)
		((volatile uint8_t *)(uintptr_t)addr)[i] = ((const uint8_t *)buf)[i];
	return (int)tp_raw3(SYS_mprotect, lo, hi - lo, PROT_READ | PROT_EXEC);
}

int tp_rt_code_write(struct tp_rt_code *c, uint64_t addr, const void *buf, size_t len)
{
	if (c->fd >= 0 && tp_raw4(SYS_pwrite64, c->fd, buf, len, (long)addr) == (long)len)
		return 0;
	return write_mprotect(addr, buf, len);
}
