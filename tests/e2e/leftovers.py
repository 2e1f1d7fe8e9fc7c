#!/usr/bin/env python3
"""Nothing left behind by tracepad calls -p: 100 cycles of attach, trace 0.2 s, detach on a
2-thread target whose threads are inside traced calls most of the time (so detaching finds
hooked return addresses) leave at most one mapping more in /proc/PID/maps than before the
first, and every cycle saw calls.  The cycles start with one where tracepad crashes
(TRACEPAD_TEST_CRASH: its crash guard restores the program but can map nothing back): the
next attach finds the SSOL areas and return stubs it left by their signature, reuses them and
unmaps them at its detach.  The target checks every result it computes and exits 0 with all
its checks passed.

Then 100 cycles of calls -p without --engine on another such target, which picks the agent
engine: every cycle is the agent's and saw calls; the first leaves the agent's loaded object
(docs/INTERNALS.md, "Call hooks": libtracepad-agent.so's and libZydis's file mappings, and
anonymous memory only: the agent's .bss, its near-code arenas of pads, a shadow stack a
thread that called a hooked function), and after it nothing grows at all: the same mappings,
cycle after cycle."""
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "calls"))
from tpcalls import check, done, calls, target, TRACEPAD  # noqa: E402

CYCLES = int(os.environ.get("TP_LEFTOVER_CYCLES", "100"))
# the SSOL areas and return stubs are the ptrace engine's (without --engine the agent may be
# chosen, which stays loaded in the program, inert, by design)
PTRACE = ["--engine", "ptrace"]


def nmaps(pid):
    with open("/proc/%d/maps" % pid) as f:
        return len(f.read().splitlines())


def maps(pid):
    """[(start, end, perms, path)] of @pid's mappings (the [heap]'s end and the [stack]'s
    start move with brk and the stack's growth)."""
    out = []
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            v = line.split(None, 5)
            lo, hi = v[0].split("-")
            path = v[5].strip() if len(v) > 5 else ""
            out.append(("" if path == "[stack]" else lo, "" if path == "[heap]" else hi, v[1],
                        path))
    return out


def agent_kind(m):
    """What an added mapping @m of the agent's loaded object is, or None if it is not one."""
    lo, hi, perms, path = m
    if path.endswith("/libtracepad-agent.so"):
        return "agent file"
    if "/libZydis.so" in path:
        return "libZydis file"
    if path:
        return None
    return "anonymous " + perms[:3]


def calls_of_work(r):
    s = r.summary()
    work = [f for f in (s or {}).get("functions", []) if f.get("function") == "work"]
    return s, (work[0]["calls"] if work else 0)


p = subprocess.Popen([target("callloop")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
try:
    first = p.stdout.readline()
    check(first == "ready %d\n" % p.pid, "the target is running", first)
    base = nmaps(p.pid)

    env = dict(os.environ, TRACEPAD_TEST_CRASH="40")
    c = subprocess.run([TRACEPAD, "calls"] + PTRACE + ["-c", "-o", os.devnull, "-p", str(p.pid)],
                       env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    after_crash = nmaps(p.pid)
    check(c.returncode == -signal.SIGSEGV and p.poll() is None and after_crash > base + 1,
          "a crashed tracepad left its areas mapped (%d -> %d mappings), the target runs"
          % (base, after_crash), "rc=%r err=%r" % (c.returncode, c.stderr[-500:]))

    counts, bad, traced = [], [], 0
    for i in range(CYCLES):
        r = calls(PTRACE + ["--duration", "0.2", "-c", "--json", "-e", "callloop:work"], pid=p.pid,
                  timeout=60)
        # --duration counts from the end of the attach: work is called every 1 ms meanwhile
        s, n = calls_of_work(r)
        traced += n > 0
        if r.rc != 0 or s is None or s.get("pids") != [p.pid] or p.poll() is not None or not n:
            bad.append((i, r))
        counts.append(nmaps(p.pid))
        if p.poll() is not None:
            break
    check(not bad and traced == CYCLES,
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


def end_target(p, what):
    st = open("/proc/%d/status" % p.pid).read() if p.poll() is None else ""
    check(re.search(r"^TracerPid:\s+0$", st, re.M), what + ": the target is left untraced",
          st[:300])
    p.send_signal(signal.SIGUSR1)
    out, err = p.communicate(timeout=60)
    m = re.search(r"^calls (\d+) failures (\d+)$", out, re.M)
    check(p.returncode == 0 and m and int(m.group(2)) == 0 and int(m.group(1)) > 0,
          what + ": the target's checks all passed",
          "rc=%r out=%r err=%r" % (p.returncode, out, err))


# ---- without --engine: the agent engine, whose loaded object stays (inert) ----

what = "calls -p without --engine"
p = subprocess.Popen([target("callloop")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
try:
    first = p.stdout.readline()
    check(first == "ready %d\n" % p.pid, what + ": the target is running", first)
    before = maps(p.pid)
    bad, traced, engines, grew, after_first = [], 0, set(), [], None
    for i in range(CYCLES):
        r = calls(["--duration", "0.2", "-c", "--json", "-e", "callloop:work"], pid=p.pid,
                  timeout=60, engine=None)
        s, n = calls_of_work(r)
        traced += n > 0
        engines.add((s or {}).get("engine"))
        if r.rc != 0 or s is None or s.get("pids") != [p.pid] or p.poll() is not None or not n:
            bad.append((i, r))
        if p.poll() is not None:
            break
        now = maps(p.pid)
        if after_first is None:
            after_first = now
        elif now != after_first:
            grew.append((i, len(now), sorted(set(now) - set(after_first)),
                         sorted(set(after_first) - set(now))))
    check(not bad and traced == CYCLES and engines == {"agent"},
          "%s: %d cycles, %d of them saw calls of work, engine %s" % (
              what, CYCLES, traced, "/".join(sorted(map(str, engines)))), "%r" % bad[:2])
    added = sorted(set(after_first or []) - set(before))
    kinds = {}
    for m in added:
        kinds.setdefault(agent_kind(m), []).append(m)
    summary = ", ".join("%d %s" % (len(v), k) for k, v in sorted(kinds.items(), key=str))
    check(after_first is not None and None not in kinds and
          not set(before) - set(after_first) and len(kinds.get("agent file", [])) >= 1,
          "%s: the first cycle added the agent's loaded object and nothing else "
          "(%d -> %d mappings: %s)" % (what, len(before), len(after_first or []), summary),
          "\n".join(map(str, added)))
    check(after_first is not None and not grew,
          "%s: after the first, %d cycles added or removed nothing (%d mappings)" % (
              what, CYCLES - 1, len(after_first or [])), "%r" % grew[:3])
    end_target(p, what)
finally:
    if p.poll() is None:
        p.kill()
        p.wait()
done()
