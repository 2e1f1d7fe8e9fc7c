#!/usr/bin/env python3
"""tracepad trace -p PID: attach to a running program, trace, detach with its code
byte-identical and the program running on (several cycles); a program that exits while
traced ends the trace with exact counts; SIGINT detaches from a launched program, which
runs on."""
import os
import signal
import subprocess
import tempfile
import time

from tptrace import FAST, MODE, TRACEPAD, TraceRun, attached, check, done, target, trace

prog = target("tracept-loop-O0")


def text(pid):
    """The bytes of the program's executable file mappings."""
    blobs = {}
    with open("/proc/%d/maps" % pid) as f:
        maps = [l.split(None, 5) for l in f]
    with open("/proc/%d/mem" % pid, "rb", buffering=0) as mem:
        for parts in maps:
            if "x" in parts[1] and len(parts) > 5 and parts[5].startswith("/"):
                start, end = (int(x, 16) for x in parts[0].split("-"))
                mem.seek(start)
                blobs[start] = mem.read(end - start)
    return blobs


def spawn(*args):
    p = subprocess.Popen([prog] + list(args), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    line = p.stdout.readline()
    check(line == b"ready\n", "%s %s is ready" % (os.path.basename(prog), " ".join(args)),
          line)
    return p


p = spawn("spin")
t0 = text(p.pid)
for cycle in range(5):
    r = attached(p.pid, 5, ["-t", "f if i % 3 == 0", "-a", "collect i, p->x"])
    c = r.counts.get(1)
    ok = (r.rc == 0 and c is not None and c.collected >= 5 and r.exact(1) and
          len(r.frames) == c.collected and
          all(f.int("i") % 3 == 0 and f.int("p->x") == 3 * f.int("i") for f in r.frames))
    check(ok, "cycle %d: attached, %s hits, exact, the right values" %
          (cycle, c.hits if c else "no"), r)
    check(p.poll() is None, "cycle %d: the program runs on after the detach" % cycle)
    now = text(p.pid)
    # --fast: the agent and libZydis stay loaded, inert (INTERNALS.md): the program's own
    # code must be as it was
    check(all(now.get(k) == v for k, v in t0.items()) and (FAST or now == t0),
          "cycle %d: its code is byte-identical after the detach" % cycle)
p.send_signal(signal.SIGTERM)
p.wait(timeout=30)
check(p.returncode == -signal.SIGTERM, "it ends on SIGTERM, not a trap of ours",
      p.returncode)

# The program exits while traced: the trace ends with it, counts exact.
p = spawn("slow", "300")
r = trace(["-p", str(p.pid), "-t", "f", "-a", "collect i"])
p.wait(timeout=60)
c = r.counts.get(1)
check(r.rc == 0 and c is not None and 0 < c.hits <= 300 and r.exact(1) and
      c.collected == c.hits, "exits mid-trace: the trace ends with it, exact", r)
iv = [f.int("i") for f in r.frames]
check(iv == list(range(iv[0], 300)) if iv else False,
      "exits mid-trace: every call up to its end, in order", iv[:5])
check(p.returncode == 0, "the program exited 0", p.returncode)

# SIGINT to tracepad: it detaches and reports; the launched program runs on (holding the
# pipes it inherited: the report goes to a file).
outfile = tempfile.NamedTemporaryFile("r", suffix=".txt", delete=False).name
tp = subprocess.Popen([TRACEPAD, "trace", "-o", outfile] + MODE + ["-t", "f", "-a", "collect i",
                       "--", prog, "spin"],
                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
ready = tp.stdout.readline()
time.sleep(0.3)
tp.send_signal(signal.SIGINT)
try:
    tp.wait(timeout=60)
except subprocess.TimeoutExpired:
    tp.kill()
    tp.wait()
r = TraceRun([TRACEPAD], tp.returncode, "", open(outfile).read())
os.unlink(outfile)
c = r.counts.get(1)
check(ready == b"ready\n" and tp.returncode == 130 and c is not None and c.hits > 0 and
      r.exact(1), "SIGINT: tracepad reports exact counts and exits 130", r)
pid = r.frames[0].tid if r.frames else 0
alive = False
if pid:
    try:
        os.kill(pid, 0)
        alive = open("/proc/%d/stat" % pid).read().split()[2] != "Z"
    except OSError:
        pass
check(alive, "SIGINT: the program runs on after the detach", pid)
if pid:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
done()
