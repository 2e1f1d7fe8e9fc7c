/* e2e target: an SA_SIGINFO handler on a 100 us profiling timer reads the interrupted pc
 * from its ucontext and checks that it lies in the program's own text, libc's, the
 * loader's or the vDSO (read from /proc/self/maps first), while the program makes system
 * calls and indirect calls in a loop.
 * Usage: proftick [ROUNDS]   prints "pc outside: N" (0) and whether ticks came; exit 0.
 * The default 400000 rounds take some 40 ms of CPU: natively too a few ticks always come
 * (100000 took 10 ms, and a loaded machine's run sometimes saw none). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>

static struct {
	unsigned long start, end;
} text[16];
static int ntext;
static volatile unsigned long ticks, outside, first_outside;

static void on_prof(int sig, siginfo_t *si, void *p)
{
	unsigned long pc = (unsigned long)((ucontext_t *)p)->uc_mcontext.gregs[REG_RIP];

	ticks++;
	for (int i = 0; i < ntext; i++)
		if (pc >= text[i].start && pc < text[i].end)
			return;
	if (!outside++)
		first_outside = pc;
}

static void read_text(void)
{
	char line[512], self[256];
	FILE *f = fopen("/proc/self/maps", "r");
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	self[n > 0 ? n : 0] = 0;
	while (f && fgets(line, sizeof(line), f) && ntext < 16) {
		unsigned long a, b;
		char perms[5], path[256] = "";

		if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %255s", &a, &b, perms, path) < 3 ||
		    perms[2] != 'x')
			continue;
		if (!strcmp(path, self) || strstr(path, "/libc.so") || strstr(path, "/ld-linux") ||
		    !strcmp(path, "[vdso]")) {
			text[ntext].start = a;
			text[ntext++].end = b;
		}
	}
	if (f)
		fclose(f);
}

static long add(long x)
{
	return x + 1;
}

static long twice(long x)
{
	return x * 2;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 400000, acc = 0;
	long (*volatile fns[2])(long) = {add, twice};
	struct itimerval it = {{0, 100}, {0, 100}};
	struct sigaction sa;

	read_text();
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_prof;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGPROF, &sa, NULL);
	setitimer(ITIMER_PROF, &it, NULL);
	for (long i = 0; i < rounds; i++)
		acc = fns[i & 1](acc) % 1000003 + syscall(SYS_getppid) * 0;
	memset(&it, 0, sizeof(it));
	setitimer(ITIMER_PROF, &it, NULL);
	printf("acc %ld, ticks came: %s, pc outside: %lu", acc, ticks ? "yes" : "no", outside);
	if (outside)
		printf(" (first %#lx)", first_outside);
	printf("\n");
	return 0;
}
