#!/usr/bin/env python3
"""The options tracepad calls shares with ltrace, strace and uftrace, each compared with what
the peer prints for the same target (calls-habits, built with -pg for uftrace; a peer that is
missing is a failing point): -s, -t/-tt/-ttt, -r, -l, --depth, --time-filter (uftrace -t),
--sort (uftrace report -s), the per-process summary of -c with -f (uftrace report --tid, and
ltrace -c -f for the sum), -S (strace), and the indentation bounded on a recursion 10,000
deep; with the engine of argv[2]."""
import collections
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

from tpcalls import ENGINE, check, done, calls, need_peer, run, target, LINE, TRACEPAD

prog = target("calls-habits")
# The -pg target writes gmon.out where it runs.
os.chdir(tempfile.mkdtemp(prefix="tp-habits-"))
PUTS = "libc.so.6:puts"
HF = "calls-habits:main,calls-habits:h_*"
# ltrace's line: [pid N] stamps prog->func(args) = ret
LT = re.compile(r"^(?:\[pid \d+\] )?(.*?)\S+->(\w+)\((.*)\)\s+= (.*)$")


def ltrace(opts, argv, what):
    """ltrace's lines for OPTS -- ARGV (stderr), or None (and a failing point for the
    comparison WHAT) when it is not installed."""
    if not need_peer("ltrace", "ltrace", what):
        return None
    r = subprocess.run(["ltrace"] + opts + ["--"] + argv, capture_output=True, text=True,
                       timeout=120)
    return [ln for ln in r.stderr.splitlines() if "SIGPROF" not in ln]


def uftrace(record, argv, cmds, what):
    """uftrace record RECORD -- ARGV (no library calls), then each command of @cmds (a list of
    `uftrace` argument lists, replay or report; or a function of the program's stdout that
    gives them) on the data: (the program's stdout, [their stdouts]), or None (and a failing
    point for the comparison WHAT) when uftrace is missing."""
    if not need_peer("uftrace", "uftrace", what):
        return None
    with tempfile.TemporaryDirectory(prefix="tp-uftrace-") as d:
        rec = subprocess.run(["uftrace", "record", "-d", d, "--no-libcall"] + record + argv,
                             capture_output=True, text=True, timeout=120)
        outs = [subprocess.run(["uftrace"] + c + ["-d", d], capture_output=True, text=True,
                               timeout=120).stdout
                for c in (cmds(rec.stdout) if callable(cmds) else cmds)]
    return rec.stdout, outs


def uf_report(text, funcs):
    """[(function, calls)] of a `uftrace report` table, in its order, for @funcs only."""
    rows = [re.match(r"^\s*(?:\S+ \S+\s+){2}(\d+)\s+(\S+)\s*$", ln)
            for ln in text.splitlines()]
    return [(m.group(2), int(m.group(1))) for m in rows if m and m.group(2) in funcs]


def own(r, func=None):
    """(stamps, function, args, ret) of tracepad's call lines; stamps: what lies between
    "[TID] " and OBJECT:FUNCTION."""
    out = []
    for ln in r.lines:
        m = re.match(r"^\[\d+\] ((?:[\d:.]+ +)*)( *)(\S+):(\w+)\((.*)\) = (.*)$", ln)
        if m and (func is None or m.group(4) == func):
            out.append((m.group(1), m.group(4), m.group(5), m.group(6)))
    return out


def shape(stamp):
    return re.sub(r"\d", "9", stamp.strip())


nat = run([prog, "str"])
check(nat.rc == 0 and "short" in nat.out, "native str", nat)

