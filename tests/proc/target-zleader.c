/* Target of the proc tests: main leaves with pthread_exit() (a zombie leader) while two
 * threads run until the tracer sets `stop`, whose address is printed first. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

volatile int stop;

static void *work(void *arg)
{
	struct timespec ts = {0, 100000};

	while (!stop)
		nanosleep(&ts, NULL);
	if (arg)
		printf("done\n");
	return NULL;
}

int main(void)
{
	pthread_t th[2];

	printf("ready %p\n", (void *)&stop);
	fflush(stdout);
	pthread_create(&th[0], NULL, work, (void *)1);
	pthread_create(&th[1], NULL, work, NULL);
	pthread_exit(NULL);
}
