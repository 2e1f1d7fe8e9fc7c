#!/usr/bin/env python3
# libtracepad in a secure-execution process: a setuid-root copy of secure-target run by
# nobody with TRACEPAD_MARKERS='*' enables nothing and prints nothing; the same copy without
# the setuid bit obeys the variable (so the check is not vacuous).  TAP; needs root.
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
    os.chmod(copy, 0o4755)
    r = run_as_nobody(copy)
    ok(r.returncode == 0 and r.stdout == 'enabled 0\n', 'setuid copy: the point stays disabled',
       r.stdout + r.stderr)
    ok(r.stderr == '', 'setuid copy: nothing printed on stderr', r.stderr)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
print('1..%d' % n)
sys.exit(1 if failed else 0)
