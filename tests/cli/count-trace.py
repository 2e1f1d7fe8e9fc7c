#!/usr/bin/env python3
"""`tracepad count --trace DIR` records its results as CTF events that babeltrace2 reads:
one count_summary, one count_thread per thread, one count_histogram per histogram entry,
with the values of the JSON report."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, done  # noqa: E402
import tempfile
import time

tp = os.environ["TRACEPAD"]
target = os.path.join(os.environ["TP_BUILD_ROOT"], "tests/e2e/targets/threads-O2")
tmp = tempfile.mkdtemp(prefix="tp-count-trace-")
try:
    for engine in ("ptrace", "trapflag"):
        tdir = os.path.join(tmp, engine)
        rep_path = os.path.join(tmp, engine + ".json")
        r = subprocess.run([tp, "count", "--engine", engine, "--start", "worker", "--by",
                            "mnemonic", "--json", "-o", rep_path, "--trace", tdir, "--",
                            target], capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, engine + ": count --trace exits 0", r.stderr)
        rep = json.load(open(rep_path))
        bt = subprocess.run(["babeltrace2", tdir], capture_output=True, text=True)
        check(bt.returncode == 0 and "discarded" not in bt.stderr.lower(),
              engine + ": babeltrace2 reads the trace", bt.stderr)
        lines = bt.stdout.splitlines()
        summ = [l for l in lines if " count_summary: " in l]
        threads = [l for l in lines if " count_thread: " in l]
        hist = [l for l in lines if " count_histogram: " in l]
        check(len(summ) == 1 and ('instructions = %d,' % rep["instructions"]) in summ[0]
              and ('engine = "%s"' % engine) in summ[0], engine + ": count_summary",
              summ)
        got = {}
        for l in threads:
            m = re.search(r"tid = (\d+) }, { instructions = (\d+) }", l)
            if m:
                got[int(m.group(1))] = int(m.group(2))
        want = {t["tid"]: t["instructions"] for t in rep["threads"]}
        check(len(threads) == 4 and got == want, engine + ": one count_thread per thread, "
              "with its tid and count", (got, want))
        gh = {}
        for l in hist:
            m = re.search(r'by = "mnemonic", key = "([^"]+)", count = (\d+)', l)
            if m:
                gh[m.group(1)] = int(m.group(2))
        wh = {e["key"]: e["count"] for e in rep["histogram"]["entries"]}
        check(gh == wh and len(hist) == len(wh), engine + ": count_histogram events = the "
              "histogram", (gh, wh))
        if engine == "trapflag":
            # the agent's own events, recorded in rings that tracepad drains
            ends = {}
            for l in lines:
                m = re.search(r"counting_end: .*tid = (\d+) }, { pc = \w+, instructions = (\d+) }", l)
                if m:
                    ends[int(m.group(1))] = int(m.group(2))
            begins = [l for l in lines if " counting_begin: " in l]
            check(len(begins) == 4 and ends == want, "trapflag: the agent recorded when each "
                  "thread began and ended counting, with its count", (begins, ends, want))
    # a program killed while the agent records: what it committed is in the trace
    spin = os.path.join(os.environ["TP_BUILD_ROOT"], "tests/e2e/targets/spin")
    tdir = os.path.join(tmp, "killed")
    p = subprocess.Popen([tp, "count", "--no-startup", "--trace", tdir, "--", spin, "30"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = None
    for _ in range(100):
        # the program's parent is tracepad's tracer process, tracepad's child (cli/keeper.c)
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True)
        if kids.stdout.strip():
            kids = subprocess.run(["pgrep", "-P", kids.stdout.split()[0]],
                                  capture_output=True, text=True)
        if kids.stdout.strip():
            pid = int(kids.stdout.split()[0])
            break
        time.sleep(0.05)
    time.sleep(1)
    if pid:
        os.kill(pid, signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    check(pid is not None and p.returncode == 128 + signal.SIGKILL,
          "a counted program killed by SIGKILL: tracepad reports it", (p.returncode, err))
    bt = subprocess.run(["babeltrace2", tdir], capture_output=True, text=True)
    begins = [l for l in bt.stdout.splitlines() if " counting_begin: " in l]
    check(bt.returncode == 0 and len(begins) == 1 and ("tid = %d }" % pid) in begins[0],
          "the event the agent committed before the kill is in the trace", (bt.stdout,
                                                                           bt.stderr))
    r = subprocess.run([tp, "count", "--trace", os.path.join(tmp, "ptrace"), "--", "/bin/true"],
                       capture_output=True, text=True)
    check(r.returncode == 2 and r.stderr.startswith("tracepad count: --trace ")
          and r.stderr.count("\n") == 1, "a directory that already holds a trace is refused "
          "before the program runs, in one line", (r.returncode, r.stderr))
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done()
