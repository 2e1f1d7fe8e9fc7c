"""A TAP producer for the python tests of tests/cli: check() each point, done() at the end."""
import os
import sys

_n = 0
_failed = 0


def check(cond, what, detail=""):
    global _n, _failed
    _n += 1
    print("%sok %d - %s" % ("" if cond else "not ", _n, what), flush=True)
    if not cond:
        _failed += 1
        if detail:
            print("#   " + str(detail).replace("\n", "\n#   "))
    return cond


def done():
    print("1..%d" % _n)
    sys.exit(1 if _failed else 0)


def tracepad_and_targets():
    """TRACEPAD (the CLI) from the environment and argv[1] (a directory of test targets) as
    an absolute path; a TAP bail-out when either is missing."""
    tp = os.environ.get("TRACEPAD", "")
    targets = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else ""
    if not tp or not os.access(tp, os.X_OK):
        print("Bail out! TRACEPAD is not set or not executable: %r" % tp)
        sys.exit(1)
    if not os.path.isdir(targets):
        print("Bail out! the targets directory (argv[1]) is missing: %r" % targets)
        sys.exit(1)
    return tp, targets
