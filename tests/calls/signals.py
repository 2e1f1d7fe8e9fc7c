#!/usr/bin/env python3
"""tracepad calls with signals landing everywhere: a target calls tpc_add in a loop while a
SIGALRM handler, every 100 us, calls it too, so signals come inside tracepad's slots, at its
trampoline and in its return stubs.  Launched (1 thread, then 4): the program's results are
right and every call is counted (loop calls + handler calls).  A 4-thread target attached
and detached 8 times (2 of them with a stop at every return): it survives and its own
checks pass (it runs until told to stop: SIGUSR1)."""
import os
import re
import signal
import subprocess

from tpcalls import calls, check, done, func, target

prog = target("calls-multi")

# ---- launched ----
for sync, threads in ((False, "1"), (True, "1"), (False, "4"), (True, "4")):
    what = "launched, %s thread%s" % (threads, "s" if threads != "1" else "") + \
        (", a stop at every return" if sync else "")
    if sync:
        os.environ["TRACEPAD_CALLS_SYNC"] = "1"
    r = calls(["-c", "--json", "-e", "libtpcalls:tpc_add"], [prog, "sigloop", "0.5", threads])
    os.environ.pop("TRACEPAD_CALLS_SYNC", None)
    m = re.search(r"^sigloop calls (\d+) bad 0 handled (\d+) bad 0$", r.out, re.M)
    f = func(r.summary(), "tpc_add")
    check(r.rc == 0 and m and int(m.group(2)) > 0, what + ": the program's checks pass, "
          "and its handler ran", r)
    check(m and f and f["calls"] == int(m.group(1)) + int(m.group(2)) == f["returns"],
          what + ": every call of the loop and of the handler counted, each returned",
          "%r %r" % (m and m.groups(), f))

# ---- attached ----
p = subprocess.Popen([prog, "sigloop", "300", "4"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
try:
    first = p.stdout.readline()
    check(re.match(r"ready %d$" % p.pid, first), "the target is running", first)
    for i in range(8):
        if i >= 6:
            os.environ["TRACEPAD_CALLS_SYNC"] = "1"
        r = calls(["--duration", "0.3", "-c", "--json", "-e", "libtpcalls:tpc_add"], pid=p.pid)
        os.environ.pop("TRACEPAD_CALLS_SYNC", None)
        f = func(r.summary(), "tpc_add")
        check(r.rc == 0 and f and f["calls"] > 0 and p.poll() is None,
              "cycle %d: attached, counted calls, detached, the target runs on" % i, r)
    p.send_signal(signal.SIGUSR1)  # the end of its loops
    out, err = p.communicate(timeout=120)
    m = re.search(r"^sigloop calls \d+ bad 0 handled (\d+) bad 0$", out, re.M)
    check(p.returncode == 0 and m and int(m.group(1)) > 0,
          "the target ended by itself with all its checks passed",
          "rc %r\n%s%s" % (p.returncode, out, err))
finally:
    if p.poll() is None:
        p.kill()
        p.wait()
done()
