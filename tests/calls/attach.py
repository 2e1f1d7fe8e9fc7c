#!/usr/bin/env python3
"""tracepad calls -p: 20 cycles of attach, trace 1 s, detach against a running target whose
4 threads check every result they compute and whose fifth thread is inside a traced 20 ms
sleep most of the time (so detaching finds hooked return addresses); some cycles end with
SIGINT, SIGTERM or SIGHUP to tracepad instead of --duration; with the engine of argv[2]
(the agent's: 5 of those cycles, calls-agent-attach does 100 of --duration).  After each
cycle the code of the target's objects is what it was.  At the end the target stops on
request and exits 0 with all its checks passed."""
import os
import re
import signal
import subprocess
import tempfile
import time

from tpcalls import ENGINE, check, done, calls, exec_text, target, Run, TRACEPAD

CYCLES = int(os.environ.get("TP_CALLS_CYCLES", "20"))
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
prog = target("calls-multi")


def calls_stopped(opts, pid, sig):
    """tracepad calls OPTS -p PID, ended by @sig after 1 s (a user's Ctrl-C)."""
    fd, out = tempfile.mkstemp(prefix="tp-calls-stop-")
    os.close(fd)
    os.unlink(out)
    t = subprocess.Popen([TRACEPAD, "calls"] + opts + ["-o", out, "-p", str(pid)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    t.send_signal(sig)
    try:
        o, e = t.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        t.kill()
        o, e = t.communicate()
    r = Run(t.args, t.returncode, o, e)
    if os.path.exists(out):
        with open(out) as f:
            r.text = f.read()
        os.unlink(out)
    return r

p = subprocess.Popen([prog, "loop"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
try:
    first = p.stdout.readline()
    m = re.match(r"ready (\d+)$", first)
    check(m and int(m.group(1)) == p.pid, "the target is running", first)
    tids = set()
    text = exec_text(p.pid)
    # the cycle's number says how it ends and what it prints; the agent's: lines, -c, and
    # one ended by each signal (calls-agent-attach does its 100 cycles of --duration)
    plan = range(CYCLES) if ENGINE == "ptrace" else [i for i in (0, 3, 4, 9, 14) if i < CYCLES]
    engine = ENGINE
    for i in plan:
        opts = ["--engine", engine, "--duration", "1", "-c", "--json", "-e",
                "libtpcalls:tpc_add,libtpcalls:tpc_word,libtpcalls:tpc_sleep"]
        if i % 4 == 3:  # now and then, lines instead of a summary
            opts = ["--engine", engine, "--duration", "1", "-e", "libtpcalls:tpc_add"]
        t0 = time.monotonic()
        sig = STOPS[i // 5 % len(STOPS)] if i % 5 == 4 else None
        if sig:
            opts = [o for o in opts if o not in ("--duration", "1")]
            r = calls_stopped(opts, p.pid, sig)
        else:
            r = calls(opts, pid=p.pid, timeout=60)
        took = time.monotonic() - t0
        alive = p.poll() is None
        if "-c" in opts:
            s = r.summary()
            add = [f for f in (s or {}).get("functions", []) if f.get("function") == "tpc_add"]
            word = [f for f in (s or {}).get("functions", []) if f.get("function") == "tpc_word"]
            slp = [f for f in (s or {}).get("functions", []) if f.get("function") == "tpc_sleep"]
            ok = (r.rc == 0 and alive and add and add[0]["calls"] > 0 and word
                  and word[0]["calls"] > 0 and slp and slp[0]["calls"] > 0
                  and s.get("pids") == [p.pid])
            check(ok, "%s cycle %d: attached, traced calls of the 3 functions, detached %s(%.1f s)"
                  % (engine, i, "on %s " % sig.name if sig else "", took), r)
        else:
            cs = r.calls
            tids |= {c.tid for c in cs}
            bad = [c for c in cs if c.retint is None or c.args is None or len(c.args) != 2
                   or c.retint != sum(c.args) or c.function != "tpc_add"]
            check(r.rc == 0 and alive and cs and not bad and not r.unparsed(),
                  "%s cycle %d: attached, %d call lines, all with right values, detached"
                  % (engine, i, len(cs)), "%r\n%r" % (bad[:3], r))
        now = exec_text(p.pid) if alive else {}
        changed = [k[0] for k in text if now.get(k) != text[k]]
        check(alive and not changed, "%s cycle %d: the code as it was before" % (engine, i),
              changed)
        if not alive:
            break
    task = set(int(t) for t in os.listdir("/proc/%d/task" % p.pid)) if p.poll() is None \
        else set()
    check(tids and tids <= task and len(task) == 6 and len(tids) == 4,
          "the lines came from the target's 4 worker threads", "%r vs %r" % (tids, task))
    st = open("/proc/%d/status" % p.pid).read() if p.poll() is None else ""
    check(re.search(r"^TracerPid:\s+0$", st, re.M), "the target is left untraced",
          st[:300])
    p.send_signal(signal.SIGUSR1)
    out, err = p.communicate(timeout=60)
    m = re.search(r"^calls (\d+) failures (\d+)$", out, re.M)
    check(p.returncode == 0 and m and int(m.group(2)) == 0 and int(m.group(1)) > 0,
          "the target survived %d cycles and all its checks passed" % len(plan),
          "rc=%r out=%r err=%r" % (p.returncode, out[-300:], err[-300:]))
finally:
    if p.poll() is None:
        p.kill()
        p.wait()
done()
