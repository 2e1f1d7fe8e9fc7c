#!/usr/bin/env python3
"""bench/markers: ns per loop iteration of one loop body (bench-markers.c) with no probe, a
tracepad point disabled, a global-flag check, an LTTng-UST tracepoint disabled and enabled,
and a tracepad point enabled (int + string, recorded by a cheap binary consumer; also with a
CLOCK_MONOTONIC timestamp per event, as LTTng-UST takes one).  Prints medians over runs, min,
max, deltas against no probe, the cost per event, and verdicts for the goals: disabled within
0.1 ns of no probe, enabled <= 50 ns per event and <= 0.5 x LTTng-UST's enabled cost.

A run is one process; the cheap modes (none, disabled, flag, lttng-off) share it, in rounds
taken in turn, and a run's figure for a mode is its best round (interruptions by neighbours
only add time); the tables give the median, min and max of those figures over the runs.
LTTng-UST runs with a session daemon and one session enabling tpmarkers:on only (so
tpmarkers:off is a disabled tracepoint in a traced process), written to a temporary directory
with channels big enough that nothing is discarded; babeltrace2 counts what was recorded, and
`tracepad dump` must read as many events from that real LTTng-UST trace.

Usage: python3 bench/markers/markers.py BUILDDIR
Environment: TP_BENCH_RUNS (runs, default 9)."""
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
RUNS = int(os.environ.get("TP_BENCH_RUNS", "9"))
prog = os.path.join(build, "bench/markers/bench-markers")
# (iterations, rounds) per process kind; a run of the cheap modes lasts ~0.5 s.
CHEAP = (20000000, 5)
ENABLED = (1000000, 3)
LTTNG_ON = (200000, 3)
CHANNEL = ["--subbuf-size", "8M", "--num-subbuf", "8"]
LABELS = [
    ("none", "no probe"),
    ("disabled", "tracepad point, disabled"),
    ("flag", "global flag (volatile int, off)"),
    ("lttng-off", "LTTng-UST tracepoint, disabled"),
    ("enabled", "tracepad point, enabled"),
    ("enabled-ts", "tracepad enabled, consumer takes ts"),
    ("lttng-on", "LTTng-UST tracepoint, enabled"),
]
failures = []


def bench(modes, iters_rounds):
    """{mode: (best round ns/iteration, events the consumer saw)} of one process."""
    n, rounds = iters_rounds
    out = run([prog, ",".join(modes), str(n), str(rounds)]).stdout
    res = {}
    for m in re.finditer(r"^mode (\S+) events (\d+) ns/iteration ([0-9. ]+)$", out, re.M):
        res[m.group(1)] = (min(float(x) for x in m.group(3).split()), int(m.group(2)))
    if set(res) != set(modes):
        raise RuntimeError("unexpected output: %r" % out[-300:])
    return res


def events_per_process(iters_rounds):
    n, rounds = iters_rounds
    return n // 10 + 1 + n * rounds


# ---- LTTng-UST --------------------------------------------------------------------------

def lttng_skip():
    """None when LTTng-UST can be measured, else why not."""
    if run([prog, "lttng-off", "1", "1"], check=False).returncode == 2:
        return "bench-markers was built without LTTng-UST (liblttng-ust-dev not found by meson)"
    for tool in ("lttng", "lttng-sessiond", "babeltrace2"):
        if not shutil.which(tool):
            return "%s not found (Debian: lttng-tools, babeltrace2)" % tool
    return None


class Session:
    def __init__(self, tmp):
        self.name = "tpmarkers-%d" % os.getpid()
        self.dir = os.path.join(tmp, "lttng")
        self.active = False
        lttng("create", self.name, "--output=" + self.dir)
        self.active = True
        try:
            lttng("enable-channel", "-u", "-s", self.name, "ch", *CHANNEL)
            lttng("enable-event", "-u", "-s", self.name, "-c", "ch", "tpmarkers:on")
            lttng("start", self.name)
        except (RuntimeError, subprocess.TimeoutExpired):
            self.close()
            raise

    def close(self):
        """Stops and destroys the session; returns the channel's discarded count."""
        if not self.active:
            return None
        self.active = False
        try:
            lttng("stop", self.name)
            m = re.search(r"Discarded events: (\d+)", lttng("list", self.name).stdout)
            return int(m.group(1)) if m else None
        finally:
            lttng("destroy", self.name, check=False)


# ---- main -------------------------------------------------------------------------------

def med(xs):
    return statistics.median(xs) if xs else None


