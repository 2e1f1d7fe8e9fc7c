#!/usr/bin/env python3
"""bench/trace: cost per event of tracepad's in-process producer (shared-memory rings drained
by a consumer thread) side by side with LTTng-UST 2.13 (session written to a local directory),
on the same loop (bench/trace/loop.h: each of T threads records N events of 4 x uint64 = 32
bytes of payload, timed with clock_gettime around the loop).  Prints the median ns per event
per thread of each configuration, the ratio tracepad / LTTng-UST and whether the goal (<= 0.5)
is met.  Every figure is for recorded events: the driver checks that the traces hold exactly
what the loops produced (our reader, and babeltrace2 on the first run of each tracepad
configuration and on the LTTng session) and that nothing was discarded.

Usage: python3 bench/trace/trace.py BUILDDIR
Environment: TP_BENCH_RUNS (repetitions, default 5), TP_BENCH_EVENTS (events per thread and
run, default 1000000; a warm-up of a tenth more is recorded but not timed)."""
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import bt2_count, dump_count, lttng, run, start_sessiond, stop_sessiond  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
RUNS = int(os.environ.get("TP_BENCH_RUNS", "5"))
EVENTS = int(os.environ.get("TP_BENCH_EVENTS", "1000000"))
THREADS = (1, 2)
PEER_PKGS = ("liblttng-ust-dev", "lttng-tools")
# Big enough to hold a whole run per CPU (PEERS.md: the default channel discards under load).
CHANNEL = ["--subbuf-size", "8M", "--num-subbuf", "8"]
EVENT = "tpbench:bench"

tp_prog = os.path.join(build, "bench/trace/bench-trace-tracepad")
tp_cli = os.path.join(build, "src/cli/tracepad")
lt_prog = os.path.join(build, "bench/trace/bench-trace-lttng")
failures = []


def fail(msg):
    failures.append(msg)
    print("  failed: %s" % msg, file=sys.stderr, flush=True)


def parse(out):
    """The lines of loop.h (and the tracepad program's counts) as a dict."""
    d = {}
    m = re.search(r"^ns/event ([0-9.]+)$", out, re.M)
    if m:
        d["ns"] = float(m.group(1))
    for key in ("produced", "discarded", "written", "discarded-in-trace"):
        m = re.search(r"(?:^| )%s (\d+)" % key, out, re.M)
        if m:
            d[key] = int(m.group(1))
    if "ns" not in d or "produced" not in d:
        raise RuntimeError("unexpected output: %r" % out[-300:])
    return d


# ---- tracepad ---------------------------------------------------------------------------

def tracepad(tmp, name, threads, opts, rep, check_bt2):
    out = os.path.join(tmp, "tracepad-%s-%d-%d" % (name, threads, rep))
    try:
        d = parse(run([tp_prog] + opts + [str(threads), str(EVENTS), out]).stdout)
        if d.get("written") != d["produced"] or d.get("discarded") or d.get("discarded-in-trace"):
            raise RuntimeError("tracepad %s, %d threads: produced %d, written %s, discarded %s"
                               % (name, threads, d["produced"], d.get("written"),
                                  d.get("discarded")))
        if check_bt2 and shutil.which("babeltrace2"):
            n, disc = bt2_count(out)
            if n != d["produced"] or disc:
                raise RuntimeError("tracepad %s, %d threads: produced %d, babeltrace2 reads %d "
                                   "(%d discard messages)" % (name, threads, d["produced"], n,
                                                              disc))
            d["bt2"] = n
        return d
    finally:
        shutil.rmtree(out, ignore_errors=True)


# ---- LTTng-UST --------------------------------------------------------------------------

def installed(pkg):
    p = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return "install ok installed" in p.stdout


def lttng_version():
    p = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "liblttng-ust-dev"],
                       capture_output=True, text=True)
    return p.stdout.strip() or "?"


def lttng_available():
    """Installs the peer when missing (as root) and builds its program; None when ready, else
    why LTTng-UST is skipped."""
    missing = [p for p in PEER_PKGS if not installed(p)]
    if missing:
        line = "apt-get install -y --no-install-recommends " + " ".join(missing)
        if os.geteuid() != 0:
            return "missing Debian packages %s; as root: %s" % (" ".join(missing), line)
        print("bench/trace: installing %s" % " ".join(missing), file=sys.stderr, flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for argv in (["apt-get", "update", "-q"],
                     ["apt-get", "install", "-y", "-q", "--no-install-recommends"] + missing):
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               env=env)
            if p.returncode:
                return "%s failed: %s" % (" ".join(argv), p.stderr.strip()[-300:])
    if not os.access(lt_prog, os.X_OK):
        # Meson looked for liblttng-ust when the build directory was configured: look again.
        print("bench/trace: building %s" % lt_prog, file=sys.stderr, flush=True)
        for argv in (["meson", "setup", "--reconfigure", build],
                     ["ninja", "-C", build, os.path.relpath(lt_prog, build)]):
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
            if p.returncode:
                return "%s failed: %s" % (" ".join(argv), (p.stderr or p.stdout).strip()[-300:])
    return None


