/* The crash guard (guard.h).  Everything here after the fault runs in a signal handler:
 * raw syscalls over the task table as it stands, no lock, no allocation. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arch/arch.h"
#include "proc/guard.h"
#include "proc/proc-priv.h"

/* The alternate stack: a fault from a stack overflow still finds room to run the guard
 * (the restore walks tables and makes ptrace calls; a few KiB suffice). */
#define GUARD_STACK_SIZE (64 * 1024)
/* How long a task interrupted at the crash is waited for, in 1 ms polls. */
#define GUARD_STOP_POLLS 2000

static const int guard_sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

static char guard_stack[GUARD_STACK_SIZE];
static struct tp_proc *guard_proc; /* the tp_proc in use (proc.c tells) */
static const char *guard_who;
static tp_proc_guard_fn guard_restore;
static void *guard_arg;
static volatile sig_atomic_t guard_armed;
static volatile pid_t guard_detached;
/* the threads a crash seized again (tp_proc_guard_detached), each with the signal its stop
 * holds back */
#define SEIZED_MAX 4096
static pid_t seized[SEIZED_MAX];
static int seized_sig[SEIZED_MAX];
volatile sig_atomic_t tp_proc_guard_running;
struct tp_proc_inflight tp_proc_inflight[TP_PROC_INFLIGHT_MAX];
volatile int tp_proc_ninflight;
long tp_proc_guard_crash_after; /* TRACEPAD_TEST_CRASH: fault at this event (0: never) */

void tp_proc_guard_track(struct tp_proc *p)
{
	if (!guard_proc)
		guard_proc = p;
}

void tp_proc_guard_untrack(struct tp_proc *p)
{
	if (guard_proc == p)
		guard_proc = NULL;
}

/* Not instrumented: UBSan would report the null store and exit before the fault. */
__attribute__((no_sanitize("undefined"))) void tp_proc_guard_test_crash(void)
{
	/* A fault as a bug would make one, not a raise(): the guard runs from the fault. */
	volatile int *volatile nowhere = NULL;

	*nowhere = 0;
}

void tp_proc_guard_event(void)
{
	if (tp_proc_guard_crash_after && !--tp_proc_guard_crash_after)
		tp_proc_guard_test_crash();
}

