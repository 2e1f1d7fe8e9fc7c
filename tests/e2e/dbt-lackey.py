#!/usr/bin/env python3
"""e2e: on programs too long to single-step, the dbt engine's difference between two input
sizes equals valgrind lackey's (issue 10, "Exact"), once the three known differences between
the two runs are taken away (docs/INTERNALS.md, "The code cache", "Against valgrind"):

- valgrind shows glibc a CPU model of its own (an Intel Haswell: AVX2, no AVX-512, no
  RTM, other cache sizes), so glibc picks other string-function variants and other
  rep-movsb/stosb thresholds.  Both runs get the same GLIBC_TUNABLES: every feature that
  picks a variant above SSE2 masked (AVX-512, AVX2, fast unaligned AVX loads: on a host
  with RTM glibc takes the *_rtm variants, two instructions more a call than valgrind's,
  and without RTM but with AVX-512 it prefers SSE2 to AVX; an AMD host lacks valgrind's
  Fast_Unaligned_Copy, set for both, and took memcpy's SSSE3 variant), and the memcpy/memset
  thresholds that decide between vector loops, rep strings and non-temporal stores, and
  the cache sizes, set to the same values.
- VEX counts a rep-prefixed string instruction of count N >= 1 as N + 1 (the final check of
  rcx == 0 is one more execution at the same pc); tracepad, like the trap flag, counts N.
  The thresholds above keep glibc's copies out of rep strings; a hand-written program pins
  the rule itself.
- VEX's superblock chasing (--vex-guest-chase=yes, valgrind's default since 3.17) makes
  lackey and cachegrind count more than executed on gzip (callgrind turns chasing off);
  lackey runs with --vex-guest-chase=no, with which it agrees with the ptrace engine.

lackey's own count of one run varies under load (by tens to hundreds of instructions,
never below the quiet count, a different amount each time): each lackey figure is the
smallest of three runs."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tpe2e  # noqa: E402
from tpe2e import Checks  # noqa: E402

c = Checks("dbt-lackey")
VALGRIND = shutil.which("valgrind")
# The same glibc choices under both: see the docstring.
TUNABLES = ":".join([
    "glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-AVX2,"
    "-AVX_Fast_Unaligned_Load,Fast_Unaligned_Copy",
    "glibc.cpu.x86_rep_movsb_threshold=0xffffffffffffffff",
    "glibc.cpu.x86_rep_stosb_threshold=0xffffffffffffffff",
    "glibc.cpu.x86_non_temporal_threshold=0x200000",
    "glibc.cpu.x86_data_cache_size=0x8000",
    "glibc.cpu.x86_shared_cache_size=0x100000",
])
ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "GLIBC_TUNABLES": TUNABLES}
LACKEY = ["--tool=lackey", "--vex-guest-chase=no"]


def run(argv, cwd):
    return tpe2e.runlib.run(argv, 300, cwd=cwd, env=ENV, cls=tpe2e.Run)


def dbt_count(argv, what, cwd):
    """The dbt engine's whole-program count of argv, run in cwd with ENV."""
    out = os.path.join(cwd, "report.json")
    r = run(tpe2e.count_argv(argv, engine="dbt", json_out=out), cwd)
    try:
        with open(out) as f:
            r.report = json.load(f)
        os.unlink(out)
    except (OSError, ValueError) as e:
        r.report_error = str(e)
    rep = c.report(r, what + " (dbt)", "dbt")
    if rep and c.eq(rep["exit"], {"status": 0}, what + ": dbt run exits 0", r):
        return rep["instructions"]
    return None


def lackey_once(argv, cwd):
    log = os.path.join(cwd, "lackey.txt")
    r = run([VALGRIND] + LACKEY + ["--log-file=" + log] + argv, cwd)
    got = None
    if os.path.exists(log):
        for line in open(log, errors="replace"):
            if "guest instrs:" in line:
                got = int(line.split(":")[-1].replace(",", ""))
        os.unlink(log)
    return r, got


