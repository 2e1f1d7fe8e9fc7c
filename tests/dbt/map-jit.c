/* A breakpoint in code that is translated again and again (map.py): each round maps a page
 * of code at the same address, calls it and unmaps it, so that every call runs a fresh
 * translation of the same program address (the one before is stale).  The code begins with
 * a nop: a SIGTRAP there (the breakpoint) goes on after it, so each round traps once when
 * every fresh translation has the int3. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define CODE_AT ((void *)0x600000000000ull)
#define ROUNDS 2000

static volatile unsigned long traps, wrong_pc;

static void on_trap(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;

	traps++;
	wrong_pc += (uint64_t)uc->uc_mcontext.gregs[REG_RIP] != (uint64_t)CODE_AT + 1;
}

int main(void)
{
	/* nop; mov $imm32, %eax; ret */
	uint8_t code[] = {0x90, 0xb8, 0, 0, 0, 0, 0xc3};
	unsigned sum = 0, want = 0;
	struct sigaction sa;
	char c;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGTRAP, &sa, NULL);
	/* the first round's page is there before the breakpoint is set on it */
	if (mmap(CODE_AT, 4096, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != CODE_AT)
		return 1;
	memcpy(CODE_AT, code, sizeof(code));
	printf("pid %d code %#lx\n", (int)getpid(), (unsigned long)CODE_AT);
	fflush(stdout);
	while (read(0, &c, 1) == 1 && c != '\n')
		;
	for (unsigned i = 1; i <= ROUNDS; i++) {
		void *p = i == 1 ? CODE_AT
				 : mmap(CODE_AT, 4096, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

		if (p != CODE_AT)
			return 1;
		memcpy(code + 2, &i, 4);
		memcpy(p, code, sizeof(code));
		mprotect(p, 4096, PROT_READ | PROT_EXEC);
		sum += ((unsigned (*)(void))p)();
		want += i;
		munmap(p, 4096);
	}
	printf("sum %s traps %lu wrong pc %lu rounds %d\n", sum == want ? "right" : "wrong", traps,
	       wrong_pc, ROUNDS);
	return 0;
}
