/* Helpers shared by the proc tests: launching a target with its stdout captured, running a
 * traced program to its end while counting events. */
#ifndef TP_TESTS_PROC_TEST_H
#define TP_TESTS_PROC_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc/proc.h"
#include "tap.h"

static const char *target_dir;

static inline char *target(const char *name)
{
	static char buf[8][PATH_MAX];
	static int n;
	char *b = buf[n++ % 8];

	snprintf(b, PATH_MAX, "%s/%s", target_dir, name);
	return b;
}

/* Launch with the program's stdout going to a pipe, returned in *out_fd. */
static inline int launch_capture(struct tp_launch *l, struct tp_proc **p, int *out_fd)
{
	int pfd[2], save, r;

	if (pipe2(pfd, O_CLOEXEC))
		return -errno;
	fflush(stdout);
	save = dup(1);
	dup2(pfd[1], 1);
	close(pfd[1]);
	r = tp_proc_launch(l, p);
	dup2(save, 1);
	close(save);
	if (r) {
		close(pfd[0]);
		return r;
	}
	*out_fd = pfd[0];
	return 0;
}

static inline char *read_all(int fd)
{
	static char buf[4096];
	size_t got = 0;
	ssize_t n;

	while (got < sizeof(buf) - 1 && (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
		got += n;
	buf[got] = 0;
	close(fd);
	return buf;
}

struct counts {
	int ev[TP_EV_SYSCALL + 1];
	int sig[NSIG];
	int leaders_exited;
	int bad_resumes;
	pid_t fork_child[8];
	pid_t exec_tid[8];
	int exit_status[8]; /* TP_EV_EXITED statuses of non-main leaders */
};

/* Run to the end, passing signals through and resuming new tasks; @hook may act on events
 * first and return 1 when it resumed the task itself. */
static inline int run_all(struct tp_proc *p, struct counts *c,
			  int (*hook)(struct tp_proc *p, struct tp_event *ev, void *arg), void *arg)
{
	struct tp_event ev;
	int r;

	memset(c, 0, sizeof(*c));
	tp_proc_resume_all(p);
	while ((r = tp_proc_wait(p, &ev)) == 0) {
		c->ev[ev.kind]++;
		if (hook && hook(p, &ev, arg))
			continue;
		switch (ev.kind) {
		case TP_EV_EXITED:
			if (ev.leader && ev.tid != tp_proc_pid(p) && c->leaders_exited < 8)
				c->exit_status[c->leaders_exited] = ev.status;
			c->leaders_exited += ev.leader;
			continue;
		case TP_EV_SIGNAL:
			c->sig[ev.sig]++;
			r = tp_proc_resume(p, ev.tid, TP_RESUME_CONT, ev.sig);
			break;
		case TP_EV_FORK:
		case TP_EV_CLONE:
			if (ev.kind == TP_EV_FORK && c->ev[TP_EV_FORK] <= 8)
				c->fork_child[c->ev[TP_EV_FORK] - 1] = ev.new_tid;
			r = tp_proc_resume(p, ev.tid, TP_RESUME_CONT, 0);
			if (!r) {
				int r2 = tp_proc_resume(p, ev.new_tid, TP_RESUME_CONT, 0);

				/* -ESRCH: a child that is not followed */
				if (r2 && !(r2 == -ESRCH && ev.kind == TP_EV_FORK))
					r = r2;
			}
			break;
		case TP_EV_EXEC:
			if (c->ev[TP_EV_EXEC] <= 8)
				c->exec_tid[c->ev[TP_EV_EXEC] - 1] = ev.tid;
			r = tp_proc_resume(p, ev.tid, TP_RESUME_CONT, 0);
			break;
		default:
			r = tp_proc_resume(p, ev.tid, TP_RESUME_CONT, 0);
			break;
		}
		if (r)
			c->bad_resumes++;
	}
	return r;
}

#endif
