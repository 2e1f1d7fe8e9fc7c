/* Setting up a count: the program and its symbols (the region's addresses, whether it uses
 * <tracepad/step.h>), the control block shared with the agent, the trace of --trace, and
 * the choice of engine. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <unistd.h>

#include "count/count-priv.h"
#include "base/paths.h"
#include "elf/file.h"
#include "elf/symbols.h"
#include "trace/trace.h"

/* The agent records, in rings that tracepad drains, when each thread begins and ends being
 * counted; the class ids are fixed by agent-abi.h. */
static int agent_trace_init(struct tp_count_ctx *c, struct tp_trace_writer *w)
{
	static const struct tp_trace_field_desc f[] = {
	    {"pc", TP_TRACE_INT, 64, false, 16},
	    {"instructions", TP_TRACE_INT, 64},
	};
	struct tp_trace_ring_opts ro = {.nr_rings = 64, .nr_subbufs = 4};

	if (tp_trace_writer_add_class(w, "counting_begin", f, 2) != TP_AGENT_EV_COUNTING_BEGIN ||
	    tp_trace_writer_add_class(w, "counting_end", f, 2) != TP_AGENT_EV_COUNTING_END)
		return -EINVAL;
	return tp_trace_consumer_new(w, &ro, &c->cons);
}

static int make_ctl(struct tp_count_ctx *c)
{
	uint32_t threads = 256, maps = 1024;
	uint64_t slots = c->o->by >= TP_COUNT_BY_FUNCTION ? 1u << 20 : 0;
	size_t size, toff, moff, aoff;
	struct tp_agent_ctl *ctl;

	toff = (sizeof(*ctl) + 4095) & ~(size_t)4095;
	moff = toff + threads * sizeof(struct tp_agent_thread);
	aoff = moff + maps * sizeof(struct tp_agent_map);
	size = aoff + slots * sizeof(struct tp_agent_addr);
	size = (size + 4095) & ~(size_t)4095;
	c->ctl_fd = memfd_create("tracepad-ctl", MFD_CLOEXEC);
	if (c->ctl_fd < 0)
		return -errno;
	if (ftruncate(c->ctl_fd, (off_t)size))
		return -errno;
	ctl = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, c->ctl_fd, 0);
	if (ctl == MAP_FAILED)
		return -errno;
	/* the fd must not be 0-2 or collide with the program's expectations: move it high */
	if (c->ctl_fd < 100) {
		int hi = fcntl(c->ctl_fd, F_DUPFD_CLOEXEC, 100);

		if (hi >= 0) {
			close(c->ctl_fd);
			c->ctl_fd = hi;
		}
	}
	c->ctl = ctl;
	c->ctl_size = size;
	ctl->magic = TP_AGENT_MAGIC;
	ctl->abi = TP_AGENT_ABI;
	ctl->mode = TP_AGENT_PASSIVE;
	ctl->size = size;
	ctl->threads_off = toff;
	ctl->max_threads = threads;
	ctl->maps_off = moff;
	ctl->max_maps = maps;
	ctl->addrs_off = aoff;
	ctl->addr_slots = slots;
	ctl->start_vaddr = c->main_dynamic ? 0 : c->start_vaddr;
	ctl->stop_vaddr = c->stop_vaddr;
	if (c->whole)
		ctl->flags |= TP_CTL_WHOLE;
	if (c->api)
		ctl->flags |= TP_CTL_API;
	if (c->main_dynamic)
		ctl->flags |= TP_CTL_MAIN_DYNAMIC;
	if (c->o->by == TP_COUNT_BY_MNEMONIC)
		ctl->flags |= TP_CTL_BY_MNEMONIC;
	if (slots)
		ctl->flags |= TP_CTL_BY_ADDRESS;
	return 0;
}

static int resolve_symbol(struct tp_count_ctx *c, const char *opt, const char *name, uint64_t *v)
{
	int err = tp_elf_lookup(c->path, name, v, NULL);

	if (err == -ENOENT && !strcmp(name, "main") && opt[2] == 's' && opt[3] == 't' &&
	    opt[4] == 'a') {
		/* stripped: main is found at run time from __libc_start_main's first argument */
		c->main_dynamic = true;
		return 0;
	}
	if (err == -ENOENT)
		snprintf(c->error, sizeof(c->error), "%s: no symbol '%s' in %s", opt, name,
			 c->path);
	else if (err)
		snprintf(c->error, sizeof(c->error), "%s: cannot read %s: %s", opt, c->path,
			 strerror(-err));
	return err;
}

int tp_count_init(struct tp_count_ctx *c, struct tp_count_opts *o, struct tp_count_result *r)
{
	memset(r, 0, sizeof(*r));
	memset(c, 0, sizeof(*c));
	c->o = o;
	c->r = r;
	c->ctl_fd = -1;
	c->syms = tp_symtab_new();
	return c->syms ? 0 : -ENOMEM;
}

void tp_count_fini(struct tp_count_ctx *c)
{
	tp_hash_release(&c->r->addrs.pcs);
	free(c->r->threads);
	tp_symtab_free(c->syms);
	tp_trace_consumer_free(c->cons);
	if (c->ctl)
		munmap(c->ctl, c->ctl_size);
	if (c->ctl_fd >= 0)
		close(c->ctl_fd);
	c->syms = NULL;
	c->cons = NULL;
	c->ctl = NULL;
	c->ctl_fd = -1;
}

