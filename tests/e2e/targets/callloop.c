/* A process to attach to again and again: two threads call a function of their own that
 * sleeps 1 ms in usleep (so that detaching finds calls in flight, their return addresses
 * hooked) and check what it computes.  Prints "ready PID"; on SIGUSR1 it stops and prints
 * "calls N failures F", exiting 0 when F is 0. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

static atomic_int stop;
static atomic_long ncalls, nfail;

__attribute__((noinline)) long work(long i)
{
	usleep(1000);
	return i * 3 + 1;
}

static void *worker(void *arg)
{
	(void)arg;
	for (long i = 0; !atomic_load(&stop); i++) {
		if (work(i) != i * 3 + 1)
			atomic_fetch_add(&nfail, 1);
		atomic_fetch_add(&ncalls, 1);
	}
	return NULL;
}

int main(void)
{
	pthread_t th[2];
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, worker, NULL);
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	sigwait(&set, &sig);
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	printf("calls %ld failures %ld\n", atomic_load(&ncalls), atomic_load(&nfail));
	return atomic_load(&nfail) != 0;
}
