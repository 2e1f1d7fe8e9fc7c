/* Registers and memory of traced tasks: ptrace for registers, process_vm_readv for reads and
 * /proc/PID/mem for writes (it writes into read-only text as a debugger must) and for reads
 * that process_vm_readv refuses (PROT_NONE pages).  One /proc/PID/mem fd is kept per process. */
#include "arch/arch.h"
#include "base/log.h"
#include "proc/proc-priv.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

/* ---- registers ---- */

int tp_proc_get_regs(pid_t tid, struct user_regs_struct *regs)
{
	return ptrace(PTRACE_GETREGS, tid, 0, regs) ? -errno : 0;
}

int tp_proc_get_fpregs(pid_t tid, struct user_fpregs_struct *fp)
{
	return ptrace(PTRACE_GETFPREGS, tid, 0, fp) ? -errno : 0;
}

void *tp_proc_xstate_save(pid_t tid, size_t *len)
{
	/* the XSAVE area: x87, SSE, AVX, AVX-512 (and AMX) state; the kernel says its size */
	struct iovec iov = {.iov_base = malloc(TP_PROC_XSTATE_MAX), .iov_len = TP_PROC_XSTATE_MAX};

	if (!iov.iov_base)
		return NULL;
	if (ptrace(PTRACE_GETREGSET, tid, NT_X86_XSTATE, &iov)) {
		/* no XSAVE: the FXSAVE area */
		iov.iov_len = sizeof(struct user_fpregs_struct);
		if (ptrace(PTRACE_GETFPREGS, tid, 0, iov.iov_base)) {
			free(iov.iov_base);
			return NULL;
		}
		iov.iov_len |= (size_t)1 << 62; /* restored with SETFPREGS */
	}
	*len = iov.iov_len;
	return iov.iov_base;
}

int tp_proc_xstate_restore(pid_t tid, void *state, size_t len)
{
	struct iovec iov = {.iov_base = state, .iov_len = len & ~((size_t)1 << 62)};
	int r;

	if (!state)
		return 0;
	if (len >> 62)
		r = ptrace(PTRACE_SETFPREGS, tid, 0, state) ? -errno : 0;
	else
		r = ptrace(PTRACE_SETREGSET, tid, NT_X86_XSTATE, &iov) ? -errno : 0;
	free(state);
	return r;
}

int tp_proc_watch_write(pid_t tid, uint64_t addr)
{
	/* DR0 = @addr; DR7: local enable of DR0, break on data writes, length 8. */
	unsigned long dr7 = 1ul | (1ul << 16) | (2ul << 18);

	if (ptrace(PTRACE_POKEUSER, tid, offsetof(struct user, u_debugreg[0]), addr) ||
	    ptrace(PTRACE_POKEUSER, tid, offsetof(struct user, u_debugreg[7]), dr7))
		return -errno;
	return 0;
}

int tp_proc_watch_clear(pid_t tid)
{
	return ptrace(PTRACE_POKEUSER, tid, offsetof(struct user, u_debugreg[7]), 0) ? -errno : 0;
}

int tp_proc_set_regs(pid_t tid, const struct user_regs_struct *regs)
{
	return ptrace(PTRACE_SETREGS, tid, 0, regs) ? -errno : 0;
}

/* ---- code moved under stopped tasks ---- */

/* How much of a task's stack, from its rsp up, is searched for signal frames. */
#define MOVE_STACK_MAX (256 * 1024)
/* A signal frame as the kernel builds it (x86-64 rt_sigframe): the handler's return address
 * (the restorer), then a ucontext, whose general registers the frame's sigreturn loads. */
#define SIGFRAME_RIP (8 + offsetof(ucontext_t, uc_mcontext.gregs[REG_RIP]))

static int move_cmp(const void *a, const void *b)
{
	const struct tp_proc_move *x = a, *y = b;

	return x->from < y->from ? -1 : x->from > y->from;
}

