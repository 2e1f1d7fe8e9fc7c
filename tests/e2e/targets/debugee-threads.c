/* A program of 3 threads for scripted gdb sessions (tests/debug): each is created once the
 * one before has ended, so that a session's stops come in one order, and no thread ever
 * waits in a way that depends on timing, so that its instruction count is the same on every
 * run: main waits for a thread's end in one blocking poll() of the thread's pidfd, which
 * reports it once the kernel cleared the thread's tid, so pthread_join() never waits. */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef PIDFD_THREAD
#define PIDFD_THREAD 0x80 /* O_EXCL: Linux 6.9 */
#endif

#define NTHREADS 3

long results[NTHREADS];
static int pipefd[2];

__attribute__((noinline)) void *worker(void *arg)
{
	long id = (long)arg, acc = 0;

	for (long r = 0; r < 100 * (id + 1); r++)
		acc += r * (id + 1);
	results[id] = acc;
	return NULL;
}

/* The thread's own pidfd (-1 before Linux 6.9) to main, then the work. */
static void *thread_main(void *arg)
{
	int fd = (int)syscall(SYS_pidfd_open, (long)syscall(SYS_gettid), PIDFD_THREAD);

	if (write(pipefd[1], &fd, sizeof(fd)) != sizeof(fd))
		return NULL;
	return worker(arg);
}

int main(void)
{
	if (pipe(pipefd))
		return 1;
	for (long i = 0; i < NTHREADS; i++) {
		struct pollfd p = {.events = POLLIN};
		pthread_t t;

		if (pthread_create(&t, NULL, thread_main, (void *)i) ||
		    read(pipefd[0], &p.fd, sizeof(p.fd)) != sizeof(p.fd))
			return 1;
		if (p.fd >= 0) {
			poll(&p, 1, -1);
			close(p.fd);
		}
		pthread_join(t, NULL);
	}
	for (long i = 0; i < NTHREADS; i++)
		printf("thread %ld: %ld\n", i, results[i]);
	return 0;
}
