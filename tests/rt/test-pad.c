/* src/rt's jump pads on this program's own functions (pad-funcs.S): 1- to 4-byte instructions,
 * a branch target inside the bytes (int3 path), RIP-relative code, the red zone, flags and
 * every register kept, the register record and 8 bytes of memory, exact hits from 4 threads
 * across installs and removals, and the original bytes back after each removal. */
#include "arch/arch.h"
#include "rt/pad.h"

#include "tap.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#define GPR_ONLY __attribute__((target("general-regs-only")))

typedef long (*fn2)(long, long);
extern char pf_len1[], pf_len1_end[], pf_len2[], pf_len2_end[], pf_len3[], pf_len3_end[];
extern char pf_len4[], pf_len4_end[], pf_target[], pf_target_loop[], pf_target_end[];
extern char pf_riprel[], pf_riprel_end[], pf_redzone[], pf_redzone_at[], pf_redzone_end[];
extern char pf_flags[], pf_flags_at[], pf_flags_end[], pf_regs[], pf_regs_at[], pf_regs_end[];
extern uint64_t pf_global, pf_out[18], pf_xmm_in[32], pf_xmm_out[32];
long pf_len1_c(long, long) __asm__("pf_len1");
long pf_len2_c(long, long) __asm__("pf_len2");
long pf_len3_c(long, long) __asm__("pf_len3");
long pf_len4_c(long, long) __asm__("pf_len4");
long pf_target_c(long) __asm__("pf_target");
long pf_tiny_c(long, long) __asm__("pf_tiny");
extern char pf_tiny[], pf_tiny_end[], pf_tiny_pad[];
long pf_riprel_c(long) __asm__("pf_riprel");
long pf_redzone_c(long) __asm__("pf_redzone");
long pf_flags_c(long, long) __asm__("pf_flags");
extern char pf_df[], pf_df_at[], pf_df_end[];
long pf_df_c(long, long) __asm__("pf_df");
void pf_regs_c(void) __asm__("pf_regs");

/* What the callback collected last: the record, 8 bytes at the program's rsp (the pad's
 * stack pages) and 8 bytes of pf_global (a system call). */
static struct tp_rt_regs last;
static uint64_t last_stack, last_global;
static int last_err;

static GPR_ONLY void collect(const struct tp_rt_regs *r, void *ctx)
{
	uint64_t *n = ctx;

	last = *r;
	last_err = tp_rt_pad_read(r, r->rsp, &last_stack, 8) |
		   tp_rt_pad_read(r, (uint64_t)(uintptr_t)&pf_global, &last_global, 8);
	__atomic_fetch_add(n, 1, __ATOMIC_RELAXED);
}

static GPR_ONLY void count(const struct tp_rt_regs *r, void *ctx)
{
	__atomic_fetch_add((uint64_t *)ctx, 1, __ATOMIC_RELAXED);
}

