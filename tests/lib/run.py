"""The one way the Python tests run a program: run() waits for it with a timeout and returns a
Run (exit status, stdout, stderr, seconds), never raising for a hang or a missing program; the
suites subclass Run to add what they parse from the output (tests/calls, e2e, calls-memory)."""
import os
import signal
import subprocess
import sys
import time

TIMEOUT = 120

# The sessions run() has started and not yet reaped: meson ends a test that overran its time
# with SIGTERM, which would leave them running (a hung tracepad stepped a looping target for
# the rest of the suite, a CPU gone): they are killed first.
_live = set()


def _on_term(sig, frame):
    for pid in list(_live):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)


if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _on_term)


class Run:
    """One finished process.  rc: the exit status (-N for signal N), or a string saying why
    there is none ("timeout after 120s", "cannot run: ...").  out, err: text, or bytes when
    run with text=False."""

    def __init__(self, argv, rc, out, err, seconds=0.0):
        self.argv = argv
        self.rc = rc
        self.out = out
        self.err = err
        self.seconds = seconds

    def __repr__(self):
        return "argv=%s\nrc=%r\nstdout=%r\nstderr=%r" % (
            " ".join(map(str, self.argv)), self.rc, self.out[-600:], self.err[-600:])


def _text(b, text):
    b = b or b""
    return b.decode(errors="replace") if text else b


def run(argv, timeout=TIMEOUT, cwd=None, env=None, stdin=subprocess.DEVNULL, text=True,
        cls=Run):
    """@argv to its end (stdin from /dev/null unless given); an instance of @cls."""
    argv = list(argv)
    t0 = time.monotonic()
    try:
        # a session of its own, so that a timeout kills what it started too: a program that
        # tracepad launched runs on when tracepad is killed, and a hung one would hold the
        # pipes (and a CPU) for the rest of the suite
        p = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd=cwd, env=env, start_new_session=True)
    except OSError as e:
        return cls(argv, "cannot run: %s" % e, _text(b"", text), _text(b"", text),
                   seconds=time.monotonic() - t0)
    _live.add(p.pid)
    try:
        return _wait(p, argv, timeout, text, cls, t0)
    finally:
        _live.discard(p.pid)


def _wait(p, argv, timeout, text, cls, t0):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a process that left the group holds a pipe
            p.kill()
            out, err = b"", b""
        return cls(argv, "timeout after %ds" % timeout, _text(out, text), _text(err, text),
                   seconds=time.monotonic() - t0)
    return cls(argv, p.returncode, _text(out, text), _text(err, text),
               seconds=time.monotonic() - t0)


def tracepad_and_targets():
    """TRACEPAD (the CLI) from the environment and argv[1] (a directory of test targets) as
    an absolute path; a TAP bail-out when either is missing."""
    tp = os.environ.get("TRACEPAD", "")
    targets = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else ""
    if not tp or not os.access(tp, os.X_OK):
        print("Bail out! TRACEPAD is not set or not executable: %r" % tp)
        sys.exit(1)
    if not os.path.isdir(targets):
        print("Bail out! the targets directory (argv[1]) is missing: %r" % targets)
        sys.exit(1)
    return tp, targets
