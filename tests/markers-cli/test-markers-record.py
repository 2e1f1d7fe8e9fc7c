#!/usr/bin/env python3
"""tracepad markers record: the typed events of a launched target reach the trace through
libtracepad's rings, with the right classes and exact values, as read by tracepad dump and by
babeltrace2; the events committed before a SIGKILL survive it; usage errors are refused."""
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ["TP_SOURCE_ROOT"], "tests", "cli"))
from taplib import check, done  # noqa: E402

tp = os.environ["TRACEPAD"]
target = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="tp-markers-record-")
N = 50  # rounds per thread; the target fires 6 events a round in 2 threads
CLASSES = {"rec_int", "rec_str", "rec_two_i", "rec_two_sl", "rec_misc", "rec_lib"}


def record(name, *args, glob=None, rounds=N):
    d = os.path.join(tmp, name)
    cmd = [tp, "markers", "record"] + (["-e", glob] if glob else []) + \
        ["--trace", d, "--", target, str(rounds)] + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    return d, r


def fnv1a(s):
    h = 2166136261
    for b in s.encode():
        h = ((h ^ b) * 16777619) & 0xffffffff
    return h


def dump(d):
    """[(tid, class, {field: value})] from tracepad dump."""
    r = subprocess.run([tp, "dump", d], capture_output=True, text=True, timeout=30)
    evs = []
    for line in r.stdout.splitlines():
        f = line.split(None, 5)
        if len(f) < 5:
            continue
        tid = int(f[3].split("/")[1])
        fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', f[5] if len(f) > 5 else ""))
        evs.append((tid, f[4], fields))
    return r, evs


def babeltrace(d):
    """[(tid, class, {field: value})] from babeltrace2's text output."""
    r = subprocess.run(["babeltrace2", d], capture_output=True, text=True, timeout=30)
    evs = []
    for line in r.stdout.splitlines():
        m = re.search(r" (\w+): \{ producer_id = \d+ \}, \{ pid = \d+, tid = (\d+) \}, "
                      r"\{ (.*) \}$", line)
        if m:
            fields = {k: v.lower() if v.startswith("0x") else v  # it prints hex in capitals
                      for k, v in re.findall(r'(\w+) = ("[^"]*"|[^,]+)', m.group(3))}
            evs.append((int(m.group(2)), m.group(1), fields))
    return r, evs


def expected(base, rounds):
    """The events one thread fires, as dump prints their fields."""
    res = []
    for v in range(base, base + rounds):
        res.append(("rec_int", {"fmt": str(fnv1a("int %d %llu")), "a0": str(-v),
                                "a1": str(v * 1000000007)}))
        res.append(("rec_str", {"fmt": str(fnv1a("str %s %u")),
                                "a0": '"%s"' % ("odd" if v % 2 else "even"),
                                "a1": str(v & 0xff)}))
        res.append(("rec_two_i", {"fmt": str(fnv1a("two %d")), "a0": str(v)}))
        res.append(("rec_two_sl", {"fmt": str(fnv1a("two %s %ld")), "a0": '"x"',
                                   "a1": str(-v)}))
        bits = struct.unpack("<Q", struct.pack("<d", 0.5 * v))[0]
        res.append(("rec_misc", {"fmt": str(fnv1a("misc %hd %f %p")), "a0": str(-v),
                                 "a1_f64bits": "0x%x" % bits, "a2": "0x1000"}))
        res.append(("rec_lib", {"fmt": str(fnv1a("lib %s %d")), "a0": '"in lib"',
                                "a1": str(v)}))
    return res


def per_thread(evs):
    """The events of each thread in order, keyed by the thread's first rec_int a0."""
    by_tid = {}
    for tid, name, fields in evs:
        by_tid.setdefault(tid, []).append((name, fields))
    return {int(v[0][1].get("a0", "1")) * -1: v for v in by_tid.values()}


# ---- a whole run ----
d, r = record("all")
m = re.match(r"fired (\d+)", r.stdout)
fired = int(m.group(1)) if m else -1
check(r.returncode == 0 and fired == 2 * N * 6, "record: the target ran and exited 0",
      r.stdout + r.stderr)
dr, evs = dump(d)
check(dr.returncode == 0 and len(evs) == fired, "dump: as many events as the target fired",
      "%d events, fired %d\n%s" % (len(evs), fired, dr.stderr))
check({e[1] for e in evs} == CLASSES, "dump: one class per point and signature, also for "
      "the library's point",
      sorted({e[1] for e in evs}))
threads = per_thread(evs)
check(threads.get(0) == expected(0, N), "dump: the main thread's events, typed and exact",
      (threads.get(0) or [])[:6])
check(threads.get(1000) == expected(1000, N), "dump: the second thread's events, exact",
      (threads.get(1000) or [])[:6])
br, bevs = babeltrace(d)
check(br.returncode == 0 and len(bevs) == fired, "babeltrace2: as many events",
      "%d events\n%s" % (len(bevs), br.stderr[-2000:]))
bthreads = per_thread(bevs)
check(bthreads.get(0) == expected(0, N) and bthreads.get(1000) == expected(1000, N),
      "babeltrace2: the same classes and exact values", (bthreads.get(0) or [])[:6])

# ---- -e: only the matching points are enabled ----
d, r = record("glob", glob="rec_str,rec_two*", rounds=10)
dr, evs = dump(d)
names = {}
for e in evs:
    names[e[1]] = names.get(e[1], 0) + 1
check(r.returncode == 0 and names == {"rec_str": 20, "rec_two_i": 20, "rec_two_sl": 20},
      "-e GLOB: the events of the matching points only", names)

# ---- killed ----
d = os.path.join(tmp, "killed")
p = subprocess.Popen([tp, "markers", "record", "--trace", d, "--", target, "20", "wait"],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
line = p.stdout.readline()
with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
    kids = [int(x) for x in f.read().split()]
for k in kids:
    os.kill(k, signal.SIGKILL)
try:
    p.wait(timeout=30)
except subprocess.TimeoutExpired:
    p.kill()
    p.wait()
check(line.strip() == "fired 240" and len(kids) == 1 and p.returncode == 128 + 9,
      "killed target: tracepad exits 137", "%r %r %r" % (line, kids, p.returncode))
dr, evs = dump(d)
check(dr.returncode == 0 and len(evs) == 240 and per_thread(evs).get(0) == expected(0, 20),
      "killed target: every event committed before the kill is in the trace",
      "%d events\n%s" % (len(evs), dr.stderr))
br, bevs = babeltrace(d)
check(br.returncode == 0 and len(bevs) == 240, "killed target: babeltrace2 reads the trace",
      br.stderr[-2000:])

# ---- refusals ----
r = subprocess.run([tp, "markers", "record", "--", target, "1"], capture_output=True,
                   text=True, timeout=30)
check(r.returncode == 2 and "--trace" in r.stderr, "record without --trace: exit 2", r.stderr)
d, r = record("all", rounds=1)
check(r.returncode == 2 and "fired" not in r.stdout, "record into an existing trace: refused, "
      "the program is not run", r.stdout + r.stderr)
r = subprocess.run([tp, "markers", "list", "-e", "x", target], capture_output=True, text=True,
                   timeout=30)
check(r.returncode == 2, "-e outside record: exit 2", r.stderr)

shutil.rmtree(tmp, ignore_errors=True)
done()
