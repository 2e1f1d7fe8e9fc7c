#!/usr/bin/env python3
"""markers record --fields POINT=NAME,...: fields named explicitly by position, over the
names the formats give (an empty entry keeps the format's; a format's name given to another
field goes back to aN; the first --fields whose POINT glob matches applies; extra names are
left out), as tracepad dump and babeltrace2 read them, values and text unchanged; bad
names are refused in one line."""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, done, need_peer  # noqa: E402

tp = os.environ["TRACEPAD"]
target = sys.argv[1]
VALS = {"net_recv": lambda i: [100 + i, "peer"], "net_len": lambda i: [i, -i],
        "net_dup": lambda i: [i, 2 * i, 3 * i], "net_plain": lambda i: [i]}
TEXT = {"net_recv": lambda i: "bytes=%d from=peer" % (100 + i),
        "net_len": lambda i: "len: %d %d" % (i, -i),
        "net_dup": lambda i: "x=%d x=%d int=%d" % (i, 2 * i, 3 * i),
        "net_plain": lambda i: "plain %d" % i}


def record(fields):
    d = os.path.join(tempfile.mkdtemp(prefix="tp-markers-fields-"), "t")
    argv = [tp, "markers", "record", "--trace", d]
    for f in fields:
        argv += ["--fields", f]
    r = subprocess.run(argv + ["--", target], capture_output=True, text=True, timeout=30)
    return d, r


cases = [
    (["net_plain=count", "net_len=,neg", "net_recv=size"],
     {"net_plain": ["count"], "net_len": ["len", "neg"], "net_recv": ["size", "from"],
      "net_dup": ["x", "a1", "a2"]}),
    # The format's "from" given to the first field: the second goes back to a1.
    (["net_recv=from", "net_plain=p,q,r"],
     {"net_recv": ["from", "a1"], "net_plain": ["p"], "net_len": ["len", "a1"],
      "net_dup": ["x", "a1", "a2"]}),
    # The first match applies.
    (["net_plain=p", "net_*=v"],
     {"net_plain": ["p"], "net_len": ["v", "a1"], "net_dup": ["v", "a1", "a2"],
      "net_recv": ["v", "from"]}),
]
for fields, want in cases:
    d, r = record(fields)
    what = "--fields " + " --fields ".join(fields)
    check(r.returncode == 0 and "fired 12" in r.stdout, what + ": the target ran",
          r.stdout + r.stderr)
    dr = subprocess.run([tp, "dump", "--json", d], capture_output=True, text=True, timeout=30)
    evs = [json.loads(ln) for ln in dr.stdout.splitlines() if ln.startswith("{")]
    seen = {}
    for e in evs:
        seen.setdefault(e["name"], []).append(e)
    got = {k: [list(e["fields"])[1:] for e in v] for k, v in seen.items()}
    check(got == {k: [v] * 3 for k, v in want.items()}, what + ": dump's field names", got)
    vals = {k: [list(e["fields"].values())[1:] for e in v] for k, v in seen.items()}
    check(vals == {k: [f(i) for i in range(3)] for k, f in VALS.items()},
          what + ": the values unchanged", vals)
    texts = {k: [e.get("text") for e in v] for k, v in seen.items()}
    check(texts == {k: [f(i) for i in range(3)] for k, f in TEXT.items()},
          what + ": the texts unchanged", texts)
    if need_peer("babeltrace2", "babeltrace2", what + ": babeltrace2's field names"):
        b = subprocess.run(["babeltrace2", d], capture_output=True, text=True, timeout=30)
        bt = {}
        for ln in b.stdout.splitlines():
            m = re.search(r" (\w+): \{ producer_id = \d+ \}, \{ pid = \d+, tid = \d+ \}, "
                          r"\{ (.*) \}$", ln)
            if m:
                bt.setdefault(m.group(1), []).append(re.findall(r"(\w+) = ", m.group(2))[1:])
        check(bt == {k: [v] * 3 for k, v in want.items()}, what + ": babeltrace2's names", bt)

for bad in (["record", "--fields", "net_plain"], ["record", "--fields", "net_plain=int"],
            ["record", "--fields", "net_plain=n,n"], ["record", "--fields", "net_plain=a3"],
            ["record", "--fields", "=n"], ["record", "--fields", "net_plain=1n"],
            ["list", "--fields", "net_plain=n"]):
    r = subprocess.run([tp, "markers"] + bad + ["--trace", "/nonexistent/t", "--", target],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
          and "fired" not in r.stdout, "markers %s: refused in one line" % " ".join(bad),
          r.stderr)
done()
