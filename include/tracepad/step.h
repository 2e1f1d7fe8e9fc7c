/* tracepad/step.h - count the instructions of a region from inside the program.
 *
 *	#include <tracepad/step.h>
 *	tp_step_begin();
 *	... region ...
 *	tp_step_end();
 *
 * Under `tracepad count`, the instructions this thread executes between the return of
 * tp_step_begin() and the call of tp_step_end() are counted (both engines count the same
 * ones).  Otherwise both calls do nothing.  Needs no library: the entry points are weak
 * references that the tracepad agent provides when it is loaded.  C11 and C++. */
#ifndef TRACEPAD_STEP_H
#define TRACEPAD_STEP_H

#ifdef __cplusplus
extern "C" {
#endif

extern void tracepad_step_begin(void) __attribute__((weak));
extern void tracepad_step_end(void) __attribute__((weak));

static inline void tp_step_begin(void)
{
	if (tracepad_step_begin)
		tracepad_step_begin();
}

static inline void tp_step_end(void)
{
	if (tracepad_step_end)
		tracepad_step_end();
}

#ifdef __cplusplus
}
#endif

#endif
