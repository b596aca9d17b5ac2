"""lnetr-firstboot: an /etc/lnet.conf (lnetctl export) becomes
/etc/lnetr/lnetr.yaml with lnetr's own sections, checked by
lnetr-dataplane --check; nothing is touched when a configuration exists.
Runs the configured script from the build directory (LNETR_BUILD) with
its paths pointed at a temporary directory."""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUILD = os.environ.get("LNETR_BUILD", os.path.join(ROOT, "build", "debug"))
VECTORS = os.environ.get("LNETR_VECTORS", os.path.join(ROOT, "..", "shared", "vectors"))
EXPORT = os.path.join(VECTORS, "v4-lnetctl", "router-run-R-export-backup.yaml")


def one_net_on_lo(text):
    """The kernel router's export with its tcp net on lo and tcp1 left out
    (this machine has neither eth0 nor eth1 for sure)."""
    text = text.replace("0: eth0", "0: lo")
    return re.sub(r"-     net type: tcp1\n(?:      .*\n)+", "", text)


class Firstboot(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.conf = os.path.join(self.dir, "etc-lnetr", "lnetr.yaml")
        os.makedirs(os.path.dirname(self.conf))
        self.lnet = os.path.join(self.dir, "lnet.conf")

    def run_firstboot(self):
        env = dict(os.environ, LNETR_CONF=self.conf, LNET_CONF=self.lnet,
                   LNETR_BASE=os.path.join(ROOT, "deploy", "systemd", "base.yaml"),
                   LNETR_DATAPLANE=os.path.join(BUILD, "dataplane", "lnetr-dataplane"))
        cp = subprocess.run(["sh", os.path.join(BUILD, "deploy", "lnetr-firstboot")], env=env,
                            capture_output=True, text=True, timeout=60)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        return cp.stdout

    def test_a_kernel_routers_export_is_imported_and_loads(self):
        with open(EXPORT) as f:
            text = one_net_on_lo(f.read())
        # lnet.conf files may carry document markers: still one document.
        with open(self.lnet, "w") as f:
            f.write("---\n" + text + "...\n")
        out = self.run_firstboot()
        self.assertEqual(out, "<6>imported %s into %s\n" % (self.lnet, self.conf))
        with open(self.conf) as f:
            got = f.read()
        self.assertIn(text.replace("# rc=0\n", ""), got.replace("# rc=0\n", ""))
        self.assertNotIn("\n---\n", got)
        self.assertNotIn("\n...\n", got)
        self.assertIn("socket_group: lnetr-admin", got)
        cp = subprocess.run([os.path.join(BUILD, "dataplane", "lnetr-dataplane"), "--config", self.conf, "--check"],
                            capture_output=True, text=True, timeout=60)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        # A second boot changes nothing.
        mtime = os.stat(self.conf).st_mtime_ns
        self.assertEqual(self.run_firstboot(), "")
        self.assertEqual(os.stat(self.conf).st_mtime_ns, mtime)

    def test_an_export_lnetr_refuses_is_kept_and_the_reason_logged(self):
        with open(EXPORT) as f:
            text = one_net_on_lo(f.read())
        with open(self.lnet, "w") as f:
            f.write(text + "ip2nets:\n    - net-spec: tcp\n      ip-range:\n          0: 10.0.0.*\n")
        out = self.run_firstboot()
        lines = out.splitlines()
        self.assertTrue(lines[0].startswith("<3>imported") and "refuses" in lines[0], out)
        # The error names the written file, its line and the field.
        self.assertTrue(any(re.match(r"<3>%s:\d+:\d+: ip2nets" % re.escape(self.conf), l) for l in lines), out)
        self.assertTrue(os.path.exists(self.conf))

    def test_without_lnet_conf_nothing_is_written(self):
        out = self.run_firstboot()
        self.assertTrue(out.startswith("<5>no "), out)
        self.assertFalse(os.path.exists(self.conf))


if __name__ == "__main__":
    unittest.main()
