/* Tests of src/calls/unwind.c: backtraces of a real stopped thread at c() of main->a->b->c
 * (-O2, no frame pointers, with and without debug info, and static), with return hooks on
 * a() and b() seen through by the substitution callback, and from a qsort comparator
 * called inside libc. */
#include <time.h>

#include "../proc/proc-test.h"
#include "bp/bp.h"
#include "calls/unwind.h"
#include "base/log.h"
#include "elf/symbols.h"

#define MAXF 32

static void log_cb(enum tp_log_level level, const char *fmt, va_list ap)
{
	if (level > TP_LOG_WARN)
		return;
	printf("# ");
	vprintf(fmt, ap);
	printf("\n");
}

/* Return addresses the hooks replaced, as the engine's shadow stack knows them. */
struct hooked {
	int n;
	uint64_t sp[8], real[8], tramp;
	int calls; /* subst consulted for a hooked slot */
};

static bool subst(void *arg, pid_t tid, uint64_t addr, uint64_t *val)
{
	struct hooked *h = arg;

	for (int i = 0; i < h->n; i++) {
		if (h->sp[i] == addr) {
			*val = h->real[i];
			h->calls++;
			return true;
		}
	}
	return false;
}

struct bt {
	int n;
	uint64_t pcs[MAXF];
	char names[MAXF][64]; /* function, or "object-basename:?" */
};

static void symbolize(struct tp_symtab *st, struct bt *bt)
{
	for (int i = 0; i < bt->n; i++) {
		struct tp_symloc loc;
		/* A return address may be one past a call at the very end of a function. */
		uint64_t pc = i ? bt->pcs[i] - 1 : bt->pcs[i];

		if (tp_symtab_lookup(st, pc, false, &loc))
			snprintf(bt->names[i], sizeof(bt->names[i]), "?");
		else if (loc.function)
			snprintf(bt->names[i], sizeof(bt->names[i]), "%s", loc.function);
		else
			snprintf(bt->names[i], sizeof(bt->names[i]), "%s:?",
				 strrchr(loc.object, '/') ? strrchr(loc.object, '/') + 1
							  : loc.object);
	}
}

