#!/usr/bin/env python3
"""Signals to tracepad, sent with kill() as a user's Ctrl-C, a kill or a closed terminal do.

- count -p, calls -p (both engines) and markers record -p, ended by SIGINT, SIGTERM, SIGHUP or
  SIGPIPE mid-run: tracepad ends within 1 s with its report (a second SIGINT while it detaches
  changes nothing), the program runs on untraced, its text byte-identical to before
  (/proc/PID/mem over its r-x mappings), to its own output and exit status.  The agent engine
  leaves no mapping but the agent's own (its file, inert, and anonymous ones): its block is
  gone.  markers record -p is at work once its point is on in the program's text and the
  program has mapped the rings of tracepad's tracer process.
- calls --engine agent -p interrupted while it loads the agent (as soon as the agent's file is
  mapped in the program): the same; and calls -p choosing the agent (staying attached for the
  program's signals and exit), SIGTERM.
- The launched forms (count with each engine, calls, markers record), each of the four
  signals: tracepad ends within 1 s, exit status 128 + the signal, without waiting for the
  program, which runs to its own end (this script is its subreaper) with its own output and
  exit status 0; and the report of what was gathered so far is there: count's (detached, with
  the instructions counted, or, from the code cache, whose threads report as they end, the
  warning that the running ones were not), calls' lines, a trace with events (markers
  record is signalled once the program has mapped its rings).
- An attach that waits for a thread in vfork() gives up at SIGINT, the program untraced.
- A SIGSTOP'd program, one thread and four, attached with and without --duration: SIGINT
  ends tracepad within 1 s (or --duration does), the program is still stopped (state T), its
  text unchanged, and after SIGCONT it runs to its correct end.

The 1 s bounds after a signal are correctness bounds (tracepad must not wait for the
program), far above the ~20 ms these take. --duration alone on a stopped program is timed
from tracepad's launch, its start-up and attach included (the ASan build on a loaded machine
took up to 1.05 s over the duration): a stopped program never moves on its own, so tracepad
ending at all shows it did not wait, and DURATION_BOUND (10 s) only cuts a hang short."""
import ctypes
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time

import tpe2e
from tpe2e import (maps_rings, readline, reap, ring_inodes, sigwork_expected, text,  # noqa: E402
                   wait_for)

TRACEPAD = tpe2e.TRACEPAD
PROG = tpe2e.target("sigwork")
BOUND = 1.0
DURATION_BOUND = 10.0
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


AGENT = "calls --engine agent -p"
# without --engine, the agent for a selection it can take, attached for signals and exit
DEFAULT = "calls -e sigwork:* -p"


def attach_cmd(kind, pid, out, extra=()):
    if kind == "count -p":
        return [TRACEPAD, "count", "--engine", "ptrace", "-o", out] + list(extra) + ["-p", str(pid)]
    if kind.startswith("calls"):
        return [TRACEPAD] + kind.split()[:-1] + ["-o", out] + list(extra) + ["-p", str(pid)]
    return [TRACEPAD, "markers", "record", "--trace", out] + list(extra) + ["-p", str(pid)]


def mapped(pid):
    with open("/proc/%d/maps" % pid) as f:
        return f.read()


def named_maps(pid):
    """The paths of @pid's file mappings (memfds too)."""
    return {ln.split(None, 5)[5] for ln in mapped(pid).splitlines() if len(ln.split(None, 5)) > 5}


def agent_left(before, pid):
    """File mappings of @pid that were not there @before and are not the agent's file."""
    return sorted(p for p in named_maps(pid) - before
                  if not p.endswith("/libtracepad-agent.so"))


def tracer_kids(tp):
    """tracepad's tracer process (src/cli/keeper.c): its children, or itself."""
    try:
        with open("/proc/%d/task/%d/children" % (tp.pid, tp.pid)) as f:
            return [int(x) for x in f.read().split()] or [tp.pid]
    except FileNotFoundError:
        return [tp.pid]


