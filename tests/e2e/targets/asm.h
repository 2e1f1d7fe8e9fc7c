/* The hand-counted functions of asm.S; their instruction counts are documented there. */
#ifndef TP_E2E_ASM_H
#define TP_E2E_ASM_H

void tp_loop(unsigned long n);
void tp_repmovs(void *dst, const void *src, unsigned long k);
void tp_step_loop(unsigned long n);

#endif
