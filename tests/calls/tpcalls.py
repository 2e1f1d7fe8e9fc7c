"""What the tests of `tracepad calls` share: running a target natively and under tracepad,
parsing the call lines of the man page's format and the -c --json summary.

Environment: TRACEPAD (the CLI); argv[1] is the build directory of tests/calls, where the
targets are; argv[2] the engine the test is run with (ptrace or agent: meson runs each
acceptance test once per engine, named in the test's name), which every calls() names unless
its options name one or it is asked for the default choice (engine=None).  TAP and running
programs: tests/lib."""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import run as runlib  # noqa: E402
from tap import bail, check, done, need_peer  # noqa: E402,F401

TRACEPAD, TARGETS = runlib.tracepad_and_targets()
TIMEOUT = 120
ENGINES = ("ptrace", "agent")
ENGINE = sys.argv[2] if len(sys.argv) > 2 else "ptrace"
if ENGINE not in ENGINES:
    bail("unknown engine %r (ptrace, agent)" % ENGINE)

# [TID] OBJECT:FUNCTION(ARGS) = RETVAL <SECONDS>, indented 2 spaces a depth after "] ", up to
# 50 levels; deeper, 100 spaces and "{DEPTH} " (both in group 2).
LINE = re.compile(r"^\[(\d+)\] ( *(?:\{\d+\} )?)([^\s:]+):([^\s(]+)\((.*)\) = (.*?)"
                  r"(?: <(\d+\.\d+)>)?$")
# --entry: [TID] OBJECT:FUNCTION(ARGS) ...
ENTRY = re.compile(r"^\[(\d+)\] ( *(?:\{\d+\} )?)([^\s:]+):([^\s(]+)\((.*)\) \.\.\.$")
# Process events, as strace prints them: [PID] +++ exec "PATH" [ARGV] +++, +++ exited with N
# +++, +++ killed by SIG... +++; [TID] --- SIG... {si_signo=..., ...} ---.
EVENT = re.compile(r'^\[(\d+)\] (?:\+\+\+ (?:exec ".*" \[.*\]|exited with \d+|'
                   r'killed by SIG\w+(?: \(core dumped\))?) \+\+\+|--- (SIG\w+) \{si_signo=\2, .*\} ---)$')


def target(name):
    return os.path.join(TARGETS, name)


class Call:
    def __init__(self, m):
        self.tid = int(m.group(1))
        deep = re.search(r"\{(\d+)\}", m.group(2))
        self.depth = int(deep.group(1)) if deep else len(m.group(2)) // 2
        self.indent = len(m.group(2))
        self.object = m.group(3)
        self.function = m.group(4)
        self.args_text = m.group(5)
        self.ret = m.group(6)
        self.seconds = float(m.group(7)) if m.group(7) else None

    @property
    def args(self):
        """Integer arguments: "1, 2" or "a=1, b=2" both give [1, 2]; None if not integers."""
        return [to_int(a) for a in split_args(self.args_text)]

    @property
    def retint(self):
        return to_int(self.ret)

    def __repr__(self):
        return "[%d]%s%s:%s(%s) = %s" % (self.tid, " " * self.indent, self.object,
                                          self.function, self.args_text, self.ret)


def split_args(text):
    out, depth, cur, quote = [], 0, "", False
    for ch in text:
        if quote:
            cur += ch
            if ch == '"' and not cur.endswith('\\"'):
                quote = False
            continue
        if ch == '"':
            quote = True
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def to_int(text):
    text = re.sub(r"^[A-Za-z_]\w*=", "", text.strip())
    try:
        return int(text, 0)
    except ValueError:
        return None


class Run(runlib.Run):
    """A run of tracepad calls (or of a program); .text is the -o file's."""

    def __init__(self, argv, rc, out, err, text="", seconds=0.0):
        super().__init__(argv, rc, out, err, seconds)
        self.text = text

    @property
    def lines(self):
        """The -o file's lines."""
        return self.text.splitlines()

    @property
    def calls(self):
        return [Call(m) for m in map(LINE.match, self.lines) if m]

    @property
    def events(self):
        """The process event lines."""
        return [ln for ln in self.lines if EVENT.match(ln)]

    def unparsed(self, entries=False):
        """Lines of the -o file that are neither call lines (nor entry lines) nor process
        event lines."""
        return [ln for ln in self.lines if not LINE.match(ln) and not EVENT.match(ln)
                and not (entries and ENTRY.match(ln))]

    def summary(self):
        """The -c --json object, or None."""
        try:
            obj = json.loads(self.text)
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None

    def __repr__(self):
        return "%s\noutput=%r" % (runlib.Run.__repr__(self), self.text[-1200:])


def run(argv, timeout=TIMEOUT, cwd=None, env=None):
    return runlib.run(argv, timeout, cwd=cwd, env=env, cls=Run)


def calls(opts, prog_argv=None, timeout=TIMEOUT, cwd=None, pid=None, engine=ENGINE, env=None):
    """tracepad calls --engine ENGINE OPTS -o TMP -- PROG...; the output file's text is in
    .text.  No --engine added when OPTS has one, nor with engine=None (the default choice)."""
    fd, path = tempfile.mkstemp(prefix="tp-calls-", suffix=".out")
    os.close(fd)
    os.unlink(path)  # tracepad creates it: a stale file must not pass for output
    argv = [TRACEPAD, "calls"] + (["--engine", engine] if engine and "--engine" not in opts
                                  else []) + list(opts) + ["-o", path]
    argv += ["-p", str(pid)] if pid is not None else ["--"] + list(prog_argv)
    try:
        r = run(argv, timeout, cwd, env)
        try:
            with open(path, errors="replace") as f:
                r.text = f.read()
        except FileNotFoundError:
            r.text = ""
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return r


