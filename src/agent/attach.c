/* The agent in a process that did not start with it: tracepad loads it with an injected
 * dlopen, then calls tracepad_agent_attach() in one stopped thread to hand it the control
 * block, and tracepad_agent_detach() before it lets go.  Both run with every other thread
 * stopped by ptrace, on the thread's stack below its red zone; tracepad sets and clears TF. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "agent/agent-priv.h"

/* Traps between two looks for tracepad: a kill(0) syscall every 16384 steps of a thread. */
#define TRACER_POLL_MASK 0x3fff

int tracepad_agent_attach(int tracer, int fd);
long tracepad_agent_detach(void);

long tp_agent_map_block(int tracer, int fd, const char *want, uint64_t magic, uint32_t abi,
			uint64_t *size)
{
	char path[48], link[64];
	const struct {
		uint64_t magic;
		uint32_t abi, pad;
		uint64_t size;
	} * h;
	long myfd, p, n, wlen = 0;
	int ok;

	while (want[wlen])
		wlen++;
	tp_agent_fd_path(path, tracer, fd);
	myfd = tp_raw3(SYS_open, path, O_RDWR | O_CLOEXEC, 0);
	if (myfd < 0)
		return -1;
	tp_agent_fd_path(path, (int)tp_raw0(SYS_getpid), (int)myfd);
	n = tp_raw4(SYS_readlink, path, link, sizeof(link) - 1, 0);
	p = n >= wlen && !__builtin_memcmp(link, want, (size_t)wlen)
		? tp_raw6(SYS_mmap, 0, 4096, PROT_READ, MAP_SHARED, myfd, 0)
		: -1;
	if (tp_raw_failed(p)) {
		tp_raw1(SYS_close, myfd);
		return -1;
	}
	h = (const void *)p;
	*size = h->size;
	ok = h->magic == magic && h->abi == abi && *size >= 4096 && *size <= (1ull << 32);
	tp_raw2(SYS_munmap, p, 4096);
	p = ok ? tp_raw6(SYS_mmap, 0, (long)*size, PROT_READ | PROT_WRITE, MAP_SHARED, myfd, 0)
	       : -1;
	tp_raw1(SYS_close, myfd);
	return tp_raw_failed(p) ? -1 : p;
}

void tp_agent_fd_path(char *buf, int pid, int fd)
{
	static const char head[] = "/proc/";
	char digits[12];
	int i = 0, n;

	for (n = 0; head[n]; n++)
		buf[i++] = head[n];
	for (int k = 0; k < 2; k++) {
		int v = k ? fd : pid;

		n = 0;
		do {
			digits[n++] = (char)('0' + v % 10);
			v /= 10;
		} while (v);
		while (n)
			buf[i++] = digits[--n];
		if (!k)
			for (const char *s = "/fd/"; *s; s++)
				buf[i++] = *s;
	}
	buf[i] = 0;
}

static void ctl_unmap(void)
{
	tp_raw2(SYS_munmap, tp_ag.ctl, (long)tp_ag.ctl_size);
	tp_ag.ctl = NULL;
	tp_ag.threads = NULL;
	tp_ag.maps = NULL;
	tp_ag.addrs = NULL;
}

/* The agent disables itself when its tracepad died without detaching (in-process engines
 * stop when their control channel goes): threads drop TF at their next trap; the block
 * stays until a new session. */
static int orphan_if_tracer_dead(void)
{
	if (!tp_ag.tracer || tp_raw2(SYS_kill, tp_ag.tracer, 0) != -ESRCH)
		return 0;
	tp_ag.orphaned = 1;
	tp_ag.active = 0;
	__atomic_store_n(&tp_ag.disabled, 1, __ATOMIC_SEQ_CST);
	if (tp_ag.ctl)
		__atomic_or_fetch(&tp_ag.ctl->state, TP_AGENT_ST_ORPHANED, __ATOMIC_RELEASE);
	return 1;
}

/* Take the control block that tracepad (pid @tracer) holds open as fd @fd, and get ready to
 * count: every thread tracepad then gives TF counts from its next trap on.  Returns 0, or
 * -1 when the control block cannot be had, -2 when it is refused (see ctl->error), -3 when
 * a session is under way already. */
