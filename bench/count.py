#!/usr/bin/env python3
"""bench/count: `tracepad count` side by side with what bounds it and what a user would pick.
On the same binary (count-target) and in the same run: the native speed, each engine with
--by mnemonic, the raw floor of each engine's mechanism (floor-ptrace, floor-tf: bare steppers
of the same dec/jnz loop), valgrind --tool=lackey and --tool=callgrind.  Prints medians of
instructions/s, the slowdown against native, each engine's % of its floor (acceptance: >= 80%)
and the ratio to lackey.

Usage: python3 bench/count.py BUILDDIR
Environment: TP_BENCH_RUNS (repetitions, default 5), TP_BENCH_N (dec/jnz iterations of the
stepped region, default 100000: 2N + 4 instructions)."""
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build"
RUNS = int(os.environ.get("TP_BENCH_RUNS", "5"))
N = int(os.environ.get("TP_BENCH_N", "100000"))
N_MIX = max(N // 8, 1)  # bench_mix rounds: about as many instructions as the loop
NATIVE_LOOP, NATIVE_MIX = 100_000_000, 10_000_000  # native: long enough to time
VG_LOOP, VG_MIX = 20_000_000, 2_000_000  # valgrind: ~40M instructions, minus a tiny run

tracepad = os.path.join(build, "src/cli/tracepad")
target = os.path.join(build, "bench/count-target")
floor_ptrace = os.path.join(build, "bench/floor-ptrace")
floor_tf = os.path.join(build, "bench/floor-tf")
valgrind = shutil.which("valgrind")
REGION = {"loop": "bench_loop", "mix": "bench_mix"}
ENGINES = ("ptrace", "trapflag")
FLOOR_OF = {"ptrace": "floor ptrace (pinned)", "trapflag": "floor trap-flag"}
failures = []


def run(argv, timeout=600):
    t0 = time.monotonic()
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout)
    return time.monotonic() - t0, p


def native(mode):
    n = NATIVE_LOOP if mode == "loop" else NATIVE_MIX
    _, p = run([target, mode, str(n)])
    m = re.search(r"ns (\d+)", p.stdout)
    if p.returncode or not m:
        raise RuntimeError("count-target %s: %r" % (mode, p.stdout + p.stderr))
    return n, int(m.group(1)) / 1e9


def engine(name, mode):
    n = N if mode == "loop" else N_MIX
    fd, out = tempfile.mkstemp(prefix="tp-bench-", suffix=".json")
    os.close(fd)
    try:
        wall, p = run([tracepad, "count", "--engine", name, "--by", "mnemonic", "--start",
                       REGION[mode], "--json", "-o", out, "--", target, mode, str(n)])
        with open(out) as f:
            rep = json.load(f)
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        raise RuntimeError("tracepad count --engine %s %s: %s" % (name, mode, e))
    finally:
        os.unlink(out)
    if p.returncode or not rep.get("instructions"):
        raise RuntimeError("tracepad count --engine %s %s: exit status %d, %r instructions %s"
                           % (name, mode, p.returncode, rep.get("instructions"),
                              p.stderr.strip()))
    return rep["instructions"], wall, rep.get("instructions_per_second")


def floor(prog):
    _, p = run([prog, str(N)])
    m = re.search(r"instructions (\d+) seconds ([0-9.]+)", p.stdout)
    if p.returncode or not m:
        raise RuntimeError("%s: %r" % (prog, p.stdout + p.stderr))
    return int(m.group(1)), float(m.group(2))


def vg(tool, mode):
    """Marginal speed of valgrind: instructions and time of a big run minus a tiny run, so
    that valgrind's start-up and its preloaded library do not count."""
    big = VG_LOOP if mode == "loop" else VG_MIX
    res = []
    for n in (big, 1):
        argv = [valgrind, "--tool=" + tool]
        if tool == "callgrind":
            argv.append("--callgrind-out-file=/dev/null")
        t, p = run(argv + [target, mode, str(n)])
        m = re.search(r"guest instrs:\s+([0-9,]+)", p.stderr)
        res.append((t, int(m.group(1).replace(",", "")) if m else None))
        if p.returncode:
            raise RuntimeError("valgrind --tool=%s: %s" % (tool, p.stderr[-300:]))
    (tb, ib), (ts, is_) = res
    return (ib - is_ if ib is not None and is_ is not None else None), tb - ts


def attempt(samples, key, fn, *args):
    try:
        samples.setdefault(key, []).append(fn(*args))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        failures.append(str(e))
        print("  failed: %s" % e, file=sys.stderr)


def med(xs):
    return statistics.median(xs) if xs else None


