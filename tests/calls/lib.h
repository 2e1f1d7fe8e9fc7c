/* libtpcalls.so: the library whose functions the tests of `tracepad calls` trace, with results
 * the targets can predict, so that every traced argument and return value can be checked. */
#ifndef TPCALLS_LIB_H
#define TPCALLS_LIB_H

#include <setjmp.h>

int tpc_add(int a, int b);
const char *tpc_word(int i);
/* tpc_a(x) = tpc_b(2x) + 2, tpc_b(x) = tpc_c(x + 1) + 1, tpc_c(x) = 3x: three nested frames. */
int tpc_a(int x);
int tpc_b(int x);
int tpc_c(int x);
/* Calls tpc_c as a tail call (a jmp at -O2): both return 3x through one return address. */
int tpc_tail(int x);
/* tpc_lj_outer -> tpc_lj_mid -> tpc_lj_inner, which longjmps to @env with value @v. */
int tpc_lj_outer(jmp_buf *env, int v);
int tpc_lj_mid(jmp_buf *env, int v);
void tpc_lj_inner(jmp_buf *env, int v);
/* Sets a jmp_buf, calls tpc_lj_outer(v) and returns 1000 + the value longjmp'd back. */
int tpc_lj_catch(int v);
/* Sleeps @ms milliseconds (a traced call that is in flight for long) and returns @ms. */
int tpc_sleep(int ms);
/* Recurses @n levels deep, one traced call each, and returns @n. */
int tpc_rec(int n);
/* Ends the calling thread with @v as its exit value: a traced call that never returns. */
void tpc_thread_exit(int v);

#endif
