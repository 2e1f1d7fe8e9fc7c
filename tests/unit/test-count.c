/* TAP tests of the pure parts of `tracepad count` (src/count): the address table and the
 * per-thread counts the engines fill, --by parsing, the shell exit status, and the report
 * (text and JSON) of a synthetic result, by mnemonic, address and function. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arch/arch.h"
#include "count/count-priv.h"
#include "elf/symbols.h"
#include "tap.h"

/* No process has this pid (above PID_MAX_LIMIT): the report's symbol loading fails. */
#define NO_PID ((pid_t)INT_MAX)

/* ---- tp_count_addrs_add ---- */

#define NPCS 40000
#define PC_OF(i) (0x400000ull + (uint64_t)(i)*16)

static uint64_t want[NPCS];

struct addrs_check {
	unsigned char seen[NPCS];
	uint64_t sum;
	size_t n, bad, dup;
};

static int check_pc(void *arg, uint64_t pc, uint64_t *count)
{
	struct addrs_check *k = arg;
	size_t i;

	k->n++;
	k->sum += *count;
	if (pc == 0xffffffffff600000ull) {
		is_int(*count, 11, "the vsyscall pc has the sum of its two adds");
		return 0;
	}
	if (pc == 0x7fff00400000ull) {
		ok(*count == 1ull << 40, "a count of 2^40 is kept whole");
		return 0;
	}
	if (pc < PC_OF(0) || (pc - PC_OF(0)) % 16 || (pc - PC_OF(0)) / 16 >= NPCS) {
		k->bad++;
		return 0;
	}
	i = (size_t)((pc - PC_OF(0)) / 16);
	if (k->seen[i]++)
		k->dup++;
	if (*count != want[i]) {
		if (k->bad < 5)
			printf("# pc %#llx: got %llu, want %llu\n", (unsigned long long)pc,
			       (unsigned long long)*count, (unsigned long long)want[i]);
		k->bad++;
	}
	return 0;
}

static void test_addrs(void)
{
	static struct addrs_check k;
	struct tp_count_addrs h = {0};
	uint64_t added = 0;
	size_t grows = 0, last_cap = 0, missing = 0;

	/* Several rounds: each inserts pcs not seen yet and adds again to earlier ones, so
	 * repeated pcs straddle every growth of the table. */
	for (int round = 0; round < 4; round++) {
		int hi = NPCS / 4 * (round + 1);

		for (int i = 0; i < hi; i++) {
			uint64_t n = (uint64_t)(i % 7) + 1 + (uint64_t)round;

			tp_count_addrs_add(&h, PC_OF(i), n);
			want[i] += n;
			added += n;
			if (h.pcs.cap != last_cap) {
				grows++;
				last_cap = h.pcs.cap;
			}
		}
	}
	/* pcs that differ only in their high bits, and a large n. */
	tp_count_addrs_add(&h, 0xffffffffff600000ull, 5);
	tp_count_addrs_add(&h, 0x7fff00400000ull, 1ull << 40);
	tp_count_addrs_add(&h, 0xffffffffff600000ull, 6);
	added += 5 + 6 + (1ull << 40);
	/* pc 0 is never recorded */
	tp_count_addrs_add(&h, 0, 1000);

	ok(grows >= 5, "the table grew %zu times (to %zu slots) for %d pcs", grows, h.pcs.cap,
	   NPCS + 2);
	is_int(h.pcs.n, NPCS + 2, "the table holds the distinct pcs");
	ok(!tp_hash_get(&h.pcs, 0), "pc 0 is not recorded");
	is_int(h.dropped, 0, "nothing dropped");
	tp_hash_foreach(&h.pcs, check_pc, &k);
	for (size_t i = 0; i < NPCS; i++)
		missing += !k.seen[i];
	is_int(k.n, NPCS + 2, "iterating the table finds every pc once");
	is_int(k.bad, 0, "every pc has exactly the count added to it");
	is_int(k.dup, 0, "no pc is in two slots");
	is_int(missing, 0, "no pc was lost while the table grew");
	ok(k.sum == added, "the counts sum to the total added (%llu)", (unsigned long long)added);
	ok(want[0] == 4 * 1 + (0 + 1 + 2 + 3) && want[NPCS - 1] == 1 * ((NPCS - 1) % 7 + 1) + 3,
	   "the test's own bookkeeping: pc 0 in 4 rounds, the last pc in the last only");
	tp_hash_release(&h.pcs);
}

