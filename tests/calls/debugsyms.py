#!/usr/bin/env python3
"""Functions that only a separate debug file names (libc6-dbg's .symtab of libc under
/usr/lib/debug/.build-id: __vfprintf_internal, __libc_start_call_main, new_do_write) are
selected by `tracepad calls -e` with both engines, shown with their arguments and values,
named in --bt backtraces and the memory plugin's, and in the traces that `tracepad dump`
reads (calls --trace, and trace --trace's pc through .maps); the default selection still
takes a library's imports only.  calls-lazy prints 6 lines with printf, whose
__vfprintf_internal returns each line's length.  Skipped when libc6-dbg is not installed."""
import json
import os
import re
import subprocess
import tempfile

from tpcalls import TARGETS, TRACEPAD, calls, check, done, run, target
from tap import skip_all

st = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "libc6-dbg"], capture_output=True,
                    text=True)
if "install ok installed" not in st.stdout:
    skip_all("libc6-dbg is not installed (scripts/deps.sh installs it): no debug file names "
             "libc's static functions")

prog = target("calls-lazy")
leak = os.path.join(TARGETS, "..", "calls-memory", "mem-leak3")
VF = "__vfprintf_internal"
nat = run([prog, "3", "0"])
check(nat.rc == 0 and len(nat.out.splitlines()) == 6, "native: 6 lines printed", nat)


def same_output(out):
    """The program's output as natively, but for its pid."""
    return re.sub(r"^pid \d+", "pid N", out) == re.sub(r"^pid \d+", "pid N", nat.out)


def warned(r):
    return [ln for ln in r.err.splitlines() if "matched no function" in ln]


for engine in ("ptrace", "agent"):
    E = ["--engine", engine]
    for pat in ("libc:" + VF, VF + "@libc.so.6", VF, "libc:__vfprintf_int*"):
        r = calls(E + ["-e", pat], [prog, "3", "0"])
        cs = [c for c in r.calls if c.function == VF]
        check(r.rc == 0 and same_output(r.out) and not warned(r) and len(cs) == 6 and
              all(c.object == "libc.so.6" for c in cs),
              "%s -e %s: the 6 calls of a function only the debug file names" % (engine, pat),
              r)
        fmts = [re.match(r'[^,]*, ("[^"]*")', c.args_text) for c in cs]
        printed = r.out.splitlines(keepends=True)
        check([c.retint for c in cs] == [len(p) for p in printed] and
              all(m and m.group(1).startswith('"') for m in fmts),
              "%s -e %s: each with its format (DWARF's types) and the length printed" %
              (engine, pat), cs)
    r = calls(E + ["-e", "libc:__libc_start_call_main"], [prog, "3", "0"])
    cs = [c for c in r.calls if c.function == "__libc_start_call_main"]
    check(r.rc == 0 and len(cs) == 1 and cs[0].ret == "<no return>" and
          (cs[0].args or [None, None])[1] == 3,
          "%s -e libc:__libc_start_call_main: one call, argc 3, no return" % engine, r)
    r = calls(E + ["-e", "libc:" + VF, "-c", "--json"], [prog, "3", "0"])
    fn = {(f["object"], f["function"]): f["calls"]
          for f in (r.summary() or {}).get("functions", [])}
    check(fn == {("libc.so.6", VF): 6}, "%s -c --json: %s 6 calls" % (engine, VF), fn)

    # --bt: the frames of write at exit through stdio's static functions to main's caller.
    r = calls(E + ["--bt=12", "-e", "libc:write"], [prog, "3", "0"])
    frames = [m.group(1) for m in (re.match(r"^\[\d+\]\s+at (\S+?)\+0x", ln)
                                   for ln in r.lines) if m]
    for fr in ("libc.so.6:new_do_write", "libc.so.6:_IO_file_write",
               "libc.so.6:__libc_start_call_main"):
        check(fr in frames, "%s --bt: %s named (a static function of libc)" % (engine, fr),
              frames)

    # The memory plugin's backtraces: each lost block's, down to main's caller.
    with tempfile.TemporaryDirectory(prefix="tp-debugsyms-") as d:
        out = os.path.join(d, "mem.json")
        r = run([TRACEPAD, "calls"] + E + ["-c", "-e", "!*", "--plugin", "memory:json",
                                           "-o", out, "--", leak])
        recs = []
        try:
            for ln in open(out).read().splitlines():
                try:
                    obj = json.loads(ln)
                except ValueError:
                    continue
                recs += (obj.get("memory") or {}).get("records", []) if isinstance(
                    obj, dict) else []
        except OSError:
            pass
    bts = [" ".join(str(f) for f in rec.get("backtrace", [])) for rec in recs]
    check(r.rc == 0 and len(bts) == 3 and all("libc.so.6:__libc_start_call_main" in b
                                              for b in bts),
          "%s --plugin memory: the 3 lost blocks' backtraces name __libc_start_call_main" %
          engine, "%r\n%r" % (bts, r))

# Of a debug file's aliases, the name shown is the one a person would write, as backtraces
# name it: __libc_cleanup_push_defer, not its local alias __GI___libc_cleanup_push_defer.
r = calls(["-e", "libc:*cleanup_push_defer"], [prog, "3", "0"])
check(r.rc == 0 and r.calls and {c.function for c in r.calls} == {"__libc_cleanup_push_defer"},
      "aliases: the line names __libc_cleanup_push_defer", r)

# The default selection takes a library's imports only: no function of libc's debug file.
r = calls([], [prog, "3", "0"])
libc = {c.function for c in r.calls if c.object == "libc.so.6"}
check(r.rc == 0 and "printf" in libc and VF not in libc and "__libc_start_call_main" not in libc,
      "default selection: libc's imports (printf), none of its debug file's functions", libc)

# Traces: calls --trace names the function in its events; trace --trace's pc is resolved
# through .maps by tracepad dump.
with tempfile.TemporaryDirectory(prefix="tp-debugsyms-") as d:
    t1, t2 = os.path.join(d, "calls"), os.path.join(d, "trace")
    r = calls(["-e", "libc:" + VF, "--trace", t1], [prog, "3", "0"])
    dp = run([TRACEPAD, "dump", "--json", t1])
    evs = [json.loads(ln) for ln in dp.out.splitlines() if ln.startswith("{")]
    ents = [e for e in evs if e["name"] == "call_entry"]
    check(r.rc == 0 and dp.rc == 0 and len(ents) == 6 and
          all(e["fields"].get("function") == VF for e in ents),
          "calls --trace: dump shows 6 call_entry events of %s" % VF, dp)
    tr = run([TRACEPAD, "trace", "-q", "-t", "libc:" + VF, "--trace", t2, "--", prog, "3", "0"])
    dp = run([TRACEPAD, "dump", "--json", t2])
    evs = [json.loads(ln) for ln in dp.out.splitlines() if ln.startswith("{")]
    syms = [e.get("symbols", {}).get("pc", "") for e in evs]
    check(tr.rc == 0 and dp.rc == 0 and len(syms) == 6 and
          all(s.startswith("libc.so.6:%s+0x" % VF) for s in syms),
          "trace --trace -t libc:%s: dump names the 6 frames' pc" % VF, "%r\n%r" % (syms, tr))
done()
