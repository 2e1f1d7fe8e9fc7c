/* Signals on an alternate stack, nested and close together, as CPython's signal tests send
 * them: handlers installed with SA_ONSTACK (every Python handler is) that arm a 1 us timer
 * whose SIGALRM comes while they run, and a SIGUSR1 sent with a timer signal pending.  It
 * checks what the kernel promises: each handler sees its stack and sigaltstack() as the
 * flags say, no signal is lost, the alternate stack cannot be changed while in use.
 * Prints one line of counts; exits 0 when every check held, 1 otherwise.
 * Usage: sigstack [ROUNDS] */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char alt[1 << 16];
static volatile sig_atomic_t bad;
static long delivered, on_alt, off_alt;

static int on_alt_stack(void)
{
	char here;

	return &here > alt && &here < alt + sizeof(alt);
}

/* The handler's view: on the alternate stack exactly when it asked for it, and
 * sigaltstack() agrees; changing the stack while on it is refused. */
static void look(int want_alt)
{
	stack_t now, other = {.ss_sp = alt, .ss_size = sizeof(alt)};
	int here = on_alt_stack();

	if (here != want_alt)
		bad = 1;
	if (sigaltstack(NULL, &now) || !!(now.ss_flags & SS_ONSTACK) != here)
		bad = 2;
	if (here && (sigaltstack(&other, NULL) != -1 || errno != EPERM))
		bad = 3;
	__atomic_fetch_add(here ? &on_alt : &off_alt, 1, __ATOMIC_SEQ_CST);
	__atomic_fetch_add(&delivered, 1, __ATOMIC_SEQ_CST);
}

static void arm(long usec)
{
	struct itimerval it = {{0, 0}, {0, usec}};

	setitimer(ITIMER_REAL, &it, NULL);
}

/* SIGPROF: on the alternate stack, and a SIGALRM arrives while it runs. */
static void first(int sig)
{
	int saved = errno;

	(void)sig;
	arm(1);
	look(1);
	errno = saved;
}

/* SIGALRM: on the alternate stack too (nested below the first, or at its top). */
static void second(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;

	(void)uc;
	if (si->si_signo != sig)
		bad = 4;
	look(1);
	errno = saved;
}

/* SIGUSR1: on the alternate stack, sent with a SIGALRM pending. */
static void third(int sig)
{
	int saved = errno;

	(void)sig;
	look(1);
	errno = saved;
}

/* SIGUSR2: on the program's own stack. */
static void plain(int sig)
{
	int saved = errno;

	(void)sig;
	look(0);
	errno = saved;
}

static void wait_for(long want)
{
	struct timespec t = {0, 10000};

	for (int k = 0; k < 200000 && __atomic_load_n(&delivered, __ATOMIC_SEQ_CST) < want; k++)
		nanosleep(&t, NULL);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 500;
	stack_t ss = {.ss_sp = alt, .ss_size = sizeof(alt)}, now;
	struct sigaction sa;
	long want = 0;

	if (sigaltstack(&ss, NULL))
		return 2;
	memset(&sa, 0, sizeof(sa));
	sa.sa_flags = SA_ONSTACK;
	sa.sa_handler = first;
	sigaction(SIGPROF, &sa, NULL);
	sa.sa_handler = third;
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_flags = SA_ONSTACK | SA_SIGINFO;
	sa.sa_sigaction = second;
	sigaction(SIGALRM, &sa, NULL);
	sa.sa_flags = 0;
	sa.sa_handler = plain;
	sigaction(SIGUSR2, &sa, NULL);
	for (int i = 0; i < rounds; i++) {
		/* dependent: the SIGALRM the first handler arms comes while it runs */
		kill(getpid(), SIGPROF);
		wait_for(want += 2);
		/* simultaneous: a timer signal and SIGUSR1 delivered together */
		arm(1);
		kill(getpid(), SIGUSR1);
		wait_for(want += 2);
		/* and one on the program's own stack */
		kill(getpid(), SIGUSR2);
		wait_for(want += 1);
	}
	if (sigaltstack(NULL, &now) || (now.ss_flags & SS_ONSTACK) || now.ss_sp != alt)
		bad = 5;
	printf("%ld signals, %ld on the alternate stack, %ld off it, %s\n", delivered, on_alt,
	       off_alt, delivered == want && !bad ? "all as promised" : "NOT as promised");
	if (bad)
		printf("check %d failed\n", (int)bad);
	return delivered == want && !bad ? 0 : 1;
}