/* ---- tp_count_add_thread ---- */

#define NTIDS 40

static void test_threads(void)
{
	struct tp_count_result r = {0};
	uint64_t want[NTIDS] = {0}, sum = 0, total = 0;
	int order = 1, bad = 0;

	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < NTIDS; i++) {
			int t = round == 1 ? NTIDS - 1 - i : i; /* another order in round 1 */
			uint64_t k = (uint64_t)t * 1000 + (uint64_t)round + 1;

			tp_count_add_thread(&r, 1000 + t * 3, k);
			want[t] += k;
			total += k;
		}
	}
	tp_count_add_thread(&r, 1000, 0); /* a 0 add to a known tid changes nothing */
	is_int(r.nthreads, NTIDS, "%d tids, 3 adds each: %d threads", NTIDS, NTIDS);
	ok(r.cap_threads >= NTIDS, "the array grew past its first 16 slots (cap %d)",
	   r.cap_threads);
	for (int i = 0; i < r.nthreads; i++) {
		int t = (r.threads[i].tid - 1000) / 3;

		if (r.threads[i].tid != 1000 + i * 3)
			order = 0;
		if (t < 0 || t >= NTIDS || r.threads[i].count != want[t]) {
			printf("# tid %d: got %llu\n", (int)r.threads[i].tid,
			       (unsigned long long)r.threads[i].count);
			bad++;
		}
		sum += r.threads[i].count;
	}
	ok(order, "threads are kept in the order they were first seen");
	is_int(bad, 0, "every tid has exactly the sum of its adds");
	ok(sum == total, "the per-thread counts sum to %llu", (unsigned long long)total);
	is_int(r.threads[0].count, 1 + 2 + 3, "tid 1000: 1+2+3");
	is_int(r.threads[NTIDS - 1].count, 3 * 39000 + 6, "tid %d: 3*39000 + 6", 1000 + 39 * 3);

	/* a new tid with n 0 is still a thread */
	tp_count_add_thread(&r, 7, 0);
	is_int(r.nthreads, NTIDS + 1, "a new tid added with 0 is a new thread");
	is_int(r.threads[NTIDS].count, 0, "... with count 0");
	free(r.threads);
}

/* ---- tp_count_parse_by ---- */

static void test_parse_by(void)
{
	static const struct {
		const char *s;
		enum tp_count_by by;
	} good[] = {
	    {"mnemonic", TP_COUNT_BY_MNEMONIC},
	    {"function", TP_COUNT_BY_FUNCTION},
	    {"object", TP_COUNT_BY_OBJECT},
	    {"address", TP_COUNT_BY_ADDRESS},
	};
	static const char *const bad[] = {"", "none", "Mnemonic", "mnemonics", "func", "bogus"};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		enum tp_count_by by = TP_COUNT_BY_NONE;
		int err = tp_count_parse_by(good[i].s, &by);

		ok(err == 0 && by == good[i].by, "--by %s: 0 and %d (got %d, %d)", good[i].s,
		   (int)good[i].by, err, (int)by);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum tp_count_by by = TP_COUNT_BY_OBJECT;
		int err = tp_count_parse_by(bad[i], &by);

		ok(err == -EINVAL && by == TP_COUNT_BY_OBJECT,
		   "--by '%s': -EINVAL, *by untouched (got %d, %d)", bad[i], err, (int)by);
	}
}

/* ---- tp_count_exit_status ---- */

static int status_of(int wait_status, bool detached)
{
	struct tp_count_result r = {0};

	r.wait_status = wait_status;
	r.detached = detached;
	return tp_count_exit_status(&r);
}

