#!/usr/bin/env python3
"""Fast tracepoints (the agent's jump pads): 1-, 2-, 3- and 4-byte instructions and one
followed by a branch target, alone and side by side, count every hit and collect the
program's values; a leaf function that keeps live values in its red zone computes the same
with a fast tracepoint in its middle (and the values collected there are its own); the
values the agent copies without its evaluator are an int3 tracepoint's; four
threads give exact totals; a thread whose ring is full sleeps until tracepad drains it; 20 cycles of attach, 3 fast tracepoints, detach on a running
4-thread program leave its code byte-identical and add nothing after the first."""
import os
import signal
import subprocess
import time

from tptrace import TRACEPAD, TraceRun, attached, check, done, eq, runlib, target, trace

prog = target("tracept-short")
A = subprocess.run([prog, "addrs"], capture_output=True, text=True).stdout.split()
N = 1000
per_call = sum(i % 16 for i in range(N))  # iterations of shorts' loop
names = ["1-byte push", "2-byte mov", "3-byte add", "4-byte add", "3-byte inc before a target"]
plain = subprocess.run([prog, str(N)], capture_output=True, text=True)
plain.out = plain.stdout

# Each alone (a jmp over several instructions where it may, else an int3), then all five.
for k, a in enumerate(A[:5]):
    r = trace(["-t", "*" + a, "-a", "collect $rcx, $rax", "--", prog, str(N)])
    c = r.counts.get(1)
    check(r.rc == 0 and r.out == plain.out and c and c.hits == per_call and
          c.collected == per_call and r.exact(1), "%s alone: %d hits, output unchanged" %
          (names[k], per_call), r.err[-1500:])
    rcx = [f.int("$rcx") for f in r.frames]
    want = [i for n in range(N) for i in range(n % 16)]
    if k == 4:
        want = [i for n in range(N) for i in range(n % 16)]  # before the inc
    eq(rcx, want, "%s: $rcx of each hit is the loop's i" % names[k])
r = trace(["-q"] + [x for a in A[:5] for x in ("-t", "*" + a, "-a", "collect $rax")] +
          ["--", prog, str(N)])
check(r.rc == 0 and r.out == plain.out and
      all(r.counts.get(k) and r.counts[k].hits == per_call and r.exact(k) for k in range(1, 6)),
      "all five side by side: %d hits each, output unchanged" % per_call, r.err[-1500:])

# The red zone: 16 live values below %rsp at the traced instruction.
r = trace(["-t", "*" + A[5], "-a", "collect *(long*)($rsp-128)@8, *(long*)($rsp-64)@8, $rdi", "--", prog, str(N)])
c = r.counts.get(1)
check(r.rc == 0 and r.out == plain.out and "bad 0" in r.out and c and c.hits == 2 * N and
      r.exact(1), "red zone: the leaf computes the same, %d hits" % (2 * N), r.err[-1500:])
ok = True
for f in r.frames:
    b = bytes.fromhex(f.vals["*(long*)($rsp-128)@8"].strip("<>") +
                      f.vals["*(long*)($rsp-64)@8"].strip("<>"))
    x = f.int("$rdi")
    vals = [int.from_bytes(b[i:i + 8], "little") for i in range(0, 128, 8)]
    ok &= vals == [x + 15 - k for k in range(16)]
check(ok and r.frames, "red zone: the values collected there are the leaf's own", r.frames[:1])

# Beside an int3 tracepoint (--while-stepping stays one): the fast one's int3 site (before a
# branch target) is the agent's, each hit one frame.
r = trace(["-t", "*" + A[4], "-a", "collect $rcx", "-t", "*" + A[5], "--while-stepping", "1",
           "-a", "collect $rdi", "--", prog, "100"])
c1, c2 = r.counts.get(1), r.counts.get(2)
n100 = sum(i % 16 for i in range(100))
check(r.rc == 0 and "a normal tracepoint (int3) instead of a fast one" in r.err and
      c1 and c1.hits == n100 and len([f for f in r.frames if f.tp == 1]) == n100 and
      c2 and c2.hits == 200 and len([f for f in r.frames if f.tp == 2]) == 400 and
      r.exact(1) and r.exact(2), "fast beside normal: %d and 200 hits, a frame each" % n100,
      r.err[-1500:])

# An address that is not mapped: the guarded read says unavailable, the program runs on.
r = trace(["-t", "*" + A[5], "-a", "collect *(long*)16, *(long*)$rdi@2, $rdi", "--", prog, "5"])
check(r.rc == 0 and r.out == subprocess.run([prog, "5"], capture_output=True,
                                            text=True).stdout and len(r.frames) == 10 and
      all(f.vals["*(long*)16"] == "<unavailable>" for f in r.frames) and
      all(f.vals["*(long*)$rdi@2"] == "<unavailable>" for f in r.frames if f.int("$rdi") < 4096),
      "reads of unmapped memory: unavailable, the program unharmed", r.err[-1500:])

