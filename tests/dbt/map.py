#!/usr/bin/env python3
"""dbt-map: the code cache's mapping and breakpoint repositories (src/dbt/map.h), read and
written by map-probe while map-target runs under `tracepad count --engine dbt`.

The mapping: every instruction it records in the target's text starts an instruction of
objdump's decoding, with its length; a block's instructions follow each other; copies of
position-independent instructions are the program's bytes; every cache byte maps back as its
range says; hidden ranges hold the runtime's templates, not program code.  Breakpoints: one
set on a function already translated and removed before it runs again leaves the output, the
exit status and the count exact; set on it and on one not translated yet, the target's
SIGTRAP handler sees each function's address + 1 (as after a native int3), and with them
removed the program ends as it does without them, its count that of a reference run where
the program executes two int3s of its own instead (the same handler runs), less those two;
without a handler, SIGTRAP kills it as a native int3 would.

A forked child (map-fork) has repositories of its own: both map back, and a breakpoint set
in the child's is in none of the parent's copies.  A breakpoint on code that is unmapped,
mapped again and retranslated 2000 times (map-jit) traps in every fresh translation.

argv: map-probe, map-target, map-fork, map-jit.  Environment: TRACEPAD."""
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import Tap  # noqa: E402

t = Tap("dbt-map")
PROBE, TARGET, FORK, JIT = sys.argv[1:5]
TRACEPAD = os.environ.get("TRACEPAD", "")
TIMEOUT = 60

# objdump mnemonics whose copy in the cache is not the program's bytes
MOVED = re.compile(r"^(bnd |notrack |rep[a-z]* |lock )*(j|call|ret|loop|syscall|int|ud2|hlt)")


def probe(*args):
    r = subprocess.run([PROBE] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=TIMEOUT)
    return r


class Run:
    """map-target under tracepad count --engine dbt, talked to line by line."""

    def __init__(self, prog=None):
        fd, self.json = tempfile.mkstemp(prefix="tp-dbtmap-", suffix=".json")
        os.close(fd)
        os.unlink(self.json)
        self.p = subprocess.Popen([TRACEPAD, "count", "--engine", "dbt", "--json", "-o",
                                   self.json, "--", prog or TARGET], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.buf = b""
        self.out = ""

    def line(self):
        end = time.monotonic() + TIMEOUT
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.p.stdout.fileno(), 4096)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        self.out += line.decode() + "\n"
        return line.decode()

    def send(self, s="\n"):
        try:
            self.p.stdin.write(s.encode())
            self.p.stdin.flush()
        except BrokenPipeError:
            pass  # the program is gone: the checks on its end say so

    def finish(self):
        """Output (the lines read so far and the rest), exit status, report."""
        try:
            rest, err = self.p.communicate(timeout=TIMEOUT)
        except BrokenPipeError:
            rest, err = self.p.stdout.read(), self.p.stderr.read()
            self.p.wait()
        except subprocess.TimeoutExpired:
            self.p.kill()
            rest, err = self.p.communicate()
        self.out += (self.buf + rest).decode()
        self.err = err.decode()
        try:
            with open(self.json) as f:
                self.report = json.load(f)
            os.unlink(self.json)
        except (OSError, ValueError):
            self.report = None
        return self.out, self.p.returncode, self.report


def start():
    r = Run()
    first = r.line()
    m = re.match(r"pid (\d+) work (0x[0-9a-f]+) later (0x[0-9a-f]+) first (\d+)$", first or "")
    if not t.ok(m, "map-target started under the dbt engine", first):
        r.finish()
        t.bail("no target: " + r.err[-500:])
    return r, int(m.group(1)), int(m.group(2), 16), int(m.group(3), 16)


def normal(out):
    """The output without the line that names the pid."""
    return [ln for ln in out.splitlines() if not ln.startswith("pid ")]


def objdump_insns(path):
    """{link address: (length, mnemonic and operands)} of every instruction of .text."""
    r = subprocess.run(["objdump", "-d", "-w", path], capture_output=True, text=True,
                       check=True)
    insns = {}
    for ln in r.stdout.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\t([0-9a-f ]+?)\s*\t(.*)$", ln)
        if m:
            insns[int(m.group(1), 16)] = (len(m.group(2).split()), m.group(3).strip())
    return insns


def exec_maps(pid):
    """[(start, end, file offset, path)] of the files mapped executable."""
    out = []
    with open("/proc/%d/maps" % pid) as f:
        for ln in f:
            parts = ln.split()
            if len(parts) >= 6 and "x" in parts[1] and parts[5].startswith("/"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi, int(parts[2], 16), parts[5]))
    return out


