/* Tests of src/bp: an SSOL breakpoint on work() of small targets (-O0/-O2, PIE/non-PIE,
 * static, CET, RIP-relative first instruction, 4 threads) counts exactly the calls the
 * target reports, leaves its output and exit status unchanged, and detaching in the middle
 * restores every original byte (compared with the ELF file). */
#include <sys/stat.h>
#include <time.h>

#include "../proc/proc-test.h"
#include "arch/arch.h"
#include "bp/bp.h"
#include "base/log.h"
#include "elf/symbols.h"

static void log_cb(enum tp_log_level level, const char *fmt, va_list ap)
{
	if (level > TP_LOG_WARN && !getenv("TRACEPAD_DEBUG"))
		return;
	printf("# ");
	vprintf(fmt, ap);
	printf("\n");
}

struct run {
	const char *name;
	long n;		    /* argv[1] */
	uint64_t detach_at; /* detach after this many hits, 0: run to the end */
	int park;	    /* at detach: leave the task at its slot (1), one step into it (2) */
	/* results */
	uint64_t hits;
	int status;
	char out[256];
	int restored; /* detach: original bytes equal the ELF file's */
	double seconds;
	struct tp_insn first; /* the instruction under the breakpoint */
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Bytes at @addr in the live process equal those of the ELF file mapped there. */
static int same_as_file(struct tp_symtab *st, pid_t pid, uint64_t addr, size_t len)
{
	const struct tp_map *m = tp_symtab_find_map(st, addr);
	uint8_t a[32], b[32];
	FILE *f;
	int same;

	if (!m || len > sizeof(a))
		return 0;
	f = fopen(m->path, "rb");
	if (!f)
		return 0;
	same = !fseek(f, (long)(m->offset + (addr - m->start)), SEEK_SET) &&
	       fread(b, 1, len, f) == len && tp_proc_read(pid, addr, a, len) == (ssize_t)len &&
	       !memcmp(a, b, len);
	fclose(f);
	return same;
}

static int run_one(struct run *rn)
{
	char nbuf[32], *argv[] = {target(rn->name), nbuf, NULL};
	struct tp_launch l = {.argv = argv, .cpu = -1};
	struct tp_symtab *st = tp_symtab_new();
	struct tp_bps *bps = NULL;
	struct tp_proc *p = NULL;
	bool detached = false;
	struct tp_event ev;
	uint8_t code[16];
	uint64_t addr = 0;
	int r, fd = -1;
	double t0;
	pid_t pid;

	snprintf(nbuf, sizeof(nbuf), "%ld", rn->n);
	rn->status = -1;
	rn->out[0] = 0;
	r = launch_capture(&l, &p, &fd);
	if (r)
		goto out;
	pid = tp_proc_pid(p);
	r = tp_symtab_load_pid(st, pid);
	if (!r)
		r = tp_symtab_find_symbol(st, "work", &addr);
	if (r) {
		tp_proc_kill(p);
		goto out;
	}
	if (tp_proc_read(pid, addr, code, sizeof(code)) == sizeof(code))
		tp_arch_decode(code, sizeof(code), addr, &rn->first);
	bps = tp_bps_new(p, pid);
	r = bps ? tp_bp_insert(bps, pid, addr, 0) : -ENOMEM;
	if (r) {
		printf("# insert: %s\n", strerror(-r));
		tp_proc_kill(p);
		goto out;
	}
	t0 = now();
	/* The injection of the SSOL mmap left the task in an ordinary reported stop. */
	tp_proc_resume(p, pid, TP_RESUME_CONT, 0);
	while ((r = tp_bp_wait(bps, &ev)) == 0) {
		switch (ev.kind) {
		case TP_EV_BREAKPOINT:
			if (rn->park && rn->hits + 1 == rn->detach_at) {
				uint64_t slot = 0, pc = 0;

				tp_proc_get_pc(ev.tid, &pc);
				tp_bp_lookup(bps, pc - 1, NULL, &slot);
				r = tp_proc_set_pc(ev.tid, slot);
				if (!r && rn->park == 2)
					r = tp_proc_resume(p, ev.tid, TP_RESUME_STEP, 0);
				if (!r && rn->park == 2)
					r = tp_proc_wait(p, &ev);
				if (!r && rn->park == 2 &&
				    (tp_proc_get_pc(ev.tid, &pc) || pc == slot))
					r = -EIO;
				r = r ? r : 1;
			} else {
				r = tp_bp_hit(bps, ev.tid, NULL, 0, NULL);
			}
			if (r == 1) {
				rn->hits++;
				if (rn->detach_at && rn->hits == rn->detach_at) {
					r = tp_bp_remove_all(bps);
					if (r)
						printf("# remove_all: %s\n", strerror(-r));
					rn->restored = !r && same_as_file(st, pid, addr, 16);
					tp_proc_detach(p);
					p = NULL;
					detached = true;
					goto done;
				}
				continue;
			}
			r = tp_proc_resume(p, ev.tid, TP_RESUME_CONT, r ? 0 : SIGTRAP);
			break;
		case TP_EV_SIGNAL:
			r = tp_proc_resume(p, ev.tid, TP_RESUME_CONT, ev.sig);
			break;
		case TP_EV_CLONE:
		case TP_EV_FORK:
			r = tp_proc_resume(p, ev.tid, TP_RESUME_CONT, 0);
			tp_proc_resume(p, ev.new_tid, TP_RESUME_CONT, 0);
			break;
		case TP_EV_EXITED:
			if (ev.tid == pid)
				rn->status = ev.status;
			continue;
		default:
			r = tp_proc_resume(p, ev.tid, TP_RESUME_CONT, 0);
			break;
		}
		if (r)
			printf("# resume %d: %s\n", ev.tid, strerror(-r));
	}
done:
	if (detached) {
		int st2;

		if (waitpid(pid, &st2, 0) == pid)
			rn->status = st2;
	}
	rn->seconds = now() - t0;
	tp_proc_free(p);
	r = 0;
out:
	if (fd >= 0)
		snprintf(rn->out, sizeof(rn->out), "%.255s", read_all(fd));
	tp_bps_free(bps);
	tp_symtab_free(st);
	return r;
}

static void check_counts(const char *name, long n, long total)
{
	struct run rn = {.name = name, .n = n};
	char want[64];

	snprintf(want, sizeof(want), "calls %ld", total);
	is_int(run_one(&rn), 0, "%s: launched and breakpoint inserted", name);
	is_int(rn.hits, total, "%s: %ld hits", name, total);
	ok(!strncmp(rn.out, want, strlen(want)), "%s: output \"%s\"", name, want);
	ok(WIFEXITED(rn.status) && WEXITSTATUS(rn.status) == 3, "%s: exit status 3 (%#x)", name,
	   rn.status);
}

/* Return breakpoints on work() and deep() of target-ret: returns == calls for work() and
 * the sum of the return values seen equals the program's, deep()'s longjmp'd calls return
 * never and do not confuse the shadow stack. */
static void check_returns(const char *name, long n)
{
	char nbuf[32], *argv[] = {target(name), nbuf, NULL}, want[128];
	struct tp_launch l = {.argv = argv, .cpu = -1};
	struct tp_symtab *st = tp_symtab_new();
	uint64_t work = 0, deep = 0;
	long calls[2] = {0}, rets[2] = {0}, sum = 0, bad = 0;
	struct tp_bps *bps = NULL;
	struct tp_proc *p = NULL;
	int r, fd = -1, status = -1;
	struct tp_event ev;
	pid_t pid;

	snprintf(nbuf, sizeof(nbuf), "%ld", n);
	r = launch_capture(&l, &p, &fd);
	if (r)
		goto out;
	pid = tp_proc_pid(p);
	r = tp_symtab_load_pid(st, pid);
	if (!r)
		r = tp_symtab_find_symbol(st, "work", &work);
	if (!r)
		r = tp_symtab_find_symbol(st, "deep", &deep);
	bps = tp_bps_new(p, pid);
	if (!r)
		r = tp_bp_insert(bps, pid, work, TP_BP_RETURN);
	if (!r)
		r = tp_bp_insert(bps, pid, deep, TP_BP_RETURN);
	if (r) {
		tp_proc_kill(p);
		goto out;
	}
	tp_proc_resume(p, pid, TP_RESUME_CONT, 0);
	while (tp_bp_wait(bps, &ev) == 0) {
		struct tp_bp_stop s;

		if (ev.kind == TP_EV_EXITED) {
			if (ev.tid == pid)
				status = ev.status;
			continue;
		}
		if (ev.kind == TP_EV_BREAKPOINT) {
			int h = tp_bp_hit(bps, ev.tid, NULL, 0, &s);

			if (h == 1) {
				int k = s.func == deep;

				if (s.kind == TP_BP_STOP_ENTRY) {
					calls[k]++;
				} else {
					rets[k]++;
					if (!k)
						sum += (long)s.rax;
					bad += s.depth != 0;
				}
				continue;
			}
			printf("# hit: %d\n", h);
		}
		tp_proc_resume(p, ev.tid, TP_RESUME_CONT, ev.kind == TP_EV_SIGNAL ? ev.sig : 0);
	}
	tp_proc_free(p);
out:
	is_int(r, 0, "%s: return breakpoints inserted", name);
	is_int(calls[0], n, "%s: work() %ld calls", name, n);
	is_int(rets[0], n, "%s: work() returns == calls", name);
	snprintf(want, sizeof(want), "calls %ld sum %ld jumps 0\n", n, sum);
	is_str(fd >= 0 ? read_all(fd) : "", want, "%s: sum of return values as the program's",
	       name);
	is_int(calls[1], 4 * ((n + 99) / 100), "%s: deep() entries", name);
	is_int(rets[1], 0, "%s: deep() never returns (longjmp)", name);
	is_int(bad, 0, "%s: stale frames dropped (depth 0 at each return)", name);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 3, "%s: exit status 3 (%#x)", name, status);
	tp_bps_free(bps);
	tp_symtab_free(st);
}