__attribute__((visibility("default"))) int tracepad_agent_attach(int tracer, int fd)
{
	struct tp_agent_ctl *ctl;
	char path[48];
	long myfd;

	if (tp_ag.ctl && !tp_ag.orphaned)
		orphan_if_tracer_dead();
	/* After a tracepad that died: the old block goes once no thread uses it (those that
	 * come now see the agent disabled and leave it alone). */
	if (tp_ag.ctl && tp_ag.orphaned && !__atomic_load_n(&tp_ag.busy, __ATOMIC_SEQ_CST)) {
		tp_rt_sig_fini();
		ctl_unmap();
		tp_ag.orphaned = 0;
	}
	if (tp_ag.ctl)
		return -3;
	if (tracer <= 0 || fd < 0)
		return -1;
	tp_agent_fd_path(path, tracer, fd);
	myfd = tp_raw3(SYS_open, path, O_RDWR | O_CLOEXEC, 0);
	if (myfd < 0)
		return -1;
	switch (tp_agent_ctl_map((int)myfd)) {
	case 0:
		break;
	case -2:
		ctl_unmap();
		return -2;
	default:
		tp_raw1(SYS_close, myfd);
		return -1;
	}
	ctl = tp_ag.ctl;
	tp_ag.tracer = tracer;
	/* Threads keep their state of an earlier session in TLS: a new generation resets it
	 * at each thread's next trap. */
	__atomic_add_fetch(&tp_ag.gen, 1, __ATOMIC_SEQ_CST);
	tp_ag.active = 0;
	tp_ag.pid = (int)tp_raw0(SYS_getpid);
	tp_ag.start_pc = tp_ag.stop_pc = 0;
	ctl->pid = tp_ag.pid;
	ctl->step_begin_pc = (uint64_t)(uintptr_t)&tracepad_step_begin;
	ctl->step_end_pc = (uint64_t)(uintptr_t)&tracepad_step_end;
	ctl->detach_pc = (uint64_t)(uintptr_t)&tracepad_agent_detach;
	if (ctl->mode != TP_AGENT_COUNT || !(ctl->flags & TP_CTL_WHOLE) ||
	    (ctl->flags & (TP_CTL_SYNC | TP_CTL_SYNC2 | TP_CTL_API | TP_CTL_MAIN_DYNAMIC)) ||
	    ctl->start_vaddr || ctl->stop_vaddr) {
		tp_agent_fail("attach: only whole-program counting");
		goto err;
	}
	if (tp_zydis_load()) {
		tp_agent_fail("cannot load libZydis");
		goto err;
	}
	tp_agent_find_text();
	tp_stepper_reset();
	/* From here on the agent is live: the disabled flag of an earlier session goes. */
	__atomic_store_n(&tp_ag.disabled, 0, __ATOMIC_SEQ_CST);
	if (tp_rt_sig_init(&tp_stepper_sig_host) || tp_stepper_install()) {
		tp_agent_fail("cannot install the SIGTRAP handler");
		tp_rt_sig_fini();
		goto err;
	}
	tp_ag.active = 1;
	__atomic_or_fetch(&ctl->state, TP_AGENT_ST_ACTIVE, __ATOMIC_RELEASE);
	return 0;
err:
	__atomic_store_n(&tp_ag.disabled, 1, __ATOMIC_SEQ_CST);
	ctl_unmap();
	return -2;
}

int tp_agent_tracer_gone(struct tp_tstate *ts)
{
	if (!tp_ag.tracer || (++ts->polls & TRACER_POLL_MASK))
		return 0;
	return orphan_if_tracer_dead();
}

/* End the session: from now on every trap only clears TF.  Returns the number of threads
 * still inside code that uses the control block (tracepad lets them run a moment and
 * asks again), or 0 once it is unmapped and the program's signal handlers are back with
 * the kernel.  SIGTRAP stays with the agent's dispatcher: a signal frame saved while its
 * thread was stepped may set TF again when it returns. */
__attribute__((visibility("default"))) long tracepad_agent_detach(void)
{
	int busy;

	__atomic_store_n(&tp_ag.disabled, 1, __ATOMIC_SEQ_CST);
	tp_ag.active = 0;
	tp_ag.tracer = 0;
	if (!tp_ag.ctl)
		return 0;
	busy = __atomic_load_n(&tp_ag.busy, __ATOMIC_SEQ_CST);
	if (busy)
		return busy;
	tp_rt_sig_fini();
	tp_stepper_release();
	ctl_unmap();
	return 0;
}