def func(summary, function, obj=None):
    """The summary entry of @function (in an object whose name starts with @obj), or None."""
    if not summary or not isinstance(summary.get("functions"), list):
        return None
    for f in summary["functions"]:
        if isinstance(f, dict) and f.get("function") == function and (
                obj is None or str(f.get("object", "")).startswith(obj)):
            return f
    return None


def well_formed(summary):
    """Problems with the -c --json object's shape (empty list when it has the man page's)."""
    if summary is None:
        return ["not one JSON object"]
    problems = []
    if not isinstance(summary.get("pids"), list) or not all(
            isinstance(p, int) for p in summary["pids"]):
        problems.append("pids: %r" % summary.get("pids"))
    if not isinstance(summary.get("functions"), list):
        return problems + ["functions: %r" % summary.get("functions")]
    for f in summary["functions"]:
        for k, t in (("object", str), ("function", str), ("calls", int), ("errors", int),
                     ("total_ns", int), ("avg_ns", int), ("min_ns", int), ("max_ns", int)):
            if not isinstance(f.get(k), t) or isinstance(f.get(k), bool):
                problems.append("%s: %r" % (k, f))
                break
        else:
            if f["calls"] and not (0 <= f["min_ns"] <= f["avg_ns"] <= f["max_ns"] <= f[
                    "total_ns"]):
                problems.append("times inconsistent: %r" % f)
    return problems


def program_line(out, pattern, cast=int):
    """Groups of the first match of @pattern in a program's stdout, cast; None if none."""
    m = re.search(pattern, out, re.M)
    return tuple(cast(g) for g in m.groups()) if m else None


def one_line_error(r):
    """Bad input refused: exit status 2 and exactly one line on stderr (the error)."""
    return r.rc == 2 and len(r.err.strip().splitlines()) == 1


def exec_text(pid):
    """The bytes of every executable mapping of a file in process @pid, by path."""
    text = {}
    with open("/proc/%d/maps" % pid) as f:
        maps = [ln.split() for ln in f]
    with open("/proc/%d/mem" % pid, "rb") as m:
        for v in maps:
            if len(v) < 6 or "x" not in v[1] or not v[5].startswith("/"):
                continue
            lo, hi = (int(x, 16) for x in v[0].split("-"))
            m.seek(lo)
            text[(v[5], lo)] = m.read(hi - lo)
    return text


def attach_cycles(multi, n, opts=("--engine", "agent"), lines_every=2):
    """Attach, trace 0.5 s, detach, @n times, on a running target whose 4 threads check
    every result (a fifth one sleeps in a traced call): it survives with all its checks
    passed, and after each detach the code of every object it had before the first attach
    (the program, libtpcalls.so, and libc's and the loader's, where the stack walkers and
    r_brk are hooked) is what it was."""
    import signal
    import subprocess

    loop = subprocess.Popen([multi, "loop"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = loop.stdout.readline()
        check(first == "ready %d\n" % loop.pid, "attach: the target is running", first)
        text = exec_text(loop.pid)
        check(any("libtpcalls.so" in k[0] for k in text) and any("libc.so" in k[0] for k in text),
              "attach: the target's code read")
        for i in range(n):
            # odd cycles: -c of three functions; every @lines_every-th: the lines of tpc_add
            # (a million a second to print and parse); the other even ones: of tpc_sleep
            sel = "libtpcalls:tpc_add,libtpcalls:tpc_word,libtpcalls:tpc_sleep"
            fn = "tpc_add" if i % lines_every == 0 else "tpc_sleep"
            o = list(opts) + ["--duration", "0.5"] + (["-c", "--json", "-e", sel] if i % 2
                                                      else ["-e", "libtpcalls:" + fn])
            r = calls(o, pid=loop.pid, timeout=60)
            alive = loop.poll() is None
            if i % 2:
                s = r.summary()
                got = {f["function"]: f["calls"] for f in (s or {}).get("functions", [])}
                ok = all(got.get(f, 0) > 0 for f in ("tpc_add", "tpc_word", "tpc_sleep"))
            else:
                cs = r.calls
                ok = cs and all(c.function == fn and c.retint == (
                    sum(c.args) if fn == "tpc_add" else 20) for c in cs)
            check(r.rc == 0 and alive and ok and not r.err,
                  "attach cycle %d: calls traced right, detached" % i, r)
            now = exec_text(loop.pid) if alive else {}
            changed = [k[0] for k in text if now.get(k) != text[k]]
            check(alive and not changed, "attach cycle %d: the code as it was before" % i,
                  changed)
            if not alive:
                break
        st = open("/proc/%d/status" % loop.pid).read() if loop.poll() is None else ""
        check(re.search(r"^TracerPid:\s+0$", st, re.M), "attach: the target is left untraced")
        loop.send_signal(signal.SIGUSR1)
        out, err = loop.communicate(timeout=60)
        m = re.search(r"^calls (\d+) failures (\d+)$", out, re.M)
        check(loop.returncode == 0 and m and int(m.group(2)) == 0,
              "attach: the target survived and all its checks passed", out[-300:] + err[-300:])
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()
