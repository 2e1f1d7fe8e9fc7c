#!/usr/bin/env python3
"""memory plugin, test 4: real programs nobody here wrote (python3 -c pass, ls -l of a
directory and of /usr, sqlite3 with a script, pigz, gzip) report exactly what valgrind's
memcheck reports with its defaults (glibc's exit-time frees, leak-check heuristics): allocs,
frees, bytes allocated, in use at exit, and every loss kind, with their output unchanged.
pigz with its threads: in use at exit and every loss kind equal memcheck's, frees equal
allocations (their number follows the threads' timing)."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memlib import check, done, memcheck, memcheck_env, native, same_as_memcheck, tracepad  # noqa: E402

# Programs whose allocations depend on nothing that changes between runs: python's hash
# seed fixed, ls on a directory of the test's own and on /usr (not /: other tests make
# directories in /tmp meanwhile, whose mtime and link count ls -l shows), pigz on one thread (with more, how many buffers its pool allocates depends on
# the threads' timing: 58, 61 or 64 allocations in native runs on 2 cores, where memcheck,
# which runs one thread at a time, always sees 64).
env = memcheck_env(dict(os.environ, PYTHONHASHSEED="0", LC_ALL="C", TZ="UTC"))
with tempfile.TemporaryDirectory(prefix="tp-mem-real-") as d:
    listed = os.path.join(d, "dir")
    os.mkdir(listed)
    for i in range(20):
        with open(os.path.join(listed, "file%02d" % i), "w") as f:
            f.write("x" * i)
        os.utime(os.path.join(listed, "file%02d" % i), (1e9, 1e9))
    with open(os.path.join(d, "script.sql"), "w") as f:
        f.write("create table t(a integer primary key, b text);\n"
                "insert into t(b) values ('one'), ('two'), ('three');\n"
                "create index ib on t(b);\n"
                "select count(*), group_concat(b) from t;\n")
    data = os.path.join(d, "data")
    with open(data, "wb") as f:
        f.write(b"".join(b"line %d of the input\n" % i for i in range(20000)))
    programs = [
        ("python3 -c pass", ["/usr/bin/python3", "-c", "pass"]),
        ("ls -l DIR", [shutil.which("ls"), "-l", listed]),
        ("ls -l /usr", [shutil.which("ls"), "-l", "/usr"]),
        ("sqlite3 with a script", [shutil.which("sqlite3") or "sqlite3", ":memory:",
                                   "-init", os.path.join(d, "script.sql"), ".quit"]),
        ("pigz -c", [shutil.which("pigz") or "pigz", "-p", "1", "-c", data]),
        ("gzip -9 -c", [shutil.which("gzip"), "-9", "-c", data]),
    ]
    for what, argv in programs:
        if not check(os.path.exists(argv[0]), what + ": the program is installed",
                     argv[0] + " missing: scripts/deps.sh installs it"):
            continue
        nat = native(argv)
        t = tracepad(argv, env=env)
        check(nat.rc == 0 and t.rc == 0 and t.out == nat.out,
              what + ": exit status and output unchanged under tracepad", t)
        same_as_memcheck(t, memcheck(argv, env=env), what)

    # pigz with its default threads: how many buffers its pool allocates follows the
    # threads' timing, but every block is freed, its threads' DTVs too (by glibc's exit-time
    # frees, run once the joined threads are gone), as under memcheck.  Three runs: a thread
    # whose exit was not reported yet when _exit came once kept those frees from running.
    pigz = shutil.which("pigz")
    if check(pigz is not None, "pigz -c, its threads: the program is installed",
             "pigz missing: scripts/deps.sh installs it"):
        argv = [pigz, "-c", data]
        nat = native(argv)
        vg = memcheck(argv, env=env)
        for i in range(3):
            what = "pigz -c, its threads, run %d" % (i + 1)
            t = tracepad(argv, env=env)
            check(nat.rc == 0 and t.rc == 0 and t.out == nat.out,
                  what + ": exit status and output unchanged under tracepad", t)
            u = t.report.usage
            check(u is not None and u[0] == u[1] and u[0] > 0,
                  what + ": as many frees as allocations", u)
            same_as_memcheck(t, vg, what, usage=False)
done()
