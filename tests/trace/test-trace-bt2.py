#!/usr/bin/env python3
"""babeltrace2 against the traces trace-gen writes, and against our reader (trace-dump):
exact event counts, discard counts, and field values.  TAP output.

usage: test-trace-bt2.py BUILD_DIR/tests/trace {types|shm-big|shm-default|noloss|crash|discard}"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check as ok, done, eq as is_eq  # noqa: E402

BT2 = shutil.which("babeltrace2")


# ---- babeltrace2's text output -------------------------------------------------------------

LINE = re.compile(r"^\[(\d+)\] (\S+) (\S+): (.*)$")
DISCARDED = re.compile(r"Tracer discarded (\d+) events?")
MAYBE = re.compile(r"may have discarded")


class Bt2Parser:
    """Values as babeltrace2's pretty printer writes them: { a = 1, b = [ [0] = 2 ] }."""

    def __init__(self, s):
        self.s, self.i = s, 0

    def ws(self):
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1

    def eat(self, tok):
        self.ws()
        if not self.s.startswith(tok, self.i):
            raise ValueError(f"expected {tok!r} at {self.i}: {self.s[self.i:self.i + 40]!r}")
        self.i += len(tok)

    def peek(self, tok):
        self.ws()
        return self.s.startswith(tok, self.i)

    def value(self):
        self.ws()
        c = self.s[self.i]
        if c == "{":
            self.eat("{")
            d = {}
            while not self.peek("}"):
                m = re.compile(r"(\w+) = ").match(self.s, self.i)
                if not m:
                    raise ValueError(f"field name at {self.i}")
                self.i = m.end()
                d[m.group(1)] = self.value()
                if not self.peek("}"):
                    self.eat(",")
            self.eat("}")
            return d
        if c == "[":
            self.eat("[")
            a = []
            while not self.peek("]"):
                m = re.compile(r"\[(\d+)\] = ").match(self.s, self.i)
                if not m or int(m.group(1)) != len(a):
                    raise ValueError(f"array index at {self.i}")
                self.i = m.end()
                a.append(self.value())
                if not self.peek("]"):
                    self.eat(",")
            self.eat("]")
            return a
        if c == '"':
            out, self.i = [], self.i + 1
            while self.s[self.i] != '"':
                if self.s[self.i] == "\\":
                    self.i += 1
                out.append(self.s[self.i])
                self.i += 1
            self.i += 1
            return "".join(out)
        m = re.compile(r"-?0x[0-9A-Fa-f]+|-?\d+").match(self.s, self.i)
        if not m:
            raise ValueError(f"value at {self.i}: {self.s[self.i:self.i + 40]!r}")
        self.i = m.end()
        return int(m.group(0), 0)

    def top(self):
        """The comma-separated structs after the event name."""
        out = [self.value()]
        while self.peek(","):
            self.eat(",")
            out.append(self.value())
        return out


def run_bt2(trace):
    p = subprocess.run([BT2, "--clock-cycles", "--no-delta", trace], capture_output=True,
                       text=True)
    return p.returncode, p.stdout, p.stderr


def bt2_discarded(stderr):
    return sum(int(x) for x in DISCARDED.findall(stderr))


def bt2_events(stdout):
    """Full parse: list of (cycles, name, pid, tid, payload dict)."""
    events = []
    for line in stdout.splitlines():
        m = LINE.match(line)
        if not m:
            raise ValueError(f"unexpected line {line!r}")
        structs = Bt2Parser(m.group(4)).top()
        ctx = structs[1]
        payload = structs[2] if len(structs) > 2 else {}
        events.append((int(m.group(1)), m.group(3), ctx["pid"], ctx["tid"], payload))
    return events


def dump(build, trace):
    p = subprocess.run([os.path.join(build, "trace-dump"), trace], capture_output=True,
                       text=True)
    lines = p.stdout.splitlines()
    return p.returncode, lines[:-1], json.loads(lines[-1]) if lines else {}


def dump_events(lines):
    out = []
    for line in lines:
        e = json.loads(line)
        out.append((e["cycles"], e["name"], e["pid"], e["tid"], e["fields"]))
    return out


def gen(build, *args):
    p = subprocess.run([os.path.join(build, "trace-gen"), *args], capture_output=True,
                       text=True)
    ok(p.returncode == 0, f"trace-gen {' '.join(args[:1] + args[2:])}", p.stderr)
    return json.loads(p.stdout) if p.returncode == 0 else None


# ---- checks --------------------------------------------------------------------------------

