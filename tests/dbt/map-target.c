/* The program map.py reads the code cache's repositories of: it prints its pid and the
 * addresses of work() and later(), calls work() once, waits for a line, then calls later()
 * (translated only then) and work() again.  A SIGTRAP (the test's breakpoints) prints the pc
 * the handler sees, waits for a line (the breakpoint is removed meanwhile) and goes back to
 * the int3's address, as a debugger would. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

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

static void wait_line(void)
{
	char c;

	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

static void on_trap(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;
	char buf[128];
	int n = snprintf(buf, sizeof(buf), "trap code %d rip %#llx\n", si->si_code,
			 (unsigned long long)uc->uc_mcontext.gregs[REG_RIP]);

	write(1, buf, (size_t)n);
	wait_line();
	uc->uc_mcontext.gregs[REG_RIP] -= 1; /* back to the int3's address */
}

int main(void)
{
	struct sigaction sa;
	unsigned a, b, c;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGTRAP, &sa, NULL);
	a = work(10);
	printf("pid %d work %#lx later %#lx first %u\n", (int)getpid(), (unsigned long)&work,
	       (unsigned long)&later, a);
	fflush(stdout);
	wait_line();
	c = later(a);
	b = work(1000);
	printf("result %u %u\n", b, c);
	return 7;
}
