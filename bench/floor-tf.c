/* Raw floor of in-process trap-flag stepping: EFLAGS.TF set around a dec/jnz loop, and a
 * SIGTRAP handler that only counts.  No engine that steps with TF + SIGTRAP can beat this;
 * bench/count compares `tracepad count --engine trapflag` to it.
 * Usage: floor-tf [ITERATIONS]   (2 * ITERATIONS + 5 instructions stepped) */
#include <signal.h>
#include <string.h>

#include "floor.h"

static volatile unsigned long traps;

/* SA_SIGINFO like a real stepper, which needs the interrupted context. */
static void on_trap(int sig, siginfo_t *si, void *uc)
{
	traps++;
}

int main(int argc, char **argv)
{
	unsigned long n = floor_iterations(argc, argv);
	struct sigaction sa;
	double t0, t1;

	if (floor_pin())
		perror("floor-tf: sched_setaffinity (not pinned)");
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTRAP, &sa, NULL)) {
		perror("floor-tf: sigaction");
		return 1;
	}
	t0 = floor_now();
	__asm__ volatile("pushfq; orq $0x100, (%%rsp); popfq" ::: "memory", "cc");
	bench_loop(n);
	__asm__ volatile("pushfq; andq $~0x100, (%%rsp); popfq" ::: "memory", "cc");
	t1 = floor_now();
	floor_print("floor-tf", traps, t1 - t0);
	return 0;
}