/* Attach to a running program (usually inside nanosleep, so the injected mmap meets a
 * syscall to restart), plant the breakpoint, count to the end. */
static void check_attach(void)
{
	char *argv[] = {target("bp-sleepy"), "400", NULL}, line[64], *out;
	long hits = 0, calls = -1;
	struct tp_symtab *st = tp_symtab_new();
	struct tp_bps *bps = NULL;
	struct tp_proc *p = NULL;
	int pfd[2], r, status = -1;
	struct tp_event ev;
	uint64_t addr = 0;
	size_t got = 0;
	pid_t pid;

	if (pipe(pfd))
		return;
	pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pfd[1]);
	while (got < sizeof(line) - 1 && read(pfd[0], line + got, 1) == 1 && line[got] != '\n')
		got++;
	usleep(20000);
	r = tp_proc_attach(pid, 0, &p);
	if (!r)
		r = tp_symtab_load_pid(st, pid);
	if (!r)
		r = tp_symtab_find_symbol(st, "work", &addr);
	bps = tp_bps_new(p, pid);
	if (!r)
		r = tp_bp_insert(bps, pid, addr, 0);
	is_int(r, 0, "attach: breakpoint inserted in a running program");
	if (r) {
		kill(pid, SIGKILL);
		tp_proc_detach(p);
		waitpid(pid, NULL, 0);
		goto out;
	}
	tp_proc_resume(p, pid, TP_RESUME_CONT, 0);
	tp_proc_resume_all(p);
	while (tp_bp_wait(bps, &ev) == 0) {
		if (ev.kind == TP_EV_EXITED) {
			if (ev.tid == pid)
				status = ev.status;
			continue;
		}
		if (ev.kind == TP_EV_BREAKPOINT && tp_bp_hit(bps, ev.tid, NULL, 0, NULL) == 1) {
			hits++;
			continue;
		}
		tp_proc_resume(p, ev.tid, TP_RESUME_CONT, ev.kind == TP_EV_SIGNAL ? ev.sig : 0);
	}
	tp_proc_free(p);
	if (status == -1 && waitpid(pid, &status, 0) != pid)
		status = -1;
	out = read_all(pfd[0]);
	sscanf(out, "calls %ld", &calls);
	is_int(calls, 400, "attach: the program made its 400 calls");
	ok(hits > 0 && hits <= 400, "attach: %ld hits after attaching, at most 400", hits);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 3, "attach: exit status 3 (%#x)", status);
