#!/usr/bin/env python3
"""tracepad calls' returns without a stop, with the engine of argv[2]: a call's line comes
while its thread is blocked (no later stop of the thread reports it), a program that forbids
rdtsc runs, and the lines of single-threaded runs with longjmp, C++ exceptions, recursion and
nesting are those of the ptrace engine's mode where every return stops
(TRACEPAD_CALLS_SYNC=1), but for the durations."""
import os
import re
import select
import subprocess
import time

from tpcalls import ENGINE, LINE, TIMEOUT, TRACEPAD, calls, check, done, target

multi, exc = target("calls-multi"), target("calls-exc")

# ---- a return reported while its thread waits ----
def wait_case(engine):
    p = subprocess.Popen([TRACEPAD, "calls"] + engine + ["-e", "libtpcalls:tpc_add", "--", multi,
                         "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    err, first, end = b"", None, time.monotonic() + TIMEOUT
    while first is None and time.monotonic() < end and p.poll() is None:
        ready, _, _ = select.select([p.stderr], [], [], 1)
        if ready:
            chunk = os.read(p.stderr.fileno(), 4096)
            if not chunk:
                break
            err += chunk
            first = next((ln for ln in err.decode().splitlines() if "tpc_add(1, 2) = 3" in ln),
                         None)
    waiting = p.poll() is None
    out, rest = p.communicate(b"go\n", timeout=TIMEOUT)
    lines = [ln for ln in (err + rest).decode().splitlines() if LINE.match(ln)]
    name = " ".join(engine)
    check(first is not None and waiting,
          "wait (%s): the first call's line came while the program was still waiting for input"
          % name, (err + rest).decode()[-600:])
    check(p.returncode == 0 and out == b"first 3\nsecond 7\n" and len(lines) == 2 and
          "tpc_add(3, 4) = 7" in lines[1], "wait (%s): then the second call, output unchanged"
          % name, "%r %r %r" % (p.returncode, out, lines))


# ---- a program that forbids rdtsc (PR_SET_TSC): the stubs' or the agent's rdtsc is done
# for it, and the program's own still faults (it asked for that) ----
def notsc_case(engine):
    r = calls(engine + ["-e", "libtpcalls:tpc_add"], [multi, "notsc"])
    got = [(c.args, c.retint) for c in r.calls]
    check(r.rc == 0 and r.out == "notsc sum 15\nown rdtsc faulted\n" and
          got == [([i, 1], i + 1) for i in range(5)],
          "notsc (%s): the program runs as natively and its 5 calls return their values" %
          " ".join(engine), r)


wait_case(["--engine", ENGINE])
notsc_case(["--engine", ENGINE])

# ---- the same lines as with a stop at every return ----
def shape(r):
    """Every line without its tid, duration and addresses (ASLR differs between runs)."""
    return [re.sub(r"0x[0-9a-f]+", "0x?", re.sub(r"^\[\d+\]| <\d+\.\d+>$", "", ln))
            for ln in r.text.splitlines()]


# (TRACEPAD_CALLS_SYNC is the ptrace engine's mode of a stop at every return: the reference
# for both engines)
cases = [("longjmp", ["-e", "libtpcalls:*"], [multi, "longjmp"]),
         ("longjmp, setjmp shown", ["-e", "libtpcalls:*,libc:*setjmp"], [multi, "longjmp"]),
         ("nest", ["-e", "libtpcalls:*"], [multi, "nest"]),
         ("rec 300", ["-e", "libtpcalls:tpc_rec"], [multi, "rec", "300"]),
         ("errno", [], [multi, "errno"])]
if os.path.exists(exc):
    cases.append(("C++", ["-e", "tpx_*,libtpcalls:tpc_add"], [exc]))
else:
    check(False, "C++ target calls-exc was not built (no C++ compiler?)")
for name, opts, argv in cases:
    a = calls(opts, argv)
    os.environ["TRACEPAD_CALLS_SYNC"] = "1"
    s = calls(["--engine", "ptrace"] + opts, argv)
    del os.environ["TRACEPAD_CALLS_SYNC"]
    check(a.rc == s.rc == 0 and a.out == s.out and shape(a) and shape(a) == shape(s),
          "%s %s: the same %d lines as the ptrace engine's with a stop at each return" %
          (ENGINE, name, len(shape(s))), "%s:\n%s\nsync:\n%s" % (ENGINE, a.text[-800:],
                                                                  s.text[-800:]))
done()