static int real_wait_status(int code, int sig)
{
	pid_t p = fork();
	int st = -1;

	if (p == 0) {
		if (sig) {
			signal(sig, SIG_DFL);
			raise(sig);
		}
		_exit(code);
	}
	if (p < 0 || waitpid(p, &st, 0) != p)
		return -1;
	return st;
}

static void test_exit_status(void)
{
	int st;

	is_int(status_of(0, false), 0, "exited 0: 0");
	is_int(status_of(3 << 8, false), 3, "exited 3 (3<<8): 3");
	is_int(status_of(255 << 8, false), 255, "exited 255: 255");
	is_int(status_of(SIGKILL, false), 128 + SIGKILL, "killed by SIGKILL: 137");
	is_int(status_of(SIGSEGV | 0x80, false), 128 + SIGSEGV,
	       "killed by SIGSEGV with a core dump: 139");
	is_int(status_of(SIGTERM, false), 143, "killed by SIGTERM: 143");
	is_int(status_of(0, true), 0, "detached: 0");
	is_int(status_of(SIGKILL, true), 0, "detached: 0 whatever the wait status says");
	is_int(status_of(7 << 8, true), 0, "detached: 0 even with an exit code");

	st = real_wait_status(42, 0);
	ok(st != -1 && WIFEXITED(st), "a real child exits");
	is_int(status_of(st, false), 42, "... its _exit(42) gives 42");
	st = real_wait_status(0, SIGABRT);
	ok(st != -1 && WIFSIGNALED(st), "a real child is killed");
	is_int(status_of(st, false), 128 + SIGABRT, "... by SIGABRT gives 134");
}

/* ---- tp_count_report ---- */

static char *report(struct tp_count_ctx *c, int *err)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	*err = tp_count_report(c, f, NULL);
	fclose(f);
	return buf;
}

static int find_mnemonic(const char *name)
{
	for (unsigned m = 0; m < tp_arch_mnemonic_count() && m < TP_AGENT_MNEMONICS; m++)
		if (!strcmp(tp_arch_mnemonic_name(m), name))
			return (int)m;
	return -1;
}

struct want {
	const char *key;
	unsigned long long count;
	double pct;
};

/* The text histogram: its header "histogram by BY (SHOWN of N)", then SHOWN lines in order,
 * then the end of the report. */
static void check_text_hist(const char *out, const char *by, size_t shown, size_t n,
			    const struct want *w, unsigned long long total, const char *what)
{
	char head[128], key[128];
	const char *p;
	size_t bad = 0, i;

	snprintf(head, sizeof(head), "  histogram by %s (%zu of %zu)\n", by, shown, n);
	p = out ? strstr(out, head) : NULL;
	ok(p != NULL, "%s text: \"histogram by %s (%zu of %zu)\"", what, by, shown, n);
	if (!p)
		return;
	p = strchr(p, '\n') + 1; /* the header */
	p = strchr(p, '\n');	 /* the column titles */
	p = p ? p + 1 : "";
	for (i = 0; i < shown && *p; i++) {
		unsigned long long cnt = 0;
		double pct = -1;

		if (sscanf(p, " %llu %lf%% %127s", &cnt, &pct, key) != 3 || strcmp(key, w[i].key) ||
		    cnt != w[i].count || fabs(pct - w[i].pct) > 0.051 ||
		    fabs(pct - 100.0 * (double)cnt / (double)total) > 0.051) {
			printf("# line %zu: %.*s", i, (int)(strchr(p, '\n') - p + 1), p);
			printf("#   want %llu %.1f%% %s\n", w[i].count, w[i].pct, w[i].key);
			bad++;
		}
		p = strchr(p, '\n');
		p = p ? p + 1 : "";
	}
	ok(i == shown && !bad, "%s text: the %zu entries in order, counts and percentages", what,
	   shown);
	ok(*p == '\0', "%s text: nothing after the histogram", what);
}

