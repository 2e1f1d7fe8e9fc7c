/* Tests of tp_proc_launch and of what a stopped program offers: the exec stop at the first
 * instruction, single-stepping, exit status and output, errors of execve, registers, memory
 * (including writes into read-only text) and auxv. */
#include <elf.h>
#include <sched.h>
#include <sys/stat.h>
#include <time.h>

#include "proc-test.h"

static char hello_out[64];

static int our_cpus(int *last)
{
	cpu_set_t set;

	sched_getaffinity(0, sizeof(set), &set);
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &set))
			*last = i;
	return CPU_COUNT(&set);
}

/* The first instruction of the new image: ld.so's entry, or the program's for a static one. */
static uint64_t first_pc(pid_t pid)
{
	uint64_t base = 0, entry = 0;
	Elf64_Ehdr eh;

	if (tp_proc_auxv(pid, AT_BASE, &base) || tp_proc_auxv(pid, AT_ENTRY, &entry))
		return 0;
	if (!base)
		return entry;
	if (tp_proc_read(pid, base, &eh, sizeof(eh)) != sizeof(eh))
		return 0;
	return base + eh.e_entry;
}

static void test_exec_stop(const char *name)
{
	char *argv[] = {target(name), NULL};
	struct tp_launch l = {.argv = argv, .cpu = -1};
	struct user_regs_struct regs;
	struct tp_proc *p = NULL;
	uint64_t pc = 0;
	pid_t tid = 0;
	int fd, r;

	r = launch_capture(&l, &p, &fd);
	is_int(r, 0, "%s: launch", name);
	if (r)
		return;
	is_int(tp_proc_tasks(p, &tid, 1), 1, "%s: one task after launch", name);
	is_int(tid, tp_proc_pid(p), "%s: it is the main thread", name);
	is_int(tp_proc_get_pc(tid, &pc), 0, "%s: get pc", name);
	ok(pc && pc == first_pc(tid), "%s: stopped at the first instruction (%#lx)", name,
	   (unsigned long)pc);
	is_int(tp_proc_get_regs(tid, &regs), 0, "%s: get regs", name);
	is_int(regs.rip, pc, "%s: regs.rip is the pc", name);
	tp_proc_kill(p);
	close(fd);
}

static void test_step_and_exit(void)
{
	char *argv[] = {target("target-hello"), NULL};
	struct tp_launch l = {.argv = argv, .cpu = -1};
	int fd, nstep = 0, moved = 0, codes_ok = 0, r;
	uint64_t prev = 0, pc = 0;
	struct tp_proc *p = NULL;
	struct timespec t0, t1;
	struct tp_event ev;
	pid_t pid;

	r = launch_capture(&l, &p, &fd);
	is_int(r, 0, "step: launch");
	if (r)
		return;
	pid = tp_proc_pid(p);
	tp_proc_get_pc(pid, &prev);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 1000; i++) {
		if (tp_proc_resume(p, pid, TP_RESUME_STEP, 0) || tp_proc_wait(p, &ev))
			break;
		if (ev.kind != TP_EV_STEP || ev.tid != pid)
			break;
		nstep++;
		/* TRAP_BRKPT after a syscall instruction */
		codes_ok += ev.si.si_signo == SIGTRAP &&
			    (ev.si.si_code == TRAP_TRACE || ev.si.si_code == TRAP_BRKPT);
		tp_proc_get_pc(pid, &pc);
		moved += pc != prev;
		prev = pc;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	is_int(nstep, 1000, "step: 1000 steps give 1000 TP_EV_STEP");
	is_int(codes_ok, 1000, "step: each with si_code TRAP_TRACE (TRAP_BRKPT after a syscall)");
	ok(moved >= 900, "step: the pc moves (%d of 1000 steps)", moved);
	printf("# %.2f us per step + wait (with a PEEKUSER)\n",
	       ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1000 / 1000.0);

	/* Then run to the end. */
	r = tp_proc_resume(p, pid, TP_RESUME_CONT, 0);
	is_int(r, 0, "step: continue");
	r = tp_proc_wait(p, &ev);
	is_int(r, 0, "exit: wait");
	is_int(ev.kind, TP_EV_EXITED, "exit: TP_EV_EXITED");
	ok(ev.leader && ev.tid == pid, "exit: of the leader");
	ok(WIFEXITED(ev.status) && WEXITSTATUS(ev.status) == 7, "exit: status 7 (%#x)", ev.status);
	is_int(tp_proc_exit_status(p), ev.status, "exit: tp_proc_exit_status");
	is_int(tp_proc_wait(p, &ev), -ECHILD, "exit: then -ECHILD");
	is_int(tp_proc_tasks(p, NULL, 0), 0, "exit: no task left");
	is_str(read_all(fd), hello_out, "exit: stdout intact");
	tp_proc_free(p);
}

