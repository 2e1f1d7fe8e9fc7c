#!/usr/bin/env python3
"""tracepad calls on what real -O2 programs contain: GCC's .cold fragments under the default
selection, a failing libc call shown with its errno, signal handlers calling traced functions
and the program's own SIGTRAPs, dlopen/dlclose, vfork + exec, a stripped program, with the
engine of argv[2].  Output and exit status must be the untraced ones, and the traced values
exact."""
import os
import re
import shutil
import subprocess
import tempfile

from tpcalls import ENGINE, check, done, calls, run, target

multi = target("calls-multi")
lazy = target("calls-lazy")


def same(r, nat, what):
    return check(r.rc == nat.rc and r.out == nat.out and r.err == nat.err,
                 what + ": output and exit status unchanged", "%r\nnative: %r" % (r, nat))


# .cold: tpm_work.cold is a fragment reached by a jump, with tpm_work's locals at the top of
# the stack; hooking a "return address" there would overwrite them.
nat = run([multi, "cold"])
check(nat.rc == 0 and "sum 3126\n" in nat.out, "cold: native run", nat)
for opts in ([], ["-e", "tpm_*"], ["-e", "tpm_work"]):
    what = "cold %s %s" % (ENGINE, " ".join(opts) or "(default selection)")
    r = calls(opts, [multi, "cold"])
    same(r, nat, what)
    work = [(c.args, c.retint) for c in r.calls if c.function == "tpm_work"]
    want = [([x], 4 * x + 6 + (1000 if x % 3 == 0 else 0)) for x in range(7)]
    check(work == want, what + ": tpm_work's 7 calls with their values",
          "got  %r\nwant %r" % (work, want))

# errno: open() of a missing file fails with ENOENT, shown so; the program still sees ENOENT.
nat = run([multi, "errno"])
check(nat.rc == 0 and nat.out == "open -1 errno ENOENT\nadd 3\n", "errno: native run", nat)
r = calls(["-e", "libc:open,libc:open64,libtpcalls:tpc_add"], [multi, "errno"])
same(r, nat, "errno")
op = [c for c in r.calls if c.function in ("open", "open64")]
check(len(op) == 1 and op[0].ret == "-1 ENOENT (No such file or directory)"
      and op[0].args_text.startswith('"/nonexistent/tracepad", '),
      "errno: open(\"/nonexistent/tracepad\", ...) = -1 ENOENT (No such file or directory)", op)
r = calls(["-c", "--json", "-e", "libc:open,libc:open64"], [multi, "errno"])
s = r.summary()
f = [f for f in (s or {}).get("functions", []) if f.get("function") in ("open", "open64")]
check(len(f) == 1 and f[0]["calls"] == 1 and f[0]["errors"] == 1,
      "errno: -c counts the failing open as an error", r)

# Signals: SIGUSR1 raised inside traced tpm_raise, whose handler calls tpc_add; SIGTRAPs of
# the program's own (raise, int3) reach its handler.
nat = run([multi, "signal"])
check(nat.rc == 0 and nat.out == "raise sum 6 handled 42 trapped 3\n", "signal: native run", nat)
for opts in (["-e", "tpm_raise,libtpcalls:tpc_add"], []):
    what = "signal %s %s" % (ENGINE, " ".join(opts) or "(default selection)")
    r = calls(opts, [multi, "signal"])
    same(r, nat, what)
    if opts:
        got = [(c.function, c.args, c.retint, c.depth) for c in r.calls]
        want = [x for i in range(3) for x in (("tpc_add", [7, 7], 14, 1),
                                              ("tpm_raise", [i], i + 1, 0))]
        check(got == want, what + ": the handler's call nested in the interrupted one",
              "got  %r\nwant %r" % (got, want))

# SIGTRAP ignored, or blocked, by the program while it makes traced calls: the kernel resets
# an ignored or blocked SIGTRAP to its default action when an int3 forces one, so the tracer
# must leave the program's disposition and mask as they were.
nat = run([multi, "sigign"])
check(nat.rc == 0 and nat.out == "sigign sum 10 trapped 1\n", "sigign: native run", nat)
r = calls(["-e", "libtpcalls:tpc_add"], [multi, "sigign"])
same(r, nat, "sigign")
check([c.retint for c in r.calls] == [3, 7], "sigign: both calls traced", r.calls)

# Deep recursion: 5000 traced calls in flight in one thread, each returning its depth.
D = 5000
nat = run([multi, "rec", str(D)])
r = calls(["-e", "libtpcalls:tpc_rec"], [multi, "rec", str(D)])
same(r, nat, "rec %d" % D)
got = [(c.args, c.retint, c.depth) for c in r.calls]
check(len(got) == D + 1 and all(g == ([k], k, D - k) for k, g in enumerate(got)),
      "rec %d: tpc_rec(k) = k at depth %d - k, innermost first" % (D, D),
      [g for k, g in enumerate(got) if g != ([k], k, D - k)][:3])