# -s SIZE: the string arguments as ltrace shows them (ltrace does not escape '"').
for opts in ([], ["-s", "10"], ["-s", "0"], ["-s", "100"]):
    r = calls(opts + ["-e", PUTS], [prog, "str"])
    got = [a.replace('\\"', '"') for _, _, a, _ in own(r, "puts")]
    check(r.rc == 0 and r.out == nat.out and len(got) == 3,
          "%s: three puts lines, program unchanged" % (opts or "default"), r)
    size = int(opts[1]) if opts else 32
    strs = ["0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ", "short",
            'tab\\there "quoted" and a newline\\n']
    want = []
    for s in strs:
        raw = s.replace("\\t", "\t").replace("\\n", "\n")
        cut = raw[:size]
        text = cut.replace("\t", "\\t").replace("\n", "\\n")
        want.append('"%s"%s' % (text, "..." if len(raw) > size else ""))
    check(got == want, "%s: strings cut at %d characters then ..." % (opts or "-s 32", size),
          "got  %r\nwant %r" % (got, want))
    lt = ltrace(opts + ["-e", "puts"], [prog, "str"],
                "%s: the same strings as ltrace's" % (opts or "default"))
    if lt is not None:
        peer = [m.group(3) for m in map(LT.match, lt) if m and m.group(2) == "puts"]
        # ltrace adds "..." to a string of exactly SIZE characters too; strace and tracepad
        # only when characters were left out.
        peer = [p[:-3] if p.endswith('"...') and g == p[:-3] else p
                for g, p in zip(got, peer)]
        check(got == peer, "%s: the same strings as ltrace's" % (opts or "default"),
              "tracepad %r\nltrace   %r" % (got, peer))

# -t, -tt, -ttt: ltrace's formats; the times lie within the run and never go back.
for t in ("-t", "-tt", "-ttt"):
    before = time.time()
    r = calls([t, "-e", PUTS], [prog, "str"])
    after = time.time()
    st = [s for s, _, _, _ in own(r, "puts")]
    check(r.rc == 0 and len(st) == 3, t + ": three puts lines", r)
    lt = ltrace([t, "-e", "puts"], [prog, "str"], t + ": the same shape as ltrace's")
    want = {"-t": "99:99:99", "-tt": "99:99:99.999999", "-ttt": "9999999999.999999"}[t]
    check(all(shape(s) == want for s in st), t + ": stamps shaped " + want, st)
    if lt is not None:
        peer = [shape(m.group(1)) for m in map(LT.match, lt) if m and m.group(2) == "puts"]
        check(peer and all(shape(s) == p for s, p in zip(st, peer)),
              t + ": the same shape as ltrace's", "%r %r" % (st, peer))
    if t == "-ttt" and st:
        secs = [float(s) for s in st]
        check(all(before - 1e-3 <= x <= after + 1e-3 for x in secs) and secs == sorted(secs),
              "-ttt: within the run, in order", "%r in [%f, %f]" % (secs, before, after))
    elif st:
        ev = [ln for ln in r.lines if "+++ exited" in ln]
        check(len(ev) == 1 and shape(ev[0].split()[1]) == want,
              t + ": the exit line is stamped too", ev)

# -r with -ttt: each -r is the difference of consecutive -ttt times, the first 0.
r = calls(["-ttt", "-r", "-e", PUTS], [prog, "str"])
pairs = [ln.split()[1:3] for ln in r.lines if re.match(r"^\[\d+\] [\d.]+ +[\d.]+ ", ln)]
check(len(pairs) == 4, "-r -ttt: four stamped lines (three calls, the exit)", r.lines)
ok = pairs and float(pairs[0][1]) == 0.0
for (a, _), (b, d) in zip(pairs, pairs[1:]):
    ok = ok and abs((float(b) - float(a)) - float(d)) <= 2.5e-6
check(ok, "-r: the time since the previous line", pairs)
lt = ltrace(["-r", "-e", "puts"], [prog, "str"], "-r: ltrace's shape")
if lt is not None:
    peer = [shape(m.group(1)) for m in map(LT.match, lt) if m]
    mine = [shape(ln.split(" ", 1)[1][:len(" 0.000000")+1]) for ln in
            calls(["-r", "-e", PUTS], [prog, "str"]).lines if "puts(" in ln]
    check(peer and mine == peer, "-r: ltrace's shape", "%r %r" % (mine, peer))

# -l LIB: every function of the library, among them all those ltrace -l shows.
r = calls(["-l", "libtpcalls"], [prog, "lib"])
fs = collections.Counter(f for _, f, _, _ in own(r))
objs = {m.group(3) for m in map(LINE.match, r.lines) if m}
check(r.rc == 0 and objs == {"libtpcalls.so"}, "-l: only the library's functions", objs)
check(all(fs[f] == 1 for f in ("tpc_a", "tpc_b", "tpc_c", "tpc_add")),
      "-l: tpc_a, tpc_b, tpc_c, tpc_add once each", fs)
lt = ltrace(["-l", "libtpcalls.so"], [prog, "lib"], "-l: every call ltrace -l shows")
if lt is not None:
    peer = collections.Counter(re.findall(r"->(\w+)\(", "\n".join(lt)))
    check(peer and all(fs[f] == n for f, n in peer.items()),
          "-l: every call ltrace -l shows", "ltrace %r\ntracepad %r" % (peer, fs))
