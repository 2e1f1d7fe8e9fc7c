#!/usr/bin/env python3
"""tracepad calls on bad input: an unknown plugin, a plugin that is not one, malformed
patterns, a PID that does not exist, a PID that exits mid-trace, exec of what is not an ELF
(a script, a data file), with the engine of argv[2].  Each gets one line on stderr and exit
status 2, or a clean run; the traced program is never harmed."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from tpcalls import ENGINE, check, done, calls, run, target, one_line_error, TRACEPAD

lazy = target("calls-lazy")
multi = target("calls-multi")
N = 20
WANT_OUT = "calls %d sum %d\n" % (N, sum(i + i % 7 + 1 for i in range(N)))


def tp(*args, timeout=60):
    return run([TRACEPAD, "calls", "--engine", ENGINE] + list(args), timeout=timeout)


def not_started(r):
    return r.out == ""


# Plugins: unknown name, a shared object without tracepad_plugin_init, a missing path.
for what, spec, name in (("unknown plugin", "nosuchplugin", "nosuchplugin"),
                         ("not a plugin", target("libtpcalls.so"), "libtpcalls"),
                         ("missing plugin file", "/nonexistent/p.so", "/nonexistent/p.so")):
    r = tp("--plugin", spec, "--", lazy, str(N))
    check(one_line_error(r) and name in r.err, what + ": one line naming it, exit status 2", r)
    check(not_started(r), what + ": the program is not started", r)

# Malformed patterns.
for pat in ("", "[", "libtpcalls:tpc_[add", "!", ":"):
    r = tp("-e", pat, "--", lazy, str(N))
    check(one_line_error(r) and not_started(r),
          "malformed pattern %r: one line, exit status 2, program not started" % pat, r)
# Odd but not necessarily malformed: either refused cleanly or run cleanly.
r = tp("-e", "a:b:c", "--", lazy, str(N))
check(one_line_error(r) and not_started(r) or (r.rc == 0 and WANT_OUT in r.out),
      "pattern 'a:b:c': refused with one line, or the program runs unharmed", r)
r = tp("-p", "abc")
check(one_line_error(r), "-p abc: one line, exit status 2", r)

# A PID that does not exist (a child of ours, reaped: its pid is free).
p = subprocess.Popen(["true"])
p.wait()
r = tp("-p", str(p.pid), "--duration", "1")
check(one_line_error(r) and (str(p.pid) in r.err or "no such process" in r.err.lower()),
      "-p of a PID that does not exist: one line naming it, exit status 2", r)

# The attached program exits on its own while traced: tracepad ends cleanly without waiting
# for --duration (a hang is caught by the timeout), with what it saw.
p = subprocess.Popen([multi, "loop", "1.5"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
first = p.stdout.readline()
check(re.match(r"ready \d+$", first), "gone: the target runs", first)
r = calls(["-c", "--json", "-e", "libtpcalls:tpc_add", "--duration", "120"], pid=p.pid,
          timeout=60)
out, err = p.communicate(timeout=30)
s = r.summary()
add = [f for f in (s or {}).get("functions", []) if f.get("function") == "tpc_add"]
check(r.rc == 0 and add and add[0]["calls"] > 0,
      "gone: tracepad ends when the attached program exits, exit status 0, summary written", r)
check(p.returncode == 0 and re.search(r"^calls \d+ failures 0$", out, re.M),
      "gone: the program ran to its end with its checks passed", "%r %r %r" % (p.returncode,
                                                                               out, err))

# -o where no file can be created: refused before the program starts.
r = tp("-o", "/nonexistent/dir/out", "--", lazy, str(N))
check(one_line_error(r) and not_started(r) and "/nonexistent/dir/out" in r.err,
      "-o in a missing directory: one line naming it, exit status 2, program not started", r)

# A second tracer on a traced process: refused with one line; the first one goes on.
p = subprocess.Popen([multi, "loop"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
try:
    p.stdout.readline()
    fd, out1 = tempfile.mkstemp(prefix="tp-calls-first-")
    os.close(fd)
    first = subprocess.Popen([TRACEPAD, "calls", "--engine", ENGINE, "-c", "--json", "-e",
                              "libtpcalls:tpc_add",
                              "--duration", "3", "-o", out1, "-p", str(p.pid)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    r = tp("-c", "-p", str(p.pid), "--duration", "1")
    check(one_line_error(r), "-p of a process already traced: one line, exit status 2", r)
    o, e = first.communicate(timeout=60)
    text = open(out1).read()
    os.unlink(out1)
    check(first.returncode == 0 and '"tpc_add"' in text,
          "the first tracer went on and detached", "rc=%r err=%r out=%r" % (first.returncode,
                                                                            e, text[:200]))
    p.send_signal(signal.SIGUSR1)
    out, err = p.communicate(timeout=60)
    check(p.returncode == 0 and re.search(r"^calls \d+ failures 0$", out, re.M),
          "the target ran on with its checks passed", "%r %r %r" % (p.returncode, out, err))
finally:
    if p.poll() is None:
        p.kill()
        p.wait()

tmp = tempfile.mkdtemp(prefix="tp-calls-bad-")
try:
    data = os.path.join(tmp, "data")
    with open(data, "wb") as f:
        f.write(bytes(range(256)) * 4)
    os.chmod(data, 0o755)
    script = os.path.join(tmp, "script.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho script ran with $# args\nexit 7\n")
    os.chmod(script, 0o755)

    # A program whose exec of a data file fails (ENOEXEC) goes on, traced.
    nat = run([multi, "badexec", data])
    check(nat.rc == 0 and "exec failed: ENOEXEC\n" in nat.out, "badexec: native run", nat)
    for opts in ([], ["-f"]):
        r = calls(opts + ["-e", "libtpcalls:tpc_add"], [multi, "badexec", data])
        check(r.rc == 0 and r.out == nat.out and r.err == nat.err,
              "badexec %s: the failed exec is the program's, output unchanged" % " ".join(opts),
              r)
        check([c.args for c in r.calls] == [[i, 1] for i in range(5)],
              "badexec %s: its 5 calls after the failed exec are traced" % " ".join(opts),
              r.calls)

    # A child that execs a shell script, followed with -f: the script's output, then the
    # parent's calls.
    nat = run([multi, "spawn", script])
    check(nat.rc == 0 and nat.out == "script ran with 0 args\nstatus 1792 sum 15\n",
          "spawn: native run", nat)
    for opts in (["-f"], []):
        r = calls(opts + ["-e", "libtpcalls:tpc_add"], [multi, "spawn", script])
        check(r.rc == 0 and r.out == nat.out,
              "spawn %s: the script runs, its exit status reaches the parent" % " ".join(opts),
              r)
        check(len(r.calls) == 5, "spawn %s: the parent's 5 calls" % " ".join(opts), r.calls)

    # Launching a script directly works; a data file or a missing file does not.
    r = calls(["-c", "--json"], [script, "a", "b"])
    check(r.rc == 7 and r.out == "script ran with 2 args\n" and r.summary() is not None,
          "a script launched directly: runs under its interpreter, exit status 7", r)
    for what, prog in (("a data file", data), ("a missing file", os.path.join(tmp, "nope"))):
        r = tp("--", prog)
        check(one_line_error(r) and prog in r.err, what + ": one line naming it, exit status 2",
              r)
    check(os.path.getsize(data) == 1024, "the data file is untouched")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done()
