/* Call hooks' payloads (hooks-args.c): what a record carries after it, as planned by
 * tracepad (hooks-abi.h's struct tp_hk_plan). */
#ifndef TP_AGENT_HOOKS_ARGS_H
#define TP_AGENT_HOOKS_ARGS_H

#include <stdint.h>

#include "agent/hooks-abi.h"
#include "rt/pad.h"

/* The payload of an entry with registers @r into @dst (room bytes), but its snap: its
 * length.  @vregs: the vector registers are the program's (the jmp path; not in rt's SIGTRAP
 * handler). */
uint32_t tp_hk_payload_entry(uint8_t *dst, const struct tp_hk_plan *p, const struct tp_rt_regs *r,
			     int vregs) __attribute__((visibility("hidden")));
/* The entry's snap (the plan's stack bytes, with rbx, rbp and r12-r15 when over 8) into
 * @dst: its length.  *@snap: the copy of the stack from rsp up, or NULL. */
uint32_t tp_hk_payload_snap(uint8_t *dst, const struct tp_hk_plan *p, const struct tp_rt_regs *r,
			    uint64_t **snap) __attribute__((visibility("hidden")));
/* The payload of a return with @rax (@out: the out-parameter's address), called before any
 * vector register changed. */
uint32_t tp_hk_payload_ret(uint8_t *dst, const struct tp_hk_plan *p, uint64_t rax, uint64_t out)
    __attribute__((visibility("hidden")));

#endif