static void test_launch_options(void)
{
	int kp[2], fd, r;
	char kfd[16], buf[16] = "";
	char *argv[] = {target("target-hello"), "3", kfd, NULL};
	char *env[] = {"TP_TEST_VAR=xyz", NULL};
	struct tp_launch l = {.argv = argv, .env_add = env, .opts = 0};
	struct tp_proc *p = NULL;
	struct counts c;

	if (pipe2(kp, O_CLOEXEC))
		return;
	our_cpus(&l.cpu);
	snprintf(kfd, sizeof(kfd), "%d", kp[1]);
	l.keep_fds = &kp[1];
	l.nkeep_fds = 1;
	r = launch_capture(&l, &p, &fd);
	is_int(r, 0, "options: launch");
	close(kp[1]);
	if (r)
		return;
	ok(fcntl(kp[1], F_GETFD) < 0, "options: our own fd unchanged (closed)");
	run_all(p, &c, NULL, NULL);
	ok(WIFEXITED(tp_proc_exit_status(p)) && WEXITSTATUS(tp_proc_exit_status(p)) == 3,
	   "options: exit status 3");
	is_str(read_all(fd), "hello cpus=1 var=xyz\n", "options: pinned to one CPU, env added");
	r = read(kp[0], buf, sizeof(buf) - 1);
	ok(r == 4 && !memcmp(buf, "kept", 4), "options: kept fd inherited and written");
	close(kp[0]);
	tp_proc_free(p);
}

/* The program gets the signal state the tracer was started with, not the handlers and mask
 * it has since (tracepad's CLI catches SIGINT, SIGTERM, SIGHUP and SIGPIPE). */
static void test_launch_signals(void)
{
	char *argv[] = {target("target-sigstate"), NULL};
	struct tp_launch l = {.argv = argv, .cpu = -1};
	struct sigaction ign = {.sa_handler = SIG_IGN}, dfl = {.sa_handler = SIG_DFL}, old[2];
	sigset_t usr2, before;
	struct tp_proc *p = NULL;
	struct counts c;
	int fd, r;

	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	/* as given: SIGHUP ignored (nohup), SIGUSR2 blocked */
	sigaction(SIGHUP, &ign, &old[0]);
	sigaction(SIGINT, &dfl, &old[1]);
	sigprocmask(SIG_BLOCK, &usr2, &before);
	tp_proc_save_signals();
	/* then the tracer's own: a handler on SIGHUP, SIGINT ignored, SIGUSR2 unblocked */
	sigaction(SIGHUP, &dfl, NULL);
	sigaction(SIGINT, &ign, NULL);
	sigprocmask(SIG_UNBLOCK, &usr2, NULL);
	r = launch_capture(&l, &p, &fd);
	is_int(r, 0, "signals: launch");
	if (!r) {
		run_all(p, &c, NULL, NULL);
		is_str(read_all(fd), "HUP:ignored INT USR1 USR2:blocked\n",
		       "signals: the program has them as the tracer was given them");
		tp_proc_free(p);
	}
	sigaction(SIGHUP, &old[0], NULL);
	sigaction(SIGINT, &old[1], NULL);
	sigprocmask(SIG_SETMASK, &before, NULL);
}

static void test_launch_errors(void)
{
	char tmpl[] = "/tmp/tp-proc-text-XXXXXX";
	char *argv[] = {NULL, NULL};
	struct tp_launch l = {.argv = argv, .cpu = -1};
	struct tp_proc *p = (struct tp_proc *)1;
	int fd;

	argv[0] = "/nonexistent/dir/program";
	is_int(tp_proc_launch(&l, &p), -ENOENT, "errors: missing path -> -ENOENT");
	ok(p == NULL, "errors: *out is NULL");
	argv[0] = "tp-no-such-program-in-path";
	is_int(tp_proc_launch(&l, &p), -ENOENT, "errors: missing in PATH -> -ENOENT");

	fd = mkstemp(tmpl);
	if (fd < 0 || write(fd, "just some text\n", 15) != 15)
		return;
	close(fd);
	argv[0] = tmpl;
	chmod(tmpl, 0600);
	is_int(tp_proc_launch(&l, &p), -EACCES, "errors: not executable -> -EACCES");
	chmod(tmpl, 0700);
	is_int(tp_proc_launch(&l, &p), -ENOEXEC, "errors: executable text file -> -ENOEXEC");
	unlink(tmpl);

	argv[0] = target("target-hello");
	l.cpu = CPU_SETSIZE + 1;
	is_int(tp_proc_launch(&l, &p), -EINVAL, "errors: bad cpu -> -EINVAL");
	l.cpu = -1;
	/* No child was left behind. */
	is_int(waitpid(-1, NULL, WNOHANG | __WALL), -1, "errors: every child reaped");
}

