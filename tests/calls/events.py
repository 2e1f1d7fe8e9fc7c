#!/usr/bin/env python3
"""tracepad calls reports process events as strace does: calls-procev execs itself (the same
process), raises SIGUSR1, runs an int3, and has three children: one execs and exits with 3, one is killed
by SIGKILL, one execs and kills itself with SIGTERM; it gets their SIGCHLDs and exits with 5.
With -f, the exec, exit, death and signal lines of every process (pids named by the roles
the processes print) are those the target's behaviour implies, the same in the text lines,
the -c --json events and the --trace events, and the same as strace -f reports (when strace
is installed); without -f, only the traced process's own (its exec included).  With the
engine of argv[2]."""
import json
import os
import re
import subprocess
import tempfile

from tpcalls import EVENT, TRACEPAD, calls, check, done, need_peer, run, target

prog = target("calls-procev")
PROG = os.path.basename(prog)


def roles(out):
    """{pid: role} from the lines "ROLE PID" the target prints."""
    return {int(m.group(2)): m.group(1)
            for m in re.finditer(r"^(main|exit|kill|term) (\d+)$", out, re.M)}


def fields(text):
    """{si_...: value} of a siginfo's braces."""
    return dict(re.findall(r"(\w+)=([^,}]+)", text))


def sig_event(name, info, role):
    f = fields(info)
    pid = f.get("si_pid")
    return ("signal", name, f.get("si_code"), role.get(int(pid), pid) if pid else None,
            f.get("si_status"))


def per_role(events, role):
    """[(pid, event)] as {role: [event, ...]}, in order; unknown pids keep their number."""
    out = {}
    for pid, ev in events:
        out.setdefault(role.get(pid, pid), []).append(ev)
    return out


def exec_event(path, argv):
    return ("exec", os.path.basename(path), tuple(os.path.basename(a) if i == 0 else a
                                                   for i, a in enumerate(argv)))


def from_lines(lines, role):
    evs = []
    for ln in lines:
        m = re.match(r'^\[(\d+)\] \+\+\+ exec (".*?") (\[.*\]) \+\+\+$', ln)
        if m:
            evs.append((int(m.group(1)), exec_event(json.loads(m.group(2)),
                                                    json.loads(m.group(3)))))
            continue
        m = re.match(r"^\[(\d+)\] \+\+\+ exited with (\d+) \+\+\+$", ln)
        if m:
            evs.append((int(m.group(1)), ("exit", int(m.group(2)))))
            continue
        m = re.match(r"^\[(\d+)\] \+\+\+ killed by (SIG\w+) \+\+\+$", ln)
        if m:
            evs.append((int(m.group(1)), ("killed", m.group(2))))
            continue
        m = re.match(r"^\[(\d+)\] --- (SIG\w+) (\{.*\}) ---$", ln)
        if m:
            evs.append((int(m.group(1)), sig_event(m.group(2), m.group(3), role)))
    return per_role(evs, role)


def from_strace(text, role):
    evs, first = [], True
    for ln in text.splitlines():
        m = re.match(r'^(\d+) +execve\((".*?"), (\[.*?\]), .*\) = 0$', ln)
        if m:
            if not first:  # the launch of the program, which tracepad does not show
                evs.append((int(m.group(1)), exec_event(json.loads(m.group(2)),
                                                        json.loads(m.group(3)))))
            first = False
            continue
        m = re.match(r"^(\d+) +\+\+\+ exited with (\d+) \+\+\+$", ln)
        if m:
            evs.append((int(m.group(1)), ("exit", int(m.group(2)))))
            continue
        m = re.match(r"^(\d+) +\+\+\+ killed by (SIG\w+) \+\+\+$", ln)
        if m:
            evs.append((int(m.group(1)), ("killed", m.group(2))))
            continue
        m = re.match(r"^(\d+) +--- (SIG\w+) (\{.*\}) ---$", ln)
        if m:
            evs.append((int(m.group(1)), sig_event(m.group(2), m.group(3), role)))
    return per_role(evs, role)


def from_json(obj, role):
    evs = []
    for e in (obj or {}).get("events", []):
        k = e.get("event")
        if k == "exec":
            evs.append((e["pid"], exec_event(e["program"], e["argv"])))
        elif k == "exit":
            evs.append((e["pid"], ("exit", e["status"])))
        elif k == "killed":
            evs.append((e["pid"], ("killed", e["signal"])))
        elif k == "signal":
            si = e["siginfo"]
            info = "{" + ", ".join("%s=%s" % kv for kv in si.items()) + "}"
            evs.append((e["tid"], sig_event(e["signal"], info, role)))
    return per_role(evs, role)


