/* Live patching of one tracepoint site between its NOP5 and a jmp rel32, safe while other
 * threads execute it (the int3 protocol of the kernel's text_poke_bp). */
#ifndef TP_MARKERS_PATCH_H
#define TP_MARKERS_PATCH_H

#include <stdint.h>

extern const uint8_t tp_markers_nop5[5];

/* Rewrite the 5 bytes at @addr from @from to @to; @dest is where a thread that hits the
 * temporary int3 continues.  Returns 0, or -EILSEQ when the bytes differ from @from at any
 * step (nothing is written then, or the site is put back), or -errno of the write.  The caller
 * serialises patches. */
int tp_markers_patch(uintptr_t addr, const uint8_t from[5], const uint8_t to[5], uintptr_t dest);

void tp_markers_patch_set_delay(unsigned usec);
/* Threads sent on their way by the SIGTRAP handler so far. */
unsigned long tp_markers_patch_traps(void);

#endif
