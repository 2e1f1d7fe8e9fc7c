#!/usr/bin/env python3
"""Real programs: tracepoints on the libc functions that gzip -9 calls, collecting their
arguments: gzip's output is unchanged, the hits equal the calls `tracepad calls -c`
reports, and the write sizes collected add up to the compressed size; libz's deflate while
python3 compresses: one hit a call, as calls -c counts them, the flush mode collected."""
import os
import re
import shutil
import subprocess
import tempfile

from tptrace import TRACEPAD, check, done, eq, trace
import run as runlib

gzip = shutil.which("gzip")
if not gzip:
    print("1..0 # SKIP gzip is not installed")
    raise SystemExit(0)
tmp = tempfile.mkdtemp(prefix="tracept-real-")
data = os.path.join(tmp, "data")
with open(data, "wb") as f:
    # Text that compresses a little: several of gzip's 32 KiB output buffers.
    for i in range(60000):
        f.write(b"line %d of the data, %x\n" % (i, (i * 2654435761) % 2**32))
native = subprocess.run([gzip, "-9", "-n", "-c", data], capture_output=True).stdout

r = trace(["-o", os.path.join(tmp, "out.txt"), "-t", "libc:write", "-a", "collect $arg1, $arg3",
           "-t", "libc:read", "-a", "collect $arg1, $arg3", "--", gzip, "-9", "-n", "-c", data],
          text=False)
report = open(os.path.join(tmp, "out.txt")).read()
from tptrace import TraceRun  # noqa: E402
t = TraceRun(r.argv, r.rc, "", report)
check(r.rc == 0 and r.out == native, "gzip -9 under tracepad trace: the same output",
      "rc=%r, %d bytes vs %d" % (r.rc, len(r.out or b""), len(native)))
cw, cr = t.counts.get(1), t.counts.get(2)
check(cw and cr and cw.hits > 0 and cr.hits > 0 and t.exact(1) and t.exact(2),
      "write and read: hits, exact", report[-1500:])
writes = [f for f in t.frames if f.tp == 1 and f.int("$arg1") == 1]
eq(sum(f.int("$arg3") for f in writes), len(native),
   "the sizes of gzip's writes to stdout add up to its output")

c = runlib.run([TRACEPAD, "calls", "-c", "-e", "libc.so.6:write,libc.so.6:read", "--", gzip,
                "-9", "-n", "-c", data], text=False)
calls = {m.group(2): int(m.group(1)) for m in
         re.finditer(r"^\s*(\d+)\s+\d+\s+.*libc\.so\.6:(write|read)$",
                     c.err.decode(errors="replace"), re.M)}
eq((cw.hits if cw else None, cr.hits if cr else None),
   (calls.get("write"), calls.get("read")), "hits equal what tracepad calls -c counts")

# libz's deflate under python3 (a python linked with libz: Debian's).
py = "/usr/bin/python3"
code = ("import zlib; d = zlib.compressobj(9); "
        "out = b''.join(d.compress(bytes([i % 251]) * 1000) for i in range(50)); "
        "out += d.flush(); print(len(out), zlib.decompress(out) == b''.join("
        "bytes([i % 251]) * 1000 for i in range(50)))")
links = subprocess.run(["ldd", py], capture_output=True, text=True).stdout if os.path.exists(
    py) else ""
if "libz.so" in links:
    native = runlib.run([py, "-c", code])
    r = trace(["-t", "libz:deflate", "-a", "collect $arg2", "--", py, "-c", code])
    c = r.counts.get(1)
    check(r.rc == 0 and r.out == native.out and native.out.endswith("True\n"),
          "python3 compresses the same under a tracepoint on deflate", r)
    # Z_NO_FLUSH (0) for each compress(), Z_FINISH (4) for the flush.
    eq([f.int("$arg2") for f in r.frames], [0] * 50 + [4], "deflate's flush argument by call")
    k = runlib.run([TRACEPAD, "calls", "-c", "-e", "libz:deflate", "--", py, "-c", code])
    m = re.search(r"^\s*(\d+)\s+\d+\s+.*:deflate$", k.err, re.M)
    eq(c.hits if c else None, int(m.group(1)) if m else None,
       "deflate: hits equal what tracepad calls -c counts")
else:
    print("# %s does not link libz: the deflate checks are left out" % py)
shutil.rmtree(tmp)
done()
