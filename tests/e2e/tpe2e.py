"""Shared helpers of the e2e tests of `tracepad count`: run a program natively and under
tracepad (--json -o FILE), parse the report, and record checks as TAP (tests/lib/tap.py):
a test script exits 0 when every check passed, 1 otherwise.

Environment: TRACEPAD (the CLI), TP_TARGETS or argv[1] (the built targets' directory)."""
import json
import os
import select
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import run as runlib  # noqa: E402
from tap import Tap  # noqa: E402

ENGINES = ("ptrace", "trapflag")
# Single-stepping costs ~20-35 us an instruction here: a 100k-instruction region takes a
# few seconds, a whole /bin/ls some tens.  Generous, so that only a hang times out.
RUN_TIMEOUT = 240

TRACEPAD = os.environ.get("TRACEPAD", "")
TARGETS = os.environ.get("TP_TARGETS") or (sys.argv[1] if len(sys.argv) > 1 else "")


def target(name):
    return os.path.join(TARGETS, name)


class Run(runlib.Run):
    """One finished process: rc, out, err (text), report (dict or None), seconds."""

    def __init__(self, argv, rc, out, err, seconds, report=None, report_error=None):
        super().__init__(argv, rc, out, err, seconds)
        self.report = report
        self.report_error = report_error

    def __repr__(self):
        return "rc=%r stdout=%r stderr=%r" % (self.rc, self.out[-300:], self.err[-300:])


def cc(tmp, src_name, text, *flags, out=None, compiler="cc"):
    """@text written to @tmp/@src_name and built by @compiler with @flags into @tmp/@out (by
    default the source's name without its extension): that path, or None when it fails."""
    src = os.path.join(tmp, src_name)
    exe = os.path.join(tmp, out) if out else os.path.splitext(src)[0]
    with open(src, "w") as f:
        f.write(text)
    return exe if subprocess.run([compiler, *flags, "-o", exe, src]).returncode == 0 else None


def _run(argv, timeout, env=None):
    return runlib.run(argv, timeout, env=env, cls=Run)


def native(argv, timeout=60):
    return _run(list(argv), timeout)


def count_argv(prog_argv, engine=None, start=None, stop=None, by=None, top=None, pid=None,
               extra=(), json_out=None):
    argv = [TRACEPAD, "count"]
    if engine:
        argv += ["--engine", engine]
    if start:
        argv += ["--start", start]
    if stop:
        argv += ["--stop", stop]
    if by:
        argv += ["--by", by]
    if top is not None:
        argv += ["--top", str(top)]
    if json_out:
        argv += ["--json", "-o", json_out]
    argv += list(extra)
    if pid is not None:
        argv += ["-p", str(pid)]
    else:
        argv += ["--"] + list(prog_argv)
    return argv


def count(prog_argv, engine=None, start=None, stop=None, by=None, top=None, pid=None,
          extra=(), timeout=RUN_TIMEOUT):
    """tracepad count ... --json -o TMP; the parsed report is in .report."""
    fd, path = tempfile.mkstemp(prefix="tp-e2e-", suffix=".json")
    os.close(fd)
    os.unlink(path)  # tracepad creates it; a stale file must not pass for a report
    try:
        r = _run(count_argv(prog_argv, engine, start, stop, by, top, pid, extra, path), timeout)
        try:
            with open(path) as f:
                text = f.read()
            r.report = json.loads(text)
            if not isinstance(r.report, dict):
                r.report, r.report_error = None, "the report is not one JSON object"
        except FileNotFoundError:
            r.report_error = "no report written to -o FILE"
        except ValueError as e:
            r.report_error = "the report is not valid JSON (%s): %r" % (e, text[:200])
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return r


def exit_of(rc):
    """The report's "exit" object that a process exit code corresponds to."""
    if isinstance(rc, int) and rc < 0:
        return {"signal": -rc}
    return {"status": rc}


class Checks(Tap):
    """The TAP points of one script (ok, eq, bail, done from Tap), and the report checks."""

    def __init__(self, name):
        super().__init__(name)
        if not TRACEPAD:
            self.bail("TRACEPAD is not set (run through meson test)")
        if not TARGETS or not os.path.isdir(TARGETS):
            self.bail("the targets directory (TP_TARGETS or argv[1]) is missing: %r" % TARGETS)

    def report(self, r, what, engine=None, region=None):
        """The run produced a well-formed report of `engine`; returns it or None."""
        if not self.ok(r.report is not None, what + ": JSON report",
                       "%s\n%r\n%s" % (r.report_error, r, " ".join(map(str, r.argv)))):
            return None
        rep = r.report
        problems = []
        for key, types in (("engine", str), ("instructions", int), ("threads", list),
                           ("seconds", (int, float)), ("instructions_per_second", (int, float)),
                           ("exit", dict)):
            if not isinstance(rep.get(key), types) or isinstance(rep.get(key), bool):
                problems.append("key %r: %r" % (key, rep.get(key)))
        for key in ("region", "startup"):
            if key not in rep:
                problems.append("key %r missing" % key)
        if engine and rep.get("engine") != engine:
            problems.append("engine %r, want %r" % (rep.get("engine"), engine))
        if region is not None and rep.get("region") != region:
            problems.append("region %r, want %r" % (rep.get("region"), region))
        for t in rep.get("threads") or []:
            if not (isinstance(t, dict) and isinstance(t.get("tid"), int)
                    and isinstance(t.get("instructions"), int)):
                problems.append("thread entry %r" % (t,))
        if not problems and rep["threads"]:
            total = sum(t["instructions"] for t in rep["threads"])
            if total != rep["instructions"]:
                problems.append("threads sum to %d, instructions is %d"
                                % (total, rep["instructions"]))
        if not self.ok(not problems, what + ": report well-formed", "\n".join(problems)
                       + "\n" + json.dumps(rep)[:600]):
            return None
        return rep

    def ptrace_count(self, argv, what):
        """The ptrace engine's whole-program count of @argv, or None (reported)."""
        rep = self.report(count(argv, engine="ptrace"), what + " (ptrace)", "ptrace")
        return rep["instructions"] if rep else None

    def same_as_native(self, r, nat, what):
        """Output and exit status of the traced program are those of the native run."""
        want_rc = 128 - nat.rc if isinstance(nat.rc, int) and nat.rc < 0 else nat.rc
        self.eq(r.rc, want_rc, what + ": exit status unchanged", r)
        self.eq(r.out, nat.out, what + ": stdout unchanged")
        self.eq(r.err, nat.err, what + ": stderr unchanged (report went to -o)")
        if r.report is not None:
            self.eq(r.report.get("exit"), exit_of(nat.rc), what + ": report's exit")


