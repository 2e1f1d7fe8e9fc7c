#!/usr/bin/env python3
"""tracepad markers: list a program's tracepoints at rest and in a live target, enable and
disable them by glob over ptrace, and refuse what it must (tampered site, unknown point,
process without points, no such process)."""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, done  # noqa: E402

tp = os.environ["TRACEPAD"]
target, lib = sys.argv[1], sys.argv[2]
EXE_POINTS = {"mc_alpha": 1, "mc_beta": 2, "other_gamma": 1, "tamper_me": 1}
LIB_POINTS = {"mc_lib": 1, "lib_delta": 1}


def run(*args):
    return subprocess.run([tp, "markers"] + list(args), capture_output=True, text=True,
                          timeout=30)


def sites(out):
    """[(object, name, addr, rest...)] from list output ("# object" headers)."""
    obj, res = None, []
    for line in out.splitlines():
        if line.startswith("# "):
            obj = line[2:]
            continue
        f = line.split()
        res.append((obj, f[0], int(f[1], 16), f[2:]))
    return res


def per_name(ss):
    d = {}
    for s in ss:
        d[s[1]] = d.get(s[1], 0) + 1
    return d


def one_line(r):
    return len(r.stderr.strip().splitlines()) == 1


# ---- at rest ----
r = run("list", target)
ss = sites(r.stdout)
check(r.returncode == 0 and per_name(ss) == EXE_POINTS, "list PROGRAM: the points and sites "
      "the target defines", r.stdout + r.stderr)
alpha = [s for s in ss if s[1] == "mc_alpha"]
check(alpha and alpha[0][3][0] == "i" and "target.c:" in alpha[0][3][1]
      and '"alpha %d"' in r.stdout, "list PROGRAM: types, source and format of a site",
      r.stdout)
r = run("list", lib)
check(r.returncode == 0 and per_name(sites(r.stdout)) == LIB_POINTS,
      "list LIBRARY: the library's points", r.stdout + r.stderr)
r = run("list", "/nonexistent/prog")
check(r.returncode == 2 and one_line(r), "list of a missing file: exit 2, one line", r.stderr)

# ---- live ----
proc = subprocess.Popen([target, lib], stdout=subprocess.PIPE, text=True)
pid = proc.pid
check(proc.stdout.readline().strip() == "ready", "target started")


def counts_line():
    line = proc.stdout.readline()
    m = re.findall(r"(\w+)=(\d+)", line)
    return {k: int(v) for k, v in m}


def live():
    r = run("list", "-p", str(pid))
    return r, sites(r.stdout)


def states(ss, names):
    return {(s[1], s[3][0], s[3][1]) for s in ss if s[1] in names}


