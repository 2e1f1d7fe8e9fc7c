/* src/rt: the in-process runtime shared by code that runs inside traced programs (the agent,
 * libtracepad, and the code cache, jump pads and hooks to come).  Nothing in-process writes
 * code or owns SIGTRAP except through here.  Everything is async-signal-safe: raw syscalls,
 * no malloc, no libc locks; errors are -errno. */
#ifndef TP_RT_RT_H
#define TP_RT_RT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <ucontext.h>

#define TP_RT_HIDDEN __attribute__((visibility("hidden")))
#define TP_RT_EFLAGS_TF 0x100ull

/* ---- memory (mem.c) ---- */

/* Read or write the process's own memory without faulting: -EFAULT instead of SIGSEGV. */
int tp_rt_mem_read(uint64_t addr, void *buf, size_t len) TP_RT_HIDDEN;
int tp_rt_mem_write(uint64_t addr, const void *buf, size_t len) TP_RT_HIDDEN;
/* Copy the NUL-terminated string at @addr into @buf (at most @cap - 1 bytes, then a NUL,
 * a longer string is cut); returns its length in @buf or -EFAULT. */
long tp_rt_mem_strcpy(uint64_t addr, char *buf, size_t cap) TP_RT_HIDDEN;
/* Guarded reads without a system call: a plain copy whose SIGSEGV/SIGBUS the guard turns
 * into -EFAULT (its handler, installed with raw rt_sigaction, passes any other fault on to
 * the program's action).  tp_rt_mem_read_fast copies under the guard once it is installed,
 * else calls tp_rt_mem_read.  Install and remove with the program's other threads stopped
 * or not yet reading. */
int tp_rt_mem_guard_install(void) TP_RT_HIDDEN;
void tp_rt_mem_guard_remove(void) TP_RT_HIDDEN;
int tp_rt_mem_read_fast(uint64_t addr, void *buf, size_t len) TP_RT_HIDDEN;

/* Writes into code that may be mapped without write permission, through /proc/self/mem.
 * The descriptor is opened by tp_rt_code_open and closed by tp_rt_code_close, never kept
 * between uses: a program that closes every fd and opens its own files must not receive
 * our writes.  A failed open leaves fd -1: writes then fall back to mprotect. */
struct tp_rt_code {
	int fd;
};
void tp_rt_code_open(struct tp_rt_code *c) TP_RT_HIDDEN;
int tp_rt_code_write(struct tp_rt_code *c, uint64_t addr, const void *buf, size_t len) TP_RT_HIDDEN;
void tp_rt_code_close(struct tp_rt_code *c) TP_RT_HIDDEN;

/* ---- near-code allocator (near.c) ---- */

/* @size bytes (up to 4096, 16-aligned) of executable memory within rel32 reach of @near,
 * for out-of-line copies and pads; 0 when none can be had.  The memory is never writable
 * while code on it may run: fill it once with tp_rt_near_write, then publish its address. */
uint64_t tp_rt_near_alloc(uint64_t near, size_t size) TP_RT_HIDDEN;
int tp_rt_near_write(uint64_t at, const void *code, size_t len) TP_RT_HIDDEN;
/* 1 when @pc is inside memory of the allocator. */
int tp_rt_near_contains(uint64_t pc) TP_RT_HIDDEN;

/* ---- the patcher (patch.c) ---- */

#define TP_RT_PATCH_MAX 16
/* One live code patch: @len bytes at @addr go from @from to @to, on an instruction boundary
 * (the caller checked it).  A thread that meets the temporary int3 on the first byte goes
 * on at @dest; @dest 0 leaves that trap to another client of the dispatcher (an int3 that
 * is the patch's final byte and whose owner handles it).  @err: the outcome. */
struct tp_rt_patch {
	uint64_t addr, dest;
	uint8_t from[TP_RT_PATCH_MAX], to[TP_RT_PATCH_MAX];
	uint8_t len;
	int err; /* 0, -EILSEQ (the bytes were not @from: nothing written, or put back), -errno */
};

/* Apply @n patches with the int3 protocol (the kernel's text_poke_bp): int3 on every first
 * byte, sync cores, every tail, sync, every first byte, sync; one membarrier SYNC_CORE a step
 * for the whole batch.  Every step checks the bytes it replaces.  Returns 0 when every patch
 * applied, else the first entry's error (the others are still applied).  Patches must not
 * overlap; callers serialise batches (-EBUSY otherwise). */
int tp_rt_patch_batch(struct tp_rt_patch *p, size_t n) TP_RT_HIDDEN;
/* One patch of @len bytes. */
int tp_rt_patch(uint64_t addr, const void *from, const void *to, size_t len,
		uint64_t dest) TP_RT_HIDDEN;
/* Testing: sleep between the steps; threads sent on their way by the trap client. */
void tp_rt_patch_set_delay(unsigned usec) TP_RT_HIDDEN;
unsigned long tp_rt_patch_traps(void) TP_RT_HIDDEN;

/* ---- the SIGTRAP dispatcher (trap.c) ---- */

/* A client returns 1 when the trap was its own (it may change @uc to resume elsewhere), 0
 * to pass it on.  Clients are asked in the order they registered. */
