/* e2e target: blocks SIGTRAP and SIGUSR1, reads the mask back (it must show SIGTRAP blocked
 * even though a trap-flag stepper cannot let it be blocked), raises SIGUSR1 while it is
 * blocked, then unblocks (the handler runs then) and reads the mask again.
 * Usage: sigmask   prints the masks it read back; exit 0 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t usr1_runs;

static void on_usr1(int sig)
{
	usr1_runs++;
}

static void show(const char *when)
{
	sigset_t cur, cur2;

	sigprocmask(SIG_SETMASK, NULL, &cur);
	pthread_sigmask(SIG_SETMASK, NULL, &cur2);
	printf("%s: sigprocmask SIGTRAP %s SIGUSR1 %s; pthread_sigmask SIGTRAP %s; usr1 ran %d\n",
	       when, sigismember(&cur, SIGTRAP) ? "blocked" : "unblocked",
	       sigismember(&cur, SIGUSR1) ? "blocked" : "unblocked",
	       sigismember(&cur2, SIGTRAP) ? "blocked" : "unblocked", (int)usr1_runs);
}

int main(void)
{
	struct sigaction sa;
	sigset_t set, old, orig;
	volatile unsigned long spin = 0;
	int i;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGTRAP);
	sigaddset(&set, SIGUSR1);

	sigprocmask(SIG_SETMASK, NULL, &orig);
	show("start");
	sigprocmask(SIG_BLOCK, &set, &old);
	printf("old mask SIGTRAP %s\n", sigismember(&old, SIGTRAP) ? "blocked" : "unblocked");
	for (i = 0; i < 100; i++) /* work while SIGTRAP is blocked */
		spin += i;
	raise(SIGUSR1);
	show("blocked");
	sigprocmask(SIG_UNBLOCK, &set, &old);
	printf("old mask SIGTRAP %s\n", sigismember(&old, SIGTRAP) ? "blocked" : "unblocked");
	show("unblocked");

	pthread_sigmask(SIG_BLOCK, &set, NULL);
	show("pthread blocked");
	pthread_sigmask(SIG_SETMASK, &orig, NULL);
	show("restored");
	return spin == 4950 ? 0 : 1;
}
