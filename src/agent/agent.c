/* libtracepad-agent.so: start-up, the shared control block, thread slots and histograms.
 * Loaded with LD_PRELOAD by `tracepad`; without TRACEPAD_AGENT_FD it only provides the
 * tracepad_step_* symbols and does nothing else. */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "agent/agent-priv.h"
#include "base/procfs.h"

struct tp_agent tp_ag TP_HIDDEN;
__thread struct tp_tstate tp_ts TP_HIDDEN __attribute__((tls_model("initial-exec")));

int tp_agent_gettid(void)
{
	return (int)tp_raw0(SYS_gettid);
}

void tp_agent_fail(const char *msg)
{
	struct tp_agent_ctl *ctl = tp_ag.ctl;

	if (ctl) {
		size_t i;

		for (i = 0; msg[i] && i < sizeof(ctl->error) - 1; i++)
			ctl->error[i] = msg[i];
		ctl->error[i] = 0;
		__atomic_or_fetch(&ctl->state, TP_AGENT_ST_ERROR, __ATOMIC_RELEASE);
	}
	tp_ag.disabled = 1;
}

struct tp_agent_thread *tp_agent_slot(void)
{
	uint32_t i = __atomic_fetch_add(&tp_ag.ctl->nthreads, 1, __ATOMIC_RELAXED);
	struct tp_agent_thread *t;

	if (i >= tp_ag.max_threads) {
		__atomic_or_fetch(&tp_ag.ctl->state, TP_AGENT_ST_THREADS_FULL, __ATOMIC_RELAXED);
		return NULL;
	}
	t = &tp_ag.threads[i];
	t->tid = tp_agent_gettid();
	return t;
}

/* ---- executable mappings, recorded so that tracepad can resolve histogram addresses ---- */

static int map_known(uint64_t pc)
{
	uint32_t n = __atomic_load_n(&tp_ag.ctl->nmaps, __ATOMIC_ACQUIRE);

	if (n > tp_ag.max_maps)
		n = tp_ag.max_maps;
	for (uint32_t i = 0; i < n; i++)
		if (pc >= tp_ag.maps[i].start && pc < tp_ag.maps[i].end)
			return 1;
	return 0;
}

/* One line of /proc/self/maps: "start-end perms offset dev inode   path". */
static void map_line(const char *l, const char *end)
{
	struct tp_agent_ctl *ctl = tp_ag.ctl;
	struct tp_agent_map *m;
	struct tp_maps_ent e;
	uint32_t n;

	if (tp_maps_parse_line(l, (size_t)(end - l), &e) || !tp_maps_exec(&e))
		return;
	for (uint32_t i = 0; i < ctl->nmaps && i < tp_ag.max_maps; i++)
		if (tp_ag.maps[i].start == e.start && tp_ag.maps[i].end == e.end)
			return;
	n = ctl->nmaps;
	if (n >= tp_ag.max_maps)
		return;
	m = &tp_ag.maps[n];
	m->start = e.start;
	m->end = e.end;
	m->offset = e.offset;
	/* The path as the kernel shows it, " (deleted)" included. */
	size_t len = e.path_len + (e.deleted ? 10 : 0);
	if (len >= TP_AGENT_PATH_MAX)
		len = TP_AGENT_PATH_MAX - 1;
	memcpy(m->path, e.path, len);
	m->path[len] = 0;
	__atomic_store_n(&ctl->nmaps, n + 1, __ATOMIC_RELEASE);
}

static void maps_reload(void)
{
	static char buf[8192];
	static char line[4096 + TP_AGENT_PATH_MAX];
	size_t ll = 0;
	long fd, n;

	fd = tp_raw3(SYS_open, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return;
	while ((n = tp_raw3(SYS_read, fd, buf, sizeof(buf))) > 0) {
		for (long i = 0; i < n; i++) {
			if (buf[i] == '\n') {
				map_line(line, line + ll);
				ll = 0;
			} else if (ll < sizeof(line)) {
				line[ll++] = buf[i];
			}
		}
	}
	tp_raw1(SYS_close, fd);
}

static void map_ensure(uint64_t pc)
{
	uint32_t *lock = &tp_ag.ctl->maps_lock;

	if (map_known(pc))
		return;
	while (__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE))
		tp_raw0(SYS_sched_yield);
	if (!map_known(pc))
		maps_reload();
	__atomic_store_n(lock, 0, __ATOMIC_RELEASE);
}

