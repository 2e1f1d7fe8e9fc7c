#!/usr/bin/env python3
"""kill -9 of tracepad (issue 14): the process the user started is SIGKILLed while it traces.

- calls -p (both engines), count -p (ptrace engine) and count -p (trapflag engine) on one
  4-thread program (kill9: a hash, a recursion, malloc, a signal handler, each result checked),
  20 cycles each (5 for calls -p choosing the agent, attached for the program's signals):
  start tracepad, SIGKILL it at work (every fifth cycle as soon as it started, maybe in the
  middle of its attach), and check each time that its tracer process (the child it forked,
  whose parent death signal ends the tracing) ended by itself, detached, with its report; that
  the program lives on, untraced, its text byte-identical to before the first cycle
  (/proc/PID/mem over its r-x mappings).  At the end the program's own checks all held.
  The agent engine's tracer process does not ptrace the program while it drains (the agent
  hooks it): at work once lines come; each kill ends with its pads out and its block unmapped.
- calls --engine agent -p, its tracer process itself SIGKILLed at work, 3 times: the pads stay,
  the agent finds tracepad gone and records nothing more, never waiting for room in a ring:
  the program lives on, its checks hold; a later session takes the pads out (the text
  byte-identical to before) and ends with status 0.
- markers record -p on a program with a static tracepoint, 3 SIGKILLs: its tracer process
  ends the session by itself (the point it turned on is off again, the text byte for byte
  as before), the program lives on, untraced, and a later session records.
- The launched forms (calls, count with both engines): tracepad SIGKILLed while it traces;
  the program runs to its own end (this script is its subreaper) with its own output and
  exit status 0.  The trapflag agent counting a whole launched program disables itself once
  tracepad's tracer process is gone (a state bit in its control block says so)."""
import ctypes
import os
import random
import signal
import subprocess
import tempfile
import time
import shutil

import tpe2e
from tpe2e import (children, maps_rings, readline, reap, ring_inodes,  # noqa: E402
                   sigwork_expected, text, tracers, wait_for)

TRACEPAD = tpe2e.TRACEPAD
PROG = tpe2e.target("kill9")
CYCLES = 20
c = tpe2e.Tap("kill9")
tmp = tempfile.mkdtemp(prefix="tp-kill9-")
rnd = random.Random(9)

# Orphans (tracepad's tracer process, launched programs) become our children: their exit
# status is seen.
PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def changed_text(before, pid):
    after = text(pid)
    return [k[2] or hex(k[0]) for k, v in before.items() if after.get(k) != v]


def maps_ctl(pid):
    try:
        with open("/proc/%d/maps" % pid) as f:
            return "memfd:tracepad-ctl" in f.read()
    except OSError:
        return False


def hooks_mapped(pid):
    try:
        with open("/proc/%d/maps" % pid) as f:
            return "memfd:tracepad-hooks" in f.read()
    except OSError:
        return False


def stopped_pcs(pid):
    """{tid: pc} of the threads of @pid stopped outside a system call (/proc/TID/syscall
    says "-1 SP PC"): a single-stepped thread shows a new pc at each look."""
    out = {}
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/syscall" % (pid, tid)) as f:
                v = f.read().split()
            if v and v[0] == "-1":
                out[tid] = v[-1]
    except OSError:
        pass
    return out


def at_work(kind, pid, tp, out):
    """tracepad's tracer process (tp's child) is tracing @pid: every thread traced by it and
    (calls) lines written, (count) a thread seen stepped at two pcs (the attach is over:
    its threads all stopped), or (trapflag) the agent counting with the control block."""
    seen = {}

    def ready():
        kids = children(tp.pid)
        if len(kids) != 1:
            return False
        if kind.startswith("count --engine trapflag"):
            return maps_ctl(pid) and tracers(pid) == {0}
        if kind.startswith("calls --engine agent"):
            return tracers(pid) == {0} and os.path.exists(out) and \
                os.path.getsize(out) > 0
        if tracers(pid) != {kids[0]}:
            return False
        if kind.startswith("calls"):
            return os.path.exists(out) and os.path.getsize(out) > 0
        for tid, pc in stopped_pcs(pid).items():
            seen.setdefault(tid, set()).add(pc)
        return any(len(v) > 1 for v in seen.values())
    return wait_for(lambda: tp.poll() is not None or ready(), 60) and tp.poll() is None