static const struct tp_proc_move *move_of(const struct tp_proc_move *mv, size_t n, uint64_t pc)
{
	const struct tp_proc_move key = {pc, 0};

	if (!n || pc < mv[0].from || pc > mv[n - 1].from)
		return NULL;
	return bsearch(&key, mv, n, sizeof(*mv), move_cmp);
}

/* Is @ret the restorer of a signal frame: `mov $15, %rax; syscall` (rt_sigreturn), as libc's
 * __restore_rt and the vDSO's are? */
static bool is_sigreturn(pid_t pid, uint64_t ret)
{
	static const uint8_t stub[] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
	uint8_t code[sizeof(stub)];

	return tp_proc_read(pid, ret, code, sizeof(code)) == sizeof(code) &&
	       !memcmp(code, stub, sizeof(stub));
}

/* The signal frames on @tid's stack from @sp whose pc is a move's from: moved. */
static int move_frames(pid_t pid, pid_t tid, uint64_t sp, const struct tp_proc_move *mv, size_t n)
{
	uint64_t buf[2048];

	sp &= ~7ull;
	for (uint64_t at = sp; at < sp + MOVE_STACK_MAX; at += sizeof(buf)) {
		ssize_t got = tp_proc_read(pid, at, buf, sizeof(buf));

		for (ssize_t i = 0; i < got / 8; i++) {
			uint64_t slot = at + (uint64_t)i * 8, ret;
			const struct tp_proc_move *m = move_of(mv, n, buf[i]);

			if (!m || slot < sp + SIGFRAME_RIP ||
			    tp_proc_read(pid, slot - SIGFRAME_RIP, &ret, 8) != 8 ||
			    !is_sigreturn(pid, ret))
				continue;
			if (tp_proc_write(pid, slot, &m->to, 8))
				return -EIO;
			tp_dbg("proc: task %d: the signal frame at 0x%llx resumes at 0x%llx, not "
			       "0x%llx",
			       tid, (unsigned long long)(slot - SIGFRAME_RIP),
			       (unsigned long long)m->to, (unsigned long long)m->from);
		}
		if (got < (ssize_t)sizeof(buf))
			break;
	}
	return 0;
}

int tp_proc_move_tasks(struct tp_proc *p, pid_t tgid, struct tp_proc_move *mv, size_t n)
{
	pid_t tids[4096];
	int nt;

	if (!n)
		return 0;
	nt = tp_proc_tasks_of(p, tgid, tids, 4096);
	qsort(mv, n, sizeof(*mv), move_cmp);
	for (int i = 0; i < nt && i < 4096; i++) {
		struct user_regs_struct regs;
		const struct tp_proc_move *m;

		if (tp_proc_get_regs(tids[i], &regs))
			continue;
		m = move_of(mv, n, regs.rip);
		/* in a system call that restarts at the instruction */
		if (!m && (int64_t)regs.orig_rax >= 0 && (m = move_of(mv, n, regs.rip - 2)))
			regs.rip = m->to + 2;
		else if (m)
			regs.rip = m->to;
		if (m && tp_proc_set_regs(tids[i], &regs))
			return -EIO;
		if (move_frames(tgid, tids[i], regs.rsp, mv, n))
			return -EIO;
	}
	return 0;
}

#define RIP_OFFSET (offsetof(struct user, regs) + offsetof(struct user_regs_struct, rip))

int tp_proc_syscall_info(pid_t tid, struct tp_syscall_stop *out)
{
	struct __ptrace_syscall_info si;

	memset(out, 0, sizeof(*out));
	if (ptrace(PTRACE_GET_SYSCALL_INFO, tid, sizeof(si), &si) < 0)
		return -errno;
	if (si.op == PTRACE_SYSCALL_INFO_ENTRY) {
		out->entry = true;
		out->nr = (int)si.entry.nr;
		memcpy(out->args, si.entry.args, sizeof(out->args));
	} else if (si.op == PTRACE_SYSCALL_INFO_EXIT) {
		out->exit = true;
		out->ret = si.exit.rval;
	}
	return 0;
}

