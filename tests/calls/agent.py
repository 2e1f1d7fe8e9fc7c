#!/usr/bin/env python3
"""tracepad calls --engine agent against the ptrace engine on the same targets: the same
calls with the same integer arguments, return values and depths, backtraces (--bt), exact
counts, longjmp and C++ exceptions through hooked frames (the program's output and exit
status unchanged), stack walks (backtrace, pthread_exit), a real program (pigz -9 with
-e 'libz*:*': its output identical, -c counts equal to the ptrace engine's), and cycles of
attach, trace, detach (-p -f) with the code checked after each (the tests run with each
engine, calls-NAME-agent, do the rest: 4 threads, attach cycles...).  The objects' constructors are
left out of the comparisons (the agent goes in after libc's own, and the program's entry
point when symbols are missing)."""
import os
import re
import signal
import subprocess
import tempfile

from tpcalls import attach_cycles, check, done, calls, run, target

AGENT = ["--engine", "agent"]
# the other side of each comparison (without --engine, the agent may be chosen for it too)
PTRACE = ["--engine", "ptrace"]
LIB = ["-e", "libtpcalls:*"]
# Run before the entry point (constructors) or with register garbage as arguments.
STARTUP = {"_init", "frame_dummy", "register_tm_clones", "deregister_tm_clones",
           "__do_global_dtors_aux", "_fini"}
HEX = re.compile(r"0x[0-9a-f]+")


def shape(r):
    """The call lines as (function, depth, args, return), addresses normalised."""
    return [(c.function, c.depth, HEX.sub("ADDR", c.args_text), HEX.sub("ADDR", c.ret))
            for c in r.calls if c.function not in STARTUP]


def counts(r):
    s = r.summary()
    return {(f["object"], f["function"]): (f["calls"], f["returns"])
            for f in (s or {}).get("functions", []) if f["function"] not in STARTUP}


# One thread, every kind of binary the agent's pads must handle; exit status passed on.
for variant in ("lazy", "now", "noplt", "cet", "pg"):
    prog = [target("calls-" + variant), "500", "3"]
    nat = run(prog)
    a = calls(AGENT + LIB, prog)
    p = calls(PTRACE + LIB, prog)
    # the first line is the program's pid
    check(a.rc == 3 and a.out.split("\n")[1:] == nat.out.split("\n")[1:] and not a.err,
          "%s: output and exit status unchanged, nothing said" % variant, a)
    adds = [(c.args, c.retint, c.depth) for c in a.calls if c.function == "tpc_add"]
    check(adds == [([i, i % 7 + 1], i + i % 7 + 1, 0) for i in range(500)],
          "%s: tpc_add's 500 calls, arguments and return values" % variant, adds[:5])
    # the strings tpc_word returns, copied by the agent at the return
    words = [(c.args, c.depth, c.ret) for c in a.calls if c.function == "tpc_word"]
    check(words == [([i], 0, '"%s"' % w) for i, w in enumerate(("zero", "one", "two", "three"))],
          "%s: tpc_word's 4 calls, their strings" % variant, words)
    check(shape(a) == shape(p) and shape(p),
          "%s: the same lines as the ptrace engine's" % variant)
    ca = calls(AGENT + LIB + ["-c", "--json"], prog)
    cp = calls(PTRACE + LIB + ["-c", "--json"], prog)
    check(ca.rc == 3 and counts(ca) == counts(cp) and counts(ca),
          "%s: -c: the ptrace engine's counts" % variant,
          "agent %r\nptrace %r" % (counts(ca), counts(cp)))

multi = target("calls-multi")

# A fork child throws through frames hooked after the fork and through one hooked before it
# (its return address the parent's trampoline): the unwinder still finds real addresses.
fx = target("calls-forkexc")
if not os.path.exists(fx):
    check(False, "C++ target calls-forkexc was not built (no C++ compiler?)")
