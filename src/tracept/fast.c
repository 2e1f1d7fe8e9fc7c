/* Fast tracepoints, tracepad's side: the block of what to place (tracept-abi.h, a memfd the
 * agent maps), the agent loaded with an injected dlopen (a launched program at its entry
 * point, a running one at attach), the pads installed with every thread stopped and any
 * thread on an inner boundary of a jmp site moved into the pad's copy, the per-thread rings
 * drained into the same frames as int3 tracepoints, and at the end every byte put back and
 * compared. */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/tracept-abi.h"
#include "base/log.h"
#include "proc/inject.h"
#include "tracept/engine.h"

_Static_assert(TP_FTP_MAX_ITEMS == TP_MAX_ITEMS, "a frame's items");

#define RINGS 32
#define RING_MIN (4096u * 1024) /* a thread's frames between two drains, and more */
#define NAP_US 250		/* between two drains that found little */
/* A ring holding less than this part of its size is left to fill during a nap: draining
 * each frame as it comes pulls the lines the thread is writing to the other core (a hit
 * cost 200 ns instead of 70 with tracepad spinning on the rings). */
#define BUSY_PART 8
#define DETACH_ROUNDS 2000 /* rounds of 1 ms for threads to leave the callbacks */
#define ORIG_LEN 16	   /* bytes compared before and after, at each address */

struct fast {
	int fd;
	struct tp_ftp_ctl *ctl;
	size_t size;
	struct tp_ftp_tp *ftps;
	struct tracepoint **tp_of; /* block index -> tracepoint */
	uint32_t n;
	uint8_t (*orig)[ORIG_LEN];
	uint64_t detach_pc;
	bool live; /* the pads are in the program */
};

static uint32_t align8(uint64_t v)
{
	return (uint32_t)((v + 7) & ~7ull);
}

/* The block: header, tracepoints, items, code, rings, ring data. */
static int block_new(struct session *s, struct fast *f)
{
	uint64_t off, items_off, code_off, rings_off, data_off, max_rec = 0;
	uint32_t ring = RING_MIN, nitems = 0;
	size_t code = 0;

	for (int i = 0; i < s->ntps; i++) {
		struct tracepoint *t = &s->tps[i];
		uint64_t rec = sizeof(struct tp_ftp_rec) + 8ull * t->items.n + t->mem_bytes;

		if (!t->fast)
			continue;
		nitems += (uint32_t)t->items.n;
		code += t->has_cond ? t->cond.len : 0;
		for (int k = 0; k < t->items.n; k++)
			code += t->items.v[k].c.len;
		max_rec = rec > max_rec ? rec : max_rec;
	}
	while (ring < 4 * align8(max_rec))
		ring *= 2;
	items_off = align8(sizeof(struct tp_ftp_ctl) + (uint64_t)f->n * sizeof(struct tp_ftp_tp));
	code_off = align8(items_off + (uint64_t)nitems * sizeof(struct tp_ftp_item));
	rings_off = align8(code_off + code);
	data_off = (rings_off + RINGS * sizeof(struct tp_ftp_ring) + 4095) & ~4095ull;
	f->size = data_off + (uint64_t)RINGS * ring;
	f->fd = (int)syscall(SYS_memfd_create, "tracepad-ftp", 1u /* MFD_CLOEXEC */);
	if (f->fd < 0)
		return -errno;
	if (ftruncate(f->fd, (off_t)f->size))
		return -errno;
	f->ctl = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
	if (f->ctl == MAP_FAILED) {
		f->ctl = NULL;
		return -errno;
	}
	*f->ctl = (struct tp_ftp_ctl){
	    .magic = TP_FTP_MAGIC,
	    .abi = TP_FTP_ABI,
	    .ntps = f->n,
	    .size = f->size,
	    .tps_off = sizeof(struct tp_ftp_ctl),
	    .rings_off = rings_off,
	    .data_off = data_off,
	    .nrings = RINGS,
	    .ring_size = ring,
	    .tracer_pid = (int32_t)getpid(),
	};
	f->ftps = (struct tp_ftp_tp *)(f->ctl + 1);
	off = code_off;
	for (uint32_t j = 0; j < f->n; j++) {
		struct tracepoint *t = f->tp_of[j];
		struct tp_ftp_tp *x = &f->ftps[j];
		struct tp_ftp_item *it = (void *)((uint8_t *)f->ctl + items_off);
		const struct tp_map *m = tp_symtab_find_map(s->syms, t->addr);
		struct tp_symloc l;
		uint64_t lo, size;

		x->addr = t->addr;
		x->pass_count = t->spec->pass_count;
		x->first = 1;
		for (uint32_t k = 0; k < j; k++)
			x->first &= f->ftps[k].addr != t->addr;
		/* the function's bounds, so that the agent need not ask the loader (dladdr) with
		 * every other thread stopped */
		if (m && !tp_symtab_lookup(s->syms, t->addr, false, &l) && l.function &&
		    !tp_elf_lookup(m->path, l.function, &lo, &size) &&
		    lo + m->bias == l.func_addr && t->addr < l.func_addr + size) {
			x->fn_lo = l.func_addr;
			x->fn_hi = l.func_addr + size;
		}
		if (t->has_cond) {
			x->cond_off = (uint32_t)off;
			x->cond_len = (uint32_t)t->cond.len;
			memcpy((uint8_t *)f->ctl + off, t->cond.code, t->cond.len);
			off += t->cond.len;
		}
		x->items_off = (uint32_t)items_off;
		x->nitems = (uint32_t)t->items.n;
		x->rec_size = align8(sizeof(struct tp_ftp_rec) + 8ull * t->items.n + t->mem_bytes);
		for (int k = 0; k < t->items.n; k++) {
			const struct tp_item *v = &t->items.v[k];

			it[k] = (struct tp_ftp_item){(uint32_t)off, (uint32_t)v->c.len, v->size,
						     v->mem};
			memcpy((uint8_t *)f->ctl + off, v->c.code, v->c.len);
			off += v->c.len;
		}
		items_off += (uint64_t)t->items.n * sizeof(struct tp_ftp_item);
	}
	return 0;
}

