"""What the benchmarks of bench/ share: running a command, counting a trace's events with
babeltrace2, and the LTTng-UST session daemon (started only when the user has none, and then
stopped at the end)."""
import os
import re
import signal
import subprocess
import sys
import time


def run(argv, timeout=300, check=True):
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode:
        raise RuntimeError("%s: exit status %d: %s" % (" ".join(argv), p.returncode,
                                                        (p.stderr or p.stdout).strip()[-400:]))
    return p


def bt2_count(path):
    """Events in the CTF trace at @path and discarded-event messages, by babeltrace2."""
    p = run(["babeltrace2", path, "-c", "sink.utils.counter", "-p", "step=+0"], timeout=600)
    ev = re.search(r"(\d+) Event message", p.stdout)
    disc = re.search(r"(\d+) Discarded event message", p.stdout)
    if not ev:
        raise RuntimeError("babeltrace2 %s: %r" % (path, p.stdout[-300:]))
    return int(ev.group(1)), int(disc.group(1)) if disc else 0


def dump_count(tracepad, path):
    """Events `tracepad dump` (the binary @tracepad) prints, one a line, from the LTTng output
    at @path: one trace per buffer directory (each directory holding a metadata file)."""
    n = 0
    for d, _, files in os.walk(path):
        if "metadata" not in files:
            continue
        with subprocess.Popen([tracepad, "dump", d], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) as p:
            n += sum(1 for _ in p.stdout)
            err = p.stderr.read().decode(errors="replace")
        if p.returncode:
            raise RuntimeError("tracepad dump %s: %s" % (d, err.strip()[-300:]))
    return n


def lttng(*args, check=True):
    # Never let the client spawn a daemon of its own: we would not know to stop it.
    return run(["lttng", "--no-sessiond"] + list(args), timeout=120, check=check)


def alive(pid):
    """Running, not a zombie waiting for a parent to reap it."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def sessiond_pids():
    p = subprocess.run(["pgrep", "-u", str(os.geteuid()), "-x", "lttng-sessiond"],
                       capture_output=True, text=True)
    return [int(x) for x in p.stdout.split() if alive(int(x))]


def start_sessiond():
    """Starts a session daemon when the user has none; returns its pid (to stop it at the end)
    or None when one was already running."""
    if sessiond_pids():
        return None
    run(["lttng-sessiond", "--daemonize", "--no-kernel"], timeout=60)
    if os.geteuid() == 0:
        pidfile = "/var/run/lttng/lttng-sessiond.pid"
    else:
        pidfile = os.path.join(os.environ.get("LTTNG_HOME", os.path.expanduser("~")), ".lttng",
                               "lttng-sessiond.pid")
    try:
        with open(pidfile) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        pids = sessiond_pids()
        return min(pids) if pids else None


def stop_sessiond(pid, who):
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        if not alive(pid):
            return
        time.sleep(0.1)
    print("%s: lttng-sessiond %d still running" % (who, pid), file=sys.stderr)
