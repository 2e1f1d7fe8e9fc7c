/* libtpcalls2.so: a library the targets only dlopen, so that `tracepad calls` must find its
 * functions when the dynamic loader maps it, and forget them when it is unmapped. */
__attribute__((noinline, noipa, visibility("default"))) int tpd_mul(int a, int b)
{
	return a * b;
}
