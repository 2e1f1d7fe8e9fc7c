#!/usr/bin/env python3
"""e2e: an execve of the counted process is followed (issue 10: "execve, the new image is
taken over again").  The dbt engine takes each new image over as it took the first, the
ptrace engine steps on into it, and the two agree to the instruction on every way a
program execs (targets/execself.c: a chain of execs, failed calls first, execvp's PATH
search, a second thread's exec, a program that closed every fd); output and exit status
are those of a native run.  Not followed, by both engines alike: regions and histograms by
address (they name the first image); by the dbt engine: an image that gains privileges
(setuid), which it runs natively."""
import os
import shutil
import stat
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tpe2e import Checks, count, native, target  # noqa: E402

c = Checks("dbt-exec")
X = target("execself")


def followed(argv, what, out=None, rc=0, execs=True):
    """Both engines follow the exec(s) of argv (@execs) and count the same; output as
    natively."""
    nat = native(argv)
    if out is not None:
        c.eq((nat.rc, nat.out), (rc, out), what + ": the native run")
    got = {}
    for engine in ("dbt", "ptrace"):
        r = count(argv, engine=engine)
        rep = c.report(r, "%s (%s)" % (what, engine), engine)
        c.same_as_native(r, nat, "%s (%s)" % (what, engine))
        if not rep:
            continue
        c.ok(rep.get("exec_followed") is execs and rep.get("exec") is False,
             "%s (%s): %s" % (what, engine, "the exec is followed" if execs else "no exec"),
             {k: rep.get(k) for k in ("exec", "exec_followed", "warning")})
        c.ok("warning" not in rep, "%s (%s): no warning" % (what, engine), rep.get("warning"))
        got[engine] = rep["instructions"]
    if len(got) == 2:
        c.eq(got["dbt"], got["ptrace"], what + ": dbt's count is the ptrace engine's")
    return got


# A chain of three execs of itself: each image counted once more than the last.
chain = {n: followed([X, "chain", str(n)], "chain %d" % n,
                     "".join("execself %d\n" % k for k in range(n, -1, -1)), 3, n > 0)
         for n in (0, 1, 3)}
if all(len(v) == 2 for v in chain.values()):
    # chain 0 is one image; chain 1 runs chain 1's image then chain 0's; images differ
    # only in the argument they print, so each added image adds about chain 0's count
    c.ok(chain[3]["dbt"] > chain[1]["dbt"] > chain[0]["dbt"] * 1.5,
         "chain: every image's instructions are in the count", chain)
followed([X, "fail"], "two failed execs, then one",
         "not executable: Permission denied\nmissing: No such file or directory\n"
         "after two failures\n")
followed([X, "path"], "execvp along PATH", "found on the PATH\n")
followed([X, "thread"], "a second thread execs", "from a second thread\n")
followed([X, "closefds"], "the program closed every fd", "execself 1\nexecself 0\n", 3)
# a vfork child's execvp along PATH: its failed tries go on in the parent's block, and are
# the child's instructions, not the parent's, as under ptrace (which does not trace it)
nat = native([X, "vforkpath"])
c.eq((nat.rc, nat.out), (0, "child found echo\nchild status 0\n"), "vforkpath: the native run")
got = {}
for engine in ("dbt", "ptrace"):
    r = count([X, "vforkpath"], engine=engine)
    rep = c.report(r, "vforkpath (%s)" % engine, engine)
    c.same_as_native(r, nat, "vforkpath (%s)" % engine)
    if rep:
        got[engine] = rep["instructions"]
if len(got) == 2:
    c.eq(got["dbt"], got["ptrace"], "vforkpath: the parent's count is the ptrace engine's")
# a real program that execs another: env, then true
both = followed(["/usr/bin/env", "LC_ALL=C", "/bin/true"], "env LC_ALL=C /bin/true")
alone = count(["/bin/true"], engine="dbt")
rep = c.report(alone, "/bin/true alone (dbt)", "dbt")
if rep and both.get("dbt"):
    c.ok(both["dbt"] > rep["instructions"], "env then true: more than true alone",
         (both, rep["instructions"]))

# Regions and address histograms end at the exec, under both engines alike.
for by in ("function", "mnemonic"):
    got = {}
    for engine in ("dbt", "ptrace"):
        r = count([X, "chain", "1"], engine=engine, by=by)
        rep = c.report(r, "--by %s (%s)" % (by, engine), engine)
        if not rep:
            continue
        want = (False, True) if by == "mnemonic" else (True, False)
        c.eq((rep.get("exec"), rep.get("exec_followed")), want,
             "--by %s (%s): the exec %s" % (by, engine, "followed" if want[1] else
                                             "ends the count"))
        entries = (rep.get("histogram") or {}).get("entries", [])
        hist = {e["key"]: e["count"] for e in entries}
        c.eq(sum(hist.values()), rep["instructions"],
             "--by %s (%s): the histogram sums to the count" % (by, engine))
        got[engine] = (rep["instructions"], hist)
    if len(got) == 2:
        c.eq(got["dbt"], got["ptrace"], "--by %s: the engines' counts and histograms" % by)

# An image that gains privileges: the dbt engine runs it natively (ptrace would drop them).
with tempfile.TemporaryDirectory(prefix="tp-exec-") as tmp:
    suid = os.path.join(tmp, "true-suid")
    shutil.copy("/bin/true", suid)
    os.chmod(suid, 0o755 | stat.S_ISUID)
    argv = [X, "exec", suid]
    nat = native(argv)
    r = count(argv, engine="dbt")
    rep = c.report(r, "setuid image (dbt)", "dbt")
    c.same_as_native(r, nat, "setuid image (dbt)")
    if rep:
        c.eq((rep.get("exec"), rep.get("exec_followed")), (True, False),
             "setuid image (dbt): run natively, not counted")
c.done()
