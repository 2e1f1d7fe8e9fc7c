"""What the memory plugin's tests share: running a program under `tracepad calls --plugin memory`
and under valgrind's memcheck, and reading both leak reports into the same shape.

argv[1]: the build directory of tests/calls-memory (the targets); argv[2]: valgrind's path, or
empty when it is not installed; argv[3]: the engine of `tracepad calls` (ptrace when absent):
the same checks hold for both.  Environment: TRACEPAD.  TAP and running programs: tests/lib."""
import os
import re
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import run as runlib  # noqa: E402
from tap import check, done  # noqa: E402,F401

TRACEPAD, TARGETS = runlib.tracepad_and_targets()
VALGRIND = sys.argv[2] if len(sys.argv) > 2 else ""
ENGINE = ["--engine", sys.argv[3]] if len(sys.argv) > 3 and sys.argv[3] else []
TIMEOUT = 240
KINDS = ("definitely lost", "indirectly lost", "possibly lost", "still reachable")

# memcheck with its defaults but for:
# - --default-suppressions=no: nothing hidden in a "suppressed" category;
# - --num-callers=12: the plugin's backtrace depth.
# Like memcheck, the plugin makes glibc (and libstdc++) free their own buffers at exit
# (__libc_freeres) and applies memcheck's leak-check heuristics; with the plugin's
# freeres=no, memcheck runs with --run-libc-freeres=no --run-cxx-freeres=no.
MEMCHECK_OPTS = ["--tool=memcheck", "--leak-check=full", "--show-leak-kinds=all",
                 "--errors-for-leak-kinds=none", "--default-suppressions=no",
                 "--num-callers=12"]
NO_FREERES = ["--run-libc-freeres=no", "--run-cxx-freeres=no"]


def target(name):
    return os.path.join(TARGETS, name)


class Report:
    """One leak report: totals per kind, in use at exit, heap usage, and the groups."""

    def __init__(self):
        self.kinds = {}      # kind -> (bytes, blocks)
        self.in_use = None   # (bytes, blocks)
        self.usage = None    # (allocs, frees, bytes allocated)
        self.groups = []     # dicts: kind, bytes (direct), indirect, blocks, frames
        self.text = ""

    def totals(self):
        return {k: self.kinds.get(k) for k in KINDS}

    def find(self, kind, function):
        """The groups of @kind whose backtrace names @function."""
        pat = re.compile(r"[:\s]%s(\+|\s|$)" % re.escape(function))
        return [g for g in self.groups
                if g["kind"] == kind and any(pat.search(f) for f in g["frames"])]

    def __repr__(self):
        return self.text[-3000:]


def _num(s):
    return int(s.replace(",", ""))


GROUP = re.compile(r"^(?:memory: )?([\d,]+)(?: \(([\d,]+) direct, ([\d,]+) indirect\))? bytes in "
                   r"([\d,]+) blocks are (%s)" % "|".join(KINDS))
KIND = re.compile(r"^(?:memory:)?\s+(%s): ([\d,]+) bytes in ([\d,]+) blocks$" % "|".join(KINDS))
IN_USE = re.compile(r"in use at exit: ([\d,]+) bytes in ([\d,]+) blocks")
USAGE = re.compile(r"total heap usage: ([\d,]+) allocs, ([\d,]+) frees, ([\d,]+) bytes allocated")


def parse(lines, frame_re):
    rep = Report()
    rep.text = "\n".join(lines)
    cur = None
    for line in lines:
        m = GROUP.match(line)
        if m:
            direct = _num(m.group(2)) if m.group(2) else _num(m.group(1))
            cur = {"kind": m.group(5), "bytes": direct,
                   "indirect": _num(m.group(3)) if m.group(3) else 0,
                   "blocks": _num(m.group(4)), "frames": []}
            rep.groups.append(cur)
            continue
        m = frame_re.match(line)
        if m and cur is not None:
            cur["frames"].append(m.group(1))
            continue
        cur = None
        m = KIND.match(line)
        if m:
            rep.kinds[m.group(1)] = (_num(m.group(2)), _num(m.group(3)))
        m = IN_USE.search(line)
        if m:
            rep.in_use = (_num(m.group(1)), _num(m.group(2)))
        m = USAGE.search(line)
        if m:
            rep.usage = tuple(_num(x) for x in m.groups())
    if rep.in_use == (0, 0) and not rep.kinds:
        rep.kinds = {k: (0, 0) for k in KINDS}  # memcheck: "All heap blocks were freed"
    return rep