class Session:
    """One LTTng session for every LTTng run of the benchmark, counted at the end."""

    def __init__(self, tmp):
        self.name = "tpbench-%d" % os.getpid()
        self.dir = os.path.join(tmp, "lttng")
        self.expected = 0
        self.discarded = None
        self.read = None
        self.tp_read = None
        lttng("create", self.name, "--output=" + self.dir)
        try:
            lttng("enable-channel", "-u", "-s", self.name, "ch", *CHANNEL)
            lttng("enable-event", "-u", "-s", self.name, "-c", "ch", EVENT)
            lttng("start", self.name)
        except (RuntimeError, subprocess.TimeoutExpired):
            lttng("destroy", self.name, check=False)
            raise
        self.active = True

    def run(self, threads):
        d = parse(run([lt_prog, str(threads), str(EVENTS)]).stdout)
        self.expected += d["produced"]
        return d

    def finish(self):
        if not self.active:
            return
        self.active = False
        try:
            lttng("stop", self.name)
            m = re.search(r"Discarded events: (\d+)", lttng("list", self.name).stdout)
            self.discarded = int(m.group(1)) if m else None
        finally:
            lttng("destroy", self.name, check=False)
        self.read, disc = bt2_count(self.dir)
        self.tp_read = dump_count(tp_cli, self.dir)
        if self.tp_read != self.read:
            raise RuntimeError("LTTng-UST trace: tracepad dump reads %d events, babeltrace2 %d"
                               % (self.tp_read, self.read))
        if self.read != self.expected or self.discarded or disc:
            raise RuntimeError("LTTng-UST: produced %d, babeltrace2 reads %d, channel discarded "
                               "%s (%d discard messages)" % (self.expected, self.read,
                                                             self.discarded, disc))


# ---- main -------------------------------------------------------------------------------

def med(xs):
    return statistics.median(xs) if xs else None


def clock_best():
    try:
        return run([tp_prog, "--clock-best"]).stdout.strip()
    except RuntimeError:
        return "monotonic"


def main():
    if not os.access(tp_prog, os.X_OK):
        print("bench/trace: %s is not built (ninja -C %s)" % (tp_prog, build), file=sys.stderr)
        return 1
    skip = lttng_available()
    if skip:
        print("bench/trace: LTTng-UST skipped: %s" % skip, file=sys.stderr, flush=True)
    best = clock_best()
    # (key, label, options); "tracepad" is the figure held to the goal.  Both tracers map
    # their buffers populated (MAP_POPULATE), so neither pays page faults in the loop.
    configs = [("tracepad", "tracepad rings, monotonic", [])]
    if best == "tsc":
        configs.append(("tracepad-tsc", "tracepad rings, TSC (clock_best)", ["--clock", "tsc"]))
    print("bench/trace: %d runs, medians; %d events of 32 bytes (4 x uint64) per thread and "
          "run, +%d warm-up; %s, %d CPUs, tp_trace_clock_best: %s"
          % (RUNS, EVENTS, EVENTS // 10, platform.release(), os.cpu_count(), best), flush=True)

    tmp = tempfile.mkdtemp(prefix="tp-bench-trace-")
    started = None
    session = None
    samples = {}
    try:
        if not skip:
            try:
                started = start_sessiond()
                session = Session(tmp)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                fail("LTTng-UST session: %s" % e)
        for rep in range(RUNS):
            print("  run %d/%d" % (rep + 1, RUNS), file=sys.stderr, flush=True)
            # Interleaved, so that the noise of a shared VM falls on every configuration.
            for threads in THREADS:
                for key, _, opts in configs:
                    try:
                        d = tracepad(tmp, key, threads, opts, rep, rep == 0)
                        samples.setdefault((key, threads), []).append(d["ns"])
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        fail(str(e))
                if session:
                    try:
                        d = session.run(threads)
                        samples.setdefault(("lttng", threads), []).append(d["ns"])
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        fail("LTTng-UST, %d threads: %s" % (threads, e))
        if session:
            try:
                session.finish()
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                fail(str(e))
                samples = {k: v for k, v in samples.items() if k[0] != "lttng"}
    finally:
        if session:
            try:
                session.finish()
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        if started:
            stop_sessiond(started, "bench/trace")
        shutil.rmtree(tmp, ignore_errors=True)

    rows = [(k, label) for k, label, _ in configs]
    rows.insert(1, ("lttng", "LTTng-UST %s, monotonic" % lttng_version()))
    print()
    print("%-40s %7s %10s %8s %8s %9s" % ("ns per event per thread", "threads", "median",
                                          "min", "max", "/ LTTng"))
    for key, label in rows:
        for threads in THREADS:
            xs = samples.get((key, threads))
            if not xs:
                continue
            lt = med(samples.get(("lttng", threads), []))
            ratio = "%.2f" % (med(xs) / lt) if lt else "-"
            print("%-40s %7d %10.1f %8.1f %8.1f %9s" % (label, threads, med(xs), min(xs),
                                                        max(xs), ratio))
    print()
    tp_n = EVENTS + EVENTS // 10
    print("recorded: every tracepad run wrote all %d events per thread (our reader; "
          "babeltrace2 on run 1), none discarded" % tp_n
          if not any(f.startswith("tracepad") for f in failures) else
          "recorded: some tracepad runs failed their check (see above)")
    if session and session.read is not None:
        print("recorded: LTTng-UST session produced %d, babeltrace2 read %d, tracepad dump read "
              "%d, channel discarded %s"
              % (session.expected, session.read, session.tp_read, session.discarded))
    verdicts = []
    for threads in THREADS:
        tp, lt = med(samples.get(("tracepad", threads), [])), med(samples.get(("lttng", threads),
                                                                             []))
        if tp and lt:
            verdicts.append((threads, tp / lt))
    if verdicts:
        met = all(r <= 0.5 for _, r in verdicts)
        print("goal: tracepad <= 0.5 x LTTng-UST per event (monotonic clock, buffers populated "
              "on both sides): %s -> %s" % (", ".join("%d thread%s %.2f" % (
                  t, "s" if t > 1 else "", r) for t, r in verdicts), "MET" if met else "NOT MET"))
    elif skip:
        print("goal: not evaluated, LTTng-UST skipped (%s)" % skip)
    else:
        print("goal: not evaluated, no LTTng-UST figures")
    if failures:
        print("%d measurements failed; first: %s" % (len(failures), failures[0]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