typedef int (*tp_rt_trap_fn)(siginfo_t *si, ucontext_t *uc, void *ctx);
#define TP_RT_TRAP_CLIENTS 8
int tp_rt_trap_register(tp_rt_trap_fn fn, void *ctx) TP_RT_HIDDEN;
void tp_rt_trap_unregister(tp_rt_trap_fn fn, void *ctx) TP_RT_HIDDEN;

/* How the dispatcher holds SIGTRAP:
 * - owner (the agent): installed with rt_sigaction, every other signal blocked while it
 *   runs, SA_NODEFER; traps no client claims go to @foreign (the signal virtualisation,
 *   which runs what the program installed).
 * - chained (libtracepad): installed with the program's own sigaction(), so that an agent
 *   present virtualises it; traps no client claims go to the action found before it.  Each
 *   call checks that the program did not replace it since, and takes SIGTRAP back if so. */
typedef void (*tp_rt_trap_foreign_fn)(int sig, siginfo_t *si, ucontext_t *uc);
int tp_rt_trap_own(tp_rt_trap_foreign_fn foreign) TP_RT_HIDDEN;
int tp_rt_trap_chain(void) TP_RT_HIDDEN;
/* The handler the dispatcher installs (so that the virtualisation knows it), and its
 * restorer in owner mode. */
void tp_rt_trap_handler(int sig, siginfo_t *si, void *uc) TP_RT_HIDDEN;
void tp_rt_restore_rt(void) TP_RT_HIDDEN;

/* ---- signal virtualisation (signals.c, wrap.c, sigentry.S) ---- */

/* The kernel's struct sigaction (8-byte mask). */
struct tp_ksigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	uint64_t mask;
};
#define TP_SA_RESTORER 0x04000000ul

static inline uint64_t tp_sigbit(int sig)
{
	return 1ull << (sig - 1);
}

/* What the host (the agent's stepper) tells the virtualisation. */
struct tp_rt_sig_host {
	/* The calling thread is stepped with TF and counted (@uc: where it was interrupted). */
	int (*stepped)(const ucontext_t *uc);
	/* A program handler is about to run stepped for a signal that interrupted @uc. */
	void (*handler_enter)(const ucontext_t *uc);
	/* Run the program's SIGTRAP handler @h, stepped, for a trap that no client claimed. */
	void (*trap_handler)(void *h, int sig, siginfo_t *si, ucontext_t *uc);
	/* A trap that no client claimed gets the program's default action, which ends it: the
	 * host may record what it was first (NULL: nothing to do). */
	void (*trap_fatal)(const siginfo_t *si, const ucontext_t *uc);
	/* For the interposed libc function @which (TP_RT_WRAP_*): 0 pass through to libc, 1
	 * the thread is not stepped (keep SIGTRAP ours), 2 stepped (run libc's with TF set). */
	int (*route)(int which);
};
enum {
	TP_RT_WRAP_SIGACTION,
	TP_RT_WRAP_SIGNAL,
	TP_RT_WRAP_SIGPROCMASK,
	TP_RT_WRAP_PTHREAD_SIGMASK,
};

/* Take every signal's action as the program's, and put the virtualisation's entry in front
 * of its handlers; the host's SIGTRAP owner is tp_rt_trap_own(). */
int tp_rt_sig_init(const struct tp_rt_sig_host *host) TP_RT_HIDDEN;
/* Give the program's handlers back to the kernel (an agent detaching); SIGTRAP stays with
 * the dispatcher, which passes on every trap that is not a client's.  tp_rt_sig_init()
 * takes over again. */
void tp_rt_sig_fini(void) TP_RT_HIDDEN;
/* The emulated syscalls of a stepped thread, from its SIGTRAP at the syscall instruction. */
long tp_rt_sig_emulate_sigaction(ucontext_t *uc) TP_RT_HIDDEN;
long tp_rt_sig_emulate_sigprocmask(ucontext_t *uc) TP_RT_HIDDEN;
/* A SIGTRAP that no client claimed: the program's own disposition applies. */
void tp_rt_sig_foreign_trap(int sig, siginfo_t *si, ucontext_t *uc) TP_RT_HIDDEN;
/* The program's idea of @sig's action; returns 0 when unknown. */
int tp_rt_sig_virtual(int sig, struct tp_ksigaction *out) TP_RT_HIDDEN;
/* libc changed @sig's action for real: take it as the program's, and put ours back. */
void tp_rt_sig_refresh(int sig) TP_RT_HIDDEN;
/* The interposed libc functions (wrap.c; the host exports the symbols, whose code calls
 * tp_rt_wrap_route): resolve libc's functions, and say who routes them. */
void tp_rt_wrap_init(const struct tp_rt_sig_host *host) TP_RT_HIDDEN;

/* sigentry.S */
void tp_rt_sig_entry(int, siginfo_t *, void *) TP_RT_HIDDEN;
void tp_rt_noop_handler(int) TP_RT_HIDDEN;
void tp_rt_call_handler_tf(void *handler, int sig, siginfo_t *si, void *uc) TP_RT_HIDDEN;

#endif
