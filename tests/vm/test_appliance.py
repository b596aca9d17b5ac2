"""The appliance: the image images/build makes, booted in qemu (TCG, UEFI),
its two NICs bridged into network namespaces where lnetr-peer runs on tcp
and tcp1, as a router between them.  One qemu process, four boots:

1. version 1 (slot a): both services ready and unprivileged; LNet ping and
   verified PUT/GET routed through it; /metrics scraped from outside
   passes promtool; the admin logs in on the serial console and lands in
   the lnetrctl shell, adds a route and saves; no system shell for them.
   lnetr-update installs version 2 (a second disk) into slot b.
2. version 2 (slot b) on trial: comes up healthy and is blessed; the
   saved route survived (the configuration is on the data partition).
   lnetr-update installs version 3, built broken (its dataplane never
   starts), with one try.
3. version 3: not healthy in time: not blessed, reboots.
4. version 2 again: the fallback.

Also the Debian package: installed into a clean Debian 12 chroot, its
programs run, then purged.

Needs root, qemu, OVMF and Debian's archive (images/build installs what
it lacks).  About 6 minutes with the images built; the build directory
caches the package and the Debian base (build/image-cache).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from lnetr_router import Topology, ip, parse_metrics, scrape_metrics  # noqa: E402
from lnetr_test import Processes, parse_yaml, peer_binary  # noqa: E402

from appliance import Appliance  # noqa: E402

ADMIN_PASSWORD = "lnetr-test-admin"
IMAGES = Path(os.environ.get("LNETR_VM_CACHE") or ROOT / "build" / "vm") / "appliance"

CONFIG = """\
net:
    - net type: tcp
      local NI(s):
        - interfaces:
              0: lan0
    - net type: tcp1
      local NI(s):
        - interfaces:
              0: lan1
routing:
    enable: 1
buffers:
    tiny: 128
    small: 256
    large: 32
dataplane:
    cores: [1]
    main_core: 0
    poll: adaptive
    hugepages: yes
    memory_mb: 256
    control_socket: /run/lnetr/dataplane.sock
    alive_router_check_interval: 5
    router_ping_timeout: 5
control:
    socket: /run/lnetr/control.sock
    socket_group: lnetr-admin
    readonly_socket: /run/lnetr/control-ro.sock
    readonly_socket_group: lnetr-monitor
    metrics: 0.0.0.0:9798
"""


def network_overlay(path, topo):
    """systemd-networkd files: the NICs named lan0/lan1 by MAC, with the
    router's addresses on the two nets; a shorter health timeout."""
    net = Path(path) / "etc" / "systemd" / "network"
    net.mkdir(parents=True)
    for i, addr in enumerate((topo.ra_ip, topo.rb_ip)):
        (net / ("10-lan%d.link" % i)).write_text(
            "[Match]\nMACAddress=%s\n\n[Link]\nName=lan%d\n" % (Appliance.mac(i), i))
        (net / ("10-lan%d.network" % i)).write_text(
            "[Match]\nName=lan%d\n\n[Network]\nAddress=%s/24\nLinkLocalAddressing=no\n" % (i, addr))
    drop = Path(path) / "etc" / "systemd" / "system" / "lnetr-healthy.service.d"
    drop.mkdir(parents=True)
    (drop / "timeout.conf").write_text("[Service]\nEnvironment=LNETR_HEALTH_TIMEOUT=45\n")
    # The fault requests (a stalled worker), for the watchdog's test.
    drop = Path(path) / "etc" / "systemd" / "system" / "lnetr-dataplane.service.d"
    drop.mkdir(parents=True)
    (drop / "test-faults.conf").write_text("[Service]\nEnvironment=LNETR_TEST_FAULTS=1\n")


