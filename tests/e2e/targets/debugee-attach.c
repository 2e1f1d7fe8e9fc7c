/* A program for gdb's attach (tests/debug): it says its pid, then waits in pause() for a
 * SIGUSR1 (the session sends it), calls done() and exits. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

volatile sig_atomic_t go;

static void on_usr1(int sig)
{
	go = 1;
}

__attribute__((noinline)) int done(int n)
{
	return n + 1;
}

int main(void)
{
	signal(SIGUSR1, on_usr1);
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	while (!go)
		pause();
	printf("done %d\n", done(41));
	return 0;
}
