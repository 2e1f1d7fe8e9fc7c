#!/usr/bin/env python3
"""tracepad calls on caller-sensitive functions (glibc's dlsym, dlvsym and dlopen read their
return address to pick the caller's object): dlsym(RTLD_NEXT) from the program and through a
helper that tail-calls it, a dlopen only the calling library's RUNPATH ($ORIGIN/plugins)
finds (dlcaller-O0/-O2), and a preloaded time() wrapper that finds the real one with
dlsym(RTLD_NEXT) as libfaketime does (fakeclock).  With the default selection and with
-e 'libc:dl*', launched and attached (-p): the program's output and exit status are the
native ones, and the dl* calls are still shown with their return values; dlcaller-O2 also
with every return stopping (TRACEPAD_CALLS_SYNC=1: the tail call meets the trampoline)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "calls"))
from tpcalls import check, done, run, target, Run, TRACEPAD  # noqa: E402

SELECTIONS = ((), ("-e", "libc:dl*"))
NOT_FOLLOWED = ("<return not followed>", "<unwound>", "<no return>")
RET = re.compile(r"^(0x[0-9a-f]+|NULL)$")


def env_of(name, sync=False):
    env = dict(os.environ)
    if sync:  # every return stops: tail calls of hooked functions meet the trampoline
        env["TRACEPAD_CALLS_SYNC"] = "1"
    env.pop("LD_LIBRARY_PATH", None)  # meson's names the plugin's folder: RUNPATH alone must
    if name == "fakeclock":
        env["LD_PRELOAD"] = target("libfakeclock.so")
    return env


def shown(name, sel):
    """The function whose lines prove that tracing is on."""
    return "time" if name == "fakeclock" and not sel else "dlsym"


def calls_lines_ok(name, sel, r):
    """Problems with the call lines of a run (empty when fine)."""
    cs = r.calls
    fn = shown(name, sel)
    mine = [c for c in cs if c.function == fn]
    bad = []
    if not mine:
        bad.append("no %s line" % fn)
    dl = [c for c in cs if c.function in ("dlsym", "dlvsym", "dlopen")]
    bad += ["%r" % c for c in dl if c.ret in NOT_FOLLOWED or not RET.match(c.ret)]
    nxt = [c for c in dl if c.function == "dlsym" and c.args_text.startswith("0xffffffffffffffff")]
    if fn == "dlsym" and not [c for c in nxt if c.ret.startswith("0x")]:
        bad.append("no dlsym(RTLD_NEXT, ...) line with its result")
    if name.startswith("dlcaller"):
        opens = [c.ret for c in dl if c.function == "dlopen"]
        if "NULL" not in opens or not [o for o in opens if o.startswith("0x")]:
            bad.append("dlopen lines: %r" % opens)
    # The shifted clock starts on 2020-01-01 00:00:00 (1577836800) and runs on from there.
    if name == "fakeclock" and not sel and not all(
            c.retint is not None and 0 <= c.retint - 1577836800 < 86400 for c in mine):
        bad.append("time() lines: %r" % mine[:3])
    return bad


def launched(name, sel, sync=False):
    env = env_of(name, sync)
    nat = run([target(name)], env=env_of(name))
    fd, path = tempfile.mkstemp(prefix="tp-callers-")
    os.close(fd)
    os.unlink(path)
    # The preload goes to the program alone, through env(1) (tracepad follows its exec): in
    # tracepad's own environment it would load into tracepad too (an ASan build refuses).
    prog = [target(name)]
    if "LD_PRELOAD" in env:
        prog = [shutil.which("env"), "LD_PRELOAD=" + env.pop("LD_PRELOAD")] + prog
    r = run([TRACEPAD, "calls"] + list(sel) + ["-o", path, "--"] + prog, env=env)
    r.text = open(path).read() if os.path.exists(path) else ""
    if os.path.exists(path):
        os.unlink(path)
    what = "%s %s, launched%s" % (name, " ".join(sel) or "(default selection)",
                                  ", TRACEPAD_CALLS_SYNC=1" if sync else "")
    check(nat.rc == 0 and "WRONG" not in nat.out, "%s: native run passes its checks" % what, nat)
    check(r.rc == nat.rc and r.out == nat.out and r.err == nat.err,
          "%s: output and exit status as native" % what, "native %r\ntraced %r" % (nat, r))
    bad = calls_lines_ok(name, sel, r)
    check(not bad, "%s: dl* calls shown with their return values" % what, "%r\n%r" % (bad, r))
    return nat


def attached(name, sel, nat):
    """Rounds before, while and after tracepad attaches give the native round's lines."""
    what = "%s %s, attached" % (name, " ".join(sel) or "(default selection)")
    per_round = [ln for ln in nat.out.splitlines()]
    nlines = len(per_round) // 3

    def expected(i):
        return "\n".join(re.sub(r"^round \d+", "round %d" % i, ln)
                         for ln in per_round[:nlines]) + "\n"

    p = subprocess.Popen([target(name), "loop"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env_of(name))
    fd, path = tempfile.mkstemp(prefix="tp-callers-")
    os.close(fd)
    os.unlink(path)
    t = None
    got, want = [], []
    try:
        first = p.stdout.readline()
        check(first == "ready %d\n" % p.pid, "%s: target ready" % what, first)
        t = subprocess.Popen([TRACEPAD, "calls"] + list(sel) + ["-o", path, "-p", str(p.pid)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        fn = re.compile(r":%s\(" % shown(name, sel))
        seen, extra, i, t0 = False, 0, 0, time.monotonic()
        # Rounds until the trace shows the function (tracing is on), then two more.
        while extra < 2 and time.monotonic() - t0 < 60 and p.poll() is None:
            p.stdin.write("go\n")
            p.stdin.flush()
            got.append("".join(p.stdout.readline() for _ in range(nlines)))
            want.append(expected(i))
            i += 1
            if seen:
                extra += 1
            else:
                time.sleep(0.1)  # the trace file is written every 50 ms
                seen = os.path.exists(path) and bool(fn.search(open(path).read()))
        p.stdin.close()
        out, err = p.stdout.read(), p.stderr.read()
        p.wait(timeout=60)
        to, te = t.communicate(timeout=60)
        r = Run(t.args, t.returncode, to, te)
        r.text = open(path).read() if os.path.exists(path) else ""
        check(seen, "%s: tracing came on (%d rounds)" % (what, i), r)
        check(got == want and p.returncode == nat.rc and out == "" and err == nat.err,
              "%s: every round's output and the exit status as native" % what,
              "rc=%r err=%r\n%r" % (p.returncode, err,
                                    [(g, w) for g, w in zip(got, want) if g != w][:2]))
        check(t.returncode == 0, "%s: tracepad ended with the program" % what, r)
        bad = calls_lines_ok(name, sel, r)
        check(not bad, "%s: dl* calls shown with their return values" % what,
              "%r\n%r" % (bad, r))
    finally:
        for x in (p, t):
            if x and x.poll() is None:
                x.kill()
                x.wait()
        if os.path.exists(path):
            os.unlink(path)


for name in ("dlcaller-O0", "dlcaller-O2", "fakeclock"):
    for sel in SELECTIONS:
        nat = launched(name, sel)
        attached(name, sel, nat)
        if name == "dlcaller-O2":
            launched(name, sel, sync=True)
done()
