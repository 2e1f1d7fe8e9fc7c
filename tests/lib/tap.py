"""The one TAP producer of the Python tests (meson runs them with protocol: 'tap'): numbered
ok / not ok points on stdout, details as '#' lines, the plan at the end, exit status 1 when a
point failed.  A script calls check()/eq() and done(), or makes its own Tap (tests/e2e)."""
import os
import shutil
import sys
import time

# A failure's details beyond this many lines are cut: the log stays readable.
DETAIL_LINES = 60


class Tap:
    def __init__(self, name=None):
        self.name = name or os.path.splitext(os.path.basename(sys.argv[0]))[0]
        self.n = 0
        self.failed = 0
        self.t0 = time.monotonic()

    def check(self, cond, what, detail="", todo=None):
        """One point: ok when @cond holds, else not ok followed by @detail as comments.
        @todo names a known gap that makes it fail (TAP's TODO: meson shows an expected
        failure, and an unexpected pass once the gap is closed, which fails the test)."""
        self.n += 1
        print("%sok %d - %s%s" % ("" if cond else "not ", self.n, what,
                                  " # TODO " + todo if todo else ""))
        if not cond and not todo:
            self.failed += 1
        if not cond:
            lines = str(detail).splitlines() if detail is not None else []
            for line in lines[:DETAIL_LINES]:
                print("#   " + line)
            if len(lines) > DETAIL_LINES:
                print("#   (%d more lines)" % (len(lines) - DETAIL_LINES))
        sys.stdout.flush()
        return bool(cond)

    ok = check

    def eq(self, got, want, what, detail=""):
        d = "got  %r\nwant %r" % (got, want)
        if detail:
            d += "\n" + str(detail)
        return self.check(got == want, what, d)

    def need_peer(self, tool, package, what):
        """The path of @tool, a peer that scripts/deps.sh installs from the Debian @package,
        for the comparison @what; when it is missing, a failing point that names the package
        (a comparison never disappears silently) and None."""
        path = shutil.which(tool)
        if not path:
            self.check(False, "%s: %s is missing (Debian package %s; scripts/deps.sh installs "
                       "it)" % (what, tool, package))
        return path

    def bail(self, why):
        """Stop here: the test cannot run at all (a missing input is a failure, not a skip)."""
        print("Bail out! %s: %s" % (self.name, why), flush=True)
        sys.exit(1)

    def skip_all(self, why):
        """Nothing to check on this machine (a missing optional tool): meson counts a skip."""
        print("1..0 # SKIP %s" % why, flush=True)
        sys.exit(0)

    def done(self):
        """The plan, and the exit status: 1 when a point failed or none ran."""
        if self.n == 0:
            self.bail("no check ran")
        print("1..%d" % self.n)
        print("# %s: %d checks, %d failed, %.1f s" % (self.name, self.n, self.failed,
                                                     time.monotonic() - self.t0), flush=True)
        sys.exit(1 if self.failed else 0)


# The scripts that check at module level share one producer.
_tap = Tap()
check = _tap.check
ok = _tap.check
eq = _tap.eq
bail = _tap.bail
need_peer = _tap.need_peer
skip_all = _tap.skip_all
done = _tap.done
