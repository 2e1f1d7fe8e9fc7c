#!/usr/bin/env python3
"""Bad input to tracepad trace is one clear line and exit status 2, with the program
unharmed: expression errors with their column, unknown locations, an address inside an
instruction, bad options; a script's errors name its line."""
import os
import re
import subprocess
import tempfile

from tptrace import TRACEPAD, attached, check, done, target, trace

prog = target("tracept-loop-O0")


def bad(args, pattern, what):
    r = trace(args + ["--", prog, "10"])
    lines = [l for l in r.err.splitlines() if l.strip()]
    check(r.rc == 2 and len(lines) == 1 and re.search(pattern, lines[0]) is not None
          and "sum " not in r.out, what, r)


bad(["-t", "f if i +"], r"^tracepad trace: error: -t 'f if i \+': expected an operand at "
    r"column 9$", "a missing operand: its column")
bad(["-t", "f if x + 1"], r"-t 'f if x \+ 1': no variable 'x' here at column 6$",
    "an unknown variable: its column")
bad(["-t", "f if (i + 1"], r"expected '\)' at column 12$", "an unclosed parenthesis")
bad(["-t", "f if i == 1 )"], r"unexpected '\)' at column 13$", "trailing text")
bad(["-t", "f if p->nosuch"], r"no member 'nosuch' .*at column 9$", "an unknown member")
bad(["-t", "f if i->x"], r"'->' on something not a pointer at column 7$", "-> of an int")
bad(["-t", "f if $xyz"], r"unknown register '\$xyz' at column 6$", "an unknown register")
bad(["-t", "f", "-a", "collect i, "], r"-a 'collect i, ': expected an expression to collect "
    r"at column 12$", "an empty item in a collect list")
bad(["-t", "f", "-a", "collect *p@0"], r"expected a length after '@' at column 12$",
    "@ without a length")
bad(["-t", "nosuchfunction"], r"no function 'nosuchfunction'", "an unknown function")
bad(["-t", "loop.c:100000"], r"no code at loop.c:100000", "a line with no code")
bad(["-t", "nosuchfile.c:3"], r"no code at nosuchfile.c:3", "an unknown file")
bad(["-t", "*0x10"], r"0x10 is not in the program's code", "an address outside the code")
bad(["-a", "collect i"], r"-a comes after the -t it belongs to", "-a before -t")
bad(["-t", "f", "--pass-count", "0"], r"bad --pass-count '0'", "a pass count of 0")

# An address inside an instruction (the second byte of f's first instruction longer than one
# byte, from objdump), in a running copy of the program whose load address its maps give.
dis = subprocess.run(["objdump", "-d", "--disassemble=f", prog], capture_output=True,
                     text=True).stdout
insns = re.findall(r"^\s+([0-9a-f]+):\t((?:[0-9a-f]{2} )+)", dis, re.M)
m = next((a for a, b in insns if len(b.split()) > 1), None)
check(m is not None, "objdump shows f's instructions", dis[-500:])
p = subprocess.Popen([prog, "spin"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
p.stdout.readline()
base = None
with open("/proc/%d/maps" % p.pid) as f:
    for line in f:
        parts = line.split()
        if len(parts) > 5 and parts[5] == os.path.realpath(prog) and int(parts[2], 16) == 0:
            base = int(parts[0].split("-")[0], 16)
            break
if m and base is not None:
    fa = base + int(insns[0][0], 16)
    r = trace(["-p", str(p.pid), "--duration", "0.3", "-t", "*0x%x" % (base + int(m, 16) + 1)])
    lines = [l for l in r.err.splitlines() if l.strip()]
    check(r.rc == 2 and len(lines) == 1 and "is inside an instruction of f" in lines[0],
          "*ADDR inside an instruction: refused", r)
    r = attached(p.pid, 3, ["-t", "*0x%x" % fa, "-a", "collect $arg1"])
    c = r.counts.get(1)
    check(r.rc == 0 and c and c.hits > 0 and r.exact(1) and
          all(0 <= f.int("$arg1") < 100 for f in r.frames), "*ADDR at f's entry: hits", r)
check(p.poll() is None, "the program runs on after the refused and the real tracepoint")
p.kill()
p.wait()

# Scripts: a bad line is named by FILE:LINE.
with tempfile.NamedTemporaryFile("w", suffix=".gdb", delete=False) as s:
    s.write("trace f\nactions\n  collect i +\nend\n")
r = trace(["-x", s.name, "--", prog, "10"])
check(r.rc == 2 and "%s:3: expected an operand at column 14" % s.name in r.err, "script: "
      "an expression error names its line and column", r)
with open(s.name, "w") as w:
    w.write("trace f\nbogus 3\n")
r = trace(["-x", s.name, "--", prog, "10"])
check(r.rc == 2 and "%s:2: unknown command 'bogus'" % s.name in r.err, "script: an unknown "
      "command", r)
with open(s.name, "w") as w:
    w.write("ftrace f\nactions\n  collect i\nend\n")
r = trace(["-x", s.name, "--", target("tracept-loop-static"), "10"])
check(r.rc == 2 and "use --normal" in r.err and "sum " not in r.out,
      "script: ftrace in a static program (no loader for the agent): a clear error, the "
      "program never ran", r)
r = trace(["-x", s.name, "--", prog, "10"])
check(r.rc == 0 and [f.int("i") for f in r.frames] == list(range(10)),
      "script: ftrace is a fast tracepoint that collects", r)
os.unlink(s.name)

r = trace(["-t", "f", "--", "/nonexistent/prog"])
check(r.rc == 2 and "cannot run /nonexistent/prog" in r.err, "a missing program", r)
r = trace(["--", prog, "1"])
check(r.rc == 2 and "no tracepoint" in r.err, "no -t", r)
done()
