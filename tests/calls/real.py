#!/usr/bin/env python3
"""tracepad calls -c on real programs nobody here wrote (gzip -9, python3 -c pass, ls -l /)
with the default selection and the engine of argv[2]: output byte-identical to the untraced
run, the program's stderr too (tracepad says nothing), exit status passed through, and
summaries listing functions those programs are known to call."""
import json
import os
import re
import shutil
import subprocess
import tempfile

from tpcalls import ENGINE, check, done, well_formed, TRACEPAD

# A real python3 ELF, not a pyenv shim script.
PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else shutil.which("python3")


def native(argv):
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)


def traced(opts, argv):
    """tracepad calls OPTS -o TMP -- ARGV (bytes); (process or None on timeout, output)."""
    fd, path = tempfile.mkstemp(prefix="tp-calls-real-")
    os.close(fd)
    os.unlink(path)
    try:
        p = subprocess.run([TRACEPAD, "calls", "--engine", ENGINE] + opts + ["-o", path, "--"]
                           + argv,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=240)
        text = open(path, errors="replace").read() if os.path.exists(path) else ""
    except subprocess.TimeoutExpired:
        return None, ""
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return p, text


def summary(text):
    try:
        s = json.loads(text)
    except ValueError:
        return None
    return s if isinstance(s, dict) else None


def stable(out):
    """ls -l /: the link count of /proc follows the number of processes and /tmp changes
    with every test running next to this one; every other byte must be the same."""
    return re.sub(rb"^.* (proc|tmp)$", rb"(\1)", out, flags=re.M)


def names(s):
    return {f.get("function"): f for f in (s or {}).get("functions", [])}


tmp = tempfile.mkdtemp(prefix="tp-calls-real-")
try:
    data = os.path.join(tmp, "data")
    with open(data, "wb") as f:  # deterministic, compressible, ~1.5 MB
        for i in range(40000):
            f.write(b"line %d of the tracepad calls test %x\n" % (i, i * 2654435761 % 2**32))

    cases = [
        ("gzip -9 -c", ["gzip", "-9", "-c", data], ("read", "write")),
        ("python3 -c pass", [PY, "-c", "pass"], ("malloc", "free")),
        # not /: other tests make directories in /tmp meanwhile, whose mtime and link count
        # ls -l shows
        ("ls -l /usr", ["ls", "-l", "/usr"], ("opendir", "readdir", "malloc")),
    ]
    runs = [(c, o) for c in cases for o in (["-c", "--json"], ["-c"])]
    for (what, argv, known), opts in runs:
        nat = native(argv)
        w = "%s %s %s" % (ENGINE, what, " ".join(opts))
        p, text = traced(opts, argv)
        if not check(p is not None, w + ": completes"):
            continue
        check(p.returncode == nat.returncode, w + ": exit status %d passed through"
              % nat.returncode, "got %r, stderr %r" % (p.returncode, p.stderr[-300:]))
        norm = stable if argv[0] == "ls" else bytes
        check(norm(p.stdout) == norm(nat.stdout), w + ": stdout byte-identical "
              "(%d bytes)" % len(nat.stdout), "got %d bytes" % len(p.stdout))
        check(p.stderr == nat.stderr, w + ": the program's stderr unchanged, nothing said",
              p.stderr[-300:])
        if "--json" in opts:
            s = summary(text)
            probs = well_formed(s)
            check(not probs, w + ": a well-formed summary", "\n".join(probs[:5])
                  + "\n" + text[:300])
            fs = names(s)
            miss = [k for k in known if not (k in fs and fs[k]["calls"] > 0)]
            check(not miss, w + ": calls of %s counted" % ", ".join(known),
                  "missing %r; functions: %r" % (miss, sorted(fs)[:40]))
            tot = [f.get("total_ns", 0) for f in (s or {}).get("functions", [])]
            check(tot == sorted(tot, reverse=True), w + ": most total time first")
        else:
            miss = [k for k in known if k not in text]
            check(text and not miss, w + ": the summary table lists %s" % ", ".join(known),
                  text[:600])

    # Only what -e selects; gzip's reads never fail here, so no errors are counted.
    argv = ["gzip", "-9", "-c", data]
    nat = native(argv)
    p, text = traced(["-c", "--json", "-e", "libc:read,libc:write"], argv)
    fs = names(summary(text))
    check(p is not None and p.returncode == 0 and p.stdout == nat.stdout,
          "gzip -e libc:read,libc:write: completes, output identical")
    check(set(fs) == {"read", "write"} and fs["read"]["calls"] >= 2
          and fs["read"]["errors"] == 0 and fs["write"]["calls"] >= 1,
          "gzip -e libc:read,libc:write: only those, read called and never failing", text[:400])
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done()
