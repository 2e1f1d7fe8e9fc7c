#!/usr/bin/env python3
"""`meson install` with DESTDIR gives a tracepad that finds its agent under the prefix and
counts a program with the trapflag engine; every man page of docs/ and every header of
include/tracepad/ is installed."""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, done  # noqa: E402
import tempfile

build = os.environ["TP_BUILD_ROOT"]


def same_file(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


dest = tempfile.mkdtemp(prefix="tp-install-")
try:
    r = subprocess.run(["meson", "install", "-C", build, "--no-rebuild", "--quiet"],
                       env=dict(os.environ, DESTDIR=dest), capture_output=True, text=True)
    check(r.returncode == 0, "meson install with DESTDIR", r.stderr[-2000:])
    exe = [os.path.join(d, f) for d, _, fs in os.walk(dest) for f in fs if f == "tracepad"]
    agents = [os.path.join(d, f) for d, _, fs in os.walk(dest) for f in fs
              if f == "libtracepad-agent.so"]
    check(len(exe) == 1 and len(agents) == 1, "one tracepad and one agent installed",
          (exe, agents))
    mans = [f for d, _, fs in os.walk(dest) for f in fs if f.startswith("tracepad")
            and f.endswith(".1")]
    check(len(mans) >= 2, "man pages installed", mans)
    # Every man page of docs/ and every public header of include/tracepad/, byte for byte.
    src = os.environ["TP_SOURCE_ROOT"]
    installed = {}
    for d, _, fs in os.walk(dest):
        for f in fs:
            installed.setdefault(f, []).append(os.path.join(d, f))
    docs = os.path.join(src, "docs")
    pages = sorted(f for f in os.listdir(docs) if re.fullmatch(r".+\.[1-9]", f))
    check(pages, "docs/ has man pages", docs)
    for page in pages:
        where = [w for w in installed.get(page, [])
                 if os.path.basename(os.path.dirname(w)) == "man" + page[-1]]
        check(len(where) == 1 and same_file(where[0], os.path.join(docs, page)),
              "docs/%s installed in man%s" % (page, page[-1]), installed.get(page))
    hdir = os.path.join(src, "include", "tracepad")
    headers = sorted(f for f in os.listdir(hdir) if f.endswith(".h"))
    check(headers, "include/tracepad/ has headers", hdir)
    for h in headers:
        where = [w for w in installed.get(h, [])
                 if w.endswith(os.path.join("include", "tracepad", h))]
        check(len(where) == 1 and same_file(where[0], os.path.join(hdir, h)),
              "include/tracepad/%s installed as <tracepad/%s>" % (h, h), installed.get(h))
        if where:
            inc = os.path.dirname(os.path.dirname(where[0]))
            cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                                 "-I", inc, "-x", "c", "-"],
                                input="#include <tracepad/%s>\n" % h, capture_output=True,
                                text=True)
            check(cc.returncode == 0, "<tracepad/%s> compiles on its own as installed" % h,
                  cc.stderr)
    if exe:
        v = subprocess.run([exe[0], "--version"], capture_output=True, text=True)
        check(v.returncode == 0 and v.stdout.startswith("tracepad "), "--version", v.stdout)
        env = {k: v for k, v in os.environ.items() if k != "TRACEPAD_AGENT"}
        out = os.path.join(dest, "report.json")
        r = subprocess.run([exe[0], "count", "--engine", "trapflag", "--no-startup", "--json",
                            "-o", out, "--", "/bin/echo", "installed"],
                           env=env, capture_output=True, text=True)
        check(r.returncode == 0 and r.stdout == "installed\n",
              "the installed tracepad runs the program unchanged", (r.returncode, r.stdout,
                                                                    r.stderr))
        rep = json.load(open(out)) if os.path.exists(out) else {}
        check(rep.get("instructions", 0) > 1000 and not rep.get("warning"),
              "the installed agent counted the program", rep)
    # a program built against the installed <tracepad/tracepoint.h> and `pkg-config tracepad`
    pcs = [os.path.join(d, f) for d, _, fs in os.walk(dest) for f in fs if f == "tracepad.pc"]
    check(len(pcs) == 1, "tracepad.pc installed", pcs)
    if pcs:
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcs[0]),
                   PKG_CONFIG_SYSROOT_DIR=dest)
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "tracepad"], env=env,
                               capture_output=True, text=True)
        check(flags.returncode == 0, "pkg-config --cflags --libs tracepad", flags.stderr)
        src = os.path.join(dest, "prog.c")
        with open(src, "w") as f:
            f.write('#include <tracepad/tracepoint.h>\n'
                    'TP_POINT(installed_point);\n'
                    'int main(int argc, char **argv)\n'
                    '{\n'
                    '\t(void)argv;\n'
                    '\tTP_TRACE(installed_point, "argc %d name %s", argc, "x");\n'
                    '\treturn 0;\n'
                    '}\n')
        prog = os.path.join(dest, "prog")
        cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", src, "-o", prog]
                            + flags.stdout.split(), capture_output=True, text=True)
        check(cc.returncode == 0, "a program builds against the installed header and library",
              cc.stderr)
        libdir = os.path.dirname(os.path.dirname(pcs[0]))
        run = subprocess.run([prog], env=dict(os.environ, LD_LIBRARY_PATH=libdir,
                                              TRACEPAD_MARKERS="installed_*"),
                             capture_output=True, text=True)
        check(run.returncode == 0 and "installed_point: argc 1 name x" in run.stderr,
              "it runs, and its enabled point prints its event", (run.returncode, run.stderr))
finally:
    shutil.rmtree(dest, ignore_errors=True)
done()
