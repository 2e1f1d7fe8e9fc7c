#!/usr/bin/env python3
"""tracepad markers record: the typed events of a launched target reach the trace through
libtracepad's rings, with the right classes and exact values, as read by tracepad dump (with
each event's formatted text) and by babeltrace2, also those of a library the target dlopens
after it started; the events committed before a SIGKILL survive it; usage errors are
refused."""
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, done  # noqa: E402

tp = os.environ["TRACEPAD"]
target, dl_lib = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="tp-markers-record-")
N = 50  # rounds per thread; the target fires 6 events a round in 2 threads
CLASSES = {"rec_int", "rec_str", "rec_two_i", "rec_two_sl", "rec_misc", "rec_lib"}
FORMATS = {"rec_int": "int %d %llu", "rec_str": "str %s %u", "rec_two_i": "two %d",
           "rec_two_sl": "two %s %ld", "rec_misc": "misc %hd %f %p", "rec_lib": "lib %s %d",
           "rec_dl": "dl %s %.3f %d"}


def record(name, *args, glob=None, rounds=N):
    d = os.path.join(tmp, name)
    cmd = [tp, "markers", "record"] + (["-e", glob] if glob else []) + \
        ["--trace", d, "--", target, str(rounds)] + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    return d, r


def cfmt(fmt, *args):
    """printf as C would print these arguments (Python's % without length modifiers, %p)."""
    fmt = re.sub(r"%([-+ #0-9.]*)(?:hh|h|ll|l|L|q|j|z|t)?([a-zA-Z])",
                 lambda m: "%#x" if m.group(2) == "p" else "%" + m.group(1) + m.group(2), fmt)
    return fmt % args


def g(x):
    """A double as dump and babeltrace2 print it: fewest digits that read back, no exponent
    below 1e17."""
    for p in range(1, 18):
        s = "%.*g" % (p, x)
        if float(s) == x:
            break
    e = int(("%.*e" % (p - 1, x)).split("e")[1]) if x else 0
    return "%.*g" % (e + 1 if p <= e < 17 else p, x)


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


def expected(base, rounds, text=True):
    """The events one thread fires, as dump prints their fields (babeltrace2: no text)."""
    res = []

    def ev(cls, fields, *args):
        if text:
            fields["text"] = '"%s"' % cfmt(FORMATS[cls], *args)
        res.append((cls, fields))

    for v in range(base, base + rounds):
        ev("rec_int", {"a0": str(-v), "a1": str(v * 1000000007)}, -v, v * 1000000007)
        s = "odd" if v % 2 else "even"
        ev("rec_str", {"a0": '"%s"' % s, "a1": str(v & 0xff)}, s, v & 0xff)
        ev("rec_two_i", {"a0": str(v)}, v)
        ev("rec_two_sl", {"a0": '"x"', "a1": str(-v)}, "x", -v)
        ev("rec_misc", {"a0": str(-v), "a1": g(0.5 * v), "a2": "0x1000"}, -v, 0.5 * v, 0x1000)
        ev("rec_lib", {"a0": '"in lib"', "a1": str(v)}, "in lib", v)
    return res


def strip_fmt(evs):
    """Events without their "fmt" field, after checking that each class has one format id
    (one format per class in this target)."""
    ids, out = {}, []
    for tid, name, fields in evs:
        ids.setdefault(name, set()).add(fields.pop("fmt", None))
        out.append((tid, name, fields))
    return out, all(len(v) == 1 and None not in v for v in ids.values())


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
evs, one_fmt = strip_fmt(evs)
check(one_fmt, "dump: one format id per class")
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
bthreads = per_thread(strip_fmt(bevs)[0])
check(bthreads.get(0) == expected(0, N, False) and
      bthreads.get(1000) == expected(1000, N, False),
      "babeltrace2: the same classes and exact values, doubles as floats",
      (bthreads.get(0) or [])[:6])