/* ---- address histogram: open addressing, insertion by CAS, shared by all threads ---- */

void tp_agent_addr_add(uint64_t pc, uint64_t n)
{
	uint64_t mask = tp_ag.addr_mask;
	uint64_t i = (pc * 0x9e3779b97f4a7c15ull) >> 20;

	for (unsigned probe = 0; probe < 4096; probe++, i++) {
		struct tp_agent_addr *e = &tp_ag.addrs[i & mask];
		uint64_t cur = __atomic_load_n(&e->pc, __ATOMIC_ACQUIRE);

		if (cur == 0) {
			if (__atomic_compare_exchange_n(&e->pc, &cur, pc, 0, __ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE))
				map_ensure(pc);
		}
		if (cur == 0 || cur == pc) {
			__atomic_fetch_add(&e->count, n, __ATOMIC_RELAXED);
			return;
		}
	}
	__atomic_fetch_add(&tp_ag.ctl->addr_dropped, 1, __ATOMIC_RELAXED);
}

/* ---- start-up ---- */

/* The fd number in environment variable @name ("NAME=123"), or -1. */
static int env_fd(char **envp, const char *name)
{
	int fd = -1;

	for (; envp && *envp; envp++) {
		const char *e = *envp;
		size_t i;

		for (i = 0; name[i] && e[i] == name[i]; i++)
			;
		if (name[i] || e[i] != '=')
			continue;
		e += i + 1;
		fd = 0;
		for (; *e >= '0' && *e <= '9' && fd < 100000; e++)
			fd = fd * 10 + (*e - '0');
		if (*e)
			return -1;
	}
	return fd;
}

/* Record @ev for the calling thread in its ring (claimed at its first event). */
void tp_agent_event(struct tp_tstate *ts, enum tp_agent_event ev, uint64_t pc)
{
	uint8_t *p;

	if (!tp_ag.tracing || ts->prod_state == 2)
		return;
	if (!ts->prod_state) {
		if (tp_trace_shm_producer_init(&tp_ag.shm, &ts->prod)) {
			ts->prod_state = 2;
			return;
		}
		ts->prod.pid = tp_ag.pid;
		ts->prod.tid = tp_agent_gettid();
		ts->prod_state = 1;
	}
	p = tp_trace_reserve(&ts->prod, (uint16_t)ev, 16);
	if (!p)
		return;
	p = tp_trace_put_u64(p, pc);
	tp_trace_put_u64(p, ts->slot ? ts->slot->count : 0);
	tp_trace_commit(&ts->prod);
}

/* The auxiliary vector follows the environment on the initial stack. */
static int secure_exec(char **envp)
{
	Elf64_auxv_t *av;

	while (*envp)
		envp++;
	for (av = (Elf64_auxv_t *)(envp + 1); av->a_type != AT_NULL; av++)
		if (av->a_type == AT_SECURE)
			return av->a_un.a_val != 0;
	return 0;
}

