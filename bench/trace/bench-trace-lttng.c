/* bench/trace, LTTng-UST's side: the loop of loop.h recording through an LTTng-UST 2.13
 * tracepoint.  trace.py sets up the session (channel, event, output directory) before
 * starting it and counts what the session wrote with babeltrace2.
 *   bench-trace-lttng THREADS EVENTS */
#include "loop.h"
#include "lttng-tp.h"

static uint64_t record(struct loop_thread *t, uint64_t first, uint64_t n)
{
	for (uint64_t i = first; i < first + n; i++)
		lttng_ust_tracepoint(tpbench, bench, LOOP_A(i), LOOP_B(i), LOOP_C(i), LOOP_D(i));
	return n;
}

int main(int argc, char **argv)
{
	struct loop l = {.loop = record};

	if (loop_args(&l, argc - 1, argv + 1)) {
		fprintf(stderr, "usage: bench-trace-lttng THREADS EVENTS\n");
		return 2;
	}
	/* LTTng-UST registers with the session daemon before main (waiting up to
	 * LTTNG_UST_REGISTER_TIMEOUT): when the event is still off here, nothing would be
	 * recorded and the figure would be that of a disabled tracepoint. */
	if (!lttng_ust_tracepoint_enabled(tpbench, bench)) {
		fprintf(stderr, "bench-trace-lttng: tpbench:bench is not enabled (no session?)\n");
		return 1;
	}
	printf("tracer lttng-ust clock monotonic\n");
	return loop_run(&l) ? 1 : 0;
}