else:
    nat = run([fx])
    a = calls(AGENT + ["-e", "calls-forkexc:fx_*"], [fx])
    check(nat.rc == 0 and "child exit status 7\n" in nat.out and a.rc == 0
          and a.out == nat.out and [c.function for c in a.calls] == ["fx_outer"]
          and a.calls[0].retint == 5, "fork child: exceptions through hooked frames", a)

# errno as the function left it, read by the agent at the return.
sel = ["-e", "libc:open,libtpcalls:tpc_add"]
a = calls(AGENT + sel, [multi, "errno"])
p = calls(PTRACE + sel, [multi, "errno"])
want = [(c.function, c.ret) for c in p.calls]
check(a.rc == 0 and [(c.function, c.ret) for c in a.calls] == want
      and ("open", "-1 ENOENT (No such file or directory)") in want,
      "errno: open's failure shown as the ptrace engine shows it", a)
ca = calls(AGENT + sel + ["-c", "--json"], [multi, "errno"])
errs = [f["errors"] for f in (ca.summary() or {}).get("functions", []) if f["function"] == "open"]
check(errs == [1], "errno: -c counts open's failure", ca)

# Nested calls and a tail call (tpc_tail jumps to tpc_c: both return through one address),
# with -T: the ptrace engine's lines, each with its duration.
sel = ["-e", "libtpcalls:tpc_[abct]*"]
a = calls(AGENT + sel + ["-T"], [multi, "nest"])
p = calls(PTRACE + sel, [multi, "nest"])
check(a.rc == 0 and shape(a) == shape(p) and len(shape(a)) == 15
      and all(c.seconds is not None for c in a.calls),
      "nested and tail calls, -T: the ptrace engine's lines, with durations",
      "agent:\n%s\nptrace:\n%s" % (a.text[:800], p.text[:800]))

# --bt: each call's backtrace from its entry, unwound by tracepad over the stack the agent
# copied (return addresses the trampoline holds put back), or, once tracepad has read the
# callers' CFI, walked by the agent (through the trampoline's return addresses of the
# enclosing traced calls): the ptrace engine's lines, 4 rounds of calls 20 ms apart.
PID = re.compile(r"^\[\d+\]")
WALKED = re.compile(r"backtraces: (\d+) walked by the agent, (\d+) unwound")
for opt in ("--bt", "--bt=2"):
    sel = ["-e", "libtpcalls:tpc_[abc]", opt]
    a = calls(AGENT + sel, [multi, "nest", "4"], env=dict(os.environ, TRACEPAD_DEBUG="1"))
    p = calls(PTRACE + sel, [multi, "nest", "4"])
    la = [PID.sub("[PID]", ln) for ln in a.lines]
    lp = [PID.sub("[PID]", ln) for ln in p.lines]
    check(a.rc == 0 and la == lp and sum(" at " in ln for ln in la) > 60,
          "%s: the ptrace engine's lines and frames" % opt,
          "agent:\n%s\nptrace:\n%s" % ("\n".join(la[:20]), "\n".join(lp[:20])))
    m = WALKED.search(a.err)
    check(m and int(m.group(1)) > 0, "%s: backtraces walked by the agent as well" % opt,
          m and m.group(0) or a.err[-1500:])

# Frames left by longjmp and by C++ exceptions: the program unchanged, the same lines.
cases = [("longjmp", [multi, "longjmp"], LIB)]
exc = target("calls-exc")
if os.path.exists(exc):
    cases.append(("exceptions", [exc], ["-e", "libtpcalls:*,calls-exc:tpx_*"]))
else:
    check(False, "C++ target calls-exc was not built (no C++ compiler?)")
for what, prog, sel in cases:
    nat = run(prog)
    a = calls(AGENT + sel, prog)
    p = calls(PTRACE + sel, prog)
    check(nat.rc == 0 and a.rc == 0 and a.out == nat.out,
          "%s: output and exit status unchanged" % what, a)
    check(shape(a) == shape(p) and "<unwound>" in a.text,
          "%s: the ptrace engine's lines (unwound frames too)" % what,
          "agent:\n%s\nptrace:\n%s" % ("\n".join(map(str, shape(a)[:12])),
                                       "\n".join(map(str, shape(p)[:12]))))