/* The JSON entries: "histogram": {"by": BY, "entries": [...]} with exactly @shown entries. */
static void check_json_hist(const char *out, const char *by, size_t shown, const struct want *w,
			    unsigned long long total, const char *what)
{
	char head[128], key[128];
	unsigned long long jtotal = 0;
	const char *p;
	size_t bad = 0, i;

	p = out ? strstr(out, "\"instructions\": ") : NULL;
	ok(p && sscanf(p, "\"instructions\": %llu", &jtotal) == 1 && jtotal == total,
	   "%s JSON: the first \"instructions\" is the total %llu (got %llu)", what, total, jtotal);
	snprintf(head, sizeof(head), "\"histogram\": {\"by\": \"%s\", \"entries\": [", by);
	p = out ? strstr(out, head) : NULL;
	ok(p != NULL, "%s JSON: %s", what, head);
	if (!p)
		return;
	p += strlen(head);
	for (i = 0; i < shown; i++) {
		unsigned long long cnt = 0;
		int used = 0;

		if (i) {
			if (strncmp(p, ", ", 2)) {
				bad++;
				break;
			}
			p += 2;
		}
		if (sscanf(p, "{\"key\": \"%127[^\"]\", \"count\": %llu}%n", key, &cnt, &used) !=
			2 ||
		    !used || strcmp(key, w[i].key) || cnt != w[i].count ||
		    fabs(100.0 * (double)cnt / (double)jtotal - w[i].pct) > 0.051) {
			printf("# entry %zu: %.60s\n", i, p);
			bad++;
			break;
		}
		p += used;
	}
	ok(!bad, "%s JSON: the %zu entries in order with the text's counts and percentages", what,
	   shown);
	ok(!strcmp(p, "]}}\n"), "%s JSON: the entries and the object end there", what);
}