r = calls(["-l", "a,b"], [prog, "lib"])
check(r.rc == 2 and len(r.err.strip().splitlines()) == 1, "-l a,b: refused in one line", r)

# --depth N: uftrace's nesting limit (main at 1).
for depth, want in ((1, {"main": 1}), (2, {"main": 1, "h_outer": 3}),
                    (3, {"main": 1, "h_outer": 3, "h_mid": 3})):
    r = calls(["-e", HF, "--depth", str(depth)], [prog, "nest"])
    got = collections.Counter(f for _, f, _, _ in own(r))
    check(r.rc == 0 and got == want, "--depth %d: %r" % (depth, want), got)
    if need_peer("uftrace", "uftrace", "--depth %d: the calls uftrace --depth shows" % depth):
        with tempfile.TemporaryDirectory(prefix="tp-uftrace-") as d:
            subprocess.run(["uftrace", "record", "-d", d, "--no-libcall", "--depth",
                            str(depth), prog, "nest"], capture_output=True, timeout=120)
            rp = subprocess.run(["uftrace", "replay", "-d", d, "-f", "none"],
                                capture_output=True, text=True, timeout=120)
        peer = collections.Counter(re.findall(r"^\s*(\w+)\(\)", rp.stdout, re.M))
        check(got == peer, "--depth %d: the calls uftrace --depth shows" % depth,
              "tracepad %r\nuftrace %r" % (got, peer))
r = calls(["--depth", "0"], [prog, "nest"])
check(r.rc == 2 and len(r.err.strip().splitlines()) == 1, "--depth 0: refused", r)

# --time-filter: the three 50 ms spins, not the quick calls (unless the program itself saw
# one last 10 ms, tracepad's stops included); the summary still counts every call.
r = calls(["-e", HF, "--time-filter", "10ms"], [prog, "time"])
got = collections.Counter(f for _, f, _, _ in own(r))
slow_quick = sum(float(q) >= 0.01 for q in re.findall(r"quick ([\d.]+)", r.out))
check(r.rc == 0 and got["h_spin"] == 3 and got["h_quick"] <= slow_quick
      and got["main"] == 1, "--time-filter 10ms: the spins and main, not the quick calls", got)
# As uftrace -t shows them: the three spins and main; a quick call only where its run saw
# one last that long (each program prints what it saw).
r = calls(["-e", HF, "--time-filter", "40ms"], [prog, "time"])
got = collections.Counter(f for _, f, _, _ in own(r))
uf = uftrace(["-t", "40ms"], [prog, "time"], [["replay", "-f", "none"]],
             "--time-filter 40ms: the calls uftrace -t 40ms shows")
if uf is not None:
    peer = collections.Counter(re.findall(r"^\s*(\w+)\(\)", uf[1][0], re.M))
    slow = {o: sum(float(q) >= 0.04 for q in re.findall(r"quick ([\d.]+)", t))
            for o, t in (("tracepad", r.out), ("uftrace", uf[0]))}
    check(r.rc == 0 and +got - collections.Counter(h_quick=slow["tracepad"]) ==
          +peer - collections.Counter(h_quick=slow["uftrace"]) and got["h_spin"] == 3,
          "--time-filter 40ms: the calls uftrace -t 40ms shows (main, the 3 spins)",
          "tracepad %r\nuftrace %r\nquick calls that slow %r" % (got, peer, slow))
r = calls(["-e", HF, "--time-filter", "10ms", "-c", "--json"], [prog, "time"])
fn = {f["function"]: f["calls"] for f in (r.summary() or {}).get("functions", [])}
check(fn.get("h_quick") == 3 and fn.get("h_spin") == 3, "--time-filter: -c counts all", fn)
for bad in ("10 ms", "x", "-1us", "5m"):
    r = calls(["--time-filter", bad], [prog, "time"])
    check(r.rc == 2 and len(r.err.strip().splitlines()) == 1,
          "--time-filter %r: refused in one line" % bad, r)

