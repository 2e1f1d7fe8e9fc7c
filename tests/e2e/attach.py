#!/usr/bin/env python3
"""e2e: `tracepad count --engine trapflag -p PID` injects the agent into a running program.
A tracepad killed while counting leaves the agent to disable itself; a new session works.
spin (one thread) and attach4 (4 threads checking their own work, malloc, a signal handler)
are counted (> 0 instructions, every thread), go on running and pass their own checks; their
code is byte-identical after detach (/proc/PID/mem), and the only mappings left are the
agent's and libZydis's (INTERNALS.md), the same after 20 attach/detach cycles as after one.
Bad input: a missing pid, a static program, a stopped process: one clear line, exit 2."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import RUN_TIMEOUT, TRACEPAD, Checks, target  # noqa: E402

CYCLES = 20
c = Checks("attach")
LEFT = ("libtracepad-agent.so", "libZydis.so")


def maps(pid):
    """[(start, end, perms, path)] of /proc/PID/maps."""
    out = []
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split(None, 5)
            start, end = (int(x, 16) for x in parts[0].split("-"))
            out.append((start, end, parts[1], parts[5].strip() if len(parts) > 5 else ""))
    return out


def text(pid, before_maps):
    """The bytes of every executable file mapping in `before_maps`, read now."""
    blobs = {}
    with open("/proc/%d/mem" % pid, "rb", buffering=0) as mem:
        for start, end, perms, path in before_maps:
            if "x" in perms and path.startswith("/"):
                mem.seek(start)
                blobs[(start, path)] = mem.read(end - start)
    return blobs


def stable(m):
    """Mappings that the program itself may change (its stack, its heap) left out."""
    return [e for e in m if e[3] not in ("[stack]", "[heap]")]


def new_mappings(before, after):
    """Mappings of `after` that are neither in `before` nor the agent's (its files, and its
    .bss: anonymous memory right after one of them, maybe merged with an area before)."""
    ends = {e[1] for e in after if e[3].endswith(LEFT) or os.path.basename(e[3]).startswith(LEFT)}
    old = set(stable(before))
    left = []
    for e in stable(after):
        if e in old:
            continue
        if any(n in e[3] for n in LEFT):
            continue
        if not e[3] and e[2] == "rw-p" and e[0] in ends:
            continue
        left.append(e)
    return left


def report_of(out):
    try:
        with open(out) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
    finally:
        if os.path.exists(out):
            os.unlink(out)


def json_out():
    fd, out = tempfile.mkstemp(prefix="tp-attach-", suffix=".json")
    os.close(fd)
    os.unlink(out)
    return out


def count_p(pid, seconds, extra=()):
    """count -p PID --duration SECONDS: (rc, stderr, report)."""
    out = json_out()
    argv = [TRACEPAD, "count", "--engine", "trapflag", "--json", "-o", out,
            "--duration", str(seconds)] + list(extra) + ["-p", str(pid)]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        return r.returncode, r.stderr, report_of(out)
    except subprocess.TimeoutExpired:
        report_of(out)
        return None, "timed out", None


def sym_addr(pid, prog, name):
    """Run-time address of the data symbol `name` of `prog` (PIE) in process `pid`."""
    nm = subprocess.run(["nm", prog], capture_output=True, text=True).stdout
    m = re.search(r"^([0-9a-f]+) [bBdD] %s$" % re.escape(name), nm, re.M)
    real = os.path.realpath(prog)
    base = min((e[0] for e in maps(pid) if e[3] == real), default=None)
    return int(m.group(1), 16) + base if m and base is not None else None


def read_words(pid, addr, n):
    with open("/proc/%d/mem" % pid, "rb", buffering=0) as mem:
        mem.seek(addr)
        data = mem.read(8 * n)
    return [int.from_bytes(data[i:i + 8], "little") for i in range(0, 8 * n, 8)]


def counting(pid):
    """The agent counts: its control block is mapped and tracepad has let go."""
    with open("/proc/%d/status" % pid) as f:
        traced = re.search(r"^TracerPid:\s*(\d+)", f.read(), re.M).group(1) != "0"
    return not traced and any("tracepad-ctl" in e[3] for e in maps(pid))


def wait_for(cond, tp):
    """Poll `cond` until it holds or tracepad ended (a hang is cut by RUN_TIMEOUT)."""
    end = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < end and tp.poll() is None:
        if cond():
            return True
        time.sleep(0.005)
    return False


def count_progress(pid, addr, n, then=None):
    """count -p PID until each of the `n` counters at `addr` moved while the agent counted
    (so each thread surely ran instructions under it), then SIGINT, or `then()`.
    No time limit decides anything: the program's own progress does."""
    out = json_out()
    tp = subprocess.Popen([TRACEPAD, "count", "--engine", "trapflag", "--json", "-o", out,
                           "-p", str(pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    moved = False
    if wait_for(lambda: counting(pid), tp):
        before = read_words(pid, addr, n)
        moved = wait_for(lambda: all(a > b for a, b in
                                     zip(read_words(pid, addr, n), before)), tp)
        if then:
            then()
        else:
            tp.send_signal(signal.SIGINT)
    try:
        _, err = tp.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        tp.kill()
        _, err = tp.communicate()
    return tp.returncode, err + ("" if moved else " (the counters never moved)"), \
        report_of(out) if moved else None


def start(argv):
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    first = p.stdout.readline().split()
    if len(first) != 2 or first[0] != "pid":
        p.kill()
        p.communicate()
        return None, None
    return p, int(first[1])


def finish(p, stdin=""):
    try:
        out, _ = p.communicate(stdin, timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    return p.returncode, out


def good_report(rep, what, nthreads=None):
    if not c.ok(isinstance(rep, dict), what + ": JSON report", rep):
        return
    c.eq(rep.get("engine"), "trapflag", what + ": engine")
    c.eq(rep.get("exit"), None, what + ": the program goes on (exit null)")
    n = rep.get("instructions")
    c.ok(isinstance(n, int) and n > 0, what + ": instructions counted", n)
    th = rep.get("threads") or []
    c.eq(sum(t.get("instructions", 0) for t in th), n, what + ": threads sum to the total")
    if nthreads:
        c.ok(len([t for t in th if t.get("instructions", 0) > 0]) >= nthreads,
             what + ": %d threads counted" % nthreads, th)


# One thread: spin ticks every 20 ms; its text is the same after detach.
sp, pid = start([target("spin"), "60"])
if c.ok(sp is not None, "spin started"):
    ticks = sym_addr(pid, target("spin"), "ticks")
    c.ok(ticks is not None, "spin: address of ticks")
    m0 = maps(pid)
    t0 = text(pid, m0)
    rc, err, rep = count_progress(pid, ticks, 1)
    c.eq(rc, 0, "spin: count -p exits 0 at SIGINT", err)
    good_report(rep, "spin", 1)
    m1 = maps(pid)
    c.eq(text(pid, m0), t0, "spin: code byte-identical after detach")
    c.eq(new_mappings(m0, m1), [], "spin: no mapping left but the agent's")
    c.ok(not any("tracepad-ctl" in e[3] for e in m1), "spin: control block unmapped")
    rc, err, rep = count_p(pid, 0.3)
    c.eq(rc, 0, "spin: --duration ends the count", err)
    c.ok(isinstance(rep, dict) and rep.get("exit", 0) is None, "spin: --duration report", rep)
    c.eq(new_mappings(m0, maps(pid)), [], "spin: still no mapping left but the agent's")
    sp.send_signal(signal.SIGTERM)
    rc, out = finish(sp)
    c.eq(rc, -signal.SIGTERM, "spin: alive until told to stop", out)

# Four threads, CYCLES cycles of attach, count, detach.
ap, pid = start([target("attach4")])
if c.ok(ap is not None, "attach4 started"):
    m0 = maps(pid)
    t0 = text(pid, m0)
    rounds = sym_addr(pid, target("attach4"), "attach4_rounds")
    c.ok(rounds is not None, "attach4: address of its counters")
    failures, first_maps, drift = [], None, []
    for i in range(CYCLES if rounds is not None else 0):
        rc, err, rep = count_progress(pid, rounds, 4)
        n = rep.get("instructions") if isinstance(rep, dict) else None
        counted = [t for t in (rep or {}).get("threads", []) if t.get("instructions", 0) > 0]
        if rc != 0 or not isinstance(n, int) or n <= 0 or len(counted) < 4:
            failures.append((i, rc, err.strip()[-300:], n, len(counted)))
        if ap.poll() is not None:
            failures.append((i, "attach4 ended", ap.returncode))
            break
        m = maps(pid)
        if first_maps is None:
            first_maps = m
        elif stable(m) != stable(first_maps):
            drift.append((i, sorted(set(stable(m)) ^ set(stable(first_maps)))))
    c.eq(failures, [], "attach4: %d cycles, each counted > 0 in its 4 threads" % CYCLES)
    # tracepad killed while the agent counts: the agent disables itself once it sees
    # tracepad gone, and a new session then takes over (until then it is refused).
    if rounds is not None and ap.poll() is None:
        tp = subprocess.Popen([TRACEPAD, "count", "--engine", "trapflag", "-p", str(pid)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        killed = wait_for(lambda: counting(pid), tp)
        tp.kill()
        tp.communicate()
        c.ok(killed, "SIGKILL: tracepad killed while the agent counted")
        attempts = []
        for _ in range(300):
            rc, err, rep = count_p(pid, 0.1)
            attempts.append((rc, err.strip()[-120:]))
            if rc == 0 or "under way" not in err:
                break
            time.sleep(0.05)
        c.eq(attempts[-1][0], 0, "SIGKILL: a new session once the agent let go",
             attempts[-3:])
        c.ok(isinstance(rep, dict) and rep.get("instructions", 0) >= 0,
             "SIGKILL: the new session's report", rep)
    if ap.poll() is None:
        m1 = maps(pid)
        c.eq(text(pid, m0), t0, "attach4: code byte-identical after %d cycles" % CYCLES)
        c.eq(new_mappings(m0, m1), [], "attach4: no mapping left but the agent's")
        c.eq(drift, [], "attach4: the mappings after each cycle are those after the first")
        c.ok(not any("tracepad-ctl" in e[3] for e in m1), "attach4: control block unmapped")
    rc, out = finish(ap, "stop\n")
    c.eq(rc, 0, "attach4: its own checks pass after %d cycles" % CYCLES, out)
    c.ok(out.startswith("ok: "), "attach4: says ok", out)

# The program ends while counted: tracepad reports what was counted up to its end.
sp, pid = start([target("spin"), "60"])
if c.ok(sp is not None, "spin started to end while counted"):
    ticks = sym_addr(pid, target("spin"), "ticks")
    rc, err, rep = count_progress(pid, ticks, 1, then=lambda: sp.send_signal(signal.SIGTERM))
    c.eq(rc, 0, "ended: count -p exits 0", err)
    good_report(rep, "ended", 1)
    c.ok(isinstance(rep, dict) and "ended" in rep.get("warning", ""),
         "ended: the report says the program ended", rep)
    rc, out = finish(sp)
    c.eq(rc, -signal.SIGTERM, "ended: spin died of its SIGTERM", out)

def bad(argv, what, pattern):
    r = subprocess.run([TRACEPAD, "count"] + argv, capture_output=True, text=True, timeout=60)
    lines = r.stderr.strip().splitlines()
    c.eq(r.returncode, 2, what + ": exit 2", r.stderr)
    c.ok(len(lines) == 1 and re.search(pattern, lines[0]), what + ": one clear line", r.stderr)


# A pid that does not exist: the largest pid number is never in use at this point.
with open("/proc/sys/kernel/pid_max") as f:
    missing = int(f.read()) - 1
if not os.path.exists("/proc/%d" % missing):
    bad(["--engine", "trapflag", "-p", str(missing)], "missing pid", r"no such process")

sp, pid = start([target("spin-static"), "30"])
if c.ok(sp is not None, "spin-static started"):
    m0 = maps(pid)
    bad(["--engine", "trapflag", "-p", str(pid)], "static program", r"statically linked")
    c.eq(maps(pid), m0, "static program: untouched")
    os.kill(pid, signal.SIGSTOP)
    sp.send_signal(signal.SIGTERM)
    os.kill(pid, signal.SIGCONT)
    finish(sp)

sp, pid = start([target("spin"), "30"])
if c.ok(sp is not None, "spin started for SIGSTOP"):
    os.kill(pid, signal.SIGSTOP)
    for _ in range(100):
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                break
        time.sleep(0.01)
    bad(["--engine", "trapflag", "-p", str(pid)], "stopped process", r"stopped")
    os.kill(pid, signal.SIGCONT)
    c.ok(sp.poll() is None, "stopped process: runs on after SIGCONT")
    sp.send_signal(signal.SIGTERM)
    finish(sp)

bad(["--engine", "trapflag", "--start", "tick", "-p", str(os.getpid())], "--start with -p",
    r"--start and --stop need --engine ptrace")
bad(["--duration", "1", "--", "/bin/true"], "--duration without -p", r"--duration goes with -p")

c.done()
