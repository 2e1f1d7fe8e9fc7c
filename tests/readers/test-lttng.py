#!/usr/bin/env python3
"""tracepad dump, report and export on a real LTTng-UST 2.13 trace (tests/readers/lttng/trace,
written by lttng/prog.c under an LTTng session: packetized metadata, enumeration and variant
event headers, bit-field-free large headers, text arrays, enums, discarded events).  Every
event is checked against the values the program recorded and against babeltrace2's
timestamps; export in each format: chrome has babeltrace2's events (names, times, ids) with
the recorded values, folded refuses a trace without function events and leaves an existing
output as it was.
Usage: test-lttng.py TRACE_DIR  (TAP on stdout)"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import bail, check as ok, done  # noqa: E402

TP = os.environ.get("TRACEPAD", "tracepad")
ENV = dict(os.environ, TZ="UTC")
TRACE = sys.argv[1]
WORDS = ["alpha", "beta", "gamma", "delta"]
COLOURS = {0: "red", 1: "green"} | {v: "blue" for v in range(2, 10)}


def expected(name, f):
    """What prog.c recorded for the event whose first number is v (thread t: v = t*1000 + k)."""
    if name == "tpfix:ints":
        v = f["i"]
        return {"i": v, "u8": v & 0xFF, "s16": -v, "u64": v << 33, "s64hex": (-v) & (2**64 - 1)}
    v = f["arr"][0]
    k = v % 1000
    arr = [v, -v, 2 * v]
    colour = k % 11
    want_colour = ({"label": COLOURS[colour], "value": colour} if colour in COLOURS else colour)
    return {"str": WORDS[k % 4], "arr": arr, "_seq_length": k % 4, "seq": arr[:k % 4],
            "dbl": v + 0.5, "colour": want_colour, "txt": WORDS[k % 4][:4]}


p = subprocess.run([TP, "dump", "--json", TRACE], capture_output=True, text=True, env=ENV)
ok(p.returncode == 0, "dump --json reads the LTTng-UST trace", p.stderr)
events = [json.loads(line) for line in p.stdout.splitlines()]
ok(re.search(r"discarded 63 events", p.stderr), "dump warns of the 63 events LTTng discarded",
   p.stderr)

bt2 = shutil.which("babeltrace2")
if not bt2:
    bail("babeltrace2 is not installed (scripts/deps.sh installs it)")
b = subprocess.run([bt2, "--clock-seconds", TRACE], capture_output=True, text=True)
bt = [line for line in b.stdout.splitlines() if line.startswith("[")]
ok(b.returncode == 0 and len(bt) == len(events) == 337,
   "dump shows as many events as babeltrace2 (337)", f"dump {len(events)}, babeltrace2 {len(bt)}")

ts_bad, names_bad, ids_bad = [], [], []
for i, (e, line) in enumerate(zip(events, bt)):
    m = re.match(r"\[(\d+)\.(\d{9})\] \(\S+\) \S+ (\S+): .*vpid = (\d+), vtid = (\d+)", line)
    if not m:
        names_bad.append((i, line))
        continue
    if e["ts"] != int(m.group(1)) * 10**9 + int(m.group(2)):
        ts_bad.append((i, e["ts"], line[:32]))
    if e["name"] != m.group(3):
        names_bad.append((i, e["name"], m.group(3)))
    if (e["pid"], e["tid"]) != (int(m.group(4)), int(m.group(5))):
        ids_bad.append((i, e["pid"], e["tid"], line))
ok(not ts_bad, "every timestamp equals babeltrace2's to the nanosecond", ts_bad[:5])
ok(not names_bad, "every event has babeltrace2's name, in the same order", names_bad[:5])
ok(not ids_bad, "every event has babeltrace2's vpid and vtid", ids_bad[:5])
ok(len({e["tid"] for e in events}) == 2, "events of both threads are read",
   {e["tid"] for e in events})

bad = []
for e in events:
    want = expected(e["name"], e["fields"])
    if e["fields"] != want:
        bad.append((e["name"], e["fields"], want))
ok(not bad, "every field of every event is the value the program recorded "
   "(integers, hex, string, array, sequence, double, enum label, text array)", bad[:3])
ok(sum(e["name"] == "tpfix:ints" for e in events) + sum(e["name"] == "tpfix:misc" for e in events)
   == len(events), "only the two event classes appear")

p = subprocess.run([TP, "dump", TRACE], capture_output=True, text=True, env=ENV)
ok(p.returncode == 0 and 'colour=red(0) txt="alph"' in p.stdout.splitlines()[1],
   "text dump shows an enumeration as label(value) and a text array as a string",
   p.stdout.splitlines()[1:2])

# Filters: each shows exactly the events of the whole dump that pass, with the same fields
# and times counted from the trace's first event.
t0 = events[0]["ts"]
tid2 = max(e["tid"] for e in events)


def dump(*opts):
    p = subprocess.run([TP, "dump", "--json", *opts, TRACE], capture_output=True, text=True,
                       env=ENV)
    return p, [json.loads(line) for line in p.stdout.splitlines()]


for opts, keep in [
        (["--tid", str(tid2)], lambda e: e["tid"] == tid2),
        (["--pid", f"1,{events[0]['pid']}"], lambda e: True),
        (["--pid", "1"], lambda e: False),
        (["-e", "tpfix:m*"], lambda e: e["name"] == "tpfix:misc"),
        (["--class", "!tpfix:ints,tpfix:*"], lambda e: e["name"] == "tpfix:misc"),
        (["-e", "*ints", "-e", "nothing"], lambda e: e["name"] == "tpfix:ints"),
        (["--from", "0.00005", "--to", "0.0001"],
         lambda e: 50000 <= e["ts"] - t0 <= 100000),
        (["--from", "0.0001", "--tid", str(events[-1]["tid"]), "-e", "tpfix:ints"],
         lambda e: e["ts"] - t0 >= 100000 and e["tid"] == events[-1]["tid"] and
         e["name"] == "tpfix:ints")]:
    p, got = dump(*opts)
    want = [e for e in events if keep(e)]
    ok(p.returncode == 0 and got == want and (want or opts == ["--pid", "1"]),
       f"dump {' '.join(opts)}: the {len(want)} events that pass, as in the whole dump",
       f"rc {p.returncode} {p.stderr}, got {len(got)}, want {len(want)}")

for opts, msg in [(["--tid", "x"], "--tid 'x': not a list of ids"),
                  (["--pid", "1,,2"], "--pid '1,,2': not a list of ids"),
                  (["--from", "soon"], "--from 'soon': not a number of seconds"),
                  (["--from", "2", "--to", "1"], "--from is after --to"),
                  (["-e", ""], "--class '': an empty pattern")]:
    p, got = dump(*opts)
    ok(p.returncode == 2 and not got and p.stderr.startswith(f"tracepad dump: {msg}")
       and len(p.stderr.splitlines()) == 1,
       f"dump {' '.join(opts)}: one-line error", p.stderr)

p = subprocess.run([TP, "report", "--json", TRACE], capture_output=True, text=True, env=ENV)
try:
    rep = json.loads(p.stdout)
except ValueError:
    rep = {}
ok(p.returncode == 0 and rep.get("events") == 337 and rep.get("discarded") == 63,
   "report counts 337 events and 63 discarded, as babeltrace2 warns", p.stdout[:400] + p.stderr)

# export, chrome (the default, and by name; to stdout and to -o): the trace has no function
# entries or exits, so every event is an instant event, babeltrace2's events in its order.
def hexed(e):
    """The recorded values as export's args: base-16 integers as "0x..." strings."""
    want = expected(e["name"], e["fields"])
    if "s64hex" in want:
        want["s64hex"] = "0x%x" % want["s64hex"]
    return want


