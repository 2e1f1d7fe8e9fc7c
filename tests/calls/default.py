#!/usr/bin/env python3
"""tracepad calls without --engine: the agent engine where it prints what the ptrace engine
would, the ptrace engine otherwise (the man page's rule), said by the -c --json summary's
"engine" and, with TRACEPAD_DEBUG=1, a line on stderr.  Where the agent is chosen, the lines
(process events too: exec, signals, the program's own int3, exit), the -c counts and the
exit status are the ptrace engine's; with -p too (the process as it is: its file, the objects
it has mapped, its threads), the agent staying attached for its signals and exit."""
import os
import re
import signal
import subprocess
import tempfile
import time

import tpcalls
from tpcalls import check, done, func, run, target


def calls(opts, prog_argv=None, **kw):
    """tpcalls.calls() without an --engine of its own: the default choice, unless OPTS name
    one."""
    return tpcalls.calls(opts, prog_argv, engine=None, **kw)


PTRACE = ["--engine", "ptrace"]
lazy, static, multi, procev = (target(n) for n in ("calls-lazy", "calls-static", "calls-multi",
                                                   "calls-procev"))
LIB = ["-e", "libtpcalls:*"]


def engine(opts, prog):
    r = calls(opts + ["-c", "--json"], prog)
    return (r.summary() or {}).get("engine"), r


def norm(r):
    """The lines without tids, pids, addresses, times and CPU times."""
    out = []
    for ln in r.lines:
        ln = re.sub(r"^\[\d+\]", "[T]", ln)
        ln = re.sub(r"0x[0-9a-f]+", "ADDR", ln)
        ln = re.sub(r", si_[us]time=\d+", "", ln)
        out.append(re.sub(r"\b\d{3,}\b", "N", ln))
    return out


# Which engine: the agent for a selection it can hook (libc's functions too, the default
# selection), ptrace for what it does not do and for a static program; --engine has the last
# word.
for what, opts, prog, want in (
        ("libtpcalls:*", LIB, [lazy, "5", "3"], "agent"),
        ("-S", LIB + ["-S"], [lazy, "5", "3"], "ptrace"),
        ("-f", LIB + ["-f"], [lazy, "5", "3"], "ptrace"),
        ("a static program", ["-e", "tpc_*"], [static, "3"], "ptrace"),
        ("libc:strlen", ["-e", "libc:strlen,libtpcalls:*"], [lazy, "5", "3"], "agent"),
        ("the default selection", [], [lazy, "5", "3"], "agent"),
        ("--engine agent", ["--engine", "agent", "-e", "libc:strlen"], [lazy, "5", "3"],
         "agent"),
        ("--engine ptrace", PTRACE + LIB, [lazy, "5", "3"], "ptrace")):
    got, r = engine(opts, prog)
    check(got == want and r.rc == run(prog).rc, "%s: the %s engine ran" % (what, want), r)

with tempfile.TemporaryDirectory(prefix="tp-default-") as d:
    script = os.path.join(d, "script")
    with open(script, "w") as f:
        f.write("#!/bin/sh\nexit 4\n")
    os.chmod(script, 0o755)
    got, r = engine([], [script])
    check(got == "ptrace" and r.rc == 4, "a script: the ptrace engine ran", r)

# TRACEPAD_DEBUG=1 says which and why.
r = run(["env", "TRACEPAD_DEBUG=1", os.environ["TRACEPAD"], "calls", "-o", os.devnull] + LIB +
        ["--", static, "3"])
check(re.search(r"^tracepad calls: debug: calls: the ptrace engine: a static program$",
                r.err, re.M), "TRACEPAD_DEBUG=1: the engine and why on stderr", r)

# The agent chosen: the ptrace engine's lines, -c counts and exit status (lines at entries,
# the caller filter, times; durations aside).
for opts, prog in ((LIB, [lazy, "50", "3"]), (LIB + ["--entry"], [lazy, "5", "3"]),
                   (LIB + ["-C", "tpc_add", "-T"], [lazy, "5", "3"])):
    a, p = calls(opts, prog), calls(PTRACE + opts, prog)
    na, np = ([re.sub(r" <\d+\.\d+>$", "", ln) for ln in norm(x)] for x in (a, p))
    check(a.rc == p.rc == 3 and na == np and len(na) > 5,
          "%s: the ptrace engine's lines and exit status" % " ".join(opts),
          "default %r\nptrace %r" % (na, np))