def nm(path, sym):
    r = subprocess.run(["nm", path], capture_output=True, text=True, check=True)
    for ln in r.stdout.splitlines():
        p = ln.split()
        if len(p) == 3 and p[2] == sym:
            return int(p[0], 16)
    return None


def parse_dump(text):
    ranges = []
    for ln in text.splitlines():
        p = ln.split()
        if not p or p[0] != "R":
            continue
        ranges.append({"block": int(p[1], 16), "cache": int(p[2], 16), "size": int(p[3]),
                       "kind": p[4], "pc": int(p[5], 16), "len": int(p[6]),
                       "stale": int(p[7]), "rest": p[8:]})
    return ranges


def check_mapping(pid, work):
    d = probe("dump", pid)
    if not t.ok(d.returncode == 0, "dump of the repositories", d.stdout[-500:] + d.stderr):
        return None
    ranges = parse_dump(d.stdout)
    t.ok(len(ranges) > 1000, "the repositories hold the translations (%d ranges)" % len(ranges))
    bias = work - nm(TARGET, "work")
    insns = objdump_insns(TARGET)
    maps = exec_maps(pid)
    real = os.path.realpath(TARGET)
    mine = [r for r in ranges if r["kind"] == "insn" and any(
        lo <= r["pc"] < hi and path == real for lo, hi, _, path in maps)]
    t.ok(len(mine) >= 20, "instructions of the target's text are recorded (%d)" % len(mine))
    # the loader's and libc's too (their text segments are mapped at their file offsets)
    other, bad = 0, []
    for lo, hi, off, path in maps:
        if path == real:
            continue
        theirs = [r for r in ranges if r["kind"] == "insn" and lo <= r["pc"] < hi]
        if not theirs:
            continue
        known = objdump_insns(path)
        for r in theirs:
            link = r["pc"] - lo + off
            other += 1
            if known.get(link, (None,))[0] != r["len"]:
                bad.append("%s %#x len %d: %r" % (path, link, r["len"], known.get(link)))
    t.ok(other >= 1000 and not bad, "so are the loader's and libc's (%d), each an instruction "
         "of objdump's decoding, with its length" % other, "\n".join(bad[:20]))
    bad = [r for r in mine if r["pc"] - bias not in insns]
    t.ok(not bad, "each is an instruction boundary of objdump's decoding",
         "\n".join("%#x" % r["pc"] for r in bad[:20]))
    bad = [r for r in mine if r["pc"] - bias in insns and insns[r["pc"] - bias][0] != r["len"]]
    t.ok(not bad, "each with objdump's length",
         "\n".join("%#x %d %r" % (r["pc"], r["len"], insns.get(r["pc"] - bias)) for r in bad[:20]))
    # a block's instructions follow each other in the program
    blocks, bad = {}, []
    for r in ranges:
        if r["kind"] == "insn":
            blocks.setdefault(r["block"], []).append(r)
    for b in blocks.values():
        for x, y in zip(b, b[1:]):
            if x["pc"] + x["len"] != y["pc"]:
                bad.append((x["pc"], x["len"], y["pc"]))
    t.ok(not bad, "a block's instructions are contiguous in the program (%d blocks)"
         % len(blocks), "\n".join("%#x+%d != %#x" % b for b in bad[:20]))
    # position-independent instructions are copied as they are
    same = diff = 0
    details = []
    for r in mine:
        text = insns.get(r["pc"] - bias, (0, ""))[1]
        if MOVED.match(text) or "rip" in text or len(r["rest"]) < 2:
            continue
        if r["rest"][0] == r["rest"][1]:
            same += 1
        else:
            diff += 1
            details.append("%#x %s: cache %s program %s" % (r["pc"], text, r["rest"][0],
                                                            r["rest"][1]))
    t.ok(same >= 10 and not diff, "copies are the program's bytes at each site (%d)" % same,
         "\n".join(details[:20]))
    # hidden code is the runtime's: gs-relative templates, nops, stubs' jumps, sysret's mov
    bad = []
    for r in ranges:
        if r["kind"] in ("hidden", "stub", "lookup") and r["size"]:
            mn, code = (r["rest"] + ["?", "?"])[:2]
            if not (code.startswith("65") or code.startswith("48b9") or mn in ("nop", "jmp")):
                bad.append("%#x %s %s %s" % (r["cache"], r["kind"], mn, code))
    t.ok(not bad, "hidden ranges hold the runtime's code, not the program's",
         "\n".join(bad[:20]))
    c = probe("check", pid)
    m = re.search(r"checked (\d+) bad (\d+)", c.stdout)
    t.ok(c.returncode == 0 and m and int(m.group(1)) > 10000 and m.group(2) == "0",
         "every cache byte maps back as its range says (%s)" % (m.group(1) if m else "?"),
         c.stdout[-1500:] + c.stderr)
    return ranges


