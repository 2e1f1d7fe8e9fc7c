/* Target of the proc tests: a non-leader thread calls execve while two other threads sleep,
 * so the exec'ing thread takes over the leader's tid. */
#include <pthread.h>
#include <unistd.h>

static void *sleeper(void *arg)
{
	for (;;)
		pause();
	return NULL;
}

static void *execer(void *arg)
{
	char *argv[] = {"true", NULL};

	execv("/bin/true", argv);
	return NULL;
}

int main(void)
{
	pthread_t th[3];

	pthread_create(&th[0], NULL, sleeper, NULL);
	pthread_create(&th[1], NULL, sleeper, NULL);
	pthread_create(&th[2], NULL, execer, NULL);
	for (;;)
		pause();
}
