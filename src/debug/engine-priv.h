/* What the interposer's engine files share (engine.c: stops, registers, ptrace; text.c:
 * the program's memory; ctl.c: the count's control block). */
#ifndef TP_DEBUG_ENGINE_PRIV_H
#define TP_DEBUG_ENGINE_PRIV_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/user.h>

struct dproc {
	pid_t pid; /* 0: free */
	struct tp_dbt_map *map;
	bool own; /* gdb launched it and the interposer took it over (else: attached) */
};

/* The process (in the code cache) of @pid, a process or one of its threads; NULL. */
struct dproc *tp_debug_proc_of(pid_t pid);

/* ctl.c: one control block for the session, its memfd inherited by the programs gdb
 * forks; made empty at each takeover, its count reported at the program's exit. */
void tp_debug_ctl_init(void);
int tp_debug_ctl_fd(size_t *size);
void tp_debug_ctl_reset(void);
void tp_debug_ctl_report(int status);

#endif
