/* Target of the proc tests: prints which of SIGHUP, SIGINT, SIGUSR1 and SIGUSR2 it was given
 * ignored and which blocked (as a shell's background job is given SIGINT ignored). */
#include <signal.h>
#include <stdio.h>

int main(void)
{
	static const int sigs[] = {SIGHUP, SIGINT, SIGUSR1, SIGUSR2};
	static const char *const names[] = {"HUP", "INT", "USR1", "USR2"};
	sigset_t mask;

	sigprocmask(SIG_BLOCK, NULL, &mask);
	for (int i = 0; i < 4; i++) {
		struct sigaction sa;

		sigaction(sigs[i], NULL, &sa);
		printf("%s%s%s%s", i ? " " : "", names[i],
		       sa.sa_handler == SIG_IGN ? ":ignored" : "",
		       sigismember(&mask, sigs[i]) ? ":blocked" : "");
	}
	putchar('\n');
	return 0;
}