# Stack walks through hooked frames (backtrace(), with the unwinder glibc loads at its first
# call; pthread_exit's forced unwind and its cleanup handler): the program's output unchanged.
walk = target("calls-walk")
nat = run([walk])
a = calls(AGENT + ["-e", "calls-walk:walk_*"], [walk])
p = calls(PTRACE + ["-e", "calls-walk:walk_*"], [walk])
check(nat.rc == 0 and "cleanup 41\n" in nat.out and a.rc == 0 and a.out == nat.out,
      "stack walks: output and exit status unchanged", a)
ends = [(c.function, c.args, c.ret) for c in a.calls if c.function in ("walk_exit", "walk_body")]
check(sorted(ends) == sorted((f, [v], "<no return>") for v in (41, 42)
                             for f in ("walk_exit", "walk_body")),
      "stack walks: calls that pthread_exit left never return", ends)
# backtrace() gives the frames their real return addresses: their returns may pass unseen
# until the next hooked call above, and are said to be (never a wrong value)
want = {(c.function, tuple(c.args)): c.ret for c in p.calls if c.function in
        ("walk_top", "walk_mid", "walk_leaf")}
got = [(c.function, tuple(c.args), c.ret) for c in a.calls if c.function in
       ("walk_top", "walk_mid", "walk_leaf")]
check(len(got) == 12 and all(r in (want.get((f, x)), "<return not followed>") for f, x, r in got),
      "stack walks: the walking frames' returns right, or said to be unseen", got)
cnt = {}
for r in (a, p):
    cnt[r is a] = sorted((c.function, c.args[:1]) for c in r.calls
                         if c.function.startswith("walk_"))
check(cnt[True] == cnt[False], "stack walks: the ptrace engine's calls",
      "agent %r\nptrace %r" % (cnt[True], cnt[False]))

# A real program: pigz's threads calling libz.
with tempfile.TemporaryDirectory(prefix="tp-agent-") as d:
    data = os.path.join(d, "data")
    with open(data, "wb") as f:
        for i in range(60000):
            f.write(b"line %d of the agent engine's test, %d\n" % (i, i * i % 9973))
    prog = ["pigz", "-9", "-c", "-p", "4", data]
    nat = run(prog)
    ca = calls(AGENT + ["-e", "libz*:*", "-c", "--json"], prog)
    cp = calls(PTRACE + ["-e", "libz*:*", "-c", "--json"], prog)
    check(nat.rc == 0 and ca.rc == 0 and ca.out == nat.out,
          "pigz -9: output identical to the native run's", ca)
    deflate = [v for k, v in counts(ca).items() if k[1] == "deflate"]
    check(counts(ca) == counts(cp) and deflate and deflate[0][0] > 1,
          "pigz -9: -c: the ptrace engine's counts",
          "agent %r\nptrace %r" % (counts(ca), counts(cp)))

# (-p's cycles without -f: calls-attach-agent, and 100 in calls-agent-attach)
# -f: the process stays traced for its process events only, and is let go the same way.
attach_cycles(multi, 3, opts=("--engine", "agent", "-f"), lines_every=4)

