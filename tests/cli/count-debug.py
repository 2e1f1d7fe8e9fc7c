#!/usr/bin/env python3
"""`tracepad count --by function` names the functions of stripped objects from their separate
debug files: with libc6-dbg installed (ld.so's and libc's symbol tables under
/usr/lib/debug/.build-id), at least 95% of /bin/true's instructions are in named functions."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, done, skip_all  # noqa: E402


def installed(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return r.returncode == 0 and "install ok installed" in r.stdout


if not installed("libc6-dbg"):
    skip_all("libc6-dbg is not installed (apt-get install libc6-dbg)")

tp = os.environ["TRACEPAD"]
with tempfile.TemporaryDirectory(prefix="tp-count-debug-") as tmp:
    rep_path = os.path.join(tmp, "true.json")
    r = subprocess.run([tp, "count", "--by", "function", "--top", "0", "--json", "-o", rep_path,
                        "--", "/bin/true"], capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, "count --by function -- /bin/true exits 0", r.stderr)
    rep = json.load(open(rep_path))
    entries = rep["histogram"]["entries"]
    total = sum(e["count"] for e in entries)
    unnamed = sum(e["count"] for e in entries if e["key"].endswith(":?"))
    check(total == rep["instructions"], "the histogram covers every instruction",
          "%d in the histogram, %d counted" % (total, rep["instructions"]))
    named = 100.0 * (total - unnamed) / total if total else 0
    check(named >= 95.0, "%.1f%% of the instructions are in named functions" % named,
          "unnamed: " + ", ".join("%s %d" % (e["key"], e["count"]) for e in entries
                                  if e["key"].endswith(":?")))
    # Static functions: only the debug file's .symtab names them.
    keys = set(e["key"] for e in entries)
    for key in ("ld-linux-x86-64.so.2:do_lookup_x", "libc.so.6:__libc_start_call_main"):
        check(key in keys, key + " named from the debug file")
done()
