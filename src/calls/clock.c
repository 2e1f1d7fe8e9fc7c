/* `tracepad calls`: the times of calls as the program lives them.  A call's entry is the
 * moment its thread runs again after the entry stop, its return the return stub's time stamp
 * (or, at a return stop, the moment the thread trapped), both estimated from the tracer's
 * TSC readings and the latencies of a stop measured at start-up (calibrate); the time the
 * thread spent stopped by tracepad inside the call is taken out of -T and -c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/user.h>
#include <x86intrin.h>

#include "base/log.h"
#include "base/procfs.h"
#include "calls/engine.h"

/* Round trips measured; the median of each latency is kept. */
#define CALIBRATE_N 25

uint64_t tp_calls_tsc_ns(struct session *s, uint64_t tsc)
{
	uint64_t ns = tp_calls_now_ns(), now = __rdtsc();
	double rate = now > s->tsc0 ? (double)(ns - s->ns0) / (double)(now - s->tsc0) : 1.0;

	return tsc < now ? ns - (uint64_t)((double)(now - tsc) * rate) : ns;
}

uint64_t tp_calls_ticks_ns(struct session *s, uint64_t ticks)
{
	uint64_t ns = tp_calls_now_ns(), now = __rdtsc();
	double rate = now > s->tsc0 ? (double)(ns - s->ns0) / (double)(now - s->tsc0) : 1.0;

	return (uint64_t)((double)ticks * rate + 0.5);
}

struct find_rdtsc {
	pid_t pid;
	uint64_t at;
};

/* An rdtsc (0f 31) anywhere in an executable mapping: run alone, it is one. */
static int find_rdtsc(void *arg, const struct tp_maps_ent *e)
{
	struct find_rdtsc *f = arg;
	static uint8_t buf[1 << 16];

	if (!tp_maps_exec(e))
		return 0;
	for (uint64_t a = e->start; a < e->end; a += sizeof(buf) - 1) {
		size_t want = e->end - a < sizeof(buf) ? e->end - a : sizeof(buf);
		ssize_t got = tp_proc_read(f->pid, a, buf, want);
		uint8_t *p;

		if (got < 2)
			break;
		p = memmem(buf, (size_t)got, "\x0f\x31", 2);
		if (p) {
			f->at = a + (uint64_t)(p - buf);
			return 1;
		}
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

void tp_calls_entry_stamp(struct session *s, struct thread *t, const struct rec *rc, uint64_t stamp,
			  uint64_t ret_tsc, uint64_t stalled, uint64_t *wall)
{
	if (!stamp)
		return;
	/* the resume latency follows the quickest resumes, down at once, up by a sixteenth a
	 * call, so that a stamp is seldom earlier than its estimate */
	if (rc->go_tsc && stamp >= rc->go_tsc) {
		if (stamp - rc->go_tsc < s->lat_resume)
			s->lat_resume = stamp - rc->go_tsc;
		else
			s->lat_resume += s->lat_resume / 16 + 1;
	}
	if (stamp > rc->entry_tsc && stamp <= ret_tsc) {
		/* it ran on later than estimated: the stop at its entry lasted that much longer */
		if (!stalled)
			*wall = ret_tsc - stamp;
		t->stall_tsc += stamp - rc->entry_tsc;
	}
}

void tp_calls_calibrate(struct session *s, pid_t tid)
{
	struct find_rdtsc f = {.pid = tid};
	struct user_regs_struct saved, r;
	uint64_t resume[CALIBRATE_N], stop[CALIBRATE_N];
	int n = 0;

	if (tp_proc_get_regs(tid, &saved) || tp_maps_foreach(tid, find_rdtsc, &f) != 1)
		goto out;
	while (n < CALIBRATE_N) {
		struct tp_event ev;
		uint64_t go, wake, seen;

		r = saved;
		r.rip = f.at;
		r.orig_rax = (uint64_t)-1; /* no system call restart on the way out */
		if (tp_proc_set_regs(tid, &r))
			break;
		go = __rdtsc();
		if (tp_proc_resume(s->p, tid, TP_RESUME_STEP, 0) || tp_proc_wait(s->p, &ev))
			break;
		wake = __rdtsc();
		if (ev.kind != TP_EV_STEP || ev.tid != tid) {
			tp_proc_requeue(s->p, &ev);
			break;
		}
		if (tp_proc_get_regs(tid, &r) || r.rip != f.at + 2)
			break;
		seen = (r.rdx & 0xffffffffu) << 32 | (r.rax & 0xffffffffu);
		if (seen < go || seen > wake)
			break; /* another CPU's counter is not in step with ours */
		resume[n] = seen - go;
		stop[n++] = wake - seen;
	}
	tp_proc_set_regs(tid, &saved);
	if (n == CALIBRATE_N) {
		qsort(resume, n, sizeof(resume[0]), cmp_u64);
		qsort(stop, n, sizeof(stop[0]), cmp_u64);
		s->lat_resume = resume[n / 2];
		s->lat_stop = stop[n / 2];
	}
out:
	tp_dbg("calls: a stop's latencies: %llu ns to resume, %llu ns to report",
	       (unsigned long long)tp_calls_ticks_ns(s, s->lat_resume),
	       (unsigned long long)tp_calls_ticks_ns(s, s->lat_stop));
}
