#!/usr/bin/env python3
"""tracepad calls' output, with the engine of argv[2]: nesting shown by indentation (c, b, a
at 4, 2, 0 spaces), tail calls, --entry, -T durations, lines on stderr without -o, and
--trace DIR read back by tracepad dump and babeltrace2 with one call and one return event per
call."""
import json
import os
import re
import shutil
import subprocess
import tempfile

from tpcalls import ENGINE, check, done, calls, need_peer, run, target, ENTRY, EVENT, LINE, \
    TRACEPAD

multi = target("calls-multi")
lazy = target("calls-lazy")
NEST = "libtpcalls:tpc_a,libtpcalls:tpc_b,libtpcalls:tpc_c,libtpcalls:tpc_tail"


def abc(x):
    """(function, indent, args, ret) of the return lines of tpc_a(x), innermost first."""
    c = 3 * (2 * x + 1)
    return [("tpc_c", 4, [2 * x + 1], c), ("tpc_b", 2, [2 * x], c + 1), ("tpc_a", 0, [x], c + 3)]


nat = run([multi, "nest"])
check(nat.rc == 0 and "a 1 = 12\n" in nat.out and "tail 2 = 6\n" in nat.out, "native nest", nat)

# Nesting: c, b, a at 4, 2, 0 spaces; tail calls reported with their values.
r = calls(["-e", NEST, "-T"], [multi, "nest"])
check(r.rc == 0 and r.out == nat.out, "nest: output and exit status unchanged", r)
check(not r.unparsed(), "nest: every line is a call line", "\n".join(r.unparsed()[:10]))
cs = r.calls
got = [(c.function, c.indent, c.args, c.retint) for c in cs[:9]]
want = abc(1) + abc(2) + abc(3)
check(got == want, "nest: tpc_c, tpc_b, tpc_a lines at indentation 4, 2, 0 with their values",
      "got  %r\nwant %r" % (got, want))
durs = [c.seconds for c in cs[:9]]
check(len(durs) == 9 and all(d is not None and d >= 0 for d in durs) and all(
      durs[i] <= durs[i + 1] <= durs[i + 2] for i in (0, 3, 6)),
      "-T: durations present, an outer call lasts at least as long as the calls it contains",
      durs)
tail = [(c.function, c.args, c.retint) for c in cs[9:]]
want = [(f, [x], 3 * x) for x in (1, 2, 3) for f in ("tpc_c", "tpc_tail")]
check(sorted(tail) == sorted(want) and len(cs) == 15,
      "tail call: tpc_tail and the tpc_c it jumps to both reported, = 3x",
      "got  %r\nwant (any order within a pair) %r" % (tail, want))
check(all(c.depth == 0 for c in cs[9:] if c.function == "tpc_tail"),
      "tail call: tpc_tail at depth 0", cs[9:])

# --entry: entries too, at the depth they are entered.
r = calls(["-e", NEST, "--entry"], [multi, "nest"])
check(r.rc == 0 and r.out == nat.out, "--entry: output and exit status unchanged", r)
check(not r.unparsed(entries=True), "--entry: every line is an entry or a call line",
      "\n".join(r.unparsed(entries=True)[:10]))
seq = []
for ln in r.lines[:6]:
    m, e = LINE.match(ln), ENTRY.match(ln)
    if m:
        seq.append(("ret", m.group(4), len(m.group(2))))
    elif e:
        seq.append(("entry", e.group(4), len(e.group(2))))
want = [("entry", "tpc_a", 0), ("entry", "tpc_b", 2), ("entry", "tpc_c", 4),
        ("ret", "tpc_c", 4), ("ret", "tpc_b", 2), ("ret", "tpc_a", 0)]
check(seq == want, "--entry: a, b, c entered at 0, 2, 4 then returned at 4, 2, 0",
      "got  %r\nwant %r" % (seq, want))
ent = [ENTRY.match(ln) for ln in r.lines if ENTRY.match(ln)]
check(len(ent) == 15 and [e.group(5) for e in ent[:3]] != ["", "", ""],
      "--entry: one entry line per call, with its arguments", r.lines[:6])

