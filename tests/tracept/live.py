#!/usr/bin/env python3
"""tracepad frames -p PID --live: while `tracepad trace --trace DIR` records a program that
calls f(i) for ever (i = 0..99 again and again, p->x = 3i), the frames recorded so far are
listed and shown before the session ends, with their values; the live list ends by itself
when the session ends and holds exactly the frames of the finished trace, in order."""
import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from tptrace import MODE, TRACEPAD, check, done, eq, target
import run as runlib

prog = target("tracept-loop-O0")
tmp = tempfile.mkdtemp(prefix="tracept-live-")
tdir = os.path.join(tmp, "tr")
out = os.path.join(tmp, "out.txt")
GIVE_UP = 120  # s: a hung tracepad, not a timing check


def links():
    """Live links of this user's sessions that name our trace: {pid: link}."""
    run = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    found = {}
    for link in glob.glob(os.path.join(run, "tracepad-%d-trace-*" % os.getuid())):
        try:
            if os.readlink(link) == os.path.realpath(tdir):
                found[int(link.rsplit("-", 1)[1])] = link
        except OSError:
            pass
    return found


def dump_values(text):
    return dict(re.findall(r"^  (\w+) = (\S+)$", text, re.M))


# stderr to a file: the program, left running by SIGINT, holds it open after tracepad ends
errf = open(os.path.join(tmp, "err.txt"), "w")
tp = subprocess.Popen([TRACEPAD, "trace", "-o", out, "--trace", tdir] + MODE +
                      ["-t", "f", "-a", "collect i, p->x", "--", prog, "spin"],
                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errf)
deadline = time.monotonic() + GIVE_UP
while time.monotonic() < deadline and tp.poll() is None and not links():
    time.sleep(0.05)
pids = list(links())
check(len(pids) == 1, "the session names its trace for live readers", pids)
pid = pids[0] if pids else 0

# The list, followed: its first 20 lines come while the session runs.
lverr = open(os.path.join(tmp, "lverr.txt"), "w+")
lv = subprocess.Popen([TRACEPAD, "frames", "-p", str(pid), "--live"], stdin=subprocess.DEVNULL,
                      stdout=subprocess.PIPE, stderr=lverr, text=True)
first = []
while len(first) < 20:
    line = lv.stdout.readline()
    if not line:
        break
    first.append(line.rstrip("\n"))
check(len(first) == 20 and tp.poll() is None,
      "frames -p PID --live: 20 frames listed while the trace runs", first)
eq([int(l.split()[0]) for l in first], list(range(20)), "numbered from 0, in order")
check(all(re.search(r"\btp 1\b.*0x[0-9a-f]+ f\+0x[0-9a-f]+ \(loop\.c:\d+\)", l)
          for l in first), "each of tracepoint 1, in f", first[:3])

# One frame in full while the session runs (waited for when not there yet): its values.
for n in (5, 150):
    d = runlib.run([TRACEPAD, "frames", "-p", str(pid), "--live", str(n)], timeout=GIVE_UP)
    i = n % 100
    eq(dump_values(d.out), {"i": str(i), "p_x": str(3 * i)},
       "frames -p PID --live %d: its values (i = %d, p->x = %d)" % (n, i, 3 * i))
    check(d.rc == 0 and tp.poll() is None, "shown before the trace ends", d)
d = runlib.run([TRACEPAD, "frames", "-p", str(pid), "0"])
check(d.rc == 0 and dump_values(d.out) == {"i": "0", "p_x": "0"},
      "frames -p PID N, not live: the frame from the trace so far", d)

# The end of the session ends the live list; it holds the frames of the whole trace.
tp.send_signal(signal.SIGINT)
try:
    tp.wait(timeout=GIVE_UP)
except subprocess.TimeoutExpired:
    tp.kill()
    tp.wait()
if pid:
    os.kill(pid, signal.SIGKILL)  # the program, detached and left running by SIGINT
# read on through the same buffered stream (communicate() would skip what it holds); the
# meson timeout bounds a list that does not end
rest = lv.stdout.read()
lv.wait()
lverr.seek(0)
check(lv.returncode == 0, "the live list ends by itself with the session", lverr.read())
live = first + [l for l in rest.splitlines() if l.strip()]
full = runlib.run([TRACEPAD, "frames", tdir])
rows = [l for l in full.out.splitlines() if l.strip()]
check(full.rc == 0 and len(rows) > 20 and live == rows,
      "the live list is the finished trace's list, line for line (%d frames)" % len(rows),
      "live %d rows, trace %d rows" % (len(live), len(rows)))
check(not links(), "the live link is gone with the session")
d = runlib.run([TRACEPAD, "frames", "-p", str(pid)])
check(d.rc == 1 and "no `tracepad trace --trace DIR` session" in d.err,
      "-p PID of no session: a clear error", d)
d = runlib.run([TRACEPAD, "frames", "--live", tdir])
check(d.rc == 2 and "--live goes with -p" in d.err, "--live without -p: a usage error", d)
shutil.rmtree(tmp)
done()
