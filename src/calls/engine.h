/* Internals of `tracepad calls` shared by engine.c (objects, functions, images) and run.c
 * (the event loop, output, plugins). */
#ifndef TP_CALLS_ENGINE_H
#define TP_CALLS_ENGINE_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/user.h>

#include "base/hash.h"
#include "bp/bp.h"
#include "calls/calls.h"
#include "calls/proto.h"
#include "calls/select.h"
#include "calls/unwind.h"
#include "elf/symbols.h"
#include "proc/proc.h"
#include "tracepad/plugin.h"

struct tp_plugins;

enum fkind {
	F_TRACED,    /* a selected function */
	F_RESOLVER,  /* the IFUNC resolver of a selected function: trace what it returns */
	F_RBRK,	     /* r_debug's r_brk: the loader changed the set of objects */
	F_UNWIND,    /* an unwinder starts (exception raised, forced unwind) */
	F_BACKTRACE, /* _Unwind_Backtrace: walks the stack and returns */
	F_CATCH,     /* __cxa_begin_catch: the exception landed; frames below are gone */
	F_REHOOK,    /* where _Unwind_Backtrace returns to: hook the frames again */
	F_SIGACTION, /* libc's sigaction: follow the program's SIGTRAP disposition */
	F_EXEC,	     /* libc's execve: calls that returned without a stop are reported first */
	F_EXIT,	     /* libc's _exit, when plugins asked for exit calls (tracepad_host) */
};

/* Plugins' exit calls (tracepad_host.exit_call), at most this many. */
#define TP_CALLS_EXIT_CALLS 4

struct object {
	char *path;
	const char *base;  /* in path */
	uint32_t base_len; /* lines.c: strlen(base) + 1, once measured (0 before) */
	uint64_t lo, hi;   /* executable mapping */
	uint64_t bias;
	bool main, seen;
	bool debug_syms; /* scanned with its separate debug file's symbols (tp_fsyms_read) */
};

struct stat_ent {
	pid_t pid; /* a summary per process: -f may follow several */
	char *object, *function;
	uint64_t calls, returns, errors, total, min, max;
	struct stat_ent *next;
};

struct func {
	uint64_t addr;
	enum fkind kind;
	bool hooked; /* the return is hooked */
	bool shown;  /* selected: its calls are printed and counted */
	bool proto_done;
	bool target; /* -C: one of the functions whose callers are shown */
	/* an IFUNC's implementation, hooked under the IFUNC's name: glibc's assembly string
	 * functions have entries that jump into each other's first bytes (mempcpy into
	 * memmove + 3), so no jump pad goes there, whatever bounds a symbol table gives */
	bool ifunc_impl;
	char *name;	   /* demangled unless --demangle=no */
	uint32_t name_len; /* lines.c: strlen(name) + 1, once measured (0 before) */
	struct object *obj;
	const struct tp_proto *proto;
	struct stat_ent *stat;
};

/* One process image (a pid between execs). */
struct image {
	pid_t pid;
	char exe[PATH_MAX];
	struct tp_bps *bps;
	struct object **objs;
	int nobjs;
	struct object *libc, *ldso;
	struct tp_hash funcs; /* addr -> struct func * */
	char **imports;	      /* the program's undefined dynamic symbols */
	int nimports;
	bool is_static;
	bool live;    /* objects being scanned are relocated: IFUNC resolvers may be called */
	bool started; /* the loader's start-up is over */
	uint64_t entry;
	uint64_t rdebug, rbrk;
	pid_t watch_tid; /* a watchpoint waits for ld.so to set r_brk */
	int errno_state; /* 0 unknown, 1 errno_tpoff valid, -1 unavailable */
	int64_t errno_tpoff;
	struct tp_unwinder *uw;
	bool exit_reported;
	/* SIGTRAP's disposition as the program set it, when not SIG_DFL: an int3 of ours
	 * hit while SIGTRAP is ignored or blocked makes the kernel reset it to SIG_DFL. */
	bool trap_custom;
	uint64_t trap_act[4]; /* struct kernel_sigaction: handler, flags, restorer, mask */
	/* The exit calls: how many were started, and _exit's registers at its first hit. */
	int exit_next;
	struct user_regs_struct exit_regs;
};

/* A call in flight. */
struct rec {
	struct tracepad_call c;
	struct func *f;
	uint64_t aux;	    /* sigaction(SIGTRAP, act, ...): act->sa_handler */
	uint64_t entry_tsc; /* when the thread ran on after the entry stop (clock.c) */
	uint64_t go_tsc;    /* when tracepad resumed it there (clock.c) */
	uint64_t stall0;    /* its thread's stall_tsc then */
	char args[512];
	uint64_t pcs[64];
	int npcs;
	bool on_path; /* -C: a function of -C was called while it was in flight (or it is one) */
};

