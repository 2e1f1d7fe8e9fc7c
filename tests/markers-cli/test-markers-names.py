#!/usr/bin/env python3
"""Static tracepoint fields are named after their format's words ("bytes=%d from=%s": bytes,
from; "len: %zu": len), the others stay aN (a word used twice, a TSDL keyword, none), as
tracepad dump and babeltrace2 read them; the formatted text is unchanged."""
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
d = os.path.join(tempfile.mkdtemp(prefix="tp-markers-names-"), "t")
r = subprocess.run([tp, "markers", "record", "--trace", d, "--", target], capture_output=True,
                   text=True, timeout=30)
check(r.returncode == 0 and "fired 12" in r.stdout, "record: the target ran", r.stdout + r.stderr)
dr = subprocess.run([tp, "dump", "--json", d], capture_output=True, text=True, timeout=30)
evs = [json.loads(ln) for ln in dr.stdout.splitlines() if ln.startswith("{")]
check(dr.returncode == 0 and len(evs) == 12, "dump: the 12 events", dr.stderr)
want = {
    "net_recv": (["fmt", "bytes", "from"], lambda i: [100 + i, "peer"], "bytes=%d from=peer"),
    "net_len": (["fmt", "len", "a1"], lambda i: [i, -i], "len: %d %d"),
    "net_dup": (["fmt", "x", "a1", "a2"], lambda i: [i, 2 * i, 3 * i], "x=%d x=%d int=%d"),
    "net_plain": (["fmt", "a0"], lambda i: [i], "plain %d"),
}
seen = {}
for e in evs:
    seen.setdefault(e["name"], []).append(e)
for cls, (names, vals, text) in want.items():
    es = seen.get(cls, [])
    check(len(es) == 3 and all(list(e["fields"]) == names for e in es),
          "dump: %s's fields are %s" % (cls, names[1:]), [list(e["fields"]) for e in es])
    got = [list(e["fields"].values())[1:] for e in es]
    check(got == [vals(i) for i in range(3)], "dump: %s's values" % cls, got)
    texts = [e.get("text") for e in es]
    check(texts == [text % tuple(vals(i)[:text.count("%d")]) if "%" in text else text
                    for i in range(3)], "dump: %s's text is its format applied" % cls, texts)
if need_peer("babeltrace2", "babeltrace2", "babeltrace2: the fields' names"):
    b = subprocess.run(["babeltrace2", d], capture_output=True, text=True, timeout=30)
    bt = {}
    for ln in b.stdout.splitlines():
        m = re.search(r" (\w+): \{ producer_id = \d+ \}, \{ pid = \d+, tid = \d+ \}, \{ (.*) \}$",
                      ln)
        if m:
            bt.setdefault(m.group(1), []).append(re.findall(r"(\w+) = ", m.group(2)))
    for cls, (names, _, _) in want.items():
        check(bt.get(cls) == [names] * 3, "babeltrace2: %s's fields are %s" % (cls, names[1:]),
              bt.get(cls))
done()