# The items the agent copies without its evaluator ($regs, globals, locals on the stack, a
# register plus constants, unreadable fixed addresses) and ones it evaluates, behind a
# condition: the values of an int3 tracepoint, and the same through either path.
loop = target("tracept-loop-O0")
items = ["$regs", "i", "g_counter", "pts[1].x", "*(int*)p", "$arg1", "$sp", "$pc",
         "(long)$rsp+8", "*(long*)($rsp+8)", "*(long*)(($rsp+16)/2*2-8)", "*(long*)16"]
args = ["-t", "f if i % 3 == 0", "-a", "collect " + ", ".join(items), "--", loop, "30"]
r = trace(args)
n = runlib.run([TRACEPAD, "trace", "--normal"] + args, cls=TraceRun)
same = ["i", "g_counter", "pts[1].x", "*(int*)p", "$arg1", "$rdi", "$rax", "$eflags",
        "*(long*)16"]
check(r.rc == 0 and n.rc == 0 and len(r.frames) == 10 and
      [[f.vals[k] for k in same] for f in r.frames] ==
      [[f.vals[k] for k in same] for f in n.frames], "fast frames hold the int3 frames' values",
      (r.frames[:1], n.frames[:1]))
check(all(f.int("i") == 3 * k and f.int("$sp") == f.int("$rsp") and
          f.int("$pc") == f.int("$rip") and f.int("(long)$rsp+8") == f.int("$rsp") + 8 and
          f.vals["*(long*)($rsp+8)"] == f.vals["*(long*)(($rsp+16)/2*2-8)"] and
          f.vals["*(long*)16"] == "<unavailable>" for k, f in enumerate(r.frames)),
      "copied and evaluated items agree", r.frames[:2])

# The segment bases, which a pad does not save: the agent reads them when an item asks, and
# they are what ptrace gives the int3 path (both runs without ASLR: the same addresses).
seg = ["-t", "f if i % 3 == 0", "-a", "collect $fs_base, $gs_base, i", "--", loop, "30"]
norand = ["setarch", "x86_64", "-R", TRACEPAD, "trace"]
r = runlib.run(norand + ["--fast"] + seg, cls=TraceRun)
n = runlib.run(norand + ["--normal"] + seg, cls=TraceRun)
check(r.rc == 0 and n.rc == 0 and len(r.frames) == 10 and
      all(f.int("$fs_base") != 0 for f in r.frames) and
      [(f.vals["$fs_base"], f.vals["$gs_base"]) for f in r.frames] ==
      [(f.vals["$fs_base"], f.vals["$gs_base"]) for f in n.frames],
      "$fs_base and $gs_base: the int3 frames' values", (r.frames[:1], n.frames[:1]))

# The program's own faults, with the agent's fault guard installed: its handler gets them,
# or, without one, it dies of SIGSEGV as it would have.
plain = subprocess.run([prog, "segv", "50"], capture_output=True, text=True).stdout
r = trace(["-t", "*" + A[5], "-a", "collect $rdi", "--", prog, "segv", "50"])
check(r.rc == 0 and r.out == plain and "caught 50" in plain and len(r.frames) == 50,
      "a program that catches its own SIGSEGV: caught 50 times, 50 frames", r)
r = trace(["-t", "*" + A[5], "-a", "collect $rdi", "--", prog, "crash", "5"])
check(r.rc == 128 + signal.SIGSEGV and r.exact(1) and r.counts[1].hits == 1,
      "a program that faults without a handler dies of SIGSEGV, as without tracepad", r)

# 100 threads one after the other, more than there are rings: every frame arrives.
r = trace(["-t", "*" + A[5], "-a", "collect $rdi", "--", prog, "many", "100"])
c = r.counts.get(1)
check(r.rc == 0 and c and c.hits == 2000 and c.collected == 2000 and len(r.frames) == 2000 and
      "could not be written" not in r.err and len(set(f.tid for f in r.frames)) == 100,
      "100 threads in turn: 2000 hits, 2000 frames from 100 threads", r.err[-1000:])

# Four threads: exact totals.
r = trace(["-q", "-t", "*" + A[0], "-t", "*" + A[5], "-a", "collect $rdi", "--", prog,
           str(N), "4"])
c1, c2 = r.counts.get(1), r.counts.get(2)
check(r.rc == 0 and r.out.count("bad 0") == 4 and c1 and c1.hits == 4 * per_call and
      c2 and c2.hits == 4 * 2 * N and c2.collected == c2.hits and r.exact(1) and r.exact(2),
      "4 threads: %d and %d hits, exact" % (4 * per_call, 8 * N), r.err[-1500:])

