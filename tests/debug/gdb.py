#!/usr/bin/env python3
"""debug: scripted gdb sessions (gdb -batch -x SCRIPT) on a program of ours give, under
`tracepad debug` (the program in the code cache, gdb's view of it through the
interposer), the transcript native gdb gives: normalised only for pids and thread ids, the
program's output and exit status included.  The instruction count printed at the program's
exit equals `tracepad count --engine dbt`'s on the same program, environment and
arguments."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import Tap  # noqa: E402

t = Tap("debug-gdb")
tp = os.environ["TRACEPAD"]
targets = sys.argv[1]
if not shutil.which("gdb") or not shutil.which("setarch"):
    t.bail("no gdb or setarch in PATH (scripts/deps.sh installs gdb)")

# One environment for both gdbs, so that the programs' start-up is the same: the dynamic
# loader's and libc's work depend on the environment's size.
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent",
       "LANG": "C", "_": "/usr/bin/gdb"}
COUNT_LINE = re.compile(
    r"^tracepad debug: (?:(\d+) instructions|the program was killed before it could report "
    r"its count)\n", re.M)

# name: the commands, in order.  Each ends with the program's exit.
SESSIONS = {
    "break-bt-regs": [
        "break work", "run", "bt", "info registers rip", "continue", "continue",
        "delete", "continue",
    ],
    # the acceptance's commands but watch (hardware debug registers never fire here)
    "step-finish-print": [
        "break work", "run", "stepi", "stepi", "stepi", "x/i $pc", "stepi 20", "x/i $pc",
        "info registers", "finish", "print counter", "print total", "print $rip",
        "delete 1", "tbreak square", "continue", "print x", "up", "info locals", "print sum",
        "down", "break square if x == 2", "continue", "print x", "bt", "delete", "until",
        "until", "next", "continue",
    ],
    # hardware debug registers never fire on this machine: a software watchpoint (gdb
    # steps the program, one program instruction a step)
    "watch-software": [
        "break work", "run", "set can-use-hw-watchpoints 0", "watch total", "continue",
        "continue", "bt", "delete", "continue",
    ],
    # 3 threads, one after the other: stops, registers and stepping in new threads
    "threads": [
        "break worker", "run", "bt", "info registers rip", "continue", "bt", "stepi 5",
        "x/i $pc", "continue", "print arg", "finish", "delete", "continue",
    ],
}
# signals: gdb's stops at each, a breakpoint in the handler, its frame
SESSIONS["signals"] = ["run", "bt", "info registers rip", "continue", "break handler",
                       "continue", "bt", "info registers rip", "continue", "continue",
                       "delete", "continue"]
# start, a run killed and started again; the siginfo of a step
SESSIONS["start-siginfo"] = ["start", "next", "next", "info frame", "print $_siginfo", "kill",
                             "start", "continue"]
# jump to code never run (never translated: the seed's last case of a written pc)
SESSIONS["jump"] = ["break work", "run", "set var sum = 100", "jump 24", "bt",
                    "info registers rip rax", "delete", "continue"]
# a system call caught (syscall stops: PTRACE_SYSCALL)
SESSIONS["catch-syscall"] = ["catch syscall write", "run", "bt", "info registers rip rax",
                             "continue", "bt 2", "delete", "continue"]
# the program's mappings, as gdb reads /proc/PID/maps (none of the cache's)
SESSIONS["mappings"] = ["break work", "run", "info proc mappings", "delete", "continue"]
# sessions that need -O0's variables, sessions that change the program's path (its count)
O0_ONLY = {"jump", "start-siginfo", "catch-syscall", "mappings"}
OTHER_PATH = {"jump"}
# a fork child and a vfork one (system): gdb detaches them, the breakpoint is not theirs
SESSIONS["fork"] = ["break work", "run", "bt", "delete", "continue"]
# programs nobody here wrote, stopped in a libc function they call
SESSIONS["real"] = ["break write", "run", "bt", "finish", "info registers"] + ["stepi"] * 10 + [
    "x/i $pc", "delete", "continue"]
# the programs (tests/e2e/targets, built -O0 and -O2) and their sessions
PROGRAMS = {
    "debugee": ["break-bt-regs", "step-finish-print", "watch-software", "start-siginfo",
                "jump", "catch-syscall", "mappings"],
    "debugee-threads": ["threads"],
    "debugee-signal": ["signals"],
    "debugee-fork": ["fork"],
}


def normalise(text):
    text = re.sub(r"process \d+", "process N", text)
    text = re.sub(r"LWP \d+", "LWP N", text)
    text = re.sub(r"Thread 0x[0-9a-f]+", "Thread 0xN", text)
    # a thread's exit is reported when gdb's wait meets it: native gdb itself puts it
    # before or after the next thread's creation from one run to the next
    return re.sub(r"^\[Thread 0xN \(LWP N\) exited\]\n", "", text, flags=re.M)


def run(argv, timeout=120):
    p = subprocess.run(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace")


def gdb_env():
    """The program's environment under gdb, in order: gdb adds LINES and COLUMNS, the shell
    it starts programs with PWD, and the order is theirs."""
    _, out = run(["gdb", "-nx", "-batch", "-ex", "run", "--args", "/usr/bin/env"])
    return dict(l.split("=", 1) for l in out.splitlines()
                if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", l))


def dbt_count(argv, env):
    """The count of the program run as gdb runs it: its environment, its output into a pipe
    (stdio sizes its buffer by the file's kind)."""
    with tempfile.NamedTemporaryFile(prefix="tp-debug-", suffix=".json") as f:
        p = subprocess.run([tp, "count", "--engine", "dbt", "--json", "-o", f.name, "--"] + argv,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=120)
        if p.returncode < 0:
            return None
        return json.load(open(f.name))["instructions"]


def session(tmp, argv, name, cmds, want_count, what=None):
    """Native gdb's transcript and tracepad debug's; the count at exit compared when
    @want_count is given."""
    script = os.path.join(tmp, name + ".gdb")
    with open(script, "w") as f:
        f.write("\n".join(cmds) + "\n")
    what = "%s, %s" % (what or os.path.basename(argv[0]), name)
    nrc, native = run(["gdb", "-nx", "-batch", "-x", script, "--args"] + argv)
    report = os.path.join(tmp, name + ".counts")
    if os.path.exists(report):
        os.unlink(report)
    drc, debug = run([tp, "debug", "-o", report, "-nx", "-batch", "-x", script, "--"] + argv)
    # the counts went to the file (-o): the transcript is gdb's alone; a run killed by gdb
    # has no count (None)
    counts = [int(n) if n else None
              for n in COUNT_LINE.findall(open(report).read() if os.path.exists(report) else "")]
    t.ok("exited with code" in native or "exited normally" in native,
         what + ": the native session runs the program to its end", native)
    t.eq(normalise(debug), normalise(native), what + ": transcript as native gdb's",
         "native:\n%s\ntracepad debug:\n%s" % (native, debug))
    t.eq(drc, nrc, what + ": gdb's exit status")
    kills = cmds.count("kill")
    if want_count is not None:
        t.eq(counts, [None] * kills + [want_count],
             what + ": the count at exit is count --engine dbt's")
    else:
        t.eq(len(counts), kills + 1, what + ": a count at exit", debug)


with tempfile.TemporaryDirectory(prefix="tp-debug-") as tmp:
    env = gdb_env()
    t.ok({"LINES", "COLUMNS"} <= set(env) and set(ENV) <= set(env),
         "the program's environment under gdb", env)
    for base, names in PROGRAMS.items():
        for opt in ["0", "2"]:
            prog = os.path.join(targets, "%s-O%s" % (base, opt))
            want = dbt_count([prog], env)
            t.ok(want, "%s-O%s: count --engine dbt counts it" % (base, opt))
            if "threads" in base:
                # pthread_join waits on a futex or not, as the thread is gone or not: the
                # count varies by a hundred from run to run under count --engine dbt too
                want = None
            for name in names:
                if opt == "0" or name not in O0_ONLY:
                    session(tmp, [prog], name, SESSIONS[name],
                            None if name in OTHER_PATH else want)
    # 4 threads at once: their order differs from run to run (natively too), so what is
    # checked is what cannot: every frame at a program address (none in the runtime, at
    # 0x7d00'0000'0000), no trap of the engine's own shown, the program's output and end
    cmds = ["break worker", "run", "info threads", "next", "next", "stepi 3", "info threads",
            "continue", "info threads", "continue", "continue", "info threads", "delete",
            "continue"]
    script = os.path.join(tmp, "concurrent.gdb")
    with open(script, "w") as f:
        f.write("\n".join(cmds) + "\n")
    prog = os.path.join(targets, "threads-O0")
    _, native = run(["gdb", "-nx", "-batch", "-x", script, "--args", prog])
    _, debug = run([tp, "debug", "-nx", "-batch", "-x", script, "--", prog])
    what = "threads-O0, 4 threads at once"
    t.ok(not re.search(r"0x00007d[0-9a-f]{10}|\?\? \(\)", debug),
         what + ": every frame at a program address", debug)
    t.ok("SIGTRAP" not in debug, what + ": no trap of the engine's shown", debug)
    results = [l for l in native.splitlines() if re.match(r"^thread \d result ", l)]
    t.eq([l for l in debug.splitlines() if re.match(r"^thread \d result ", l)], results,
         what + ": the program's output", debug)
    t.ok(len(results) == 4 and "exited normally" in debug, what + ": it runs to its end",
         debug)
    t.eq(debug.count("hit Breakpoint 1,"), native.count("hit Breakpoint 1,"),
         what + ": the breakpoint's hits")
    # attach: to the program run natively (without address-space randomisation, as the
    # cache runs it) and to the program under count --engine dbt, which runs on to its
    # end once gdb detached
    cmds = ["bt", "break done", "signal SIGUSR1", "bt", "info registers rip", "finish",
            "delete", "detach"]
    script = os.path.join(tmp, "attach.gdb")
    with open(script, "w") as f:
        f.write("\n".join(cmds) + "\n")
    prog = os.path.join(targets, "debugee-attach-O0")
    out = {}
    for how, launch, gdb in [
            ("native", ["setarch", "-R", prog], ["gdb"]),
            ("debug", [tp, "count", "--engine", "dbt", "--", prog], [tp, "debug"])]:
        p = subprocess.Popen(launch, env=ENV, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        pid = p.stdout.readline().decode().split()[-1]
        argv = gdb + ["-nx", "-batch", "-x", script, "-p", pid] + (
            ["--"] if how == "debug" else []) + [prog]
        _, text = run(argv)
        rest, err = p.communicate(timeout=60)
        out[how] = (text.replace(pid, "PID"), rest.decode(), p.returncode, err.decode())
    what = "debugee-attach-O0, attach"
    t.eq(out["debug"][0], out["native"][0], what + ": transcript as native gdb's")
    t.eq(out["debug"][1:3], out["native"][1:3],
         what + ": the program's output and status after the detach", out["debug"][3])
    t.ok(re.search(r"instructions +\d+", out["debug"][3]),
         what + ": count --engine dbt counted it to its end", out["debug"][3])
    # gzip -9 of a file (its output compared too), python3 with a loop
    data = os.path.join(tmp, "data")
    with open(data, "wb") as f:
        for i in range(4000):
            f.write(b"line %d of the data, %x\n" % (i, i * i))
    gz = ["/usr/bin/gzip", "-9", "-f", "-k", data]
    py = ["/usr/bin/python3", "-c", "for i in range(3): print(i * i)"]
    open(data + ".gz", "wb").close()  # each run of gzip -f replaces it: the same work
    for argv, what in [(gz, "gzip -9"), (py, "python3 -c")]:
        want = dbt_count(argv, env)
        t.ok(want, what + ": count --engine dbt counts it")
        if argv is gz:
            native_gz = open(data + ".gz", "rb").read()
        else:
            # python3's count varies by a few dozen instructions from one run to the next
            # under count --engine dbt itself
            want = None
        session(tmp, argv, "real", SESSIONS["real"], want, what)
        if argv is gz:
            t.ok(open(data + ".gz", "rb").read() == native_gz, what + ": the same file written")
t.done()
