/* The ABI facts of arch/arch.h: register set-up of injected syscalls and calls, the
 * syscall-restart rule, and the loader's r_debug/link_map offsets that tracers read. */
#include <errno.h>
#include <string.h>

#include "arch/arch.h"
#include "tap.h"

static void test_syscall(void)
{
	const uint64_t args[6] = {1, 2, 3, 4, 5, 6};
	struct user_regs_struct r;

	memset(&r, 0xab, sizeof(r));
	tp_arch_regs_set_syscall(&r, SYS_getpid, args);
	ok(r.rax == SYS_getpid && r.rdi == 1 && r.rsi == 2 && r.rdx == 3 && r.r10 == 4 &&
	       r.r8 == 5 && r.r9 == 6,
	   "syscall: rax, then rdi rsi rdx r10 r8 r9");
	is_int((int64_t)r.orig_rax, -1, "syscall: no restart of what the thread was in");

	memset(&r, 0, sizeof(r));
	tp_arch_regs_set_call(&r, 0x401000, 0x7ffc0000fff8ull, args);
	ok(r.rip == 0x401000 && r.rsp == 0x7ffc0000fff8ull && r.rdi == 1 && r.rsi == 2 &&
	       r.rdx == 3 && r.rcx == 4 && r.r8 == 5 && r.r9 == 6 && r.rax == 0,
	   "call: rdi rsi rdx rcx r8 r9, rax = 0");
	is_int(tp_arch_call_sp(0x7ffc00010000ull, 0), 0x7ffc00010000ull - 128 - 8,
	       "call sp: below the red zone, (sp + 8) aligned");
	is_int((tp_arch_call_sp(0x7ffc00010007ull, 100) + 8) % 16, 0, "call sp: aligned");
}

static void test_restart(void)
{
	static const int64_t codes[] = {-512, -513, -514, -516};
	struct user_regs_struct r;

	for (unsigned i = 0; i < 4; i++)
		ok(tp_arch_syscall_restarts(codes[i]), "%lld restarts", (long long)codes[i]);
	ok(!tp_arch_syscall_restarts(-EINTR), "-EINTR does not");

	memset(&r, 0, sizeof(r));
	r.rax = (uint64_t)-TP_ARCH_ERESTARTSYS;
	r.orig_rax = SYS_read;
	r.rip = 0x401002;
	is_int(tp_arch_regs_restart_syscall(&r), 0, "ERESTARTSYS: restarted");
	ok(r.rax == SYS_read && r.rip == 0x401000, "ERESTARTSYS: rax = nr, rip back over syscall");

	r.rax = (uint64_t)-TP_ARCH_ERESTART_RESTARTBLOCK;
	r.orig_rax = SYS_nanosleep;
	r.rip = 0x401002;
	is_int(tp_arch_regs_restart_syscall(&r), 0, "ERESTART_RESTARTBLOCK: restarted");
	is_int(r.rax, SYS_restart_syscall, "ERESTART_RESTARTBLOCK: as restart_syscall");

	r.rax = (uint64_t)-EINTR;
	r.rip = 0x401002;
	is_int(tp_arch_regs_restart_syscall(&r), -1, "-EINTR: left alone");
	r.rax = (uint64_t)-TP_ARCH_ERESTARTSYS;
	r.orig_rax = (uint64_t)-1;
	is_int(tp_arch_regs_restart_syscall(&r), -1, "not in a syscall: left alone");
	is_int(r.rip, 0x401002, "not in a syscall: rip unchanged");
}

static void test_rdebug(void)
{
	/* The values the calls engine reads today as literals (rdebug + 16, + 24). */
	is_int(TP_ARCH_R_DEBUG_MAP, 8, "r_debug.r_map at 8");
	is_int(TP_ARCH_R_DEBUG_BRK, 16, "r_debug.r_brk at 16");
	is_int(TP_ARCH_R_DEBUG_STATE, 24, "r_debug.r_state at 24");
	is_int(TP_ARCH_LINK_MAP_NAME, 8, "link_map.l_name at 8");
	is_int(TP_ARCH_LINK_MAP_NEXT, 24, "link_map.l_next at 24");
}

int main(void)
{
	test_syscall();
	test_restart();
	test_rdebug();
	return tap_done();
}
