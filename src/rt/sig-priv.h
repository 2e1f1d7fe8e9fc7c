/* Shared by the files of the signal virtualisation (signals.c, wrap.c). */
#ifndef TP_RT_SIG_PRIV_H
#define TP_RT_SIG_PRIV_H

#include <stdint.h>

#include "rt/rt.h"

/* The program believes the calling thread blocked SIGTRAP (it never is, for real: a trap
 * with SIGTRAP blocked makes the kernel unblock it and reset its handler to SIG_DFL). */
extern __thread uint8_t tp_rt_trap_blocked TP_RT_HIDDEN __attribute__((tls_model("initial-exec")));

/* What the host said to tp_rt_wrap_init or tp_rt_sig_init (NULL: pass everything through). */
extern const struct tp_rt_sig_host *tp_rt_sig_host TP_RT_HIDDEN;

#endif
