/* Target of the proc tests for signals.  Modes: "handle" raises SIGUSR1 five times and
 * SIGUSR2 once, handled; "term" dies of SIGTERM; "stop" stops itself with SIGSTOP; "trap"
 * runs an int3 with a SIGTRAP handler. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t usr1, usr2, traps;

static void on_usr1(int sig)
{
	usr1++;
}

static void on_usr2(int sig)
{
	usr2++;
}

static void on_trap(int sig)
{
	traps++;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "handle";

	signal(SIGUSR1, on_usr1);
	signal(SIGUSR2, on_usr2);
	signal(SIGTRAP, on_trap);
	if (!strcmp(mode, "handle")) {
		for (int i = 0; i < 5; i++)
			raise(SIGUSR1);
		kill(getpid(), SIGUSR2);
		printf("usr1=%d usr2=%d\n", (int)usr1, (int)usr2);
	} else if (!strcmp(mode, "term")) {
		printf("before term\n");
		fflush(stdout);
		raise(SIGTERM);
		printf("after term\n");
	} else if (!strcmp(mode, "stop")) {
		raise(SIGSTOP);
		printf("continued\n");
	} else if (!strcmp(mode, "trap")) {
		__asm__ volatile("int3");
		printf("traps=%d\n", (int)traps);
	}
	return 0;
}