# --bt: each call's line is followed by the backtrace of its entry, through tracepad's return
# hooks (tpc_b and tpc_a are in flight, their return addresses hooked); --bt=N: N frames.
for opt, n in (("--bt", None), ("--bt=2", 2)):
    r = calls(["-e", NEST, opt], [multi, "nest"])
    check(r.rc == 0 and r.out == nat.out, opt + ": output and exit status unchanged", r)
    ls = r.lines
    first = next((i for i, ln in enumerate(ls) if LINE.match(ln)), None)
    frames = []
    for ln in ls[first + 1:] if first is not None else []:
        if LINE.match(ln):
            break
        frames.append(ln)
    m = LINE.match(ls[first]) if first is not None else None
    want = ["tpc_b", "tpc_a", "main"][:n or 3]
    got = [next((w for w in ("tpc_b", "tpc_a", "main") if re.search(r"\b%s\b" % w, f)), f)
           for f in frames[:len(want)]]
    check(m and m.group(4) == "tpc_c" and got == want
          and (n is None or len(frames) == n) and all(f.startswith(
              "[%s] " % m.group(1)) for f in frames),
          opt + ": tpc_c's backtrace: %s%s" % (", ".join(want), "" if n else ", ..."),
          "\n".join(ls[:10]))

# `!` deselects: after a selection, from it; first, from the default selection (the
# program's own functions and what it imports: tpc_a, tpc_tail, printf, not tpc_b).
r = calls(["-e", "libtpcalls:tpc_*,!libtpcalls:tpc_c"], [multi, "nest"])
cs = r.calls
got = [(c.function, c.indent, c.args, c.retint) for c in cs[:6]]
want = [x for n in (1, 2, 3) for x in abc(n)[1:]]
check(r.rc == 0 and got == want and {c.function for c in cs} == {"tpc_a", "tpc_b", "tpc_tail"},
      "-e 'libtpcalls:tpc_*,!libtpcalls:tpc_c': no tpc_c, tpc_b now at indentation 2",
      "got  %r\nwant %r" % (got, want))
r = calls(["-e", "!tpc_c"], [multi, "nest"])
cs = r.calls
fs = {c.function for c in cs}
check(r.rc == 0 and r.out == nat.out and not {"tpc_b", "tpc_c"} & fs
      and [c.retint for c in cs if c.function == "tpc_a"] == [12, 18, 24]
      and [c.retint for c in cs if c.function == "tpc_tail"] == [3, 6, 9],
      "-e '!tpc_c': the default selection (tpc_a, tpc_tail imported; tpc_b not) minus tpc_c",
      "%r\n%r" % (sorted(fs), r))
main = [c for c in cs if c.function == "main"]
# (its depth is that of the program's own _start, which never returns, in flight around it)
check(len(main) == 1 and main[0].retint == 0 and main[0].object == "calls-multi",
      "default selection: the program's main, = 0", main)
pf = [c.retint for c in cs if c.function == "printf" and c.object.startswith("libc")]
check(pf == [len(ln) + 1 for ln in nat.out.splitlines()],
      "default selection: libc's printf, each returning its line's length", pf)

# OBJECT is the file name, or that name up to .so, or a glob; no colon: any object.
for pat in ("libtpcalls.so:tpc_add", "libtpcalls:tpc_add", "libtp*:tpc_?dd", "tpc_add",
            "*:tpc_add"):
    r = calls(["-e", pat], [lazy, "50"])
    cs = r.calls
    check(r.rc == 0 and len(cs) == 50 and all(c.function == "tpc_add" for c in cs)
          and not r.unparsed(), "-e %r: the 50 calls of tpc_add" % pat, r)

# Without -T no durations; without -o the lines go to stderr (the program writes none).
r = run([TRACEPAD, "calls", "--engine", ENGINE, "-e", "libtpcalls:tpc_add", "--", lazy,
         "50"])
