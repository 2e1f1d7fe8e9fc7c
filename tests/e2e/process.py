#!/usr/bin/env python3
"""e2e: processes around the counted one.  forkexec (fork or vfork, then exec /bin/echo in the
child) keeps its output and exit status under both engines; `-p PID` attaches to a running
program (ptrace by default), counts it to its exit, and its --start region is exact; an
interrupted `tracepad count -p` leaves the program running."""
import os
import json
import re
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import ENGINES, RUN_TIMEOUT, Checks, count_argv, count, native, target  # noqa: E402

c = Checks("process")

for mode in ("fork", "vfork"):
    argv = [target("forkexec"), mode]
    nat = native(argv)
    c.eq((nat.rc, nat.out), (0, "forkexec: %s\nhi\nchild exited with status 0\n" % mode),
         "native forkexec " + mode)
    for engine in ENGINES:
        for start in (None, "main"):
            what = "%s forkexec %s %s" % (engine, mode, "--start main" if start else "whole")
            r = count(argv, engine=engine, start=start)
            rep = c.report(r, what, engine, {"start": "main", "stop": None} if start else None)
            c.same_as_native(r, nat, what)
            if rep:
                c.ok(rep["instructions"] > 100, what + ": counted", rep["instructions"])


def tick_length():
    """Instructions of spin's tick(): straight-line code, so its count is its length."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", target("spin")],
                         capture_output=True, text=True).stdout
    m = re.search(r"<tick>:\n((?:\s+[0-9a-f]+:\t.*\n)+)", out)
    if not m:
        return None
    body = m.group(1).splitlines()
    if any(re.search(r"\tj|\tcall", line) for line in body):
        return None
    # Up to the first ret: padding after it is not executed.
    for i, line in enumerate(body):
        if "\tret" in line:
            return i + 1
    return None


def attach(seconds, start=None, interrupt_after=None):
    """Starts spin, attaches tracepad count -p to it; returns (spin rc, spin stdout rest,
    tracepad run)."""
    sp = subprocess.Popen([target("spin"), str(seconds)], stdout=subprocess.PIPE, text=True)
    first = sp.stdout.readline().split()
    if len(first) != 2 or first[0] != "pid":
        sp.kill()
        sp.wait()
        return None, first, None
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), "tp-e2e-attach-%d.json" % os.getpid())
    if os.path.exists(out):
        os.unlink(out)
    tp = subprocess.Popen(count_argv(None, start=start, pid=int(first[1]), json_out=out),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if interrupt_after is not None:
        time.sleep(interrupt_after)
        tp.send_signal(signal.SIGINT)
    try:
        tout, terr = tp.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        tp.kill()
        tout, terr = tp.communicate()
    try:
        rest, _ = sp.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        sp.kill()
        rest, _ = sp.communicate()
    report = None
    try:
        with open(out) as f:
            report = json.load(f)
    except (OSError, ValueError):
        pass
    finally:
        if os.path.exists(out):
            os.unlink(out)
    return sp.returncode, rest, (tp.returncode, terr, report)


# Attach, count to the exit.
rc, rest, tp = attach(2)
c.eq((rc, rest), (0, "ticked\n"), "-p: the program runs to its end as natively")
if tp:
    trc, terr, rep = tp
    c.eq(trc, 0, "-p: tracepad exits with the program's status", terr)
    if c.ok(isinstance(rep, dict), "-p: JSON report", terr):
        c.eq(rep.get("engine"), "ptrace", "-p: the default engine is ptrace")
        c.ok(isinstance(rep.get("instructions"), int) and rep["instructions"] > 100,
             "-p: the program's remaining instructions are counted", rep.get("instructions"))
        c.eq(rep.get("exit"), {"status": 0}, "-p: the report's exit")

# Attach with --start tick: the first call after the attach, exactly.
want = tick_length()
if c.ok(want is not None, "spin's tick() is straight-line code", want):
    rc, rest, tp = attach(2, start="tick")
    c.eq((rc, rest), (0, "ticked\n"), "-p --start tick: the program runs as natively")
    if tp:
        trc, terr, rep = tp
        if c.ok(isinstance(rep, dict), "-p --start tick: JSON report", terr):
            c.eq(rep.get("instructions"), want, "-p --start tick: tick()'s %s instructions"
                 % want)
            c.eq(rep.get("region"), {"start": "tick", "stop": None}, "-p --start tick: region")

# Interrupted: tracepad detaches and the program goes on.
rc, rest, tp = attach(4, interrupt_after=1.0)
c.eq((rc, rest), (0, "ticked\n"), "-p interrupted by SIGINT: the program was left running")
if tp:
    c.ok(tp[0] is not None, "-p interrupted by SIGINT: tracepad ended", tp[1])

c.done()