/* ---- the agent ---- */

static int load_agent(struct session *s, struct fast *f, pid_t *tid)
{
	struct tp_proc_agent a = {.agent = s->o->agent,
				  .entry = "tracepad_ftp_attach",
				  .fd = f->fd,
				  .error = f->ctl->error,
				  .error_len = sizeof(f->ctl->error)};
	struct tp_proc_dl dl;
	char why[512];
	int r;

	if (tp_symtab_find_symbol(s->syms, "libc:dlopen", &dl.dlopen) ||
	    tp_symtab_find_symbol(s->syms, "libc:dlsym", &dl.dlsym)) {
		tp_err("--fast: no dlopen in process %d (a static program, or glibc before 2.34): "
		       "use --normal",
		       s->pid);
		return -EINVAL;
	}
	if (tp_symtab_find_symbol(s->syms, "libc:dlerror", &dl.dlerror))
		dl.dlerror = 0;
	r = tp_proc_load_agent(s->p, s->pid, &dl, &a, why, sizeof(why));
	if (r) {
		tp_err("--fast: process %d: %s", s->pid, why);
		return r == -ENOENT ? -EINVAL : r;
	}
	*tid = a.tid;
	/* written by the agent: trusted only inside its own text */
	if (!tp_proc_agent_mapped(s->pid, a.path, f->ctl->detach_pc) ||
	    !tp_proc_agent_mapped(s->pid, a.path, f->ctl->install_pc))
		return -EIO;
	f->detach_pc = f->ctl->detach_pc;
	return 0;
}

/* A thread stopped on an inner boundary of a jmp site (or in a system call that restarts
 * there), or a signal handler's frame that would resume it there, goes on in the pad's copy
 * of the instruction. */
static int move_threads(struct session *s, struct fast *f)
{
	struct tp_proc_move *mv = calloc((size_t)f->n * TP_FTP_MAX_INSNS + 1, sizeof(*mv));
	size_t n = 0;
	int r;

	if (!mv)
		return -ENOMEM;
	for (uint32_t j = 0; j < f->n; j++) {
		const struct tp_ftp_tp *x = &f->ftps[j];

		for (uint32_t k = 1; x->first && k < x->ninsn && k < TP_FTP_MAX_INSNS; k++)
			mv[n++] = (struct tp_proc_move){x->addr + x->ioff[k], x->icopy[k]};
	}
	r = tp_proc_move_tasks(s->p, s->pid, mv, n);
	free(mv);
	return r;
}

