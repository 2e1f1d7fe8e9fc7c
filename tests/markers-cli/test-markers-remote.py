#!/usr/bin/env python3
"""Outside control of a running process: list -p, enable -p, record -p and disable -p on a
target with points in its program and in a library it dlopened; tracepad dump shows the typed
events with their formatted text and the values the target computed.  record -p leaves the
process running, untraced, with the points it enabled disabled again and its memory given
back (--fields names a field); bad input (unknown point, tampered site, a process without
libtracepad, no such process) gets one line and leaves the process as it was."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, done  # noqa: E402

tp = os.environ["TRACEPAD"]
target, lib = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="tp-markers-remote-")
FORMATS = {"mc_alpha": "alpha %d", "mc_beta_is": "beta %d %s", "mc_beta_l": "beta again %ld",
           "other_gamma": "gamma", "mc_lib": "lib i=%d", "lib_delta": "delta %s"}


def run(*args, timeout=30):
    return subprocess.run([tp, "markers"] + list(args), capture_output=True, text=True,
                          timeout=timeout)


def one_line(r):
    return len(r.stderr.strip().splitlines()) == 1


def states(pid):
    """{name: {(site state, point state)}} from list -p."""
    r = run("list", "-p", str(pid))
    st = {}
    for line in r.stdout.splitlines():
        if not line.startswith("#"):
            f = line.split()
            st.setdefault(f[0], set()).add((f[2], f[3]))
    return st


def dump(d):
    """[(pid, tid, class, {field: value})] from tracepad dump."""
    r = subprocess.run([tp, "dump", d], capture_output=True, text=True, timeout=30)
    evs = []
    for line in r.stdout.splitlines():
        f = line.split(None, 5)
        pid, tid = (int(x) for x in f[3].split("/"))
        fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', f[5] if len(f) > 5 else ""))
        evs.append((pid, tid, f[4], fields))
    return r, evs


def text_ok(name, fields):
    """The event's text is its point's format applied to its own fields."""
    fmt = FORMATS[name]
    args = [int(v) if v[0] != '"' else v[1:-1]  # the fields after fmt ("lib i=%d": i)
            for k, v in fields.items() if k not in ("fmt", "text")]
    return fields.get("text") == '"%s"' % (fmt.replace("%ld", "%d") % tuple(args))


def untraced(pid):
    return "TracerPid:\t0" in open("/proc/%d/status" % pid).read()


def memfd_rss(pid):
    """kB resident in the process's mappings of tracepad's memfds."""
    kb, inside = 0, False
    for line in open("/proc/%d/smaps" % pid):
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = "memfd:tracepad" in line
        elif inside and line.startswith("Rss:"):
            kb += int(line.split()[1])
    return kb


proc = subprocess.Popen([target, lib], stdout=subprocess.PIPE, text=True)
pid = proc.pid
check(proc.stdout.readline().strip() == "ready", "target started")
try:
    st = states(pid)
    check(set(st) == {"mc_alpha", "mc_beta", "other_gamma", "tamper_me", "mc_lib", "lib_delta"}
          and all(v == {("disabled", "point:off")} for v in st.values()),
          "list -p: the program's and the dlopened library's points, all disabled", st)
    r = run("enable", "-p", str(pid), "other_gamma")
    check(r.returncode == 0 and r.stdout.startswith("enabled 1 site"), "enable -p other_gamma",
          r.stdout + r.stderr)

    d1 = os.path.join(tmp, "one")
    # --fields: mc_alpha's field named explicitly (its format "alpha %d" names none).
    r = run("record", "-p", str(pid), "-e", "mc_*,lib_delta", "--trace", d1, "--duration",
            "1.5", "--fields", "mc_alpha=iter")
    check(r.returncode == 0 and not r.stderr, "record -p -e GLOB --duration: exit 0, quiet",
          r.stdout + r.stderr)
    check(proc.poll() is None and untraced(pid), "the process runs on, untraced")
    st = states(pid)
    check(all(st[n] == {("disabled", "point:off")}
              for n in ("mc_alpha", "mc_beta", "mc_lib", "lib_delta")) and
          st["other_gamma"] == {("enabled", "point:on")},
          "record -p disabled the points it enabled, left the one enabled before", st)
    check(memfd_rss(pid) == 0, "the rings' memory is given back", memfd_rss(pid))

    dr, evs = dump(d1)
    names = {e[2] for e in evs}
    check(dr.returncode == 0 and names == set(FORMATS),
          "dump: one class per point signature, the library's included", (names, dr.stderr))
    check(all(e[0] == pid and e[1] == pid for e in evs), "dump: the target's pid and tid")
    bad = [e for e in evs if not text_ok(e[2], e[3])]
    check(evs and not bad, "dump: every event's text is its format applied to its values",
          bad[:3])
    check(all(list(e[3]) == ["fmt", "iter", "text"] for e in evs if e[2] == "mc_alpha"),
          "dump: mc_alpha's field named iter (--fields)")
    alpha = [int(e[3]["iter"]) for e in evs if e[2] == "mc_alpha"]
    check(len(alpha) > 20 and alpha == list(range(alpha[0], alpha[0] + len(alpha))),
          "dump: mc_alpha counts the target's iterations, consecutive", alpha[:5])
    lib_i = [int(e[3]["i"]) for e in evs if e[2] == "mc_lib"]
    beta = [int(e[3]["a0"]) for e in evs if e[2] == "mc_beta_is"]
    # The process was stopped at any point of an iteration when recording began and ended.
    check(beta and lib_i and set(beta) <= set(alpha) | {alpha[0] - 1} and
          set(alpha) - {alpha[-1]} <= set(lib_i) <= set(alpha) | {alpha[0] - 1},
          "dump: the library's and the other points' values match the same iterations",
          (alpha[:3], beta[:3], lib_i[:3]))
    check(all(e[3].get("a1") == '"one"' for e in evs if e[2] == "mc_beta_is") and
          all(e[3].get("a0") == '"x"' for e in evs if e[2] == "lib_delta"),
          "dump: string arguments")
    gamma = sum(1 for e in evs if e[2] == "other_gamma")
    check(abs(gamma - len(alpha)) <= 1, "dump: the point enabled before is recorded too",
          (gamma, len(alpha)))
    br = subprocess.run(["babeltrace2", d1], capture_output=True, text=True, timeout=30)
    check(br.returncode == 0 and len(br.stdout.splitlines()) == len(evs),
          "babeltrace2 reads the same number of events", br.stderr[-1000:])

    r = run("disable", "-p", str(pid), "other_gamma")
    check(r.returncode == 0 and r.stdout.startswith("disabled 1 site"), "disable -p",
          r.stdout + r.stderr)

    # A second session, ended by Ctrl-C.
    d2 = os.path.join(tmp, "two")
    rec = subprocess.Popen([tp, "markers", "record", "-p", str(pid), "-e", "mc_lib",
                            "--trace", d2], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    # Ctrl-C once the recording is under way (mc_lib enabled), however slow the machine
    deadline = time.monotonic() + 30
    while (rec.poll() is None and time.monotonic() < deadline and
           states(pid).get("mc_lib") != {("enabled", "point:on")}):
        time.sleep(0.05)
    time.sleep(0.5)
    rec.send_signal(signal.SIGINT)
    out, err = rec.communicate(timeout=30)
    dr, evs = dump(d2)
    lib_i = [int(e[3]["i"]) for e in evs]
    check(rec.returncode == 0 and {e[2] for e in evs} == {"mc_lib"} and len(lib_i) > 5 and
          lib_i == list(range(lib_i[0], lib_i[0] + len(lib_i))) and
          all(text_ok("mc_lib", e[3]) for e in evs),
          "a second record -p, stopped by SIGINT: the library point's events",
          (rec.returncode, err, lib_i[:5]))
    st = states(pid)
    check(all(v == {("disabled", "point:off")} for v in st.values()) and untraced(pid),
          "... and everything is disabled again", st)

    # ---- bad input ----
    d3 = os.path.join(tmp, "bad")
    r = run("record", "-p", str(pid), "-e", "nope*", "--trace", d3)
    check(r.returncode == 2 and one_line(r) and "no point matches" in r.stderr and
          not os.path.exists(d3), "unknown point: exit 2, one line, no trace", r.stderr)
    tam = [int(line.split()[1], 16) for line in run("list", "-p", str(pid)).stdout.splitlines()
           if line.startswith("tamper_me")][0]
    with open("/proc/%d/mem" % pid, "r+b", buffering=0) as mem:
        mem.seek(tam + 4)
        mem.write(b"\x08")
    r = run("record", "-p", str(pid), "-e", "tamper_me", "--trace", d3, "--duration", "0.3")
    check(r.returncode == 1 and one_line(r) and "unexpected bytes" in r.stderr,
          "a tampered site: refused, one line, exit 1", r.stdout + r.stderr)
    st = states(pid)
    check(st["tamper_me"] == {("unknown:0f1f440008", "point:off")} and untraced(pid),
          "... the site is left as it was", st)
    r = run("record", "-p", "999999999", "--trace", d3 + "x")
    check(r.returncode == 2 and one_line(r) and "no such process" in r.stderr,
          "no such process: exit 2, one line", r.stderr)
    r = run("record", "-p", str(pid), "--trace", d3 + "y", "--", target)
    check(r.returncode == 2 and one_line(r), "-p and a PROGRAM: exit 2", r.stderr)
    r = run("record", "--duration", "1", "--trace", d3 + "z", "--", target)
    check(r.returncode == 2 and one_line(r), "--duration without -p: exit 2", r.stderr)

    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
                "libc" in open("/proc/%d/maps" % sleeper.pid).read() and
                "State:\tS" in open("/proc/%d/status" % sleeper.pid).read()):
            time.sleep(0.01)
        maps = open("/proc/%d/maps" % sleeper.pid).read()
        r = run("record", "-p", str(sleeper.pid), "--trace", d3 + "s", "--duration", "0.2")
        check(r.returncode == 2 and one_line(r) and "no tracepoints" in r.stderr,
              "a process without libtracepad: exit 2, one line", r.stderr)
        check(sleeper.poll() is None and untraced(sleeper.pid) and
              open("/proc/%d/maps" % sleeper.pid).read() == maps,
              "... left running, untraced, unchanged")
    finally:
        sleeper.kill()
        sleeper.wait()

    # A process that may not read tracepad's descriptors (another user; tracepad as root):
    # libtracepad says so, record -p ends with one line and disables what it enabled.
    if os.geteuid() == 0:
        # The other user runs copies: the build tree may sit in a directory only root
        # may enter (a CI clone made with mktemp -d).
        od = tempfile.mkdtemp(prefix="tp-markers-other-")
        os.chmod(od, 0o755)
        copies = []
        for f in (target, lib, os.path.join(os.environ["TP_BUILD_ROOT"], "src", "markers",
                                            "libtracepad.so.0")):
            copies.append(os.path.join(od, os.path.basename(f)))
            shutil.copy2(f, copies[-1])
            os.chmod(copies[-1], 0o755)
        other = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534",
                                  "--clear-groups", copies[0], copies[1]],
                                 stdout=subprocess.PIPE, text=True,
                                 env=dict(os.environ, LD_LIBRARY_PATH=od))
        try:
            check(other.stdout.readline().strip() == "ready", "a target of another user")
            r = run("record", "-p", str(other.pid), "-e", "mc_alpha", "--trace", d3 + "u",
                    "--duration", "20")
            st = states(other.pid)
            check(r.returncode == 2 and one_line(r) and "Permission denied" in r.stderr and
                  st["mc_alpha"] == {("disabled", "point:off")} and untraced(other.pid) and
                  other.poll() is None,
                  "its libtracepad cannot open the memfds: exit 2, one line, points "
                  "disabled again, process running", (r.stderr, st))
        finally:
            other.send_signal(signal.SIGTERM)
            other.communicate(timeout=20)
            shutil.rmtree(od, ignore_errors=True)
        check(other.returncode == 0, "... and it exits normally", other.returncode)
    else:
        print("# not root: the other-user case is not run")

    # The process exits while it is recorded: record -p ends with it.
    d4 = os.path.join(tmp, "exit")
    rec = subprocess.Popen([tp, "markers", "record", "-p", str(pid), "-e", "mc_beta",
                            "--trace", d4], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    time.sleep(0.7)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    rout, rerr = rec.communicate(timeout=30)
    dr, evs = dump(d4)
    check(rec.returncode == 0 and len(evs) > 5 and
          {e[2] for e in evs} == {"mc_beta_is", "mc_beta_l"} and
          all(text_ok(e[2], e[3]) for e in evs),
          "record -p ends when the process exits, its events in the trace",
          (rec.returncode, rerr, len(evs)))
finally:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
check(proc.returncode == 0, "the target exits normally, its own checks passed", proc.returncode)
en = re.search(r"^enabled:(.*)$", out, re.M)
check(en and en.group(1).split() == ["mc_beta"],
      "the target's runtime agrees: only the point of the last recording is enabled",
      out[-300:])
done()
