#!/usr/bin/env python3
"""C++ names (calls-cxx: a namespace, overloads, two instances of a template, a class's
methods): shown demangled by default and as symbols with --demangle=no, selected by -e with
their source names or their symbols; -C (uftrace's caller filter) keeps only the calls of
the function and of its callers on the way there.  Also -e OBJECT by soname and unversioned
names (libtpcallsv.so.1.2.3).  Counts and values are checked against the program's own
output.  With the engine of argv[2]."""
import os
import re
import subprocess
import tempfile

from tpcalls import TRACEPAD, calls, check, done, one_line_error, need_peer, run, target

cxx, soname = target("calls-cxx"), target("calls-soname")
N = 4
# A line whose FUNCTION has parentheses and spaces: ARGS are the last (...) before " = ".
CXX = re.compile(r"^\[(\d+)\] ( *)([^\s:]+):(.+)\(([^()]*)\) = (\S+)$")
WARN = re.compile(r"^tracepad calls: warning: pattern '(.*)' matched no function$")
GET0, GET1 = "ns::Widget::get() const", "ns::Widget::get(int) const"
SET, MID, OUT = "ns::Widget::set(int)", "ns::middle(ns::Widget const&, int)", \
    "ns::outer(ns::Widget const&, int)"
TW_I, TW_L = "int ns::twice<int>(int)", "long ns::twice<long>(long)"
SUM_L, SUM_D = "ns::sum(int, long)", "ns::sum(double, double)"