out:
	tp_bps_free(bps);
	tp_symtab_free(st);
}

/* The breakpoint of ltrace and older Functracer, for comparison: on a hit, put the
 * original byte back, single-step it, re-insert the int3 (two stops, two writes per hit;
 * other threads could run past the lifted breakpoint).  Returns hits, *@sec the time. */
static long classic_run(long n, double *sec)
{
	char nbuf[32], *argv[] = {target("bp-count-O2"), nbuf, NULL};
	struct tp_launch l = {.argv = argv, .cpu = -1};
	struct tp_symtab *st = tp_symtab_new();
	const uint8_t int3 = 0xcc;
	struct tp_proc *p = NULL;
	struct tp_event ev;
	uint64_t addr = 0, pc;
	long hits = 0;
	uint8_t orig;
	double t0;
	int fd = -1;

	snprintf(nbuf, sizeof(nbuf), "%ld", n);
	if (launch_capture(&l, &p, &fd))
		goto out;
	if (tp_symtab_load_pid(st, tp_proc_pid(p)) || tp_symtab_find_symbol(st, "work", &addr) ||
	    tp_proc_read(tp_proc_pid(p), addr, &orig, 1) != 1 ||
	    tp_proc_write(tp_proc_pid(p), addr, &int3, 1)) {
		tp_proc_kill(p);
		goto out;
	}
	t0 = now();
	tp_proc_resume_all(p);
	while (tp_proc_wait(p, &ev) == 0) {
		if (ev.kind == TP_EV_EXITED)
			continue;
		if (ev.kind == TP_EV_BREAKPOINT && !tp_proc_get_pc(ev.tid, &pc) && pc == addr + 1) {
			hits++;
			tp_proc_write(ev.pid, addr, &orig, 1);
			tp_proc_set_pc(ev.tid, addr);
			tp_proc_resume(p, ev.tid, TP_RESUME_STEP, 0);
			tp_proc_wait(p, &ev);
			tp_proc_write(ev.pid, addr, &int3, 1);
		}
		tp_proc_resume(p, ev.tid, TP_RESUME_CONT, ev.kind == TP_EV_SIGNAL ? ev.sig : 0);
	}
	*sec = now() - t0;
	tp_proc_free(p);
out:
	if (fd >= 0)
		close(fd);
	tp_symtab_free(st);
	return hits;
}

