#!/usr/bin/env python3
"""debug: scripted gdb sessions (gdb -batch -x SCRIPT) on a program of ours give, under
`tracepad debug` (the program in the code cache, gdb's view of it through the
interposer), the transcript native gdb gives: normalised only for pids and thread ids, the
program's output and exit status included.  The instruction count printed at the program's
exit equals `tracepad count --engine dbt`'s on the same program, environment and
arguments (python3 with a fixed hash seed and clock_gettime preloaded as a system call: the
vDSO's read of the clock starts again when the host updates it, a few instructions more)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import Tap  # noqa: E402

# SIGINT and SIGHUP ignored, as a background job (CI's) has them, whoever starts the test:
# gdb passes the signal state it was started with on to the program, and so must count
# --engine dbt (gzip and python3 install a handler for SIGINT only when it is not ignored)
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)

t = Tap("debug-gdb")
tp = os.environ["TRACEPAD"]
targets = sys.argv[1]
clock_syscall = sys.argv[2]
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
STEPI20 = ["stepi"] * 20  # 20 stops, one program instruction each
SESSIONS = {
    # the acceptance's list, in one session: break, run, bt, info registers, 20 x stepi,
    # x/i $pc, finish, locals and globals, tbreak, until, a conditional breakpoint, watch
    # (a hardware watchpoint, gdb's default) + continue, continue to the exit
    "acceptance": [
        "break work", "run", "bt", "info registers"] + STEPI20 + [
        "x/i $pc", "finish", "info locals", "print v", "print counter", "print total",
        "delete", "tbreak work", "continue", "until", "until", "until", "info locals",
        "break square if x == 2", "continue", "print x", "bt", "delete", "watch total",
        "continue", "continue", "delete", "continue",
    ],
    # the same list on 3 threads, one after the other: the tbreak, the condition and the
    # watchpoint (set before the thread that writes it is created) stop new threads
    "threads-acceptance": [
        "break worker", "run", "bt", "info registers"] + STEPI20 + [
        "x/i $pc", "finish", "info locals", "print arg", "print results", "delete",
        "tbreak worker", "continue", "until", "until", "until", "info locals",
        "print results", "watch results[2]", "break worker if arg == (void *) 2", "continue",
        "print arg", "bt", "continue", "bt", "delete", "continue",
    ],
    "break-bt-regs": [
        "break work", "run", "bt", "info registers rip", "continue", "continue",
        "delete", "continue",
    ],
    # steps, finish, frames up and down
    "step-finish-print": [
        "break work", "run", "stepi", "stepi", "stepi", "x/i $pc"] + STEPI20 + [
        "x/i $pc", "info registers", "finish", "print counter", "print total", "print $rip",
        "delete 1", "tbreak square", "continue", "print x", "up", "info locals", "print sum",
        "down", "break square if x == 2", "continue", "print x", "bt", "delete", "until",
        "until", "next", "continue",
    ],
    # a software watchpoint: gdb steps the program, one program instruction a step
    "watch-software": [
        "break work", "run", "set can-use-hw-watchpoints 0", "watch total", "continue",
        "continue", "bt", "delete", "continue",
    ],
    # hardware watchpoints (gdb's default): their traps come after the cache instruction
    # that wrote or read, and are shown at the next program instruction, as natively
    "watch-hardware": [
        "break work", "run", "watch total", "rwatch counter", "info watchpoints", "continue",
        "continue", "continue", "delete", "continue",
    ],
    # a watchpoint on a local (hardware at -O0, software at -O2 where it is a register)
    # until its frame returns, an access watchpoint on a global
    "watch-scope": [
        "break work", "run", "watch sum", "awatch counter"] + ["continue"] * 12 + [
        "info watchpoints", "delete", "continue",
    ],
    # 3 threads, one after the other: stops, registers and stepping in new threads (whose
    # x87/SSE registers are their creator's at the clone, which the runtime's C code made)
    "threads": [
        "break worker", "run", "bt", "info registers rip", "continue", "bt",
        "info all-registers", "stepi 5",
        "x/i $pc", "continue", "print arg", "finish", "delete", "continue",
    ],
}
# uninitialised locals and the stack below the stack pointer, after a step into a function:
# the code cache's runtime writes nothing below the program's stack pointer
SESSIONS["step-locals"] = ["break work", "run", "info locals", "x/32gx $sp-256", "step", "step",
                           "step", "info locals", "bt", "finish", "step", "step", "step",
                           "info locals", "x/8gx $sp-64", "delete", "continue"]
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
# hardware breakpoints (hbreak: the debug registers' execute breakpoints, which cannot fire in
# the cache: breakpoints of the repository shown as theirs), with a software one at the same
# place, a temporary one, a condition, steps off one; gdb knows the target has debug
# registers only once the program runs
SESSIONS["hbreak"] = ["break main", "run", "hbreak square", "break square", "thbreak work",
                      "continue", "x/2i $pc", "continue", "info breakpoints", "delete 3",
                      "continue", "x/i $pc", "stepi", "stepi", "next", "delete",
                      "hbreak debugee.c:21 if i == 2", "continue", "print sum", "x/i $pc",
                      "next", "continue", "info breakpoints", "delete", "continue"]
# in each new thread (gdb sets the registers of every thread)
SESSIONS["threads-hbreak"] = ["break main", "run", "hbreak worker", "continue", "bt 1",
                              "continue", "continue", "stepi", "delete", "continue"]
# not in a forked child (the kernel clears its debug registers) unless gdb follows it
SESSIONS["fork-hbreak"] = ["break main", "run", "hbreak work", "continue", "bt", "delete",
                           "continue"]
SESSIONS["fork-child-hbreak"] = ["set follow-fork-mode child", "break main", "run",
                                 "hbreak work", "continue", "bt", "finish", "delete",
                                 "continue"]
# sessions that need -O0's variables, sessions that change the program's path (its count)
O0_ONLY = {"jump", "start-siginfo", "catch-syscall", "mappings"}
OTHER_PATH = {"jump"}
# a fork child and a vfork one (system): gdb detaches them, the breakpoint is not theirs
SESSIONS["fork"] = ["break work", "run", "bt", "delete", "continue"]
# gdb follows the fork child: the interposer takes it where it goes on in the cache, its
# breakpoints kept; the parent, detached, runs on, and its count is reported at its end
# (whether gdb has exited by then or not), the launched program's, as count --engine dbt's
# (which counts no child either)
SESSIONS["fork-child"] = ["set follow-fork-mode child", "break work", "run", "bt",
                          "info registers rip", "finish", "next", "stepi 3", "x/i $pc",
                          "info inferiors", "delete", "continue"]
# the fork's event, inside the system call the runtime makes for the program: its registers,
# the x87/SSE ones too (the runtime's C code uses xmm registers: the program's are in the
# image its entry saved)
SESSIONS["catch-fork"] = ["catch fork", "run", "bt 1", "info all-registers", "delete",
                          "continue"]
# the detached parent's line comes as gdb reports the child's exit, before or after it
RACY = {"fork-child": re.compile(r"^parent \d+, status \d+\n", re.M)}
RACY["fork-child-hbreak"] = RACY["fork-child"]
# gdb says it detached the child after it let it go (natively too, seen under load)
RACY["fork"] = RACY["catch-fork"] = RACY["fork-hbreak"] = re.compile(r"^child \d+\n", re.M)
# the child goes on after its parent's end, followed by gdb: the code it translates then is
# read from its own memory (not its parent's, gone); the parent's count is reported as gdb
# reaps it
SESSIONS["orphan"] = ["set follow-fork-mode child", "break work", "run", "bt", "finish",
                      "delete", "continue"]
# gdb detaches the program and exits, the program ends after it (it waits for its parent's
# end): its count is reported by what the interposer leaves behind at gdb's exit
SESSIONS["detach"] = ["break work", "run", "bt", "detach"]
# watched memory that the kernel writes natively (no debug register fires), where the code
# cache's runtime writes sigaction's old action itself: no stop either
SESSIONS["kernel-writes"] = ["break main", "run", "watch old.handler", "watch *(long *)buf",
                             "continue", "delete", "continue"]
# sessions that end with gdb's, not the program's: the program's last line instead
ENDS = {"detach": "done 42\n"}
# programs nobody here wrote, stopped in a libc function they call
SESSIONS["real"] = ["break write", "run", "bt", "finish", "info registers"] + ["stepi"] * 10 + [
    "x/i $pc", "delete", "continue"]
# the programs (tests/e2e/targets, built -O0 and -O2) and their sessions
PROGRAMS = {
    "debugee": ["acceptance", "break-bt-regs", "step-finish-print", "watch-software",
                "watch-hardware", "watch-scope", "hbreak", "start-siginfo",
                "jump", "catch-syscall", "mappings", "step-locals"],
    "debugee-threads": ["threads-acceptance", "threads", "threads-hbreak"],
    "debugee-signal": ["signals"],
    "debugee-fork": ["fork", "fork-child", "catch-fork", "fork-hbreak", "fork-child-hbreak"],
}


def normalise(text):
    text = re.sub(r"process \d+", "process N", text)
    text = re.sub(r"LWP \d+", "LWP N", text)
    text = re.sub(r"Thread 0x[0-9a-f]+", "Thread 0xN", text)
    # a thread's exit is reported when gdb's wait meets it: native gdb itself puts it
    # before or after the next thread's creation from one run to the next
    return re.sub(r"^\[Thread 0xN \(LWP N\) exited\]\n", "", text, flags=re.M)


def run(argv, timeout=120, env=ENV):
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace")


def gdb_env(env=ENV):
    """The program's environment under gdb, in order: gdb adds LINES and COLUMNS, the shell
    it starts programs with PWD, and the order is theirs."""
    _, out = run(["gdb", "-nx", "-batch", "-ex", "run", "--args", "/usr/bin/env"], env=env)
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


def dbt_count_signalled(argv, env):
    """dbt_count() of debugee-detach: SIGUSR1 sent to it once it is ready, as its parent's
    end sends it under gdb."""
    with tempfile.NamedTemporaryFile(prefix="tp-debug-", suffix=".json") as f:
        p = subprocess.Popen([tp, "count", "--engine", "dbt", "--json", "-o", f.name, "--"] +
                             argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ready = p.stdout.readline()
        # the program, among tracepad's descendants (its processes, then the program)
        kids, todo = [], [p.pid]
        while todo:
            pid = todo.pop()
            for task in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/children" % (pid, task)) as c:
                    todo += [int(k) for k in c.read().split()]
            if os.path.realpath("/proc/%d/exe" % pid) == os.path.realpath(argv[0]):
                kids.append(pid)
        for pid in kids:
            os.kill(pid, signal.SIGUSR1)
        p.communicate(timeout=120)
        if ready != b"ready\n" or len(kids) != 1 or p.returncode:
            return None
        return json.load(open(f.name))["instructions"]


def session(tmp, argv, name, cmds, want_count, what=None, env=ENV):
    """Native gdb's transcript and tracepad debug's; the count at exit compared with
    @want_count (count --engine dbt's) when it is given."""
    script = os.path.join(tmp, name + ".gdb")
    with open(script, "w") as f:
        f.write("\n".join(cmds) + "\n")
    what = "%s, %s" % (what or os.path.basename(argv[0]), name)
    nrc, native = run(["gdb", "-nx", "-batch", "-x", script, "--args"] + argv, env=env)
    report = os.path.join(tmp, name + ".counts")
    if os.path.exists(report):
        os.unlink(report)
    drc, debug = run([tp, "debug", "-o", report, "-nx", "-batch", "-x", script, "--"] + argv,
                     env=env)
    # the counts went to the file (-o): the transcript is gdb's alone; a run killed by gdb
    # has no count (None)
    counts = [int(n) if n else None
              for n in COUNT_LINE.findall(open(report).read() if os.path.exists(report) else "")]
    t.ok(("exited with code" in native or "exited normally" in native) if name not in ENDS
         else native.endswith(ENDS[name]),
         what + ": the native session runs the program to its end", native)
    if name in RACY:
        lines = [RACY[name].findall(x) for x in (native, debug)]
        t.ok(lines[0] and lines[1] == lines[0], what + ": the program's racing lines", lines)
        native, debug = (RACY[name].sub("", x) for x in (native, debug))
    t.eq(normalise(debug), normalise(native), what + ": transcript as native gdb's",
         "native:\n%s\ntracepad debug:\n%s" % (native, debug))
    t.eq(drc, nrc, what + ": gdb's exit status")
    kills = cmds.count("kill")
    if want_count is not None:
        t.eq(counts, [None] * kills + [want_count],
             what + ": the count at exit is count --engine dbt's")
    else:
        t.eq(len(counts), kills + 1, what + ": a count at exit", debug)



def thread_pidfds():
    """Pidfds of threads (Linux 6.9): debugee-threads' main waits for a thread's end with
    one, so that its count is the same on every run."""
    try:
        os.close(os.pidfd_open(os.getpid(), 0x80))  # PIDFD_THREAD
        return True
    except OSError:
        return False


with tempfile.TemporaryDirectory(prefix="tp-debug-") as tmp:
    env = gdb_env()
    t.ok({"LINES", "COLUMNS"} <= set(env) and set(ENV) <= set(env),
         "the program's environment under gdb", env)
    for base, names in PROGRAMS.items():
        for opt in ["0", "2"]:
            prog = os.path.join(targets, "%s-O%s" % (base, opt))
            want = dbt_count([prog], env)
            t.ok(want, "%s-O%s: count --engine dbt counts it" % (base, opt))
            if "threads" in base and not thread_pidfds():
                # pthread_join would wait on a futex or not, as the thread is gone or not:
                # the count varies by a hundred from run to run under count --engine dbt too
                print("# no pidfds of threads (Linux 6.9): %s's count is not compared" % base)
                want = None
            for name in names:
                if opt == "0" or name not in O0_ONLY:
                    session(tmp, [prog], name, SESSIONS[name],
                            None if name in OTHER_PATH else want)
    # programs of tests/debug's own
    for base, names in [("debugee-orphan", ["orphan"]), ("debugee-detach", ["detach"]),
                        ("debugee-kwrite", ["kernel-writes"])]:
        prog = os.path.join(sys.argv[3], base)
        want = (dbt_count_signalled if base == "debugee-detach" else dbt_count)([prog], env)
        t.ok(want, "%s: count --engine dbt counts it" % base)
        for name in names:
            session(tmp, [prog], name, SESSIONS[name], want)
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
    # python3's count is the same on every run with a fixed hash seed (not -I, which ignores
    # it) and the clock read by system calls: the vDSO's clock_gettime reads the clock again
    # when the kernel updates it meanwhile, which a loaded machine makes likely (+5 to +80
    # instructions now and then, seen in full-suite runs while the shim exported nothing)
    py_env = dict(ENV, PYTHONHASHSEED="0", LD_PRELOAD=clock_syscall)
    py_genv = gdb_env(py_env)
    # the shim is in effect: no instruction of python3's in the vDSO's clock_gettime
    with tempfile.NamedTemporaryFile(prefix="tp-debug-", suffix=".json") as f:
        subprocess.run([tp, "count", "--engine", "dbt", "--by", "function", "--top", "0",
                        "--json", "-o", f.name, "--"] + py, env=py_genv,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        keys = [e["key"] for e in json.load(open(f.name))["histogram"]["entries"]]
        t.ok("clock-syscall.so:clock_gettime" in keys and
             not [k for k in keys if k.startswith("[vdso]:clock_gettime")],
             "python3 -c: clock_gettime is the shim's, not the vDSO's", keys)
    open(data + ".gz", "wb").close()  # each run of gzip -f replaces it: the same work
    # (the count once differed by 80 and 88 instructions in runs started in the background:
    # count --engine dbt gave the programs SIGINT at its default, gdb ignored, as given)
    for argv, what, e in [(gz, "gzip -9", ENV), (py, "python3 -c", py_env)]:
        want = dbt_count(argv, env if e is ENV else py_genv)
        t.ok(want, what + ": count --engine dbt counts it")
        if argv is gz:
            native_gz = open(data + ".gz", "rb").read()
        session(tmp, argv, "real", SESSIONS["real"], want, what, e)
        if argv is gz:
            t.ok(open(data + ".gz", "rb").read() == native_gz, what + ": the same file written")
t.done()
