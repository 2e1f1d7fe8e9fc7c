#!/usr/bin/env python3
"""tracepad calls on the same program built as lazy, BIND_NOW, -fno-plt, CET (.plt.sec),
-pg and static binaries, with the engine of argv[2]: exact call counts, the arguments and
return values of every call, and the program's output and exit status unchanged (the agent
engine loads its agent into the static program at main, with the program's own static
dlopen)."""
import re
import subprocess
import tempfile

from tpcalls import ENGINE, check, done, calls, run, target, func, well_formed, program_line

N = 1000
# variant: (pattern of tpc_add, object name prefix in the output)
VARIANTS = {
    "lazy": ("libtpcalls:tpc_add", "libtpcalls.so"),
    "now": ("libtpcalls:tpc_add", "libtpcalls.so"),
    "noplt": ("libtpcalls:tpc_add", "libtpcalls.so"),
    "cet": ("libtpcalls:tpc_add", "libtpcalls.so"),
    "cet-lazy": ("libtpcalls:tpc_add", "libtpcalls.so"),
    "pg": ("libtpcalls:tpc_add", "libtpcalls.so"),
    "static": ("*:tpc_add", "calls-static"),
}


def readelf(*args):
    return subprocess.run(["readelf", "-W"] + list(args), capture_output=True,
                          text=True).stdout


def build_is(name, prog):
    """What the binary is, checked: the variant must be what its name says."""
    dyn, sec, rel = readelf("-d", prog), readelf("-S", prog), readelf("-r", prog)
    now = bool(re.search(r"\(FLAGS\).*BIND_NOW|\(FLAGS_1\).*NOW", dyn))
    slot = re.search(r"R_X86_64_JUMP_SLOT.*tpc_add", rel)
    glob = re.search(r"R_X86_64_GLOB_DAT.*tpc_add", rel)
    if name == "lazy":
        return not now and slot, "lazy: no BIND_NOW, JUMP_SLOT for tpc_add"
    if name == "now":
        return now and slot, "BIND_NOW with a PLT slot for tpc_add"
    if name == "noplt":
        return now and glob and not slot, "-fno-plt: GLOB_DAT, no JUMP_SLOT for tpc_add"
    if name == "cet":
        return now and ".plt.sec" in sec, "CET: .plt.sec and BIND_NOW"
    if name == "cet-lazy":
        return not now and ".plt.sec" in sec, "CET: .plt.sec, lazy"
    if name == "pg":
        return "mcount" in readelf("--dyn-syms", prog), "-pg: calls mcount"
    if name == "static":
        return "INTERP" not in readelf("-l", prog) and "(NEEDED)" not in dyn, \
            "static: no interpreter, no NEEDED"
    return False, "unknown"


def expected_sum(n):
    return sum(i + i % 7 + 1 for i in range(n))


for name, (pattern, obj) in VARIANTS.items():
    prog = target("calls-" + name)
    ok, what = build_is(name, prog)
    check(ok, "%s: the binary is what it claims (%s)" % (name, what))
    with tempfile.TemporaryDirectory(prefix="tp-calls-var-") as cwd:  # -pg writes gmon.out
        nat = run([prog, str(N), "3"], cwd=cwd)
        check(nat.rc == 3 and program_line(nat.out, r"^calls (\d+) sum (\d+)$")
              == (N, expected_sum(N)), "%s: native run" % name, nat)
        npid = program_line(nat.out, r"^pid (\d+)$")

        E = ENGINE + ": "
        # -c --json: the exact count.
        r = calls(["-c", "--json", "-e", pattern], [prog, str(N), "3"], cwd=cwd)
        s = r.summary()
        probs = well_formed(s)
        check(not probs, "%s: -c --json is one well-formed JSON object" % (E + name),
              "\n".join(probs) + "\n%r" % r)
        f = func(s, "tpc_add", obj)
        check(f is not None and f["calls"] == N, "%s: -c counts %d calls of tpc_add" % (E + name, N),
              "%r\n%r" % (f, r))
        check(s is not None and len(s.get("functions") or []) == 1,
              "%s: -c lists only the selected function" % (E + name), r)
        pid = program_line(r.out, r"^pid (\d+)$")
        check(s is not None and pid is not None and s.get("pids") == [pid[0]],
              "%s: -c --json pids is the program's pid" % (E + name), r)
        check(r.rc == 3, "%s: exit status 3 passed through (-c)" % (E + name), r)
        check(r.out.replace("pid %d" % pid[0] if pid else "", "")
              == nat.out.replace("pid %d" % npid[0] if npid else "", ""),
              "%s: stdout unchanged (-c)" % (E + name), r)

        # One line per call: arguments and return values.
        wpattern = pattern.replace("tpc_add", "tpc_word")
        r = calls(["-e", pattern + "," + wpattern], [prog, str(N), "3"], cwd=cwd)
        cs = r.calls
        add = [c for c in cs if c.function == "tpc_add"]
        word = [c for c in cs if c.function == "tpc_word"]
        check(len(add) == N, "%s: %d lines of tpc_add" % (E + name, N), "%d lines\n%r" % (len(add), r))
        check(not r.unparsed(), "%s: every output line is a call line" % (E + name),
              "\n".join(r.unparsed()[:10]))
        bad = [c for i, c in enumerate(add)
               if c.args != [i, i % 7 + 1] or c.retint != i + i % 7 + 1]
        check(add and not bad, "%s: each tpc_add line has its arguments and return value, in "
              "call order" % (E + name), "first wrong: %r" % bad[:5])
        check(add and all(c.object.startswith(obj) and c.depth == 0 for c in add),
              "%s: object %s, depth 0" % (E + name, obj), add[:3])
        total = sum(c.retint or 0 for c in add)
        got = program_line(r.out, r"^calls (\d+) sum (\d+)$")
        check(got == (N, total), "%s: the sum of the traced return values is the program's sum"
              % (E + name), "traced %d, program %r" % (total, got))
        check([c.ret for c in word] == ['"zero"', '"one"', '"two"', '"three"']
              and [c.args for c in word] == [[0], [1], [2], [3]],
              "%s: tpc_word returns strings, shown as strings" % (E + name), word)
        pid = program_line(r.out, r"^pid (\d+)$")
        check(pid is not None and cs and all(c.tid == pid[0] for c in cs),
              "%s: lines carry the program's tid" % (E + name), cs[:2])
        check(r.rc == 3 and r.err == nat.err, "%s: exit status and stderr unchanged" % (E + name), r)

done()