# --sort KEY for -c: the functions in that order.
for key, field, rev in (("calls", "calls", True), ("name", "function", False),
                        ("total", "total_ns", True), ("avg", "avg_ns", True),
                        ("max", "max_ns", True)):
    r = calls(["-e", HF, "-c", "--json", "--sort", key], [prog, "nest"])
    vals = [f[field] for f in (r.summary() or {}).get("functions", [])]
    check(len(vals) == 4 and vals == sorted(vals, reverse=rev),
          "--sort %s: by %s" % (key, field), vals)
# The orders of uftrace report -s on the same target (main 150 ms, 3 spins of 50 ms, 3 quick
# calls: no tie but in calls, which the man page breaks by total time, as -s call,total).
FUNCS = {"main", "h_spin", "h_quick"}
UF_SORT = {"calls": ["-s", "call,total"], "name": ["-s", "func"], "total": ["-s", "total"],
           "avg": ["--avg-total", "-s", "avg"], "min": ["--avg-total", "-s", "min"],
           "max": ["--avg-total", "-s", "max"]}
uf = uftrace([], [prog, "time"], [["report"] + v for v in UF_SORT.values()],
             "--sort: the orders of uftrace report -s")
for (key, opts), text in zip(UF_SORT.items(), uf[1] if uf else []):
    r = calls(["-e", HF, "-c", "--json", "--sort", key], [prog, "time"])
    mine = [f["function"] for f in (r.summary() or {}).get("functions", [])]
    peer = [f for f, _ in uf_report(text, FUNCS)] if "--avg-total" not in opts else [
        m.group(1) for m in (re.match(r"^\s*(?:\S+ \S+\s+){3}(\S+)\s*$", ln)
                             for ln in text.splitlines()) if m and m.group(1) in FUNCS]
    check(len(mine) == 3 and mine == peer, "--sort %s: uftrace report %s's order" %
          (key, " ".join(opts)), "tracepad %r\nuftrace %r" % (mine, peer))
r = calls(["-e", HF, "-c", "--sort", "calls"], [prog, "nest"])
rows = [ln.split()[-1] for ln in r.lines[1:] if ln.strip()]
check(rows[:1] and rows[-1] == "calls-habits:main" and len(rows) == 4,
      "--sort calls: the text table too, main (1 call) last", r.lines)
r = calls(["--sort", "calls"], [prog, "nest"])
check(r.rc == 2, "--sort without -c: refused", r)
r = calls(["-c", "--sort", "speed"], [prog, "nest"])
check(r.rc == 2 and "speed" in r.err, "--sort speed: refused, naming it", r)

# -c with -f over two processes: their sum, then one summary per process.
r = calls(["-f", "-e", "calls-habits:h_inner", "-c", "--json"], [prog, "fork"])
m = re.search(r"parent (\d+) child (\d+)", r.out)
sm = r.summary() or {}
per = {p.get("pid"): [f["calls"] for f in p.get("functions", [])]
       for p in sm.get("processes", [])}
tot = [f["calls"] for f in sm.get("functions", [])]
check(m and per == {int(m.group(1)): [3], int(m.group(2)): [2]} and tot == [5],
      "-c -f --json: h_inner 3 calls in the parent, 2 in the child, 5 in all",
      "%r %r" % (per, tot))
r = calls(["-f", "-e", "calls-habits:h_inner", "-c"], [prog, "fork"])
heads = re.findall(r"^process (\d+):$", r.text, re.M)
check(m and len(heads) == 2 and r.text.count("calls-habits:h_inner") == 3,
      "-c -f: a table for all, then one per process", r.text)

# The per-process tables as uftrace report --tid shows each process, the first as ltrace -c -f
# sums them (uftrace follows the fork itself; each run's pids from what it prints).
HF_FORK = ["-f", "-e", "calls-habits:main,calls-habits:h_inner", "-c", "--json"]
r = calls(HF_FORK, [prog, "fork"])
m = re.search(r"parent (\d+) child (\d+)", r.out)
sm = r.summary() or {}
mine = {("parent" if p.get("pid") == int(m.group(1)) else "child"):
        sorted((f["function"], f["calls"]) for f in p.get("functions", []))
        for p in sm.get("processes", [])} if m else {}


def by_tid(out):
    """uftrace report --tid of the parent, then of the child, as the program printed them."""
    pm = re.search(r"parent (\d+) child (\d+)", out)
    return [["report", "--tid", pm.group(k)] for k in (1, 2)] if pm else []