# Threads that end inside a traced call (pthread_exit): never a return value for it, and the
# calls after are right.
nat = run([multi, "threxit"])
check(nat.rc == 0 and nat.out == "threxit sum 469\n", "threxit: native run", nat)
for rep in range(3):
    r = calls(["-e", "libtpcalls:tpc_add,libtpcalls:tpc_thread_exit"], [multi, "threxit"])
    same(r, nat, "threxit #%d" % rep)
    ex = [c for c in r.calls if c.function == "tpc_thread_exit"]
    add = sorted((c.args, c.retint) for c in r.calls if c.function == "tpc_add")
    want = sorted([([k, 10], k + 10) for k in range(4)] + [([i, 20], i + 20) for i in range(3)])
    # (a thread's end is not an unwinding: "<no return>", as for _exit, fits as well)
    check(add == want and len(ex) <= 4 and all(c.ret in ("<unwound>", "<no return>")
                                               for c in ex) and not r.unparsed(),
          "threxit #%d: tpc_add's 7 calls right; tpc_thread_exit never returns a value" % rep,
          r)

# dlopen/dlclose 3 times: the library's function found each time it is mapped.
lib2 = target("libtpcalls2.so")
nat = run([multi, "dlopen", lib2])
check(nat.rc == 0 and nat.out == "dlopen sum 276\n", "dlopen: native run", nat)
# With the agent engine, the agent hooks the object at the loader's r_brk and drops its pads
# at the dlclose (the same address may hold the next one).
E = ENGINE + ": "
r = calls(["-e", "libtpcalls2:tpd_mul,libtpcalls:tpc_add"], [multi, "dlopen", lib2])
same(r, nat, E + "dlopen")
got = [(c.function, c.args, c.retint) for c in r.calls]
want = [x for n in (1, 2, 3) for x in [("tpd_mul", [n, i], n * i) for i in range(10)]
        + [("tpc_add", [n, 0], n)]]
check(got == want, E + "dlopen: 3 x 10 calls of tpd_mul between dlopen and dlclose, then tpc_add",
      "got  %r\nwant %r" % (got[:12], want[:12]))
r = calls(["-c", "--json", "-e", "libtpcalls2:*"], [multi, "dlopen", lib2])
s = r.summary()
f = [f for f in (s or {}).get("functions", []) if f.get("function") == "tpd_mul"]
check(same(r, nat, E + "dlopen -c") and len(f) == 1 and f[0]["calls"] == 30,
      E + "dlopen -c: 30 calls of tpd_mul", r)

# vfork: the child runs in the parent's memory, breakpoints included, until it execs.
nat = run([multi, "vfork", lazy])
check(nat.rc == 0 and "vfork status 0 sum 75\n" in nat.out, "vfork: native run", nat)
for opts in ([], ["-e", "libtpcalls:tpc_add"], ["-f", "-e", "libtpcalls:tpc_add"]):
    what = "vfork %s %s" % (ENGINE, " ".join(opts) or "(default selection)")
    r = calls(opts, [multi, "vfork", lazy])
    check(r.rc == 0 and "vfork status 0 sum 75\n" in r.out and "calls 10 sum 79\n" in r.out,
          what + ": parent and exec'd child ran to their end", r)
    if opts:
        child = re.search(r"^pid (\d+)$", r.out, re.M)
        child = int(child.group(1)) if child else None
        mine = [c.args for c in r.calls if c.tid != child]
        theirs = [c.args for c in r.calls if c.tid == child]
        check(mine == [[5, i] for i in range(5)] + [[6, i] for i in range(5)],
              what + ": the parent's 10 calls", mine)
        want = [[i, i % 7 + 1] for i in range(10)] if "-f" in opts else []
        check(theirs == want, what + ": the exec'd child's calls %s" % (
            "under its pid" if "-f" in opts else "not traced"), theirs)

# A stripped program: no .symtab, its imports still in .dynsym.
tmp = tempfile.mkdtemp(prefix="tp-calls-strip-")
try:
    prog = os.path.join(tmp, "calls-lazy")
    subprocess.run(["strip", "-o", prog, lazy], check=True)
    shutil.copy(target("libtpcalls.so"), tmp)  # the RUNPATH is $ORIGIN
    check("symtab" not in subprocess.run(["readelf", "-S", prog], capture_output=True,
                                         text=True).stdout, "stripped: no .symtab")
    r = calls(["-c", "--json"], [prog, "500"])
    s = r.summary()
    add = [f for f in (s or {}).get("functions", []) if f.get("function") == "tpc_add"]
    word = [f for f in (s or {}).get("functions", []) if f.get("function") == "tpc_word"]
    check(r.rc == 0 and add and add[0]["calls"] == 500 and word and word[0]["calls"] == 4,
          "stripped, default selection: the imported tpc_add (500) and tpc_word (4)", r)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done()