/* Wall time of the target alone, for the cost per hit. */
static double untraced(const char *name, long n)
{
	char nbuf[32];
	double t0 = now();
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		snprintf(nbuf, sizeof(nbuf), "%ld", n);
		dup2(null, 1);
		execl(target(name), name, nbuf, (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &st, 0);
	return now() - t0;
}

/* Cost of one ptrace stop: single-steps of the launched program's first instructions. */
static double step_cost(void)
{
	char *argv[] = {target("bp-count-O2"), "1", NULL};
	struct tp_launch l = {.argv = argv, .cpu = -1};
	struct tp_event ev;
	struct tp_proc *p;
	int steps = 0, fd = -1;
	double t0;

	if (launch_capture(&l, &p, &fd))
		return -1;
	t0 = now();
	for (int i = 0; i < 2000; i++) {
		if (tp_proc_resume(p, tp_proc_pid(p), TP_RESUME_STEP, 0) || tp_proc_wait(p, &ev) ||
		    ev.kind != TP_EV_STEP)
			break;
		steps++;
	}
	t0 = (now() - t0) / (steps ? steps : 1);
	tp_proc_kill(p);
	close(fd);
	return steps == 2000 ? t0 : -1;
}

int main(int argc, char **argv)
{
	static const char *singles[] = {
	    "bp-count-O0",	  "bp-count-O2",  "bp-count-O0-nopie", "bp-count-O2-nopie",
	    "bp-count-O2-static", "bp-count-cet", "bp-riprel-O2"};

	target_dir = argc > 1 ? argv[1] : ".";
	tp_log_set_callback(log_cb);
	for (size_t i = 0; i < sizeof(singles) / sizeof(*singles); i++)
		check_counts(singles[i], 3000, 3000);

	/* The displaced instructions that matter: RIP-relative, endbr64. */
	{
		struct run rn = {.name = "bp-riprel-O2", .n = 10};

		run_one(&rn);
		ok(rn.first.flags & TP_INSN_F_RIPREL, "riprel: work() starts with %s, RIP-relative",
		   tp_arch_mnemonic_name(rn.first.mnemonic));
		rn = (struct run){.name = "bp-count-cet", .n = 10};
		run_one(&rn);
		is_str(tp_arch_mnemonic_name(rn.first.mnemonic), "endbr64",
		       "cet: work() starts with endbr64");
	}

	check_counts("bp-threads4-O0", 5000, 20000);
	check_counts("bp-threads4-O2", 5000, 20000);

	/* Detach with the breakpoint in, threads running through it. */
	for (int i = 0; i < 2; i++) {
		const char *name = i ? "bp-threads4-O2" : "bp-threads4-O0";
		struct run rn = {.name = name, .n = 20000, .detach_at = 3000};

		is_int(run_one(&rn), 0, "detach %s: ran", name);
		is_int(rn.hits, 3000, "detach %s: 3000 hits before detaching", name);
		ok(rn.restored, "detach %s: text equals the ELF file after remove_all", name);
		is_str(rn.out, "calls 80000\n", "detach %s: program finished correctly", name);
		ok(WIFEXITED(rn.status) && WEXITSTATUS(rn.status) == 3,
		   "detach %s: exit status 3 (%#x)", name, rn.status);
	}
	{
		struct run rn = {.name = "bp-count-O0", .n = 20000, .detach_at = 7};

		run_one(&rn);
		ok(rn.restored && !strcmp(rn.out, "calls 20000 sum 199990000\n") &&
		       WIFEXITED(rn.status) && WEXITSTATUS(rn.status) == 3,
		   "detach bp-count-O0 (push rbp, 1-byte insn): restored, output and status "
		   "intact");
	}

	check_attach();
	check_returns("bp-ret-O0", 3000);
	check_returns("bp-ret-O2", 3000);

	/* A task parked in a slot at detach: moved back, or stepped out of it. */
	for (int park = 1; park <= 2; park++) {
		struct run rn = {.name = "bp-count-O0", .n = 500, .detach_at = 100, .park = park};

		run_one(&rn);
		ok(rn.restored && !strcmp(rn.out, "calls 500 sum 124750\n") &&
		       WIFEXITED(rn.status) && WEXITSTATUS(rn.status) == 3,
		   "detach with a task %s its slot: restored, output \"%.*s\" and status intact",
		   park == 1 ? "at the start of" : "one step into", (int)strcspn(rn.out, "\n"),
		   rn.out);
	}

	/* Cost per hit, no threshold. */
	{
		struct run rn = {.name = "bp-count-O2", .n = 50000};
		double base = untraced("bp-count-O2", 50000), step;

		run_one(&rn);
		is_int(rn.hits, 50000, "cost run: 50000 hits");
		step = step_cost();
		printf(
		    "# cost per breakpoint hit: %.2f us (%.3f s traced, %.3f s alone, %lu hits)\n",
		    (rn.seconds - base) * 1e6 / (rn.hits ? rn.hits : 1), rn.seconds, base,
		    (unsigned long)rn.hits);
		printf("# cost per ptrace single-step stop: %.2f us\n", step * 1e6);
		{
			double sec = 0;
			long hits = classic_run(50000, &sec);

			is_int(hits, 50000,
			       "comparison run (single-step re-insertion): 50000 hits");
			printf("# cost per hit with single-step re-insertion: %.2f us\n",
			       (sec - base) * 1e6 / (hits ? hits : 1));
		}
		ok(step > 0, "single-step stops measured");
	}
	return tap_done();
}