def lines(r):
    """(depth, object, function, args, ret) of each call line."""
    out = []
    for ln in r.lines:
        m = CXX.match(ln)
        if m:
            out.append((len(m.group(2)) // 2, m.group(3), m.group(4), m.group(5), m.group(6)))
    return out


def of(ls, fn):
    return [x for x in ls if x[2] == fn]


def warned(r):
    return [m.group(1) for m in map(WARN.match, r.err.splitlines()) if m]


nat = run([cxx, str(N)])
want = {k: [int(v) for v in re.findall(r"^%s \d+ = (-?\d+)$" % re.escape(k), nat.out, re.M)]
        for k in ("get", "get(k)", "twice<int>", "twice<long>", "sum", "outer")}
check(nat.rc == 0 and all(len(v) == N for v in want.values()), "native run", nat)

# Default selection: every function of the program, named as the source does.
r = calls([], [cxx, str(N)])
ls = [x for x in lines(r) if x[1] == "calls-cxx"]
check(r.rc == 0 and r.out == nat.out, "traced: output and exit status unchanged", r)
counts = {fn: len(of(ls, fn)) for fn in (GET0, GET1, SET, MID, OUT, TW_I, TW_L, SUM_L, SUM_D)}
check(counts == {GET0: N, GET1: 2 * N, SET: N, MID: N, OUT: N, TW_I: 2 * N, TW_L: N,
                 SUM_L: 2 * N, SUM_D: N},
      "default: each C++ function demangled, as many calls as the program makes", counts)
check(not [x for x in ls if x[2].startswith("_Z")], "default: no mangled name left",
      [x for x in ls if x[2].startswith("_Z")][:5])
check([int(x[4]) for x in of(ls, GET0)] == want["get"],
      "ns::Widget::get() const returns what the program printed", of(ls, GET0))
check([int(x[4]) for x in of(ls, OUT)] == want["outer"],
      "ns::outer returns what the program printed", of(ls, OUT))
check([int(x[4]) for x in of(ls, TW_L)] == want["twice<long>"],
      "long ns::twice<long>(long) returns what the program printed", of(ls, TW_L))

# -e by source name, with OBJECT: the two overloads of the method, nothing else.
for pat in ("calls-cxx:ns::Widget::get*", "ns::Widget::get*@calls-cxx",
            "calls-cxx:_ZNK2ns6Widget3getE*"):
    r = calls(["-e", pat], [cxx, str(N)])
    ls = lines(r)
    check(r.rc == 0 and r.out == nat.out and len(of(ls, GET0)) == N
          and len(of(ls, GET1)) == 2 * N and len(ls) == 3 * N and not warned(r),
          "-e %r: the %d calls of get() const and %d of get(int) const only" % (pat, N, 2 * N),
          r)
r = calls(["-e", "calls-cxx:ns::Widget::get(int)*"], [cxx, str(N)])
ls = lines(r)
# Each round calls it directly, then through outer and middle, with the same values.
gk = [int(x[4]) for x in of(ls, GET1)]
check(len(of(ls, GET1)) == len(ls) == 2 * N and gk[0::2] == gk[1::2] == want["get(k)"],
      "-e ns::Widget::get(int)*: one overload, its values as printed", r)
r = calls(["-e", "calls-cxx:ns::sum(double, double),ns::sum(int, long)"], [cxx, str(N)])
ls = lines(r)
check(len(of(ls, SUM_D)) == N and len(of(ls, SUM_L)) == 2 * N and len(ls) == 3 * N
      and not warned(r), "-e with parameter lists: their commas do not split the patterns", r)
r = calls(["-e", "*ns::twice<*"], [cxx, str(N)])
ls = lines(r)
check(len(of(ls, TW_I)) == 2 * N and len(of(ls, TW_L)) == N and len(ls) == 3 * N,
      "-e '*ns::twice<*': both instances of the template (the return type comes first)", r)
r = calls(["-e", "calls-cxx:ns::Widget::gett*"], [cxx, str(N)])
check(r.rc == 0 and not lines(r) and warned(r) == ["calls-cxx:ns::Widget::gett*"],
      "a misspelt C++ pattern: no call, a warning naming it", r)

# A deselection by C++ name in an object no selection names (libstdc++, not scanned for
# breakpoints): one that names a function is not warned of, a misspelt one is.
exc = target("calls-exc")
pats = "tpx_catch,!libstdc++:std::runtime_error::runtime_error*,!libstdc++:std::nope*"
r = calls(["-e", pats], [exc])
check(r.rc == 0 and len(r.calls) == 4 and warned(r) == ["!libstdc++:std::nope*"],
      "-e %r: tpx_catch's 4 calls, a warning for std::nope* only" % pats, r)

# -c --json and --trace name them as the lines do.
r = calls(["-c", "--json", "-e", "calls-cxx:ns::Widget::*"], [cxx, str(N)])
sm = r.summary()
fs = {f["function"]: f["calls"] for f in (sm or {}).get("functions", [])}
check(fs == {GET0: N, GET1: 2 * N, SET: N}, "-c --json: the methods by demangled name", fs)
with tempfile.TemporaryDirectory(prefix="tp-calls-cxx-") as d:
    tr = os.path.join(d, "t")
    r = calls(["--trace", tr, "-e", "calls-cxx:ns::Widget::get(int)*"], [cxx, str(N)])
    dr = run([TRACEPAD, "dump", tr])
    ev = re.findall(r' (call_entry|call_return) object="calls-cxx" function="([^"]*)"', dr.out)
    check(r.rc == 0 and ev.count(("call_entry", GET1)) == 2 * N
          and ev.count(("call_return", GET1)) == 2 * N and len(ev) == 4 * N,
          "--trace: call events under the demangled name", dr.out[-600:])

# --bt: frames named as the calls are.
r = calls(["--bt=3", "-e", "calls-cxx:ns::Widget::get(int)*"], [cxx, "1"])
fr = [ln.split(" at ", 1)[1] for ln in r.lines if " at " in ln]
check(any(f.startswith("calls-cxx:ns::middle(ns::Widget const&, int)+0x") for f in fr)
      and any(f.startswith("calls-cxx:ns::outer(ns::Widget const&, int)+0x") for f in fr),
      "--bt: ns::middle and ns::outer frames demangled", r)

# --demangle=no: the symbols, the same calls.
r = calls(["--demangle=no", "-e", "calls-cxx:ns::Widget::get*"], [cxx, str(N)])
ls = lines(r)
check(len(of(ls, "_ZNK2ns6Widget3getEv")) == N and len(of(ls, "_ZNK2ns6Widget3getEi")) == 2 * N
      and len(ls) == 3 * N, "--demangle=no: the same calls under their symbols", r)
# The names shown are c++filt's for the symbols --demangle=no shows, call for call.
if need_peer("c++filt", "binutils", "the names shown are c++filt's of the symbols"):
    a = [x[2] for x in lines(calls(["-e", "calls-cxx:*"], [cxx, "2"]))]
    syms = [x[2] for x in lines(calls(["--demangle=no", "-e", "calls-cxx:*"], [cxx, "2"]))]
    f = subprocess.run(["c++filt"], input="\n".join(syms) + "\n", capture_output=True,
                       text=True, timeout=30)
    check(len(a) > 10 and f.stdout.splitlines() == a and any(s.startswith("_Z") for s in syms),
          "the names shown are c++filt's of the symbols (%d calls)" % len(a),
          list(zip(a, f.stdout.splitlines()))[:12])
r = calls(["--demangle=maybe"], [cxx, str(N)])
check(one_line_error(r), "--demangle=maybe refused in one line", r)

# -C: get(int) and the calls in flight when it is called (main -> outer -> middle), not
# middle's other callee (twice), outer's (sum), nor the calls around them.
r = calls(["-C", "ns::Widget::get(int)*"], [cxx, str(N)])
ls = [x for x in lines(r) if x[1] == "calls-cxx"]
counts = {}
for x in ls:
    counts[x[2]] = counts.get(x[2], 0) + 1
check(r.rc == 0 and r.out == nat.out and counts == {GET1: 2 * N, MID: N, OUT: N, "main": 1},
      "-C get(int): its %d calls, ns::middle, ns::outer and main once, nothing else" %
      (2 * N), counts)
depth = {fn: {x[0] for x in of(ls, fn)} for fn in (MID, OUT, "main")}
check(len(depth["main"]) == 1 and depth[OUT] == {min(depth["main"]) + 1}
      and depth[MID] == {min(depth["main"]) + 2}
      and {x[0] for x in of(ls, GET1)} == {min(depth["main"]) + 1, min(depth["main"]) + 3},
      "-C: the callers at their nesting depths", depth)
os.environ["TRACEPAD_CALLS_SYNC"] = "1"
s = calls(["-C", "ns::Widget::get(int)*"], [cxx, str(N)])
del os.environ["TRACEPAD_CALLS_SYNC"]
check([x[:3] + x[4:] for x in lines(s) if x[1] == "calls-cxx"] == [x[:3] + x[4:] for x in ls],
      "-C: the same lines with a stop at each return (TRACEPAD_CALLS_SYNC=1)", s)
r = calls(["-C", "ns::middle*"], [cxx, str(N)])
ls = [x for x in lines(r) if x[1] == "calls-cxx"]
check(sorted({x[2] for x in ls}) == sorted([MID, OUT, "main"]) and len(of(ls, MID)) == N
      and [int(x[4]) for x in of(ls, OUT)] == want["outer"],
      "-C ns::middle*: middle, outer and main only (middle's callees hidden)", r)
r = calls(["-C", "ns::nothing"], [cxx, str(N)])
check(r.rc == 0 and not [x for x in lines(r) if x[1] == "calls-cxx"]
      and warned(r) == ["ns::nothing"], "-C of a missing function: no line, a warning", r)
for bad in (["-C", "main", "-c"], ["-C", "main", "--entry"]):
    r = calls(bad, [cxx, "1"])
    check(one_line_error(r), "%s refused in one line" % " ".join(bad), r)

# -C as uftrace -C shows it (uftrace names a function without its parameters; both
# overloads of get match its 'ns::Widget::get'): the same calls at the same depths below
# main.
if need_peer("uftrace", "uftrace", "-C: the calls uftrace -C shows"):
    pg = target("calls-cxx-pg")
    for tp_pat, uf_pat in (("ns::middle*", "ns::middle"), ("calls-cxx-pg:ns::Widget::get*",
                                                            "ns::Widget::get")):
        with tempfile.TemporaryDirectory(prefix="tp-uftrace-") as d:
            subprocess.run(["uftrace", "record", "-d", d, "--no-libcall", "-C", uf_pat, pg,
                            str(N)], capture_output=True, timeout=120)
            rp = subprocess.run(["uftrace", "replay", "-d", d, "-f", "none"],
                                capture_output=True, text=True, timeout=120)
        peer = sorted((len(m.group(1)) // 2, m.group(2)) for m in
                      (re.match(r"^( *)([\w:]+)\(\)(?: \{|;)$", ln)
                       for ln in rp.stdout.splitlines()) if m)
        r = calls(["-C", tp_pat], [pg, str(N)])
        ls = [x for x in lines(r) if x[1] == "calls-cxx-pg"]
        top = min([x[0] for x in ls if x[2] == "main"] or [0])
        got = sorted((x[0] - top, re.sub(r"\(.*$", "", x[2])) for x in ls)
        check(got == peer and len(got) > N, "-C %s: the calls uftrace -C %s shows" %
              (tp_pat, uf_pat), "tracepad %r\nuftrace %r" % (got, peer))

# -e OBJECT:FUNCTION by soname and unversioned names of libtpcallsv.so.1.2.3.
for obj in ("libtpcallsv", "libtpcallsv.so", "libtpcallsv.so.1", "libtpcallsv.so.1.2",
            "libtpcallsv.so.1.2.3", "libtpcallsv.so.[0-9]"):
    for pat in (obj + ":tpc_add", "tpc_add@" + obj):
        r = calls(["-e", pat], [soname, "50"])
        cs = r.calls
        check(r.rc == 0 and len(cs) == 50 and all(c.function == "tpc_add" and
                                                    c.object == "libtpcallsv.so.1.2.3"
                                                    for c in cs)
              and [c.args for c in cs[:2]] == [[0, 1], [1, 2]] and not warned(r),
              "-e %r: the 50 calls of tpc_add in libtpcallsv.so.1.2.3" % pat, r)
r = calls(["-l", "libtpcallsv.so.1"], [soname, "50"])
check(r.rc == 0 and len([c for c in r.calls if c.function == "tpc_add"]) == 50
      and all(c.object == "libtpcallsv.so.1.2.3" for c in r.calls),
      "-l libtpcallsv.so.1: the library's calls, tpc_add's 50 among them", r)
for pat in ("libtpcallsv.so.2:tpc_add", "libtpcallsv.so.1.2.3.4:tpc_add", "libtpcallsv.s:*"):
    r = calls(["-e", pat], [soname, "50"])
    check(r.rc == 0 and not r.calls and warned(r) == [pat],
          "-e %r: no call, a warning naming it" % pat, r)
done()
