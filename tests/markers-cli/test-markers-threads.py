#!/usr/bin/env python3
"""tracepad markers record with more threads than a recording used to have rings: every event
a thread fires is either in the trace or counted as discarded there (tracepad report and
babeltrace2 agree), launched and with -p, and none reaches the program's stderr."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, done  # noqa: E402

tp = os.environ["TRACEPAD"]
target = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="tp-markers-threads-")


def report(d):
    """(events, discarded) of trace @d from tracepad report."""
    r = subprocess.run([tp, "report", d], capture_output=True, text=True, timeout=60)
    ev = re.search(r"^events\s+(\d+)", r.stdout, re.M)
    di = re.search(r"^discarded\s+(\d+)", r.stdout, re.M)
    return (int(ev.group(1)), int(di.group(1))) if ev and di else (None, r.stdout + r.stderr)


def babeltrace(d):
    """(events, discarded) as babeltrace2 reports them (its warnings name the discards)."""
    r = subprocess.run(["babeltrace2", d], capture_output=True, text=True, timeout=120)
    lost = sum(int(n) for n in re.findall(r"discarded (\d+) events", r.stderr))
    return r.stdout.count(" many_ev: "), lost


def launched(name, threads, events):
    d = os.path.join(tmp, name)
    r = subprocess.run([tp, "markers", "record", "--trace", d, "--", target, str(threads),
                        str(events)], capture_output=True, text=True, timeout=120)
    return d, r


# 80 threads alive at once, each with a ring: nothing lost (launched recordings wait for a
# full ring rather than discard).
d, r = launched("eighty", 80, 500)
check(r.returncode == 0 and r.stdout == "fired 40000\n" and "many_ev" not in r.stderr,
      "80 threads launched: the program's output and status, no event on its stderr",
      (r.returncode, r.stdout, r.stderr[:200]))
check(report(d) == (40000, 0), "80 threads: every event in the trace", report(d))

# 300 threads alive at once, more than there are rings: the others' events are counted.
d, r = launched("three-hundred", 300, 100)
ev, lost = report(d)
check(r.returncode == 0 and r.stdout == "fired 30000\n" and "many_ev" not in r.stderr,
      "300 threads launched: the program's output and status, no event on its stderr",
      (r.returncode, r.stdout, r.stderr[:200]))
check(ev is not None and ev + lost == 30000 and lost > 0,
      "300 threads: recorded + discarded = fired, the threads without a ring discarded",
      (ev, lost))
check(babeltrace(d) == (ev, lost), "babeltrace2 reads the same events and discards",
      (babeltrace(d), ev, lost))

# -p: the threads wait for SIGUSR1, fired once the recording has enabled the point; the
# first event opens the session while the others fire.
for k in range(3):
    d = os.path.join(tmp, "attach%d" % k)
    prog = subprocess.Popen([target, "80", "500", "wait"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    ready = prog.stdout.readline()
    rec = subprocess.Popen([tp, "markers", "record", "-p", str(prog.pid), "--trace", d],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    on = False
    for _ in range(200):
        lst = subprocess.run([tp, "markers", "list", "-p", str(prog.pid)],
                             capture_output=True, text=True, timeout=30)
        if re.search(r"^many_ev\s.*\benabled\b", lst.stdout, re.M):
            on = True
            break
        time.sleep(0.05)
    prog.send_signal(signal.SIGUSR1)
    out, err = prog.communicate(timeout=120)
    rout, rerr = rec.communicate(timeout=60)
    ev, lost = report(d)
    check(on and ready == "ready\n" and prog.returncode == 0 and out == "fired 40000\n" and
          "many_ev" not in err,
          "-p, 80 threads (%d): the program's output and status, no event on its stderr" % k,
          (on, ready, prog.returncode, out, err[:200], rerr[:200]))
    check(rec.returncode == 0 and ev is not None and ev + lost == 40000,
          "-p, 80 threads (%d): recorded + discarded = fired" % k, (rec.returncode, ev, lost))

shutil.rmtree(tmp, ignore_errors=True)
done()
