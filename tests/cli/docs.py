#!/usr/bin/env python3
"""Every option that `tracepad COMMAND --help` lists is documented in docs/tracepad-COMMAND.1,
`tracepad --help` lists every command that has a man page, and every command it lists has
one and is described in tracepad.1."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, done  # noqa: E402

tp = os.environ["TRACEPAD"]
docs = os.path.join(os.environ["TP_SOURCE_ROOT"], "docs")
top = subprocess.run([tp, "--help"], capture_output=True, text=True)
check(top.returncode == 0, "tracepad --help exits 0")
for page in sorted(os.listdir(docs)):
    m = re.match(r"tracepad-(\w+)\.1$", page)
    if not m:
        continue
    cmd = m.group(1)
    check(re.search(r"^\s+%s\s" % cmd, top.stdout, re.M) is not None,
          "tracepad --help lists %s" % cmd)
    h = subprocess.run([tp, cmd, "--help"], capture_output=True, text=True)
    check(h.returncode == 0 and "usage: tracepad %s" % cmd in h.stdout,
          "tracepad %s --help prints its usage" % cmd)
    man = open(os.path.join(docs, page)).read().replace("\\-", "-")
    for opt in sorted(set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", h.stdout))):
        check(opt in man, "%s: option %s is in the man page" % (page, opt))
# The other way: every command of `tracepad --help` has its page, and tracepad(1) names it.
main_page = open(os.path.join(docs, "tracepad.1")).read().replace("\\-", "-")
for cmd in re.findall(r"^  (\w+)\s", top.stdout, re.M):
    if cmd == "help":
        continue
    check(os.path.exists(os.path.join(docs, "tracepad-%s.1" % cmd)),
          "%s (in tracepad --help) has docs/tracepad-%s.1" % (cmd, cmd))
    check(re.search(r"^\.B %s$" % cmd, main_page, re.M) is not None
          and "tracepad-%s (1)" % cmd in main_page,
          "tracepad.1 describes %s and refers to tracepad-%s(1)" % (cmd, cmd))
done()
