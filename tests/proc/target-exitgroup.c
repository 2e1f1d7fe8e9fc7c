/* Target of the proc tests: main starts two threads that sleep forever and exits with 5,
 * killing them. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static void *sleeper(void *arg)
{
	for (;;)
		pause();
	return NULL;
}

int main(void)
{
	pthread_t th[2];

	pthread_create(&th[0], NULL, sleeper, NULL);
	pthread_create(&th[1], NULL, sleeper, NULL);
	exit(5);
}
