# SPDX-License-Identifier: Apache-2.0
"""Runs every integration test module (test_*.py beside this file, but those
in OWN_STEP) or those named, and ends with one line: 'integration: N passed, N failed'."""
import os
import sys
import time
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)


# run only when named: run-tests gives them their own step and make targets
# their own command (test_faults and test_faults_regions: the fault matrix,
# make faults)
OWN_STEP = {"test_faults", "test_faults_regions"}


class Result(unittest.TextTestResult):
    pass


def main():
    names = sys.argv[1:] or sorted(f[:-3] for f in os.listdir(here)
                                   if f.startswith("test_") and f.endswith(".py")
                                   and f[:-3] not in OWN_STEP)
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for n in names:
        suite.addTests(loader.loadTestsFromName(n))
    t0 = time.time()
    res = unittest.TextTestRunner(verbosity=2, resultclass=Result).run(suite)
    failed = len(res.failures) + len(res.errors)
    passed = res.testsRun - failed - len(res.skipped)
    print("integration tests took %.0f s" % (time.time() - t0))
    print("integration: %d passed, %d failed, %d skipped" % (passed, failed, len(res.skipped)))
    # NO_SKIP=1 (run-tests) or CI=true: a skipped test means something the
    # suite needs is missing, and fails the run
    strict = os.environ.get("NO_SKIP") == "1" or os.environ.get("CI") == "true"
    if strict and res.skipped:
        for test, why in res.skipped:
            print("skipped, which fails this run: %s: %s" % (test.id(), why))
        return 1
    return 0 if failed == 0 and res.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
