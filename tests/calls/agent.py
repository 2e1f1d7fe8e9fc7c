#!/usr/bin/env python3
"""tracepad calls --engine agent against the ptrace engine on the same targets: the same
calls with the same integer arguments, return values and depths, exact counts on one and on
4 threads, longjmp and C++ exceptions through hooked frames (the program's output and exit
status unchanged), stack walks (backtrace, pthread_exit), a real program (pigz -9 with
-e 'libz*:*': its output identical, -c counts equal to the ptrace engine's), and cycles of
attach, trace, detach (-p) with the code checked after each.  The agent engine starts at the
entry point, so the objects' constructors (run before it) are left out of the
comparisons."""
import os
import re
import signal
import subprocess
import tempfile

from tpcalls import check, done, calls, run, target

AGENT = ["--engine", "agent"]
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
    p = calls(LIB, prog)
    # the first line is the program's pid
    check(a.rc == 3 and a.out.split("\n")[1:] == nat.out.split("\n")[1:] and not a.err,
          "%s: output and exit status unchanged, nothing said" % variant, a)
    adds = [(c.args, c.retint, c.depth) for c in a.calls if c.function == "tpc_add"]
    check(adds == [([i, i % 7 + 1], i + i % 7 + 1, 0) for i in range(500)],
          "%s: tpc_add's 500 calls, arguments and return values" % variant, adds[:5])
    # strings are not recorded yet: tpc_word's value is shown as its address
    words = [(c.args, c.depth) for c in a.calls if c.function == "tpc_word"]
    check(words == [([i], 0) for i in range(4)], "%s: tpc_word's 4 calls" % variant, words)
    pa = [x for x in shape(p) if x[0] != "tpc_word"]
    check([x for x in shape(a) if x[0] != "tpc_word"] == pa and pa,
          "%s: the same lines as the ptrace engine's" % variant)
    ca = calls(AGENT + LIB + ["-c", "--json"], prog)
    cp = calls(LIB + ["-c", "--json"], prog)
    check(ca.rc == 3 and counts(ca) == counts(cp) and counts(ca),
          "%s: -c: the ptrace engine's counts" % variant,
          "agent %r\nptrace %r" % (counts(ca), counts(cp)))

# 4 threads: exact counts per thread.
multi = target("calls-multi")
COUNTS = [300 * (k + 2) for k in range(4)]
for rep in range(2):
    r = calls(AGENT + ["-e", "libtpcalls:tpc_add"], [multi, "threads"])
    th = {int(m.group(2)): (int(m.group(1)), int(m.group(3)), int(m.group(4))) for m in
          re.finditer(r"^thread (\d+) tid (\d+) calls (\d+) sum (\d+)$", r.out, re.M)}
    check(r.rc == 0 and len(th) == 4, "threads #%d: the program ran as natively" % rep, r)
    per = {}
    for c in r.calls:
        per.setdefault(c.tid, []).append(c)
    for tid, (k, n, total) in sorted(th.items()):
        mine = per.get(tid, [])
        ok = [(c.args, c.retint) for c in mine] == [([k + 1, j], k + 1 + j)
                                                   for j in range(COUNTS[k])]
        check(n == COUNTS[k] and ok and sum(c.retint for c in mine) == total,
              "threads #%d: thread %d: %d calls, in order, right values" % (rep, k, COUNTS[k]),
              "got %d" % len(mine))
    check(sorted(per) == sorted(th), "threads #%d: lines of exactly the 4 threads" % rep)

# A fork child throws through frames hooked after the fork and through one hooked before it
# (its return address the parent's trampoline): the unwinder still finds real addresses.
fx = target("calls-forkexc")
if os.path.exists(fx):
    nat = run([fx])
    a = calls(AGENT + ["-e", "calls-forkexc:fx_*"], [fx])
    check(nat.rc == 0 and "child exit status 7\n" in nat.out and a.rc == 0
          and a.out == nat.out and [c.function for c in a.calls] == ["fx_outer"]
          and a.calls[0].retint == 5, "fork child: exceptions through hooked frames", a)

