#!/usr/bin/env python3
"""Nothing left behind by tracepad calls -p: 100 cycles of attach, trace 0.2 s, detach on a
2-thread target whose threads are inside traced calls most of the time (so detaching finds
hooked return addresses) leave at most one mapping more in /proc/PID/maps than before the
first.  The cycles start with one where tracepad crashes (TRACEPAD_TEST_CRASH: its crash
guard restores the program but can map nothing back): the next attach finds the SSOL areas
and return stubs it left by their signature, reuses them and unmaps them at its detach.
The target checks every result it computes and exits 0 with all its checks passed."""
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "calls"))
from tpcalls import check, done, calls, target, TRACEPAD  # noqa: E402

CYCLES = int(os.environ.get("TP_LEFTOVER_CYCLES", "100"))


def nmaps(pid):
    with open("/proc/%d/maps" % pid) as f:
        return len(f.read().splitlines())


p = subprocess.Popen([target("callloop")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
try:
    first = p.stdout.readline()
    check(first == "ready %d\n" % p.pid, "the target is running", first)
    base = nmaps(p.pid)

    env = dict(os.environ, TRACEPAD_TEST_CRASH="40")
    c = subprocess.run([TRACEPAD, "calls", "-c", "-o", os.devnull, "-p", str(p.pid)], env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    after_crash = nmaps(p.pid)
    check(c.returncode == -signal.SIGSEGV and p.poll() is None and after_crash > base + 1,
          "a crashed tracepad left its areas mapped (%d -> %d mappings), the target runs"
          % (base, after_crash), "rc=%r err=%r" % (c.returncode, c.stderr[-500:]))

    counts, bad, traced = [], [], 0
    for i in range(CYCLES):
        r = calls(["--duration", "0.2", "-c", "--json", "-e", "callloop:work"], pid=p.pid,
                  timeout=60)
        s = r.summary()
        work = [f for f in (s or {}).get("functions", []) if f.get("function") == "work"]
        # A loaded machine may spend a cycle's 0.2 s attaching: no call is then seen.
        traced += bool(work and work[0]["calls"] > 0)
        if r.rc != 0 or s is None or s.get("pids") != [p.pid] or p.poll() is not None:
            bad.append((i, r))
        counts.append(nmaps(p.pid))
        if p.poll() is not None:
            break
    check(not bad and traced > 0,
          "%d cycles attached and detached, %d of them saw calls of work" % (CYCLES, traced),
          "%r" % bad[:2])
    check(counts and counts[0] <= base + 1,
          "the next attach reused what the crashed one left and unmapped it (%d -> %d)"
          % (after_crash, counts[0] if counts else -1))
    check(counts and max(counts) <= base + 1,
          "%d cycles left at most one mapping more (%d before, at most %d after a cycle, %d "
          "at the end)" % (len(counts), base, max(counts or [0]), (counts or [0])[-1]),
          counts)
    st = open("/proc/%d/status" % p.pid).read() if p.poll() is None else ""
    check(re.search(r"^TracerPid:\s+0$", st, re.M), "the target is left untraced", st[:300])
    p.send_signal(signal.SIGUSR1)
    out, err = p.communicate(timeout=60)
    m = re.search(r"^calls (\d+) failures (\d+)$", out, re.M)
    check(p.returncode == 0 and m and int(m.group(2)) == 0 and int(m.group(1)) > 0,
          "the target's checks all passed", "rc=%r out=%r err=%r" % (p.returncode, out, err))
finally:
    if p.poll() is None:
        p.kill()
        p.wait()
done()
