#!/usr/bin/env python3
"""Bad options get one line on stderr, prefixed like every error of the command
("tracepad CMD: ..."), naming what is wrong, and exit status 2: an unknown long or short
option, an option without its value, a value given to an option that takes none."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, done  # noqa: E402

tp = os.environ["TRACEPAD"]
top = subprocess.run([tp, "--help"], capture_output=True, text=True)
cmds = [c for c in re.findall(r"^  (\w+)\s", top.stdout, re.M) if c != "help"]
check(len(cmds) >= 6, "tracepad --help lists the commands", cmds)


def one_line(args, cmd, what):
    r = subprocess.run([tp] + args, capture_output=True, text=True, timeout=30)
    lines = r.stderr.splitlines()
    check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("tracepad %s: " % cmd)
          and what in lines[0] and not r.stdout,
          "tracepad %s: one line saying %r, status 2" % (" ".join(args), what),
          (r.returncode, r.stdout, r.stderr))


for cmd in cmds:
    sub = ["list"] if cmd == "markers" else []
    one_line([cmd] + sub + ["--no-such-option"], cmd, "unknown option '--no-such-option'")
    one_line([cmd] + sub + ["-Z"], cmd, "unknown option '-Z'")
    one_line([cmd] + sub + ["-o" if cmd != "markers" else "-p"], cmd,
             "option '%s' needs a value" % ("-o" if cmd != "markers" else "-p"))
one_line(["calls", "--select"], "calls", "option '--select' needs a value")
one_line(["calls", "--json=yes", "--", "true"], "calls", "option '--json' takes no value")
one_line(["markers"], "markers", "which subcommand?")
done()
