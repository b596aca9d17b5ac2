"""The Debian package (deploy/package: dpkg-buildpackage -b, debhelper and
meson, lintian clean of errors): installed with apt into a clean Debian 12
chroot (the appliance's Debian base, images/build --base-only), its
programs run there, then purged.  Needs root and Debian's archive (apt
fetches the package's dependencies)."""

import os
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (chroot, debootstrap)"
    return None


def run(argv, timeout=1800, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


@unittest.skipIf(skip_reason(), skip_reason())
class Package(unittest.TestCase):

    def setUp(self):
        cp = run([str(ROOT / "deploy" / "package")])
        self.assertEqual(cp.returncode, 0, cp.stderr[-5000:])
        self.deb = cp.stdout.strip().splitlines()[-1]
        cp = run([str(ROOT / "images" / "build"), "--base-only"])
        self.assertEqual(cp.returncode, 0, cp.stderr[-5000:])
        base = cp.stdout.strip().splitlines()[-1]
        self.dir = tempfile.mkdtemp(prefix="lnetr-chroot-", dir=str(ROOT / "build"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.root = os.path.join(self.dir, "root")
        subprocess.run(["cp", "-a", base, self.root], check=True)
        subprocess.run(["mount", "-t", "proc", "proc", os.path.join(self.root, "proc")], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", os.path.join(self.root, "proc")])
        # The packages images/build downloaded already (kept beside the base).
        archives = os.path.join(os.path.dirname(os.path.dirname(base)), "archives")
        os.makedirs(os.path.join(archives, "partial"), exist_ok=True)
        subprocess.run(["mount", "--bind", archives, os.path.join(self.root, "var/cache/apt/archives")], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", os.path.join(self.root, "var/cache/apt/archives")])
        # The base's apt sources are the archive the host uses (images/build
        # wrote them, from either layout of the host's sources).
        self.assertRegex(open(os.path.join(self.root, "etc/apt/sources.list")).read(), r"(?m)^deb \S+ bookworm main$")
        shutil.copy("/etc/resolv.conf", os.path.join(self.root, "etc/resolv.conf"))
        shutil.copy(self.deb, os.path.join(self.root, "tmp", "lnetr.deb"))

    def chroot(self, cmd, timeout=900):
        cp = run(["chroot", self.root, "env", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8", "sh", "-c", cmd],
                 timeout=timeout)
        return cp.returncode, cp.stdout + cp.stderr

    def ok(self, cmd, timeout=900):
        rc, out = self.chroot(cmd, timeout)
        self.assertEqual(rc, 0, "%s:\n%s" % (cmd, out[-4000:]))
        return out

    def test_install_run_purge(self):
        # Built with Debian's flags: no -march of the build machine.
        cc = ROOT / "build" / "package" / ("lnetr-" + re.search(r"lnetr_([^_]+)_", self.deb).group(1)) / \
            "obj-x86_64-linux-gnu" / "compile_commands.json"
        self.assertTrue(cc.exists(), cc)
        self.assertNotIn("-march=native", cc.read_text())
        with open(ROOT / "build" / "package" / "lintian.log") as f:
            self.assertNotRegex(f.read(), r"(?m)^E: ")

        self.ok("apt-get update -qq && apt-get install -y -qq --no-install-recommends /tmp/lnetr.deb")
        # The programs run, and say what they are.
        for prog in ("lnetr-dataplane", "lnetr-control", "lnetrctl", "lnetr-peer", "lnetr-decode"):
            self.assertRegex(self.ok("%s --version" % prog), r"^%s \d+\.\d+\.\d+\n" % prog)
            self.assertIn("usage", self.ok("%s --help" % prog).lower(), prog)
            self.assertTrue(self.ok("ls /usr/share/man/man*/%s.*" % prog).strip(), prog)
        # The dataplane refuses a bad configuration by file, line and field.
        rc, out = self.chroot("printf 'net:\\n  - net type: tcp\\n    local NI(s): 7\\n' > /tmp/bad.yaml; "
                              "lnetr-dataplane --config /tmp/bad.yaml --check")
        self.assertNotEqual(rc, 0)
        self.assertRegex(out, r"/tmp/bad.yaml:3:\d+: ")
        # The daemons' user and groups, the units enabled, the directories.
        self.assertIn("/usr/sbin/nologin", self.ok("getent passwd lnetr"))
        self.assertIn("lnetr", self.ok("getent group lnetr-admin"))
        self.ok("getent group lnetr-monitor")
        self.ok("test -L /etc/systemd/system/multi-user.target.wants/lnetr.target")
        self.ok("test -L /etc/systemd/system/lnetr.target.wants/lnetr-dataplane.service")
        self.ok("test -L /etc/systemd/system/lnetr.target.wants/lnetr-control.service")
        self.ok("test -d /etc/lnetr && test -d /var/lib/lnetr")
        # The units as systemd reads them.
        self.ok("systemd-analyze verify --man=no /lib/systemd/system/lnetr-dataplane.service "
                "/lib/systemd/system/lnetr-control.service /lib/systemd/system/lnetr.target "
                "/lib/systemd/system/lnetr-firstboot.service")
        self.ok("test -f /usr/share/lnetr/monitoring/lnetr-alerts.yml && test -f "
                "/usr/share/lnetr/monitoring/lnetr-dashboard.json")

        # Purge: nothing of lnetr's left but its user.
        self.ok("echo 'control: {}' > /etc/lnetr/lnetr.yaml; apt-get purge -y -qq lnetr")
        rc, _ = self.chroot("dpkg -s lnetr")
        self.assertNotEqual(rc, 0)
        for path in ("/usr/bin/lnetr-dataplane", "/etc/lnetr", "/var/lib/lnetr",
                     "/etc/systemd/system/multi-user.target.wants/lnetr.target",
                     "/etc/systemd/system/lnetr.target.wants", "/lib/systemd/system/lnetr.target"):
            self.assertFalse(os.path.lexists(self.root + path), path)


if __name__ == "__main__":
    unittest.main()