static void say(const char *s)
{
	size_t n = strlen(s);

	while (n) {
		ssize_t w = write(STDERR_FILENO, s, n);

		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

/* Wait for the stop of interrupted task @t (polling: a task that cannot stop, a zombie,
 * must not hang the guard).  A signal it stopped with is kept to be delivered at detach. */
static void stop_task(struct tp_task *t)
{
	const struct timespec ms = {0, 1000 * 1000};
	int st;

	if (t->state == TP_TASK_STOPPED)
		return;
	if (!t->interrupting && ptrace(PTRACE_INTERRUPT, t->tid, 0, 0))
		return;
	for (int i = 0; i < GUARD_STOP_POLLS; i++) {
		pid_t r = waitpid(t->tid, &st, __WALL | WNOHANG);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return;
		if (r == 0) {
			nanosleep(&ms, NULL);
			continue;
		}
		if (!WIFSTOPPED(st)) /* gone */
			return;
		t->state = TP_TASK_STOPPED;
		t->trapped = (st >> 16) == 0 && WSTOPSIG(st) == SIGTRAP;
		/* A signal-delivery stop of the program's own signal: delivered at detach.
		 * SIGTRAP here is one of our int3s (rewound by the restore) or a step. */
		if ((st >> 16) == 0 && WSTOPSIG(st) != SIGTRAP && WSTOPSIG(st) != SIGSTOP)
			t->pending_sig = WSTOPSIG(st);
		return;
	}
}

/* Is @sig pending for thread @tid alone (SigPnd of /proc/TID/status), read without stdio. */
static bool thread_sig_pending(pid_t tid, int sig)
{
	char path[40] = "/proc/", digits[12], buf[2048], *p;
	unsigned long long mask = 0;
	size_t at = strlen(path);
	ssize_t n;
	int nd = 0, fd;

	do
		digits[nd++] = (char)('0' + tid % 10);
	while ((tid /= 10) && nd < (int)sizeof(digits));
	while (nd)
		path[at++] = digits[--nd];
	memcpy(path + at, "/status", 8);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	p = strstr(buf, "\nSigPnd:");
	if (!p)
		return false;
	for (p += 8; *p == ' ' || *p == '\t'; p++)
		;
	for (; (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'); p++)
		mask = mask << 4 | (unsigned)(*p <= '9' ? *p - '0' : *p - 'a' + 10);
	return mask >> (sig - 1) & 1;
}

/* A task stopped as the interrupt came may have the SIGTRAP of an int3 queued but not taken:
 * once detached, it would die of it.  It takes it now, while traced (a stop, suppressed). */
static void take_pending_trap(struct tp_task *t)
{
	int st;

	if (t->state != TP_TASK_STOPPED || t->pending_sig || !thread_sig_pending(t->tid, SIGTRAP) ||
	    ptrace(PTRACE_CONT, t->tid, 0, 0))
		return;
	while (waitpid(t->tid, &st, __WALL) < 0 && errno == EINTR)
		;
	t->trapped = WIFSTOPPED(st);
}

/* Events reported but not handled yet: a breakpoint stop leaves its pc past the int3. */
static void mark_queued_traps(struct tp_proc *p, const struct tp_event *q, unsigned head,
			      unsigned len, unsigned cap)
{
	for (unsigned i = 0; i < len; i++) {
		const struct tp_event *ev = &q[(head + i) % cap];
		struct tp_task *t;

		if (ev->kind == TP_EV_BREAKPOINT && (t = tp_proc_task_find(p, ev->tid)))
			t->trapped = true;
	}
}

bool tp_proc_guard_trapped(pid_t tid)
{
	struct tp_task *t = guard_proc ? tp_proc_task_find(guard_proc, tid) : NULL;

	return t && t->trapped;
}

void tp_proc_inflight_push(pid_t pid, pid_t tid, const struct user_regs_struct *regs, uint64_t at,
			   const uint8_t *orig, unsigned norig)
{
	struct tp_proc_inflight *f;

	if (tp_proc_ninflight == TP_PROC_INFLIGHT_MAX) {
		tp_proc_ninflight++; /* popped as well; not restored (none nests this deep) */
		return;
	}
	f = &tp_proc_inflight[tp_proc_ninflight];
	*f = (struct tp_proc_inflight){.pid = pid, .tid = tid, .has_regs = regs != NULL, .at = at};
	if (regs)
		f->regs = *regs;
	if (norig)
		memcpy(f->orig, orig, norig < sizeof(f->orig) ? norig : sizeof(f->orig));
	f->norig = norig < sizeof(f->orig) ? norig : sizeof(f->orig);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	tp_proc_ninflight++;
}

void tp_proc_inflight_pop(void)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	tp_proc_ninflight--;
}

void tp_proc_guard_detached(pid_t pid)
{
	guard_detached = pid;
}

/* "/proc/@pid/task" into @buf, without stdio. */
static void task_dir(char *buf, pid_t pid)
{
	char digits[16];
	int n = 0;

	do
		digits[n++] = (char)('0' + pid % 10);
	while ((pid /= 10) && n < 15);
	memcpy(buf, "/proc/", 6);
	buf += 6;
	while (n)
		*buf++ = digits[--n];
	memcpy(buf, "/task", 6);
}

/* Seize every thread of @pid not seized yet and wait until each is stopped; the number
 * seized now, from @n on. */
static int seize_round(pid_t pid, int n)
{
	char path[32], buf[4096];
	int fd, first = n;
	long len;

	task_dir(path, pid);
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return n;
	while ((len = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < len;) {
			struct tp_dirent {
				uint64_t ino;
				int64_t off;
				unsigned short reclen;
				unsigned char type;
				char name[];
			} *d = (struct tp_dirent *)(buf + off);
			pid_t tid = (pid_t)strtol(d->name, NULL, 10);
			int i;

			off += d->reclen;
			for (i = 0; i < n && seized[i] != tid; i++)
				;
			if (tid <= 0 || i < n || n == SEIZED_MAX ||
			    ptrace(PTRACE_SEIZE, tid, 0, 0) || ptrace(PTRACE_INTERRUPT, tid, 0, 0))
				continue;
			seized_sig[n] = 0;
			seized[n++] = tid;
		}
	}
	close(fd);
	for (int i = first; i < n; i++) {
		int st;

		if (waitpid(seized[i], &st, __WALL) != seized[i] || !WIFSTOPPED(st))
			seized[i] = 0; /* gone */
		else if ((st >> 16) != PTRACE_EVENT_STOP)
			seized_sig[i] = WSTOPSIG(st); /* a signal on its way: given back */
	}
	return n;
}

/* The program let go with the command's changes in it: every thread seized and stopped
 * (rounds until one finds no new thread: the stopped ones make none), the restore, the
 * detach. */
static void restore_detached(pid_t pid)
{
	int n = 0, was;

	do {
		was = n;
		n = seize_round(pid, n);
	} while (n != was);
	if (n && guard_restore)
		guard_restore(guard_arg);
	for (int i = 0; i < n; i++)
		if (seized[i])
			ptrace(PTRACE_DETACH, seized[i], 0, seized_sig[i]);
}

/* An injected system call's task runs it at @f->at (its entry or exit stop): its registers
 * are to be put back, a restart included.  Elsewhere it is still in its own stop, where the
 * kernel would restart an interrupted call once more. */
static bool in_syscall_at(const struct tp_proc_inflight *f)
{
	struct user_regs_struct now;

	return !ptrace(PTRACE_GETREGS, f->tid, 0, &now) &&
	       (now.rip == f->at || now.rip == f->at + TP_ARCH_SYSCALL_LEN);
}

static void on_crash(int sig)
{
	struct tp_proc *p = guard_proc;

	if (!guard_armed)
		goto die;
	guard_armed = 0;
	tp_proc_guard_running = 1;
	say(guard_who);
	say(": crashed; restoring the programs and detaching\n");
	if (!p) {
		if (guard_detached > 0)
			restore_detached(guard_detached);
		goto die;
	}
	for (unsigned i = 0; i < p->cap; i++)
		if (p->slots[i])
			stop_task(p->slots[i]);
	for (unsigned i = 0; i < p->cap; i++)
		if (p->slots[i])
			take_pending_trap(p->slots[i]);
	mark_queued_traps(p, p->queue, p->qhead, p->qlen, p->qcap);
	mark_queued_traps(p, p->held, p->hhead, p->hlen, p->hcap);
	/* injections cut short, innermost first: the bytes they wrote, the tasks' registers */
	for (int i = tp_proc_ninflight < TP_PROC_INFLIGHT_MAX ? tp_proc_ninflight
							      : TP_PROC_INFLIGHT_MAX;
	     i-- > 0;) {
		const struct tp_proc_inflight *f = &tp_proc_inflight[i];

		if (f->norig)
			tp_proc_write(f->pid, f->at, f->orig, f->norig);
		if (f->has_regs && (!f->at || in_syscall_at(f))) {
			/* stopped at the injected call's entry or exit: with orig_rax -1 the
			 * kernel neither runs nor restarts a system call on the way out, and
			 * the registers restart the interrupted one themselves */
			struct user_regs_struct r = f->regs;

			if (f->at)
				r.orig_rax = (uint64_t)-1;
			ptrace(PTRACE_SETREGS, f->tid, 0, &r);
		}
	}
	if (guard_restore)
		guard_restore(guard_arg);
	for (unsigned i = 0; i < p->cap; i++) {
		struct tp_task *t = p->slots[i];

		/* a system call's stop (SIGTRAP | 0x80) is no signal to pass on */
		if (t)
			ptrace(PTRACE_DETACH, t->tid, 0, t->pending_sig < 65 ? t->pending_sig : 0);
	}
die:
	signal(sig, SIG_DFL);
	raise(sig);
}

int tp_proc_guard_set(const char *who, tp_proc_guard_fn restore, void *arg)
{
	stack_t ss = {.ss_sp = guard_stack, .ss_size = sizeof(guard_stack)};
	struct sigaction sa = {.sa_handler = on_crash,
			       .sa_flags = SA_RESETHAND | SA_NODEFER | SA_ONSTACK};
	const char *env = getenv("TRACEPAD_TEST_CRASH");

	if (sigaltstack(&ss, NULL))
		return -errno;
	guard_who = who;
	guard_restore = restore;
	guard_arg = arg;
	tp_proc_guard_crash_after = env ? atol(env) : 0;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(guard_sigs) / sizeof(guard_sigs[0]); i++)
		if (sigaction(guard_sigs[i], &sa, NULL))
			return -errno;
	guard_armed = 1;
	return 0;
}

void tp_proc_guard_clear(void)
{
	guard_armed = 0;
	guard_restore = NULL;
	guard_detached = 0;
	tp_proc_guard_crash_after = 0;
	for (size_t i = 0; i < sizeof(guard_sigs) / sizeof(guard_sigs[0]); i++)
		signal(guard_sigs[i], SIG_DFL);
}