int tp_tracept_fast_start(struct session *s)
{
	struct fast *f = calloc(1, sizeof(*f));
	uint64_t bad = 0;
	pid_t tid;
	int r;

	if (!f)
		return -ENOMEM;
	s->fast = f;
	f->fd = -1;
	for (int i = 0; i < s->ntps; i++)
		f->n += s->tps[i].fast;
	f->tp_of = calloc(f->n, sizeof(*f->tp_of));
	f->orig = calloc(f->n, sizeof(*f->orig));
	if (!f->tp_of || !f->orig)
		return -ENOMEM;
	f->n = 0;
	for (int i = 0; i < s->ntps; i++)
		if (s->tps[i].fast)
			f->tp_of[f->n++] = &s->tps[i];
	r = block_new(s, f);
	if (r)
		return r;
	for (uint32_t j = 0; j < f->n; j++)
		if (tp_proc_read(s->pid, f->ftps[j].addr, f->orig[j], ORIG_LEN) != ORIG_LEN)
			return -EIO;
	r = load_agent(s, f, &tid);
	if (r)
		return r;
	/* the other threads ran during the loader's calls: stopped again now */
	r = tp_proc_stop_all(s->p, 0);
	if (!r)
		r = tp_proc_inject_fcall(s->p, s->pid, tid, f->ctl->install_pc,
					 (const uint64_t[6]){0}, false, &bad);
	if (r) {
		tp_err("--fast: cannot place the tracepoints: %s", strerror(-r));
		return r == -ESRCH ? r : -EIO;
	}
	f->live = true;
	for (uint32_t j = 0; j < f->n; j++) {
		const struct tp_ftp_tp *x = &f->ftps[j];

		if (x->err) {
			tp_err("%s: cannot place a fast tracepoint at %s: %s",
			       f->tp_of[j]->spec->loc.where, f->tp_of[j]->where, strerror(-x->err));
			r = -EINVAL;
		} else if (x->kind != 1) {
			tp_info("%s: fast tracepoint at %s through an int3 (reason %u)",
				f->tp_of[j]->spec->loc.where, f->tp_of[j]->where, x->why);
		}
	}
	return r ? r : move_threads(s, f);
}

/* ---- frames ---- */

static void one(struct session *s, struct fast *f, const struct tp_ftp_rec *h)
{
	struct tracepoint *t = f->tp_of[h->tp];
	const uint64_t *val = (const uint64_t *)(h + 1);
	uint8_t *mem = (uint8_t *)(val + t->items.n);
	struct frame fr = {.pc = t->addr, .unavail = h->unavail};

	for (int i = 0; i < t->items.n; i++) {
		const struct tp_item *it = &t->items.v[i];

		fr.val[i] = val[i];
		fr.mem[i] = mem;
		if (it->scalar && !(fr.unavail & (1ull << i))) {
			unsigned bits = it->size * 8;
			uint64_t v = 0;

			memcpy(&v, mem, it->size);
			if (bits < 64 && it->is_signed && (v >> (bits - 1)) & 1)
				v |= ~0ull << bits;
			fr.val[i] = v;
		}
		mem += it->mem ? it->size : 0;
	}
	tp_tracept_frame_out(s, t, &t->items, h->tid, &fr);
}