struct thread {
	pid_t tid, pid;
	struct image *img;
	bool report;	  /* calls are printed (not an unfollowed vfork child) */
	bool exiting;	  /* reported its exit stop */
	bool hook_trap;	  /* agent -S: the agent's handler of a hook's int3 runs (its
			   * rt_sigreturn is not shown) */
	bool skip_sys;	  /* ... and that rt_sigreturn's exit is to come */
	struct rec *recs; /* mirrors the bp module's shadow stack */
	unsigned n, cap;
	uint64_t rehook_at; /* after _Unwind_Backtrace: rehook at a stop with sp >= this */
	uint64_t line_tsc;  /* the time (TSC) of its last line: lines.c keeps them in order */
	uint64_t stall_tsc; /* TSC ticks it spent stopped at tracepad's breakpoints (clock.c) */
	uint64_t run_tsc;   /* when it last ran on after such a stop */
	uint64_t ret_tsc;   /* the latest return of a call of its, in the program's time */
	/* -S: the system call it is in (syscalls.c), its text as of the entry. */
	bool in_sys;
	int sys_nr;
	uint64_t sys_args[6];
	char sys_text[640];
};

struct session {
	const struct tp_calls_opts *o;
	struct tp_proc *p;
	int err; /* -ENOMEM met where it could not be returned: the tracing ends, detaching */
	struct tp_select *sel;
	struct tp_select *csel; /* -C's patterns, NULL without -C */
	struct tp_protos *protos;
	struct tp_symtab *symtab; /* for --bt and plugins' symbolize */
	pid_t symtab_pid;
	unsigned symtab_gen, objects_gen; /* objects_gen: bumped when objects come or go */
	struct thread *cur;		  /* the thread of the stop being handled */
	struct user_regs_struct cur_regs; /* its registers, pc at the function or return */
	struct image **imgs;
	int nimgs;
	struct thread **threads;
	int nthreads;
	struct thread *last;
	struct stat_ent *stats;
	pid_t *pids; /* every traced process, for the summary */
	int npids;
	struct tp_plugins *plugins; /* the registry: --plugin */
	struct tracepad_host host;
	bool need_args;	    /* lines are printed or recorded: format arguments and returns */
	bool agent;	    /* --engine agent: functions are selected, no breakpoint planted */
	bool events;	    /* the agent engine: attached for exec, signals, exit */
	bool async;	    /* calls return without a stop (no plugin, TRACEPAD_CALLS_SYNC unset) */
	uint64_t ns0, tsc0; /* a moment on both clocks, to convert the stubs' TSC readings */
	int64_t wall_off;   /* CLOCK_REALTIME minus CLOCK_MONOTONIC at the start (-t) */
	/* A stop's latencies in TSC ticks (clock.c): from the tracer's resume to the thread
	 * running, from the thread's trap to the tracer's wake-up; 0 when not measured. */
	uint64_t lat_resume, lat_stop;
	uint64_t wake_tsc; /* the breakpoint stop being handled: when tracepad took it */
	int entry_rec;	   /* and the record of the call it entered (its thread's), or -1 */
	bool entry_trace;  /* whose call_entry event waits for its time */
	unsigned ntraced, insert_failed;
	int insert_err;
	char insert_what[256];
	struct calls_trace *trace;
	struct calls_lines *lines; /* lines.c */
	uint64_t ret_tsc;	   /* the stub's TSC of the return being reported, 0 at a stop */
	int status;		   /* exit status of the launched program */
	bool launched;
	bool started;
	char *exit_calls[TP_CALLS_EXIT_CALLS]; /* "object:name", from the plugins */
	int nexit_calls;
};

/* At a stop at libc's _exit (F_EXIT) with the trap's registers @regs: start the next exit
 * call (1: the thread runs it), or, when none is left, put back the registers _exit was
 * entered with into @regs and the thread (0: handle the stop as a hit of _exit). */
int tp_calls_exit_detour(struct session *s, struct image *im, struct thread *t,
			 struct user_regs_struct *regs);

uint64_t tp_calls_now_ns(void);
/* clock.c: a TSC reading (a return stub's, a line's) on the monotonic clock of
 * tp_calls_now_ns(); a number of TSC ticks in ns; the latencies of a stop of thread @tid
 * (stopped, of a launched program: it single-steps an rdtsc of the program's code). */
