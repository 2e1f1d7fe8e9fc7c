#!/usr/bin/env python3
"""tracepad calls --engine agent -p, 100 times on one running 4-thread target (issue 12's
acceptance): attach, trace 0.5 s, detach; the target survives with every check of its own
passed, and after each detach the code of every object it had mapped is what it was.  About
85 s on 2 cores: in the normal build only (calls-agent does 8 cycles in both)."""
from tpcalls import attach_cycles, done, target

# cycles 0 and 50 print the lines of tpc_add (~12 s each: 400000 lines to parse), the
# others -c or the lines of tpc_sleep
attach_cycles(target("calls-multi"), 100, lines_every=50)
done()
