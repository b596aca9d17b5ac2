"""deploy/package and images/build on a bare Debian 12: a minimal root
(debootstrap minbase, the one-line /etc/apt/sources.list debootstrap
writes, no git, no compiler, no packaging tools), the project's files
copied in without .git.  Both scripts must install what they need and
succeed there: the package, then an image from it.

Opt-in (suite `long`, `-Dlong_tests=true`): two debootstraps and a build
from nothing, 20 to 40 minutes.  Needs root and Debian's archive.
"""

import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(os.environ.get("LNETR_VM_CACHE") or ROOT / "build" / "vm") / "build-root"


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (debootstrap, chroot)"
    if not shutil.which("debootstrap"):
        return "debootstrap not installed (deploy/setup installs it)"
    return None


def host_mirror():
    """The archive images/build would use (it reads the host's sources)."""
    cp = subprocess.run(["bash", "-c", "source <(sed -n '/^source_uri()/,/^}/p' %s) && source_uri bookworm"
                         % (ROOT / "images" / "build")], capture_output=True, text=True)
    return cp.stdout.strip() or "http://deb.debian.org/debian"


@unittest.skipIf(skip_reason(), skip_reason())
class BareDebian(unittest.TestCase):

    def setUp(self):
        WORK.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix="root-", dir=WORK))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.root = self.dir / "root"
        cp = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(self.root), host_mirror()],
                            capture_output=True, text=True, timeout=3600)
        self.assertEqual(cp.returncode, 0, cp.stdout[-3000:] + cp.stderr[-3000:])
        self.mounts = []
        self.addCleanup(self.unmount)
        for what, where, opts in (("proc", "proc", ["-t", "proc"]), ("sysfs", "sys", ["-t", "sysfs"]),
                                  ("/dev", "dev", ["--bind"]), ("devpts", "dev/pts", ["-t", "devpts"])):
            subprocess.run(["mount"] + opts + [what, str(self.root / where)], check=True)
            self.mounts.append(self.root / where)
        shutil.copy("/etc/resolv.conf", self.root / "etc" / "resolv.conf")
        # The project's files as an export: no .git, no build/.
        src = self.root / "src" / "lnetr"
        files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.split()
        for f in files:
            if f.startswith("build/") or not (ROOT / f).is_file():
                continue
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
        self.src = src

    def unmount(self):
        # Whatever images/build left mounted below the root goes too.
        subprocess.run(["bash", "-c", "grep -o ' %s[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l" % self.root])
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(m)], capture_output=True)

    def chroot(self, cmd, timeout=3600):
        cp = subprocess.run(["chroot", str(self.root), "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                             "HOME=/root", "LC_ALL=C.UTF-8", "bash", "-c", cmd],
                            capture_output=True, text=True, timeout=timeout)
        return cp.returncode, cp.stdout, cp.stderr

    def test_package_and_image_build_on_a_bare_debian(self):
        sources = (self.root / "etc" / "apt" / "sources.list").read_text()
        self.assertRegex(sources, r"(?m)^deb \S+ bookworm main$")
        self.assertFalse((self.root / "etc" / "apt" / "sources.list.d" / "debian.sources").exists())
        for tool in ("git", "gcc", "g++", "meson", "dpkg-buildpackage", "debootstrap"):
            rc, _, _ = self.chroot("command -v " + tool)
            self.assertNotEqual(rc, 0, tool + " is installed already")
        rc, out, err = self.chroot("cd /src/lnetr && deploy/package")
        self.assertEqual(rc, 0, out[-3000:] + err[-6000:])
        deb = out.strip().splitlines()[-1]
        self.assertRegex(deb, r"/src/lnetr/build/package/lnetr_[\d.]+_amd64\.deb$")
        self.assertIn("installing the build dependencies", err)
        rc, out, err = self.chroot("cd /src/lnetr && images/build --version 1 --config deploy/examples/lnetr.yaml "
                                   "--nic lan0=52:54:00:4c:4e:01,10.1.0.1/24 --nic lan1=52:54:00:4c:4e:02,10.2.0.1/24 "
                                   "--nic mgmt0=52:54:00:4c:4e:03,dhcp")
        self.assertEqual(rc, 0, out[-3000:] + err[-6000:])
        self.assertTrue((self.src / "build" / "image" / "lnetr-1.img").is_file(), out + err)
        self.assertTrue((self.src / "build" / "image" / "lnetr-1.update").is_file(), out + err)
        # It read the one-line sources for its mirror.
        self.assertIn("debootstrap bookworm from %s" % sources.split()[1].rstrip("/"), err)


if __name__ == "__main__":
    unittest.main()