uint64_t tp_calls_tsc_ns(struct session *s, uint64_t tsc);
uint64_t tp_calls_ticks_ns(struct session *s, uint64_t ticks);
void tp_calls_calibrate(struct session *s, pid_t tid);
/* A call of @t that returned through a stub at @ret_tsc, having stopped tracepad's way for
 * @stalled ticks inside, was stamped @stamp by its entry stub (0: not): the resume latency
 * learns from it, and a start later than estimated moves it and the call's *@wall. */
void tp_calls_entry_stamp(struct session *s, struct thread *t, const struct rec *rc, uint64_t stamp,
			  uint64_t ret_tsc, uint64_t stalled, uint64_t *wall);
/* Is a call at nesting @depth beyond --depth (its lines, summary and trace left out)? */
static inline bool tp_calls_too_deep(const struct session *s, unsigned depth)
{
	return s->o->max_depth && depth >= (unsigned)s->o->max_depth;
}
/* -C (uftrace's caller filter): only the calls of -C's functions and of their callers are
 * written, those in flight on the thread when one of -C's functions is entered.  A line is
 * written at the call's return, when whether such a function was called below it is known;
 * --entry and -c, which would need it at the entry, are refused with -C. */
static inline void tp_calls_callers_enter(struct thread *t, struct rec *rc)
{
	rc->on_path = rc->f->target;
	for (unsigned i = 0; rc->on_path && i < rc->c.depth && i < t->n; i++)
		t->recs[i].on_path = true;
}
static inline bool tp_calls_line_wanted(const struct session *s, const struct rec *rc)
{
	return !s->csel || rc->on_path;
}
/* stops.c: threads and stops.  tp_calls_handle() takes one event of the event loop;
 * tp_calls_trap_filter() is its tp_proc_trap_filter_fn. */
struct thread *tp_calls_thread_add(struct session *s, pid_t tid, pid_t pid, struct image *im,
				   bool report);
void tp_calls_thread_del(struct session *s, struct thread *t);
/* At an exec by @t (its pid set): the process's other threads are gone without exit
 * reports, and @t is now @tid (the leader's), with no call in flight. */
void tp_calls_thread_exec(struct session *s, struct thread *t, pid_t tid);
struct thread *tp_calls_thread_of(struct session *s, pid_t tid);
int tp_calls_add_pid(struct session *s, pid_t pid);
void tp_calls_trap_init(struct image *im, pid_t tid);
int tp_calls_handle(struct session *s, const struct tp_event *ev);
bool tp_calls_trap_filter(void *arg, pid_t pid, const struct user_regs_struct *regs);
/* run.c: the host's symbols and backtraces (--bt, plugins). */
int tp_calls_symbolize(struct session *s, int pid, uint64_t pc, bool ret, char *buf, size_t len);
int tp_calls_backtrace(struct session *s, struct thread *t, struct user_regs_struct *regs,
		       uint64_t *pcs, int max);
/* stops.c: a new record of a call in flight of @t (NULL and s->err set when out of
 * memory); the summary's entry of @f in process @pid. */
struct rec *tp_calls_rec_push(struct session *s, struct thread *t);
struct stat_ent *tp_calls_stat_find(struct session *s, pid_t pid, struct func *f);
/* inline: the function's last entry, the one nearly every call finds (twice a call of the
 * agent engine, which makes millions a second) */
static inline struct stat_ent *tp_calls_stat_of(struct session *s, pid_t pid, struct func *f)
{
	return f->stat && f->stat->pid == pid ? f->stat : tp_calls_stat_find(s, pid, f);
}
/* engine.c: a function that finds its caller's object by its return address (dlopen...);
 * a name of the C run-time's start-up code (not in the default selection). */
bool tp_calls_caller_sensitive(const char *name);
bool tp_calls_crt_name(const char *name);
/* agent.c: the whole job with --engine agent; returns tracepad's exit status.  The host's
 * backtrace of the call plugins are handed: unwound from the stack its record carries. */
int tp_calls_agent_run(struct session *s);
/* agent-choose.c: without --engine, does the agent engine print what the ptrace engine would
 * for @o's options and program, as far as can be known before it starts? */
bool tp_calls_agent_fits(const struct tp_calls_opts *o);
int tp_calls_agent_backtrace(struct session *s, pid_t tid, uint64_t *pcs, int max);
/* The host's read during those calls: memory the record carries (as it was at the call or
 * return), else -ENOENT (the live process is read). */
