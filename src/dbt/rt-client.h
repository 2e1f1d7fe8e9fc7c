/* The client interface of the code-cache runtime: what a tool built into the runtime (the
 * instruction counter, rt-count.c; later calls, memory accesses, tracepoints, one file each)
 * sees of the program, at translation time and at run time.  Every callback runs in the
 * runtime's C code, under its lock, with signals deferred: no libc, raw syscalls only.
 *
 * Translation.  For each block, block_begin, then for each instruction insn (before its
 * copy; for a non-branch instruction also after it, for an indirect branch before its
 * lookup), then block_end with the finished
 * bytes.  A callback emits inline code through the arch writer @w (it must keep every
 * register and, unless it knows them dead, the arithmetic flags; the red zone below the
 * program's rsp is the program's), or a call into its own C code with
 * tp_dbt_client_put_call(), which saves everything and runs its call callback with the
 * program's registers.  Nothing is emitted per executed instruction unless a client does.
 *
 * Run time.  thread_new (a thread block is made: @parent is the creating thread, NULL for
 * the first), flush (the thread's results must reach tracepad now: it exits, or the
 * process exits or execs; also called for threads other than the caller's at exit_group),
 * signal (a handler is entered, and its sigreturn), module_load (the first translation in
 * an executable mapping, found in /proc/self/maps) and module_unload (munmap, mremap or
 * mprotect of a range holding one), process_exit (exit_group, execve), vfork (a vfork child
 * runs on its parent thread's block meanwhile). */
#ifndef TP_DBT_RT_CLIENT_H
#define TP_DBT_RT_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <ucontext.h>

#include "arch/arch.h"
#include "dbt/rt-priv.h"

/* The gate reason of a client's call (tp_dbt_client_put_call): this bit, the client's
 * index in bits 16..23 and its own 16-bit argument below. */
#define TP_DBT_GATE_CLIENT 0x40000000

/* What insn() is told: where the writer is, relative to the instruction's copy. */
enum tp_dbt_client_where {
	TP_DBT_CL_BEFORE,
	TP_DBT_CL_AFTER,
	/* an indirect branch, before its lookup: rax holds the program's target (its rax
	 * is in gs:RAX), rsp is what the target will see */
	TP_DBT_CL_BRANCH
};

/* signal(): entering a handler (@si set), or its sigreturn (@si NULL, @uc the context that
 * is restored, its rip the cache address resumed at). */
struct tp_dbt_client {
	const char *name;
	/* bytes of per-thread data, reached at %gs:tls_off (set by the runtime) */
	size_t tls_size;
	uint64_t tls_off;
	int (*init)(struct tp_dbt_client *cl);
	void (*block_begin)(uint64_t pc, struct tp_arch_writer *w);
	/* @b: the instruction's bytes */
	void (*insn)(uint64_t pc, const uint8_t *b, const struct tp_insn *in,
		     struct tp_arch_writer *w, enum tp_dbt_client_where where);
	/* @buf, @len: the block's code, at @cache once written; -errno drops the block */
	void (*block_end)(uint64_t pc, uint64_t end, uint8_t *buf, size_t len);
	/* does a block have to begin at @pc (a call at its start, say)? */
	int (*block_at)(uint64_t pc);
	/* tp_dbt_client_put_call(): returns where to go on (@back: after the call) */
	uint64_t (*call)(struct tp_dbt_thread *t, uint32_t arg, uint64_t back,
			 struct tp_dbt_frame *f);
	void (*thread_new)(struct tp_dbt_thread *t, struct tp_dbt_thread *parent);
	/* @t vforks (@done 0): its child runs on @t's block until it execs or exits (@done
	 * 1, in the child), and what the child ran is not @t's */
	void (*vfork)(struct tp_dbt_thread *t, int done);
	void (*flush)(struct tp_dbt_thread *t);
	void (*signal)(struct tp_dbt_thread *t, const siginfo_t *si, ucontext_t *uc);
	void (*module_load)(uint64_t start, uint64_t end, uint64_t offset, const char *path,
			    size_t path_len);
	void (*module_unload)(uint64_t start, uint64_t end);
	void (*process_exit)(void);
};

/* The clients (rt-client.c lists them); the counter is the first. */
extern struct tp_dbt_client tp_dbt_count_client TP_DBT_HIDDEN;

/* %gs offset where clients' per-thread data begins, after the thread's lookup table
 * (rt-main.c), and how many bytes they need in all. */
extern const uint64_t tp_dbt_client_tls_at TP_DBT_HIDDEN;
size_t tp_dbt_client_tls_size(void) TP_DBT_HIDDEN;
/* The per-thread data of @cl in thread @t. */
static inline void *tp_dbt_client_tls(const struct tp_dbt_client *cl, struct tp_dbt_thread *t)
{
	return (char *)t + cl->tls_off;
}

/* Emit a call of @cl's call callback with @arg (every register, flags and the red zone
 * kept). */
void tp_dbt_client_put_call(struct tp_arch_writer *w, const struct tp_dbt_client *cl,
			    uint16_t arg) TP_DBT_HIDDEN;

/* Services for clients: the index of the first instruction of the block at @pc before
 * which the status flags are dead, written by the instructions from there on before any
 * reads them, or -1 (rt-cache.c). */
int tp_dbt_flags_dead_from(uint64_t pc) TP_DBT_HIDDEN;
/* ... and a general register dead at its entry (0 rax ... 15 r15), or -1. */
int tp_dbt_dead_reg(void) TP_DBT_HIDDEN;

/* The runtime's side: each calls every client that has the callback. */
int tp_dbt_client_init(void) TP_DBT_HIDDEN;
void tp_dbt_client_block_begin(uint64_t pc, struct tp_arch_writer *w) TP_DBT_HIDDEN;
void tp_dbt_client_insn(uint64_t pc, const uint8_t *b, const struct tp_insn *in,
			struct tp_arch_writer *w, enum tp_dbt_client_where where) TP_DBT_HIDDEN;
void tp_dbt_client_block_end(uint64_t pc, uint64_t end, uint8_t *buf, size_t len) TP_DBT_HIDDEN;
int tp_dbt_client_block_at(uint64_t pc) TP_DBT_HIDDEN;
uint64_t tp_dbt_client_call(struct tp_dbt_thread *t, uint64_t back,
			    struct tp_dbt_frame *f) TP_DBT_HIDDEN;
void tp_dbt_client_thread_new(struct tp_dbt_thread *t) TP_DBT_HIDDEN;
void tp_dbt_client_vfork(struct tp_dbt_thread *t, int done) TP_DBT_HIDDEN;
void tp_dbt_client_flush(struct tp_dbt_thread *t) TP_DBT_HIDDEN;
void tp_dbt_client_signal(struct tp_dbt_thread *t, const siginfo_t *si,
			  ucontext_t *uc) TP_DBT_HIDDEN;
void tp_dbt_client_unmap(uint64_t start, uint64_t end) TP_DBT_HIDDEN;
void tp_dbt_client_process_exit(void) TP_DBT_HIDDEN;

#endif
