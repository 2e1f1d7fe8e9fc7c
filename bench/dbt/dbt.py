#!/usr/bin/env python3
"""bench/dbt: `tracepad count --engine dbt` (the code cache) side by side with native runs,
`valgrind --tool=none`, `valgrind --tool=lackey` and qemu-x86_64 (qemu-user, when installed),
on the same programs and inputs in one run: cpu (bench/dbt/cpu.c: indirect calls and a
switch), sha256sum, gzip -9, xz -T2 (threads) and a small pure-Python workload.

Times are CPU seconds (user + system) of the whole process tree, not wall time: the machines
this runs on are shared.  Prints each tool's median, its slowdown against native and the
ratio between lackey and the dbt engine, and the dbt engine's instructions/s.

Usage: python3 bench/dbt/dbt.py BUILDDIR
Environment: TP_BENCH_RUNS (runs, default 3), TP_BENCH_MB (MiB of input for sha256sum,
default 16; gzip and xz take 1 MiB), TP_BENCH_ROUNDS (cpu's rounds, default 20000000),
TP_BENCH_SLOW=0 to skip valgrind and qemu (slow), TP_BENCH_ONLY=WORD,... to run only the
workloads whose names contain one of the words (e.g. TP_BENCH_ONLY=sha,python)."""
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

build = sys.argv[1] if len(sys.argv) > 1 else "build"
RUNS = int(os.environ.get("TP_BENCH_RUNS", "3"))
MB = int(os.environ.get("TP_BENCH_MB", "16"))
ROUNDS = int(os.environ.get("TP_BENCH_ROUNDS", "20000000"))
SLOW = os.environ.get("TP_BENCH_SLOW", "1") != "0"
ONLY = [w for w in os.environ.get("TP_BENCH_ONLY", "").split(",") if w]
HERE = os.path.dirname(os.path.abspath(__file__))
tracepad = os.path.join(build, "src/cli/tracepad")
valgrind = shutil.which("valgrind")
qemu = shutil.which("qemu-x86_64")
# the interpreter itself: a wrapper script (pyenv's shims) would exec it, and the code cache
# follows no execve
python = os.path.realpath(shutil.which("python3", path="/usr/bin:/bin") or sys.executable)
PY = "s = 0\nfor i in range(300000):\n    s += len(str(i * i)) % 7\nprint(s)\n"


def cpu_time(argv, timeout=3600):
    """(CPU seconds of the process tree, completed process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), p


def data(path, size):
    """Compressible but not trivial text, the same on every run."""
    with open(path, "wb") as f:
        i = 0
        while f.tell() < size:
            f.write(b"%d %x %o the quick brown fox %d\n" % (i, i * i, i * 7, (i * 2654435761) >> 9))
            i += 1


def tools(tmp):
    t = [("native", [])]
    t.append(("dbt", [tracepad, "count", "--engine", "dbt", "--json", "-o",
                      os.path.join(tmp, "report.json"), "--"]))
    if SLOW and valgrind:
        t.append(("vg none", [valgrind, "-q", "--tool=none"]))
        t.append(("vg lackey", [valgrind, "-q", "--tool=lackey"]))
    if SLOW and qemu:
        t.append(("qemu-user", [qemu]))
    return t


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="tp-bench-dbt-") as tmp:
        cpu = os.path.join(tmp, "cpu")
        subprocess.run(["cc", "-O2", "-o", cpu, os.path.join(HERE, "cpu.c")], check=True)
        big, small = os.path.join(tmp, "big"), os.path.join(tmp, "small")
        data(big, MB << 20)
        data(small, 1 << 20)
        py = os.path.join(tmp, "work.py")
        with open(py, "w") as f:
            f.write(PY)
        work = [("cpu", [cpu, str(ROUNDS)]),
                ("sha256sum %d MiB" % MB, ["sha256sum", big]),
                ("gzip -9 1 MiB", ["gzip", "-9", "-c", small]),
                ("xz -T2 1 MiB", ["xz", "-T2", "-3", "-c", small]),
                ("python3", [python, py])]
        print("bench/dbt: CPU seconds (user + system), medians of %d runs" % RUNS)
        for name, argv in work:
            if ONLY and not any(w in name for w in ONLY):
                continue
            res, out0, insns = {}, None, None
            for tool, pre in tools(tmp):
                times = []
                for _ in range(RUNS if tool in ("native", "dbt") else 1):
                    dt, p = cpu_time(pre + argv)
                    if p.returncode:
                        failures.append("%s under %s: status %d" % (name, tool, p.returncode))
                        break
                    if out0 is None:
                        out0 = p.stdout
                    elif p.stdout != out0:
                        failures.append("%s under %s: output differs" % (name, tool))
                    times.append(dt)
                    if tool == "dbt":
                        with open(os.path.join(tmp, "report.json")) as f:
                            insns = json.load(f)["instructions"]
                if times:
                    res[tool] = statistics.median(times)
            nat = res.get("native")
            line = ["%-18s" % name]
            for tool, t in res.items():
                ratio = " (%.1fx)" % (t / nat) if nat and tool != "native" else ""
                line.append("%s %.3f s%s" % (tool, t, ratio))
            print("  " + ", ".join(line))
            if insns and "dbt" in res:
                print("  %-18s dbt: %d instructions, %.0f M/s" % ("", insns,
                                                                  insns / res["dbt"] / 1e6))
            if "vg lackey" in res and "dbt" in res:
                print("  %-18s lackey / dbt: %.1fx" % ("", res["vg lackey"] / res["dbt"]))
    for f in failures:
        print("bench/dbt: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
