/* A library with nothing in it: preloaded under valgrind lackey, it measures what any
 * LD_PRELOAD costs the dynamic loader and libc (e2e real.py). */
int tp_emptypreload_unused;