class Run(runlib.Run):
    """A run with stdout as bytes (the programs' output is compared byte for byte), stderr as
    text and .report the leak report read from the output, or None."""

    def __init__(self, argv, rc, out, err, seconds=0.0):
        super().__init__(argv, rc, out, err, seconds)
        self.report = None

    def __repr__(self):
        return "rc=%r stderr=%r report=%r" % (self.rc, self.err[-2000:], self.report)


def _run(argv, cwd, env=None):
    """stdin inherited, as the programs always ran here."""
    return runlib.run(argv, TIMEOUT, cwd=cwd, env=env, stdin=None, text=False, cls=Run)


def native(argv, cwd=None):
    return _run(argv, cwd)


def tracepad(argv, cwd=None, plugin="memory:kinds=all", env=None):
    """argv under `tracepad calls --plugin memory` (every kind's records shown, as memcheck's
    --show-leak-kinds=all here), only the allocator traced; stdout a pipe."""
    with tempfile.NamedTemporaryFile(prefix="tp-mem-", suffix=".txt") as f:
        r = _run([TRACEPAD, "calls"] + ENGINE + ["-c", "-e", "!*", "-o", f.name, "--plugin", plugin,
                                                  "--"]
                 + argv, cwd, env)
        text = open(f.name, errors="replace").read()
    lines = text.splitlines()
    r.err = r.err.decode(errors="replace")
    r.report = parse(lines, re.compile(r"^\s+#\d+ 0x[0-9a-f]+ (.*)$"))
    return r


# The agent engine's program has the agent loaded: one more TLS module, so glibc's DTV of each
# thread started after it is one entry (16 bytes) longer.  memcheck runs the same program: the
# agent preloaded (inert without tracepad's block).
AGENT = os.path.join(os.path.dirname(os.path.abspath(TRACEPAD)), "..", "agent",
                     "libtracepad-agent.so")


def memcheck(argv, cwd=None, freeres=True, env=None):
    if not VALGRIND:
        return None
    if ENGINE and "agent" in ENGINE:
        env = dict(os.environ if env is None else env)
        env["LD_PRELOAD"] = " ".join(x for x in (env.get("LD_PRELOAD"), os.path.abspath(AGENT))
                                     if x)
    with tempfile.NamedTemporaryFile(prefix="tp-vg-", suffix=".txt") as f:
        r = _run([VALGRIND] + MEMCHECK_OPTS + ([] if freeres else NO_FREERES)
                 + ["--log-file=" + f.name] + argv, cwd, env)
        text = open(f.name, errors="replace").read()
    lines = [re.sub(r"^==\d+== ?", "", ln) for ln in text.splitlines()]
    r.err = r.err.decode(errors="replace")
    r.report = parse(lines, re.compile(r"^\s+(?:at|by) 0x[0-9A-F]+: (.*)$"))
    return r


def same_as_memcheck(tp, vg, what, usage=True):
    """The plugin's totals per kind (and in use at exit, heap usage) equal memcheck's."""
    if not check(vg is not None, what + ": valgrind is installed (needed for the comparison)",
                 "install Debian's valgrind package"):
        return
    check(vg.report.in_use is not None, what + ": memcheck ran and reported", vg)
    check(tp.report.totals() == vg.report.totals(),
          what + ": definitely/indirectly/possibly lost and still reachable totals equal "
          "memcheck's", "tracepad %r\nmemcheck %r" % (tp.report.totals(), vg.report.totals()))
    check(tp.report.in_use == vg.report.in_use, what + ": in use at exit equals memcheck's",
          "tracepad %r memcheck %r" % (tp.report.in_use, vg.report.in_use))
    if usage:
        check(tp.report.usage == vg.report.usage,
              what + ": allocs, frees and bytes allocated equal memcheck's",
              "tracepad %r memcheck %r" % (tp.report.usage, vg.report.usage))


def memcheck_env(env=None):
    """The environment a program gets under valgrind, with the variables valgrind adds renamed
    (same lengths) so that a native run sees as many variables of the same sizes without
    their effect: a program that copies its environment (python) allocates the same."""
    base = dict(os.environ if env is None else env)
    if not VALGRIND:
        return base
    r = runlib.run([VALGRIND, "--tool=none", "-q", "/usr/bin/env", "-0"], TIMEOUT, env=base,
                   text=False)
    out = dict(kv.split(b"=", 1) for kv in r.out.split(b"\0") if b"=" in kv)
    mirrored = dict(base)
    for k, v in out.items():
        k, v = k.decode(errors="replace"), v.decode(errors="replace")
        if k in ("LD_PRELOAD", "LD_LIBRARY_PATH") and base.get(k) != v:
            k = "TP" + k[2:]
        if k != "_":
            mirrored[k] = v
    return mirrored