def main():
    if not os.access(prog, os.X_OK):
        print("bench/markers: %s is not built (ninja -C %s)" % (prog, build), file=sys.stderr)
        return 1
    skip = lttng_skip()
    if skip:
        print("bench/markers: LTTng-UST rows skipped: %s" % skip, file=sys.stderr, flush=True)
    cheap = ["none", "disabled", "flag"] + ([] if skip else ["lttng-off"])
    print("bench/markers: %d runs; best of %d rounds of %d iterations per run (%s), %d x %d "
          "(tracepad enabled), %d x %d (LTTng-UST enabled); %s, %d CPUs"
          % (RUNS, CHEAP[1], CHEAP[0], ",".join(cheap), ENABLED[1], ENABLED[0], LTTNG_ON[1],
             LTTNG_ON[0], platform.release(), os.cpu_count()), flush=True)

    tmp = tempfile.mkdtemp(prefix="tp-bench-markers-")
    samples = {}  # mode -> [ns per run]
    paired = {}  # mode -> [ns - none's ns, same process]
    lt_expected, lt_read, lt_discarded, tp_read = 0, None, None, None
    started = session = None
    try:
        if not skip:
            try:
                started = start_sessiond()
                session = Session(tmp)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failures.append("LTTng-UST session: %s" % e)
                cheap.remove("lttng-off")
        jobs = [(cheap, CHEAP), (["enabled"], ENABLED), (["enabled-ts"], ENABLED)]
        if session:
            jobs.append((["lttng-on"], LTTNG_ON))
        for rep in range(RUNS):
            print("  run %d/%d" % (rep + 1, RUNS), file=sys.stderr, flush=True)
            # Interleaved, so that the noise of a shared VM falls on every variant.
            for modes, ir in jobs:
                try:
                    res = bench(modes, ir)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    failures.append(str(e))
                    print("  failed: %s" % e, file=sys.stderr, flush=True)
                    continue
                for mode, (ns, events) in res.items():
                    samples.setdefault(mode, []).append(ns)
                    if "none" in res:
                        paired.setdefault(mode, []).append(ns - res["none"][0])
                    want = events_per_process(ir) if mode.startswith("enabled") else 0
                    if events != want:
                        failures.append("%s: the consumer saw %d events, %d expected"
                                        % (mode, events, want))
                    if mode == "lttng-on":
                        lt_expected += events_per_process(ir)
        if session:
            try:
                lt_discarded = session.close()
                lt_read, disc = bt2_count(session.dir)
                if lt_read != lt_expected or lt_discarded or disc:
                    failures.append("LTTng-UST: produced %d, babeltrace2 reads %d, channel "
                                    "discarded %s (%d discard messages)"
                                    % (lt_expected, lt_read, lt_discarded, disc))
                    samples.pop("lttng-on", None)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failures.append(str(e))
                samples.pop("lttng-on", None)
            try:
                # tracepad's reader on the same real LTTng-UST trace
                tp_read = dump_count(os.path.join(build, "src/cli/tracepad"), session.dir)
                if tp_read != lt_read:
                    failures.append("tracepad dump reads %d events of the LTTng-UST trace, "
                                    "babeltrace2 %s" % (tp_read, lt_read))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failures.append(str(e))
    finally:
        if session:
            try:
                session.close()
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        if started:
            stop_sessiond(started, "bench/markers")
        shutil.rmtree(tmp, ignore_errors=True)

    none = med(samples.get("none", []))
    print()
    print("%-38s %8s %8s %8s %9s %9s %7s" % ("ns per iteration", "median", "min", "max",
                                              "- none", "paired", "/ none"))
    for mode, label in LABELS:
        xs = samples.get(mode)
        if not xs:
            if mode.startswith("lttng") and skip:
                print("%-38s skipped: %s" % (label, skip))
            continue
        d = "%+9.3f" % (med(xs) - none) if none else "%9s" % "-"
        p = "%+9.3f" % med(paired[mode]) if paired.get(mode) else "%9s" % "-"
        r = "%7.2f" % (med(xs) / none) if none else "%7s" % "-"
        print("%-38s %8.3f %8.3f %8.3f %s %s %s" % (label, med(xs), min(xs), max(xs), d, p, r))
    print("(- none: difference of the medians; paired: median over runs of the difference "
          "with no probe measured in the same process)")

    cost = {m: med(samples[m]) - none for m in ("enabled", "enabled-ts", "lttng-on")
            if samples.get(m) and none}
    print()
    print("cost per event (enabled - none), int + string:")
    for mode, label in LABELS:
        if mode in cost:
            lt = cost.get("lttng-on")
            ratio = " = %.2f x LTTng-UST" % (cost[mode] / lt) if lt and mode != "lttng-on" \
                else ""
            print("  %-36s %8.2f ns%s" % (label, cost[mode], ratio))
    ev = events_per_process(ENABLED)
    print("recorded: tracepad consumers saw %d events per process each run%s"
          % (ev, "" if not any("consumer saw" in f for f in failures) else " (NOT always)"))
    if lt_read is not None:
        print("recorded: LTTng-UST produced %d, babeltrace2 read %d, tracepad dump read %s, "
              "channel discarded %s" % (lt_expected, lt_read, tp_read, lt_discarded))

    print()
    dis = med(samples.get("disabled", []))
    if dis is not None and none:
        print("verdict: disabled point within 0.1 ns/iteration of no probe (medians): "
              "%.3f - %.3f = %+.3f ns -> %s" % (dis, none, dis - none,
                                               "MET" if dis - none <= 0.1 else "NOT MET"))
    if "enabled" in cost:
        print("verdict: enabled point <= 50 ns per event (int + string): %.2f ns -> %s"
              % (cost["enabled"], "MET" if cost["enabled"] <= 50 else "NOT MET"))
    if "enabled" in cost and "lttng-on" in cost:
        r = cost["enabled"] / cost["lttng-on"]
        print("verdict: enabled point <= 0.5 x LTTng-UST enabled (same run): %.2f / %.2f = %.3f "
              "-> %s" % (cost["enabled"], cost["lttng-on"], r, "MET" if r <= 0.5 else "NOT MET"))
        if "enabled-ts" in cost:
            print("  (with a timestamp per event like LTTng-UST: %.2f / %.2f = %.3f)"
                  % (cost["enabled-ts"], cost["lttng-on"], cost["enabled-ts"] / cost["lttng-on"]))
    else:
        print("verdict: enabled vs LTTng-UST not evaluated: %s"
              % (skip or "no LTTng-UST figures"))
    if failures:
        print("%d measurements failed; first: %s" % (len(failures), failures[0]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
