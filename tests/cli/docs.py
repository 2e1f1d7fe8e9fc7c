#!/usr/bin/env python3
"""Every option that `tracepad COMMAND --help` lists is an option entry of
docs/tracepad-COMMAND.1 (the tag of a .TP paragraph names it as a token of its own, written
with roff's \\-), and every dashed option entry of the page is in --help; `tracepad --help`
lists every command that has a man page, and every command it lists has one and is described
in tracepad.1; every field of the JSON that `tracepad calls -c --json` and the memory plugin's
json report write (for targets that give every kind of field) is named in tracepad-calls.1,
and those of `count --json`, `dump --json` and `report --json` in their pages."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, done  # noqa: E402

# An option as --help and the man pages spell it: -s, -tt, --time-filter.
OPT = r"--?[a-zA-Z][a-zA-Z0-9]*(?:-[a-z0-9]+)*"


def help_options(text):
    """The options of --help's option list: the first column of its lines (indented at most 6,
    up to two spaces), so that an option named in a description (`-S's`, gdb's -batch) is
    not taken for one of the command's."""
    opts = set()
    for m in re.finditer(r"^ {2,6}(-\S.*?)(?: {2,}|$)", text, re.M):
        opts.update(re.findall(r"(?<![\w-])(%s)(?![\w])" % OPT, m.group(1)))
    return opts


def man_options(src):
    """The options that the page's entries name: in the tag line of each .TP, every roff
    token \\-X or \\-\\-XY-Z standing on its own (between spaces, quotes, commas, brackets,
    '=' or font changes), as -X and --XY-Z."""
    opts = set()
    lines = src.splitlines()
    for i, ln in enumerate(lines[:-1]):
        if not ln.startswith(".TP"):
            continue
        tag = re.sub(r"\\f(?:\(..|\[[^]]*\]|.)", " ", lines[i + 1])
        tag = re.sub(r"^\.\w+", " ", tag).replace('"', " ")
        for tok in re.findall(r"(?:^|(?<=[\s,\[]))((?:\\-){1,2}[a-zA-Z][a-zA-Z0-9]*"
                              r"(?:\\-[a-z0-9]+)*)(?=[\s,=\[\]]|$)", tag):
            opts.add(tok.replace("\\-", "-"))
    return opts


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
    entries = man_options(open(os.path.join(docs, page)).read())
    listed = help_options(h.stdout)
    check(listed, "tracepad %s --help lists options" % cmd, h.stdout)
    for opt in sorted(listed):
        check(opt in entries, "%s: option %s has an entry in the man page" % (page, opt),
              "the page's entries: %s" % " ".join(sorted(entries)))
    for opt in sorted(entries - listed):
        check(False, "%s: the man page's option %s is in tracepad %s --help" % (page, opt, cmd),
              "--help lists: %s" % " ".join(sorted(listed)))
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
calls_dir = os.path.join(build, "tests", "calls")
tmp = tempfile.mkdtemp(prefix="tp-docs-")
tptrace = os.path.join(tmp, "tracept")   # frames with a pc resolved through .maps
mktrace = os.path.join(tmp, "markers")   # static tracepoints' events, with their text
for what, argv, d in (
        ("trace --trace", ["trace", "-q", "-t", "main", "--trace", tptrace, "--",
                           os.path.join(build, "tests", "tracept", "tracept-loop-O0")], tptrace),
        ("markers record", ["markers", "record", "--trace", mktrace, "--",
                            os.path.join(build, "tests", "markers-cli", "markers-names-target")],
         mktrace)):
    r = subprocess.run([tp] + argv, capture_output=True, text=True, timeout=120, cwd=tmp)
    check(r.returncode == 0 and os.path.exists(os.path.join(d, "metadata")),
          "%s writes a trace for dump and report" % what, r.stderr[-800:])
demo = os.path.join(build, "examples", "demo")
ALL, TOP = "every key", "top-level keys"
runs = [  # (what, command and its arguments but -o, page, the field names it must give, keys)
    ("calls -c --json -f (functions, processes, exit and signal events)",
     ["calls", "-f", "-c", "--json", "-e", "calls-habits:h_inner", "--",
      os.path.join(calls_dir, "calls-habits"), "fork"], "calls",
     {"functions", "processes", "returns", "events", "siginfo"}, ALL),
    ("calls -c --json -f (exec, killed events)",
     ["calls", "-f", "-c", "--json", "--", os.path.join(calls_dir, "calls-procev")], "calls",
     {"argv", "core_dumped"}, ALL),
    ("the memory plugin's json report (lost records)",
     ["calls", "-c", "-e", "!*", "--plugin", "memory:json", "--",
      os.path.join(build, "tests", "calls-memory", "mem-leak3")], "calls",
     {"memory", "records", "backtrace"}, ALL),
    ("count --json --start main --by function (region, histogram)",
     ["count", "--json", "--start", "main", "--by", "function", "--top", "2", "--", demo],
     "count", {"program", "pid", "threads", "tid", "region", "stop", "histogram", "by",
               "entries", "key", "count"}, ALL),
    ("count --json --engine trapflag (startup)",
     ["count", "--json", "--engine", "trapflag", "--", "/bin/true"], "count",
     {"startup", "where", "counted_by", "status"}, ALL),
    ("count --json of env /bin/true --by function (exec)",
     ["count", "--json", "--by", "function", "--top", "1", "--", "env", "/bin/true"], "count",
     {"exec", "exec_followed"}, ALL),
    ("count --json of a shell that forks", ["count", "--json", "--", "sh", "-c", "/bin/true; :"],
     "count", {"forked"}, ALL),
    ("count --json of a program killed (signal, warning)",
     ["count", "--json", "--", "sh", "-c", "kill -9 $$"], "count", {"signal", "warning"}, ALL),
    # a dump line's fields and symbols are keyed by the trace's own field names
    ("dump --json (symbols)", ["dump", "--json", tptrace], "dump",
     {"time", "ts", "rel_ns", "stream", "pid", "tid", "name", "fields", "symbols"}, TOP),
    ("dump --json (text)", ["dump", "--json", mktrace], "dump", {"text"}, TOP),
    ("report --json", ["report", "--json", tptrace], "report",
     {"trace", "nr_streams", "events", "discarded", "first_ns", "last_ns", "first", "last",
      "duration_ns", "events_per_second", "streams", "index", "file", "classes", "name",
      "count"}, ALL),
]
fields = {}  # page: {field: the first run that gave it}
for what, argv, page, must, depth in runs:
    out = os.path.join(tmp, "out.json")
    if os.path.exists(out):
        os.unlink(out)
    subprocess.run([tp, argv[0], "-o", out] + argv[1:], capture_output=True, timeout=120,
                   cwd=tmp)
    found = set()
    try:
        text = open(out).read()
    except OSError:
        text = ""
    for ln in text.splitlines() + [text]:
        try:
            obj = json.loads(ln)
        except ValueError:
            continue
        if depth == TOP:
            found.update(obj)
        else:
            keys(obj, found)
    check(must <= found, "%s: the JSON has %s" % (what, sorted(must)),
          "found %s" % sorted(found))
    for k in found:
        fields.setdefault(page, {}).setdefault(k, what)
for page, found in sorted(fields.items()):
    man = open(os.path.join(docs, "tracepad-%s.1" % page)).read()
    for k, what in sorted(found.items()):
        check(documented(man, k), "tracepad-%s.1 names the JSON field %r (%s)" % (page, k, what))
shutil.rmtree(tmp, ignore_errors=True)
done()