static void test_report_mnemonic(void)
{
	static const char *const names[] = {"mov", "add", "cmp", "jnz", "push", "pop"};
	static const unsigned long long counts[] = {412, 250, 167, 103, 34, 34};
	/* pop and push tie: the key breaks the tie */
	static const struct want w[] = {
	    {"mov", 412, 41.2}, {"add", 250, 25.0}, {"cmp", 167, 16.7},
	    {"jnz", 103, 10.3}, {"pop", 34, 3.4},   {"push", 34, 3.4},
	};
	struct tp_count_opts o = {
	    .engine = TP_COUNT_ENGINE_PTRACE, .by = TP_COUNT_BY_MNEMONIC, .top = -1};
	static struct tp_count_result r;
	struct tp_count_ctx c = {.o = &o, .r = &r, .path = "/bin/prog", .pid = 4321};
	int ids[6], found = 1, err = -1;
	char *out;

	for (int i = 0; i < 6; i++) {
		ids[i] = find_mnemonic(names[i]);
		if (ids[i] < 0)
			found = 0;
	}
	ok(found, "the mnemonic ids of mov add cmp jnz push pop");
	if (!found)
		return;
	memset(&r, 0, sizeof(r));
	for (int i = 0; i < 6; i++)
		r.mnemonic[ids[i]] = counts[i];
	r.total = 1000;
	tp_count_add_thread(&r, 4321, 600);
	tp_count_add_thread(&r, 4322, 400);
	r.seconds = 2.0;
	r.wait_status = 3 << 8;

	out = report(&c, &err);
	is_int(err, 0, "mnemonic text: report returns 0");
	ok(out && strstr(out, "tracepad count: /bin/prog (pid 4321), engine ptrace\n"),
	   "mnemonic text: the title line");
	ok(out && strstr(out, "\n  instructions  1000\n  threads       2\n"
			      "    tid 4321      600\n    tid 4322      400\n"),
	   "mnemonic text: total 1000, 2 threads, 600 and 400");
	ok(out && strstr(out, "\n  elapsed       2.000 s\n  rate          500 instructions/s\n"),
	   "mnemonic text: 2 s at 500 instructions/s");
	ok(out && strstr(out, "\n  exit          status 3\n"), "mnemonic text: exit status 3");
	ok(out && !strstr(out, "note") && !strstr(out, "warning"),
	   "mnemonic text: no notes, no warning");
	check_text_hist(out, "mnemonic", 6, 6, w, 1000, "mnemonic (default top)");
	free(out);

	o.top = 3;
	out = report(&c, &err);
	check_text_hist(out, "mnemonic", 3, 6, w, 1000, "mnemonic --top 3");
	free(out);
	o.top = 0;
	out = report(&c, &err);
	check_text_hist(out, "mnemonic", 6, 6, w, 1000, "mnemonic --top 0");
	free(out);

	o.json = true;
	o.top = -1;
	out = report(&c, &err);
	is_int(err, 0, "mnemonic JSON: report returns 0");
	ok(out && !strncmp(
		      out,
		      "{\"engine\": \"ptrace\", \"program\": \"/bin/prog\", \"pid\": 4321, "
		      "\"instructions\": 1000, \"threads\": [{\"tid\": 4321, "
		      "\"instructions\": 600}, {\"tid\": 4322, \"instructions\": 400}], "
		      "\"seconds\": 2.000000, \"instructions_per_second\": 500.0, ",
		      strlen("{\"engine\": \"ptrace\", \"program\": \"/bin/prog\", \"pid\": 4321, "
			     "\"instructions\": 1000, \"threads\": [{\"tid\": 4321, "
			     "\"instructions\": 600}, {\"tid\": 4322, \"instructions\": 400}], "
			     "\"seconds\": 2.000000, \"instructions_per_second\": 500.0, ")),
	   "mnemonic JSON: engine, program, pid, total, threads, seconds, rate");
	ok(out &&
	       strstr(out, ", \"region\": null, \"startup\": null, \"start\": \"\", "
			   "\"exit\": {\"status\": 3}, \"exec\": false, \"exec_followed\": false, "
			   "\"forked\": false, "),
	   "mnemonic JSON: no region, no start-up, exit status 3, no exec, no fork");
	check_json_hist(out, "mnemonic", 6, w, 1000, "mnemonic (default top)");
	free(out);

	o.top = 2;
	out = report(&c, &err);
	check_json_hist(out, "mnemonic", 2, w, 1000, "mnemonic --top 2");
	free(out);

	/* killed, and detached */
	r.wait_status = SIGSEGV;
	o.json = false;
	out = report(&c, &err);
	ok(out && strstr(out, "\n  exit          killed by signal 11\n"),
	   "text: killed by signal 11");
	free(out);
	o.json = true;
	out = report(&c, &err);
	ok(out && strstr(out, ", \"exit\": {\"signal\": 11}, "),
	   "JSON: \"exit\": {\"signal\": 11}");
	free(out);
	r.detached = true;
	out = report(&c, &err);
	ok(out && strstr(out, ", \"exit\": null, "), "JSON detached: \"exit\": null");
	free(out);
	o.json = false;
	out = report(&c, &err);
	ok(out && strstr(out, "\n  exit          (detached; the program goes on)\n"),
	   "text detached: the program goes on");
	free(out);

	/* an execve: counted on into its image, or not */
	r.exec_followed = true;
	out = report(&c, &err);
	ok(out && strstr(out, "\n  note          the program called execve: its new image is "
			      "counted too\n"),
	   "text exec followed: noted");
	free(out);
	o.json = true;
	out = report(&c, &err);
	ok(out && strstr(out, ", \"exec\": false, \"exec_followed\": true, "),
	   "JSON exec followed: \"exec_followed\": true");
	free(out);
	r.exec_followed = false;
	r.exec_seen = true;
	out = report(&c, &err);
	ok(out && strstr(out, ", \"exec\": true, \"exec_followed\": false, "),
	   "JSON exec not followed: \"exec\": true");
	free(out);
	o.json = false;
	out = report(&c, &err);
	ok(out && strstr(out, "\n  note          the program called execve: the new image is not "
			      "counted\n"),
	   "text exec not followed: noted");
	free(out);
	r.exec_seen = false;

	/* --by none: no histogram at all */
	o.by = TP_COUNT_BY_NONE;
	out = report(&c, &err);
	ok(out && !strstr(out, "histogram"), "text --by none: no histogram");
	free(out);
	o.json = true;
	out = report(&c, &err);
	ok(out && !strstr(out, "histogram") && strstr(out, "\"forked\": false}\n"),
	   "JSON --by none: no histogram, the object ends after \"forked\"");
	free(out);
	free(r.threads);
}