/* The state letter of /proc/PID/stat ('R', 'S', 'T', ...), or 0. */
static char proc_state(pid_t pid)
{
	char buf[512], *close_paren;
	ssize_t n;
	int fd;

	snprintf(buf, sizeof(buf), "/proc/%d/stat", (int)pid);
	fd = open(buf, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	close_paren = strrchr(buf, ')');
	return close_paren && close_paren[1] == ' ' ? close_paren[2] : 0;
}

/* -p with the agent: what an injection needs of the process and of the options. */
static int probe_pid_agent(struct tp_count_ctx *c)
{
	struct tp_elf_info info;
	int pid = (int)c->o->pid;
	char st;

	if (c->o->start || c->o->stop) {
		snprintf(c->error, sizeof(c->error),
			 "-p with the trapflag engine counts the whole program: --start and "
			 "--stop need --engine ptrace");
		return -EINVAL;
	}
	if (!c->path || tp_elf_probe(c->path, &info)) {
		snprintf(c->error, sizeof(c->error), "-p %d: cannot read its program", pid);
		return -EINVAL;
	}
	c->is_static = info.is_static;
	if (c->is_static) {
		snprintf(c->error, sizeof(c->error),
			 "-p %d: %s is statically linked: the agent cannot be loaded into it; use "
			 "--engine ptrace",
			 pid, c->path);
		return -EINVAL;
	}
	st = proc_state(c->o->pid);
	if (st == 'T' || st == 't') {
		snprintf(c->error, sizeof(c->error),
			 "-p %d: the process is stopped; continue it (kill -CONT %d) first", pid,
			 pid);
		return -EINVAL;
	}
	if (st == 'Z' || st == 'X') {
		snprintf(c->error, sizeof(c->error), "-p %d: no such process", pid);
		return -ESRCH;
	}
	return 0;
}

int tp_count_probe_pid(struct tp_count_ctx *c, char *path)
{
	char exe[64];

	snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)c->o->pid);
	if (kill(c->o->pid, 0) && errno == ESRCH) {
		snprintf(c->error, sizeof(c->error), "-p %d: no such process", (int)c->o->pid);
		return -ESRCH;
	}
	c->pid = c->o->pid;
	c->path = realpath(exe, path) ? path : NULL;
	c->whole = !c->o->start;
	return c->o->engine == TP_COUNT_ENGINE_TRAPFLAG ? probe_pid_agent(c) : 0;
}

int tp_count_probe(struct tp_count_ctx *c, char *path)
{
	struct tp_count_opts *o = c->o;
	struct tp_elf_info info;
	int err = tp_path_find_program(o->argv[0], path, PATH_MAX);

	if (err) {
		snprintf(c->error, sizeof(c->error), "%s: no such program", o->argv[0]);
		return err;
	}
	c->path = path;
	err = tp_elf_probe(path, &info);
	if (err) {
		snprintf(c->error, sizeof(c->error), "%s: %s", path,
			 err == -ENOEXEC  ? "not an ELF file"
			 : err == -EINVAL ? "not an x86-64 executable"
					  : strerror(-err));
		return err;
	}
	c->is_static = info.is_static;
	if (o->start && (err = resolve_symbol(c, "--start", o->start, &c->start_vaddr)))
		return err;
	if (o->stop && (err = resolve_symbol(c, "--stop", o->stop, &c->stop_vaddr)))
		return err;
	if (o->stop && c->main_dynamic && !c->start_vaddr && !o->start) {
		snprintf(c->error, sizeof(c->error), "--stop main needs main's symbol");
		return -EINVAL;
	}
	c->api = !o->start && tp_elf_imports(path, "tracepad_step_begin");
	c->whole = !o->start && !c->api;
	return 0;
}

int tp_count_ctl_new(struct tp_count_ctx *c)
{
	int err;

	if (!c->o->agent && !c->is_static) {
		snprintf(c->error, sizeof(c->error),
			 "cannot find libtracepad-agent.so next to tracepad (set TRACEPAD_AGENT)");
		return -ENOENT;
	}
	err = make_ctl(c);
	if (err)
		snprintf(c->error, sizeof(c->error), "cannot create the shared control block: %s",
			 strerror(-err));
	return err;
}

int tp_count_trace_new(struct tp_count_ctx *c, struct tp_trace_writer **w)
{
	const char *dir = c->o->trace_dir;
	int err = tp_trace_writer_new(dir, NULL, w);

	if (err) {
		snprintf(c->error, sizeof(c->error), "--trace %s: %s", dir,
			 err == -EEXIST ? "already holds a trace" : strerror(-err));
		return err;
	}
	if (c->o->engine == TP_COUNT_ENGINE_TRAPFLAG && !c->o->pid) {
		err = agent_trace_init(c, *w);
		if (err) {
			snprintf(c->error, sizeof(c->error), "--trace %s: %s", dir, strerror(-err));
			return err;
		}
	}
	return 0;
}

int tp_count_run(struct tp_count_ctx *c)
{
	c->t_start = c->last_progress = tp_count_now();
	if (c->o->pid && c->o->engine == TP_COUNT_ENGINE_TRAPFLAG)
		return tp_count_attach_trapflag(c);
	if (c->o->pid)
		return tp_count_attach_ptrace(c);
	/* Like gdb, run the program without address-space randomisation: string functions
	 * take other paths for other alignments, and counts should repeat exactly. */
	personality((unsigned long)personality(0xffffffff) | ADDR_NO_RANDOMIZE);
	if (c->o->engine == TP_COUNT_ENGINE_PTRACE)
		return tp_count_run_ptrace(c);
	if (c->o->engine == TP_COUNT_ENGINE_DBT)
		return tp_count_run_dbt(c);
	return tp_count_run_trapflag(c);
}

bool tp_count_follows_exec(const struct tp_count_ctx *c)
{
	return c->whole && c->o->by <= TP_COUNT_BY_MNEMONIC;
}
