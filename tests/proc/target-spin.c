/* Target of the attach tests: four threads check invariants in a loop (with system calls
 * that an attach interrupts) until the tracer sets `stop`; prints the addresses of `magic`
 * and `stop` first, and the result at the end. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define NTHREADS 4

volatile long magic = 0x1234;
volatile int stop;
static volatile int errors;

static void *work(void *arg)
{
	struct timespec ts = {0, 200000};
	unsigned long a = 0, b = 0, i = 0;

	while (!stop) {
		a += i;
		b += i;
		if (a != b)
			errors++;
		/* A syscall every so often, so that attaching interrupts sleeps too. */
		if (++i % 4096 == 0 && nanosleep(&ts, NULL))
			errors++;
	}
	return NULL;
}

int main(void)
{
	pthread_t th[NTHREADS];

	for (int i = 0; i < NTHREADS; i++)
		if (pthread_create(&th[i], NULL, work, NULL))
			return 1;
	printf("ready %p %p\n", (void *)&magic, (void *)&stop);
	fflush(stdout);
	while (!stop)
		usleep(1000);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	printf("threads=%d errors=%d magic=%lx\n", NTHREADS, errors, magic);
	return 0;
}
