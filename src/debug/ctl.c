/* The count's control block of `tracepad debug` (the layout of agent/agent-abi.h, as
 * `tracepad count --engine dbt` makes it for a whole program): one for gdb's session,
 * inherited by the programs gdb forks, mapped by the takeover, read at the program's exit;
 * a program gdb detaches keeps its block, read at its end wherever gdb is then. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent-abi.h"
#include "base/log.h"
#include "debug/engine-priv.h"

static struct {
	int fd;
	struct tp_agent_ctl *ctl;
	size_t size;
} C = {-1, NULL, 0};

#define CTL_THREADS 256
#define CTL_MAPS 1024

void tp_debug_ctl_reset(void)
{
	struct tp_agent_ctl *ctl = C.ctl;
	if (!ctl)
		return;
	size_t toff = (sizeof(*ctl) + 4095) & ~(size_t)4095;

	memset(ctl, 0, C.size);
	ctl->magic = TP_AGENT_MAGIC;
	ctl->abi = TP_AGENT_ABI;
	ctl->mode = TP_AGENT_PASSIVE;
	ctl->size = C.size;
	ctl->threads_off = toff;
	ctl->max_threads = CTL_THREADS;
	ctl->maps_off = toff + CTL_THREADS * sizeof(struct tp_agent_thread);
	ctl->max_maps = CTL_MAPS;
	ctl->addrs_off = ctl->maps_off + CTL_MAPS * sizeof(struct tp_agent_map);
	ctl->flags = TP_CTL_WHOLE;
	ctl->tracer_pid = getpid();
}

void tp_debug_ctl_init(void)
{
	size_t size = ((sizeof(struct tp_agent_ctl) + 4095) & ~(size_t)4095) +
		      CTL_THREADS * sizeof(struct tp_agent_thread) +
		      CTL_MAPS * sizeof(struct tp_agent_map);
	int fd = memfd_create("tracepad-ctl", 0), hi;
	void *at;

	size = (size + 4095) & ~(size_t)4095;
	if (fd < 0)
		return;
	/* out of the way of gdb's fds and the program's; inherited by the program */
	hi = fcntl(fd, F_DUPFD, 100);
	close(fd);
	if (hi < 0 || ftruncate(hi, (off_t)size) ||
	    (at = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, hi, 0)) == MAP_FAILED) {
		if (hi >= 0)
			close(hi);
		return;
	}
	C.fd = hi;
	C.ctl = at;
	C.size = size;
}

int tp_debug_ctl_fd(size_t *size)
{
	*size = C.size;
	return C.fd;
}

/* Programs gdb launched and then detached (follow-fork-mode child, `detach`): each runs on
 * to its end with its block, reported then. */
#define PARKED 8
static struct parked {
	pid_t pid; /* 0: free */
	int pidfd;
	struct tp_agent_ctl *ctl;
	size_t size;
} P[PARKED];

/* The count in @ctl of a program that ended with @status (-1: not known), as
 * `tracepad count --engine dbt` has it: every thread's. */
static void report(struct tp_agent_ctl *ctl, int status)
{
	const struct tp_agent_thread *th;
	uint64_t total = 0;
	uint32_t n;

	if (!ctl || !(__atomic_load_n(&ctl->state, __ATOMIC_ACQUIRE) & TP_AGENT_ST_ACTIVE))
		return;
	th = (const void *)((char *)ctl + ctl->threads_off);
	n = ctl->nthreads < ctl->max_threads ? ctl->nthreads : ctl->max_threads;
	for (uint32_t i = 0; i < n; i++)
		total += th[i].count;
	total += ctl->overflow_count;
	if (ctl->state & TP_AGENT_ST_ERROR) {
		ctl->error[sizeof(ctl->error) - 1] = 0;
		tp_warn("the code cache stopped: %s", ctl->error);
	}
	/* nothing counted: it never got to its exit (a thread's count is added there) */
	if (!total && (status == -1 || WIFSIGNALED(status)))
		tp_info("the program was killed before it could report its count");
	else
		tp_info("%llu instructions", (unsigned long long)total);
	ctl->state = 0;
}

void tp_debug_ctl_report(int status)
{
	report(C.ctl, status);
}

void tp_debug_ctl_detached(pid_t pid)
{
	struct parked *p = NULL;
	int fd;

	for (int i = 0; i < PARKED && !p; i++)
		if (!P[i].pid)
			p = &P[i];
	if (!C.ctl || !p ||
	    !(__atomic_load_n(&C.ctl->state, __ATOMIC_ACQUIRE) & TP_AGENT_ST_ACTIVE))
		return;
	/* gdb is its parent until it reaps it: the pid is its own until then */
	fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0) {
		tp_warn("cannot follow the detached program %d to its end (its count is lost): %s",
			(int)pid, strerror(errno));
		return;
	}
	*p = (struct parked){pid, fd, C.ctl, C.size};
	/* the session's next program gets a block of its own */
	close(C.fd);
	C.fd = -1;
	C.ctl = NULL;
	tp_debug_ctl_init();
}

static void unpark(struct parked *p)
{
	close(p->pidfd);
	munmap(p->ctl, p->size);
	p->pid = 0;
}

void tp_debug_ctl_reaped(pid_t pid, int status)
{
	for (int i = 0; i < PARKED; i++)
		if (P[i].pid == pid) {
			tp_dbg("the detached program %d ended, reaped by gdb", (int)pid);
			report(P[i].ctl, status);
			unpark(&P[i]);
		}
}

static bool ended(const struct parked *p, int timeout)
{
	struct pollfd pf = {.fd = p->pidfd, .events = POLLIN};
	int n;

	while ((n = poll(&pf, 1, timeout)) < 0 && errno == EINTR)
		;
	return n != 0;
}

/* At gdb's exit: the programs that ended are reported now, as gdb leaves their exit
 * unreaped; for those still running, a process is left behind that waits for their end,
 * with gdb's standard output and error (so a reader of gdb's output reads to its end
 * after the counts) and nothing else of gdb's. */
void tp_debug_ctl_fini(void)
{
	int keep[PARKED], left = 0;
	unsigned from = 3;

	for (int i = 0; i < PARKED; i++)
		if (P[i].pid && ended(&P[i], 0)) {
			siginfo_t si = {0};
			int st = -1;

			if (!waitid(P_PID, (id_t)P[i].pid, &si, WEXITED | WNOHANG | WNOWAIT) &&
			    si.si_pid == P[i].pid)
				st = si.si_code == CLD_EXITED ? W_EXITCODE(si.si_status, 0)
							      : si.si_status & 0x7f;
			tp_dbg("the detached program %d ended before gdb", (int)P[i].pid);
			report(P[i].ctl, st);
			unpark(&P[i]);
		} else if (P[i].pid) {
			int k = left++;

			for (; k > 0 && keep[k - 1] > P[i].pidfd; k--)
				keep[k] = keep[k - 1];
			keep[k] = P[i].pidfd;
		}
	if (!left || fork() != 0)
		return;
	tp_dbg("%d detached programs run on after gdb: their counts at their end", left);
	for (int k = 0; k < left; from = (unsigned)keep[k++] + 1)
		if (keep[k] > (int)from)
			syscall(SYS_close_range, from, (unsigned)keep[k] - 1, 0);
	syscall(SYS_close_range, from, ~0u, 0);
	for (int i = 0; i < PARKED; i++)
		if (P[i].pid) {
			ended(&P[i], -1);
			report(P[i].ctl, -1);
		}
	_exit(0);
}