# ---- watching processes that tracepad works on (the signal and kill tests) ----

def readline(f, timeout):
    """One line of pipe @f within @timeout seconds, or what came of it ('' for nothing)."""
    buf = b""
    end = time.monotonic() + timeout
    while not buf.endswith(b"\n"):
        left = end - time.monotonic()
        if left <= 0 or not select.select([f], [], [], left)[0]:
            break
        b = os.read(f.fileno(), 1)
        if not b:
            break
        buf += b
    return buf.decode(errors="replace")


def reap(pid, timeout=120):
    """The exit status of our child or adopted orphan @pid (as subprocess gives it), or None."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            got, st = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if got == pid:
            return os.waitstatus_to_exitcode(st)
        time.sleep(0.01)
    return None


def wait_for(cond, timeout=20):
    """True once cond() is, polled every 5 ms; False after @timeout seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return False


def text(pid):
    """{(start, end, path): bytes} of the r-x mappings of @pid."""
    out = {}
    with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", 0) as mem:
        for line in maps:
            f = line.split()
            if len(f) < 5 or not f[1].startswith("r-x"):
                continue
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except OSError:
                data = None
            out[(lo, hi, f[5] if len(f) > 5 else "")] = data
    return out


def tracers(pid):
    """The set of TracerPid of every thread of @pid (0: not traced); empty when it is gone."""
    out = set()
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        # a thread that ends meanwhile: ENOENT at the open, ESRCH at the read
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                out |= {int(ln.split()[1]) for ln in f if ln.startswith("TracerPid:")}
        except OSError:
            pass
    return out


def children(pid):
    """The children of @pid's main thread, from /proc."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def ring_inodes(pids):
    """The inodes of the memfd:tracepad-trace descriptors that @pids hold (the rings)."""
    out = set()
    for pid in pids:
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                path = "/proc/%d/fd/%s" % (pid, fd)
                if os.readlink(path).startswith("/memfd:tracepad-trace"):
                    out.add(os.stat(path).st_ino)
        except OSError:
            pass
    return out


def maps_rings(pid, inodes):
    """Has @pid mapped one of the files of @inodes (ring_inodes())?"""
    try:
        with open("/proc/%d/maps" % pid) as f:
            return any(len(ln.split()) > 5 and int(ln.split()[4]) in inodes for ln in f)
    except OSError:
        return False


def sigwork_expected(rounds, threads):
    """The line targets/sigwork prints at its end for @rounds rounds of @threads threads."""
    s = 0
    for k in range(threads):
        for i in range(rounds):
            n = i % 50 + k
            s += n * (n + 1) // 2
    return "rounds %d threads %d sum %d\n" % (rounds, threads, s)


# A loop of 40 M iterations under a 100 us SIGPROF timer whose handler is 2 instructions
# (then glibc's 2-instruction restorer): count - 4 * ticks is the same however often and
# wherever the handler interrupted it (the dbt tests, with and without --by).  ticks is
# printed in 16 hex digits by a loop of its own, whatever its value (printf's %lu runs a
# loop a digit: 9 ticks and 10 differed by 19 instructions).  Build with cc -O2 -no-pie.
TICKS_C = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
volatile unsigned long ticks;
char digits[17];
void on_prof(int sig);
__asm__(".globl on_prof\n on_prof: incq ticks(%rip)\n ret\n");
int main(void)
{
	struct sigaction sa;
	struct itimerval it = {{0, 100}, {0, 100}};
	unsigned long h = 1;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_prof;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGPROF, &sa, NULL);
	setitimer(ITIMER_PROF, &it, NULL);
	for (unsigned long i = 0; i < 40000000; i++)
		h = (h ^ (i & 255)) * 1099511628211ul;
	memset(&it, 0, sizeof(it));
	setitimer(ITIMER_PROF, &it, NULL);
	for (int k = 0; k < 16; k++)
		digits[k] = "0123456789abcdef"[(ticks >> (60 - 4 * k)) & 15];
	printf("%s %lx\n", digits, h);
	return 0;
}
"""