def lackey_count(argv, what, cwd):
    """lackey's "guest instrs" for argv, run in cwd with ENV (valgrind adds its own): the
    smallest count of three runs.  On a loaded machine lackey sometimes counts more for the
    same run, by a different amount each time, but never less than the quiet count (sha256sum
    of 8 KiB: 607,404 in most of 12 runs at once, 607,420, 607,425 and 607,431 in others; a
    CI run saw two runs agree on 9 more than the quiet figure), which the dbt engine never
    does (587,700 in each of the same 12)."""
    seen = []
    for _ in range(3):
        r, got = lackey_once(argv, cwd)
        if r.rc != 0 or got is None:
            break
        seen.append(got)
    if c.ok(len(seen) == 3, what + ": lackey runs and counts three times", r):
        return min(seen)
    return None


def sizes(argv, small, big, what):
    """dbt's and lackey's differences between the runs on files of the bytes small and big
    (under the same name, so that what the program prints has the same length)."""
    got = {}
    for tool, fn in (("dbt", dbt_count), ("lackey", lackey_count)):
        n = []
        for data in (small, big):
            with tempfile.TemporaryDirectory(prefix="tp-lackey-") as tmp:
                with open(os.path.join(tmp, "input"), "wb") as f:
                    f.write(data)
                n.append(fn(argv + ["input"], "%s of %d bytes" % (what, len(data)), tmp))
        got[tool] = n[1] - n[0] if None not in n else None
    if got["dbt"] is not None and got["lackey"] is not None:
        c.eq(got["dbt"], got["lackey"], what + ": dbt's difference between %d and %d bytes "
             "equals lackey's" % (len(small), len(big)))


def text(n):
    """n bytes of words, the same on every run (a fixed linear congruential generator)."""
    words, x = [], 12345
    for _ in range(3000):
        w = ""
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        for k in range(2 + (x >> 33) % 8):
            w += chr(97 + (x >> (13 + 3 * k)) % 26)
        words.append(w)
    out, size = [], 0
    while size < n:
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(words[(x >> 33) % len(words)])
        size += len(out[-1]) + 1
    return " ".join(out).encode()[:n]


if not c.ok(VALGRIND is not None, "valgrind is installed (needed for the comparison)",
            "install Debian's valgrind package (scripts/deps.sh)"):
    c.done()

# The rep rule on a program whose count is known: lea, lea, mov, rep movsb (count n), mov,
# xor, syscall.  tracepad: 6 + max(n, 1); lackey one more when n >= 1.
REP = (".globl _start\n_start:\n lea buf(%%rip), %%rsi\n lea buf+64(%%rip), %%rdi\n"
       " mov $%d, %%ecx\n rep movsb\n mov $60, %%eax\n xor %%edi, %%edi\n syscall\n"
       ".bss\nbuf: .space 128\n")
with tempfile.TemporaryDirectory(prefix="tp-lackey-") as tmp:
    for n in (0, 1, 5):
        src, exe = os.path.join(tmp, "rep%d.S" % n), os.path.join(tmp, "rep%d" % n)
        with open(src, "w") as f:
            f.write(REP % n)
        if not c.ok(subprocess.run(["cc", "-nostdlib", "-static", "-o", exe, src]).returncode
                    == 0, "cc builds rep%d" % n):
            continue
        what = "rep movsb of %d bytes" % n
        d, lk = dbt_count([exe], what, tmp), lackey_count([exe], what, tmp)
        if d is not None:
            c.eq(d, 6 + max(n, 1), what + ": dbt counts %d" % (6 + max(n, 1)))
        if d is not None and lk is not None:
            c.eq(lk - d, 1 if n else 0, what + ": lackey counts the final rcx == 0 check too")

words = text(1 << 20)
sizes(["/usr/bin/sha256sum"], words[:8192], words[:16384], "sha256sum")
sizes(["/usr/bin/gzip", "-9", "-c"], words[:512 << 10], words, "gzip -9")
c.done()
