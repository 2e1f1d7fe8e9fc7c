#!/usr/bin/env python3
"""tracepad calls --plugin PATH[:ARGS]: a test plugin (plugin.c) selects tpc_add itself, counts
its callbacks and prints them at fini; the counts must be the program's exact numbers.  With
the engine of argv[2]."""
import re
import signal

from tpcalls import ENGINE, check, done, calls, run, target

plugin = target("libtpcalls-plugin.so")
N = 300


def counts(text):
    m = re.search(r"^tpcalls-plugin (.*)$", text, re.M)
    return dict(kv.split("=", 1) for kv in m.group(1).split()) if m else {}


want_sum = sum(i + i % 7 + 1 for i in range(N))
r = calls(["--plugin", plugin + ":hello", "-e", "libtpcalls:tpc_word"],
          [target("calls-lazy"), str(N)])
c = counts(r.text)
check(r.rc == 0 and c, "the plugin loaded and printed its counts at fini", r)
check(c.get("args") == "hello", "the plugin got its ARGS", c)
check(c.get("add_calls") == str(N) and c.get("add_rets") == str(N),
      "call() and ret() once per tpc_add call (%d), selected by the plugin" % N, c)
check(c.get("calls") == str(N + 4) and c.get("rets") == str(N + 4),
      "call() and ret() for tpc_word too (-e): %d in all" % (N + 4), c)
check(c.get("add_sum") == str(want_sum) and c.get("bad") == "0",
      "return values and arguments seen by the plugin are right", c)
check(c.get("proc_start") == "1" and c.get("proc_exit") == "1",
      "one process start and one process exit", c)
check(len([x for x in r.calls if x.function == "tpc_add"]) == N,
      "the plugin's selection is traced in the output too", len(r.calls))

# A plugin that crashes tracepad: the program gets its bytes and return addresses back and
# runs to its end untraced, with the output of an untraced run.
native = run([target("calls-lazy"), str(N)])
r = calls(["--plugin", plugin + ":crash=50", "-e", "libtpcalls:tpc_word"],
          [target("calls-lazy"), str(N)])
check(r.rc == -signal.SIGSEGV and "crashed; restoring the programs and detaching" in r.err,
      "a plugin's fault kills tracepad with SIGSEGV, which says so", r)
nopid = lambda out: re.sub(r"^pid \d+$", "pid N", out, flags=re.M)  # noqa: E731
check(nopid(r.out) == nopid(native.out) and native.rc == 0 and "calls 300" in r.out,
      "the program then runs to its end untraced, its output unchanged", (r.out, native.out))
check(len([x for x in r.calls if x.function == "tpc_add"]) < N,
      "tracing stopped at the crash", len(r.calls))

NO_PLUGIN_F = ("agent engine: --plugin with -f is refused (issue 12)" if ENGINE == "agent"
               else None)
r = calls(["-f", "--plugin", plugin, "-e", "libtpcalls:tpc_word"],
          [target("calls-multi"), "forkexec", target("calls-lazy")])
c = counts(r.text)
check(r.rc == 0 and c.get("args") == "(none)" and c.get("add_calls") == "65"
      and c.get("add_rets") == "65" and c.get("bad") == "0",
      "-f: 65 tpc_add calls across fork and exec, no ARGS", c or r, todo=NO_PLUGIN_F)
check(c.get("proc_start") == "3" and c.get("proc_exit") == "2",
      "-f: processes started (parent, child, exec'd image) and exited (2)", c,
      todo=NO_PLUGIN_F)

r = calls(["--plugin", plugin, "-e", "libtpcalls:tpc_word"], [target("calls-multi"), "threads"])
c = counts(r.text)
check(r.rc == 0 and c.get("add_calls") == str(300 * (2 + 3 + 4 + 5)) and c.get("bad") == "0",
      "threads: every call of the 4 threads", c or r)
check(c.get("thread_start") in ("4", "5"), "threads: the 4 new threads started", c)
done()