# ---- the text in JSON, and a damaged .formats ----
jr = subprocess.run([tp, "dump", "--json", d], capture_output=True, text=True, timeout=30)
# Both threads fire from the start, so either may own the first event: check every rec_int.
jints = [e for e in (json.loads(ln) for ln in jr.stdout.splitlines()) if e.get("name") == "rec_int"]
check(jr.returncode == 0 and len(jints) == 2 * N and
      any(e.get("fields", {}).get("a1") == 0 for e in jints) and
      all(e.get("text") == "int %d %d" % (e["fields"]["a0"], e["fields"]["a1"]) for e in jints),
      "dump --json: the text beside the fields", jints[:2])
bad = os.path.join(tmp, "badfmt")
shutil.copytree(d, bad)
with open(os.path.join(bad, ".formats")) as f:
    good = [ln for ln in f.read().splitlines() if "\tint %d %llu" in ln]
with open(os.path.join(bad, ".formats"), "w") as f:
    f.write("garbage\n99999999\trec_int\ti\tx\n1\trec_str\tzz\t%s\n" + "\n".join(good) +
            "\n")
br = subprocess.run([tp, "dump", bad], capture_output=True, text=True, timeout=30)
lines = br.stdout.splitlines()
check(br.returncode == 0 and len(lines) == fired and
      br.stderr.count("malformed") == 1 and len(br.stderr.strip().splitlines()) == 1 and
      all((" text=" in ln) == (" rec_int " in ln) for ln in lines),
      "a damaged .formats: one warning, every event, text only where its format is known",
      br.stderr + "\n".join(lines[:3]))

# ---- a library loaded by dlopen after the start: its class reaches the trace ----
d, r = record("dlopen", "run", dl_lib, rounds=5)
m = re.match(r"fired (\d+)", r.stdout)
dr, evs = dump(d)
dl = [e[2] for e in strip_fmt(evs)[0] if e[1] == "rec_dl"]
check(r.returncode == 0 and m and int(m.group(1)) == 2 * 5 * 6 + 5 and len(evs) == 65,
      "dlopen: every event recorded", "%s %d" % (r.stdout, len(evs)))
check(dl == [{"a0": '"late"', "a1": g(1.25 * v), "a2": str(v),
              "text": '"%s"' % cfmt("dl %s %.3f %d", "late", 1.25 * v, v)} for v in range(5)],
      "dlopen: the late library's events, typed and formatted", dl)
br, bevs = babeltrace(d)
check(br.returncode == 0 and [e[2]["a1"] for e in bevs if e[1] == "rec_dl"] ==
      [g(1.25 * v) for v in range(5)], "dlopen: babeltrace2 reads the late class's doubles",
      br.stdout[-1000:] + br.stderr[-1000:])

# ---- libtracepad checked by valgrind: a wrapper that is not an ELF file is run too ----
vg = shutil.which("valgrind")
if vg:
    d = os.path.join(tmp, "valgrind")
    r = subprocess.run([tp, "markers", "record", "--trace", d, "--", vg, "-q",
                        "--error-exitcode=9", target, "3", "run", dl_lib], capture_output=True,
                       text=True, timeout=120)
    dr, evs = dump(d)
    evs = strip_fmt(evs)[0]
    ok_dl = [e[2]["text"] for e in evs if e[1] == "rec_dl"] == \
        ['"%s"' % cfmt("dl %s %.3f %d", "late", 1.25 * v, v) for v in range(3)]
    # Without the notes of an ELF file, rec_two's first signature is named rec_two.
    check(r.returncode == 0 and len(evs) == 2 * 3 * 6 + 3 and ok_dl and
          (per_thread(evs).get(1000) or [])[:2] == expected(1000, 3)[:2],
          "under valgrind: no error in libtracepad, every event recorded",
          r.stdout + r.stderr[-2000:])
else:
    print("# valgrind is not installed: libtracepad is not run under it")

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


def children(pid):
    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
        return [int(x) for x in f.read().split()]


# the program is the child of tracepad's tracer process, itself tracepad's child (the keeper)
kids = [k for t in children(p.pid) for k in children(t)]
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
check(dr.returncode == 0 and len(evs) == 240 and
      per_thread(strip_fmt(evs)[0]).get(0) == expected(0, 20),
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
