/* The tracer side of the code cache: map the runtime (tracepad-dbt-rt.so) and a private
 * copy of libZydis into a program stopped at its execve, and point it at the runtime,
 * which then runs the program from its first instruction on in the code cache. */
#ifndef TP_DBT_DBT_H
#define TP_DBT_DBT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proc/proc.h"

struct tp_dbt_takeover {
	const char *runtime; /* path of tracepad-dbt-rt.so */
	int ctl_fd; /* the control block's memfd, tracepad's, with this number in the program
		     * when it inherited it (else opened there for the mapping); -1: none */
	size_t ctl_size;
	bool close_fd;	     /* close the program's inherited ctl_fd once mapped */
	uint32_t boot_flags; /* TP_DBT_BOOT_* (rt-abi.h) */
};

/* The runtime next to the agent at @agent (the build tree's or the installed layout), or
 * $TRACEPAD_DBT_RT; NULL when there is none.  The result is a static buffer. */
const char *tp_dbt_runtime_path(const char *agent);

/* Take over task @pid of @p, stopped right after execve: on success it is left stopped
 * with its registers set to enter the runtime; the caller detaches.  -errno with a reason
 * in @err. */
int tp_dbt_takeover(struct tp_proc *p, pid_t pid, const struct tp_dbt_takeover *o, char *err,
		    size_t errlen);

#endif
