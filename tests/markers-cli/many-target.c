/* Target of the markers tests with many threads: "many-target T N [wait]": T threads each fire
 * N events of point many_ev, all alive at once (a barrier holds them until each fired), then
 * it prints "fired K" and exits.  With a third argument, the threads wait for SIGUSR1 before
 * firing (the test attaches first); "ready" is printed once they all wait. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <tracepad/tracepoint.h>

TP_POINT(many_ev);

static int nevents;
static pthread_barrier_t started, fired;
static volatile sig_atomic_t go;

static void on_usr1(int sig)
{
	(void)sig;
	go = 1;
}

static void *thread_main(void *arg)
{
	int id = (int)(long)arg;

	pthread_barrier_wait(&started);
	while (!go)
		usleep(1000);
	for (int i = 0; i < nevents; i++)
		TP_TRACE(many_ev, "ev %d %d", id, i);
	pthread_barrier_wait(&fired);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t *th;
	int n;

	if (argc < 3) {
		fprintf(stderr, "usage: %s THREADS EVENTS [wait]\n", argv[0]);
		return 2;
	}
	n = atoi(argv[1]);
	nevents = atoi(argv[2]);
	th = calloc((size_t)n, sizeof(*th));
	signal(SIGUSR1, on_usr1);
	go = argc < 4;
	pthread_barrier_init(&started, NULL, (unsigned)n + 1);
	pthread_barrier_init(&fired, NULL, (unsigned)n);
	for (int i = 0; i < n; i++)
		if (pthread_create(&th[i], NULL, thread_main, (void *)(long)i))
			return 1;
	pthread_barrier_wait(&started);
	if (!go) {
		printf("ready\n");
		fflush(stdout);
	}
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	printf("fired %d\n", n * nevents);
	return 0;
}
