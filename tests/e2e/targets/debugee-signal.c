/* A program that signals itself, for scripted gdb sessions (tests/debug): gdb stops at each
 * signal, then the handler runs on its frame as natively. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

volatile sig_atomic_t hits;

void handler(int sig)
{
	hits += sig == SIGUSR1;
}

int main(void)
{
	signal(SIGUSR1, handler);
	for (int i = 0; i < 2; i++)
		raise(SIGUSR1);
	kill(getpid(), SIGUSR1);
	printf("hits=%d\n", (int)hits);
	return hits;
}