int tp_proc_get_pc(pid_t tid, uint64_t *pc)
{
	long v;

	errno = 0;
	v = ptrace(PTRACE_PEEKUSER, tid, RIP_OFFSET, 0);
	if (v == -1 && errno)
		return -errno;
	*pc = (uint64_t)v;
	return 0;
}

int tp_proc_set_pc(pid_t tid, uint64_t pc)
{
	return ptrace(PTRACE_POKEUSER, tid, RIP_OFFSET, pc) ? -errno : 0;
}

int tp_proc_get_sigmask(pid_t tid, uint64_t *mask)
{
	return ptrace(PTRACE_GETSIGMASK, tid, sizeof(*mask), mask) ? -errno : 0;
}

int tp_proc_set_sigmask(pid_t tid, uint64_t mask)
{
	return ptrace(PTRACE_SETSIGMASK, tid, sizeof(mask), &mask) ? -errno : 0;
}

int tp_proc_set_siginfo(pid_t tid, const siginfo_t *si)
{
	return ptrace(PTRACE_SETSIGINFO, tid, 0, si) ? -errno : 0;
}

/* ---- /proc/PID/mem descriptors ---- */

#define NMEMFD 8

/* The API takes pids, not a tp_proc, so the cache is process-wide; the lock also covers the
 * I/O, so that no fd is closed under a reader in another thread. */
static pthread_mutex_t memfd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	pid_t pid;
	int fd;
} memfds[NMEMFD];
static unsigned memfd_victim;

static int memfd_slot(pid_t pid)
{
	for (int i = 0; i < NMEMFD; i++)
		if (memfds[i].pid && memfds[i].pid == pid)
			return i;
	return -1;
}

static void memfd_close_slot(int i)
{
	close(memfds[i].fd);
	memfds[i].fd = -1;
	memfds[i].pid = 0;
}

static int memfd_store(pid_t pid, int fd)
{
	int i;

	for (i = 0; i < NMEMFD; i++)
		if (!memfds[i].pid)
			break;
	if (i == NMEMFD) {
		i = memfd_victim++ % NMEMFD;
		memfd_close_slot(i);
	}
	memfds[i].pid = pid;
	memfds[i].fd = fd;
	return fd;
}

/* The mem file of any live thread of @pid other than the leader, for a leader that is a zombie
 * (pthread_exit()): its own has no memory behind it. */
static int open_thread_mem(pid_t pid)
{
	char path[80];
	struct dirent *d;
	int fd = -ESRCH;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -ESRCH;
	while (fd < 0 && (d = readdir(dir))) {
		pid_t tid = atoi(d->d_name);

		if (tid <= 0 || tid == pid)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/mem", (int)pid, (int)tid);
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			fd = -errno;
	}
	closedir(dir);
	return fd;
}

static ssize_t rw(int fd, uint64_t addr, void *buf, size_t len, bool write)
{
	ssize_t n = write ? pwrite(fd, buf, len, (off_t)addr) : pread(fd, buf, len, (off_t)addr);

	if (n < 0)
		return errno == EIO ? -EFAULT : -errno;
	return n;
}

void tp_proc_memfd_drop(pid_t pid)
{
	int i;

	pthread_mutex_lock(&memfd_lock);
	i = memfd_slot(pid);
	if (i >= 0)
		memfd_close_slot(i);
	pthread_mutex_unlock(&memfd_lock);
}

/* mem_rw() for the crash guard, which may have interrupted mem_rw() itself: its own fd of
 * /proc/PID/mem, opened and closed here, the path written without stdio. */
static ssize_t mem_rw_unlocked(pid_t pid, uint64_t addr, void *buf, size_t len, bool write)
{
	char path[32] = "/proc/", digits[12];
	size_t at = strlen(path);
	int nd = 0, fd;
	ssize_t n;

	do
		digits[nd++] = (char)('0' + pid % 10);
	while ((pid /= 10) && nd < (int)sizeof(digits));
	while (nd)
		path[at++] = digits[--nd];
	memcpy(path + at, "/mem", 5);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = rw(fd, addr, buf, len, write);
	close(fd);
	return n;
}

