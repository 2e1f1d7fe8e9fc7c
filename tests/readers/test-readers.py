#!/usr/bin/env python3
"""tracepad dump, report and export on traces with known events (written by readers-gen).
Usage: test-readers.py READERS_GEN dump|report|export|errors  (TAP on stdout)"""
import datetime
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check as ok, done, eq as is_eq  # noqa: E402

TP = os.environ.get("TRACEPAD", "tracepad")
BT2 = shutil.which("babeltrace2")
ENV = dict(os.environ, TZ="UTC")


def run(*args):
    return subprocess.run([TP, *args], capture_output=True, text=True, env=ENV)


def gen(prog, mode, trace):
    p = subprocess.run([prog, mode, trace], capture_output=True, text=True)
    ok(p.returncode == 0, f"readers-gen {mode}", p.stderr)
    return json.loads(p.stdout)


def one_line_error(p, cmd, desc, pattern=None):
    """Exit status 2 and exactly one line 'tracepad CMD: ...' on stderr."""
    lines = p.stderr.splitlines()
    good = p.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"tracepad {cmd}: ")
    if good and pattern:
        good = re.search(pattern, lines[0]) is not None
    ok(good, desc, f"rc {p.returncode}, stderr {p.stderr!r}")


# Thread 4242 and 4243 of the calls trace (see readers-gen.c): what dump prints after the
# absolute time, in time order.
CALLS_DUMP = [
    "+0.000000000 4242/4242 func_entry func=\"main\"",
    "+0.000000010 4242/4243 func_exit func=\"orphan\"",
    "+0.000000050 4242/4243 func_entry func=\"worker\"",
    "+0.000000100 4242/4242 func_entry func=\"parse\"",
    "+0.000000120 4242/4242 tick n=1 pc=0x401000",
    "+0.000000150 4242/4242 func_entry func=\"lex\"",
    "+0.000000300 4242/4243 func_entry func=\"lex\"",
    "+0.000000350 4242/4243 tick n=2 pc=0x402000",
    "+0.000000400 4242/4242 func_exit func=\"lex\"",
    "+0.000000500 4242/4242 func_entry func=\"lex\"",
    "+0.000000600 4242/4243 func_exit func=\"lex\"",
    "+0.000000700 4242/4242 func_exit func=\"lex\"",
    "+0.000000900 4242/4243 func_entry func=\"compute\"",
    "+0.000001000 4242/4242 func_exit func=\"parse\"",
    "+0.000001200 4242/4242 func_entry func=\"emit\"",
    "+0.000001300 4242/4242 msg text=\"hello \\\"world\\\"\\n\" data=<deadbeef> "
    "regs=[0x1, 0x10, 0xffffffffffffffff] vals=[-1, 2, -3] delta=-5",
    "+0.000001500 4242/4242 func_exit func=\"emit\"",
    "+0.000002000 4242/4242 func_exit func=\"main\"",
    "+0.000002500 4242/4243 msg text=\"bye\" data=<> regs=[0x0, 0x0, 0x0] vals=[] delta=7",
]

# (tid, name, start ns, duration ns) of every call: 6 entry/exit pairs, and worker and
# compute of thread 4243, which never return and end with the thread's last event (2500).
CALLS_SLICES = sorted([
    (4242, "main", 0, 2000), (4242, "parse", 100, 900), (4242, "lex", 150, 250),
    (4242, "lex", 500, 200), (4242, "emit", 1200, 300),
    (4243, "worker", 50, 2450), (4243, "lex", 300, 300), (4243, "compute", 900, 1600),
])

CALLS_FOLDED = """main 800
main;emit 300
main;parse 450
main;parse;lex 450
worker 550
worker;compute 1600
worker;lex 300
"""