def expected_types(k, i):
    """The payload trace-gen's put_types writes for event i of producer k."""
    def s(v, bits):
        v &= (1 << bits) - 1
        return v - (1 << bits) if v >> (bits - 1) else v
    dlen, nvals = i % 5, i % 4
    return {
        "u8": i & 0xff, "s8": s(-(i % 128), 8), "u16": (i * 7) & 0xffff,
        "s16": s(-(i % 30000), 16), "u32": (i * 100003) & 0xffffffff,
        "s32": s(-i * 1000, 32), "u64": (i * 0x100000001 + 0xffffffff00000000) % (1 << 64),
        "s64": s(-i * 1000000000000, 64), "x32": 0xdead0000 + i, "x64": 0xfeedface00000000 + i,
        "name": f"ev-{k}-{i}", "data_length": dlen,
        "data": [(i + j * 61) & 0xff for j in range(dlen)],
        "regs": [(k << 32) + i * 4 + j for j in range(4)], "vals_length": nvals,
        "vals": [s(-(j + 1) * i, 32) for j in range(nvals)], "small": [s(-i, 16), i & 0xffff],
    }


def check_types(build, tmp):
    trace = os.path.join(tmp, "types")
    info = gen(build, "types", trace)
    rc, out, err = run_bt2(trace)
    ok(rc == 0 and not err, "babeltrace2 reads the types trace", err)
    bt = bt2_events(out)
    is_eq(len(bt), info["committed"], "babeltrace2 event count")
    rc, lines, summary = dump(build, trace)
    ours = dump_events(lines)
    is_eq(rc, 0, "our reader reads the types trace")
    is_eq(summary["events"], info["committed"], "our reader's event count")
    is_eq(summary["streams"], 2, "one stream file per producer")
    ok(bt == ours, "babeltrace2 and our reader agree on every timestamp, name, pid, tid "
       "and field", next((f"{a} != {b}" for a, b in zip(bt, ours) if a != b), None))
    wrong = []
    for cycles, name, pid, tid, payload in bt:
        if name == "tp:empty":
            if payload:
                wrong.append(payload)
            continue
        k = pid - 1000
        i = int(payload["name"].split("-")[2])
        if payload != expected_types(k, i) or tid != 2000 + k * 10 + i % 3:
            wrong.append((payload, expected_types(k, i)))
    ok(not wrong, "every value babeltrace2 prints is the value written", wrong[:2])
    is_eq(sum(1 for e in bt if e[1] == "tp:empty"), 3, "payload-less events")
    first = [e for e in bt if e[1] == "tp:types"][0][4]
    is_eq(first["x64"], 0xFEEDFACE00000000, "a base-16 field (printed 0xFEEDFACE00000000)")
    ok('x64 = 0xFEEDFACE00000000' in out, "babeltrace2 prints base-16 fields in hex")
    ok(re.search(r'name = "ev-1-1499", data_length = 4, data = \[ \[0\] = 219, \[1\] = 24',
                 out) is not None, "string and byte-sequence fields as babeltrace2 prints them")
    cyc = [e[0] for e in bt]
    ok(cyc == sorted(cyc), "events in time order")


SEQ = re.compile(r"\{ thread = (\d+), seq = (\d+), a = 0x([0-9A-F]+), b = (-?\d+) \}")
DSEQ = re.compile(r'"thread":(\d+),"seq":(\d+),"a":(\d+),"b":(-?\d+)')
CYC = re.compile(r"^\[(\d+)\]", re.M)
DCYC = re.compile(r'^\{"cycles":(\d+)', re.M)


def per_thread(matches, hexa):
    """thread -> list of seq; also checks a and b for every event."""
    threads, bad = {}, 0
    for t, s, a, b in matches:
        s = int(s)
        if int(a, 16 if hexa else 10) != (0xabcd000000000000 | s) or int(b) != -s:
            bad += 1
        threads.setdefault(int(t), []).append(s)
    return threads, bad


