/* A program that outlives its debugger (tests/debug): once past work(), it waits for
 * SIGUSR1, which its parent's end sends it (PR_SET_PDEATHSIG: gdb's exit after a detach),
 * or a test, then says so. */
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>

__attribute__((noinline)) int work(int x)
{
	return x * 2;
}

static void on_usr1(int sig)
{
	(void)sig;
}

int main(void)
{
	sigset_t usr1, old;
	int r;

	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	/* blocked until sigsuspend: one that comes early waits there, the same path */
	sigprocmask(SIG_BLOCK, &usr1, &old);
	signal(SIGUSR1, on_usr1);
	prctl(PR_SET_PDEATHSIG, SIGUSR1);
	puts("ready");
	fflush(stdout);
	r = work(21);
	sigsuspend(&old);
	printf("done %d\n", r);
	return 0;
}
