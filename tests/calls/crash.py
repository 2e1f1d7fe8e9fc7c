#!/usr/bin/env python3
"""A crash of tracepad in the middle of a trace, or at its first event while it attaches
(TRACEPAD_TEST_CRASH=N: a fault at its Nth event), attached with `calls -p` (the engine of
argv[2]) and `count -p` (in the ptrace leg) to a running target whose 4 threads check every
result they compute: tracepad dies of SIGSEGV
saying it restored the program, the target is left untraced with the code of its objects as
it was, runs on and at the end exits 0 with all its checks passed."""
import os
import re
import signal
import subprocess
import time

from tpcalls import ENGINE, check, done, exec_text, run, target, TRACEPAD

prog = target("calls-multi")
SEL = ["-e", "libtpcalls:tpc_add,libtpcalls:tpc_word,libtpcalls:tpc_sleep"]
CASES = [("calls", ["calls", "--engine", ENGINE] + SEL, "400")]
# at the attach's first event, while the threads stop
CASES += [("calls, crash at its first event", ["calls", "--engine", ENGINE] + SEL, "1")]
if ENGINE == "ptrace":
    # TRACEPAD_CALLS_SYNC: the ptrace engine's mode; count: one leg is enough
    CASES += [("calls, a stop at every return", ["calls", "--engine", ENGINE, "-e",
                                                 "libtpcalls:tpc_add,libtpcalls:tpc_sleep"],
               "400"),
              ("count", ["count", "--start", "tpc_add"], "3000")]


def untraced(pid):
    try:
        st = open("/proc/%d/status" % pid).read()
    except OSError:
        return False
    return re.search(r"^TracerPid:\s+0$", st, re.M) is not None


for name, opts, after in CASES:
    name = "%s: %s" % (ENGINE, name)
    p = subprocess.Popen([prog, "loop"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        first = p.stdout.readline()
        check(re.match(r"ready \d+$", first), "%s: the target is running" % name, first)
        text = exec_text(p.pid)
        env = dict(os.environ, TRACEPAD_TEST_CRASH=after)
        if "every return" in name:
            env["TRACEPAD_CALLS_SYNC"] = "1"
        argv = [TRACEPAD] + opts + ["-o", os.devnull, "-p", str(p.pid)]
        r = run(argv, timeout=60, env=env)
        check(r.rc == -signal.SIGSEGV
              and "crashed; restoring the programs and detaching" in r.err,
              "%s: tracepad faults at event %s, restores the program and says so" % (name, after),
              r)
        time.sleep(0.5)  # the target runs untraced a while, through the functions traced
        check(p.poll() is None and untraced(p.pid), "%s: the target runs on, untraced" % name,
              p.poll())
        now = exec_text(p.pid) if p.poll() is None else {}
        changed = [k[0] for k in text if now.get(k) != text[k]]
        check(now and not changed, "%s: the code of its objects as it was" % name, changed)
        p.send_signal(signal.SIGUSR1)
        out, err = p.communicate(timeout=60)
        m = re.search(r"^calls (\d+) failures (\d+)$", out, re.M)
        check(p.returncode == 0 and m and int(m.group(2)) == 0 and int(m.group(1)) > 0,
              "%s: the target exits 0 with all its checks passed" % name,
              "rc=%r out=%r err=%r" % (p.returncode, out[-300:], err[-300:]))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
done()