def traced_by(kind, pid, tp, out=None, before=None, stopped=False):
    """Wait until tracepad is at work on @pid: every thread traced by it (and with @out,
    calls' output has lines: the attach is over); markers, which detaches once it has written
    its request, has its point on (the text differs from @before) and, unless the program is
    @stopped, the program has mapped the rings of tracepad's tracer process; the agent engine
    named with -p has its block mapped in the program, and has let go of it (and with @out,
    lines)."""
    if kind == "markers record -p":
        def recording():
            if any(tracer_of(pid, t) for t in os.listdir("/proc/%d/task" % pid)):
                return False
            if before is None or same_text(before, text(pid)) == []:
                return False
            return stopped or maps_rings(pid, ring_inodes(tracer_kids(tp)))
        return wait_for(lambda: tp.poll() is not None or recording(), 60)
    if kind == AGENT:
        return wait_for(lambda: tp.poll() is not None or (
            "memfd:tracepad-hooks" in mapped(pid) and all(
                tracer_of(pid, t) == 0 for t in os.listdir("/proc/%d/task" % pid)) and
            (not out or (os.path.exists(out) and os.path.getsize(out) > 0))), 60)

    def attached():
        tids = os.listdir("/proc/%d/task" % pid)
        ours = tracer_kids(tp)
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
    if kind.startswith("calls"):
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
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
ATTACHED = [(kind, sig) for kind in ("count -p", "calls --engine ptrace -p", AGENT,
                                     "markers record -p")
            for sig in SIGNALS]
# the agent's load, interrupted: SIGINT as soon as its file is mapped in the program
ATTACHED.append((AGENT + " (loading the agent)", signal.SIGINT))
ATTACHED.append((DEFAULT, signal.SIGTERM))
for kind, sig in ATTACHED:
    loading = kind.endswith("(loading the agent)")
    kind = kind.split(" (")[0]
    threads = 1 if sig == signal.SIGINT and not loading else 4
    what = "%s, %d thread%s, %s" % (kind, threads, "s" * (threads > 1), sig.name)
    what += " while the agent is loaded" if loading else ""
    n += 1
    prog, ok, first = start_target(ROUNDS, threads)
    if not c.check(ok, what + ": the target runs", first):
        prog.kill()
        prog.wait()
        continue
    before = text(prog.pid)
    maps_before = named_maps(prog.pid)
    out = fresh("attach-%d" % n)
    tp = subprocess.Popen(attach_cmd(kind, prog.pid, out), stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if loading:
        c.check(wait_for(lambda: tp.poll() is not None or
                         "/libtracepad-agent.so" in mapped(prog.pid), 60)
                and tp.poll() is None, what + ": tracepad is loading the agent", tp.poll())
    else:
        c.check(traced_by(kind, prog.pid, tp, out if kind.startswith("calls") else None,
                          before) and tp.poll() is None, what + ": tracepad is at work",
                tp.poll())
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
    if kind in (AGENT, DEFAULT):
        left = agent_left(maps_before, prog.pid) if alive else ["(exited)"]
        c.eq(left, [], what + ": no file mapping left but the agent's (its block unmapped)")
    if kind == DEFAULT:
        c.check(alive and "/libtracepad-agent.so" in mapped(prog.pid),
                what + ": the agent engine ran")
    rest = read_rest(prog.stdout, 120)
    c.eq((prog.wait(), rest), (0, sigwork_expected(ROUNDS, threads)),
         what + ": the program ends by itself, with its own output and status")


# ---- a thread that cannot stop yet (vfork) ----

for kind in ("count -p", "calls --engine ptrace -p"):
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

# Whole-program counts of the trapflag engine step every instruction (its agent goes on after
# tracepad has gone): those runs are kept short, and --start counts only the sw_sum_to calls.
# The dbt engine (the default) leaves the program running in its code cache.
ROUNDS_L = 60
LAUNCH = (
    ("count --engine trapflag", ["count", "--engine", "trapflag", "-o", "{out}"], 0.1, 1),
    ("count --engine trapflag --start sw_sum_to",
     ["count", "--engine", "trapflag", "--start", "sw_sum_to", "-o", "{out}"], 0.1, None),
    ("count", ["count", "-o", "{out}"], 0.1, None),
    ("count --start sw_sum_to", ["count", "--start", "sw_sum_to", "-o", "{out}"], 0.1, None),
    ("count --engine ptrace --start sw_sum_to",
     ["count", "--engine", "ptrace", "--start", "sw_sum_to", "-o", "{out}"], 0.1, None),
    ("calls", ["calls", "-o", "{out}"], 0.1, None),
    ("markers record", ["markers", "record", "--trace", "{out}"], 0.1, None),
    # before main: the ptrace engine steps the start-up, the agent has not synced yet
    ("count --engine ptrace (in the start-up)",
     ["count", "--engine", "ptrace", "-o", "{out}"], None, 1),
)
def launch_report(kind, out):
    """What is wrong with the report of a launch interrupted mid-run (None: nothing)."""
    if kind.startswith("markers"):
        if not os.path.exists(os.path.join(out, "metadata")):
            return "no trace"
        r = subprocess.run([TRACEPAD, "report", out], capture_output=True, text=True,
                           timeout=60)
        m = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("events ")]
        return None if r.returncode == 0 and m and int(m[0][1]) > 0 else \
            "no events in the trace: %r" % (r.stdout + r.stderr)[-300:]
    if not os.path.exists(out):
        return "no report"
    with open(out) as f:
        rep = f.read()
    if kind.startswith("calls"):
        return None if "[" in rep and "libc.so.6:" in rep else "no lines: %r" % rep[-300:]
    if "(detached; the program goes on)" not in rep:
        return "not a detached count's report: %r" % rep[-400:]
    n = [ln.split()[1] for ln in rep.splitlines() if ln.startswith("  instructions  ")]
    if not n:
        return "no instructions line: %r" % rep[-400:]
    if "--engine" not in kind and "--start" in kind:
        # the code cache's per-block counters reach the tables as the threads end
        return None if "interrupted: the threads still running were not counted" in rep \
            else "no word of the uncounted threads: %r" % rep[-400:]
    if "--engine" not in kind and \
            "interrupted: the threads still running are counted up to here" not in rep:
        return "no word of the threads counted up to the interruption: %r" % rep[-400:]
    return None if int(n[0]) > 0 else "nothing counted: %r" % rep[-400:]


