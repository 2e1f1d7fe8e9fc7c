#!/usr/bin/env python3
# libtracepad in a secure-execution process: a setuid-root copy of secure-target run by
# nobody with TRACEPAD_MARKERS='*' enables nothing and prints nothing; the same copy without
# the setuid bit obeys the variable (so the check is not vacuous).  The same under
# `tracepad markers record` run by nobody (TRACEPAD set by meson): the setuid copy's trace
# holds no event and no byte of the point's data, while the plain copy's holds it.  TAP;
# needs root.
import os
import shutil
import subprocess
import sys
import tempfile

target = sys.argv[1]
n = 0
failed = 0


def ok(cond, what, detail=''):
    global n, failed
    n += 1
    print(('ok' if cond else 'not ok') + ' %d - %s' % (n, what))
    if not cond:
        failed += 1
        for line in str(detail).splitlines():
            print('#   ' + line)


def run_as_nobody(path):
    env = dict(os.environ, TRACEPAD_MARKERS='*')
    env.pop('TRACEPAD_MARKERS_FD', None)
    env.pop('TRACEPAD_MARKERS_CTL', None)
    return subprocess.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', path],
                          env=env, capture_output=True, text=True, timeout=60)


def record_as_nobody(path, trace):
    env = dict(os.environ)
    for k in ('TRACEPAD_MARKERS', 'TRACEPAD_MARKERS_FD', 'TRACEPAD_MARKERS_CTL'):
        env.pop(k, None)
    return subprocess.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups',
                           os.environ['TRACEPAD'], 'markers', 'record', '--trace', trace, '--',
                           path], env=env, capture_output=True, text=True, timeout=60)


def trace_events(trace):
    """(events in the trace by tracepad report, or None; whether any of its files holds the
    point's data)"""
    r = subprocess.run([os.environ['TRACEPAD'], 'report', trace], capture_output=True,
                       text=True, timeout=60)
    ev = [int(ln.split()[1]) for ln in r.stdout.splitlines() if ln.startswith('events ')]
    leaked = False
    for name in os.listdir(trace) if os.path.isdir(trace) else []:
        with open(os.path.join(trace, name), 'rb') as f:
            leaked |= b'root-only' in f.read()
    return (ev[0] if r.returncode == 0 and ev else None), leaked


if os.geteuid() != 0 or not shutil.which('setpriv'):
    print('1..0 # SKIP needs root and setpriv')
    sys.exit(0)
tmp = tempfile.mkdtemp(prefix='tp-secure-')
try:
    os.chmod(tmp, 0o755)
    copy = os.path.join(tmp, 'secure-target')
    shutil.copy(target, copy)
    os.chown(copy, 0, 0)
    os.chmod(copy, 0o755)
    r = run_as_nobody(copy)
    ok(r.returncode == 0 and 'enabled 1' in r.stdout and 'secret_point: secret' in r.stderr,
       'plain copy run by nobody obeys TRACEPAD_MARKERS', r.stdout + r.stderr)
    out = os.path.join(tmp, 'traces')
    os.mkdir(out)
    os.chown(out, 65534, 65534)
    have_tracepad = bool(os.environ.get('TRACEPAD'))
    if have_tracepad:
        r = record_as_nobody(copy, os.path.join(out, 'plain'))
        ev, leaked = trace_events(os.path.join(out, 'plain'))
        ok(r.returncode == 0 and r.stdout == 'enabled 1\n' and ev == 1 and leaked,
           'plain copy under markers record by nobody: the point recorded, with its data',
           (r.returncode, r.stdout, r.stderr, ev, leaked))
    os.chmod(copy, 0o4755)
    r = run_as_nobody(copy)
    ok(r.returncode == 0 and r.stdout == 'enabled 0\n', 'setuid copy: the point stays disabled',
       r.stdout + r.stderr)
    ok(r.stderr == '', 'setuid copy: nothing printed on stderr', r.stderr)
    if have_tracepad:
        r = record_as_nobody(copy, os.path.join(out, 'setuid'))
        ok(r.returncode == 0 and r.stdout == 'enabled 0\n' and r.stderr == '',
           'setuid copy under markers record by nobody: the point stays disabled, nothing '
           'printed', (r.returncode, r.stdout, r.stderr))
        ev, leaked = trace_events(os.path.join(out, 'setuid'))
        ok(ev == 0 and not leaked,
           'setuid copy under markers record by nobody: no event recorded, no byte of its data '
           'in the trace', (ev, leaked))
    else:
        ok(False, 'markers record cases: TRACEPAD is not set (run through meson test)')
finally:
    shutil.rmtree(tmp, ignore_errors=True)
print('1..%d' % n)
sys.exit(1 if failed else 0)