ssize_t tp_calls_agent_read(struct session *s, pid_t pid, uint64_t addr, void *buf, size_t len);
/* A call that returned through its return stub, reported by the bp module (stops.c). */
void tp_calls_async_return(void *arg, pid_t tid, const struct tp_bp_stop *st);
struct func *tp_calls_func_find(struct image *im, uint64_t addr);
int tp_calls_objects_sync(struct session *s, struct image *im, pid_t tid);
/* A process image, in s->imgs once its breakpoints may exist (also when the constructor
 * fails later: leaving takes them out).  NULL with errno (ENOMEM) on failure. */
struct image *tp_calls_image_new(struct session *s, pid_t pid, pid_t tid, bool live);
struct image *tp_calls_image_fork(struct session *s, struct image *parent, pid_t pid);
/* Out of s->imgs and freed; @im may be NULL. */
void tp_calls_image_free(struct session *s, struct image *im);
struct image *tp_calls_image_of(struct session *s, pid_t pid);
int tp_calls_watch_hit(struct session *s, struct image *im, pid_t tid);
int tp_calls_func_add(struct session *s, struct image *im, pid_t tid, struct object *o,
		      uint64_t addr, const char *name, enum fkind kind);
struct object *tp_calls_object_at(struct image *im, uint64_t addr);
void tp_calls_resolved(struct session *s, struct image *im, pid_t tid, struct func *resolver,
		       uint64_t impl);

/* trace.c: --trace DIR */
struct calls_trace;
int tp_calls_trace_open(struct session *s, const char *dir, struct calls_trace **out);
void tp_calls_trace_call(struct calls_trace *t, struct rec *r);
void tp_calls_trace_return(struct calls_trace *t, const struct rec *r, const char *ret);
void tp_calls_trace_exec(struct calls_trace *t, pid_t pid, pid_t tid, const char *path,
			 const char *argv);
/* @signame: killed by that signal (@core: dumping core), NULL: exited with @code. */
void tp_calls_trace_exit(struct calls_trace *t, pid_t pid, pid_t tid, int code, const char *signame,
			 bool core);
void tp_calls_trace_signal(struct calls_trace *t, pid_t pid, pid_t tid, const char *signame,
			   const char *info);
/* Finish and free the trace (@t may be NULL); returns 0 or -errno. */
int tp_calls_trace_close(struct calls_trace *t);

/* run.c: SIGALRM every @us (0: off), only ever delivered while tracepad sleeps in a wait
 * (proc.h); the handler sets tp_calls_ticked.  Started after the launch: the program must not
 * inherit the blocked signal. */
extern volatile sig_atomic_t tp_calls_ticked;
void tp_calls_tick(struct tp_proc *p, unsigned us);

/* lines.c: the output.  Without TRACEPAD_CALLS_SYNC (s->async), lines are held and written
 * in the order of their times, once every thread's returns up to then are known:
 * tp_calls_lines_tick() in the event loop reads them every 50 ms (@ticked: now). */
struct calls_lines;
void tp_calls_line_call(struct session *s, struct thread *t, const struct rec *rc, unsigned depth,
			const char *tail);
/* The line of @rc's call that returned @ret (@len bytes) after @d ns: " = RET", and its
 * duration with -T, as tp_calls_line_call() with the tail " = RET <S.US>". */
void tp_calls_line_return(struct session *s, struct thread *t, const struct rec *rc, unsigned depth,
			  const char *ret, size_t len, uint64_t d);
void tp_calls_lines_tick(struct session *s, bool ticked);
/* A line "[TID] TEXT" of @t at nesting @depth, as of now (-S). */
void tp_calls_line_text(struct session *s, struct thread *t, unsigned depth, const char *text);
/* syscalls.c: a syscall stop (-S), resumed. */
int tp_calls_syscall_stop(struct session *s, const struct tp_event *ev);
/* How every stop is resumed: to the next syscall stop with -S. */
static inline enum tp_resume tp_calls_resume(const struct session *s)
{
	return s->o->syscalls ? TP_RESUME_SYSCALL : TP_RESUME_CONT;
}
/* Write every line held. */
void tp_calls_lines_flush(struct session *s);
void tp_calls_lines_free(struct session *s);
/* Process events of @t's process: a line, a JSON object of the -c --json summary, a trace
 * event.  exec: at the exec stop; exit: the wait status of its last thread; a signal about
 * to be delivered. */
void tp_calls_event_exec(struct session *s, struct thread *t);
void tp_calls_event_exit(struct session *s, struct thread *t, int status);
void tp_calls_event_signal(struct session *s, struct thread *t, const siginfo_t *si);
/* -c --json: the events' array, as the member "events" of the summary object. */
void tp_calls_events_json(struct session *s, FILE *f);

#endif
