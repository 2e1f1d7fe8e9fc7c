#!/usr/bin/env python3
"""-e feedback and spellings: a pattern that matched no function by the program's end is
named in a warning (selecting, deselecting, with or without an object), while the patterns
that matched are not and the program's calls are traced as without it; ltrace's
FUNCTION@OBJECT selects what OBJECT:FUNCTION does; malformed '@' patterns are refused.  With
the engine of argv[2]."""
import re

from tpcalls import ENGINE, TRACEPAD, calls, check, done, one_line_error, run, target

lazy = target("calls-lazy")
WARN = re.compile(r"^tracepad calls: warning: pattern '(.*)' matched no function$")


def warned(r):
    return [m.group(1) for m in map(WARN.match, r.err.splitlines()) if m]


# A misspelt pattern alone: nothing traced, one warning naming it, the program unchanged.
r = calls(["-e", "tpc_addd"], [lazy, "50"])
check(r.rc == 0 and not r.calls and warned(r) == ["tpc_addd"],
      "-e tpc_addd: no call, a warning naming tpc_addd", r)

# Among good ones: only the bad ones are named; the good one still traces its 50 calls.
pats = "libtpcalls:tpc_add,tpc_nope,!tpc_nope2,!libc:mallocc,libtpcallz:*,!libc:free"
r = calls(["-e", pats], [lazy, "50"])
adds = [c for c in r.calls if c.function == "tpc_add"]
check(r.rc == 0 and len(adds) == 50 and len(r.calls) == 50,
      "-e %r: the 50 calls of tpc_add" % pats, r)
check(sorted(warned(r)) == sorted(["tpc_nope", "!tpc_nope2", "!libc:mallocc", "libtpcallz:*"]),
      "-e %r: a warning for each pattern that matched nothing, none for the others" % pats,
      warned(r))
check(all(WARN.match(ln) for ln in r.err.splitlines()), "nothing else on stderr", r.err)

# Deselections in an object no selecting pattern names (its functions are not matched):
# one that names a function of it is not warned of, a misspelt one is.
pats = "libtpcalls:tpc_add,!libc:free,!libc:mallocc"
r = calls(["-e", pats], [lazy, "50"])
check(r.rc == 0 and len(r.calls) == 50 and warned(r) == ["!libc:mallocc"],
      "-e %r: 50 calls, a warning for !libc:mallocc only" % pats, r)

# Patterns that match: no warning (the default selection, a '!' of a default function).
r = calls(["-e", "!tpc_c"], [lazy, "5"])
check(r.rc == 0 and r.calls and not warned(r), "-e '!tpc_c': no warning", r)

# ltrace's spelling.
for pat in ("tpc_add@libtpcalls.so", "tpc_add@libtpcalls*"):
    r = calls(["-e", pat], [lazy, "50"])
    cs = r.calls
    check(r.rc == 0 and len(cs) == 50 and all(c.function == "tpc_add" and
                                                c.object == "libtpcalls.so" for c in cs)
          and [c.args for c in cs[:2]] == [[0, 1], [1, 2]] and not warned(r),
          "-e %r: the 50 calls of tpc_add, as -e libtpcalls:tpc_add" % pat, r)
a = calls(["-e", "malloc@libc.so.6"], [lazy, "5"])
b = calls(["-e", "libc.so.6:malloc"], [lazy, "5"])
check(a.rc == 0 and a.calls and all(c.object == "libc.so.6" and c.function == "malloc"
                                     for c in a.calls)
      and len(a.calls) == len(b.calls) and not warned(a),
      "-e malloc@libc.so.6: libc's malloc calls, as many as -e libc.so.6:malloc", (a, b))
r = calls(["-e", "malloc@libz.so.1"], [lazy, "5"])
check(r.rc == 0 and not r.calls and warned(r) == ["malloc@libz.so.1"],
      "-e malloc@libz.so.1 (not loaded): nothing traced, a warning", r)

for bad in ("malloc@", "@libc", "a@b:c", "a@b@c"):
    r = run([TRACEPAD, "calls", "--engine", ENGINE, "-e", bad, "--", lazy, "1"])
    check(one_line_error(r) and "bad pattern" in r.err, "-e %r: refused in one line" % bad, r)
done()
