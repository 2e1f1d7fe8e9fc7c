#!/usr/bin/env python3
# Compile test of <tracepad/tracepoint.h>: C11 and C++17 with gcc and clang at -O0/-O2 under
# -Wall -Wextra -pedantic -Werror, linked with --gc-sections, run with TRACEPAD_MARKERS; TAP.
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from tap import check as ok, done  # noqa: E402

libdir, incdir, srcdir = sys.argv[1:4]

C_EXPECT = 'cpoint: c -3 7 s 1.5\ncpoint: second 123456789012 q\n'
CXX_EXPECT = 'cxx_point: inl 1\ncxx_point: inl 2\ncxx_point: enum 2 nul (nil) str 5 0.250\n'
configs = [
    ('gcc', ['-std=c11'], ['prog.c', 'second.c'], 'cpoint', C_EXPECT, 2),
    ('clang', ['-std=c11'], ['prog.c', 'second.c'], 'cpoint', C_EXPECT, 2),
    ('g++', ['-std=c++17'], ['prog.cpp', 'second.cpp'], 'cxx_point', CXX_EXPECT, 2),
    ('clang++', ['-std=c++17'], ['prog.cpp', 'second.cpp'], 'cxx_point', CXX_EXPECT, 2),
    ('gcc', ['-std=c11', 'static'], ['prog.c', 'second.c'], 'cpoint', C_EXPECT, 2),
]
tmp = tempfile.mkdtemp(prefix='tp-markers-compile-')
try:
    for cc, std, srcs, glob, expect, min_notes in configs:
        if not shutil.which(cc):
            ok(True, '%s not installed # SKIP' % cc)
            continue
        for opt in ['-O0', '-O2']:
            static = 'static' in std
            name = '%s %s %s%s' % (cc, std[0], opt, ' libtracepad.a' if static else '')
            exe = os.path.join(tmp, 'prog-%s%s%s' % (cc.replace('+', 'x'), opt, static))
            cmd = [cc] + std[:1] + [opt, '-Wall', '-Wextra', '-pedantic', '-Werror',
                                '-ffunction-sections', '-fdata-sections', '-I', incdir,
                                '-I', os.path.join(srcdir, 'compile')]
            cmd += [os.path.join(srcdir, 'compile', s) for s in srcs]
            cmd += ['-o', exe, '-Wl,--gc-sections', '-L', libdir]
            if static:
                cmd += ['-Wl,-Bstatic', '-ltracepad', '-Wl,-Bdynamic', '-lZydis', '-pthread']
            else:
                cmd += ['-ltracepad', '-Wl,-rpath,' + libdir]
            r = subprocess.run(cmd, capture_output=True, text=True)
            ok(r.returncode == 0, name + ': compiles without warnings', r.stderr)
            if r.returncode:
                continue
            env = dict(os.environ, TRACEPAD_MARKERS=glob)
            r = subprocess.run([exe], capture_output=True, text=True, env=env)
            ok(r.returncode == 0 and r.stderr == expect, name + ': events from every unit',
               'rc %d\ngot:\n%s' % (r.returncode, r.stderr))
            env.pop('TRACEPAD_MARKERS')
            r = subprocess.run([exe], capture_output=True, text=True, env=env)
            ok(r.returncode == 0 and r.stderr == '', name + ': silent when disabled', r.stderr)
            r = subprocess.run(['readelf', '-nW', exe], capture_output=True, text=True)
            notes = r.stdout.count('tracepad ')
            ok(notes >= min_notes, name + ': %d sites in .note.tracepad' % notes, r.stdout)
finally:
    shutil.rmtree(tmp)
done()
