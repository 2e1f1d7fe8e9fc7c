/* The keeper: tracepad splits in two before it traces, so that a SIGKILL of the process the
 * user started (kill -9, timeout -s KILL, the OOM killer) still ends tracing with a clean
 * detach.  The child does all the work; the parent only forwards signals and waits. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"

/* What the tracer is sent when the keeper dies: one of the signals that end tracing
 * (tp_cli_catch_signals), so that death takes the path of a user's kill. */
#define KEEPER_DEATH_SIG SIGTERM

/* The signals that end tracing, forwarded by the keeper to the tracer. */
static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

static volatile pid_t tracer;
static volatile sig_atomic_t forwarded_once;

/* Once: a second signal changes nothing for a tracer that is already detaching, and a
 * tracer that has put its handlers back to finish its report must not die of one. */
static void forward(int sig)
{
	int saved = errno;

	if (tracer > 0 && !forwarded_once) {
		forwarded_once = 1;
		kill(tracer, sig);
	}
	errno = saved;
}

/* End the keeper as its tracer ended: the same exit status, or the same signal (without a
 * second core dump: the tracer's, if any, is the one that tells). */
static void __attribute__((noreturn)) mirror(int st)
{
	struct rlimit none = {0, 0};
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigset_t set;
	int sig;

	if (WIFEXITED(st))
		_exit(WEXITSTATUS(st));
	sig = WTERMSIG(st);
	setrlimit(RLIMIT_CORE, &none);
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	kill(getpid(), sig);
	_exit(128 + sig);
}

static void __attribute__((noreturn)) keep(pid_t child, const sigset_t *old)
{
	struct sigaction sa = {.sa_handler = forward, .sa_flags = SA_RESTART};
	int st = 0;

	tracer = child;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaction(forwarded[i], &sa, NULL);
	/* those that came since the fork are forwarded now */
	sigprocmask(SIG_SETMASK, old, NULL);
	for (;;) {
		pid_t w = waitpid(child, &st, 0);

		if (w == child && (WIFEXITED(st) || WIFSIGNALED(st)))
			mirror(st);
		if (w < 0 && errno != EINTR) {
			fprintf(stderr, "tracepad: waiting for the tracer: %s\n", strerror(errno));
			_exit(1);
		}
	}
}

void tp_cli_keeper_start(void)
{
	pid_t keeper = getpid(), child;
	sigset_t block, old;

	sigemptyset(&block);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaddset(&block, forwarded[i]);
	/* Until the keeper forwards them: none is lost, none kills it. */
	sigprocmask(SIG_BLOCK, &block, &old);
	/* Nothing buffered may be written twice; the keeper writes nothing after this. */
	fflush(NULL);
	child = fork();
	if (child > 0)
		keep(child, &old);
	if (child < 0) {
		fprintf(stderr,
			"tracepad: warning: cannot fork the tracer (%s): a kill -9 of tracepad "
			"will harm the program\n",
			strerror(errno));
	} else if (prctl(PR_SET_PDEATHSIG, KEEPER_DEATH_SIG)) {
		fprintf(stderr, "tracepad: warning: PR_SET_PDEATHSIG: %s\n", strerror(errno));
	} else if (getppid() != keeper) {
		/* The keeper died before the death signal was armed: end at once, as if it had
		 * come (the stop handlers are in place, the signal waits for the unblock). */
		raise(KEEPER_DEATH_SIG);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
}
