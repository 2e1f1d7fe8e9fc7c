#!/usr/bin/env python3
"""memory plugin, test 3: a real program with deterministic input, gzip -9 on a fixed file,
then gzip -l and gzip -d on the result: the output is unchanged and the leak totals, blocks in
use at exit and heap usage equal valgrind memcheck's on the same runs."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memlib import check, done, memcheck, native, same_as_memcheck, tracepad  # noqa: E402

gzip = shutil.which("gzip")
if not gzip:
    print("Bail out! gzip is not installed")
    sys.exit(1)


def fixed_text(n):
    """n bytes of words from a fixed linear congruential sequence: compressible, not trivial."""
    words = [b"tracepad", b"memcheck", b"leak", b"block", b"heap", b"gzip", b"deflate",
             b"reachable", b"lost", b"pointer", b"\n", b"stack", b"root", b"clique"]
    x, out = 12345, []
    size = 0
    while size < n:
        x = (x * 1103515245 + 12345) & 0x7fffffff
        w = words[(x >> 16) % len(words)]
        out.append(w + (b"" if w == b"\n" else b" "))
        size += len(out[-1])
    return b"".join(out)[:n]


with tempfile.TemporaryDirectory(prefix="tp-mem-gzip-") as d:
    data = fixed_text(300000)
    for who in ("native", "tracepad", "memcheck"):
        os.mkdir(os.path.join(d, who))
        with open(os.path.join(d, who, "input.txt"), "wb") as f:
            f.write(data)
        # one mtime for the three copies: gzip writes it into its output's header
        os.utime(os.path.join(d, who, "input.txt"), (1700000000, 1700000000))

    def runs(argv, what, compare_file=None):
        res = {}
        res["native"] = native(argv, cwd=os.path.join(d, "native"))
        res["tracepad"] = tracepad(argv, cwd=os.path.join(d, "tracepad"))
        res["memcheck"] = memcheck(argv, cwd=os.path.join(d, "memcheck"))
        n, t = res["native"], res["tracepad"]
        same = n.rc == 0 and t.rc == n.rc and t.out == n.out
        if compare_file:
            files = [open(os.path.join(d, who, compare_file), "rb").read()
                     for who in ("native", "tracepad")]
            same = same and files[0] == files[1] and len(files[0]) > 0
        check(same, what + ": exit status and output unchanged under tracepad", t)
        check(t.report.in_use is not None and t.report.usage is not None,
              what + ": the plugin reported", t)
        same_as_memcheck(t, res["memcheck"], what)
        return t

    runs([gzip, "-9", "-c", "input.txt"], "gzip -9 -c")
    runs([gzip, "-9", "-k", "-f", "-v", "input.txt"], "gzip -9 -k -f -v", "input.txt.gz")
    runs([gzip, "-l", "input.txt.gz"], "gzip -l")
    t = tracepad([gzip, "-l", "input.txt.gz"], cwd=os.path.join(d, "tracepad"),
                 plugin="memory:freeres=no")
    check(t.report.kinds.get("still reachable", (0, 0))[1] >= 1,
          "gzip -l, freeres=no: stdout's buffer is still reachable", t.report)
    same_as_memcheck(t, memcheck([gzip, "-l", "input.txt.gz"], cwd=os.path.join(d, "memcheck"),
                                 freeres=False), "gzip -l, freeres=no")
    runs([gzip, "-d", "-c", "input.txt.gz"], "gzip -d -c")
done()
