"""The test command itself: run unprivileged it must not pass with the
integration suites skipped (they need root), but stop and say so."""

import os
import subprocess
import unittest

from lnetr_test import need_root

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class TestCommand(unittest.TestCase):
    def test_unprivileged_run_fails_saying_root_is_needed(self):
        need_root(self)
        cp = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                             os.path.join(REPO, "tests", "run")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
                            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        if "running again under sudo" in cp.stderr:
            self.skipTest("this machine gives uid 65534 password-less sudo")
        self.assertEqual(cp.returncode, 1, cp.stderr)
        self.assertIn("must run as root", cp.stderr)
        # It stopped before doing anything: no build, no test ran.
        self.assertNotIn("== tests", cp.stdout)


if __name__ == "__main__":
    unittest.main()
