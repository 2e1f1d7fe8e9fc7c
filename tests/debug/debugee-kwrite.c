/* Memory the kernel writes, watched in a scripted gdb session (tests/debug): the old action
 * that rt_sigaction reads back and read()'s buffer.  A debug register does not fire at the
 * kernel's writes; under the code cache the runtime writes the old action itself (it gives
 * back the program's handler for the trampoline the kernel has). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* the kernel's struct sigaction (x86-64) */
struct ksigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	unsigned long mask;
};

struct ksigaction old;
char buf[8];

static void handler(int sig)
{
	(void)sig;
}

int main(void)
{
	struct sigaction sa;
	int fd[2];

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	if (sigaction(SIGUSR1, &sa, NULL) ||
	    syscall(SYS_rt_sigaction, SIGUSR1, NULL, &old, sizeof(old.mask)) || pipe(fd) ||
	    write(fd[1], "hello", 6) != 6 || read(fd[0], buf, sizeof(buf)) != 6)
		return 1;
	printf("%s %d\n", buf, old.handler == handler);
	return 0;
}