def utc(ns):
    t = datetime.datetime.fromtimestamp(ns // 10**9, datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S") + ".%09d" % (ns % 10**9)


def bt2_count(trace):
    p = subprocess.run([BT2, trace], capture_output=True, text=True)
    return p.returncode, p.stdout.count("\n"), p.stderr


# ---- dump ----------------------------------------------------------------------------------

def check_dump(prog, tmp):
    trace = os.path.join(tmp, "calls")
    info = gen(prog, "calls", trace)
    p = run("dump", trace)
    is_eq((p.returncode, p.stderr), (0, ""), "dump exits 0, nothing on stderr")
    lines = p.stdout.splitlines()
    is_eq(len(lines), info["events"], "dump: one line per event")
    is_eq([line.split(" ", 2)[2] for line in lines], CALLS_DUMP,
          "dump: relative times, pid/tid, names and every field value as written")
    if BT2:
        rc, n, err = bt2_count(trace)
        is_eq((rc, n), (0, len(lines)), "babeltrace2 counts as many events as dump prints")

    if BT2:
        # A clock that is not 1 GHz, with an offset of more than a second of cycles: the
        # times are those babeltrace2 prints, to the nanosecond.
        odd = os.path.join(tmp, "odd-clock")
        shutil.copytree(trace, odd)
        with open(os.path.join(odd, "metadata")) as f:
            meta = f.read()
        meta, n = re.subn(r"freq = \d+;", "freq = 2399987651;", meta)
        meta = re.sub(r"offset = \d+;", "offset = 7777777777777;", meta)
        with open(os.path.join(odd, "metadata"), "w") as f:
            f.write(meta)
        got = [json.loads(x)["ts"] for x in run("dump", "--json", odd).stdout.splitlines()]
        b = subprocess.run([BT2, "--clock-seconds", odd], capture_output=True, text=True)
        want = [int(m.group(1)) * 10**9 + int(m.group(2))
                for m in re.finditer(r"^\[(\d+)\.(\d{9})\]", b.stdout, re.M)]
        ok(n == 1 and got == want and len(want) == info["events"],
           "dump: times of a 2.4 GHz clock equal babeltrace2's to the nanosecond",
           f"{n} clocks; dump {got[:3]}, babeltrace2 {want[:3]}")

    out = os.path.join(tmp, "dump.json")
    p = run("dump", "--json", "-o", out, trace)
    is_eq((p.returncode, p.stdout, p.stderr), (0, "", ""), "dump --json -o FILE")
    with open(out) as f:
        objs = [json.loads(line) for line in f]
    is_eq(len(objs), info["events"], "dump --json: one JSON object per line, each parses")
    is_eq([o["rel_ns"] for o in objs],
          [int(round(float(line.split()[0][1:]) * 1e9)) for line in CALLS_DUMP],
          "dump --json: rel_ns")
    ok(all(o["time"] == utc(o["ts"]) for o in objs),
       "dump --json: the human time is the ts in ns (TZ=UTC)", objs[0])
    first = lines[0].split(" ")
    is_eq(" ".join(first[:2]), objs[0]["time"], "dump: text and JSON agree on the time")
    msg = objs[15]
    is_eq((msg["name"], msg["pid"], msg["tid"], msg["stream"]), ("msg", 4242, 4242, 0),
          "dump --json: name, pid, tid, stream")
    is_eq(msg["fields"], {"text": "hello \"world\"\n", "data": "deadbeef",
                          "regs": [1, 16, 2**64 - 1], "vals": [-1, 2, -3], "delta": -5},
          "dump --json: string, bytes, array, sequence and signed values exact")
    is_eq(objs[4]["fields"], {"n": 1, "pc": 0x401000},
          "dump --json: integers as numbers, no symbols without .maps")
    ok("symbols" not in objs[4], "dump --json: no symbols key without .maps")

    trace = os.path.join(tmp, "addrs")
    info = gen(prog, "addrs", trace)
    p = run("dump", trace)
    lines = [line.split(" ", 2)[2] for line in p.stdout.splitlines()]
    is_eq(p.returncode, 0, "dump of the trace with a .maps file")
    if BT2:
        rc, n, err = bt2_count(trace)
        is_eq((rc, n), (0, info["events"]),
              "babeltrace2 reads a trace with a .maps file (hidden, not a stream)")
    is_eq(lines, [
        "+0.000000000 4242/4242 func_entry addr=readers-gen:gen_parse+0x0",
        "+0.000000100 4242/4242 sample pc=readers-gen:gen_lex+0x4 "
        "ret_addr=readers-gen:gen_parse+0x8 count=3",
        "+0.000000200 4242/4242 func_entry addr=readers-gen:gen_lex+0x0",
        "+0.000000500 4242/4242 func_exit addr=readers-gen:gen_lex+0x0",
        "+0.000000600 4242/4242 func_entry addr=0x10",
        "+0.000000620 4242/4242 sample pc=0x10 ret_addr=0x20 count=4",
        "+0.000000650 4242/4242 func_exit addr=0x10",
        "+0.000000900 4242/4242 func_exit addr=readers-gen:gen_parse+0x0",
    ], "dump: pc, addr and *_addr resolved through .maps, hex outside every mapping")
    p = run("dump", "--json", trace)
    objs = [json.loads(line) for line in p.stdout.splitlines()]
    is_eq((objs[1]["fields"], objs[1].get("symbols")),
          ({"pc": info["gen_lex"] + 4, "ret_addr": info["gen_parse"] + 8, "count": 3},
           {"pc": "readers-gen:gen_lex+0x4", "ret_addr": "readers-gen:gen_parse+0x8"}),
          "dump --json: raw addresses in fields, resolved ones in symbols")
    ok("symbols" not in objs[5], "dump --json: no symbols for unmapped addresses")

    # A malformed .maps line is skipped with one warning; the others still count.
    with open(os.path.join(trace, ".maps"), "a") as f:
        f.write("this is not a mapping\n")
    p = run("dump", trace)
    ok(p.returncode == 0 and "gen_lex+0x4" in p.stdout and
       re.fullmatch(r"tracepad dump: warning: .*\.maps:\d+: 1 malformed line ignored\n",
                    p.stderr), "dump: a malformed .maps line is a warning", p.stderr)

    # Hostile .maps lines: a FIFO (opening it would block), a directory, empty or reversed
    # ranges, missing fields, numbers too large: skipped, never a hang.
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    lo = info["gen_lex"] & ~0xfff
    with open(os.path.join(trace, ".maps"), "w") as f:
        f.write(f"{lo:x} {lo + 0x1000:x} 0 {fifo}\n{lo:x} {lo + 0x1000:x} 0 /\n"
                f"2000 1000 0 /bin/true\n1000 2000\n"
                f"fffffffffffffffffffffff 1 0 /bin/true\n")
    p = subprocess.run([TP, "dump", trace], capture_output=True, text=True, env=ENV,
                       timeout=20)
    ok(p.returncode == 0 and "sample pc=0x%x " % (info["gen_lex"] + 4) in p.stdout and
       re.fullmatch(r"tracepad dump: warning: .*\.maps:1: 5 malformed lines ignored\n",
                    p.stderr), "dump: hostile .maps lines skipped, addresses left in hex",
       p.stdout + p.stderr)


# ---- report --------------------------------------------------------------------------------

def check_report(prog, tmp):
    trace = os.path.join(tmp, "calls")
    info = gen(prog, "calls", trace)
    p = run("report", "--json", trace)
    is_eq(p.returncode, 0, "report --json exits 0")
    r = json.loads(p.stdout)
    is_eq(r["events"], info["events"], "report: event count")
    is_eq(r["nr_streams"], 2, "report: two streams")
    is_eq([(s["file"], s["events"], s["discarded"]) for s in r["streams"]],
          [("stream_0", 12, 0), ("stream_1", 7, 0)], "report: events per stream")
    is_eq([(c["name"], c["count"]) for c in r["classes"]],
          [("func_entry", 8), ("func_exit", 7), ("msg", 2), ("tick", 2)],
          "report: per-class counts, most frequent first")
    is_eq((r["duration_ns"], r["last_ns"] - r["first_ns"], r["discarded"]), (2500, 2500, 0),
          "report: time span")
    is_eq(r["events_per_second"], round(19 / 2500e-9, 1), "report: events/s")
    is_eq((r["first"], r["last"]), (utc(r["first_ns"]), utc(r["last_ns"])),
          "report: first and last as times")
    p = run("report", trace)
    text = p.stdout
    ok(p.returncode == 0 and re.search(r"^events +19$", text, re.M) and
       re.search(r"^duration +0\.000002500 s$", text, re.M) and
       re.search(r"^ +8 +42\.1% +func_entry$", text, re.M) and
       re.search(r"^ +1 +7 +0 +stream_1$", text, re.M),
       "report: the same numbers as text", text)

    trace = os.path.join(tmp, "discard")
    info = gen(prog, "discard", trace)
    p = run("report", "--json", trace)
    r = json.loads(p.stdout)
    is_eq([s["discarded"] for s in r["streams"]], info["discarded"],
          "report: discarded events per stream, as the producers counted them")
    is_eq(r["discarded"], sum(info["discarded"]), "report: discarded in total")
    is_eq([s["events"] for s in r["streams"]], [10, 4], "report: events per stream")
    if BT2:
        _, n, err = bt2_count(trace)
        bt = sum(int(x) for x in re.findall(r"Tracer discarded (\d+) events?", err))
        is_eq((n, bt), (r["events"], r["discarded"]),
              "babeltrace2 agrees on the events and the discarded events")
    p = run("dump", trace)
    is_eq((len(p.stdout.splitlines()), p.returncode), (14, 0), "dump of a trace with discards")
    ok(re.fullmatch(r"tracepad dump: warning: the producers discarded 8 events .*\n",
                    p.stderr), "dump says that events were discarded", p.stderr)
    p = run("report", trace)
    ok(re.search(r"^discarded +8$", p.stdout, re.M) and
       re.search(r"^ +0 +10 +3 +stream_0$", p.stdout, re.M), "report: discards as text",
       p.stdout)


# ---- export --------------------------------------------------------------------------------

def contains(a, b):
    return a["ts"] <= b["ts"] and b["ts"] + b["dur"] <= a["ts"] + a["dur"]


def check_export(prog, tmp):
    trace = os.path.join(tmp, "calls")
    gen(prog, "calls", trace)
    out = os.path.join(tmp, "calls.json")
    p = run("export", "--format", "chrome", trace, "-o", out)
    is_eq((p.returncode, p.stdout, p.stderr), (0, "", ""), "export --format chrome DIR -o OUT")
    t = subprocess.run([sys.executable, "-m", "json.tool", out], capture_output=True,
                       text=True)
    is_eq(t.returncode, 0, "python3 -m json.tool parses the Chrome JSON")
    with open(out) as f:
        doc = json.load(f)
    is_eq(doc.get("displayTimeUnit"), "ns", "displayTimeUnit is ns")
    evs = doc["traceEvents"]
    xs = [e for e in evs if e["ph"] == "X"]
    is_eq(len(xs), len(CALLS_SLICES), "one complete slice per call (6 pairs + 2 never "
          "returning)")
    got = sorted((e["tid"], e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000))
                 for e in xs)
    is_eq(got, CALLS_SLICES, "slices: thread, name, start and duration exact")
    ok(all(isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["pid"] == 4242
           for e in xs), "ts and dur are floats in µs, pid set")
    by = {(e["tid"], e["name"], round(e["ts"] * 1000)): e for e in xs}
    nest = [((4242, "main", 0), (4242, "parse", 100)), ((4242, "parse", 100), (4242, "lex", 150)),
            ((4242, "parse", 100), (4242, "lex", 500)), ((4242, "main", 0), (4242, "emit", 1200)),
            ((4243, "worker", 50), (4243, "lex", 300)),
            ((4243, "worker", 50), (4243, "compute", 900))]
    ok(all(contains(by[a], by[b]) for a, b in nest), "children lie inside their parents")
    disjoint = [((4242, "lex", 150), (4242, "lex", 500)),
                ((4242, "parse", 100), (4242, "emit", 1200))]
    ok(all(by[a]["ts"] + by[a]["dur"] <= by[b]["ts"] for a, b in disjoint),
       "siblings do not overlap")
    inst = [e for e in evs if e["ph"] == "i"]
    is_eq(sorted((e["tid"], e["name"], round(e["ts"] * 1000)) for e in inst),
          [(4242, "msg", 1300), (4242, "tick", 120), (4243, "msg", 2500),
           (4243, "tick", 350)], "other events are instant events")
    msg = [e for e in inst if e["name"] == "msg" and e["tid"] == 4242][0]
    is_eq(msg["args"], {"text": "hello \"world\"\n", "data": "deadbeef",
                        "regs": [1, 16, 2**64 - 1], "vals": [-1, 2, -3], "delta": -5},
          "instant events carry their fields as args")
    is_eq(len(evs), len(xs) + len(inst), "nothing else in traceEvents")
    other = doc["otherData"]
    is_eq((other["unmatched_exits"], other["calls_closed_at_end"], other["calls"]), (1, 2, 8),
          "otherData: the unmatched exit dropped, 2 calls closed at the end")

    out = os.path.join(tmp, "calls.folded")
    p = run("export", "--format", "folded", "-o", out, trace)
    is_eq(p.returncode, 0, "export --format folded")
    with open(out) as f:
        is_eq(f.read(), CALLS_FOLDED, "folded stacks, self time in ns, exact")

    trace = os.path.join(tmp, "addrs")
    info = gen(prog, "addrs", trace)
    p = run("export", trace)
    doc = json.loads(p.stdout)
    got = sorted((e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000))
                 for e in doc["traceEvents"] if e["ph"] == "X")
    is_eq(got, [("0x10", 600, 50), ("gen_lex", 200, 300), ("gen_parse", 0, 900)],
          "chrome (the default format): addr entries named through .maps")
    sample = [e for e in doc["traceEvents"] if e["ph"] == "i"][0]
    want = {"pc": "0x%x readers-gen:gen_lex+0x4" % (info["gen_lex"] + 4),
            "ret_addr": "0x%x readers-gen:gen_parse+0x8" % (info["gen_parse"] + 8),
            "count": 3}
    is_eq(sample["args"], want, "address args resolved")
    p = run("export", "--format", "folded", trace)
    is_eq((p.returncode, p.stdout),
          (0, "gen_parse 550\ngen_parse;0x10 50\ngen_parse;gen_lex 300\n"),
          "folded stacks of addr entries")


