/* The program map.py reads the code cache's repositories of: it prints its pid and the
 * addresses of work() and later(), calls work() once, waits for a line, then calls later()
 * (translated only then) and work() again.  A SIGTRAP (the test's breakpoints) writes
 * "trap", waits for a line (the breakpoint is removed meanwhile) and goes back to the int3's
 * address, as a debugger would.  With "r" as the line, the program executes an int3 of its
 * own before each call instead, and its handler goes on after it: the same instructions
 * but those two int3s, so that map.py compares counts.  With "k", there is no handler.  What a
 * handler saw is printed at the end with code whose instruction count does not depend on the
 * values. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static unsigned long seen[4]; /* si_code and pc of two traps */
static unsigned ntraps, back = 1;

__attribute__((noipa)) unsigned work(unsigned n)
{
	unsigned s = 0;

	for (unsigned i = 0; i < n; i++)
		s += i * i ^ (s >> 3);
	return s;
}

__attribute__((noipa)) unsigned later(unsigned n)
{
	return n * 3 + 1;
}

/* The program's own int3, or not: one instruction apart. */
__attribute__((noipa)) void maybe_trap(int yes)
{
	if (yes)
		__asm__ volatile("int3");
}

/* A line's first byte. */
static char wait_line(void)
{
	char c, first = 0;
	int n = 0;

	while (read(0, &c, 1) == 1 && c != '\n')
		first = n++ ? first : c;
	return first;
}

static void on_trap(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;

	write(1, "trap\n", 5);
	wait_line();
	seen[ntraps++ & 3] = (unsigned long)si->si_code;
	seen[ntraps++ & 3] = (unsigned long)uc->uc_mcontext.gregs[REG_RIP];
	uc->uc_mcontext.gregs[REG_RIP] -= back; /* back to the int3's address */
}

static void put_hex(char *out, unsigned long v)
{
	for (int i = 0; i < 16; i++)
		out[i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 15];
}

int main(void)
{
	char line[4 * 17 + 1];
	struct sigaction sa;
	unsigned a, b, c;
	int ref, mode;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGTRAP, &sa, NULL);
	a = work(10);
	printf("pid %d work %#lx later %#lx first %u\n", (int)getpid(), (unsigned long)&work,
	       (unsigned long)&later, a);
	fflush(stdout);
	mode = wait_line();
	if (mode == 'k') /* no handler: a breakpoint kills, as natively */
		signal(SIGTRAP, SIG_DFL);
	ref = mode == 'r';
	back = 1 - (unsigned)ref;
	maybe_trap(ref);
	c = later(a);
	maybe_trap(ref);
	b = work(1000);
	printf("result %u %u\n", b, c);
	fflush(stdout);
	for (int i = 0; i < 4; i++) {
		put_hex(line + 17 * i, seen[i]);
		line[17 * i + 16] = ' ';
	}
	line[4 * 17 - 1] = '\n';
	write(1, "seen ", 5);
	write(1, line, 4 * 17);
	return 7;
}