/* A mapped page followed by an unmapped one, from /proc/PID/maps. */
static uint64_t mapping_end_before_hole(pid_t pid)
{
	unsigned long s, e, prev_end = 0, found = 0;
	char path[64], line[512];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx", &s, &e) != 2)
			continue;
		if (prev_end && s > prev_end && !found)
			found = prev_end;
		prev_end = e;
	}
	fclose(f);
	return found;
}

static void test_memory(void)
{
	char *argv[] = {target("target-hello"), NULL};
	struct tp_launch l = {.argv = argv, .cpu = -1};
	uint8_t orig = 0, b = 0, int3 = 0xcc, big[64];
	uint64_t entry = 0, end, pc;
	struct tp_proc *p = NULL;
	struct tp_event ev;
	int fd, r;
	pid_t pid;

	r = launch_capture(&l, &p, &fd);
	is_int(r, 0, "memory: launch");
	if (r)
		return;
	pid = tp_proc_pid(p);
	is_int(tp_proc_auxv(pid, AT_ENTRY, &entry), 0, "memory: AT_ENTRY");
	is_int(tp_proc_auxv(pid, 0x7fff, &entry), -ENOENT, "memory: unknown auxv type -> -ENOENT");
	tp_proc_auxv(pid, AT_ENTRY, &entry);
	is_int(tp_proc_read(pid, entry, &orig, 1), 1, "memory: read the entry byte");
	is_int(tp_proc_write(pid, entry, &int3, 1), 0, "memory: write int3 into read-only text");
	tp_proc_read(pid, entry, &b, 1);
	is_int(b, 0xcc, "memory: int3 reads back");
	is_int(tp_proc_write(pid, entry, &orig, 1), 0, "memory: restore the byte");
	tp_proc_read(pid, entry, &b, 1);
	is_int(b, orig, "memory: original byte reads back");

	end = mapping_end_before_hole(pid);
	ok(end != 0, "memory: found a hole after a mapping");
	is_int(tp_proc_read(pid, end - 16, big, sizeof(big)), 16, "memory: short read at a hole");
	ok(tp_proc_read(pid, end, big, 8) < 0, "memory: read in a hole fails");
	is_int(tp_proc_write(pid, end, big, 8), -EFAULT, "memory: write in a hole -> -EFAULT");

	/* pc can be moved and put back. */
	tp_proc_get_pc(pid, &pc);
	is_int(tp_proc_set_pc(pid, pc + 1), 0, "regs: set pc");
	tp_proc_get_pc(pid, &entry);
	is_int(entry, pc + 1, "regs: pc reads back");
	tp_proc_set_pc(pid, pc);

	/* The program runs unharmed by the patch-and-restore. */
	tp_proc_resume(p, pid, TP_RESUME_CONT, 0);
	r = tp_proc_wait(p, &ev);
	ok(!r && ev.kind == TP_EV_EXITED && WIFEXITED(ev.status) && WEXITSTATUS(ev.status) == 7,
	   "memory: program still exits with 7");
	is_str(read_all(fd), hello_out, "memory: and prints as usual");
	tp_proc_free(p);
	is_int(tp_proc_read(pid, entry, &b, 1), -ESRCH, "memory: read of a gone pid -> -ESRCH");
}

int main(int argc, char **argv)
{
	int last;

	target_dir = argc > 1 ? argv[1] : ".";
	snprintf(hello_out, sizeof(hello_out), "hello cpus=%d var=-\n", our_cpus(&last));
	test_exec_stop("target-hello");
	test_exec_stop("target-hello-static");
	test_step_and_exit();
	test_launch_options();
	test_launch_errors();
	test_memory();
	/* last: the state it notes stays noted */
	test_launch_signals();
	return tap_done();
}
