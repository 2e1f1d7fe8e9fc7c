/* Safety of live patching: two threads run a site in a tight loop while the main thread
 * toggles it, with a delay injected between the patch steps.  Exact accounting: an iteration
 * that starts and ends inside one window where the point is fully enabled must record exactly
 * one event (carrying that iteration's number), one inside a fully disabled window none.
 * TP_STRESS_TOGGLES overrides the number of toggles. */
#include <tracepad/tracepoint.h>

#include "tap.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

TP_POINT(stress_point);

/* phase = epoch << 2 | state: changes before a patch starts and after it ended. */
enum { TRANSITION, STABLE_OFF, STABLE_ON };
#define STOP (~0ul)
static _Atomic unsigned long phase = STABLE_OFF;

struct worker {
	pthread_t thread;
	int id;
	_Atomic unsigned long iter;
	unsigned long fired, events, on_iters, off_iters, lost, invented, dup, mismatch;
};
static struct worker workers[2];
static __thread struct worker *me;

static void consume(const struct tp_site_desc *desc, const union tp_arg *args, void *ctx)
{
	if (!me || args[0].u != atomic_load_explicit(&me->iter, memory_order_relaxed) ||
	    args[1].i != me->id)
		me ? me->mismatch++ : 0;
	if (me) {
		me->fired++;
		me->events++;
	}
}

static void *work(void *arg)
{
	struct worker *w = arg;
	me = w;
	for (;;) {
		unsigned long ph0 = atomic_load(&phase);
		if (ph0 == STOP)
			break;
		unsigned long i = atomic_load_explicit(&w->iter, memory_order_relaxed) + 1;
		w->fired = 0;
		atomic_store(&w->iter, i);
		TP_TRACE(stress_point, "iter %lu thread %d", i, w->id);
		unsigned long ph1 = atomic_load(&phase);
		if (w->fired > 1)
			w->dup++;
		if (ph0 != ph1)
			continue;
		if ((ph0 & 3) == STABLE_ON) {
			w->on_iters++;
			w->lost += w->fired == 0;
		} else if ((ph0 & 3) == STABLE_OFF) {
			w->off_iters++;
			w->invented += w->fired != 0;
		}
	}
	return NULL;
}

/* Let every worker run at least one whole iteration in the current stable window. */
static void wait_progress(void)
{
	for (int k = 0; k < 2; k++) {
		unsigned long start = atomic_load(&workers[k].iter);
		while (atomic_load(&workers[k].iter) < start + 2)
			sched_yield();
	}
}

int main(void)
{
	const char *e = getenv("TP_STRESS_TOGGLES");
	long toggles = e ? atol(e) : 20000;
	long bad_patch = 0;
	unsigned long epoch = 0;

	tp_markers_set_consumer(consume, NULL);
	tp__markers_set_patch_delay(1);
	for (int k = 0; k < 2; k++) {
		workers[k].id = k + 1;
		pthread_create(&workers[k].thread, NULL, work, &workers[k]);
	}
	for (long t = 0; t < toggles; t++) {
		int on = !(t & 1);
		atomic_store(&phase, ++epoch << 2 | TRANSITION);
		int r = on ? tp_point_enable(&stress_point) : tp_point_disable(&stress_point);
		if (r < 1)
			bad_patch++;
		atomic_store(&phase, ++epoch << 2 | (on ? STABLE_ON : STABLE_OFF));
		if (t % 64 < 2)
			wait_progress();
	}
	atomic_store(&phase, STOP);
	unsigned long on = 0, off = 0, events = 0;
	for (int k = 0; k < 2; k++) {
		struct worker *w = &workers[k];
		pthread_join(w->thread, NULL);
		is_int(w->lost, 0, "thread %d: no event lost while enabled (%lu iterations)", w->id,
		       w->on_iters);
		is_int(w->invented, 0, "thread %d: no event while disabled (%lu iterations)", w->id,
		       w->off_iters);
		is_int(w->dup, 0, "thread %d: never two events for one execution", w->id);
		is_int(w->mismatch, 0, "thread %d: every event carries its own iteration", w->id);
		on += w->on_iters;
		off += w->off_iters;
		events += w->events;
	}
	is_int(bad_patch, 0, "%ld toggles, every patch succeeded", toggles);
	ok(on > 0 && off > 0, "both windows observed (%lu on, %lu off, %lu events)", on, off,
	   events);
	printf("# %lu executions met the int3 of a patch in progress\n", tp__markers_trap_count());
	return tap_done();
}
