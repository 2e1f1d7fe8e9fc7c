/* Raw system calls for code that runs inside traced programs: signal handlers of the agent
 * and of libtracepad must not touch errno or any libc lock, so they call the kernel directly.
 * Every call returns the kernel's value: >= 0, or -errno. */
#ifndef TP_RT_RAW_H
#define TP_RT_RAW_H

#include <stdint.h>

static inline long tp_raw6(long nr, long a, long b, long c, long d, long e, long f)
{
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

#define tp_raw0(nr) tp_raw6(nr, 0, 0, 0, 0, 0, 0)
#define tp_raw1(nr, a) tp_raw6(nr, (long)(a), 0, 0, 0, 0, 0)
#define tp_raw2(nr, a, b) tp_raw6(nr, (long)(a), (long)(b), 0, 0, 0, 0)
#define tp_raw3(nr, a, b, c) tp_raw6(nr, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define tp_raw4(nr, a, b, c, d) tp_raw6(nr, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

/* mmap's result is an address or -errno in [-4095, -1]. */
static inline int tp_raw_failed(long r)
{
	return r < 0 && r > -4096;
}

#endif
