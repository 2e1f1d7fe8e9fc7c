/* e2e target: a region that takes a signal whose handler does a known amount of work:
 * the handler runs tp_loop(N) (2N + 4 instructions), so the count of --start
 * work_with_signal with N minus the count with N = 0 is exactly 2N, which shows that the
 * handler's instructions are counted.
 * Usage: sighandler usr1|int3|trap|none N [TIMES]
 *   usr1: raise(SIGUSR1);  int3: an int3 instruction;  trap: raise(SIGTRAP)
 * (the program installs its own SIGUSR1 and SIGTRAP handlers, plain sigaction: the signal is
 * blocked while its handler runs); TIMES (default 1): the region runs that many times. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asm.h"

static volatile sig_atomic_t runs;
static unsigned long handler_n;

static void on_signal(int sig)
{
	runs++;
	tp_loop(handler_n);
}

__attribute__((noinline, noclone)) void work_with_signal(int mode)
{
	switch (mode) {
	case 'u':
		raise(SIGUSR1);
		break;
	case 'i':
		__asm__ volatile("int3");
		break;
	case 't':
		raise(SIGTRAP);
		break;
	}
}

int main(int argc, char **argv)
{
	struct sigaction sa;

	if (argc < 3 || !strchr("uitn", argv[1][0])) {
		fprintf(stderr, "usage: sighandler usr1|int3|trap|none N [TIMES]\n");
		return 2;
	}
	handler_n = strtoul(argv[2], NULL, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL) || sigaction(SIGTRAP, &sa, NULL)) {
		perror("sighandler: sigaction");
		return 1;
	}
	for (long i = argc > 3 ? strtol(argv[3], NULL, 0) : 1; i > 0; i--)
		work_with_signal(argv[1][0]);
	printf("sighandler %s %lu: handler ran %d times\n", argv[1], handler_n, (int)runs);
	return 0;
}