static void chain_text(const struct bt *bt, int n, char *buf, size_t len)
{
	size_t pos = 0;

	buf[0] = 0;
	for (int i = 0; i < n && i < bt->n && pos < len; i++)
		pos += snprintf(buf + pos, len - pos, "%s%s", i ? "<-" : "", bt->names[i]);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

enum mode { PLAIN, HOOKED, QSORT, THREAD };

/* Run @t to the stop of interest and unwind there. */
static int run(const char *t, enum mode mode, struct bt *bt, struct bt *raw, struct hooked *h,
	       double *per_bt)
{
	char *argv[] = {target(t), mode == THREAD ? "thread" : NULL, NULL};
	struct tp_launch l = {.argv = argv, .cpu = -1};
	struct tp_symtab *st = tp_symtab_new();
	struct tp_unwinder *u = NULL;
	struct tp_bps *bps = NULL;
	struct tp_proc *p = NULL;
	uint64_t main_addr = 0, fa = 0, fb = 0, fc = 0;
	bool ready = false, done = false;
	pid_t stopped = 0;
	int status = -1, fd = -1, err;
	struct tp_event ev;
	pid_t pid;

	bt->n = raw->n = 0;
	err = launch_capture(&l, &p, &fd);
	if (err)
		goto out;
	pid = tp_proc_pid(p);
	/* Created at the first instruction, when only the program and ld.so are mapped:
	 * tp_unwinder_refresh() has to bring libc in. */
	u = tp_unwinder_new(pid);
	err = u ? tp_symtab_load_pid(st, pid) : -errno;
	if (!err)
		err = tp_symtab_find_symbol(st, "main", &main_addr);
	bps = tp_bps_new(p, pid);
	if (!err)
		err = tp_bp_insert(bps, pid, main_addr, 0);
	if (err) {
		tp_proc_kill(p);
		goto out;
	}
	tp_proc_resume(p, pid, TP_RESUME_CONT, 0);
	while (tp_bp_wait(bps, &ev) == 0) {
		struct user_regs_struct regs;
		uint64_t pc;
		int r;

		if (ev.kind == TP_EV_EXITED) {
			if (ev.tid == pid)
				status = ev.status;
			continue;
		}
		if (ev.kind == TP_EV_CLONE || ev.kind == TP_EV_FORK)
			tp_proc_resume(p, ev.new_tid, TP_RESUME_CONT, 0);
		if (ev.kind != TP_EV_BREAKPOINT || tp_proc_get_regs(ev.tid, &regs)) {
			tp_proc_resume(p, ev.tid, TP_RESUME_CONT,
				       ev.kind == TP_EV_SIGNAL ? ev.sig : 0);
			continue;
		}
		pc = regs.rip - 1;
		if (pc == main_addr && !ready) {
			ready = true;
			err = tp_symtab_load_pid(st, pid);
			if (!err)
				err = tp_symtab_find_symbol(st, mode == QSORT ? "cmp_ints" : "c",
							    &fc);
			if (!err && mode == HOOKED)
				err = tp_symtab_find_symbol(st, "a", &fa);
			if (!err && mode == HOOKED)
				err = tp_symtab_find_symbol(st, "b", &fb);
			if (!err)
				err = tp_bp_insert(bps, pid, fc, 0);
			if (!err && mode == HOOKED)
				err = tp_bp_insert(bps, pid, fa, TP_BP_RETURN);
			if (!err && mode == HOOKED)
				err = tp_bp_insert(bps, pid, fb, TP_BP_RETURN);
			if (!err)
				err = tp_unwinder_refresh(u);
			if (err) {
				tp_proc_kill(p);
				p = NULL;
				break;
			}
		} else if ((pc == fa || pc == fb) && h->n < 8) {
			/* Before tp_bp_hit() hooks it: [sp] is still the real return address. */
			h->sp[h->n] = regs.rsp;
			if (tp_proc_read(pid, regs.rsp, &h->real[h->n], 8) == 8)
				h->n++;
		} else if (pc == fc && !done) {
			done = true;
			stopped = ev.tid;
			regs.rip = pc;
			if (mode == HOOKED && h->n)
				tp_proc_read(pid, h->sp[h->n - 1], &h->tramp, 8);
			bt->n = tp_unwinder_backtrace(
			    u, ev.tid, &regs, mode == HOOKED ? subst : NULL, h, bt->pcs, MAXF);
			raw->n =
			    tp_unwinder_backtrace(u, ev.tid, &regs, NULL, NULL, raw->pcs, MAXF);
			if (per_bt) {
				double t0 = now();
				uint64_t pcs[MAXF];

				for (int i = 0; i < 1000; i++)
					tp_unwinder_backtrace(u, ev.tid, &regs, subst, h, pcs,
							      MAXF);
				*per_bt = (now() - t0) / 1000;
			}
			symbolize(st, bt);
			symbolize(st, raw);
		}
		r = tp_bp_hit(bps, ev.tid, NULL, 0, NULL);
		if (r != 1)
			tp_proc_resume(p, ev.tid, TP_RESUME_CONT, r ? 0 : SIGTRAP);
	}
	tp_proc_free(p);
	err = done ? 0 : -ENOENT;
	if (!err && (mode == THREAD) != (stopped != pid))
		err = -ESRCH;
	if (!err && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
		err = -ECHILD;
	if (!err && strcmp(read_all(fd), "7 1 9\n"))
		err = -EPROTO;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	tp_unwinder_free(u);
	tp_bps_free(bps);
	tp_symtab_free(st);
	return err;
}

static void check_chain(const char *t)
{
	struct hooked h = {0};
	struct bt bt, raw;
	char chain[512];
	double per = 0;
	int err;

	err = run(t, PLAIN, &bt, &raw, &h, &per);
	is_int(err, 0, "%s: ran to c() and to its end, output unchanged", t);
	chain_text(&bt, 4, chain, sizeof(chain));
	is_str(chain, "c<-b<-a<-main", "%s: backtrace at c()", t);
	ok(bt.n > 4, "%s: unwound past main into libc (%d frames)", t, bt.n);
	printf("# %s: %.1f us per backtrace of %d frames\n", t, per * 1e6, bt.n);

	memset(&h, 0, sizeof(h));
	err = run(t, HOOKED, &bt, &raw, &h, NULL);
	is_int(err, 0, "%s: ran with return hooks on a() and b()", t);
	chain_text(&bt, 4, chain, sizeof(chain));
	is_str(chain, "c<-b<-a<-main", "%s: hooked frames seen through", t);
	ok(h.n == 2 && h.calls >= 2, "%s: the substitution gave both real return addresses", t);
	ok(raw.n >= 3 && raw.pcs[2] == h.tramp && h.tramp != h.real[1],
	   "%s: without it the trampoline shows (%#llx)", t, (unsigned long long)h.tramp);
}

static void check_thread(const char *t)
{
	struct hooked h = {0};
	struct bt bt, raw;
	char chain[512];

	is_int(run(t, THREAD, &bt, &raw, &h, NULL), 0, "%s: ran to c() in a second thread", t);
	chain_text(&bt, 4, chain, sizeof(chain));
	is_str(chain, "c<-b<-a<-thr", "%s: backtrace of the thread that stopped", t);
}

static void check_qsort(const char *t)
{
	struct hooked h = {0};
	struct bt bt, raw;
	char chain[1024];
	int libc = 0, main_at = -1;

	is_int(run(t, QSORT, &bt, &raw, &h, NULL), 0, "%s: ran to cmp_ints()", t);
	chain_text(&bt, MAXF, chain, sizeof(chain));
	for (int i = 1; i < bt.n; i++) {
		if (!strcmp(bt.names[i], "main") && main_at < 0)
			main_at = i;
		if (main_at < 0 && strstr(bt.names[i], "sort"))
			libc++;
	}
	ok(bt.n > 2 && !strcmp(bt.names[0], "cmp_ints") && libc > 0 && main_at > 1,
	   "%s: from the comparator through libc's qsort to main: %s", t, chain);
}

int main(int argc, char **argv)
{
	target_dir = argc > 1 ? argv[1] : ".";
	tp_log_set_callback(log_cb);
	tp_unwinder_free(NULL);
	check_chain("proto-chain-g");
	check_chain("proto-chain-nog");
	check_chain("proto-chain-static");
	check_thread("proto-chain-g");
	check_thread("proto-chain-nog");
	check_qsort("proto-chain-g");
	check_qsort("proto-chain-nog");
	return tap_done();
}
