#!/usr/bin/env python3
"""e2e: bad input gets one line on stderr, starting "tracepad count: " and naming the culprit,
and exit status 2: a missing program, a non-ELF file, a PID that does not exist, PIDs that
cannot be traced (one already traced by another process, a kernel thread), an unknown
--start/--stop symbol, an unknown --by key or --engine.  A refused attach leaves the process
running as it was."""
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import TRACEPAD, Checks, native, target  # noqa: E402

c = Checks("bad")


def bad(args, culprit, what):
    r = native([TRACEPAD, "count"] + args, timeout=60)
    lines = r.err.splitlines()
    c.eq(r.rc, 2, what + ": exit status 2", r)
    c.ok(len(lines) == 1 and lines[0].startswith("tracepad count: ") and culprit in lines[0],
         what + ": one line on stderr naming %r" % culprit, r.err)
    return r


tmp = tempfile.mkdtemp(prefix="tp-e2e-bad-")
try:
    missing = os.path.join(tmp, "no-such-program")
    bad(["--", missing], missing, "missing program")
    bad(["--engine", "ptrace", "--", missing], missing, "missing program (ptrace)")

    notelf = os.path.join(tmp, "not-an-elf")
    with open(notelf, "w") as f:
        f.write("this is text, not a program\n")
    os.chmod(notelf, 0o755)
    bad(["--", notelf], notelf, "non-ELF program")
    bad(["--engine", "ptrace", "--", notelf], notelf, "non-ELF program (ptrace)")

    compute = target("compute-O0")
    bad(["--start", "tp_no_such_symbol", "--", compute], "tp_no_such_symbol",
        "unknown --start symbol")
    bad(["--engine", "ptrace", "--start", "tp_no_such_symbol", "--", compute],
        "tp_no_such_symbol", "unknown --start symbol (ptrace)")
    bad(["--start", "work", "--stop", "tp_no_such_stop", "--", compute], "tp_no_such_stop",
        "unknown --stop symbol")
    bad(["--by", "colour", "--", compute], "colour", "unknown --by key")
    bad(["--engine", "warp", "--", compute], "warp", "unknown --engine")
    bad([], "", "no program and no -p")
finally:
    for name in os.listdir(tmp):
        os.unlink(os.path.join(tmp, name))
    os.rmdir(tmp)

# A PID that does not exist: one of ours, reaped.
p = subprocess.Popen(["true"])
p.wait()
gone = p.pid
if not os.path.exists("/proc/%d" % gone):
    bad(["-p", str(gone)], str(gone), "no such PID")
bad(["-p", "0"], "0", "PID 0")
bad(["-p", "not-a-pid"], "not-a-pid", "PID that is not a number")

# A kernel thread cannot be traced.
try:
    with open("/proc/2/status") as f:
        kthread = "Kthread:\t1" in f.read() or open("/proc/2/comm").read().strip() == "kthreadd"
except OSError:
    kthread = False
if kthread:
    bad(["-p", "2"], "2", "kernel thread")

# A process already traced by another: the attach is refused, the process goes on unharmed.
sp = subprocess.Popen([target("spin"), "2", "traced"], stdout=subprocess.PIPE, text=True)
line = sp.stdout.readline().split()
if c.ok(len(line) == 2 and line[0] == "pid", "spin traced prints its child's pid", line):
    t0 = time.monotonic()
    bad(["-p", line[1]], line[1], "PID already traced by another process")
    bad(["--engine", "ptrace", "-p", line[1]], line[1], "PID already traced (ptrace)")
    c.ok(time.monotonic() - t0 < 30, "the refusal is quick")
try:
    rest, _ = sp.communicate(timeout=60)
except subprocess.TimeoutExpired:
    sp.kill()
    rest, _ = sp.communicate()
c.eq((sp.returncode, rest), (0, "ticked\n"), "the traced process was left running as it was")

c.done()