/* For TP_RT_PAD_FPU pads: any C, here one that wrecks every xmm register. */
static void clobber_fpu(const struct tp_rt_regs *r, void *ctx)
{
	__asm__ volatile(
	    "pcmpeqd %%xmm0, %%xmm0\n\t"
	    "movdqa %%xmm0, %%xmm1\n\tmovdqa %%xmm0, %%xmm2\n\tmovdqa %%xmm0, %%xmm3\n\t"
	    "movdqa %%xmm0, %%xmm4\n\tmovdqa %%xmm0, %%xmm5\n\tmovdqa %%xmm0, %%xmm6\n\t"
	    "movdqa %%xmm0, %%xmm7\n\tmovdqa %%xmm0, %%xmm8\n\tmovdqa %%xmm0, %%xmm9\n\t"
	    "movdqa %%xmm0, %%xmm10\n\tmovdqa %%xmm0, %%xmm11\n\t"
	    "movdqa %%xmm0, %%xmm12\n\tmovdqa %%xmm0, %%xmm13\n\t"
	    "movdqa %%xmm0, %%xmm14\n\tmovdqa %%xmm0, %%xmm15" ::
		: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
		  "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
	collect(r, ctx);
}

static uint64_t a(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

static struct tp_rt_pad_where bounds(const void *lo, const void *hi)
{
	return (struct tp_rt_pad_where){.fn_lo = a(lo), .fn_hi = a(hi)};
}

static int insn_len(const void *p)
{
	struct tp_insn in;

	return tp_arch_decode(p, 16, a(p), &in) ? -1 : in.len;
}

/* Install at @at (function @lo..@hi), run @call, remove; the bytes must come back. */
static struct tp_rt_pad *install(const char *what, void *at, const void *lo, const void *hi,
				 unsigned flags, uint64_t *n)
{
	struct tp_rt_pad_where w = bounds(lo, hi);
	struct tp_rt_pad *p = NULL;
	int err = tp_rt_pad_install(a(at), flags & TP_RT_PAD_FPU ? clobber_fpu : collect, n, flags,
				    &w, &p);

	ok(!err && p, "%s: installed (%d)", what, err);
	return err ? NULL : p;
}

static void removed(const char *what, struct tp_rt_pad *p, const void *at, const uint8_t *orig)
{
	ok(p && !tp_rt_pad_remove(p), "%s: removed", what);
	ok(!memcmp(at, orig, 16), "%s: original bytes back", what);
}

static void test_lengths(void)
{
	struct {
		const char *name;
		char *at, *end;
		fn2 f;
		int len;
	} t[] = {
	    {"1-byte", pf_len1, pf_len1_end, pf_len1_c, 1},
	    {"2-byte", pf_len2, pf_len2_end, pf_len2_c, 2},
	    {"3-byte", pf_len3, pf_len3_end, pf_len3_c, 3},
	    {"4-byte", pf_len4, pf_len4_end, pf_len4_c, 4},
	};

	for (unsigned i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		uint8_t orig[16];
		uint64_t n = 0;
		long want = t[i].f(1000, 234), got;
		struct tp_rt_pad *p;

		is_int(insn_len(t[i].at), t[i].len, "%s: the first instruction's length",
		       t[i].name);
		memcpy(orig, t[i].at, 16);
		p = install(t[i].name, t[i].at, t[i].at, t[i].end, TP_RT_PAD_STOPPED, &n);
		if (!p)
			continue;
		is_int(tp_rt_pad_kind(p), TP_RT_PAD_KIND_JMP, "%s: a jmp to a pad", t[i].name);
		ok(t[i].at[0] == (char)0xe9, "%s: jmp rel32 at the site", t[i].name);
		got = t[i].f(1000, 234);
		is_int(got, want, "%s: same result", t[i].name);
		is_int(n, 1, "%s: one hit", t[i].name);
		is_int(last.rip, a(t[i].at), "%s: rip is the site", t[i].name);
		is_int(last.rdi, 1000, "%s: rdi", t[i].name);
		is_int(last.rsi, 234, "%s: rsi", t[i].name);
		removed(t[i].name, p, t[i].at, orig);
		is_int(t[i].f(1000, 234), want, "%s: same result after removal", t[i].name);
		is_int(n, 1, "%s: no hit after removal", t[i].name);
		/* with other threads possibly inside the bytes: the int3 path */
		p = install(t[i].name, t[i].at, t[i].at, t[i].end, 0, &n);
		if (!p)
			continue;
		is_int(tp_rt_pad_kind(p), TP_RT_PAD_KIND_INT3, "%s: int3 path when running",
		       t[i].name);
		is_int(tp_rt_pad_why(p), TP_RT_PAD_WHY_RUNNING, "%s: why", t[i].name);
		is_int(t[i].f(1000, 234), want, "%s: same result on the int3 path", t[i].name);
		is_int(n, 2, "%s: one more hit", t[i].name);
		is_int(last.rip, a(t[i].at), "%s: rip is the site", t[i].name);
		removed(t[i].name, p, t[i].at, orig);
	}
}

static void test_target(void)
{
	uint64_t targets[] = {a(pf_target_loop)}, n = 0;
	struct tp_rt_pad_where w = {.targets = targets, .ntargets = 1};
	struct tp_rt_pad *p;
	uint8_t orig[16];

	memcpy(orig, pf_target, 16);
	p = install("branch target", pf_target, pf_target, pf_target_end, 0, &n);
	if (p) {
		is_int(tp_rt_pad_kind(p), TP_RT_PAD_KIND_INT3, "branch target: int3 path");
		is_int(tp_rt_pad_why(p), TP_RT_PAD_WHY_TARGET, "branch target: found by the scan");
		is_int(pf_target_c(5), 15, "branch target: same result");
		is_int(n, 1, "branch target: one hit for a loop of 5");
		is_int(last.rip, a(pf_target), "branch target: rip is the site");
		removed("branch target", p, pf_target, orig);
	}
	/* no function bounds: the caller's list of targets */
	p = NULL;
	ok(!tp_rt_pad_install(a(pf_target), collect, &n, 0, &w, &p) && p,
	   "given target: installed");
	if (p) {
		is_int(tp_rt_pad_why(p), TP_RT_PAD_WHY_TARGET, "given target: int3 path");
		is_int(pf_target_c(3), 9, "given target: same result");
		is_int(n, 2, "given target: one more hit");
		removed("given target", p, pf_target, orig);
	}
}

/* A 4-byte function (lea, ret): a jmp over the padding after it, when the caller says where
 * the padding ends. */
static void test_padding(void)
{
	struct tp_rt_pad_where w = bounds(pf_tiny, pf_tiny_end);
	struct tp_rt_pad *p = NULL;
	uint8_t orig[16];
	uint64_t n = 0;

	/* (a site keeps the code it was first built with: without pad_hi it would have been
	 * the int3 path for good) */
	memcpy(orig, pf_tiny, 16);
	w.pad_hi = a(pf_tiny_pad);
	ok(!tp_rt_pad_install(a(pf_tiny), collect, &n, TP_RT_PAD_STOPPED, &w, &p) && p,
	   "tiny, padding: installed");
	if (p) {
		is_int(tp_rt_pad_kind(p), TP_RT_PAD_KIND_JMP, "tiny, padding: a jmp");
		ok(tp_rt_pad_covered(p) >= 5 && a(pf_tiny) + tp_rt_pad_covered(p) <= a(pf_tiny_pad),
		   "tiny, padding: the jmp covers the padding, not the next function");
		is_int(pf_tiny_c(1000, 234), 1234, "tiny, padding: same result");
		is_int(n, 1, "tiny, padding: one hit a call");
		is_int(last.rip, a(pf_tiny), "tiny, padding: rip is the site");
		removed("tiny, padding", p, pf_tiny, orig);
	}
}

static void test_riprel(void)
{
	uint8_t orig[16];
	uint64_t n = 0;

	memcpy(orig, pf_riprel, 16);
	for (unsigned flags = 0; flags <= TP_RT_PAD_TRAP; flags += TP_RT_PAD_TRAP) {
		const char *what = flags ? "rip-relative, int3" : "rip-relative";
		struct tp_rt_pad *p = install(what, pf_riprel, pf_riprel, pf_riprel_end, flags, &n);

		if (!p)
			continue;
		is_int(tp_rt_pad_kind(p), flags ? TP_RT_PAD_KIND_INT3 : TP_RT_PAD_KIND_JMP,
		       "%s: kind", what);
		pf_global = 0x100000 + flags;
		is_int(pf_riprel_c(7), 0x100007 + flags, "%s: the moved load reads the global",
		       what);
		is_int(last_global, 0x100000 + flags, "%s: 8 bytes of memory collected", what);
		ok(!last_err, "%s: reads succeeded", what);
		removed(what, p, pf_riprel, orig);
	}
	is_int(n, 2, "rip-relative: two hits");
}

static void test_redzone(void)
{
	long want = pf_redzone_c(1000);
	struct tp_rt_pad *p;
	uint8_t orig[16];
	uint64_t n = 0;

	is_int(want, 16 * 1000 + 120, "red zone: the leaf's result");
	memcpy(orig, pf_redzone_at, 16);
	p = install("red zone", pf_redzone_at, pf_redzone, pf_redzone_end, TP_RT_PAD_STOPPED, &n);
	if (!p)
		return;
	is_int(tp_rt_pad_kind(p), TP_RT_PAD_KIND_JMP, "red zone: a jmp to a pad");
	is_int(pf_redzone_c(1000), want, "red zone: same result with a pad in the middle");
	is_int(n, 1, "red zone: one hit");
	removed("red zone", p, pf_redzone_at, orig);
}

static void test_flags(void)
{
	long pairs[][2] = {{1, 2}, {2, 1}, {5, 5}, {-1, 1}, {INT64_MIN, 1}, {0, INT64_MIN}};
	long want[6];
	struct tp_rt_pad *p;
	uint8_t orig[16];
	uint64_t n = 0;
	int same = 1;

	for (int i = 0; i < 6; i++)
		want[i] = pf_flags_c(pairs[i][0], pairs[i][1]);
	memcpy(orig, pf_flags_at, 16);
	for (unsigned flags = 0; flags <= TP_RT_PAD_TRAP; flags += TP_RT_PAD_TRAP) {
		const char *what = flags ? "flags, int3" : "flags";

		p = install(what, pf_flags_at, pf_flags, pf_flags_end, flags | TP_RT_PAD_STOPPED,
			    &n);
		if (!p)
			continue;
		for (int i = 0; i < 6; i++) {
			long got = pf_flags_c(pairs[i][0], pairs[i][1]);

			same &= got == want[i] && (last.rflags & 0x8d5) == (uint64_t)want[i];
			if (got != want[i])
				printf("#   pair %d: flags %#lx, want %#lx\n", i, got, want[i]);
		}
		ok(same, "%s: the flags of cmp kept across the pad, and recorded", what);
		removed(what, p, pf_flags_at, orig);
	}
	is_int(n, 12, "flags: 12 hits");
}

/* A site entered with DF set: DF and the flags of cmp kept. */
static void test_df(void)
{
	long pairs[][2] = {{1, 2}, {2, 1}, {5, 5}, {INT64_MIN, 1}};
	struct tp_rt_pad *p;
	uint8_t orig[16];
	uint64_t n = 0;
	int same = 1;

	memcpy(orig, pf_df_at, 16);
	p = install("df", pf_df_at, pf_df, pf_df_end, TP_RT_PAD_STOPPED, &n);
	if (!p)
		return;
	for (int i = 0; i < 4; i++) {
		long got = pf_df_c(pairs[i][0], pairs[i][1]);

		same &= got == pf_flags_c(pairs[i][0], pairs[i][1]) + 0x400;
	}
	ok(same && n == 4, "df: DF and the flags of cmp kept across the pad");
	removed("df", p, pf_df_at, orig);
}

/* Every register the same after the pad as without it, and in the record. */
static void test_regs(void)
{
	static const char *names[] = {"rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp",
				      "r8",  "r9",  "r10", "r11", "r12", "r13", "r14", "r15"};
	uint64_t want[18], rec[18];
	uint8_t orig[16];
	uint64_t n = 0;

	for (int i = 0; i < 32; i++)
		pf_xmm_in[i] = 0x0123456789abcdefull * (uint64_t)(i + 1);
	pf_regs_c();
	memcpy(want, pf_out, sizeof(want));
	memcpy(orig, pf_regs_at, 16);
	ok((want[17] & 0x401) == 0x401, "regs: CF and DF set at the site");
	for (unsigned flags = 0; flags <= TP_RT_PAD_FPU; flags += TP_RT_PAD_FPU) {
		const char *what = flags ? "regs, xsave" : "regs";
		struct tp_rt_pad *p =
		    install(what, pf_regs_at, pf_regs, pf_regs_end, flags | TP_RT_PAD_STOPPED, &n);
		int bad = 0;

		if (!p)
			continue;
		is_int(tp_rt_pad_kind(p), TP_RT_PAD_KIND_JMP, "%s: a jmp to a pad", what);
		memset(pf_out, 0, 144);
		memset(pf_xmm_out, 0, 256);
		pf_regs_c();
		memcpy(rec, &last, sizeof(rec));
		for (int i = 0; i < 16; i++) {
			if (pf_out[i] != want[i] || rec[i] != want[i]) {
				printf("#   %s: %#lx after, %#lx in the record, want %#lx\n",
				       names[i], (unsigned long)pf_out[i], (unsigned long)rec[i],
				       (unsigned long)want[i]);
				bad++;
			}
		}
		ok(!bad, "%s: every general register kept and recorded", what);
		is_int(pf_out[17], want[17], "%s: flags kept", what);
		is_int(last.rflags & 0xcd5, want[17] & 0xcd5, "%s: flags recorded", what);
		is_int(last.rip, a(pf_regs_at), "%s: rip recorded", what);
		is_int(last_stack, 0x5a5a5a5a, "%s: 8 bytes at the program's rsp collected", what);
		ok(!memcmp(pf_xmm_out, pf_xmm_in, 256), "%s: xmm0-15 kept", what);
		removed(what, p, pf_regs_at, orig);
	}
	is_int(n, 2, "regs: two hits");
}

/* ---- 4 threads ---- */

#define THREADS 4
#define CHURN 300
static pthread_barrier_t barrier;
static volatile int churn_stop;
static unsigned long churn_calls[THREADS], churn_bad[THREADS];

static void *phases(void *arg)
{
	long id = (long)arg;

	for (int cycle = 0; cycle < 20; cycle++) {
		pthread_barrier_wait(&barrier); /* installed */
		for (long i = 0; i < 5000; i++)
			if (pf_len1_c(id, i) != id + i)
				churn_bad[id]++;
		pthread_barrier_wait(&barrier); /* done: the main thread removes it */
		pthread_barrier_wait(&barrier); /* removed */
		for (long i = 0; i < 5000; i++)
			if (pf_len1_c(id, i) != id + i)
				churn_bad[id]++;
		pthread_barrier_wait(&barrier);
	}
	return NULL;
}

static void *churn(void *arg)
{
	long id = (long)arg;

	for (long i = 0; !__atomic_load_n(&churn_stop, __ATOMIC_RELAXED); i++) {
		if (pf_len1_c(id, i) != id + i || pf_riprel_c(i) != (long)pf_global + i)
			churn_bad[id]++;
		churn_calls[id]++;
	}
	return NULL;
}

static void test_threads(void)
{
	pthread_t t[THREADS];
	struct tp_rt_pad_where w = bounds(pf_len1, pf_len1_end);
	struct tp_rt_pad *p = NULL, *p2 = NULL;
	uint8_t orig[16], orig2[16];
	unsigned long calls = 0, bad = 0;
	uint64_t n = 0, n2 = 0, before;
	int errs = 0, diff = 0, jmps = 0, traps = 0;

	memcpy(orig, pf_len1, 16);
	memcpy(orig2, pf_riprel, 16);
	pthread_barrier_init(&barrier, NULL, THREADS + 1);
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, phases, (void *)i);
	for (int cycle = 0; cycle < 20; cycle++) {
		/* the threads wait at the barrier, outside pf_len1: */
		errs += !!tp_rt_pad_install(a(pf_len1), collect, &n, TP_RT_PAD_STOPPED, &w, &p);
		jmps += tp_rt_pad_kind(p) == TP_RT_PAD_KIND_JMP;
		pthread_barrier_wait(&barrier);
		pthread_barrier_wait(&barrier);
		errs += !!tp_rt_pad_remove(p);
		diff += !!memcmp(pf_len1, orig, 16);
		pthread_barrier_wait(&barrier);
		pthread_barrier_wait(&barrier);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	ok(!errs, "threads: 20 installs and removals");
	is_int(jmps, 20, "threads: each time a jmp to the pad");
	is_int(n, 20 * THREADS * 5000, "threads: hits exact (20 cycles x 4 threads x 5000 calls)");
	ok(!diff, "threads: original bytes back after every removal");

	/* no barriers: installs and removals while 4 threads run through the bytes */
	before = n;
	errs = diff = jmps = 0;
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, churn, (void *)i);
	for (int cycle = 0; cycle < CHURN; cycle++) {
		struct tp_rt_pad_where w2 = bounds(pf_riprel, pf_riprel_end);

		errs += !!tp_rt_pad_install(a(pf_len1), count, &n, 0, &w, &p);
		traps += tp_rt_pad_kind(p) == TP_RT_PAD_KIND_INT3;
		if (cycle % 3 == 0) {
			errs += !!tp_rt_pad_install(a(pf_riprel), count, &n2, 0, &w2, &p2);
			jmps += tp_rt_pad_kind(p2) == TP_RT_PAD_KIND_JMP;
		}
		usleep(200);
		errs += !!tp_rt_pad_remove(p);
		if (cycle % 3 == 0)
			errs += !!tp_rt_pad_remove(p2);
		diff += !!memcmp(pf_len1, orig, 16) + !!memcmp(pf_riprel, orig2, 16);
	}
	__atomic_store_n(&churn_stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		calls += churn_calls[i];
	}
	for (int i = 0; i < THREADS; i++)
		bad += churn_bad[i];
	ok(!errs, "churn: %d installs and removals while 4 threads run", CHURN);
	is_int(bad, 0, "churn: every call's result right (%lu calls)", calls);
	ok(n > before && n - before <= calls, "churn: hits (%lu) within the calls made",
	   (unsigned long)(n - before));
	ok(!diff, "churn: original bytes back after every removal");
	is_int(traps, CHURN, "churn: pf_len1 (several instructions) on the int3 path");
	is_int(jmps, (CHURN + 2) / 3, "churn: pf_riprel (one 7-byte instruction) a jmp");
	ok(n2 > 0 && n2 <= calls, "churn: pad hits (%lu) within the calls made", (unsigned long)n2);
}

static void test_errors(void)
{
	struct tp_rt_pad_where w = bounds(pf_len3, pf_len3_end);
	struct tp_rt_pad *p = NULL, *q = NULL;
	uint64_t n = 0;

	ok(!tp_rt_pad_install(a(pf_len3), collect, &n, TP_RT_PAD_STOPPED, &w, &p), "errors: a pad");
	is_int(tp_rt_pad_install(a(pf_len3), collect, &n, 0, &w, &q), -EEXIST,
	       "errors: a second pad at the same address");
	is_int(tp_rt_pad_install(a(pf_len3) + 3, collect, &n, 0, &w, &q), -EEXIST,
	       "errors: a pad inside the bytes of another");
	ok(p && !tp_rt_pad_remove(p), "errors: removed");
	is_int(tp_rt_pad_install(a(pf_len3), NULL, &n, 0, &w, &q), -EINVAL, "errors: no callback");
}

int main(void)
{
	test_lengths();
	test_target();
	test_padding();
	test_riprel();
	test_redzone();
	test_flags();
	test_df();
	test_regs();
	test_errors();
	test_threads();
	return tap_done();
}
