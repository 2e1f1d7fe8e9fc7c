/* The count's control block of `tracepad debug` (the layout of agent/agent-abi.h, as
 * `tracepad count --engine dbt` makes it for a whole program): one for gdb's session,
 * inherited by the programs gdb forks, mapped by the takeover, read at the program's exit. */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
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

/* The program's count at its exit: every thread's, as `tracepad count --engine dbt`. */
void tp_debug_ctl_report(int status)
{
	struct tp_agent_ctl *ctl = C.ctl;
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
	if (!total && WIFSIGNALED(status))
		tp_info("the program was killed before it could report its count");
	else
		tp_info("%llu instructions", (unsigned long long)total);
	ctl->state = 0;
}