ATTACH = (
    ("calls --engine ptrace -p", ["calls", "--engine", "ptrace", "-o", "{out}"]),
    ("calls --engine agent -p", ["calls", "--engine", "agent", "-o", "{out}"]),
    # without --engine: the agent (attached for the program's signals), 5 cycles
    ("calls -e kill9:* -p", ["calls", "-e", "kill9:*", "-o", "{out}"]),
    ("count --engine ptrace -p", ["count", "--engine", "ptrace", "-o", "{out}"]),
    ("count --engine trapflag -p", ["count", "--engine", "trapflag", "-o", "{out}"]),
)

for kind, args in ATTACH:
    prog = subprocess.Popen([PROG], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    first = readline(prog.stdout, 20)
    if not c.check(first == "pid %d\n" % prog.pid, kind + ": the target runs", first):
        prog.kill()
        prog.wait()
        continue
    pid = prog.pid
    wait_for(lambda: len(os.listdir("/proc/%d/task" % pid)) == 5, 30)
    before = text(pid)
    bad_tracer, bad_prog, reports = [], [], 0
    cycles = CYCLES // 4 if kind == "calls -e kill9:* -p" else CYCLES
    for i in range(cycles):
        out = os.path.join(tmp, "%s-%d" % ("-".join(kind.split()[:3]), i))
        tp = subprocess.Popen([TRACEPAD] + [a.replace("{out}", out) for a in args] +
                              ["-p", str(pid)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        early = i % 5 == 0
        if early:
            time.sleep(rnd.uniform(0, 0.05))
            working = False
        else:
            working = at_work(kind, pid, tp, out)
            time.sleep(rnd.uniform(0.02, 0.2))
        inner = children(tp.pid)
        if tp.poll() is None:
            os.kill(tp.pid, signal.SIGKILL)
        rc = tp.wait()
        err = tp.stderr.read().decode(errors="replace")
        st = reap(inner[0]) if inner else 0
        # An early kill may come before the fork (nothing started) or in the attach (given
        # up, status 2); a kill at work ends with a detach and the report (status 0).
        if rc != -signal.SIGKILL or (not early and not working) or st is None or st < 0 or \
                (not early and st != 0):
            bad_tracer.append((i, early, working, rc, inner, st, err[-300:]))
        elif not early:
            with open(out) as f:
                rep = f.read()
            reports += ("detached" in rep) if kind.startswith("count") else len(rep) > 0
        # a breakpoint or a trap flag left behind would kill the program at once
        time.sleep(0.05)
        alive = prog.poll() is None
        state = (tracers(pid), changed_text(before, pid)) if alive else None
        if alive and kind.startswith("calls") and hooks_mapped(pid):
            state += ("its block still mapped",)
        if not alive or set(state[0]) != {0} or state[1] or len(state) > 2:
            bad_prog.append((i, early, alive, state))
            if not alive:
                break
    c.eq(bad_tracer, [], "%s: %d SIGKILLs of tracepad, each time its tracer process ended by "
         "itself" % (kind, cycles))
    c.eq(reports, cycles - cycles // 5,
         "%s: the tracer killed at work wrote its report every time" % kind)
    c.eq(bad_prog, [], "%s: after each SIGKILL the program runs on, untraced, its text "
         "byte-identical to before" % kind)
    if prog.poll() is None:
        rest = prog.communicate(b"\n", timeout=120)[0].decode(errors="replace")
    else:
        rest = prog.stdout.read().decode(errors="replace")
    c.check(prog.returncode == 0 and rest.startswith("ok: "),
            kind + ": the program's own checks all held at its end", (prog.returncode, rest))


# ---- calls --engine agent -p: its tracer process killed, the agent goes on alone ----

what = "calls --engine agent -p, its tracer process SIGKILLed"
prog = subprocess.Popen([PROG], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE)
first = readline(prog.stdout, 20)
if c.check(first == "pid %d\n" % prog.pid, what + ": the target runs", first):
    pid = prog.pid
    wait_for(lambda: len(os.listdir("/proc/%d/task" % pid)) == 5, 30)
    before = text(pid)
    bad = []
    for i in range(3):
        out = os.path.join(tmp, "agent-inner-%d" % i)
        tp = subprocess.Popen([TRACEPAD, "calls", "--engine", "agent", "-o", out, "-p", str(pid)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
        working = at_work("calls --engine agent -p", pid, tp, out)
        time.sleep(rnd.uniform(0.02, 0.2))
        inner = children(tp.pid)
        if inner:
            os.kill(inner[0], signal.SIGKILL)
        # tracepad (its keeper, which reaps it) ends as its tracer process did
        rc = tp.wait()
        # the pads stay: the program runs through them, the agent records no more
        time.sleep(0.3)
        alive = prog.poll() is None
        if not working or not inner or rc != -signal.SIGKILL or not alive or \
                tracers(pid) != {0}:
            bad.append((i, working, rc, alive, tp.stderr.read().decode(errors="replace")))
            if not alive:
                break
    c.eq(bad, [], what + " at work, 3 times: the program runs on, untraced")
    r = subprocess.run([TRACEPAD, "calls", "--engine", "agent", "-o", os.path.join(tmp, "agent-end"),
                        "--duration", "0.3", "-p", str(pid)], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=120)
    changed = changed_text(before, pid) if prog.poll() is None else ["(exited)"]
    c.check(r.returncode == 0 and "error" not in r.stderr and not changed and
            not hooks_mapped(pid),
            what + ": a later session takes every pad out, the text byte-identical to before",
            (r.returncode, r.stderr[-300:], changed))
    rest = prog.communicate(b"\n", timeout=120)[0].decode(errors="replace") \
        if prog.poll() is None else prog.stdout.read().decode(errors="replace")
    c.check(prog.returncode == 0 and rest.startswith("ok: "),
            what + ": the program's own checks all held at its end", (prog.returncode, rest))


# ---- markers record -p: killed, its tracer process ends the session; the program lives ----

SW_ROUNDS, SW_CYCLES = 1000, 3
prog = subprocess.Popen([tpe2e.target("sigwork"), str(SW_ROUNDS), "4"], stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
first = readline(prog.stdout, 20)
if c.check(first == "ready %d\n" % prog.pid, "markers record -p: the target runs", first):
    pid = prog.pid
    wait_for(lambda: len(os.listdir("/proc/%d/task" % pid)) == 4, 30)
    before = text(pid)
    bad = []
    for i in range(SW_CYCLES):
        out = os.path.join(tmp, "markers-%d" % i)
        tp = subprocess.Popen([TRACEPAD, "markers", "record", "--trace", out, "-p", str(pid)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
        # at work once the program maps the rings of tracepad's tracer process
        working = wait_for(lambda: tp.poll() is not None or
                           maps_rings(pid, ring_inodes(children(tp.pid))),
                           30) and tp.poll() is None
        inner = children(tp.pid)
        time.sleep(rnd.uniform(0.02, 0.2))
        if tp.poll() is None:
            os.kill(tp.pid, signal.SIGKILL)
        rc = tp.wait()
        st = reap(inner[0]) if inner else None
        alive = prog.poll() is None
        changed = changed_text(before, pid) if alive else ["(exited)"]
        if rc != -signal.SIGKILL or not working or st != 0 or not alive or \
                tracers(pid) != {0} or changed:
            bad.append((i, rc, working, st, alive, changed,
                        tp.stderr.read().decode(errors="replace")[-300:]))
    c.eq(bad, [], "markers record -p: %d SIGKILLs of tracepad at work: its tracer process ends "
         "the session (the text as before), the program runs on, untraced" % SW_CYCLES)
    # a later session is not refused; disabling its point afterwards changes nothing
    r = subprocess.run([TRACEPAD, "markers", "record", "--trace", os.path.join(tmp, "markers-end"),
                        "--duration", "0.3", "-p", str(pid)], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=120)
    d = subprocess.run([TRACEPAD, "markers", "disable", "-p", str(pid), "sw_round"],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    changed = changed_text(before, pid) if prog.poll() is None else ["(exited)"]
    c.check(r.returncode == 0 and os.path.exists(os.path.join(tmp, "markers-end", "metadata"))
            and d.returncode == 0 and not changed,
            "markers record -p: a later session records, and once the point is disabled the "
            "text is byte-identical to before", (r.returncode, r.stderr[-300:], d.returncode,
                                                 d.stderr[-300:], changed))
    rest = prog.communicate(timeout=120)[0].decode(errors="replace")
    c.eq((prog.returncode, rest), (0, sigwork_expected(SW_ROUNDS, 4)),
         "markers record -p: the program ends by itself, with its own output and status")


# ---- launched: the program runs to its own end ----

ROUNDS = 400
EXPECTED = "ok: %d rounds each, %d signals handled of %d, 0 bad\n" % (ROUNDS, ROUNDS, ROUNDS)
LAUNCH = (
    ("calls", ["calls", "-o", "{out}"]),
    ("count --engine ptrace --start k9_hash",
     ["count", "--engine", "ptrace", "--start", "k9_hash", "-o", "{out}"]),
    ("count --engine trapflag --start k9_hash",
     ["count", "--engine", "trapflag", "--start", "k9_hash", "-o", "{out}"]),
    ("count --start k9_hash", ["count", "--start", "k9_hash", "-o", "{out}"]),
)
for kind, args in LAUNCH:
    out = os.path.join(tmp, "launch-" + kind.split()[0])
    tp = subprocess.Popen([TRACEPAD] + [a.replace("{out}", out) for a in args] +
                          ["--", PROG, str(ROUNDS)], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = readline(tp.stdout, 120)
    pid = int(first.split()[1]) if first.startswith("pid ") else 0
    inner = children(tp.pid)
    if kind.startswith("count --engine trapflag") or kind.startswith("count --start"):
        # the agent steps it, or it runs in the code cache, with the control block: nothing
        # ptraces it
        traced = pid and wait_for(lambda: maps_ctl(pid) and tracers(pid) == {0}, 30)
    else:
        traced = pid and wait_for(lambda: tracers(pid) == set(inner), 30)
    time.sleep(0.1)
    running = pid and os.path.exists("/proc/%d" % pid) and len(inner) == 1
    if tp.poll() is None:
        os.kill(tp.pid, signal.SIGKILL)
    rc = tp.wait()
    st_inner = reap(inner[0]) if inner else None
    rest = tp.stdout.read().decode(errors="replace")
    st = reap(pid, 180) if pid else None
    c.check(rc == -signal.SIGKILL and running and traced and st_inner == 128 + signal.SIGTERM,
            "%s -- kill9: tracepad SIGKILLed while tracing, its tracer ended by itself" % kind,
            "rc %r pid %r running %r traced %r inner %r %r" % (rc, pid, running, traced, inner,
                                                               st_inner))
    c.eq((st, rest), (0, EXPECTED),
         "%s -- kill9: the program ran to its own end, with its own output and status" % kind)


# ---- the trapflag agent of a launched program stops once tracepad is gone ----

AGENT_ST_ORPHANED = 0x20  # agent-abi.h


def ctl_state(pid):
    """The agent's state bits in the control block @pid maps (agent-abi.h: state at offset
    88, then its pid, which must be @pid's), or None."""
    try:
        with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", 0) as mem:
            for line in maps:
                f = line.split()
                if "memfd:tracepad-ctl" in line and int(f[2], 16) == 0:
                    mem.seek(int(f[0].split("-")[0], 16) + 88)
                    b = mem.read(8)
                    if int.from_bytes(b[4:], "little") == pid:
                        return int.from_bytes(b[:4], "little")
    except OSError:
        pass
    return None


what = "count -- kill9 (trapflag engine, whole program)"
out = os.path.join(tmp, "launch-agent")
tp = subprocess.Popen([TRACEPAD, "count", "--engine", "trapflag", "-o", out, "--", PROG],
                      stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
first = readline(tp.stdout, 120)
pid = int(first.split()[1]) if first.startswith("pid ") else 0
inner = children(tp.pid)
# at work: the start-up stepped by ptrace, the agent counting
working = pid and wait_for(lambda: (ctl_state(pid) or 0) & 1 and tracers(pid) == {0}, 60)
time.sleep(0.2)
if tp.poll() is None:
    os.kill(tp.pid, signal.SIGKILL)
rc = tp.wait()
st_inner = reap(inner[0]) if inner else None
orphaned = pid and wait_for(lambda: (ctl_state(pid) or 0) & AGENT_ST_ORPHANED, 120)
c.check(rc == -signal.SIGKILL and working and st_inner == 128 + signal.SIGTERM and orphaned,
        what + ": tracepad SIGKILLed while counting; the agent disabled itself once its "
        "tracer process was gone", "rc %r working %r inner %r %r state %r" % (
            rc, working, inner, st_inner, ctl_state(pid) if pid else None))
try:
    tp.stdin.write(b"\n")
    tp.stdin.close()
except OSError:
    pass
st = reap(pid, 120) if pid else None
rest = tp.stdout.read().decode(errors="replace")
c.check(st == 0 and rest.startswith("ok: "),
        what + ": the program ran to its own end, its own checks held", (st, rest))

shutil.rmtree(tmp, ignore_errors=True)
c.done()
