/* The agent's own memcpy, memset, memcmp and strlen, hidden: the agent's code (and
 * libZydis's, rebound by zydis-shim.c) never calls libc's, so that `tracepad calls --engine
 * agent` can hook libc's like any function: a hooked memcpy called while the pads are placed
 * (an injected call under ptrace) or from inside a hook would stop the placing call at its
 * int3, or be counted as the program's call.  Built general-regs-only, as the hooks that may
 * call them (no vector state is kept there). */
#include <stddef.h>

#include "agent/agent-priv.h"

TP_HIDDEN void *memcpy(void *d, const void *s, size_t n)
{
	void *ret = d;

	__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
	return ret;
}

TP_HIDDEN void *memmove(void *d, const void *s, size_t n)
{
	unsigned char *x = d;
	const unsigned char *y = s;

	if (x <= y || x >= y + n)
		return memcpy(d, s, n);
	while (n--)
		x[n] = y[n];
	return d;
}

TP_HIDDEN void *memset(void *d, int c, size_t n)
{
	void *ret = d;

	__asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
	return ret;
}

TP_HIDDEN int memcmp(const void *a, const void *b, size_t n)
{
	const unsigned char *x = a, *y = b;

	for (; n; n--, x++, y++)
		if (*x != *y)
			return *x - *y;
	return 0;
}

TP_HIDDEN size_t strlen(const char *s)
{
	size_t n = 0;

	while (s[n])
		n++;
	return n;
}

/* libZydis's destructor calls __cxa_finalize (weak) for its own object, which registered
 * nothing: done here, not by libc's, which the program may have hooked (the ptrace engine
 * sees no such call). */
TP_HIDDEN void tp_agent_no_finalize(void *dso)
{
	(void)dso;
}