# A full ring: its thread sleeps on a futex (it does not spin) while tracepad is stopped,
# and once tracepad runs again every frame arrives. 64 KiB frames: 63 fill the ring.
p = subprocess.Popen([prog, "spin", "1"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
check(p.stdout.readline() == b"ready\n", "the target of a full ring is ready")
tp = subprocess.Popen([TRACEPAD, "trace", "-q", "-p", str(p.pid), "--fast", "-t", "*" + A[5],
                       "-a", "collect " + ", ".join(["*(char*)($rsp-16384)@16384"] * 4)],
                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def in_futex(pid):
    """A thread of @pid waits in FUTEX_WAIT on a shared futex (the agent's: glibc's are
    private, and the main thread waits in pthread_join)."""
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/syscall" % (pid, tid)) as f:
                sc = f.read().split()
        except OSError:
            continue
        if len(sc) > 2 and sc[0] == "202" and int(sc[2], 16) == 0:  # SYS_futex, FUTEX_WAIT
            return True
    return False


def wait_for(cond, secs=120):
    """Has @cond been seen true within @secs?"""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def live(pid):
    """The block mapped and tracepad's ptrace gone: the pads are in, no stop to come."""
    with open("/proc/%d/maps" % pid) as f:
        mapped = "tracepad-ftp" in f.read()
    with open("/proc/%d/status" % pid) as f:
        return mapped and "\nTracerPid:\t0\n" in f.read()


attached_ok = wait_for(lambda: live(p.pid) and tp.poll() is None)
tp.send_signal(signal.SIGSTOP)
slept = attached_ok and wait_for(lambda: in_futex(p.pid), 60)
tp.send_signal(signal.SIGCONT)
# frames flow again: the thread leaves its futex
flowing = wait_for(lambda: not in_futex(p.pid), 60)
tp.send_signal(signal.SIGINT)
try:
    _, err = tp.communicate(timeout=120)
except subprocess.TimeoutExpired:
    tp.kill()
    _, err = tp.communicate()
r = TraceRun(tp.args, tp.returncode, "", err.decode())
c = r.counts.get(1)
check(attached_ok and slept and flowing, "a full ring: its thread sleeps in a futex while "
      "tracepad is stopped, and runs on after", r.err[-1500:])
check(r.rc == 0 and c and c.hits > 63 and c.hits == c.collected and r.exact(1) and
      "could not be written" not in r.err and p.poll() is None,
      "a full ring: every hit collected (%s), the program runs on" % c, r.err[-1500:])
p.kill()
p.wait()


def text(pid):
    blobs = {}
    with open("/proc/%d/maps" % pid) as f:
        maps = [l.split(None, 5) for l in f]
    with open("/proc/%d/mem" % pid, "rb", buffering=0) as mem:
        for parts in maps:
            if "x" in parts[1] and len(parts) > 5 and parts[5].startswith("/"):
                start, end = (int(x, 16) for x in parts[0].split("-"))
                mem.seek(start)
                blobs[start] = mem.read(end - start)
    return blobs


def shape(pid):
    """The mappings and threads of the process."""
    with open("/proc/%d/maps" % pid) as f:
        maps = [l.split()[0] + " " + (l.split() + [""] * 6)[5] for l in f]
    return sorted(maps), len(os.listdir("/proc/%d/task" % pid))


p = subprocess.Popen([prog, "spin", "4"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
check(p.stdout.readline() == b"ready\n", "the 4-thread target is ready")
t0 = text(p.pid)
after_first = None
good = 0
for cycle in range(20):
    r = attached(p.pid, 5, ["-t", "*" + A[0], "-a", "collect $rcx", "-t", "*" + A[4],
                            "-t", "*" + A[5], "-a", "collect $rdi"])
    now = text(p.pid)
    ok = (r.rc == 0 and all(r.exact(k) for k in (1, 2, 3)) and p.poll() is None and
          all(now.get(k) == v for k, v in t0.items()))
    if cycle == 0:
        after_first = shape(p.pid)
    ok &= shape(p.pid) == after_first
    good += ok
    if not ok:
        check(False, "cycle %d" % cycle, r)
        break
check(good == 20, "20 cycles of attach, 3 fast tracepoints, detach: the program runs on, "
      "its code byte-identical, nothing added after the first")
p.send_signal(signal.SIGTERM)
p.wait(timeout=30)
check(p.returncode == -signal.SIGTERM, "it ends on SIGTERM (its own checks never failed)",
      p.returncode)
done()