uf = uftrace([], [prog, "fork"], by_tid, "-c -f: the per-process tables of uftrace report --tid")
if uf is not None:
    peer = dict(zip(("parent", "child"), (sorted(uf_report(t, {"main", "h_inner"}))
                                          for t in uf[1])))
    check(mine and mine == peer,
          "-c -f: per process, the calls uftrace report --tid counts (parent main and 3 "
          "h_inner, child 2 h_inner)", "tracepad %r\nuftrace %r" % (mine, peer))
if need_peer("ltrace", "ltrace", "-c -f: the sum of the processes, as ltrace -c -f counts"):
    lt = subprocess.run(["ltrace", "-c", "-f", "-x", "h_inner", "-e", "waitpid", prog, "fork"],
                        capture_output=True, text=True, timeout=120)
    peer = dict((f, int(n)) for n, f in re.findall(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+"
                                                   r"(\w+)\s*$", lt.stderr, re.M))
    r = calls(["-f", "-e", "calls-habits:h_inner,libc:waitpid", "-c", "--json"], [prog, "fork"])
    tot = {f["function"]: f["calls"] for f in (r.summary() or {}).get("functions", [])}
    check(tot == peer == {"h_inner": 5, "waitpid": 1},
          "-c -f: the first table sums the processes as ltrace -c -f does",
          "tracepad %r\nltrace %r" % (tot, peer))

# Indentation bounded: a recursion 10,000 deep writes lines of bounded length, the depth
# said as {N} past 50 levels.
r = calls(["-e", "calls-habits:h_rec"], [prog, "deep", "10000"])
rec = [ln for ln in r.lines if "h_rec(" in ln]
longest = max((len(ln) for ln in rec), default=0)
deepest = [ln for ln in rec if "h_rec(1) = 1" in ln]
check(r.rc == 0 and len(rec) == 10001 and longest < 200,
      "deep: 10,001 lines, none over 200 characters", "%d lines, longest %d" %
      (len(rec), longest))
check(deepest and re.match(r"^\[\d+\]  {100}\{9999\} calls-habits:h_rec\(1\) = 1$",
                           deepest[0]), "deep: depth 9999 written as {9999}", deepest[:1])
shallow = [ln for ln in rec if "h_rec(9960) = 9960" in ln]
check(shallow and re.match(r"^\[\d+\]  {80}calls-habits:", shallow[0]),
      "deep: depth 40 still indented by 80 spaces", shallow[:1])
# Times (-T, --trace): a call's time is the program's, from when its thread ran on after the
# entry stop to its return, less the stops of the calls it made; in the trace, each
# call_return's duration_ns is its time stamp minus its call_entry's, exactly.
with tempfile.TemporaryDirectory(prefix="tp-habits-trace-") as d:
    r = calls(["-e", HF, "-T", "--trace", os.path.join(d, "t")], [prog, "time"])
    dump = subprocess.run([TRACEPAD, "dump", "--json", os.path.join(d, "t")],
                          capture_output=True, text=True, timeout=120)
evs = [json.loads(ln) for ln in dump.stdout.splitlines() if ln.startswith("{")]
stack, pairs = [], []
for e in evs:
    if e["name"] == "call_entry":
        stack.append(e)
    elif e["name"] == "call_return" and stack:
        b = stack.pop()
        pairs.append((e["fields"]["function"], b["fields"]["function"],
                      e["fields"]["duration_ns"], e["ts"] - b["ts"]))
check(dump.returncode == 0 and len(pairs) == 7 and all(f == g for f, g, _, _ in pairs),
      "--trace: 7 calls, each return after its entry", pairs)
bad = [p for p in pairs if p[2] != p[3]]
check(pairs and not bad, "--trace: duration_ns == return time - entry time, exactly", bad)
secs = {f: [] for f in ("h_spin", "h_quick", "main")}
for ln in r.lines:
    m = re.match(r"^\[\d+\] +\S+:(\w+)\(.*\) = .* <([\d.]+)>$", ln)
    if m and m.group(1) in secs:
        secs[m.group(1)].append(float(m.group(2)))
check(len(secs["h_spin"]) == 3 and all(s >= 0.049 for s in secs["h_spin"]),
      "-T: each 50 ms spin lasts its 50 ms (the program's own time)", secs)
us = {f: [round(x * 1e6) for x in v] for f, v in secs.items()}
check(len(us["main"]) == 1 and us["main"][0] >= sum(us["h_spin"] + us["h_quick"]),
      "-T: main lasts at least as long as the calls it made", secs)

