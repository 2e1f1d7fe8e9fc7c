/* Preloaded into python3 by tests/debug/gdb.py: clock_gettime through the system call, not
 * the vDSO, whose read of kvm-clock's page starts again when the host updates it meanwhile
 * (a few instructions more, now and then): so python3's count is the same on every run. */
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* exported: the project builds with -fvisibility=hidden, and a hidden definition interposes
 * nothing (python3 went on reading the vDSO) */
__attribute__((visibility("default"))) int clock_gettime(clockid_t id, struct timespec *ts)
{
	return (int)syscall(SYS_clock_gettime, id, ts);
}