# ---- bad input -----------------------------------------------------------------------------

def check_errors(prog, tmp):
    good = os.path.join(tmp, "calls")
    gen(prog, "calls", good)
    for cmd in ("dump", "report", "export"):
        h = run(cmd, "--help")
        ok(h.returncode == 0 and h.stdout.startswith(f"usage: tracepad {cmd} "),
           f"{cmd} --help")
        h2 = run("help", cmd)
        is_eq(h2.stdout, h.stdout, f"tracepad help {cmd}")
        one_line_error(run(cmd, os.path.join(tmp, "nope")), cmd,
                       f"{cmd}: a directory that does not exist", r"No such file")
        one_line_error(run(cmd, tmp), cmd, f"{cmd}: a directory without metadata",
                       r"not a trace \(no metadata file\)")
        one_line_error(run(cmd, os.path.join(good, "metadata")), cmd,
                       f"{cmd}: a file, not a directory", r"not a trace")
        one_line_error(run(cmd), cmd, f"{cmd}: no directory")
        one_line_error(run(cmd, good, good), cmd, f"{cmd}: two directories")
    one_line_error(run("export", "--format", "svg", good), "export", "unknown --format",
                   r"unknown --format 'svg' \(chrome, folded\)")
    plain = os.path.join(tmp, "plain")
    gen(prog, "plain", plain)
    out = os.path.join(tmp, "plain.folded")
    one_line_error(run("export", "--format", "folded", "-o", out, plain), "export",
                   "folded without func_entry/func_exit events", r"no func_entry/func_exit")
    ok(not os.path.exists(out), "... and no output file left behind")
    p = run("export", plain)
    ok(p.returncode == 0 and len(json.loads(p.stdout)["traceEvents"]) == 3,
       "chrome without calls: instant events only")

    bad = os.path.join(tmp, "badmeta")
    shutil.copytree(good, bad)
    with open(os.path.join(bad, "metadata"), "w") as f:
        f.write("/* CTF 1.8 */\ntrace { major = 1; minor = 8; ;;; garbage {{{\n")
    for cmd in ("dump", "report", "export"):
        one_line_error(run(cmd, bad), cmd, f"{cmd}: malformed metadata", r"malformed metadata")

    cut = os.path.join(tmp, "truncated")
    shutil.copytree(good, cut)
    os.truncate(os.path.join(cut, "stream_0"), 200)
    for cmd in ("dump", "report", "export"):
        one_line_error(run(cmd, cut), cmd, f"{cmd}: a truncated stream", r"corrupt trace")
    out = os.path.join(tmp, "cut.json")
    one_line_error(run("export", "-o", out, cut), "export", "export -o OUT: a truncated stream")
    ok(not os.path.exists(out), "... and no half-written output file")
    # An existing output file survives a failed run, and keeps its mode when replaced.
    keep_dir = os.path.join(tmp, "outs")
    os.mkdir(keep_dir)
    keep = os.path.join(keep_dir, "precious.json")
    with open(keep, "w") as f:
        f.write("precious\n")
    os.chmod(keep, 0o640)
    runs = [run("export", "-o", keep, cut), run("export", "-o", keep, bad),
            run("dump", "-o", keep, bad), run("report", "-o", keep, bad)]
    with open(keep) as f:
        kept = f.read()
    ok(all(p.returncode == 2 for p in runs) and kept == "precious\n" and
       os.listdir(keep_dir) == ["precious.json"],
       "failed export/dump/report -o FILE leave an existing FILE as it was, no temporary file",
       [(p.returncode, p.stderr) for p in runs] + [kept, os.listdir(keep_dir)])
    p = run("export", "-o", keep, good)
    ok(p.returncode == 0 and json.load(open(keep))["traceEvents"] and
       (os.stat(keep).st_mode & 0o777) == 0o640 and os.listdir(keep_dir) == ["precious.json"],
       "a successful export replaces FILE, keeping its mode", p.stderr)

    # dump salvages: the other streams' events are all shown, the bad stream's up to the cut
    def events(p):
        # rel_ns counts from the first event shown, which the cut may remove
        return [{k: v for k, v in json.loads(x).items() if k != "rel_ns"}
                for x in p.stdout.splitlines()]
    whole = events(run("dump", "--json", good))
    p = run("dump", "--json", cut)
    part = events(p)
    streams = {e["stream"] for e in whole}
    others = [e for e in whole if e["stream"] != 0]
    ok(len(streams) > 1 and [e for e in part if e["stream"] != 0] == others and
       all(e in whole for e in part) and len(part) < len(whole),
       "dump of a trace with a truncated stream shows every event of the other streams",
       f"streams {streams}, {len(part)} of {len(whole)} events")
    one_line_error(p, "dump", "... and names the stream and the offset where it stopped",
                   r"corrupt trace: stream stream_0 at offset \d+: .*other streams are read")

    maps = os.path.join(tmp, "plain-maps")
    shutil.copytree(good, maps)
    with open(os.path.join(maps, "maps"), "w") as f:
        f.write("1000 2000 0 /bin/true\n")
    one_line_error(run("dump", maps), "dump", "a file named 'maps' is a bad stream: said so",
                   r"name it \.maps")

    # Random corruption of a stream: an error or a result, never a crash.
    rnd = random.Random(1234)
    with open(os.path.join(good, "stream_0"), "rb") as f:
        orig = f.read()
    fz = os.path.join(tmp, "fuzz")
    shutil.copytree(good, fz)
    crashes = []
    for i in range(60):
        data = bytearray(orig)
        for _ in range(rnd.randint(1, 8)):
            pos = rnd.randrange(len(data)) if i % 2 else rnd.randrange(200)
            data[pos] = rnd.randrange(256)
        with open(os.path.join(fz, "stream_0"), "wb") as f:
            f.write(data[:rnd.randrange(len(data) + 1)] if i % 3 == 0 else data)
        for args in (["dump"], ["dump", "--json"], ["report"], ["export"],
                     ["export", "--format", "folded"]):
            p = run(*args, fz)
            if p.returncode not in (0, 2) or len(p.stderr.splitlines()) > 1:
                crashes.append((i, args, p.returncode, p.stderr[-300:]))
    ok(not crashes, "60 corrupted streams: exit 0 or 2 with at most one line, never a crash",
       crashes[:3])


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    prog, what = sys.argv[1], sys.argv[2]
    checks = {"dump": check_dump, "report": check_report, "export": check_export,
              "errors": check_errors}
    if what not in checks:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tp-readers-") as tmp:
        checks[what](prog, tmp)
    done()


if __name__ == "__main__":
    sys.exit(main())
