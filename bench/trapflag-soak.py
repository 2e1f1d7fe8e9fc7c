#!/usr/bin/env python3
"""Soak of the trapflag engine (issue 14): `tracepad count --engine trapflag` of `gzip -9 -c`
over the same input, RUNS times; each run must end as gzip does natively (status 0, the same
compressed bytes).  gzip was seen to die of SIGTRAP after 6-14 M instructions, 4 runs of 8, on
1 MiB.  On this script's 1 MiB input a run is 145 M instructions: about 37 minutes at the
agent's ~65 K instructions/s here, so 8 runs take hours (run two at once on two cores).

Run by hand, not in CI nor by `make bench` (too long).  One line a run: its outcome, the
instructions counted, the time; a run that dies also prints the SIGTRAP the agent gave to the
program's default action (the report's "fatal trap": si_code, si_addr, pc, rflags, bytes).
Exit status 0 when every run passed.

Usage: trapflag-soak.py [BUILDDIR] [--runs N] [--size BYTES|NK|NM] [--timeout SECONDS]
                        [--snapshot DIR] [--keep DIR]
  BUILDDIR    where tracepad was built (default: build)
  --runs      runs (default 8)
  --size      input size (default 1M); 64K is about 20 M instructions a run
  --timeout   a run's bound in seconds (default: 1 day a MiB, at least 20 minutes)
  --snapshot  copy tracepad and its agent to DIR first, so that rebuilding BUILDDIR meanwhile
              does not change what runs
  --keep      keep each run's report in DIR (else a temporary directory, removed)"""
import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time


def size_arg(s):
    mult = {"k": 1024, "m": 1024 * 1024}.get(s[-1:].lower(), 1)
    return int(s[:-1] if mult > 1 else s) * mult


def make_input(path, size):
    """Text-like, compressible, the same bytes for a given size: words of a fixed vocabulary
    in lines of varying length, with numbers (gzip -9's chains have work to do)."""
    rnd = random.Random(14)
    words = ["".join(rnd.choice("etaoinshrdlucmfwypvbgkjqxz") for _ in range(rnd.randint(2, 9)))
             for _ in range(600)]
    out, n = [], 0
    while n < size:
        line = " ".join(rnd.choice(words) for _ in range(rnd.randint(3, 14)))
        if rnd.random() < 0.3:
            line += " %d" % rnd.randint(0, 99999)
        line += "\n"
        out.append(line)
        n += len(line)
    data = "".join(out).encode()[:size]
    with open(path, "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--size", type=size_arg, default=1024 * 1024)
    ap.add_argument("--timeout", type=float, default=None)
    ap.add_argument("--snapshot", default=None)
    ap.add_argument("--keep", default=None)
    a = ap.parse_args()

    tracepad = os.path.join(a.build, "src", "cli", "tracepad")
    agent = os.path.join(a.build, "src", "agent", "libtracepad-agent.so")
    for p in (tracepad, agent):
        if not os.path.exists(p):
            sys.exit("trapflag-soak: %s is missing (build first)" % p)
    if a.snapshot:
        os.makedirs(a.snapshot, exist_ok=True)
        shutil.copy2(tracepad, os.path.join(a.snapshot, "tracepad"))
        shutil.copy2(agent, os.path.join(a.snapshot, "libtracepad-agent.so"))
        tracepad = os.path.join(a.snapshot, "tracepad")
        agent = os.path.join(a.snapshot, "libtracepad-agent.so")
    env = dict(os.environ, TRACEPAD_AGENT=os.path.abspath(agent))
    gzip = shutil.which("gzip")
    if not gzip:
        sys.exit("trapflag-soak: no gzip")
    timeout = a.timeout or max(1200.0, 86400.0 * a.size / (1024 * 1024))

    tmp = tempfile.mkdtemp(prefix="tp-soak-")
    keep = a.keep or tmp
    os.makedirs(keep, exist_ok=True)
    try:
        inp = os.path.join(tmp, "input")
        make_input(inp, a.size)
        with open(inp, "rb") as f:
            nat = subprocess.run([gzip, "-9", "-c"], stdin=f, capture_output=True)
        if nat.returncode:
            sys.exit("trapflag-soak: native gzip failed: %d" % nat.returncode)
        want = hashlib.sha256(nat.stdout).hexdigest()
        print("trapflag-soak: gzip -9 -c of %d bytes (%d compressed), %d runs, timeout %.0f s "
              "each, %s" % (a.size, len(nat.stdout), a.runs, timeout, tracepad), flush=True)
        passed = 0
        for i in range(a.runs):
            rep_path = os.path.join(keep, "run-%d.json" % i)
            if os.path.exists(rep_path):
                os.unlink(rep_path)
            t0 = time.monotonic()
            with open(inp, "rb") as f:
                p = subprocess.Popen([tracepad, "count", "--engine", "trapflag", "--json", "-o",
                                      rep_path, "--", gzip, "-9", "-c"], stdin=f,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
                try:
                    out, err = p.communicate(timeout=timeout)
                    rc = p.returncode
                except subprocess.TimeoutExpired:
                    p.kill()
                    out, err = p.communicate()
                    rc = None
            took = time.monotonic() - t0
            try:
                with open(rep_path) as f:
                    rep = json.load(f)
            except (OSError, ValueError):
                rep = None
            n = rep.get("instructions") if rep else None
            same = hashlib.sha256(out).hexdigest() == want
            ok = rc == 0 and same and rep is not None and rep.get("exit") == {"status": 0}
            passed += ok
            what = "ok" if ok else ("TIMEOUT" if rc is None else
                                    "DIED of signal %d" % (rc - 128) if rc and rc > 128 else
                                    "FAILED (status %r, output %s)" % (
                                        rc, "same" if same else "differs"))
            print("run %d: %s, %s instructions, %.0f s (%.0f/s)" % (
                i + 1, what, n if n is not None else "?", took,
                (n or 0) / took if took else 0), flush=True)
            if not ok:
                ft = (rep or {}).get("fatal_trap")
                print("  fatal trap: %s" % (ft["text"] if ft else "none recorded by the agent"))
                if rep and rep.get("warning"):
                    print("  warning: %s" % rep["warning"])
                tail = err.decode(errors="replace").strip()[-600:]
                if tail:
                    print("  stderr: %s" % tail.replace("\n", "\n          "))
                sys.stdout.flush()
        print("trapflag-soak: %d of %d runs ran to their end" % (passed, a.runs), flush=True)
        return 0 if passed == a.runs else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