(ga, a), (gp, p) = engine(LIB, [lazy, "50", "3"]), engine(PTRACE + LIB, [lazy, "50", "3"])
counts = [{(f["function"], f["calls"], f["returns"], f["errors"]) for f in x.summary()["functions"]}
          for x in (a, p)] if ga and gp else None
events = [[dict(e, pid=0) for e in x.summary()["events"]] for x in (a, p)] if ga and gp else None
check(ga == "agent" and counts and counts[0] == counts[1] and events[0] == events[1],
      "-c --json: the ptrace engine's counts and events", (counts, events))

# Process events: an exec of the program itself, signals (its own raise, int3, its
# children's SIGCHLD), its exit status.
nat = run([procev])
a, p = calls(["-e", "calls-procev:say"], [procev]), calls(PTRACE + ["-e", "calls-procev:say"],
                                                           [procev])
check(nat.rc == 5 and a.rc == p.rc == 5 and norm(a) == norm(p) and
      any("SIGTRAP" in ln for ln in norm(a)) and any("+++ exec" in ln for ln in norm(a)),
      "exec, signals, int3, exit: the ptrace engine's lines", "default %r\nptrace %r" %
      (norm(a), norm(p)))
got, r = engine(["-e", "calls-procev:say"], [procev])
check(got == "agent", "exec, signals: the agent engine ran", r)

# -p: the agent for a selection it can take in the running process, ptrace for one it cannot;
# every thread traced, the program let go.
def loop_target():
    t = subprocess.Popen([multi, "loop"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    return t, t.stdout.readline()


def loop_end(loop, what):
    st = open("/proc/%d/status" % loop.pid).read() if loop.poll() is None else ""
    check(re.search(r"^TracerPid:\s+0$", st, re.M), what + ": the target is left untraced")
    loop.send_signal(signal.SIGUSR1)
    out, err = loop.communicate(timeout=60)
    m = re.search(r"^calls (\d+) failures (\d+)$", out, re.M)
    check(loop.returncode == 0 and m and int(m.group(2)) == 0,
          what + ": the target survived and all its checks passed", out[-300:] + err[-300:])


loop, first = loop_target()
try:
    for what, opts, want in (("-p, libtpcalls", [], "agent"), ("-p -S", ["-S"], "ptrace")):
        r = calls(opts + ["--duration", "0.5", "-c", "--json", "-e",
                          "libc:strlen,libtpcalls:tpc_add,libtpcalls:tpc_sleep"], pid=loop.pid)
        s = r.summary() or {}
        ok = all((func(s, fn) or {}).get("calls", 0) > 0 for fn in ("tpc_add",))
        check(first.startswith("ready") and r.rc == 0 and s.get("engine") == want and ok
              and loop.poll() is None, "%s: the %s engine traced every thread" % (what, want), r)
    loop_end(loop, "-p")
finally:
    if loop.poll() is None:
        loop.kill()
        loop.wait()

# -p, the agent chosen: the ptrace engine's lines of the program's signal and exit (it ends
# while traced: SIGUSR1), and status 0.
events = []
for opts in ([], PTRACE):
    loop, first = loop_target()
    fd, out = tempfile.mkstemp(prefix="tp-default-")
    os.close(fd)
    try:
        t = subprocess.Popen([os.environ["TRACEPAD"], "calls"] + opts +
                             ["-e", "libtpcalls:tpc_sleep", "-o", out, "-p", str(loop.pid)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        for _ in range(600):  # the sleeper's calls show: attached
            if os.path.getsize(out) or t.poll() is not None:
                break
            time.sleep(0.05)
        loop.send_signal(signal.SIGUSR1)
        loop.communicate(timeout=60)
        rc = t.wait(timeout=60)
        with open(out) as f:
            lines = [re.sub(r"^\[\d+\]", "[T]", ln) for ln in f.read().splitlines()
                     if "tpc_sleep" not in ln]
        events.append((rc, loop.returncode,
                       [re.sub(r"si_pid=\d+", "si_pid=N", ln) for ln in lines]))
    finally:
        os.unlink(out)
        if loop.poll() is None:
            loop.kill()
            loop.wait()
check(events[0] == events[1] and events[0][0] == 0 and len(events[0][2]) == 2,
      "-p, the agent chosen: the ptrace engine's signal and exit lines, status 0",
      "default %r\nptrace %r" % tuple(events))
done()