for kind, args, delay, nthreads in LAUNCH:
    for sig in SIGNALS:
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
            pid = int(first.split()[1]) if first.startswith("ready ") else 0
            if kind.startswith("markers"):
                # libtracepad maps the rings at the program's first event
                c.check(pid and wait_for(lambda: tp.poll() is not None or maps_rings(
                    pid, ring_inodes(tracer_kids(tp))), 60) and tp.poll() is None,
                    what + ": the program records into tracepad's rings", tp.poll())
        rc, took, err = stop_tracepad(tp, sig)
        c.check(rc == 128 + sig and took < BOUND,
                what + ": tracepad ended at once, status 128 + signal (%.3f s)" % took,
                "rc %r, %.3f s\n%s" % (rc, took, err))
        bad_report = launch_report(kind, out)
        c.check(bad_report is None, what + ": the report of what was gathered so far",
                bad_report)
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
    maps_before = named_maps(prog.pid)
    out = fresh("stopped-%d" % n)
    extra = ["--duration", duration] if duration else []
    t0 = time.monotonic()
    tp = subprocess.Popen(attach_cmd(kind, prog.pid, out, extra), stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if interrupt:
        c.check(traced_by(kind, prog.pid, tp, before=before, stopped=True) and
                tp.poll() is None, what + ": tracepad attached to the stopped program",
                tp.poll())
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
    bound = BOUND if interrupt else DURATION_BOUND
    c.check(rc == 0 and took < bound and report_ok(kind, out),
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
    if kind == AGENT:
        c.eq(agent_left(maps_before, prog.pid), [],
             what + ": no file mapping left but the agent's (its block unmapped)")
    os.kill(prog.pid, signal.SIGCONT)
    rest = read_rest(prog.stdout, 120)
    c.eq((prog.wait(), rest), (0, sigwork_expected(30, threads)),
         what + ": after SIGCONT, it runs to its correct end")


for kind in ("count -p", "calls --engine ptrace -p", "markers record -p"):
    for threads in (1, 4):
        for duration in (None, "30"):
            stopped_case(kind, threads, duration, True)
    stopped_case(kind, 4, "0.5", False)
# the agent engine hooks a stopped program (its load runs the loader in it under ptrace)
stopped_case(AGENT, 4, None, True)
stopped_case(AGENT, 4, "0.5", False)

shutil.rmtree(tmp, ignore_errors=True)
c.done()
