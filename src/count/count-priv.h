/* Shared by the files of src/count: the engines' helpers that fill the results. */
#ifndef TP_COUNT_PRIV_H
#define TP_COUNT_PRIV_H

#include "count/count.h"

/* Seconds on the monotonic clock. */
double tp_count_now(void);
/* Hand the running total to the progress callback, at most twice a second. */
void tp_count_progress(struct tp_count_ctx *c, uint64_t total);
void tp_count_progress_end(struct tp_count_ctx *c);
void tp_count_add_thread(struct tp_count_result *r, pid_t tid, uint64_t n);
void tp_count_addrs_add(struct tp_count_addrs *h, uint64_t pc, uint64_t n);

int tp_count_run_ptrace(struct tp_count_ctx *c);
int tp_count_run_trapflag(struct tp_count_ctx *c);
int tp_count_run_dbt(struct tp_count_ctx *c); /* dbt.c */
/* Does the count go on in the new image of an execve of the counted process?  For a whole
 * program, its total and mnemonics; regions and histograms by address name the first
 * image's code, and end at the execve (ptrace and dbt engines; trapflag's ends there). */
bool tp_count_follows_exec(const struct tp_count_ctx *c);
int tp_count_attach_ptrace(struct tp_count_ctx *c);
/* -p PID with the agent, injected into the running process (trapflag.c). */
int tp_count_attach_trapflag(struct tp_count_ctx *c);
/* Launch under ptrace.  With @until_sync, the agent is preloaded: count the start-up
 * stepped until the agent's sync and return with the program detached (the trapflag engine
 * goes on).  With @at_entry (whole program, no agent preloaded), count the start-up stepped
 * up to the program's entry point and return with the program stopped there, attached as
 * *@at_entry.  A whole-program count by ptrace alone preloads nothing either. */
struct tp_proc;
int tp_count_launch_ptrace(struct tp_count_ctx *c, bool until_sync, bool step_from_exec,
			   struct tp_proc **at_entry);

#endif
