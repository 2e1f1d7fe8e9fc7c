#!/usr/bin/env python3
"""tracepad calls --engine agent prints arguments and return values byte for byte as the
ptrace engine does, where they come from the program's memory or its vector registers:
strings in registers and stack slots (cut at -s), a string that runs into an unmapped page,
NULL and unreadable pointers, write's buffer, float and double arguments (past the eighth xmm
register too), float, long double and string return values; with prototypes from DWARF at
-O2 and -O0.  The program's output is unchanged."""
import re

from tpcalls import check, done, calls, run, target

TID = re.compile(r"^\[\d+\]", re.M)

for exe in ("calls-args", "calls-args-O0"):
    prog = [target(exe)]
    nat = run(prog)
    sel = ["-e", "%s:a_*,%s:r_*,libc:write" % (exe, exe)]
    for size in (None, 12, 4):
        opts = sel + (["-s", str(size)] if size else [])
        what = "%s%s" % (exe, " -s %d" % size if size else "")
        p = calls(["--engine", "ptrace"] + opts, prog)
        a = calls(["--engine", "agent"] + opts, prog)
        check(nat.rc == 0 and a.rc == 0 and p.rc == 0 and a.out == nat.out and not a.err,
              what + ": output and exit status unchanged under the agent", a)
        check(TID.sub("[T]", a.text) == TID.sub("[T]", p.text) and len(a.calls) == 14,
              what + ": the agent's lines are the ptrace engine's, byte for byte",
              "agent:\n%s\nptrace:\n%s" % (a.text, p.text))
        if size is None:
            got = {c.function + "(" + c.args_text + ")": c.ret for c in a.calls}
            want = {
                'a_stack(1, 2, 3, 4, 5, 6, "seventh", 8, "ninth\\targ")': "254",
                'a_str("plain")': "112",
                'a_str("edged"...)': "101",
                'a_str("ed"...)': "101",
                "a_str(NULL)": "-1",
                "a_str(0x10)": "-1",
                "a_fp(0.5, 1.25, 3, -2.5, 0.001, 3, 4, 5, 6, 1e+300)": "1e+300",
                "r_float(3)": "0.75",
                "r_ldouble(3)": "0.375",
                "r_word(0)": '""',
                "r_word(1)": '"short"',
                "r_word(2)": '"a string longer than thirty-two "...',
                'write(1, "written\\n\\0bytes", 14)': "14",
            }
            check(all(got.get(k) == v for k, v in want.items()),
                  what + ": strings, buffers, floats and returns as they are in the program",
                  "\n".join("%s = %s (want %s)" % (k, got.get(k), v) for k, v in want.items()
                            if got.get(k) != v))
# --bt: the entry's pieces and the stack copy the unwinder reads in one record: the same
# lines and frames as the ptrace engine's.
prog = [target("calls-args")]
opts = ["-e", "calls-args:a_*,calls-args:r_*", "--bt=3"]
p = calls(["--engine", "ptrace"] + opts, prog)
a = calls(["--engine", "agent"] + opts, prog)
check(a.rc == 0 and TID.sub("[T]", a.text) == TID.sub("[T]", p.text)
      and a.text.count(" at calls-args:main") == 12,
      "--bt=3: strings, floats and frames, the ptrace engine's lines",
      "agent:\n%s\nptrace:\n%s" % (a.text, p.text))
done()
