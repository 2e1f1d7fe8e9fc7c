#!/usr/bin/env python3
"""What a SIGKILL of tracepad's tracer process itself (the keeper's child, src/cli/keeper.c)
does to the traced program: the figures of docs/INTERNALS.md ("kill -9 of tracepad", its
limit).  For each form, TRIES times: a fresh 4-thread kill9 target (tests/e2e/targets), the
form attached to it (-p), its tracer process SIGKILLed 20-200 ms into its work; then the
program is watched 2 s (did it die, of what, how soon), looked at (traced? its text as before,
/proc/PID/mem over its r-x mappings?) and asked to end (its own checks: every result and
every SIGUSR1 it sent itself handled).  Run by hand (a minute or two); not a test: the ptrace
forms kill the program by design.

Usage: kill9-inner.py [BUILDDIR] [--tries N] [--seed S] [FORM...]"""
import argparse
import ctypes
import os
import random
import signal
import subprocess
import sys
import time

FORMS = {
    "calls -p": ["calls", "-o", "{out}"],
    "calls -e kill9:* -p": ["calls", "-e", "kill9:*", "-o", "{out}"],
    "calls --engine agent -p": ["calls", "--engine", "agent", "-o", "{out}"],
    "calls --engine ptrace -p": ["calls", "--engine", "ptrace", "-o", "{out}"],
    "count --engine ptrace -p": ["count", "--engine", "ptrace", "-o", "{out}"],
    "count --engine trapflag -p": ["count", "--engine", "trapflag", "-o", "{out}"],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("forms", nargs="*")
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["TRACEPAD"] = os.path.abspath(os.path.join(a.build, "src", "cli", "tracepad"))
    os.environ["TP_TARGETS"] = os.path.abspath(os.path.join(a.build, "tests", "e2e", "targets"))
    sys.path.insert(0, os.path.join(here, "..", "tests", "e2e"))
    import tpe2e
    from tpe2e import readline, text, wait_for

    tracepad, prog = tpe2e.TRACEPAD, tpe2e.target("kill9")
    for p in (tracepad, prog):
        if not os.path.exists(p):
            sys.exit("kill9-inner: %s is missing (build first)" % p)
    # orphans (the program, once its tracer is gone) become our children
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    rnd = random.Random(a.seed)

    def maps(pid):
        try:
            with open("/proc/%d/maps" % pid) as f:
                return f.read()
        except OSError:
            return ""

    def stepped(pid, seen):
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/syscall" % (pid, tid)) as f:
                    v = f.read().split()
            except OSError:
                continue
            if v and v[0] == "-1":
                seen.setdefault(tid, set()).add(v[-1])
        return any(len(v) > 1 for v in seen.values())

    def at_work(form, pid, tp, out):
        seen = {}

        def ready():
            kids = tpe2e.children(tp.pid)
            if len(kids) != 1:
                return False
            tr = tpe2e.tracers(pid)
            if "trapflag" in form:
                return "memfd:tracepad-ctl" in maps(pid) and tr == {0}
            if form.startswith("calls"):
                return tr <= {0, kids[0]} and os.path.exists(out) and os.path.getsize(out) > 0
            return tr == {kids[0]} and stepped(pid, seen)
        return wait_for(lambda: tp.poll() is not None or ready(), 60) and tp.poll() is None

    status = 0
    for form in a.forms or list(FORMS):
        tally = {}
        print("== %s (%d tries)" % (form, a.tries), flush=True)
        for i in range(a.tries):
            p = subprocess.Popen([prog], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            readline(p.stdout, 20)
            wait_for(lambda: len(os.listdir("/proc/%d/task" % p.pid)) == 5, 30)
            before = text(p.pid)
            out = "/tmp/tp-kill9-inner-%d.out" % os.getpid()
            if os.path.exists(out):
                os.unlink(out)
            tp = subprocess.Popen([tracepad] + [x.replace("{out}", out) for x in FORMS[form]] +
                                  ["-p", str(p.pid)], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            working = at_work(form, p.pid, tp, out)
            engine = "agent" if "libtracepad-agent.so" in maps(p.pid) else "ptrace"
            time.sleep(rnd.uniform(0.02, 0.2))
            inner = tpe2e.children(tp.pid)
            t0 = time.monotonic()
            if inner:
                os.kill(inner[0], signal.SIGKILL)
            tp.wait()
            died = None
            while time.monotonic() - t0 < 2:
                if p.poll() is not None:
                    died = time.monotonic() - t0
                    break
                time.sleep(0.001)
            if died is None:
                after = text(p.pid)
                changed = sorted(os.path.basename(k[2]) or hex(k[0])
                                 for k, v in before.items() if after.get(k) != v)
                traced = tpe2e.tracers(p.pid) != {0}
                try:
                    rest = p.communicate(b"\n", timeout=120)[0].decode(errors="replace")
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                    rest = "(hung)"
                what = "lived, %s%s, text %s, its checks: %s" % (
                    "traced" if traced else "untraced", "" if working else " (not at work?)",
                    "changed in " + " ".join(changed) if changed else "unchanged",
                    rest.strip())
                key = "lived, checks %s" % ("held" if p.returncode == 0 else "FAILED")
            else:
                p.wait()
                what = "died (status %d) %.1f ms after the kill" % (p.returncode, died * 1000)
                key = "died of %s" % (signal.Signals(-p.returncode).name
                                      if p.returncode < 0 else "status %d" % p.returncode)
            tally[key] = tally.get(key, 0) + 1
            print("  %d: engine %s: %s" % (i + 1, engine, what), flush=True)
            if os.path.exists(out):
                os.unlink(out)
        print("  => " + ", ".join("%s %d of %d" % (k, v, a.tries) for k, v in
                                  sorted(tally.items())), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
