/* Plugins of `tracepad calls`: a shared object exporting tracepad_plugin_init(), loaded with
 * --plugin PATH (or a built-in one by NAME), gets a callback for each traced call's entry
 * and return, and for process and thread events.  C ABI, dependency-free, x86-64 Linux.
 *
 * Callbacks run in tracepad, while the thread (call/ret) or the whole process (PROC_EXIT)
 * is stopped: memory read through the host is the program's memory at that instant. */
#ifndef TRACEPAD_PLUGIN_H
#define TRACEPAD_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRACEPAD_PLUGIN_ABI 1

/* One traced call.  The same object is passed to call() and, when the call returns, to
 * ret(); @user is the plugin's (NULL at entry). */
struct tracepad_call {
	int pid, tid;
	const char *object;   /* object basename, e.g. "libc.so.6" */
	const char *function; /* the selected name of the function */
	uint64_t func;	      /* runtime address of its entry */
	uint64_t args[6];     /* rdi, rsi, rdx, rcx, r8, r9 at entry */
	uint64_t sp;	      /* stack pointer at entry (the slot of the return address) */
	uint64_t caller;      /* the real return address */
	uint64_t retval;      /* rax when the call returned (ret() only) */
	unsigned depth;	      /* traced calls of this thread in flight around this one */
	uint64_t entry_ns;    /* CLOCK_MONOTONIC at the entry stop */
	uint64_t return_ns;   /* at the return stop (ret() only) */
	void *user;
};

enum tracepad_proc_event {
	TRACEPAD_PROC_START, /* traced from now on (launched, attached, forked or exec'd) */
	TRACEPAD_PROC_EXIT,  /* about to exit: every thread stopped, memory still intact */
	TRACEPAD_PROC_DETACH /* tracepad leaves it running */
};

enum tracepad_thread_event {
	TRACEPAD_THREAD_START,
	TRACEPAD_THREAD_EXIT,
};

/* One mapping of a traced process, as /proc/PID/maps shows it. */
struct tracepad_map {
	uint64_t start, end, offset;
	char perms[5];	  /* "rw-p" */
	const char *path; /* "" for anonymous memory; valid during the callback only */
};

/* What tracepad offers to a plugin.  @ctx is passed back to each function. */
struct tracepad_host {
	unsigned abi; /* TRACEPAD_PLUGIN_ABI */
	void *ctx;
	FILE *out; /* where the plugin's report goes (tracepad's output) */
	/* Read traced memory: bytes read (short at an unmapped page) or -errno. */
	long (*read)(void *ctx, int pid, uint64_t addr, void *buf, size_t len);
	/* Trace more functions: one `-e` pattern.  Only from tracepad_plugin_init(). */
	int (*select)(void *ctx, const char *pattern);
	/* Return addresses of stopped thread @tid, innermost first, starting with its pc;
	 * tracepad's return hooks are seen through.  Returns the number stored or -errno. */
	int (*backtrace)(void *ctx, int tid, uint64_t *pcs, int max);
	/* "object:function+0xoff (file:line)" of @pc in process @pid into @buf. */
	int (*symbolize)(void *ctx, int pid, uint64_t pc, char *buf, size_t len);
	/* The 27 general registers of stopped thread @tid, in struct user_regs_struct order
	 * (<sys/user.h>).  Returns 0 or -errno. */
	int (*regs)(void *ctx, int tid, uint64_t *regs, size_t nregs);
	/* Thread ids of process @pid: the number (fills up to @max). */
	int (*threads)(void *ctx, int pid, int *tids, int max);
	/* Hand each mapping of process (or thread) @pid to @fn, in address order, until @fn
	 * returns non-zero.  Returns what @fn returned last, or -errno.  Added after the
	 * first release: NULL from an older tracepad. */
	int (*maps)(void *ctx, int pid, int (*fn)(void *arg, const struct tracepad_map *m),
		    void *arg);
	/* Before a traced process ends through libc's _exit() (where exit() ends too) while it
	 * has a single thread, make it call @function ("object:name", no arguments, e.g.
	 * "libc:__libc_freeres", as valgrind does at exit) first, its calls traced as any;
	 * several are called in the order given, the process then exits as it asked.  Only
	 * from tracepad_plugin_init(); at most 4.  Returns 0, -ENOSPC or -ENOMEM.  Added after
	 * the first release: NULL from an older tracepad. */
	int (*exit_call)(void *ctx, const char *function);
};

struct tracepad_plugin {
	const char *name;
	void *priv;
	/* Every callback may be NULL. */
	void (*call)(void *priv, struct tracepad_call *c);
	void (*ret)(void *priv, struct tracepad_call *c);
	void (*process)(void *priv, int pid, enum tracepad_proc_event ev);
	void (*thread)(void *priv, int pid, int tid, enum tracepad_thread_event ev);
	/* End of tracing: report and free. */
	void (*fini)(void *priv);
};

/* The one symbol a plugin exports.  @args is the text after ':' in --plugin PATH:ARGS, or
 * NULL.  Fill *@plugin and return 0, or return -errno (tracepad stops with an error). */
int tracepad_plugin_init(const struct tracepad_host *host, const char *args,
			 struct tracepad_plugin *plugin);

#ifdef __cplusplus
}
#endif

#endif
