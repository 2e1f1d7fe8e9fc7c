/* src/rt: safe memory access, the near-code allocator, the patcher (N bytes, batches, the
 * byte check, no descriptor kept across batches) and the SIGTRAP dispatcher (clients in
 * order, chaining to the program's handler, taking SIGTRAP back). */
#include "arch/arch.h"
#include "rt/rt.h"

#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- helpers ---- */

/* The permissions of the mapping holding @addr in /proc/self/maps ("r-xp"), or "". */
static const char *perms_of(uint64_t addr)
{
	static char perms[8];
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");

	perms[0] = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char p[8];

		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, p) == 3 && addr >= lo && addr < hi) {
			strcpy(perms, p);
			break;
		}
	}
	if (f)
		fclose(f);
	return perms;
}

static uint64_t dist(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

typedef int (*int_fn)(void);

/* "mov eax, imm32; ret" padded with int3 to @len bytes. */
static void ret_code(uint8_t *out, size_t len, int value)
{
	memset(out, TP_ARCH_INT3, len);
	out[0] = 0xb8;
	memcpy(out + 1, &value, 4);
	out[5] = 0xc3;
}

/* ---- memory ---- */

static void test_mem(void)
{
	char buf[64], page_end_str[] = "abc";
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t x = 0x1122334455667788ull, y = 0;
	char *two;

	is_int(tp_rt_mem_read((uint64_t)(uintptr_t)&x, &y, 8), 0, "mem: read");
	ok(y == x, "mem: read the value");
	is_int(tp_rt_mem_read(0, &y, 8), -EFAULT, "mem: NULL read is -EFAULT, no fault");
	is_int(tp_rt_mem_write(0, &y, 8), -EFAULT, "mem: NULL write is -EFAULT");
	is_int(tp_rt_mem_strcpy((uint64_t)(uintptr_t) "hello", buf, sizeof(buf)), 5, "strcpy: 5");
	is_str(buf, "hello", "strcpy: the text");
	is_int(tp_rt_mem_strcpy((uint64_t)(uintptr_t) "hello", buf, 3), 2, "strcpy: cut at cap");
	is_str(buf, "he", "strcpy: cut text");
	is_int(tp_rt_mem_strcpy(16, buf, sizeof(buf)), -EFAULT, "strcpy: bad pointer");
	/* a string that ends on the last bytes of a page followed by an unmapped one */
	two =
	    mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(two + pg, (size_t)pg);
	memcpy(two + pg - sizeof(page_end_str), page_end_str, sizeof(page_end_str));
	is_int(tp_rt_mem_strcpy((uint64_t)(uintptr_t)(two + pg - 4), buf, sizeof(buf)), 3,
	       "strcpy: a string at a page's end");
	memset(two + pg - 4, 'x', 4);
	is_int(tp_rt_mem_strcpy((uint64_t)(uintptr_t)(two + pg - 4), buf, sizeof(buf)), -EFAULT,
	       "strcpy: running into an unmapped page is -EFAULT");
	munmap(two, (size_t)pg);
}

/* ---- near-code allocator ---- */

static uint64_t near_fn(uint64_t near, int value)
{
	uint8_t code[16];
	uint64_t p = tp_rt_near_alloc(near, sizeof(code));

	if (!p)
		return 0;
	ret_code(code, sizeof(code), value);
	return tp_rt_near_write(p, code, sizeof(code)) ? 0 : p;
}

static void test_near(void)
{
	uint64_t here = (uint64_t)(uintptr_t)&test_near;
	uint64_t libc = (uint64_t)(uintptr_t)&getpid;
	uint64_t a = near_fn(here, 42), b = near_fn(here, 43), c = near_fn(libc, 44);

	ok(a && b && c, "near: three allocations");
	ok(dist(a, here) < (1ull << 31) && dist(b, here) < (1ull << 31), "near: in rel32 reach");
	ok(dist(c, libc) < (1ull << 31), "near: in rel32 reach of libc");
	ok(b >= a + 16 || a >= b + 16, "near: allocations do not overlap");
	is_str(perms_of(a), "r-xp", "near: the arena is r-x, never writable");
	is_int(((int_fn)(uintptr_t)a)(), 42, "near: written code runs");
	is_int(((int_fn)(uintptr_t)b)(), 43, "near: second allocation runs");
	is_int(((int_fn)(uintptr_t)c)(), 44, "near: allocation near libc runs");
	ok(tp_rt_near_contains(a) && !tp_rt_near_contains(here), "near: contains");
	is_int(tp_rt_near_alloc(here, 5000), 0, "near: more than a page is refused");
}

/* ---- patcher ---- */

static void test_patch(void)
{
	uint64_t here = (uint64_t)(uintptr_t)&test_patch;
	uint8_t code[32], now[32], want[32];
	uint64_t f = tp_rt_near_alloc(here, 32), g = tp_rt_near_alloc(here, 32);
	uint64_t h = tp_rt_near_alloc(here, 32);

	ret_code(code, 32, 1);
	tp_rt_near_write(f, code, 32);
	tp_rt_near_write(g, code, 32);
	tp_rt_near_write(h, code, 32);

	/* N bytes: 6 bytes at once, the int3 protocol ending in the new instruction pair */
	ret_code(want, 32, 2);
	is_int(tp_rt_patch(f, code, want, 6, f), 0, "patch: 6 bytes");
	is_int(((int_fn)(uintptr_t)f)(), 2, "patch: the new code runs");
	memcpy(now, (void *)(uintptr_t)f, 6);
	ok(!memcmp(now, want, 6), "patch: bytes read back");
	is_str(perms_of(f), "r-xp", "patch: the page stayed r-x");

	/* byte check: a patch whose expected bytes are not there is refused, nothing written */
	ret_code(want, 32, 3);
	is_int(tp_rt_patch(f, code, want, 6, f), -EILSEQ, "patch: wrong expected bytes refused");
	is_int(((int_fn)(uintptr_t)f)(), 2, "patch: refused patch left the code alone");

	/* a batch of three patches of 1, 5 and 6 bytes, the middle one refused */
	struct tp_rt_patch b[3] = {0};
	uint8_t ret1 = 0xc3;

	b[0].addr = f + 5; /* the ret: becomes int3 (dest 0: not the patcher's trap) */
	b[0].len = 1;
	b[0].from[0] = 0xc3;
	b[0].to[0] = TP_ARCH_INT3;
	b[1].addr = g;
	b[1].len = 5;
	memcpy(b[1].from, want, 5); /* wrong: g holds "mov eax, 1" */
	memcpy(b[1].to, want, 5);
	b[1].dest = g;
	b[2].addr = h;
	b[2].len = 6;
	memcpy(b[2].from, code, 6);
	ret_code(want, 32, 7);
	memcpy(b[2].to, want, 6);
	b[2].dest = h;
	is_int(tp_rt_patch_batch(b, 3), -EILSEQ, "batch: the refused entry's error returned");
	is_int(b[0].err, 0, "batch: 1-byte patch applied");
	is_int(b[1].err, -EILSEQ, "batch: mismatching entry refused");
	is_int(b[2].err, 0, "batch: 6-byte patch applied");
	is_int(*(volatile uint8_t *)(uintptr_t)(f + 5), TP_ARCH_INT3, "batch: int3 in place");
	is_int(((int_fn)(uintptr_t)g)(), 1, "batch: refused entry untouched");
	is_int(((int_fn)(uintptr_t)h)(), 7, "batch: applied entry runs");
	is_int(tp_rt_patch(f + 5, &b[0].to, &ret1, 1, f + 5), 0, "patch: int3 lifted again");
	is_int(((int_fn)(uintptr_t)f)(), 2, "patch: code runs after the int3 is lifted");
	is_int(tp_rt_patch(f, code, code, 0, f), -EINVAL, "patch: zero length refused");
	is_int(tp_rt_patch(f, code, code, 17, f), -EINVAL, "patch: too long refused");

	/* issue 14: a program that closes every descriptor and opens its data file must not
	 * receive the patcher's writes (the file gets the lowest free number) */
	for (int fd = 3; fd < 1024; fd++)
		close(fd);
	int data = (int)syscall(SYS_memfd_create, "data", 0);
	struct stat st;

	ok(data == 3, "fd reuse: the data file got descriptor 3");
	ok(write(data, "data", 4) == 4, "fd reuse: data written");
	ret_code(want, 32, 9);
	ret_code(code, 32, 7);
	is_int(tp_rt_patch(h, code, want, 6, h), 0, "fd reuse: patch after the close-all");
	is_int(((int_fn)(uintptr_t)h)(), 9, "fd reuse: the patch took effect");
	ok(!fstat(data, &st) && st.st_size == 4,
	   "fd reuse: the data file is untouched (%lld bytes)", (long long)st.st_size);
	ok(pread(data, now, 4, 0) == 4 && !memcmp(now, "data", 4), "fd reuse: its bytes too");
	ok(fcntl(4, F_GETFD) < 0, "fd reuse: no descriptor left open by the patcher");
	close(data);
}

/* ---- dispatcher ---- */

static int program_traps, client_a, client_b;
static uint64_t claim_at;

static void program_handler(int sig)
{
	program_traps++;
}

static int on_a(siginfo_t *si, ucontext_t *uc, void *ctx)
{
	client_a++;
	return (uint64_t)uc->uc_mcontext.gregs[REG_RIP] - 1 == claim_at;
}

static int on_b(siginfo_t *si, ucontext_t *uc, void *ctx)
{
	client_b++;
	return *(int *)ctx;
}

static void trap_at_label(void)
{
	__asm__ volatile("int3");
}

static void test_dispatch(void)
{
	struct sigaction sa;
	int b_claims = 0;
	uint64_t f = tp_rt_near_alloc((uint64_t)(uintptr_t)&test_dispatch, 16);
	uint8_t code[16] = {TP_ARCH_INT3, 0xb8, 5, 0, 0, 0, 0xc3};

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = program_handler;
	sigaction(SIGTRAP, &sa, NULL);
	is_int(tp_rt_trap_chain(), 0, "dispatch: installed in front of the program's handler");
	is_int(tp_rt_trap_register(on_a, NULL), 0, "dispatch: client a");
	is_int(tp_rt_trap_register(on_b, &b_claims), 0, "dispatch: client b");

	tp_rt_near_write(f, code, sizeof(code));
	claim_at = f;
	is_int(((int_fn)(uintptr_t)f)(), 5, "dispatch: an int3 client a claims resumes after it");
	ok(client_a == 1 && client_b == 0 && program_traps == 0,
	   "dispatch: the first client that claims ends the round (a %d, b %d, program %d)",
	   client_a, client_b, program_traps);

	trap_at_label();
	ok(client_a == 2 && client_b == 1 && program_traps == 1,
	   "dispatch: a trap no client claims reaches the program's handler (a %d b %d p %d)",
	   client_a, client_b, program_traps);
	b_claims = 1;
	raise(SIGTRAP);
	ok(client_b == 2 && program_traps == 1, "dispatch: client b claims a raised SIGTRAP");
	b_claims = 0;

	/* the program installs another handler: the next chain call takes SIGTRAP back */
	sigaction(SIGTRAP, &sa, NULL);
	trap_at_label();
	ok(program_traps == 2 && client_a == 3, "dispatch: bypassed while the program owns it");
	is_int(tp_rt_trap_chain(), 0, "dispatch: taken back");
	trap_at_label();
	ok(program_traps == 3 && client_a == 4, "dispatch: in front again, chaining to it");

	tp_rt_trap_unregister(on_a, NULL);
	tp_rt_trap_unregister(on_b, &b_claims);
	trap_at_label();
	ok(program_traps == 4 && client_a == 4 && client_b == 3, "dispatch: unregistered clients "
								 "are not asked");
	for (int i = 0; i < TP_RT_TRAP_CLIENTS; i++)
		tp_rt_trap_register(on_b, &b_claims);
	is_int(tp_rt_trap_register(on_a, NULL), -ENOSPC, "dispatch: a full table says -ENOSPC");
}

int main(void)
{
	test_mem();
	test_near();
	test_patch();
	test_dispatch();
	return tap_done();
}
