#!/usr/bin/env python3
"""Signals to tracepad, sent with kill() as a user's Ctrl-C, a kill or a closed terminal do.

- count -p, calls -p and markers record -p, ended by SIGINT, SIGTERM or SIGHUP mid-run: tracepad
  ends within 1 s with its report (a second SIGINT while it detaches changes nothing), the
  program runs on untraced, its text byte-identical to before (/proc/PID/mem over its r-x
  mappings), to its own output and exit status.
- The launched forms (count with both engines, calls, markers record): tracepad ends within
  1 s, exit status 128 + the signal, without waiting for the program, which runs to its own
  end (this script is its subreaper) with its own output and exit status 0.
- An attach that waits for a thread in vfork() gives up at SIGINT, the program untraced.
- A SIGSTOP'd program, one thread and four, attached with and without --duration: SIGINT
  ends tracepad within 1 s (or --duration does), the program is still stopped (state T), its
  text unchanged, and after SIGCONT it runs to its correct end.

The 1 s bounds are correctness bounds (tracepad must not wait for the program), far above
the ~20 ms these take."""
import ctypes
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time

import tpe2e
from tpe2e import readline, reap, sigwork_expected, text, wait_for  # noqa: E402

TRACEPAD = tpe2e.TRACEPAD
PROG = tpe2e.target("sigwork")
BOUND = 1.0
c = tpe2e.Tap("interrupt")
tmp = tempfile.mkdtemp(prefix="tp-interrupt-")

# Launched programs outlive tracepad: they become our children, so that their status is seen.
PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def read_rest(f, timeout):
    buf = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not select.select([f], [], [], max(0, end - time.monotonic()))[0]:
            break
        b = os.read(f.fileno(), 4096)
        if not b:
            break
        buf += b
    return buf.decode(errors="replace")


def same_text(before, after):
    """Mappings whose bytes changed or went (new ones, e.g. calls' stubs, are allowed)."""
    return [k[2] or hex(k[0]) for k, v in before.items() if after.get(k) != v]


def states(pid):
    """The state letter of every thread of @pid."""
    out = []
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
            out.append(f.read().rsplit(")", 1)[1].split()[0])
    return out


def tracer(pid):
    return tracer_of(pid, pid)


def tracer_of(pid, tid):
    with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
        for line in f:
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    return -1


