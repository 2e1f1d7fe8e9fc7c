#!/usr/bin/env python3
"""Every option that `tracepad COMMAND --help` lists is documented in docs/tracepad-COMMAND.1,
`tracepad --help` lists every command that has a man page, and every command it lists has
one and is described in tracepad.1; every field of the JSON that `tracepad calls -c --json`
and the memory plugin's json report write (for targets that give every kind of field) is
named in tracepad-calls.1."""
import json
import os
import re
import subprocess
import sys
import tempfile

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


def keys(obj, out):
    """Every key of the JSON value @obj, at any depth."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(k)
            keys(v, out)
    elif isinstance(obj, list):
        for v in obj:
            keys(v, out)
    return out


def documented(man, key):
    """@key is named in the man page source as a JSON key (\\(dqKEY\\(dq) or in bold."""
    return ("\\(dq%s\\(dq" % key) in man or re.search(
        r"^\.B[IR]?\s+\\?\(?(?:dq)?%s\b" % re.escape(key), man, re.M) is not None


build = os.environ.get("TP_BUILD_ROOT", "")
calls_man = open(os.path.join(docs, "tracepad-calls.1")).read()
runs = [  # (what, argv before -o, the field names it must give)
    ("calls -c --json -f (functions, processes, exit and signal events)",
     ["-f", "-c", "--json", "-e", "calls-habits:h_inner", "--",
      os.path.join(build, "tests", "calls", "calls-habits"), "fork"],
     {"functions", "processes", "returns", "events", "siginfo"}),
    ("calls -c --json -f (exec, killed events)",
     ["-f", "-c", "--json", "--", os.path.join(build, "tests", "calls", "calls-procev")],
     {"argv", "core_dumped"}),
    ("the memory plugin's json report (lost records)",
     ["-c", "-e", "!*", "--plugin", "memory:json", "--",
      os.path.join(build, "tests", "calls-memory", "mem-leak3")],
     {"memory", "records", "backtrace"}),
]
with tempfile.TemporaryDirectory(prefix="tp-docs-") as tmp:
    for what, argv, must in runs:
        out = os.path.join(tmp, "out.json")
        subprocess.run([tp, "calls", "-o", out] + argv, capture_output=True, timeout=120,
                       cwd=tmp)
        found = set()
        try:
            text = open(out).read()
        except OSError:
            text = ""
        for ln in text.splitlines() + [text]:
            try:
                keys(json.loads(ln), found)
            except ValueError:
                pass
        check(must <= found, "%s: the JSON has %s" % (what, sorted(must)),
              "found %s" % sorted(found))
        for k in sorted(found):
            check(documented(calls_man, k), "tracepad-calls.1 names the JSON field %r (%s)"
                  % (k, what))
done()