def check_seq_trace(build, trace, info, label, exact=True):
    """A trace of tp:seq events: counts, discards, values; returns thread -> seqs."""
    rc, out, err = run_bt2(trace)
    ok(rc == 0, f"{label}: babeltrace2 reads it", err[:2000])
    ok(not MAYBE.search(err), f"{label}: no discard of unknown size", err[:2000])
    bt = SEQ.findall(out)
    nlines = out.count("\n")
    is_eq(len(bt), nlines, f"{label}: every babeltrace2 line is a tp:seq event")
    if exact:
        is_eq(len(bt), info["committed"], f"{label}: babeltrace2 count == produced - discarded")
        is_eq(bt2_discarded(err), info["discarded"], f"{label}: babeltrace2 reports the "
              "discarded events")
    rc, lines, summary = dump(build, trace)
    is_eq(rc, 0, f"{label}: our reader reads it")
    ours = DSEQ.findall("\n".join(lines))
    is_eq(summary["events"], len(bt), f"{label}: our reader's count == babeltrace2's")
    is_eq(summary["discarded"], bt2_discarded(err),
          f"{label}: our reader's discarded == babeltrace2's")
    tb, bad_b = per_thread(bt, True)
    to, bad_o = per_thread(ours, False)
    ok(bad_b == 0 and bad_o == 0, f"{label}: every field value is the one written",
       f"{bad_b} wrong in babeltrace2, {bad_o} in ours")
    ok(tb == to, f"{label}: both readers see the same events of each thread in order")
    is_eq([int(x) for x in CYC.findall(out)], [int(x) for x in DCYC.findall("\n".join(lines))],
          f"{label}: same timestamps in the same order")
    ok(all(s == sorted(s) and len(set(s)) == len(s) for s in tb.values()),
       f"{label}: each thread's events in order, none twice")
    return tb


def check_shm(build, tmp, threads, events, subbufs, *mode):
    trace = os.path.join(tmp, f"shm-{subbufs}{''.join(mode)}")
    info = gen(build, "shm", trace, str(threads), str(events), str(subbufs), *mode)
    label = f"{threads} threads x {events}, {subbufs} packets/ring {' '.join(mode)}"
    tb = check_seq_trace(build, trace, info, label)
    is_eq(info["produced"], threads * events, f"{label}: produced")
    if info["discarded"] == 0:
        ok(all(tb.get(t) == list(range(events)) for t in range(threads)),
           f"{label}: nothing lost, every event of every thread")
    return info


def check_crash(build, tmp, threads, events, *mode):
    trace = os.path.join(tmp, f"crash-{events}{''.join(mode)}")
    info = gen(build, "crash", trace, str(threads), str(events), *mode)
    label = f"SIGKILL after {events} events in {threads} threads {' '.join(mode)}"
    tb = check_seq_trace(build, trace, info, label)
    if "no_loss" in mode:
        is_eq(info["committed"], events, f"{label}: every event committed")
        ok(all(tb.get(t, []) == list(range(events // threads + (t < events % threads)))
               for t in range(threads)), f"{label}: all committed events recovered")


def check_kill(build, tmp):
    trace = os.path.join(tmp, "kill")
    info = gen(build, "kill", trace, "3", "40")
    tb = check_seq_trace(build, trace, info, "SIGKILL at a random point", exact=False)
    prog = info["progress"]
    got = [len(tb.get(t, [])) for t in range(3)]
    ok(all(p <= g <= p + 1 for p, g in zip(prog, got)),
       "SIGKILL at a random point: every committed event recovered",
       f"progress {prog}, recovered {got}")
    ok(all(tb.get(t, []) == list(range(g)) for t, g in enumerate(got)),
       "SIGKILL at a random point: no gap, no uncommitted event")


def check_discard(build, tmp):
    trace = os.path.join(tmp, "discard")
    info = gen(build, "discard", trace, "20000")
    check_seq_trace(build, trace, info, "overfilled ring")
    ok(info["discarded"] > 0, "overfilled ring: events were discarded", info)
    is_eq(info["committed"] + info["discarded"], info["produced"],
          "overfilled ring: produced == read + discarded")
    _, _, err = run_bt2(trace)
    ok(len(DISCARDED.findall(err)) >= 2, "babeltrace2 warns about each discard", err[:500])


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    build, what = sys.argv[1], sys.argv[2]
    if not BT2:
        print("1..0 # SKIP babeltrace2 not installed")
        return 77
    with tempfile.TemporaryDirectory(prefix="tp-trace-") as tmp:
        if what == "types":
            check_types(build, tmp)
        elif what == "shm-big":
            # 1M events from 4 threads into rings large enough to keep everything.
            check_shm(build, tmp, 4, 250000, 256)
        elif what == "shm-default":
            # The default rings may discard under this load: counts must still add up.
            check_shm(build, tmp, 4, 250000, 16)
        elif what == "noloss":
            check_shm(build, tmp, 4, 100000, 2, "no_loss")
        elif what == "crash":
            for k in (1, 5000, 100003):
                check_crash(build, tmp, 3, k, "no_loss")
            check_crash(build, tmp, 2, 3000)
            check_kill(build, tmp)
        elif what == "discard":
            check_discard(build, tmp)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    done()


if __name__ == "__main__":
    sys.exit(main())