# gzip -9 and libc's functions (read and write, strcmp and memcmp through their IFUNC
# resolvers): the output identical, the ptrace engine's counts.
with tempfile.TemporaryDirectory(prefix="tp-agent-") as d:
    data = os.path.join(d, "data")
    with open(data, "wb") as f:
        for i in range(40000):
            f.write(b"%d squared is %d, %s\n" % (i, i * i, b"x" * (i % 50)))
    prog = ["gzip", "-9", "-c", data]
    nat = run(prog)
    sel = ["-e", "libc:read,libc:write,libc:close,libc:strcmp,libc:memcmp"]
    ca = calls(AGENT + sel + ["-c", "--json"], prog)
    cp = calls(PTRACE + sel + ["-c", "--json"], prog)
    got = {k[1]: v for k, v in counts(ca).items()}
    check(nat.rc == 0 and ca.rc == 0 and ca.out == nat.out and not ca.err,
          "gzip -9: output identical to the native run's", ca)
    check(counts(ca) == counts(cp) and got.get("read", (0,))[0] > 1 and "memcmp" in got,
          "gzip -9: -c of libc functions (IFUNCs too): the ptrace engine's counts",
          "agent %r\nptrace %r" % (counts(ca), counts(cp)))

# Plugins (plugin.py's test plugin, which selects tpc_add itself): the exact calls, returns,
# arguments and return values, the process's start and exit, the 4 threads' calls.
plugin = target("libtpcalls-plugin.so")


def plugin_counts(text):
    m = re.search(r"^tpcalls-plugin (.*)$", text, re.M)
    return dict(kv.split("=", 1) for kv in m.group(1).split()) if m else {}


r = calls(AGENT + ["--plugin", plugin + ":hello", "-e", "libtpcalls:tpc_word"],
          [target("calls-lazy"), "300"])
c = plugin_counts(r.text)
check(r.rc == 0 and c.get("args") == "hello" and c.get("add_calls") == "300"
      and c.get("add_rets") == "300" and c.get("calls") == "304" and c.get("rets") == "304"
      and c.get("add_sum") == str(sum(i + i % 7 + 1 for i in range(300)))
      and c.get("bad") == "0" and c.get("proc_start") == "1" and c.get("proc_exit") == "1",
      "plugin: every call and return, right values, one process start and exit", c or r)
r = calls(AGENT + ["--plugin", plugin, "-e", "libtpcalls:tpc_word"], [multi, "threads"])
c = plugin_counts(r.text)
check(r.rc == 0 and c.get("add_calls") == str(300 * (2 + 3 + 4 + 5)) and c.get("bad") == "0"
      and c.get("thread_start") in ("4", "5"),
      "plugin, 4 threads: every call, the threads' starts", c or r)

# With plugins tracepad stays attached: children (fork then exec, vfork then exec) are let go
# with the program's bytes (the int3 at _exit for the exit calls taken out of a fork child,
# lifted while a vfork child runs on the parent's memory); outputs and statuses unchanged.
for cmd in ("forkexec", "vfork"):
    prog = [multi, cmd, target("calls-lazy")]
    nat = run(prog)
    r = calls(AGENT + ["--plugin", "memory:summary", "-e", "libtpcalls:tpc_word"], prog)
    pids = re.compile(r"^(parent|child|pid) \d+", re.M)  # the processes' pids
    check(nat.rc == 0 and r.rc == nat.rc and pids.sub(r"\1 N", r.out) == pids.sub(r"\1 N", nat.out)
          and "total heap usage" in r.text,
          "plugin, %s: the children let go, output and exit status unchanged" % cmd, r)

# --entry and -C (the caller filter): the ptrace engine's lines (-T's times aside).
cxx = target("calls-cxx")
for opts, prog in ((LIB + ["--entry"], [target("calls-lazy"), "50", "3"]),
                   (LIB + ["--entry", "--depth", "2", "--bt=2"], [target("calls-lazy"), "5", "3"]),
                   (["-C", "ns::Widget::get(int)*", "-T"], [cxx, "3"]),
                   (["-C", "ns::middle*"], [cxx, "3"])):
    if not os.path.exists(prog[0]):
        check(False, "%s was not built (no C++ compiler?)" % os.path.basename(prog[0]))
        continue
    a, p = calls(AGENT + opts, prog), calls(PTRACE + opts, prog)
    norm = [[re.sub(r" <\d+\.\d+>$", "", HEX.sub("ADDR", ln.split("] ", 1)[-1]))
             for ln in r.lines] for r in (a, p)]
    check(a.rc == p.rc and norm[0] == norm[1] and len(norm[0]) > 5,
          "%s: the ptrace engine's lines" % " ".join(opts), "agent %r\nptrace %r" % tuple(norm))

