#!/usr/bin/env python3
"""memory plugin at detach: `tracepad calls -p PID --plugin memory` ended by SIGINT prints the
report of what it gathered while attached, as at an exit: a target that, while traced, loses a
50-byte block, allocates and frees 10 blocks and keeps a 100-byte one gets "in use at detach:
150 bytes in 2 blocks", 50 bytes definitely lost, 100 still reachable, 12 allocs and 10
frees; the JSON report says "at": "detach".  The target then runs to its end."""
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memlib import ENGINE, TRACEPAD, check, done, parse, target  # noqa: E402


def readline(f, timeout):
    buf = b""
    end = time.monotonic() + timeout
    while not buf.endswith(b"\n") and select.select([f], [], [], max(0, end - time.monotonic()))[0]:
        b = os.read(f.fileno(), 1)
        if not b:
            break
        buf += b
    return buf.decode(errors="replace")


def run(plugin):
    prog = subprocess.Popen([target("mem-detach")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = readline(prog.stdout, 20)
    with tempfile.NamedTemporaryFile(prefix="tp-mem-detach-", suffix=".txt") as f:
        tp = subprocess.Popen([TRACEPAD, "calls"] + ENGINE + ["-e", "mem-detach:tick", "-o", f.name,
                               "--plugin", plugin, "-p", str(prog.pid)],
                              stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        end = time.monotonic() + 60
        # attached once a tick() line is written
        while time.monotonic() < end and tp.poll() is None and "tick()" not in open(f.name).read():
            time.sleep(0.01)
        prog.stdin.write(b"go\n")
        prog.stdin.flush()
        second = readline(prog.stdout, 60)
        tp.send_signal(signal.SIGINT)
        try:
            tp.wait(timeout=60)
        except subprocess.TimeoutExpired:
            tp.kill()
            tp.wait()
        text = open(f.name, errors="replace").read()
    prog.stdin.write(b"end\n")
    prog.stdin.close()
    rest = prog.stdout.read().decode(errors="replace")
    prog.wait(timeout=60)
    return first, second, tp, text, prog, rest


first, second, tp, text, prog, rest = run("memory:kinds=all")
check(first.startswith("pid ") and second == "done\n" and tp.returncode == 0,
      "calls -p --plugin memory, ended by SIGINT after the target worked: exit 0",
      (first, second, tp.returncode, tp.stderr.read()))
rep = parse([l for l in text.splitlines() if l.startswith("memory:")],
            re.compile(r"^memory:\s+#\d+ 0x[0-9a-f]+ (.*)$"))
m = re.search(r"in use at detach: ([\d,]+) bytes in ([\d,]+) blocks", text)
check(m and (int(m.group(1)), int(m.group(2))) == (150, 2),
      "the report at detach: in use at detach: 150 bytes in 2 blocks", text[-1500:])
check(rep.kinds.get("definitely lost") == (50, 1) and rep.kinds.get("still reachable") == (100, 1)
      and rep.kinds.get("indirectly lost") == (0, 0) and rep.kinds.get("possibly lost") == (0, 0),
      "definitely lost: the 50-byte block; still reachable: the 100-byte one", rep.totals())
check(rep.usage == (12, 10, 50 + 100 + sum(range(16, 26))),
      "total heap usage while attached: 12 allocs, 10 frees", rep.usage)
check(prog.returncode == 0 and rest == "", "the target ran to its end", (prog.returncode, rest))

first, second, tp, text, prog, rest = run("memory:json")
js = [json.loads(l) for l in text.splitlines() if l.startswith('{"memory"')]
check(tp.returncode == 0 and len(js) == 1 and js[0]["memory"]["at"] == "detach" and
      js[0]["memory"]["in_use"] == {"bytes": 150, "blocks": 2} and
      js[0]["memory"]["freeres"] is False,
      "the JSON report at detach: \"at\": \"detach\", 150 bytes in 2 blocks in use", text[-1500:])
done()
