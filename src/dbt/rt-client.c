/* The runtime's side of the client interface (rt-client.h): the list of clients, their
 * per-thread data, calls from cache code into a client, and the modules (executable
 * mappings) the program runs code of, found in /proc/self/maps as translation reaches them. */
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>

#include "base/procfs.h"
#include "dbt/rt-client.h"
#include "rt/raw.h"

static struct tp_dbt_client *const clients[] = {&tp_dbt_count_client};
#define NCLIENTS (sizeof(clients) / sizeof(clients[0]))

#define EACH(cb)                                                                                   \
	for (size_t i_ = 0; i_ < NCLIENTS; i_++)                                                   \
		if (clients[i_]->cb)

#define MODULES 1024
static struct {
	uint64_t start, end;
} modules[MODULES];
static uint32_t nmodules;
static size_t tls_total;

int tp_dbt_client_init(void)
{
	uint64_t off = tp_dbt_client_tls_at;

	for (size_t i = 0; i < NCLIENTS; i++) {
		struct tp_dbt_client *cl = clients[i];
		int err = cl->init ? cl->init(cl) : 0;

		if (err)
			return err;
		/* sizes are known once init chose what the client does */
		cl->tls_off = off;
		off += (cl->tls_size + 63) & ~(size_t)63;
	}
	tls_total = off - tp_dbt_client_tls_at;
	return 0;
}

size_t tp_dbt_client_tls_size(void)
{
	return (tls_total + 4095) & ~(size_t)4095;
}

extern const uint8_t tp_dbt_tpl_gate[], tp_dbt_tpl_gate_reason[], tp_dbt_tpl_gate_end[];

void tp_dbt_client_put_call(struct tp_arch_writer *w, const struct tp_dbt_client *cl, uint16_t arg)
{
	uint32_t reason = TP_DBT_GATE_CLIENT | arg, at = (uint32_t)w->len;

	for (size_t i = 0; i < NCLIENTS; i++)
		if (clients[i] == cl)
			reason |= (uint32_t)i << 16;
	/* the gate's template: the runtime's C code with every register saved, and back */
	tp_arch_put_data(w, tp_dbt_tpl_gate, (size_t)(tp_dbt_tpl_gate_end - tp_dbt_tpl_gate));
	if (!w->err)
		memcpy(w->buf + at + (tp_dbt_tpl_gate_reason - tp_dbt_tpl_gate) - 4, &reason, 4);
}

uint64_t tp_dbt_client_call(struct tp_dbt_thread *t, uint64_t back, struct tp_dbt_frame *f)
{
	uint32_t reason = (uint32_t)t->arg, i = (reason >> 16) & 0xff;

	if (i >= NCLIENTS || !clients[i]->call)
		return back;
	return clients[i]->call(t, reason & 0xffff, back, f);
}

/* ---- modules ---- */

static int module_known(uint64_t pc)
{
	for (uint32_t i = 0; i < nmodules; i++)
		if (pc >= modules[i].start && pc < modules[i].end)
			return 1;
	return 0;
}

static void module_line(const char *l, size_t len)
{
	struct tp_maps_ent e;

	if (tp_maps_parse_line(l, len, &e) || !tp_maps_exec(&e) || nmodules >= MODULES)
		return;
	for (uint32_t i = 0; i < nmodules; i++)
		if (modules[i].start == e.start && modules[i].end == e.end)
			return;
	/* the runtime's own mappings are no module of the program's */
	if (tp_dbt_in_runtime(e.start))
		return;
	modules[nmodules].start = e.start;
	modules[nmodules].end = e.end;
	nmodules++;
	EACH(module_load)
	clients[i_]->module_load(e.start, e.end, e.offset, e.path,
				 e.path_len + (e.deleted ? 10 : 0));
}

/* Every executable mapping not seen yet is a module loaded. */
static void modules_reload(void)
{
	static char buf[4096], line[4096 + 256];
	size_t ll = 0;
	long fd = tp_raw3(SYS_open, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0), n;

	if (fd < 0)
		return;
	while ((n = tp_raw3(SYS_read, fd, buf, sizeof(buf))) > 0) {
		for (long i = 0; i < n; i++) {
			if (buf[i] == '\n') {
				module_line(line, ll);
				ll = 0;
			} else if (ll < sizeof(line)) {
				line[ll++] = buf[i];
			}
		}
	}
	tp_raw1(SYS_close, fd);
}

void tp_dbt_client_unmap(uint64_t start, uint64_t end)
{
	for (uint32_t i = 0; i < nmodules;) {
		if (modules[i].start < end && start < modules[i].end) {
			EACH(module_unload)
			clients[i_]->module_unload(modules[i].start, modules[i].end);
			modules[i] = modules[--nmodules];
		} else {
			i++;
		}
	}
}

/* ---- translation ---- */

void tp_dbt_client_block_begin(uint64_t pc, struct tp_arch_writer *w)
{
	if (!module_known(pc))
		modules_reload();
	EACH(block_begin) clients[i_]->block_begin(pc, w);
}

void tp_dbt_client_insn(uint64_t pc, const uint8_t *b, const struct tp_insn *in,
			struct tp_arch_writer *w, enum tp_dbt_client_where where)
{
	EACH(insn) clients[i_]->insn(pc, b, in, w, where);
}

void tp_dbt_client_block_end(uint64_t pc, uint64_t end, uint8_t *buf, size_t len)
{
	EACH(block_end) clients[i_]->block_end(pc, end, buf, len);
}

int tp_dbt_client_block_at(uint64_t pc)
{
	EACH(block_at) if (clients[i_]->block_at(pc)) return 1;
	return 0;
}

/* ---- run time ---- */

void tp_dbt_client_thread_new(struct tp_dbt_thread *t)
{
	/* the first thread is made before %gs is set */
	struct tp_dbt_thread *parent = tp_dbt.main ? tp_dbt_self() : NULL;

	EACH(thread_new) clients[i_]->thread_new(t, parent);
}

void tp_dbt_client_vfork(struct tp_dbt_thread *t, int done)
{
	EACH(vfork) clients[i_]->vfork(t, done);
}

void tp_dbt_client_flush(struct tp_dbt_thread *t)
{
	EACH(flush) clients[i_]->flush(t);
}

void tp_dbt_client_signal(struct tp_dbt_thread *t, const siginfo_t *si, ucontext_t *uc)
{
	EACH(signal) clients[i_]->signal(t, si, uc);
}

void tp_dbt_client_process_exit(void)
{
	EACH(process_exit) clients[i_]->process_exit();
}
