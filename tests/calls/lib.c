/* libtpcalls.so (see lib.h).  Built with -g so that tracepad types arguments from DWARF; noipa
 * keeps every call a real call at -O2, so each one is a traced entry and return; the project
 * builds with -fvisibility=hidden, so the API is exported by hand. */
#include <pthread.h>
#include <setjmp.h>
#include <time.h>

#include "lib.h"

#define TPC __attribute__((noinline, noipa, visibility("default")))

TPC int tpc_add(int a, int b)
{
	return a + b;
}

TPC const char *tpc_word(int i)
{
	static const char *const words[] = {"zero", "one", "two", "three"};

	return words[i & 3];
}

TPC int tpc_c(int x)
{
	return 3 * x;
}

TPC int tpc_b(int x)
{
	return tpc_c(x + 1) + 1;
}

TPC int tpc_a(int x)
{
	return tpc_b(2 * x) + 2;
}

TPC int tpc_tail(int x)
{
	return tpc_c(x);
}

TPC void tpc_lj_inner(jmp_buf *env, int v)
{
	longjmp(*env, v);
}

TPC int tpc_lj_mid(jmp_buf *env, int v)
{
	tpc_lj_inner(env, v);
	return -1;
}

TPC int tpc_lj_outer(jmp_buf *env, int v)
{
	return tpc_lj_mid(env, v) + 1;
}

TPC int tpc_lj_catch(int v)
{
	jmp_buf env;
	volatile int got;

	got = setjmp(env);
	if (got)
		return 1000 + got;
	tpc_lj_outer(&env, v);
	return -1;
}

TPC int tpc_sleep(int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts))
		;
	return ms;
}

TPC int tpc_rec(int n)
{
	/* volatile: no tail-recursion elimination, one real frame per level */
	volatile int below;

	if (n == 0)
		return 0;
	below = tpc_rec(n - 1);
	return below + 1;
}

TPC void tpc_thread_exit(int v)
{
	pthread_exit((void *)(long)v);
}