def start_target(rounds, threads):
    p = subprocess.Popen([PROG, str(rounds), str(threads)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = readline(p.stdout, 20)
    ok = first == "ready %d\n" % p.pid
    return p, ok, first


def attach_cmd(kind, pid, out, extra=()):
    if kind == "count -p":
        return [TRACEPAD, "count", "--engine", "ptrace", "-o", out] + list(extra) + ["-p", str(pid)]
    if kind == "calls -p":
        return [TRACEPAD, "calls", "-o", out] + list(extra) + ["-p", str(pid)]
    return [TRACEPAD, "markers", "record", "--trace", out] + list(extra) + ["-p", str(pid)]


def traced_by(kind, pid, tp, out=None):
    """Wait until tracepad is at work on @pid: every thread traced by it (and with @out,
    calls' output has lines: the attach is over); markers has written its request (it
    detaches at once)."""
    if kind == "markers record -p":
        time.sleep(0.5)
        return True

    def attached():
        tids = os.listdir("/proc/%d/task" % pid)
        # the tracer is tracepad's child (src/cli/keeper.c)
        with open("/proc/%d/task/%d/children" % (tp.pid, tp.pid)) as f:
            ours = [int(x) for x in f.read().split()] or [tp.pid]
        return all(tracer_of(pid, t) in ours for t in tids) and (
            not out or (os.path.exists(out) and os.path.getsize(out) > 0))
    return wait_for(lambda: tp.poll() is not None or attached(), 60)


def stop_tracepad(tp, sig, again=False):
    """Send @sig (@again: and SIGINT 2 ms later, a second Ctrl-C while it detaches); (exit
    status or None, seconds until it ended, stderr)."""
    t0 = time.monotonic()
    os.kill(tp.pid, sig)
    if again:
        time.sleep(0.002)
        try:
            os.kill(tp.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
    try:
        tp.wait(timeout=30)
    except subprocess.TimeoutExpired:
        tp.kill()
        tp.wait()
        return None, time.monotonic() - t0, ""
    took = time.monotonic() - t0
    return tp.returncode, took, tp.stderr.read().decode(errors="replace")


def report_ok(kind, out):
    if kind == "count -p":
        return os.path.exists(out) and "detached" in open(out).read()
    if kind == "calls -p":
        return os.path.exists(out)
    return os.path.exists(os.path.join(out, "metadata"))


def fresh(name):
    path = os.path.join(tmp, name)
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)
    return path


# ---- attached to a running program ----

ROUNDS = 150
n = 0
for kind in ("count -p", "calls -p", "markers record -p"):
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        threads = 1 if sig == signal.SIGINT else 4
        what = "%s, %d thread%s, %s" % (kind, threads, "s" * (threads > 1), sig.name)
        n += 1
        prog, ok, first = start_target(ROUNDS, threads)
        if not c.check(ok, what + ": the target runs", first):
            prog.kill()
            prog.wait()
            continue
        before = text(prog.pid)
        out = fresh("attach-%d" % n)
        tp = subprocess.Popen(attach_cmd(kind, prog.pid, out), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        c.check(traced_by(kind, prog.pid, tp, out if kind == "calls -p" else None)
                and tp.poll() is None, what + ": tracepad is at work", tp.poll())
        time.sleep(0.3)
        rc, took, err = stop_tracepad(tp, sig, again=sig == signal.SIGTERM)
        if sig == signal.SIGTERM:
            what += " then SIGINT"
        c.check(rc == 0 and took < BOUND and report_ok(kind, out),
                what + ": tracepad ended, detached, with its report (%.3f s)" % took,
                "rc %r, %.3f s\n%s" % (rc, took, err))
        alive = prog.poll() is None
        changed = same_text(before, text(prog.pid)) if alive else ["(exited)"]
        c.check(alive and tracer(prog.pid) == 0 and not changed,
                what + ": the program runs on, untraced, its text unchanged",
                "alive %r, changed %r" % (alive, changed))
        rest = read_rest(prog.stdout, 120)
        c.eq((prog.wait(), rest), (0, sigwork_expected(ROUNDS, threads)),
             what + ": the program ends by itself, with its own output and status")


# ---- a thread that cannot stop yet (vfork) ----

for kind in ("count -p", "calls -p"):
    what = "%s, the main thread in vfork, SIGINT" % kind
    n += 1
    prog = subprocess.Popen([PROG, "30", "2", "vfork"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = readline(prog.stdout, 20)
    time.sleep(0.2)
    out = fresh("vfork-%d" % n)
    tp = subprocess.Popen(attach_cmd(kind, prog.pid, out), stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)
    rc, took, err = stop_tracepad(tp, signal.SIGINT)
    c.check(rc == 2 and took < BOUND and "interrupted while waiting" in err,
            what + ": tracepad gave up the attach at once (%.3f s)" % took,
            "rc %r\n%s" % (rc, err))
    c.check(prog.poll() is None and tracer(prog.pid) == 0, what + ": the program is untraced")
    rest = read_rest(prog.stdout, 60)
    c.eq((prog.wait(), first + rest), (0, "ready %d\n" % prog.pid + sigwork_expected(30, 2)),
         what + ": the program runs to its correct end")


# ---- launched ----

# Whole-program counts step every instruction (the trapflag agent goes on after tracepad has
# gone): those runs are kept short, and --start counts only the sw_sum_to calls.
ROUNDS_L = 60
LAUNCH = (
    ("count", ["count", "-o", "{out}"], 0.1, 1),
    ("count --start sw_sum_to", ["count", "--start", "sw_sum_to", "-o", "{out}"], 0.1, None),
    ("count --engine ptrace --start sw_sum_to",
     ["count", "--engine", "ptrace", "--start", "sw_sum_to", "-o", "{out}"], 0.1, None),
    ("calls", ["calls", "-o", "{out}"], 0.1, None),
    ("markers record", ["markers", "record", "--trace", "{out}"], 0.1, None),
    # before main: the ptrace engine steps the start-up, the agent has not synced yet
    ("count --engine ptrace (in the start-up)",
     ["count", "--engine", "ptrace", "-o", "{out}"], None, 1),
)
for kind, args, delay, nthreads in LAUNCH:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if delay is None and sig != signal.SIGINT:
            continue
        threads = nthreads or (1 if sig == signal.SIGTERM else 4)
        what = "%s -- sigwork, %d thread%s, %s" % (kind, threads, "s" * (threads > 1),
                                                   sig.name)
        n += 1
        out = fresh("launch-%d" % n)
        argv = [TRACEPAD] + [a.replace("{out}", out) for a in args] + \
            ["--", PROG, str(ROUNDS_L), str(threads)]
        tp = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
        if delay is None:
            time.sleep(0.5)
            first = ""
        else:
            first = readline(tp.stdout, 120)
            time.sleep(delay)
        rc, took, err = stop_tracepad(tp, sig)
        c.check(rc == 128 + sig and took < BOUND,
                what + ": tracepad ended at once, status 128 + signal (%.3f s)" % took,
                "rc %r, %.3f s\n%s" % (rc, took, err))
        rest = read_rest(tp.stdout, 180)
        lines = (first + rest).splitlines(True)
        pid = int(lines[0].split()[1]) if lines and lines[0].startswith("ready ") else 0
        st = reap(pid, 180) if pid else None
        c.eq((st, lines[1:]), (0, [sigwork_expected(ROUNDS_L, threads)]),
             what + ": the program ran to its own end, with its own output and status",
             "stdout %r" % (first + rest))


# ---- a stopped program ----

def stopped_case(kind, threads, duration, interrupt):
    global n
    n += 1
    what = "%s, SIGSTOP'd, %d thread%s%s, %s" % (
        kind, threads, "s" * (threads > 1), ", --duration %s" % duration if duration else "",
        "SIGINT" if interrupt else "no signal")
    prog, ok, first = start_target(30, threads)
    if not c.check(ok, what + ": the target runs", first):
        prog.kill()
        prog.wait()
        return
    if threads > 1:
        wait_for(lambda: len(os.listdir("/proc/%d/task" % prog.pid)) == threads)
    os.kill(prog.pid, signal.SIGSTOP)
    c.check(wait_for(lambda: set(states(prog.pid)) == {"T"}), what + ": stopped",
            states(prog.pid))
    before = text(prog.pid)
    out = fresh("stopped-%d" % n)
    extra = ["--duration", duration] if duration else []
    t0 = time.monotonic()
    tp = subprocess.Popen(attach_cmd(kind, prog.pid, out, extra), stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if interrupt:
        c.check(traced_by(kind, prog.pid, tp) and tp.poll() is None,
                what + ": tracepad attached to the stopped program", tp.poll())
        time.sleep(0.3)
        rc, took, err = stop_tracepad(tp, signal.SIGINT)
    else:
        try:
            tp.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tp.kill()
            tp.wait()
        rc, took, err = tp.returncode, time.monotonic() - t0, tp.stderr.read().decode()
        took -= float(duration)
    c.check(rc == 0 and took < BOUND and report_ok(kind, out),
            what + ": tracepad ended (%.3f s after %s)" % (took,
                                                           "SIGINT" if interrupt else
                                                           "--duration"),
            "rc %r\n%s" % (rc, err))
    # Each detached thread is woken to take the group-stop again: R for a moment.
    wait_for(lambda: set(states(prog.pid)) == {"T"}, 5)
    st = states(prog.pid)
    changed = same_text(before, text(prog.pid))
    c.check(set(st) == {"T"} and tracer(prog.pid) == 0 and not changed,
            what + ": still stopped, untraced, its text unchanged",
            "states %r, changed %r" % (st, changed))
    os.kill(prog.pid, signal.SIGCONT)
    rest = read_rest(prog.stdout, 120)
    c.eq((prog.wait(), rest), (0, sigwork_expected(30, threads)),
         what + ": after SIGCONT, it runs to its correct end")


for kind in ("count -p", "calls -p", "markers record -p"):
    for threads in (1, 4):
        for duration in (None, "30"):
            stopped_case(kind, threads, duration, True)
    stopped_case(kind, 4, "0.5", False)

shutil.rmtree(tmp, ignore_errors=True)
c.done()