# -S: the system calls' lines at their stops, the agent's own left out (its ring set-up,
# the rt_sigreturn of its handler of an int3 hook); launched (the loader's too), on 4
# threads (each syscall as many times as under the ptrace engine), and -p.  Not the heap's
# set-up that the agent's loading did (a brk and a getrandom fewer), nor the constructors
# (STARTUP: the ptrace engine takes frame_dummy's tail call for a call still in flight,
# so it nests main's first syscalls in it); depths aside for those.
SYS = re.compile(r"^(?:\[\d+\] )?\s*(SYS_\w+)\(", re.M)
HEAP = re.compile(r"^SYS_(brk|getrandom)\(")
prog = [target("calls-lazy"), "50", "3"]
a, p = calls(AGENT + LIB + ["-S"], prog), calls(PTRACE + LIB + ["-S"], prog)
norm = [[ln for ln in (HEX.sub("ADDR", re.sub(r"\b%s\b" % x.split("]")[0][1:], "PID",
                                               x.split("] ", 1)[-1])).strip() for x in r.lines)
         if not HEAP.match(ln) and not any(":%s(" % f in ln for f in STARTUP)]
        for r in (a, p)]
check(a.rc == p.rc == 3 and norm[0] == norm[1] and len(SYS.findall(a.text)) > 20,
      "-S: the ptrace engine's lines, system calls and calls", "agent %r\nptrace %r" % tuple(norm))
multi = target("calls-multi")
runs = [calls(e + ["-S", "-e", "libtpcalls:tpc_word"], [multi, "threads"]) for e in (AGENT, PTRACE)]
sysc = [{} for _ in runs]
for r, n in zip(runs, sysc):
    for name in SYS.findall(r.text):
        if name not in ("SYS_brk", "SYS_getrandom", "SYS_futex"):  # futex: contention
            n[name] = n.get(name, 0) + 1
check(runs[0].rc == runs[1].rc == 0 and sysc[0] == sysc[1] and sysc[0].get("SYS_clone3") == 4,
      "-S, 4 threads: each system call as often as under the ptrace engine, none of the agent's",
      "agent %r\nptrace %r" % tuple(sysc))
# (both engines: detaching from threads at a syscall-entry stop once ran the syscall with
# the injected call's registers, and the program crashed)
for name, eng in (("agent", AGENT), ("ptrace", PTRACE)):
    loop = subprocess.Popen([multi, "loop", "30"], stdout=subprocess.PIPE, text=True)
    ready = loop.stdout.readline().split()
    if check(len(ready) == 2 and ready[0] == "ready", "-S -p: the loop target is ready", ready):
        r = calls(eng + ["-S", "--duration", "0.5", "-e", "libtpcalls:tpc_sleep"], pid=ready[1])
        names = SYS.findall(r.text)
        check(r.rc == 0 and "SYS_clock_nanosleep" in names and r.text.count("tpc_sleep(") > 0,
              "-S -p, %s: the sleeper's nanosleeps and its calls" % name, r)
    loop.send_signal(signal.SIGTERM)
    out, _ = loop.communicate(timeout=60)
    check(loop.returncode == 0 and "failures 0" in out,
          "-S -p, %s: detached, the program's checks pass" % name, out)

# What the engine does not do yet is refused with one line naming the option.
for opt in (["--plugin", "memory", "-S"], ["--plugin", "memory", "-f"]):
    r = calls(AGENT + LIB + opt, [target("calls-lazy"), "3"])
    lines = r.err.strip().splitlines()
    check(r.rc == 2 and len(lines) == 1 and opt[0] in lines[0],
          "%s with --engine agent: refused in one line naming it" % opt[0], r)
done()
