"""What the tests of `tracepad trace` share: running it, parsing its frame lines
("#TP[.STEP] [TID] WHERE: EXPR=VALUE ...") and its table of counts, the facts of loop.c.

Environment: TRACEPAD (the CLI); argv[1] is the build directory of tests/tracept, where the
targets are; "--fast" after it runs every tracepoint as a fast one (the agent's jump pads).
TAP and running programs: tests/lib."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import run as runlib  # noqa: E402
from tap import check, done, eq, need_peer  # noqa: E402,F401

TRACEPAD, TARGETS = runlib.tracepad_and_targets()
FAST = "--fast" in sys.argv[2:]
MODE = ["--fast"] if FAST else []

FRAME = re.compile(r"^#(\d+)(?:\.(\d+))? \[(\d+)\] (.*?):((?: \S+=\S+)*)$")
ROW = re.compile(r"^(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(.*)$")


def target(name):
    return os.path.join(TARGETS, name)


class Frame:
    def __init__(self, m):
        self.tp = int(m.group(1))
        self.step = int(m.group(2) or 0)
        self.tid = int(m.group(3))
        self.where = m.group(4)
        self.vals = {}
        for kv in m.group(5).split():
            k, v = kv.split("=", 1)
            self.vals[k] = v

    def int(self, name):
        return int(self.vals[name], 0)

    def __repr__(self):
        return "#%d.%d [%d] %s %r" % (self.tp, self.step, self.tid, self.where, self.vals)


class Counts:
    def __init__(self, m):
        self.hits, self.collected, self.discarded, self.errors = (
            int(m.group(i)) for i in range(2, 6))
        self.where = m.group(6)

    def __repr__(self):
        return "hits %d collected %d discarded %d errors %d at %s" % (
            self.hits, self.collected, self.discarded, self.errors, self.where)


class TraceRun(runlib.Run):
    """A run of tracepad trace: frames (in order) and counts {tp: Counts} from stderr."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.frames, self.counts, table = [], {}, False
        for line in (self.err or "").splitlines():
            m = FRAME.match(line)
            if m:
                self.frames.append(Frame(m))
                continue
            if line.startswith("tp ") and "collected" in line:
                table = True
                continue
            m = ROW.match(line) if table else None
            if m:
                self.counts[int(m.group(1))] = Counts(m)

    def exact(self, tp):
        """hits = collected + discarded for tracepoint @tp."""
        c = self.counts.get(tp)
        return c is not None and c.hits == c.collected + c.discarded


def trace(args, timeout=120, **kw):
    return runlib.run([TRACEPAD, "trace"] + MODE + list(args), timeout=timeout, cls=TraceRun,
                      **kw)


def attached(pid, frames, args):
    """tracepad trace -p PID ARGS, stopped by SIGINT once @frames frame lines are out (no
    clock: on a loaded machine the attach itself may take long)."""
    out = tempfile.NamedTemporaryFile("r", suffix=".txt", delete=False).name
    tp = subprocess.Popen([TRACEPAD, "trace", "-o", out, "-p", str(pid)] + MODE + args,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and tp.poll() is None:
        with open(out) as f:
            if sum(1 for l in f if l.startswith("#")) >= frames:
                break
        time.sleep(0.05)
    tp.send_signal(signal.SIGINT)
    try:
        _, err = tp.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        tp.kill()
        _, err = tp.communicate()
    r = TraceRun(tp.args, tp.returncode, "", open(out).read() + err.decode())
    os.unlink(out)
    return r