/* pread/pwrite on /proc/PID/mem.  0 bytes means no memory behind the fd: a cached one has gone
 * stale (its process exec'd or died), or the leader is a zombie; the next candidate is tried. */
static ssize_t mem_rw(pid_t pid, uint64_t addr, void *buf, size_t len, bool write)
{
	char path[64];
	ssize_t n;
	int i, fd;

	if (addr > INT64_MAX || len > INT64_MAX - addr)
		return -EFAULT;
	if (tp_proc_guard_running)
		return mem_rw_unlocked(pid, addr, buf, len, write);
	pthread_mutex_lock(&memfd_lock);
	i = memfd_slot(pid);
	if (i >= 0) {
		n = rw(memfds[i].fd, addr, buf, len, write);
		if (n != 0)
			goto out;
		memfd_close_slot(i);
	}
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		n = rw(memfd_store(pid, fd), addr, buf, len, write);
		if (n != 0)
			goto out;
		memfd_close_slot(memfd_slot(pid));
	} else {
		n = errno == ENOENT ? -ESRCH : -errno;
	}
	fd = open_thread_mem(pid);
	if (fd < 0)
		goto out;
	n = rw(memfd_store(pid, fd), addr, buf, len, write);
out:
	pthread_mutex_unlock(&memfd_lock);
	return n;
}

/* ---- memory ---- */

ssize_t tp_proc_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec lv = {buf, len}, rv = {(void *)(uintptr_t)addr, len};
	ssize_t n, m;

	if (!len)
		return 0;
	n = process_vm_readv(pid, &lv, 1, &rv, 1, 0);
	if (n == (ssize_t)len)
		return n;
	/* The rest through /proc/PID/mem, which can also read PROT_NONE pages, and memory of a
	 * process whose leader is a zombie (ESRCH here). */
	if (n < 0)
		n = 0;
	m = mem_rw(pid, addr + n, (char *)buf + n, len - n, false);
	if (m > 0)
		return n + m;
	if (n > 0)
		return n;
	return m < 0 ? m : -EFAULT;
}

int tp_proc_write(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = mem_rw(pid, addr + done, (char *)buf + done, len - done, true);

		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EFAULT;
		done += n;
	}
	return 0;
}

static int pieces(pid_t pid, const struct tp_proc_piece *pc, unsigned n, bool wr)
{
	struct iovec lv[1024], rv[1024];
	size_t total = 0;
	ssize_t got;

	if (n > 1024)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		lv[i] = (struct iovec){pc[i].buf, pc[i].len};
		rv[i] = (struct iovec){(void *)(uintptr_t)pc[i].addr, pc[i].len};
		total += pc[i].len;
	}
	got = wr ? process_vm_writev(pid, lv, n, rv, n, 0) : process_vm_readv(pid, lv, n, rv, n, 0);
	if (got < 0)
		return -errno;
	return (size_t)got == total ? 0 : -EFAULT;
}

int tp_proc_read_pieces(pid_t pid, const struct tp_proc_piece *pc, unsigned n)
{
	return pieces(pid, pc, n, false);
}

int tp_proc_poke_int3(pid_t pid, uint64_t addr, bool on, uint8_t orig)
{
	uint8_t b = on ? TP_ARCH_INT3 : orig;

	return tp_proc_write(pid, addr, &b, 1);
}

int tp_proc_write_pieces(pid_t pid, const struct tp_proc_piece *pc, unsigned n)
{
	return pieces(pid, pc, n, true);
}

/* ---- auxiliary vector ---- */

int tp_proc_auxv(pid_t pid, unsigned long type, uint64_t *val)
{
	Elf64_auxv_t av[128];
	char path[64];
	ssize_t n, got = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/auxv", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	while ((size_t)got < sizeof(av)) {
		n = read(fd, (char *)av + got, sizeof(av) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += n;
	}
	close(fd);
	for (size_t i = 0; i < got / sizeof(av[0]) && av[i].a_type != AT_NULL; i++)
		if (av[i].a_type == type) {
			*val = av[i].a_un.a_val;
			return 0;
		}
	return -ENOENT;
}