def from_dump(text, role):
    evs = []
    for ln in text.splitlines():
        m = re.search(r" (\d+)/(\d+) (process_exec|process_exit|process_killed|signal) (.*)$", ln)
        if not m:
            continue
        tid, kind, rest = int(m.group(2)), m.group(3), m.group(4)
        f = {k: json.loads(v) if v.startswith('"') else v
             for k, v in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', rest)}
        if kind == "process_exec":
            evs.append((tid, exec_event(f["program"], json.loads(f["argv"]))))
        elif kind == "process_exit":
            evs.append((tid, ("exit", int(f["status"]))))
        elif kind == "process_killed":
            evs.append((tid, ("killed", f["signal"])))
        else:
            evs.append((tid, sig_event(f["signal"], f["siginfo"], role)))
    return per_role(evs, role)


# What the target does, process by process.
WANT = {
    "main": [("exec", PROG, (PROG, "run")),
             ("signal", "SIGUSR1", "SI_TKILL", "main", None),
             ("signal", "SIGTRAP", "SI_KERNEL", None, None),
             ("signal", "SIGCHLD", "CLD_EXITED", "exit", "3"),
             ("signal", "SIGCHLD", "CLD_KILLED", "kill", "SIGKILL"),
             ("signal", "SIGCHLD", "CLD_KILLED", "term", "SIGTERM"),
             ("exit", 5)],
    "exit": [("exec", PROG, (PROG, "exit", "3")), ("exit", 3)],
    "kill": [("killed", "SIGKILL")],
    "term": [("exec", PROG, (PROG, "term")),
             ("signal", "SIGTERM", "SI_USER", "term", None),
             ("killed", "SIGTERM")],
}

nat = run([prog])
check(nat.rc == 5 and len(roles(nat.out)) == 4, "native run: 4 processes, exit status 5", nat)

for rep in range(2):
    r = calls(["-f", "-e", "!*"], [prog])
    role = roles(r.out)
    check(r.rc == 5 and len(role) == 4, "-f #%d: the program ran as natively" % rep, r)
    check(r.lines and all(EVENT.match(ln) for ln in r.lines),
          "-f #%d: every line an event line" % rep, r.text)
    got = from_lines(r.lines, role)
    check(got == WANT, "-f #%d: exec, exit, death and signal lines of every process" % rep,
          "got  %r\nwant %r" % (got, WANT))

    # The same in the -c --json summary and in the trace.
    r = calls(["-f", "-e", "!*", "-c", "--json"], [prog])
    role = roles(r.out)
    got = from_json(r.summary(), role)
    check(r.rc == 5 and got == WANT, "-f -c --json #%d: the same events" % rep,
          "got  %r\nwant %r\n%r" % (got, WANT, r))
    with tempfile.TemporaryDirectory(prefix="tp-events-") as d:
        tdir = os.path.join(d, "t")
        r = calls(["-f", "-e", "!*", "--trace", tdir], [prog])
        role = roles(r.out)
        dump = run([TRACEPAD, "dump", tdir])
        got = from_dump(dump.out, role)
        check(r.rc == 5 and dump.rc == 0 and got == WANT,
              "-f --trace #%d: the same events in the trace" % rep,
              "got  %r\nwant %r\n%r" % (got, WANT, dump))

# Without -f: the process's own events, its exec included; nothing of its children.
r = calls(["-e", "!*"], [prog])
role = roles(r.out)
got = from_lines(r.lines, role)
check(r.rc == 5 and got == {"main": WANT["main"]},
      "no -f: the traced process's exec, signals and exit, no child's",
      "got  %r\n%r" % (got, r))

# strace -f on the same target reports the same, pids for pids.
if need_peer("strace", "strace", "-f: the events strace -f reports"):
    with tempfile.TemporaryDirectory(prefix="tp-events-") as d:
        out = os.path.join(d, "strace.out")
        st = run(["strace", "-f", "-s", "4096", "-e", "trace=execve", "-e", "signal=all",
                  "-o", out, prog])
        text = open(out).read() if os.path.exists(out) else ""
        sgot = from_strace(text, roles(st.out))
    check(st.rc == 5 and sgot == WANT, "strace -f reports what the target does",
          "got  %r\nwant %r\n%r" % (sgot, WANT, st))
    r = calls(["-f", "-e", "!*"], [prog])
    got = from_lines(r.lines, roles(r.out))
    check(got == sgot, "-f: the events strace -f reports, process by process",
          "tracepad %r\nstrace   %r" % (got, sgot))
done()