def copies(pid, pc):
    r = probe("copies", pid, "%#x" % pc)
    out = []
    for ln in r.stdout.splitlines():
        p = ln.split()
        if p[0] == "copy":
            out.append((int(p[1], 16), int(p[3]), p[4]))
    return out


if not TRACEPAD:
    t.bail("TRACEPAD is not set")

def result(out):
    return [ln for ln in out.splitlines() if ln.startswith("result ")]


def seen(out):
    """si_code and pc of the two traps the handler saw."""
    m = re.search(r"^seen ([0-9a-f]{16}) ([0-9a-f]{16}) ([0-9a-f]{16}) ([0-9a-f]{16})$", out,
                  re.M)
    return [int(x, 16) for x in m.groups()] if m else None


def instructions(rep):
    return rep["instructions"] if rep else None


# the run without breakpoints
r = Run()
first = r.line()
r.send("g\n")
base_out, base_status, base = r.finish()
if not t.ok(base and base_status == 7 and result(base_out) and seen(base_out) == [0, 0, 0, 0],
            "map-target runs under the dbt engine", (base_out, base_status, r.err[-500:])):
    t.bail("map-target does not run under the dbt engine")
base_n = instructions(base)

# the mapping, and a breakpoint set and removed before it is reached again
r, pid, work, later = start()
ranges = check_mapping(pid, work)
orig = probe("text", pid, "%#x" % work, 4).stdout.split("\n")[0].split()[1:]
cps = copies(pid, work)
t.ok(cps and all(c[2] != "cc" for c in cps), "work() has cache copies, none with an int3", cps)
ins = probe("insert", pid, "%#x" % work)
t.ok(ins.returncode == 0, "a breakpoint on work()", ins.stdout + ins.stderr)
cps2 = copies(pid, work)
t.ok(cps2 and all(c[2] == "cc" for c in cps2 if not c[1]), "an int3 in each copy of work()",
     cps2)
txt = probe("text", pid, "%#x" % work, 4).stdout.split("\n")
t.eq(txt[0].split()[1:], orig, "the program's text reads as its own bytes")
t.eq(txt[1].split()[1:], ["cc"] + orig[1:], "... or with the int3 as a debugger wrote it")
again = probe("insert", pid, "%#x" % work)
t.ok(again.returncode != 0 and "-17" in again.stdout, "a second one there is refused",
     again.stdout)
rm = probe("remove", pid, "%#x" % work)
t.ok(rm.returncode == 0, "the breakpoint removed", rm.stdout + rm.stderr)
t.eq(copies(pid, work), cps, "every copy of work() has its code back")
r.send("g\n")
out, status, rep = r.finish()
t.eq(normal(out), normal(base_out), "the output is the program's")
t.eq(status, 7, "its exit status")
t.eq(instructions(rep), base_n, "the count is exact")

# the reference: two int3s of the program's own, its handler going on after each
r, pid, work, later = start()
r.send("r\n")
for i in range(2):
    ln = r.line()
    t.eq(ln, "trap", "the program's own int3 %d reaches its handler" % (i + 1))
    r.send("\n")
out, status, ref = r.finish()
t.eq(result(out), result(base_out), "the reference run's result is the program's")
ref_seen = seen(out)
t.ok(ref_seen and ref_seen[0] == ref_seen[2] == 128, "its handler saw SIGTRAP from int3s",
     ref_seen)

# breakpoints hit: on work() (translated) and later() (not translated yet)
r, pid, work, later = start()
t.ok(not copies(pid, later), "later() is not translated yet")
for fn in (work, later):
    ins = probe("insert", pid, "%#x" % fn)
    t.ok(ins.returncode == 0, "a breakpoint at %#x" % fn, ins.stdout + ins.stderr)
r.send("g\n")
for name, fn in (("later", later), ("work", work)):
    ln = r.line()
    t.eq(ln, "trap", "SIGTRAP at the breakpoint in %s()" % name)
    if name == "later":
        cps = copies(pid, later)
        t.ok(cps and all(c[2] == "cc" for c in cps),
             "later(), translated after the breakpoint was set, has the int3", cps)
    rm = probe("remove", pid, "%#x" % fn)
    t.ok(rm.returncode == 0, "its breakpoint removed", rm.stdout + rm.stderr)
    r.send("\n")
out, status, rep = r.finish()
hit = seen(out)
t.eq(hit, [128, later + 1, 128, work + 1],
     "the handler read each function's address + 1, as after a native int3")