# errno as the function left it, read by the agent at the return.
sel = ["-e", "libc:open,libtpcalls:tpc_add"]
a = calls(AGENT + sel, [multi, "errno"])
p = calls(sel, [multi, "errno"])
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
p = calls(sel, [multi, "nest"])
check(a.rc == 0 and shape(a) == shape(p) and len(shape(a)) == 15
      and all(c.seconds is not None for c in a.calls),
      "nested and tail calls, -T: the ptrace engine's lines, with durations",
      "agent:\n%s\nptrace:\n%s" % (a.text[:800], p.text[:800]))

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
    p = calls(sel, prog)
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
p = calls(["-e", "calls-walk:walk_*"], [walk])
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
    cp = calls(["-e", "libz*:*", "-c", "--json"], prog)
    check(nat.rc == 0 and ca.rc == 0 and ca.out == nat.out,
          "pigz -9: output identical to the native run's", ca)
    deflate = [v for k, v in counts(ca).items() if k[1] == "deflate"]
    check(counts(ca) == counts(cp) and deflate and deflate[0][0] > 1,
          "pigz -9: -c: the ptrace engine's counts",
          "agent %r\nptrace %r" % (counts(ca), counts(cp)))

# Attach, trace 0.5 s, detach, again and again, on a running target whose 4 threads check
# every result (a fifth one sleeps in a traced call): it survives with all its checks passed,
# and after each detach the text of libtpcalls.so is what it was.
def lib_text(pid):
    """The bytes of libtpcalls.so's executable mapping in process @pid."""
    with open("/proc/%d/maps" % pid) as f:
        for ln in f:
            if "libtpcalls.so" in ln and " r-x" in ln:
                lo, hi = (int(x, 16) for x in ln.split()[0].split("-"))
                with open("/proc/%d/mem" % pid, "rb") as m:
                    m.seek(lo)
                    return m.read(hi - lo)
    return None


loop = subprocess.Popen([multi, "loop"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
try:
    first = loop.stdout.readline()
    check(first == "ready %d\n" % loop.pid, "attach: the target is running", first)
    text = lib_text(loop.pid)
    for i in range(8):
        # odd cycles: -c of three functions; even ones: the lines of tpc_add
        sel = "libtpcalls:tpc_add,libtpcalls:tpc_word,libtpcalls:tpc_sleep"
        opts = AGENT + ["--duration", "0.5"] + (["-c", "--json", "-e", sel] if i % 2
                                                else ["-e", "libtpcalls:tpc_add"])
        r = calls(opts, pid=loop.pid, timeout=60)
        alive = loop.poll() is None
        if i % 2:
            got = {f[1]: v[0] for f, v in counts(r).items()}
            ok = all(got.get(f, 0) > 0 for f in ("tpc_add", "tpc_word", "tpc_sleep"))
        else:
            cs = r.calls
            ok = cs and all(c.function == "tpc_add" and c.retint == sum(c.args) for c in cs)
        check(r.rc == 0 and alive and ok and not r.err,
              "attach cycle %d: calls traced right, detached" % i, r)
        check(alive and lib_text(loop.pid) == text and text,
              "attach cycle %d: the library's code as it was before" % i)
        if not alive:
            break
    st = open("/proc/%d/status" % loop.pid).read() if loop.poll() is None else ""
    check(re.search(r"^TracerPid:\s+0$", st, re.M), "attach: the target is left untraced")
    loop.send_signal(signal.SIGUSR1)
    out, err = loop.communicate(timeout=60)
    m = re.search(r"^calls (\d+) failures (\d+)$", out, re.M)
    check(loop.returncode == 0 and m and int(m.group(2)) == 0,
          "attach: the target survived and all its checks passed", out[-300:] + err[-300:])
finally:
    if loop.poll() is None:
        loop.kill()
        loop.wait()

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
    cp = calls(sel + ["-c", "--json"], prog)
    got = {k[1]: v for k, v in counts(ca).items()}
    check(nat.rc == 0 and ca.rc == 0 and ca.out == nat.out and not ca.err,
          "gzip -9: output identical to the native run's", ca)
    check(counts(ca) == counts(cp) and got.get("read", (0,))[0] > 1 and "memcmp" in got,
          "gzip -9: -c of libc functions (IFUNCs too): the ptrace engine's counts",
          "agent %r\nptrace %r" % (counts(ca), counts(cp)))

# What the engine does not do yet is refused with one line naming the option.
for opt in (["--bt"], ["-f"], ["--plugin", "memory"], ["-S"], ["--entry"], ["--trace", "/tmp"]):
    r = calls(AGENT + LIB + opt, [target("calls-lazy"), "3"])
    lines = r.err.strip().splitlines()
    check(r.rc == 2 and len(lines) == 1 and opt[0] in lines[0],
          "%s with --engine agent: refused in one line naming it" % opt[0], r)
done()