def main():
    for p in (tracepad, target, floor_ptrace, floor_tf):
        if not os.access(p, os.X_OK):
            print("bench/count: %s is not built (ninja -C %s)" % (p, build), file=sys.stderr)
            return 1
    print("bench/count: %d runs, medians; stepped region: bench_loop(%d) = %d instructions, "
          "bench_mix(%d); %s, %d CPUs" % (RUNS, N, 2 * N + 4, N_MIX, platform.release(),
                                          os.cpu_count()), flush=True)
    s = {}
    for i in range(RUNS):
        print("  run %d/%d" % (i + 1, RUNS), file=sys.stderr)
        for mode in ("loop", "mix"):
            attempt(s, ("native", mode), native, mode)
            for e in ENGINES:
                attempt(s, (e, mode), engine, e, mode)
            if valgrind:
                attempt(s, ("lackey", mode), vg, "lackey", mode)
                attempt(s, ("callgrind", mode), vg, "callgrind", mode)
        attempt(s, ("floor", "ptrace"), floor, floor_ptrace)
        attempt(s, ("floor", "trapflag"), floor, floor_tf)

    # Instructions per bench_mix round: from the engines' counts, else from lackey's.
    mix_insns = med([x[0] for e in ENGINES for x in s.get((e, "mix"), [])])
    lk_insns = med([n for n, _ in s.get(("lackey", "mix"), []) if n])
    per_round = mix_insns / N_MIX if mix_insns else (lk_insns / (VG_MIX - 1) if lk_insns
                                                      else None)
    ips, rows = {}, []
    for mode in ("loop", "mix"):
        nat = [(2 * n + 4 if mode == "loop" else (per_round or 0) * n) / t
               for n, t in s.get(("native", mode), []) if t > 0]
        ips["native", mode] = med(nat)
        rows.append(("native", mode, None, None, ips["native", mode], None))
        for e in ENGINES:
            xs = s.get((e, mode), [])
            ips[e, mode] = med([n / w for n, w, _ in xs])
            rep = med([r for _, _, r in xs if isinstance(r, (int, float))])
            rows.append(("tracepad %s --by mnemonic" % e, mode, med([n for n, _, _ in xs]),
                         med([w for _, w, _ in xs]), ips[e, mode], rep))
        for tool in ("lackey", "callgrind"):
            xs = s.get((tool, mode), [])
            if not xs:
                continue
            # callgrind does not print guest instructions: lackey's count of the same runs.
            ref = [n for n, _ in s.get(("lackey", mode), []) if n]
            n = med([x for x, _ in xs if x]) or med(ref)
            ips[tool, mode] = n / med([t for _, t in xs]) if n else None
            rows.append(("valgrind %s (marginal)" % tool, mode, n, med([t for _, t in xs]),
                         ips[tool, mode], None))
    for e in ENGINES:
        xs = s.get(("floor", e), [])
        ips["floor", e] = med([n / t for n, t in xs if t > 0])
        rows.append((FLOOR_OF[e], "loop", med([n for n, _ in xs]), med([t for _, t in xs]),
                     ips["floor", e], None))

    def f(x, fmt):
        return fmt % x if x is not None else "-"

    print()
    print("%-32s %-5s %12s %9s %14s %14s %10s" % ("", "code", "instructions", "seconds",
                                                  "instr/s", "instr/s(self)", "slowdown"))
    for name, mode, n, t, v, rep in rows:
        nat = ips.get(("native", mode))
        slow = nat / v if nat and v else None
        print("%-32s %-5s %12s %9s %14s %14s %10s" % (
            name, mode, f(n, "%d"), f(t, "%.3f"), f(v, "%.0f"), f(rep, "%.0f"),
            f(slow, "%.0fx")))
    print()
    print("instr/s: counted instructions / wall time of the whole tracepad run (start-up "
          "included); instr/s(self): the report's own instructions_per_second.")
    for e in ENGINES:
        fl = ips.get(("floor", e))
        for mode in ("loop", "mix"):
            v = ips.get((e, mode))
            pct = 100.0 * v / fl if v and fl else None
            lk = ips.get(("lackey", mode))
            cg = ips.get(("callgrind", mode))
            line = "%-8s %-4s: %s of its floor" % (e, mode, f(pct, "%.0f%%"))
            if mode == "loop":
                line += " (acceptance >= 80%%: %s)" % ("yes" if pct and pct >= 80 else "NO")
            line += "; lackey is %s faster, callgrind %s" % (
                f(lk / v if lk and v else None, "%.0fx"), f(cg / v if cg and v else None,
                                                           "%.0fx"))
            print(line)
    if not valgrind:
        print("valgrind is not installed: no lackey/callgrind comparison "
              "(apt-get install valgrind)")
    if failures:
        print("%d measurements failed; first: %s" % (len(failures), failures[0]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