try:
    r, ss = live()
    names = per_name(ss)
    check(r.returncode == 0 and names == {**EXE_POINTS, **LIB_POINTS},
          "list -p: the sites of the executable and of the dlopened library", r.stdout + r.stderr)
    check(ss and all(s[3][0] == "disabled" and s[3][1] == "point:off" for s in ss),
          "list -p: all disabled at start", r.stdout)
    lib_addrs = [s[2] for s in ss if s[1] == "mc_lib"]
    maps = open("/proc/%d/maps" % pid).read()
    check(lib_addrs and any(
        int(a, 16) <= lib_addrs[0] < int(b, 16) and "markers-cli-lib" in rest
        for a, b, rest in re.findall(r"^(\w+)-(\w+) (.*)$", maps, re.M)),
        "list -p: runtime addresses inside the library's mapping", lib_addrs)

    c0 = counts_line()
    check(c0 and all(v == 0 for v in c0.values()), "no events while disabled", c0)

    r = run("enable", "-p", str(pid), "mc_*")
    check(r.returncode == 0 and r.stdout.startswith("enabled 4 sites"),
          "enable 'mc_*': 4 sites changed", r.stdout + r.stderr)
    r, ss = live()
    mc = {"mc_alpha", "mc_beta", "mc_lib"}
    check(states(ss, mc) == {(n, "enabled", "point:on") for n in mc}
          and states(ss, {"other_gamma", "lib_delta", "tamper_me"}) ==
          {(n, "disabled", "point:off") for n in ("other_gamma", "lib_delta", "tamper_me")},
          "list -p: exactly the mc_* sites and points enabled", r.stdout)
    deadline = time.monotonic() + 20
    c = counts_line()
    while c and c["mc_lib"] == 0 and time.monotonic() < deadline:
        c = counts_line()
    c1 = counts_line()
    # The target may have been stopped between the sites of one iteration: beta ~ 2 alpha.
    check(c1 and all(c1[n] > 0 for n in mc) and
          0 <= c1["mc_beta"] - 2 * c1["mc_alpha"] <= 2 and
          all(c1[n] == 0 for n in ("other_gamma", "lib_delta", "tamper_me")),
          "the target's consumer receives events of exactly the enabled points", c1)

    r = run("disable", "-p", str(pid), "mc_*")
    check(r.returncode == 0 and r.stdout.startswith("disabled 4 sites"),
          "disable 'mc_*': 4 sites changed", r.stdout + r.stderr)
    r, ss = live()
    check(ss and all(s[3][0] == "disabled" and s[3][1] == "point:off" for s in ss),
          "list -p: all disabled again", r.stdout)
    proc.send_signal(signal.SIGUSR1)
    while proc.stdout.readline().strip() not in ("mark", ""):
        pass
    counts_line()
    c2 = counts_line()
    counts_line()
    c3 = counts_line()
    check(c2 and c2 == c3, "no more events after disable", (c2, c3))

    r = run("disable", "-p", str(pid), "mc_alpha")
    check(r.returncode == 0 and r.stdout.startswith("disabled 0 sites"),
          "disabling a disabled point changes nothing", r.stdout + r.stderr)

    # A tampered site: change the NOP5's displacement byte (still a NOP for the target).
    tam = [s for s in ss if s[1] == "tamper_me"][0][2]
    with open("/proc/%d/mem" % pid, "r+b", buffering=0) as mem:
        mem.seek(tam + 4)
        mem.write(b"\x08")
    r = run("enable", "-p", str(pid), "tamper_me")
    check(r.returncode == 1 and one_line(r) and "unexpected bytes" in r.stderr
          and r.stdout.startswith("enabled 0 sites"), "a tampered site is refused, one line",
          r.stdout + r.stderr)
    r, ss = live()
    check(states(ss, {"tamper_me"}) == {("tamper_me", "unknown:0f1f440008", "point:off")},
          "the tampered site is left as it was, its point not enabled", r.stdout)

    r = run("enable", "-p", str(pid), "nope*")
    check(r.returncode == 2 and one_line(r) and "no point matches" in r.stderr,
          "unknown glob: exit 2, one line", r.stderr)
    r = run("enable", "-p", str(pid))
    check(r.returncode == 2 and one_line(r), "missing GLOB: exit 2, one line", r.stderr)
    r = run("frobnicate")
    check(r.returncode == 2 and one_line(r), "unknown subcommand: exit 2, one line", r.stderr)

    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        # Wait for sleep to be in nanosleep, its libraries mapped, before taking its maps.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
                "libc" in open("/proc/%d/maps" % sleeper.pid).read() and
                "State:\tS" in open("/proc/%d/status" % sleeper.pid).read()):
            time.sleep(0.01)
        exe = open("/proc/%d/maps" % sleeper.pid).read()
        r = run("enable", "-p", str(sleeper.pid), "*")
        check(r.returncode == 2 and one_line(r) and "no tracepoints" in r.stderr,
              "a process without points: exit 2, one line", r.stderr)
        status = open("/proc/%d/status" % sleeper.pid).read()
        check(sleeper.poll() is None and "TracerPid:\t0" in status and
              open("/proc/%d/maps" % sleeper.pid).read() == exe,
              "... and it is left running, untraced, unchanged", status)
    finally:
        sleeper.kill()
        sleeper.wait()
    r = run("list", "-p", "999999999")
    check(r.returncode == 2 and one_line(r) and "no such process" in r.stderr,
          "no such process: exit 2, one line", r.stderr)

    r = run("enable", "-p", str(pid), "other_gamma,lib_delta")
    check(r.returncode == 0 and r.stdout.startswith("enabled 2 sites"),
          "comma-separated globs", r.stdout + r.stderr)
finally:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
check(proc.returncode == 0, "the target exits normally, its own checks passed", proc.returncode)
en = re.search(r"^enabled:(.*)$", out, re.M)
check(en and set(en.group(1).split()) == {"other_gamma", "lib_delta"},
      "the target's runtime agrees on which points are enabled", out)
done()