ls = r.err.splitlines()
pid = r.out.split("\n", 1)[0].replace("pid ", "")
check(ls[-1:] == ["[%s] +++ exited with 0 +++" % pid] and EVENT.match(ls[-1]),
      "no -o: the program's exit line last on stderr", ls[-1:])
ls = ls[:-1]
cl = [LINE.match(ln) for ln in ls]
check(r.rc == 0 and len(ls) == 50 and all(cl), "no -o: 50 call lines on stderr, nothing else",
      r)
check(all(m and m.group(7) is None for m in cl), "no -T: no durations", ls[:3])
nat = run([lazy, "50"])
check(r.out.split("\n", 1)[1:] == nat.out.split("\n", 1)[1:], "no -o: stdout unchanged", r)

# -o FILE: nothing on stderr; -T: every duration parses as a float.
r = calls(["-e", "libtpcalls:tpc_add", "-T"], [lazy, "50"])
cs = r.calls
check(r.rc == 0 and r.err == "" and len(cs) == 50, "-o FILE: the 50 lines in FILE, stderr empty",
      r)
check(all(isinstance(c.seconds, float) and 0 <= c.seconds < 10 for c in cs),
      "-T with -o: every line has <SECONDS>, a float", [c.seconds for c in cs[:5]])

# --trace DIR: one call and one return event per call, read by tracepad dump and babeltrace2.
N = 200
tmp = tempfile.mkdtemp(prefix="tp-calls-trace-")
try:
    d = os.path.join(tmp, "t")
    r = calls(["-e", "libtpcalls:tpc_add", "--trace", d], [lazy, str(N)])
    check(r.rc == 0 and len(r.calls) == N, "--trace: the text output is still there", r)
    p = subprocess.run([TRACEPAD, "dump", "--json", d], capture_output=True, text=True,
                       timeout=120)
    evs = []
    for ln in p.stdout.splitlines():
        try:
            evs.append(json.loads(ln))
        except ValueError:
            pass
    check(p.returncode == 0 and evs and len(evs) == len(p.stdout.splitlines()),
          "--trace: tracepad dump --json reads the trace", p.stderr[-300:])
    names = {}
    for e in evs:
        names[e.get("name")] = names.get(e.get("name"), 0) + 1
    is_ret = re.compile(r"ret|exit", re.I)
    is_call = re.compile(r"call|entry|enter", re.I)
    mention = [e for e in evs if "tpc_add" in json.dumps(e)]
    rets = [e for e in mention if is_ret.search(str(e.get("name")))]
    ents = [e for e in mention if not is_ret.search(str(e.get("name")))
            and is_call.search(str(e.get("name")))]
    check(len(ents) == N and len(rets) == N,
          "--trace: %d call and %d return events of tpc_add" % (N, N),
          "event names and counts: %r; %d mention tpc_add" % (names, len(mention)))
    vals = [[str(v) for v in (e.get("fields") or {}).values()] for e in ents + rets]
    check(len(ents) == N and all("%d, %d" % (k, k % 7 + 1) in vals[k] for k in range(N))
          and all(str(k + k % 7 + 1) in vals[N + k] for k in range(N)),
          "--trace: call events carry the arguments, return events the return values, "
          "in order", (ents + rets)[:1] + rets[:1])
    pid = re.search(r"^pid (\d+)$", r.out, re.M)
    check(pid and all(e.get("pid") == int(pid.group(1)) for e in ents + rets),
          "--trace: events carry the program's pid", evs[:2])
    if need_peer("babeltrace2", "babeltrace2", "--trace: babeltrace2 reads the events"):
        b = subprocess.run(["babeltrace2", d], capture_output=True, text=True, timeout=120)
        check(b.returncode == 0 and len(b.stdout.splitlines()) == len(evs),
              "--trace: babeltrace2 reads as many events as tracepad dump",
              "%d vs %d: %s" % (len(b.stdout.splitlines()), len(evs), b.stderr[-300:]))
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done()