# -T's accuracy (issue 15): a call's time is its own, not the tracer's. The target spins 200 us
# by its own clock 101 times (returning what its clock saw) and copies 4 bytes 21 times. A
# spin that a busy machine preempts lasts longer for the program too: those the program saw
# last 200-220 us (at least 5) must be reported as 200 us +- 10%, and each spin as the program
# saw it; medians, so that a rare spin the machine upset does not decide.
r = calls(["-T", "-e", "calls-habits:h_spin_us", "-e", "libc:memcpy"], [prog, "honest"])
spins = [(float(m.group(2)) * 1e6, int(m.group(1)) / 1e3) for m in (
    re.match(r"^\[\d+\] +\S+:h_spin_us\(200\) = (\d+) <([\d.]+)>$", ln) for ln in r.lines) if m]
copies = [float(m.group(1)) * 1e6 for m in (
    re.match(r"^\[\d+\] +\S+:memcpy\(.*, 4\) = \S+ <([\d.]+)>$", ln) for ln in r.lines) if m]
check(r.rc == 0 and len(spins) == 101 and len(copies) == 21 and "copied abc" in r.out,
      "-T: 101 spins and 21 memcpy calls reported with their times", r.lines[-5:])
if spins:
    timely = [t for t, own in spins if own <= 220]
    med = statistics.median(timely) if timely else None
    check(len(timely) >= 5 and 180 <= med <= 220,
          "-T: a 200 us spin is reported as 200 us +- 10%% (median %s of the %d spins the "
          "program timed at 200-220 us)" % (med, len(timely)), spins)
    off = statistics.median(abs(t - own) for t, own in spins)
    check(off <= 20, "-T: each spin's time is the program's own, +- 10%% of 200 us (median "
          "difference %.1f us)" % off, spins)
if copies:
    med = statistics.median(copies)
    check(med < 2, "-T: a 4-byte memcpy is reported under 2 us (median %.1f us)" % med, copies)

# -S: system calls named and shown as strace shows them, the same lines for the same calls.
SYS = ("openat", "read", "write", "close", "mmap", "mprotect", "munmap", "brk", "exit_group")
SYSRE = re.compile(r"^(?:SYS_)?((?:%s)\(.*)$" % "|".join(SYS))


def norm(ln):
    return re.sub(r"0x[0-9a-f]{6,}", "ADDR", ln)


nat = run([prog, "sys"])
r = calls(["-S", "-e", "!*"], [prog, "sys"])
mine = [norm(m.group(1)) for m in (SYSRE.match(re.sub(r"^\[\d+\] +", "", ln))
                                   for ln in r.lines) if m]
check(r.rc == 0 and r.out == nat.out, "-S: the program's output unchanged", r)
for want in ('write(3, "hello", 5) = 5', "close(3) = 0",
             "close(3) = -1 EBADF (Bad file descriptor)",
             'openat(AT_FDCWD, "/dev/null", O_WRONLY) = 3', "exit_group(0) = ?"):
    check(want in mine, "-S: " + want, mine[-12:])
if need_peer("strace", "strace", "-S: the lines strace prints"):
    with tempfile.NamedTemporaryFile("r", prefix="tp-strace-") as f:
        subprocess.run(["strace", "-o", f.name, "-e", "trace=" + ",".join(SYS), prog, "sys"],
                       capture_output=True, timeout=120)
        peer = [norm(m.group(1)) for m in map(SYSRE.match, f.read().splitlines()) if m]
    peer = [re.sub(r"\)\s+= ", ") = ", ln) for ln in peer]
    diff = [(a, b) for a, b in zip(mine, peer) if a != b]
    check(len(mine) == len(peer) and not diff, "-S: the lines strace prints (%d)" % len(peer),
          "%d vs %d lines; first differences %r" % (len(mine), len(peer), diff[:3]),
          todo="agent engine: its load made malloc's first brk before the program's "
          "(issue 12)" if ENGINE == "agent" else None)
r = calls(["-S", "-e", "calls-habits:h_inner"], [prog, "nest"])
check(r.rc == 0 and any(re.match(r"^\[\d+\] SYS_write\(1, ", ln) for ln in r.lines)
      and any(re.match(r"^\[\d+\] calls-habits:h_inner\(", ln) for ln in r.lines),
      "-S with -e: call lines and system call lines together", r.lines[-8:])
done()
