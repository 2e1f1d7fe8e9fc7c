"""A TAP producer for the python tests of tests/cli: check() each point, done() at the end."""
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
