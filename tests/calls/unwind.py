#!/usr/bin/env python3
"""tracepad calls when frames are left without returning: longjmp out of 3 nested traced
calls, and C++ exceptions thrown through 3 traced frames.  The program's output must be the
untraced one, later returns must be reported with their right values, and a call left by
unwinding is either shown as `= <unwound>` or not shown, never with a return value.  With
the engine of argv[2]."""
import os

from tpcalls import ENGINE, check, done, calls, run, target

multi = target("calls-multi")
exc = target("calls-exc")


def never_wrong(cs, functions):
    """Lines of @functions (calls that never return) that claim a return value."""
    return [c for c in cs if c.function in functions and c.ret != "<unwound>"]


# longjmp: main -> outer -> mid -> inner -longjmp-> main, then tpc_lj_catch (traced) catches
# one from its own outer call and must still be reported = 1000 + v.
nat = run([multi, "longjmp"])
check(nat.rc == 0 and "catch 2 = 1002\n" in nat.out and "longjmp 3 got 3\n" in nat.out,
      "longjmp: native run", nat)
for opts in (["-e", "libtpcalls:*"], ["-e", "libtpcalls:*", "--entry"]):
    what = "longjmp %s %s" % (ENGINE, " ".join(o for o in opts if o.startswith("-") and o != "-e"))
    r = calls(opts, [multi, "longjmp"])
    check(r.rc == 0 and r.out == nat.out, what + ": output and exit status unchanged", r)
    check(not r.unparsed(entries=True), what + ": every line is a call (or entry) line",
          "\n".join(r.unparsed(entries=True)[:10]))
    cs = r.calls
    wrong = never_wrong(cs, ("tpc_lj_outer", "tpc_lj_mid", "tpc_lj_inner"))
    check(not wrong, what + ": no return value for a call left by longjmp", wrong[:5])
    adds = [(c.args, c.retint, c.depth) for c in cs if c.function == "tpc_add"]
    want = [([v, 100], v + 100, 0) for v in (1, 2, 3)] + [([i, 200], i + 200, 0)
                                                          for i in (1, 2, 3)]
    check(adds == want, what + ": later tpc_add returns reported right, at depth 0",
          "got  %r\nwant %r" % (adds, want))
    catch = [(c.args, c.retint, c.depth) for c in cs if c.function == "tpc_lj_catch"]
    check(catch == [([v], 1000 + v, 0) for v in (1, 2, 3)],
          what + ": tpc_lj_catch = 1000 + v after a longjmp inside it, at depth 0", catch)
    unw = [c for c in cs if c.ret == "<unwound>"]
    check(all(c.function in ("tpc_lj_outer", "tpc_lj_mid", "tpc_lj_inner") for c in unw),
          what + ": only the calls left by longjmp are <unwound>", unw[:5])

# C++: exceptions through tpx_f3 -> tpx_f2 -> tpx_f1, caught in tpx_catch or in main.
if not os.path.exists(exc):
    check(False, "C++ target calls-exc was not built (no C++ compiler?)")
else:
    nat = run([exc])
    check(nat.rc == 0 and "catch 2 = 1002\n" in nat.out and "catch 3 = 17\n" in nat.out
          and "main caught 4 even\n" in nat.out, "C++: native run", nat)
    for opts in (["-e", "tpx_*,libtpcalls:tpc_add"], ["-e", "tpx_*,libtpcalls:tpc_add", "-T"]):
        what = "C++ %s %s" % (ENGINE, " ".join(o for o in opts if o.startswith("-")
                                                and o != "-e"))
        r = calls(opts, [exc])
        check(r.rc == 0 and r.out == nat.out, what + ": output and exit status unchanged "
              "(exceptions caught where they are natively)", r)
        check(not r.unparsed(), what + ": every line is a call line",
              "\n".join(r.unparsed()[:10]))
        cs = r.calls
        # tpx_f* of an even x throw: never a return value for those.
        wrong = [c for c in cs if c.function in ("tpx_f1", "tpx_f2", "tpx_f3")
                 and c.args and c.args[0] % 2 == 0 and c.ret != "<unwound>"]
        check(not wrong, what + ": no return value for a frame an exception went through",
              wrong[:5])
        catch = [(c.args, c.retint, c.depth) for c in cs if c.function == "tpx_catch"]
        want = [([x], 1000 + x if x % 2 == 0 else 5 * x + 2, 0) for x in (1, 2, 3, 4)]
        check(catch == want, what + ": tpx_catch reported with its values at depth 0",
              "got  %r\nwant %r" % (catch, want))
        odd = [(c.function, c.args, c.retint, c.depth) for c in cs
               if c.function.startswith("tpx_f") and c.args and c.args[0] % 2]
        # Lines come on return, innermost first; tpx_catch is in flight around them.
        want = [(f, [x], 5 * x + {"tpx_f3": 0, "tpx_f2": 1, "tpx_f1": 2}[f],
                 {"tpx_f3": 3, "tpx_f2": 2, "tpx_f1": 1}[f])
                for x in (1, 3) for f in ("tpx_f3", "tpx_f2", "tpx_f1")]
        check(odd == want, what + ": calls that returned normally: values and depths",
              "got  %r\nwant %r" % (odd, want))
        adds = [(c.args, c.retint, c.depth) for c in cs if c.function == "tpc_add"]
        want = [([x, 300], x + 300, 0) for x in (1, 2, 3, 4)] + [([x, 400], x + 400, 0)
                                                                for x in (2, 4, 6)]
        check(adds == want, what + ": tpc_add after each exception reported right, at depth 0",
              "got  %r\nwant %r" % (adds, want))
done()