with tempfile.TemporaryDirectory(prefix="tp-lttng-export-") as tmp:
    for opts in ([], ["--format", "chrome"], ["--format", "chrome", "-o", "out.json"]):
        what = "export " + " ".join(opts or ["(default format)"])
        p = subprocess.run([TP, "export", *opts, TRACE], capture_output=True, text=True,
                           env=ENV, cwd=tmp)
        text = p.stdout
        if "-o" in opts:
            text = open(os.path.join(tmp, "out.json")).read() if p.stdout == "" else ""
        try:
            doc = json.loads(text)
        except ValueError:
            doc = {}
        evs = doc.get("traceEvents", [])
        ok(p.returncode == 0 and len(evs) == len(bt) == 337,
           f"{what}: as many events as babeltrace2 (337)",
           f"rc {p.returncode}, export {len(evs)}, babeltrace2 {len(bt)}: {p.stderr}")
        ok(re.search(r"discarded 63 events", p.stderr) and
           doc.get("otherData", {}).get("discarded") == 63 and
           doc.get("otherData", {}).get("events") == 337 and doc["otherData"].get("calls") == 0,
           f"{what}: warns of and counts the 63 events LTTng discarded, 337 events, no call",
           f"{p.stderr} {doc.get('otherData')}")
        bad = []
        for i, (x, e, line) in enumerate(zip(evs, events, bt)):
            m = re.match(r"\[\d+\.\d{9}\] \(\S+\) \S+ (\S+): .*vpid = (\d+), vtid = (\d+)", line)
            got = (x.get("ph"), x.get("s"), x.get("name"), x.get("pid"), x.get("tid"),
                   x.get("ts"))
            want = ("i", "t", m and m.group(1), m and int(m.group(2)), m and int(m.group(3)),
                    round((e["ts"] - t0) / 1000, 3))
            if got != want:
                bad.append((i, got, want))
        ok(not bad, f"{what}: each an instant event with babeltrace2's name, vpid and vtid, "
           "in its order, at its time in us from the first event", bad[:3])
        bad = [(x["name"], x.get("args"), hexed(e)) for x, e in zip(evs, events)
               if x.get("args") != hexed(e)]
        ok(evs and not bad, f"{what}: every event's args are the values the program recorded "
           "(hex integers as 0x strings)", bad[:3])

    # folded: no function events, no stacks: one line of error, status 2, and an existing
    # output file left as it was.
    out = os.path.join(tmp, "old.folded")
    with open(out, "w") as f:
        f.write("main 1\n")
    for opts in (["--format", "folded"], ["--format", "folded", "-o", out]):
        p = subprocess.run([TP, "export", *opts, TRACE], capture_output=True, text=True,
                           env=ENV)
        errs = [ln for ln in p.stderr.splitlines() if "warning" not in ln]
        ok(p.returncode == 2 and p.stdout == "" and len(errs) == 1 and
           "no func_entry/func_exit events" in errs[0],
           f"export {' '.join(opts)}: a trace without function events is refused in one line",
           f"rc {p.returncode} stdout {p.stdout[:200]!r} stderr {p.stderr!r}")
    ok(open(out).read() == "main 1\n", "export --format folded -o FILE: an existing FILE is "
       "left as it was after the refusal")

done()