t.eq(result(out), result(base_out), "then the program ends as without them")
t.eq(status, 7, "its exit status")
t.eq(instructions(rep), instructions(ref) - 2 if ref else None,
     "the count is the program's: the reference's but its two int3s")

# no handler: the breakpoint kills the program with SIGTRAP, as a native int3 would
r, pid, work, later = start()
ins = probe("insert", pid, "%#x" % later)
t.ok(ins.returncode == 0, "a breakpoint on later() in a program without a handler",
     ins.stdout + ins.stderr)
r.send("k\n")
out, status, rep = r.finish()
t.ok(rep and rep["exit"] == {"signal": 5} and not result(out),
     "SIGTRAP's default action ends it there", (out, rep and rep["exit"], r.err[-300:]))


def memfd_ino(pid):
    d = "/proc/%d/fd" % pid
    for n in os.listdir(d):
        try:
            if os.readlink(os.path.join(d, n)).startswith("/memfd:tracepad-dbt-map"):
                return os.stat(os.path.join(d, n)).st_ino
        except OSError:
            pass
    return None


# a forked child's repositories are its own
r = Run(FORK)
procs = {}
for _ in range(2):
    m = re.match(r"(parent|child) (\d+) work (0x[0-9a-f]+) \d+$", r.line() or "")
    if m:
        procs[m.group(1)] = (int(m.group(2)), int(m.group(3), 16))
if t.ok(len(procs) == 2, "map-fork's parent and child run", procs):
    (ppid, work), (cpid, _) = procs["parent"], procs["child"]
    for who, pid in (("parent", ppid), ("child", cpid)):
        c = probe("check", pid)
        m = re.search(r"checked (\d+) bad (\d+)", c.stdout)
        t.ok(c.returncode == 0 and m and int(m.group(1)) > 10000 and m.group(2) == "0",
             "the %s's repositories map back" % who, c.stdout[-1000:] + c.stderr)
    pi, ci = memfd_ino(ppid), memfd_ino(cpid)
    t.ok(pi and ci and pi != ci, "each in a memfd of its own", (pi, ci))
    ins = probe("insert", cpid, "%#x" % work)
    t.ok(ins.returncode == 0, "a breakpoint on work() in the child", ins.stdout + ins.stderr)
    cc, pc = copies(cpid, work), copies(ppid, work)
    t.ok(cc and all(c[2] == "cc" for c in cc if not c[1]), "an int3 in the child's copies", cc)
    t.ok(pc and all(c[2] != "cc" for c in pc), "none in the parent's", pc)
    rm = probe("remove", cpid, "%#x" % work)
    t.ok(rm.returncode == 0, "removed", rm.stdout + rm.stderr)
    r.send("\n")
    r.send("\n")
out, status, rep = r.finish()
t.ok("child done" in out and "parent done, child status 3" in out and status == 0 and rep,
     "both end as they would", (out, status, r.err[-300:]))

# a breakpoint in every fresh translation of code mapped again and again
r = Run(JIT)
m = re.match(r"pid (\d+) code (0x[0-9a-f]+)$", r.line() or "")
if t.ok(m, "map-jit runs"):
    ins = probe("insert", m.group(1), m.group(2))
    t.ok(ins.returncode == 0, "a breakpoint on its code, not run yet",
         ins.stdout + ins.stderr)
    r.send()
out, status, rep = r.finish()
t.ok(re.search(r"^sum right traps 2000 wrong pc 0 rounds 2000$", out, re.M) and status == 0,
     "each of its 2000 translations trapped once, at the code's address + 1", out)

# the repositories kept private (bench/dbt's TRACEPAD_DBT_PUBLISH=0): no tracer finds them,
# the run is that of one that publishes them (with the variable too: the program sees it)
runs = {}
for pub in ["1", "0"]:
    os.environ["TRACEPAD_DBT_PUBLISH"] = pub
    r, pid, work, later = start()
    del os.environ["TRACEPAD_DBT_PUBLISH"]
    c = probe("check", pid)
    t.eq(c.returncode == 0, pub == "1",
         "TRACEPAD_DBT_PUBLISH=%s: repositories a tracer opens, or none" % pub,
         c.stdout + c.stderr)
    r.send("g\n")
    out, status, rep = r.finish()
    runs[pub] = (normal(out), status, instructions(rep))
t.ok(runs["0"] == runs["1"] and runs["0"][1] == 7 and runs["0"][2],
     "TRACEPAD_DBT_PUBLISH=0: the output, status and count of a run that publishes them",
     runs)
t.done()