/* The frames drained; *@most (if given): the most bytes one ring held. */
static uint64_t drain(struct session *s, uint64_t *most)
{
	uint64_t n = 0;
	struct fast *f = s->fast;
	struct tp_ftp_ring *rings;
	uint32_t size;

	if (!f || !f->ctl)
		return 0;
	rings = (void *)((uint8_t *)f->ctl + f->ctl->rings_off);
	size = f->ctl->ring_size;
	for (uint32_t i = 0; i < RINGS; i++) {
		struct tp_ftp_ring *r = &rings[i];
		uint64_t tail = r->tail, head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
		uint8_t *data = (uint8_t *)f->ctl + f->ctl->data_off + (uint64_t)i * size;

		if (most && head - tail > *most)
			*most = head - tail;
		while (tail < head) {
			const struct tp_ftp_rec *h = (const void *)(data + (tail & (size - 1)));

			/* the agent's records, checked as untrusted */
			if (h->size < 8 || (h->size & 7) || h->size > size - (tail & (size - 1)) ||
			    (h->tp != TP_FTP_REC_FILL &&
			     (h->tp >= f->n || h->size != f->ftps[h->tp].rec_size))) {
				tp_warn("--fast: a broken frame record in ring %u: ring dropped",
					i);
				tail = head;
				break;
			}
			if (h->tp != TP_FTP_REC_FILL) {
				/* nothing to print nor record (-q without --trace): only counted */
				if (s->o->quiet && !s->w)
					s->frames++;
				else
					one(s, f, h);
				n++;
			}
			tail += h->size;
		}
		__atomic_store_n(&r->tail, tail, __ATOMIC_SEQ_CST);
		/* its thread found it full and sleeps (the agent's wait_room) */
		if (__atomic_load_n(&r->waiting, __ATOMIC_SEQ_CST) &&
		    __atomic_exchange_n(&r->waiting, 0, __ATOMIC_SEQ_CST))
			syscall(SYS_futex, &r->waiting, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	}
	return n;
}

uint64_t tp_tracept_fast_drain(struct session *s)
{
	return drain(s, NULL);
}

/* The agent's counts into the tracepoints (fast ones only count there). */
static void counts(struct session *s, struct fast *f)
{
	const struct tp_ftp_ring *rings = (void *)((uint8_t *)f->ctl + f->ctl->rings_off);

	for (uint32_t j = 0; j < f->n; j++) {
		struct tracepoint *t = f->tp_of[j];
		const struct tp_ftp_tp *x = &f->ftps[j];

		t->hits = x->hits;
		t->collected = x->collected;
		t->discarded = x->discarded;
		t->errors = x->errors;
		for (uint32_t i = 0; i < RINGS; i++) {
			t->hits += rings[i].counts[j][0];
			t->collected += rings[i].counts[j][1];
			t->discarded += rings[i].counts[j][2];
			t->errors += rings[i].counts[j][3];
		}
		s->lost += x->lost;
	}
}

static int drain_between(void *arg)
{
	tp_tracept_fast_drain(arg);
	return 0;
}

/* Every thread stopped: the pads out, threads out of the callbacks, the block unmapped by
 * the agent, and the text compared with what it was. */
int tp_tracept_fast_stop(struct session *s)
{
	struct fast *f = s->fast;
	char agent[PATH_MAX];
	uint64_t busy = 0;
	int r = 0;

	if (!f || !f->live)
		return 0;
	f->live = false;
	if (!realpath(s->o->agent, agent) || !tp_proc_agent_mapped(s->pid, agent, 0))
		return 0; /* an execve took the agent and its pads away */
	/* a thread inside a callback may be waiting for room in its ring: drained between */
	r = tp_proc_inject_until_out(s->p, s->pid, tp_proc_loader_task(s->p, s->pid), f->detach_pc,
				     DETACH_ROUNDS, drain_between, s, &busy);
	if (!r && busy)
		tp_warn("--fast: a thread stayed inside a tracepoint's callback: the agent's block "
			"stays mapped in the program");
	for (uint32_t j = 0; !r && j < f->n; j++) {
		uint8_t now[ORIG_LEN];

		/* unreadable: its object was unloaded (dlclose), nothing of ours is there */
		if (tp_proc_read(s->pid, f->ftps[j].addr, now, ORIG_LEN) == ORIG_LEN &&
		    memcmp(now, f->orig[j], ORIG_LEN)) {
			tp_err("--fast: the code at %s is not what it was", f->tp_of[j]->where);
			r = -EIO;
		}
	}
	return r;
}

void tp_tracept_fast_end(struct session *s)
{
	struct fast *f = s->fast;

	if (!f)
		return;
	if (f->ctl) {
		tp_tracept_fast_drain(s);
		counts(s, f);
		if (f->ctl->nested)
			tp_warn("--fast: %" PRIu64
				" hits inside a signal handler that interrupted a "
				"hit were counted as discarded",
				f->ctl->nested);
		munmap(f->ctl, f->size);
	}
	if (f->fd >= 0)
		close(f->fd);
	free(f->tp_of);
	free(f->orig);
	free(f);
	s->fast = NULL;
}

/* All tracepoints fast: tracepad lets go of the program while it runs (no ptrace stop at
 * all), drains the rings every NAP_US (at once again while a ring fills up), and comes back
 * to remove the pads. */
int tp_tracept_fast_run(struct session *s, bool *stopped)
{
	int pfd, r = 0;
	bool ended = false;

	r = tp_proc_detach(s->p);
	s->p = NULL;
	if (r)
		return r;
	pfd = s->launched ? -1 : (int)syscall(SYS_pidfd_open, s->pid, 0);
	while (!(s->o->stop && *s->o->stop)) {
		struct pollfd pf = {.fd = pfd, .events = POLLIN};
		uint64_t most = 0;
		bool busy;
		int st;

		/* while a ring fills up, drain without sleeping: its thread may wait for room */
		drain(s, &most);
		busy = most >= s->fast->ctl->ring_size / BUSY_PART;

		if (s->launched) {
			pid_t w = waitpid(s->pid, &st, WNOHANG);

			if (w == s->pid && (WIFEXITED(st) || WIFSIGNALED(st))) {
				s->status = st;
				ended = true;
				break;
			}
			if (!busy)
				usleep(NAP_US);
		} else if (pfd < 0 ? kill(s->pid, 0) && errno == ESRCH : poll(&pf, 1, 0) > 0) {
			ended = true;
			break;
		} else if (!busy) {
			usleep(NAP_US);
		}
	}
	if (pfd >= 0)
		close(pfd);
	tp_tracept_fast_drain(s);
	if (ended) {
		s->fast->live = false;
		s->gone = true;
		return 0;
	}
	*stopped = true;
	r = tp_proc_attach(s->pid, 0, &s->p);
	if (r == -ESRCH) {
		s->gone = true;
		return 0;
	}
	if (!r)
		r = tp_tracept_fast_stop(s);
	if (r == -ESRCH)
		r = 0;
	if (s->p) {
		tp_proc_detach(s->p);
		s->p = NULL;
	}
	return r;
}