/* Map and validate the control block; the fd is closed so the program never sees it. */
int tp_agent_ctl_map(int fd)
{
	struct tp_agent_ctl *ctl;
	uint64_t size, end;
	long p;
	char link[64];
	static const char want[] = "/memfd:tracepad-ctl";
	char path[32] = "/proc/self/fd/";
	int i = 14, d = fd, len = 0;
	char digits[12];

	do {
		digits[len++] = (char)('0' + d % 10);
		d /= 10;
	} while (d);
	while (len)
		path[i++] = digits[--len];
	path[i] = 0;
	p = tp_raw4(SYS_readlink, path, link, sizeof(link) - 1, 0);
	if (p < (long)sizeof(want) - 1 || memcmp(link, want, sizeof(want) - 1))
		return -1;
	p = tp_raw6(SYS_mmap, 0, 4096, PROT_READ, MAP_SHARED, fd, 0);
	if (p < 0 && p > -4096)
		return -1;
	ctl = (struct tp_agent_ctl *)p;
	size = ctl->size;
	if (ctl->magic != TP_AGENT_MAGIC || ctl->abi != TP_AGENT_ABI || size < sizeof(*ctl) ||
	    size > (1ull << 32)) {
		tp_raw2(SYS_munmap, ctl, 4096);
		return -1;
	}
	tp_raw2(SYS_munmap, ctl, 4096);
	p = tp_raw6(SYS_mmap, 0, (long)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p < 0 && p > -4096)
		return -1;
	tp_raw1(SYS_close, fd);
	ctl = (struct tp_agent_ctl *)p;
	tp_ag.ctl = ctl;
	tp_ag.ctl_size = size;
	tp_ag.flags = ctl->flags;

	/* every offset the other side wrote is checked before use */
	end = ctl->threads_off + (uint64_t)ctl->max_threads * sizeof(struct tp_agent_thread);
	if (ctl->threads_off < sizeof(*ctl) || end > size || end < ctl->threads_off)
		return -2;
	tp_ag.threads = (struct tp_agent_thread *)((char *)ctl + ctl->threads_off);
	tp_ag.max_threads = ctl->max_threads;
	end = ctl->maps_off + (uint64_t)ctl->max_maps * sizeof(struct tp_agent_map);
	if (ctl->maps_off < sizeof(*ctl) || end > size || end < ctl->maps_off)
		return -2;
	tp_ag.maps = (struct tp_agent_map *)((char *)ctl + ctl->maps_off);
	tp_ag.max_maps = ctl->max_maps;
	if (ctl->flags & TP_CTL_BY_ADDRESS) {
		uint64_t n = ctl->addr_slots;

		end = ctl->addrs_off + n * sizeof(struct tp_agent_addr);
		if (!n || (n & (n - 1)) || n > (1ull << 28) || ctl->addrs_off < sizeof(*ctl) ||
		    end > size || end < ctl->addrs_off)
			return -2;
		tp_ag.addrs = (struct tp_agent_addr *)((char *)ctl + ctl->addrs_off);
		tp_ag.addr_mask = n - 1;
	}
	return 0;
}