#define NADDR 25

static void test_report_address(void)
{
	struct tp_count_opts o = {
	    .engine = TP_COUNT_ENGINE_TRAPFLAG, .by = TP_COUNT_BY_ADDRESS, .top = -1};
	static struct tp_count_result r;
	struct tp_symtab *syms = tp_symtab_new();
	struct tp_count_ctx c = {
	    .o = &o, .r = &r, .path = "/bin/prog", .pid = NO_PID, .syms = syms};
	static char keys[NADDR][32];
	struct want w[NADDR];
	unsigned long long total = 0;
	int err = -1;
	char *out, title[128];

	memset(&r, 0, sizeof(r));
	/* pc i gets 100 + 3i, in several adds; the largest comes first in the report */
	for (int i = 0; i < NADDR; i++) {
		uint64_t pc = 0x401000 + 0x10 * (uint64_t)i, n = 100 + 3 * (uint64_t)i;

		tp_count_addrs_add(&r.addrs, pc, n - 1);
		tp_count_addrs_add(&r.addrs, pc, 1);
		total += n;
	}
	/* an entry zeroed by the engine (as the ptrace engine does on sync) is not shown */
	tp_count_addrs_add(&r.addrs, 0x500000, 9);
	*tp_hash_get(&r.addrs.pcs, 0x500000) = 0;
	for (int i = 0; i < NADDR; i++) {
		int k = NADDR - 1 - i;

		snprintf(keys[i], sizeof(keys[i]), "%#llx", 0x401000ull + 0x10ull * (unsigned)k);
		w[i].key = keys[i];
		w[i].count = 100 + 3 * (unsigned long long)k;
		w[i].pct = 100.0 * (double)w[i].count / (double)total;
	}
	r.total = total;
	tp_count_add_thread(&r, NO_PID, total);
	r.seconds = 0.5;
	r.wait_status = 0;

	ok(syms != NULL, "an empty symbol table");
	out = report(&c, &err);
	is_int(err, 0, "address text: report returns 0");
	snprintf(title, sizeof(title), "tracepad count: /bin/prog (pid %d), engine trapflag\n",
		 (int)NO_PID);
	ok(out && strstr(out, title), "address text: the title line, engine trapflag");
	snprintf(title, sizeof(title), "\n  instructions  %llu\n", total);
	ok(out && strstr(out, title), "address text: the total %llu", total);
	ok(out && strstr(out, "\n  exit          status 0\n"), "address text: exit status 0");
	check_text_hist(out, "address", 20, NADDR, w, total, "address (default top 20)");
	free(out);
	o.top = 4;
	out = report(&c, &err);
	check_text_hist(out, "address", 4, NADDR, w, total, "address --top 4");
	free(out);
	o.top = 100;
	out = report(&c, &err);
	check_text_hist(out, "address", NADDR, NADDR, w, total, "address --top 100");
	free(out);

	o.json = true;
	o.top = -1;
	out = report(&c, &err);
	check_json_hist(out, "address", NADDR, w, total, "address (default: all)");
	free(out);
	o.top = 5;
	out = report(&c, &err);
	check_json_hist(out, "address", 5, w, total, "address --top 5");
	free(out);

	/* --by function with nothing resolved: every address folds into "?" */
	{
		struct want q = {"?", total, 100.0};

		o.by = TP_COUNT_BY_FUNCTION;
		o.top = -1;
		out = report(&c, &err);
		check_json_hist(out, "function", 1, &q, total, "function, unresolved");
		free(out);
		o.json = false;
		out = report(&c, &err);
		check_text_hist(out, "function", 1, 1, &q, total, "function, unresolved");
		free(out);
	}
	free(r.threads);
	tp_hash_release(&r.addrs.pcs);
	tp_symtab_free(syms);
}

int main(void)
{
	test_addrs();
	test_threads();
	test_parse_by();
	test_exit_status();
	test_report_mnemonic();
	test_report_address();
	return tap_done();
}