def build_image(version, out, topo, overlay, broken=False):
    argv = [str(ROOT / "images" / "build"), "--version", str(version), "--out", str(out),
            "--overlay", overlay, "--test-console"]
    if version == 1:
        cfg = Path(out) / "lnetr.yaml"
        cfg.write_text(CONFIG)
        # DPDK's memory in hugepages and the worker's core (1) kept from
        # the rest of the system, on the kernel command line; updates keep them.
        argv += ["--config", str(cfg), "--admin-password", ADMIN_PASSWORD,
                 "--kernel-args", "hugepages=192 isolcpus=1"]
    if broken:
        argv.append("--broken")
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if cp.returncode != 0:
        raise AssertionError("images/build --version %d failed:\n%s%s" % (version, cp.stdout, cp.stderr[-5000:]))
    return Path(out) / ("lnetr-%d.img" % version), Path(out) / ("lnetr-%d.root.img" % version)


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (namespaces, debootstrap, taps)"
    for tool in ("qemu-system-x86_64", "debootstrap"):
        if not shutil.which(tool):
            return tool + " not installed (deploy/setup installs it)"
    return None


@unittest.skipIf(skip_reason(), skip_reason())
class Appliance4Boots(unittest.TestCase):

    def setUp(self):
        self.procs = Processes()
        self.addCleanup(self.procs.cleanup)
        self.topo = Topology(dpdk=True)  # the router's veth ends without addresses: the guest has them
        self.topo.up()
        self.addCleanup(self.topo.down)
        IMAGES.mkdir(parents=True, exist_ok=True)
        # Each run's images and logs stay for a look afterwards; the newest few.
        for old in sorted(IMAGES.glob("run-*"), key=lambda p: p.stat().st_mtime)[:-2]:
            shutil.rmtree(old, ignore_errors=True)
        self.out = Path(tempfile.mkdtemp(prefix="run-", dir=IMAGES))
        overlay = self.out / "overlay"
        network_overlay(overlay, self.topo)
        self.disk, _ = build_image(1, self.out, self.topo, str(overlay))
        _, self.update2 = build_image(2, self.out, self.topo, str(overlay))
        _, self.update3 = build_image(3, self.out, self.topo, str(overlay), broken=True)
        for side in ("a", "b"):
            self.topo.host(side).run(["ip", "link", "set", "eth0", "mtu", "1500"])

    def bridge(self):
        """The guest's taps (in namespace r) bridged to the veths to a and b."""
        r = self.topo.ns["r"]
        for side, tap, veth in (("a", "tapa", self.topo.if_ra), ("b", "tapb", self.topo.if_rb)):
            end = time.monotonic() + 30
            while subprocess.run(["ip", "-n", r, "link", "show", tap], capture_output=True).returncode != 0:
                self.assertLess(time.monotonic(), end, "qemu made no %s" % tap)
                time.sleep(0.1)
            ip("-n", r, "link", "add", "br" + side, "type", "bridge")
            for dev in (veth, tap):
                ip("-n", r, "link", "set", dev, "master", "br" + side)
                ip("-n", r, "link", "set", dev, "up")
            ip("-n", r, "link", "set", "br" + side, "up")

    def peer(self, side, args, timeout=120):
        host = self.topo.host(side)
        cp = host.run([peer_binary(), "--nid", self.topo.nid(side)] + self.topo.peer_options(side, 5) + args,
                      timeout=timeout)
        return cp.returncode, parse_yaml(cp.stdout) if cp.returncode == 0 else None, cp

    def assert_root(self, vm, cmd, want_rc=0, timeout=120):
        rc, out = vm.root(cmd, timeout)
        self.assertEqual(rc, want_rc, "%s: rc %d\n%s" % (cmd, rc, out))
        return out

    def wait_for(self, vm, cmd, timeout=120):
        end = time.monotonic() + timeout
        while True:
            rc, out = vm.root(cmd)
            if rc == 0:
                return out
            self.assertLess(time.monotonic(), end, "%s never succeeded: %s" % (cmd, out))
            time.sleep(2)

    def assert_kernel_args(self, vm):
        """Hugepages reserved and core 1 isolated by the kernel command
        line; the dataplane's memory in hugepages."""
        self.assertIn("hugepages=192 isolcpus=1", self.assert_root(vm, "cat /proc/cmdline"))
        self.assertEqual(self.assert_root(vm, "cat /sys/devices/system/cpu/isolated").strip(), "1")
        meminfo = self.assert_root(vm, "grep -E 'HugePages_(Total|Free)' /proc/meminfo")
        total = int(re.search(r"HugePages_Total:\s+(\d+)", meminfo).group(1))
        free = int(re.search(r"HugePages_Free:\s+(\d+)", meminfo).group(1))
        self.assertEqual(total, 192)
        self.assertLess(free, total, "the dataplane uses no hugepage")

    def test_boot_route_monitor_login_save_update_fallback(self):
        run_dir = self.out / "qemu"
        with Appliance(self.disk, str(run_dir), netns=self.topo.ns["r"], nics=["tapa", "tapb"],
                       extra_disks=[self.update2, self.update3]) as vm:
            self.bridge()
            # ---- boot 1: version 1 in slot a ----
            vm.wait_boot()
            self.assertIn("lnetr.slot=a lnetr.version=1", self.assert_root(vm, "cat /proc/cmdline"))
            self.wait_for(vm, "systemctl is-active lnetr-dataplane lnetr-control lnetr-healthy", 180)
            # Both daemons run as the unprivileged user, the dataplane with
            # the unit's capabilities only.
            for unit in ("lnetr-dataplane", "lnetr-control"):
                pid = self.assert_root(vm, "systemctl show -P MainPID %s" % unit).strip()
                self.assertNotEqual(pid, "0")
                user = self.assert_root(vm, "ps -o user= -p %s" % pid).strip()
                self.assertEqual(user, "lnetr", unit)
                caps = self.assert_root(vm, "grep CapEff /proc/%s/status" % pid)
                want = "0000008000807400" if unit == "lnetr-dataplane" else "0000000000000000"
                self.assertIn(want, caps, unit)
            self.assert_kernel_args(vm)
            # Logs are in the journal with severities.
            self.assertIn("forwarding with", self.assert_root(
                vm, "journalctl -u lnetr-dataplane -p info --no-pager -o cat | tail -n 50"))

            # LNet through the appliance: pings, verified PUTs and GETs.
            b = self.procs.start([peer_binary(), "--nid", self.topo.nid("b")] + self.topo.peer_options("b", 5) +
                                 ["server"], host=self.topo.host("b"))
            self.assertTrue(b.wait_stderr("serving", timeout=10), b.stderr_so_far)
            rc, doc, cp = self.peer("a", ["ping", self.topo.b_nid, "--timeout", "20"])
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            for op in ("put", "get"):
                rc, doc, cp = self.peer("a", [op, self.topo.b_nid, "--size", "1048576", "--count", "10",
                                              "--timeout", "30"], timeout=300)
                self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            rc, doc, cp = self.peer("a", ["ping", self.topo.ra_nid, "--timeout", "20"])
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            b.stop()

            # /metrics from outside the guest, checked by promtool.
            rc, ctype, body, err = scrape_metrics(self.topo.host("a"), self.topo.ra_ip + ":9798")
            self.assertEqual(rc, 0, err)
            m = parse_metrics(body)
            self.assertEqual(m[("lnetr_dataplane_up", frozenset())], 1.0)
            self.assertGreaterEqual(sum(v for (n, _), v in m.items() if n == "lnetr_forwarded_messages_total"), 20)
            check = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)

            # The admin on the serial console: the lnetrctl shell.
            vm.console.send("admin\n")
            vm.console.expect(r"Password: ", 30)
            vm.console.send(ADMIN_PASSWORD + "\n")
            vm.console.expect(r"lnetrctl > ", 60)
            gw = self.topo.rb_ip.rsplit(".", 1)[0] + ".9@tcp1"
            vm.console.send("route add --net tcp9 --gateway %s\n" % gw)
            vm.console.expect(r"lnetrctl > ", 30)
            vm.console.send("route show\n")
            vm.console.expect(r"net: tcp9(?s:.*)lnetrctl > ", 30)
            vm.console.send("save\n")
            vm.console.expect(r"saved .*/etc/lnetr/lnetr.yaml(?s:.*)lnetrctl > ", 30)
            vm.console.send("shell\n")
            vm.console.expect(r"not permitted(?s:.*)lnetrctl > ", 30)
            vm.console.send("exit\n")
            vm.console.expect(r"lnetr login: ", 30)
            self.assertIn("tcp9", self.assert_root(vm, "cat /etc/lnetr/lnetr.yaml"))

            # Update to version 2 (the second disk): slot b, on trial.
            out = self.assert_root(vm, "lnetr-update --tries 2 /dev/vdb", timeout=600)
            self.assertIn("version 2 boots next", out)
            self.assertIn("lnetr-2+2.conf", self.assert_root(vm, "ls /boot/efi/loader/entries"))
            vm.reboot()

            # ---- boot 2: version 2 in slot b, blessed once healthy ----
            vm.wait_boot()
            self.assertIn("lnetr.slot=b lnetr.version=2", self.assert_root(vm, "cat /proc/cmdline"))
            self.wait_for(vm, "systemctl is-active lnetr-healthy", 180)
            self.wait_for(vm, "test -e /boot/efi/loader/entries/lnetr-2.conf", 60)
            self.assert_kernel_args(vm)
            # The route saved from the shell survived the reboot and the update.
            self.wait_for(vm, "lnetrctl route show | grep -q tcp9", 60)
            out = self.assert_root(vm, "lnetr-update --tries 1 /dev/vdc", timeout=600)
            self.assertIn("version 3 boots next", out)
            entries = self.assert_root(vm, "ls /boot/efi/loader/entries").split()
            self.assertEqual(sorted(entries), ["lnetr-2.conf", "lnetr-3+1.conf"])
            vm.reboot()

            # ---- boot 3: version 3 never comes up; not blessed; reboots ----
            vm.wait_boot()
            self.assertIn("lnetr.version=3", self.assert_root(vm, "cat /proc/cmdline"))
            vm.console.expect(r"lnetr did not come up within 45 s|Rebooting|reboot", 240)

            # ---- boot 4: version 2 again ----
            vm.wait_boot()
            self.assertIn("lnetr.slot=b lnetr.version=2", self.assert_root(vm, "cat /proc/cmdline"))
            entries = self.assert_root(vm, "ls /boot/efi/loader/entries").split()
            self.assertEqual(sorted(entries), ["lnetr-2.conf", "lnetr-3+0-1.conf"])
            self.wait_for(vm, "systemctl is-active lnetr-dataplane lnetr-control", 180)
            self.assertEqual(vm.boots, 4)

            # A stuck worker: the watchdog (WatchdogSec=10) is no longer
            # fed, systemd restarts the dataplane, and it routes again.
            restarts = int(self.assert_root(vm, "systemctl show -P NRestarts lnetr-dataplane").strip())
            self.assertIn("stalled", self.assert_root(
                vm, "echo 'fault stall 0 120' | socat -t 5 - UNIX-CONNECT:/run/lnetr/dataplane.sock"))
            self.wait_for(vm, "test $(systemctl show -P NRestarts lnetr-dataplane) -gt %d" % restarts, 90)
            self.assertIn("Watchdog timeout", self.assert_root(
                vm, "journalctl -u lnetr-dataplane --no-pager -o cat | grep -i watchdog"))
            self.wait_for(vm, "systemctl is-active lnetr-dataplane", 120)
            b = self.procs.start([peer_binary(), "--nid", self.topo.nid("b")] + self.topo.peer_options("b", 5) +
                                 ["server"], host=self.topo.host("b"))
            self.assertTrue(b.wait_stderr("serving", timeout=10), b.stderr_so_far)
            end = time.monotonic() + 90
            while True:  # the peers' gateway checks see the router again
                rc, doc, cp = self.peer("a", ["put", self.topo.b_nid, "--size", "4096", "--count", "5",
                                              "--timeout", "10"])
                if rc == 0 or time.monotonic() > end:
                    break
                time.sleep(3)
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            b.stop()


if __name__ == "__main__":
    unittest.main()