static int find_text(struct dl_phdr_info *info, size_t size, void *data)
{
	uint64_t *range = data; /* in: an address of the code; out: [start, end) */

	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t s = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && range[0] >= s &&
		    range[0] < s + ph->p_memsz) {
			range[0] = s;
			range[1] = s + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

void tp_agent_text_of(const void *fn, uint64_t *start, uint64_t *end)
{
	uint64_t range[2] = {(uint64_t)(uintptr_t)fn, 0};

	if (dl_iterate_phdr(find_text, range) == 1) {
		*start = range[0];
		*end = range[1];
	}
}

void tp_agent_find_text(void)
{
	if (!tp_ag.text_start)
		tp_agent_text_of(&tp_agent_sync, &tp_ag.text_start, &tp_ag.text_end);
	tp_ag.ctl->agent_text[0] = tp_ag.text_start;
	tp_ag.ctl->agent_text[1] = tp_ag.text_end;
}

static int main_bias(struct dl_phdr_info *info, size_t size, void *data)
{
	*(uint64_t *)data = info->dlpi_addr;
	return 1; /* the first object is the executable */
}

static void set_region_bps(void)
{
	struct tp_agent_ctl *ctl = tp_ag.ctl;
	uint64_t bias = 0;

	dl_iterate_phdr(main_bias, &bias);
	if (ctl->stop_vaddr)
		tp_ag.stop_pc = ctl->stop_pc = bias + ctl->stop_vaddr;
	if (ctl->flags & TP_CTL_MAIN_DYNAMIC) {
		void *lsm = dlsym(RTLD_DEFAULT, "__libc_start_main");

		if (!lsm || tp_bp_insert((uint64_t)(uintptr_t)lsm, TP_ABP_LIBC_START_MAIN))
			tp_agent_fail("cannot break on __libc_start_main to find main");
	} else if (ctl->start_vaddr) {
		tp_ag.start_pc = ctl->start_pc = bias + ctl->start_vaddr;
		if (tp_bp_insert(tp_ag.start_pc, TP_ABP_START))
			tp_agent_fail("cannot insert the breakpoint at the start symbol");
	}
}

/* Called by tp_agent_ctor_entry; non-zero return means: set TF for the caller. */
TP_HIDDEN int tp_agent_init(int argc, char **argv, char **envp)
{
	struct tp_agent_ctl *ctl;
	int fd = env_fd(envp, TP_AGENT_ENV_FD);

	if (fd < 0 || secure_exec(envp))
		return 0;
	tp_rt_wrap_init(&tp_stepper_sig_host);
	if (tp_agent_ctl_map(fd) == -1)
		return 0;
	ctl = tp_ag.ctl;
	tp_ag.pid = (int)tp_raw0(SYS_getpid);
	ctl->pid = tp_ag.pid;
	ctl->sync_pc = (uint64_t)(uintptr_t)&tp_agent_sync;
	ctl->step_begin_pc = (uint64_t)(uintptr_t)&tracepad_step_begin;
	ctl->step_end_pc = (uint64_t)(uintptr_t)&tracepad_step_end;
	ctl->sync2_pc = (uint64_t)(uintptr_t)&tp_agent_sync2;
	if (ctl->flags & TP_CTL_SYNC)
		tp_agent_sync();
	/* From here on nothing is counted by any engine: the trapflag engine's tracer has let
	 * go and TF is not set yet; the ptrace engine lets the agent run to its second int3.
	 * Zydis is loaded in both cases, so that it is finalised at exit under both. */
	if (tp_zydis_load() && ctl->mode == TP_AGENT_COUNT) {
		tp_agent_fail("cannot load libZydis");
		return 0;
	}
	if (ctl->flags & TP_CTL_SYNC2)
		tp_agent_sync2();
	if (tp_ag.disabled || ctl->mode != TP_AGENT_COUNT || !tp_ag.threads)
		return 0;
	tp_agent_find_text();
	if (tp_rt_sig_init(&tp_stepper_sig_host) || tp_stepper_install()) {
		tp_agent_fail("cannot install the SIGTRAP handler");
		return 0;
	}
	fd = env_fd(envp, TP_AGENT_ENV_TRACE_FD);
	if (fd >= 0) {
		tp_ag.tracing = !tp_trace_shm_attach(&tp_ag.shm, fd);
		tp_raw1(SYS_close, fd);
	}
	/* In-process engines stop when their tracepad goes (tp_agent_tracer_gone). */
	tp_ag.tracer = ctl->tracer_pid > 0 ? ctl->tracer_pid : 0;
	tp_ag.active = 1;
	__atomic_or_fetch(&ctl->state, TP_AGENT_ST_ACTIVE, __ATOMIC_RELEASE);
	if (!(ctl->flags & TP_CTL_WHOLE)) {
		set_region_bps();
		return 0;
	}
	tp_ts.init = 1;
	tp_thread_start_counting(&tp_ts);
	tp_agent_event(&tp_ts, TP_AGENT_EV_COUNTING_BEGIN, 0);
	return 1;
}

/* tracepad_step_begin() from <tracepad/step.h>: non-zero makes the entry stub set TF. */
TP_HIDDEN int tp_step_begin_c(void)
{
	struct tp_tstate *ts = &tp_ts;

	if (!tp_ag.active || tp_ag.disabled || !(tp_ag.flags & TP_CTL_API))
		return 0;
	ts->init = 1;
	if (!ts->counting) {
		tp_thread_start_counting(ts);
		tp_agent_event(ts, TP_AGENT_EV_COUNTING_BEGIN, 0);
	}
	return 1;
}
