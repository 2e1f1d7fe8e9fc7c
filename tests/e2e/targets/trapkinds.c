/* e2e target of trapkinds.py: the program gets SIGTRAPs of kinds a stepper must not take for
 * its own (issue 14: a trap it could not classify killed gzip under the trapflag engine):
 *   brkpt  rt_tgsigqueueinfo(SIGTRAP, si_code TRAP_BRKPT, si_addr 0x5ca1ab1e), as the kernel
 *          reports an icebp or a step without DR6.BS
 *   trace  the same with si_code TRAP_TRACE, as a single-step's trap
 *   user   kill(getpid(), SIGTRAP): SI_USER
 *   icebp  the icebp (int1) instruction (a trap after it; a fault at it on some VMs)
 * With "handler" its own SA_SIGINFO handler runs TIMES times (default 3) and prints what each
 * siginfo said, relative to what it expects; with "default" the trap is never handled and
 * the program dies of SIGTRAP, as natively.
 * Usage: trapkinds brkpt|trace|user|icebp handler|default [TIMES] */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define FAKE_ADDR ((void *)0x5ca1ab1e)

static volatile sig_atomic_t runs;
static char line[8][160];
extern char after_icebp[];

static const char *code_name(int code)
{
	switch (code) {
	case SI_USER:
		return "SI_USER";
	case SI_KERNEL:
		return "SI_KERNEL";
	case TRAP_BRKPT:
		return "TRAP_BRKPT";
	case TRAP_TRACE:
		return "TRAP_TRACE";
	}
	return "other";
}

static void on_trap(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;
	const char *addr = "other", *at_icebp = after_icebp - 1;
	const char *pc = (const char *)uc->uc_mcontext.gregs[REG_RIP];

	if (si->si_code == SI_USER)
		addr = si->si_pid == getpid() ? "own pid" : "other pid";
	else if (si->si_addr == FAKE_ADDR)
		addr = "the value sent";
	else if (si->si_addr == (void *)after_icebp)
		addr = "after the icebp";
	else if (si->si_addr == (void *)(after_icebp - 1))
		addr = "at the icebp";
	else if (!si->si_addr)
		addr = "NULL";
	if (runs < 8)
		snprintf(line[runs], sizeof(line[0]),
			 "trap %d: sig %d si_code %s, si_addr %s, pc %s\n", (int)runs, sig,
			 code_name(si->si_code), addr,
			 pc == after_icebp ? "after the icebp"
			 : pc == at_icebp  ? "at the icebp"
					   : "elsewhere");
	/* some virtual machines (KVM on AMD) report the icebp as a fault, at the instruction:
	 * the handler moves on past it, or it would run again for ever */
	if (pc == at_icebp)
		uc->uc_mcontext.gregs[REG_RIP] = (greg_t)after_icebp;
	runs++;
}

__attribute__((noinline)) static void queue(int code)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	si.si_signo = SIGTRAP;
	si.si_code = code;
	si.si_addr = FAKE_ADDR;
	if (syscall(SYS_rt_tgsigqueueinfo, getpid(), (pid_t)syscall(SYS_gettid), SIGTRAP, &si))
		perror("rt_tgsigqueueinfo");
}

__attribute__((noinline)) static void trap_once(char kind)
{
	switch (kind) {
	case 'b':
		queue(TRAP_BRKPT);
		break;
	case 't':
		queue(TRAP_TRACE);
		break;
	case 'u':
		kill(getpid(), SIGTRAP);
		break;
	case 'i':
		__asm__ volatile(".byte 0xf1\n"
				 ".globl after_icebp\n"
				 "after_icebp:\n");
		break;
	}
}

int main(int argc, char **argv)
{
	int times = argc > 3 ? atoi(argv[3]) : 3;
	struct sigaction sa;

	if (argc < 3 || !strchr("btui", argv[1][0]) || !strchr("hd", argv[2][0])) {
		fprintf(stderr,
			"usage: trapkinds brkpt|trace|user|icebp handler|default [TIMES]\n");
		return 2;
	}
	if (argv[2][0] == 'h') {
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_trap;
		sa.sa_flags = SA_SIGINFO;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGTRAP, &sa, NULL);
	}
	printf("%s %s\n", argv[1], argv[2]);
	fflush(stdout);
	for (int i = 0; i < times; i++)
		trap_once(argv[1][0]);
	for (int i = 0; i < runs && i < 8; i++)
		fputs(line[i], stdout);
	printf("handler ran %d times\n", (int)runs);
	return 0;
}
