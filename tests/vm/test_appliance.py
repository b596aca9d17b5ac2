"""The appliance as docs/appliance.md tells an operator to build, boot, use,
update and roll it back: every command the test runs on the operator's
behalf is taken from the document's marked blocks (with the test's own
additions named where they are made).  One qemu disk.

ApplianceByTheDocs (the vm suite), four boots (the guest's reboots are
power cycles: see appliance.Appliance):

1. version 1 (slot a), `-cpu max` as documented: services unprivileged,
   the firewall (ports scanned from the data and management networks),
   ssh by key only, the admin's shell over ssh and on the serial console,
   verified LNet traffic through it, /metrics from the management network,
   updates refused (bad signature, tampered payload, a cut file uploaded
   with scp), then `system update URL`: drain and reboot;
2. version 2 (slot b) on trial: blessed, routing held until healthy, the
   configuration, admin's key and the host key kept; `system rollback`;
3. version 1 again (slot a, the default now); `system reboot`;
4. version 1 still: a stalled worker restarted by the watchdog; version 2
   installed again, one try.

ApplianceOverTime (opt-in: the long suite) goes on from there:

5. with `-cpu qemu64`: version 2's dataplane refuses the CPU, its trial
   fails, it reboots;
6. version 1 (the fallback), whose dataplane refuses too: down, and the
   shell, `system show` and the login banner say why.

(test_vm_smoke's OldCpu checks the dataplane's refusal of an old CPU in
the vm suite.)  Needs root, qemu, OVMF and Debian's archive (images/build
and deploy/package install what they lack).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from lnetr_router import parse_metrics  # noqa: E402
from lnetr_test import Host, Processes, parse_yaml, peer_binary  # noqa: E402

from appliance import (Appliance, Networks, Pty, disk_of, doc_blocks, open_ports, qemu_argv,  # noqa: E402
                       shell_commands, shell_lines, taps_of)

DOC = ROOT / "docs" / "appliance.md"
IMAGES = Path(os.environ.get("LNETR_VM_CACHE") or ROOT / "build" / "vm") / "appliance"
ROUTER = {"lan0": "10.1.0.1", "lan1": "10.2.0.1", "mgmt0": "192.168.100.10"}
HOSTS = {"lan0": "10.1.0.2/24", "lan1": "10.2.0.2/24", "mgmt0": "192.168.100.1/24"}
CLIENT, SERVER = "10.1.0.2@tcp", "10.2.0.2@tcp1"
# The test's own additions to the documented build: where the images go, a
# root shell on a virtio console for its checks, a break-glass root
# password (checked on the serial console), and (an overlay) the fault
# requests and a shorter health timeout.
BUILD_EXTRA = ["--test-console", "--root-password", "'break glass'"]


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (namespaces, debootstrap, taps)"
    for tool in ("qemu-system-x86_64", "debootstrap", "ssh"):
        if not shutil.which(tool):
            return tool + " not installed (deploy/setup installs it)"
    return None


def test_overlay(path):
    """The fault requests (a stalled worker) for the watchdog's test, and a
    shorter health timeout."""
    drop = Path(path) / "etc" / "systemd" / "system" / "lnetr-healthy.service.d"
    drop.mkdir(parents=True)
    (drop / "timeout.conf").write_text("[Service]\nEnvironment=LNETR_HEALTH_TIMEOUT=45 LNETR_HEALTH_STABLE=5\n")
    drop = Path(path) / "etc" / "systemd" / "system" / "lnetr-dataplane.service.d"
    drop.mkdir(parents=True)
    (drop / "test-faults.conf").write_text("[Service]\nEnvironment=LNETR_TEST_FAULTS=1\n")


class ApplianceSteps:
    """What both tests share: the images, the networks, the steps."""

    @classmethod
    def setUpClass(cls):
        cls.blocks = doc_blocks(DOC)
        for name in ("build", "qemu", "login", "update", "update-file", "rollback", "metrics"):
            if name not in cls.blocks:
                raise AssertionError("docs/appliance.md has no block marked <!-- test: %s -->" % name)
        IMAGES.mkdir(parents=True, exist_ok=True)
        for old in sorted(IMAGES.glob("run-*"), key=lambda p: p.stat().st_mtime)[:-2]:
            shutil.rmtree(old, ignore_errors=True)
        cls.rundir = Path(tempfile.mkdtemp(prefix="run-", dir=IMAGES))
        cls.home = cls.rundir / "home"
        (cls.home / ".ssh").mkdir(parents=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(cls.home / ".ssh" / "id_ed25519")],
                       check=True)
        # ssh reads the user's ~/.ssh from the password database, not $HOME:
        # the test's ssh and scp take this file (-F) instead.
        cls.ssh_config = cls.rundir / "ssh_config"
        cls.ssh_config.write_text(
            "Host *\n  IdentityFile %s\n  UserKnownHostsFile %s\n  StrictHostKeyChecking accept-new\n"
            "  ConnectTimeout 20\n  ServerAliveInterval 5\n  ServerAliveCountMax 3\n"
            % (cls.home / ".ssh" / "id_ed25519", cls.home / ".ssh" / "known_hosts"))
        cls.overlay = cls.rundir / "overlay"
        test_overlay(cls.overlay)
        cls.image_dir = cls.rundir / "build" / "image"
        cls.build_images()
        cls.make_bad_updates()
        cls.mark('the networks the documented NICs are on')
        # ---- the networks the documented NICs are on ----
        cls.qemu_cp, cls.qemu_cmd = shell_commands(cls.blocks["qemu"])
        taps = taps_of(cls.qemu_cmd)
        names = {"lnetr-" + n: n for n in ROUTER}
        cls.net = Networks({names[t]: (t, HOSTS[names[t]]) for t in taps})
        cls.net.up()
        cls.procs = Processes()
        cls.http = cls.net.popen("mgmt0", ["python3", "-m", "http.server", "8000", "--bind", "192.168.100.1",
                                            "--directory", str(cls.image_dir)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "http", None):
            cls.http.kill()
            cls.http.wait()
        if getattr(cls, "procs", None):
            cls.procs.cleanup()
        if getattr(cls, "net", None):
            cls.net.down()

    @classmethod
    def build_images(cls):
        """The documented build: the package, versions 1 and 2."""
        package, build = shell_commands(cls.blocks["build"])
        cls.sh(package, cwd=ROOT, timeout=3600)
        for version in (1, 2):
            cmd = build.replace("--version 1", "--version %d" % version)
            cls.sh("%s --out %s --overlay %s %s" % (cmd, cls.image_dir, cls.overlay, " ".join(BUILD_EXTRA)),
                   cwd=ROOT, timeout=3600)

    @classmethod
    def sh(cls, cmd, cwd, timeout=600, check=True, netns=None):
        """A documented shell command, as root, with HOME the test's (for
        ~/.ssh); ssh and scp read the test's configuration."""
        cmd = re.sub(r"\b(ssh|scp) ", r"\1 -F %s " % cls.ssh_config, cmd) if hasattr(cls, "ssh_config") else cmd
        argv = ["bash", "-c", cmd]
        if netns:
            argv = ["ip", "netns", "exec", cls.net.ns[netns]] + argv
        cp = subprocess.run(argv, cwd=str(cwd), capture_output=True, text=True, timeout=timeout,
                            env=dict(os.environ, HOME=str(cls.home)))
        if check and cp.returncode != 0:
            raise AssertionError("%s: exit %d\n%s%s" % (cmd, cp.returncode, cp.stdout[-3000:], cp.stderr[-5000:]))
        return cp

    @classmethod
    def make_bad_updates(cls):
        """lnetr-2.update with a tampered payload byte, signed by another
        key, and cut short (for the scp upload)."""
        good = cls.image_dir / "lnetr-2.update"
        data = bytearray(good.read_bytes())
        tampered = bytearray(data)
        tampered[4096 + 100000] ^= 0x40  # early: refused without streaming it all
        (cls.image_dir / "lnetr-2-tampered.update").write_bytes(tampered)
        header = data[:4096].rstrip(b"\0").decode()
        manifest = header[:header.index("signature ")]
        other = cls.rundir / "other-key.pem"
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(other)], check=True)
        (cls.rundir / "manifest").write_text(manifest)
        sig = subprocess.run(["openssl", "pkeyutl", "-sign", "-inkey", str(other), "-rawin", "-in",
                              str(cls.rundir / "manifest")], capture_output=True, check=True).stdout
        import base64
        new_header = (manifest + "signature " + base64.b64encode(sig).decode() + "\n").encode().ljust(4096, b"\0")
        (cls.image_dir / "lnetr-2-other-key.update").write_bytes(new_header + data[4096:])
        cut = cls.rundir / "cut"
        cut.mkdir()
        (cut / "lnetr-2.update").write_bytes(data[:8 << 20])

    # ---- helpers ----

    def boot(self, cpu=None, new_disk=True):
        """Start qemu with the documented command (in its directory, after
        its cp of the firmware variables when the disk is new)."""
        vm_dir = self.rundir / "qemu"
        vm_dir.mkdir(exist_ok=True)
        if new_disk:
            # The documented command's build/image/, in its directory.
            (vm_dir / "build").mkdir(exist_ok=True)
            if not (vm_dir / "build" / "image").exists():
                (vm_dir / "build" / "image").symlink_to(self.image_dir)
            self.sh(self.qemu_cp, cwd=vm_dir)
        vm = Appliance(qemu_argv(self.qemu_cmd, str(vm_dir), cpu=cpu), str(vm_dir),
                       disk=str(vm_dir / disk_of(self.qemu_cmd)), netns=self.net.ns["r"], new_disk=new_disk,
                       on_start=self.net.bridge_taps)
        return vm

    def ok(self, vm, cmd, timeout=120):
        rc, out = vm.root(cmd, timeout)
        self.assertEqual(rc, 0, "%s: rc %d\n%s" % (cmd, rc, out))
        return out

    def wait_for(self, vm, cmd, timeout=120):
        end = time.monotonic() + timeout
        while True:
            rc, out = vm.root(cmd)
            if rc == 0:
                return out
            self.assertLess(time.monotonic(), end, "%s never succeeded: %s" % (cmd, out))
            time.sleep(2)

    def ssh(self, command, check=True, timeout=600):
        """One command as admin over ssh from the management network."""
        return self.sh("ssh admin@%s %s" % (ROUTER["mgmt0"], shlex.quote(command)), cwd=self.rundir, check=check,
                       netns="mgmt0", timeout=timeout)

    def session(self):
        """The documented login: an interactive ssh session on a pty, at the
        lnetrctl shell's prompt; (Pty, the banner)."""
        (login,) = shell_commands(self.blocks["login"])
        argv = ["ip", "netns", "exec", self.net.ns["mgmt0"]] + shlex.split(
            login.replace("ssh ", "ssh -tt -F %s " % self.ssh_config, 1))
        s = Pty(argv, env=dict(os.environ, HOME=str(self.home), TERM="dumb"))
        self.addCleanup(s.close)
        banner = s.expect(r"(?s)(.*?)lnetrctl > ", 120).group(1)
        return s, banner

    def until_reboot(self, vm, line, expected):
        """Type `line` in the admin's shell over ssh: what it prints first
        ((pattern, timeout) in turn), then the drain, and the reboot."""
        s, _ = self.session()
        vm.rebooting()
        self.mark(line)
        s.send(line)
        for pattern, timeout in expected + [(r"drain: done after \d+ s: every peer using this router has seen "
                                             r"routing disabled", 400), (r"rebooting", 60)]:
            s.expect(pattern, timeout)
            self.mark("... " + pattern[:40])
        s.wait(120)

    def versions(self):
        return parse_yaml(self.ssh("system versions").stdout)["system"]

    def system_show(self):
        return parse_yaml(self.ssh("system show").stdout)["system"]

    def peer(self, side, args, timeout=300):
        nid, route = (CLIENT, "tcp1=10.1.0.1@tcp") if side == "lan0" else (SERVER, "tcp=10.2.0.1@tcp1")
        cp = Host.netns(self.net.ns[side]).run(
            [peer_binary(), "--nid", nid, "--route", route, "--router-check-interval", "5"] + args, timeout=timeout)
        return cp.returncode, cp

    def start_peer(self, side):
        """A long-lived lnetr-peer (a server) on `side`, checking its
        gateway (the appliance) every 5 s."""
        nid, route = (CLIENT, "tcp1=10.1.0.1@tcp") if side == "lan0" else (SERVER, "tcp=10.2.0.1@tcp1")
        p = self.procs.start([peer_binary(), "--nid", nid, "--route", route, "--router-check-interval", "5", "server"],
                             host=Host.netns(self.net.ns[side]))
        self.assertTrue(p.wait_stderr("serving", timeout=20), p.stderr_so_far)
        return p

    def assert_healthy_boot(self, vm, slot, version):
        self.assertIn("lnetr.slot=%s lnetr.version=%d" % (slot, version), self.ok(vm, "cat /proc/cmdline"))
        self.wait_for(vm, "systemctl is-active lnetr-dataplane lnetr-control lnetr-healthy lnetr-firewall ssh", 240)
        self.mark("version %d healthy" % version)

    # ---- the test ----

    t0 = None

    @classmethod
    def mark(cls, what):
        """Progress on stderr, with the time since the test started."""
        if cls.t0 is None:
            cls.t0 = time.monotonic()
        print("appliance: %4.0f s: %s" % (time.monotonic() - cls.t0, what), file=sys.stderr, flush=True)

    def four_boots(self):
        """Boots 1 to 4 on a new disk; the machine, still running."""
        type(self).t0 = time.monotonic()
        vm = self.boot()
        self.addCleanup(lambda: vm.stop())
        self.phase1_version_1(vm)
        self.mark("boot 1 and the update done")
        self.phase2_version_2_on_trial(vm)
        self.mark("boot 2 and the rollback done")
        self.phase3_rolled_back(vm)
        self.system_reboot(vm)
        self.phase4_still_rolled_back(vm)
        self.phase4_stall_and_install_again(vm)
        self.mark("boots 3 and 4 done")
        return vm

    def phase1_version_1(self, vm):
        vm.wait_boot()
        self.mark("booted")
        self.assert_healthy_boot(vm, "a", 1)
        # Both daemons as the unprivileged user, the dataplane with the
        # unit's capabilities only.
        for unit in ("lnetr-dataplane", "lnetr-control"):
            pid = self.ok(vm, "systemctl show -P MainPID %s" % unit).strip()
            self.assertEqual(self.ok(vm, "ps -o user= -p %s" % pid).strip(), "lnetr", unit)
            want = "0000008000807400" if unit == "lnetr-dataplane" else "0000000000000000"
            self.assertIn(want, self.ok(vm, "grep CapEff /proc/%s/status" % pid), unit)
        # The documented kernel arguments: hugepages used, core 1 isolated.
        self.assertIn("hugepages=256 isolcpus=1 nohz_full=1", self.ok(vm, "cat /proc/cmdline"))
        self.assertEqual(self.ok(vm, "cat /sys/devices/system/cpu/isolated").strip(), "1")
        meminfo = self.ok(vm, "grep -E 'HugePages_(Total|Free)' /proc/meminfo")
        total, free = (int(x) for x in re.findall(r"HugePages_\w+:\s+(\d+)", meminfo))
        self.assertEqual(total, 256)
        self.assertLess(free, total, "the dataplane uses no hugepage")
        # The example configuration as written: the sockets' groups.
        self.assertEqual(self.ok(vm, "stat -c '%U:%G %a' /run/lnetr/control.sock /run/lnetr/control-ro.sock").split(),
                         ["lnetr:lnetr-admin", "660", "lnetr:lnetr-monitor", "660"])
        # NIs up as soon as the links are (no ping needed), routes to
        # gateways that do not exist down.
        nets = parse_yaml(self.ok(vm, "lnetrctl net show"))["net"]
        self.assertEqual({ni["nid"]: ni["status"] for n in nets for ni in n["local NI(s)"]},
                         {"10.1.0.1@tcp": "up", "10.2.0.1@tcp1": "up"})
        routes = parse_yaml(self.ok(vm, "lnetrctl route show -v"))["route"]
        self.assertEqual({r["gateway"]: r["state"] for r in routes}, {"10.2.0.11@tcp1": "down", "10.2.0.12@tcp1": "down"})

        self.mark('the firewall: LNet on the data NICs, ssh and metrics on mgmt0')
        # ---- the firewall: LNet on the data NICs, ssh and metrics on mgmt0 ----
        self.assertIn("policy drop", self.ok(vm, "nft list chain inet lnetr input"))
        listening = {int(p) for p in re.findall(r":(\d+)\s", self.ok(vm, "ss -Htln | awk '{print $4\" \"}'"))}
        self.assertTrue({22, 988, 9798} <= listening, listening)
        probe = listening | {80, 443, 8000, 8080, 111, 2049, 9100}
        self.assertEqual(open_ports(self.net, "mgmt0", ROUTER["mgmt0"], probe), {22, 9798})
        self.assertEqual(open_ports(self.net, "lan0", ROUTER["lan0"], probe), {988})
        self.assertEqual(open_ports(self.net, "lan1", ROUTER["lan1"], probe), {988})

        self.mark('ssh: keys only, no root')
        # ---- ssh: keys only, no root ----
        cp = self.sh("ssh -o PubkeyAuthentication=no -o PreferredAuthentications=password,keyboard-interactive "
                     "-o BatchMode=yes admin@%s true" % ROUTER["mgmt0"], cwd=self.rundir, check=False, netns="mgmt0")
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("Permission denied (publickey)", cp.stderr)
        cp = self.sh("ssh -o BatchMode=yes root@%s true" % ROUTER["mgmt0"], cwd=self.rundir, check=False, netns="mgmt0")
        self.assertIn("Permission denied", cp.stderr)
        self.host_key = (self.home / ".ssh" / "known_hosts").read_text()

        self.mark("the admin's shell over ssh: banner, verbs, save, no system shell")
        # ---- the admin's shell over ssh: banner, verbs, save, no system shell ----
        s, banner = self.session()
        self.assertIn("lnetr appliance 1 (slot a), lnetrctl", banner)
        self.assertNotIn("WARNING", banner)
        self.assertRegex(banner, r"state: up")
        s.send("route add --net tcp9 --gateway 10.2.0.9@tcp1")
        s.expect("lnetrctl > ", 30)
        s.send("save")
        s.expect(r"saved to /etc/lnetr/lnetr.yaml(?s:.*)lnetrctl > ", 30)
        s.send("shell")
        s.expect(r"not permitted(?s:.*)lnetrctl > ", 30)
        s.send("exit")
        self.assertEqual(s.wait(30), 0)
        v = self.versions()
        self.assertEqual(v["running"], {"slot": "a", "version": 1})
        self.assertEqual([(x["slot"], x["version"]) for x in v["slots"]], [("a", 1), ("b", "none")])

        self.mark('LNet through it: pings, verified PUTs and GETs')
        # ---- LNet through it: pings, verified PUTs and GETs ----
        self.start_peer("lan1")
        for args in (["ping", SERVER, "--timeout", "30"],
                     ["put", SERVER, "--size", "1048576", "--count", "10", "--timeout", "60"],
                     ["get", SERVER, "--size", "1048576", "--count", "10", "--timeout", "60"]):
            rc, cp = self.peer("lan0", args)
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        # The client lives on too, checking its gateway, as a Lustre node
        # does: a drain waits until such peers have seen routing disabled.
        self.start_peer("lan0")

        self.mark('metrics from the management network, as documented')
        # ---- metrics from the management network, as documented ----
        (curl,) = shell_commands(self.blocks["metrics"])
        body = self.sh(curl, cwd=self.rundir, netns="mgmt0").stdout
        m = parse_metrics(body)
        self.assertEqual(m[("lnetr_dataplane_up", frozenset())], 1.0)
        self.assertGreaterEqual(sum(v for (n, _), v in m.items() if n == "lnetr_forwarded_messages_total"), 40)
        check = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)

        self.mark("the serial console: admin's password works there")
        # ---- the serial console: admin's password works there ----
        vm.console.skip()
        vm.console.send("\n")
        vm.console.expect(r"lnetr login: ", 30)
        vm.console.send("admin\n")
        vm.console.expect(r"Password: ", 30)
        vm.console.send("console only\n")
        vm.console.expect(r"lnetr appliance 1 \(slot a\)(?s:.*)lnetrctl > ", 90)
        vm.console.send("exit\n")
        vm.console.expect(r"lnetr login: ", 30)
        # The break-glass root: on the serial console only (ssh refused it above).
        vm.console.send("root\n")
        vm.console.expect(r"Password: ", 30)
        vm.console.send("break glass\n")
        vm.console.expect(r"root@lnetr:~# ", 90)
        vm.console.send("exit\n")
        vm.console.expect(r"lnetr login: ", 30)

        self.mark('updates that must be refused, the slot left as it was')
        # ---- updates that must be refused, the slot left as it was ----
        url = "http://192.168.100.1:8000/"
        cp = self.ssh("system update %slnetr-2-other-key.update" % url, check=False)
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("its signature does not verify with this appliance's update key", cp.stderr)
        cp = self.ssh("system update %slnetr-2-tampered.update --no-reboot" % url, check=False)
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("does not match its signed SHA-256", cp.stderr)
        # The documented upload, of a file cut short.
        for cmd in shell_commands(self.blocks["update-file"]):
            cp = self.sh(cmd, cwd=self.rundir / "cut", netns="mgmt0", check=False)
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("does not match its signed SHA-256", cp.stderr)
        self.assertEqual(self.versions()["slots"][1]["version"], "none")
        self.assertEqual(self.ok(vm, "ls /boot/efi/loader/entries").split(), ["lnetr-1.conf"])

        self.mark('the documented update: verify, write slot b, drain, reboot')
        # ---- the documented update: verify, write slot b, drain, reboot ----
        update, _ = shell_lines(self.blocks["update"])
        self.until_reboot(vm, update, [(r"writing version 2 into slot b", 120),
                                       (r"version 2 \(slot b\) boots next, on trial \(3 boot\(s\)\)", 900)])

    def phase2_version_2_on_trial(self, vm):
        vm.wait_boot()
        self.mark("booted")
        self.assert_healthy_boot(vm, "b", 2)
        self.wait_for(vm, "test -e /boot/efi/loader/entries/lnetr-2.conf", 60)
        # Routing was held until the new version was healthy, then enabled.
        self.wait_for(vm, "test ! -e /var/lib/lnetr/routing-held", 60)
        self.assertIn("routing enabled again", self.ok(vm, "journalctl -u lnetr-healthy -o cat --no-pager"))
        self.assertIn(self.system_show()["dataplane"]["routing"], ("starting", "enabled"))
        # The configuration, admin's key and the host's identity survived
        # (ssh checks the host key strictly now).
        self.assertIn("hugepages=256 isolcpus=1 nohz_full=1", self.ok(vm, "cat /proc/cmdline"))
        self.ssh_config.write_text(self.ssh_config.read_text().replace("accept-new", "yes"))
        self.assertIn("tcp9", self.ssh("route show").stdout)
        self.assertEqual((self.home / ".ssh" / "known_hosts").read_text(), self.host_key)
        _, versions_line = shell_lines(self.blocks["update"])
        v = parse_yaml(self.ssh(versions_line).stdout)["system"]
        self.assertEqual(v["running"], {"slot": "b", "version": 2})
        self.assertEqual([(x["slot"], x["version"], x["state"]) for x in v["slots"]],
                         [("a", 1, "blessed"), ("b", 2, "blessed")])
        self.assertTrue(v["boots next"].startswith("lnetr-2.conf"), v)
        self.mark('the documented rollback')
        # ---- the documented rollback ----
        (rollback,) = shell_lines(self.blocks["rollback"])
        self.until_reboot(vm, rollback, [(r"version 1 \(slot a\) boots from now on", 120)])

    def phase3_rolled_back(self, vm):
        vm.wait_boot()
        self.mark("booted")
        self.assert_healthy_boot(vm, "a", 1)
        v = self.versions()
        self.assertEqual(v["running"], {"slot": "a", "version": 1})
        self.assertTrue(v["boots next"].startswith("lnetr-1.conf (the default"), v)
        # Version 2 stays installed, blessed, not the default.
        self.assertEqual([(x["slot"], x["version"], x["state"]) for x in v["slots"]],
                         [("a", 1, "blessed"), ("b", 2, "blessed")])

    def system_reboot(self, vm):
        vm.rebooting()
        cp = self.ssh("system reboot", check=False, timeout=600)
        self.assertIn("rebooting", cp.stdout)

    def phase4_still_rolled_back(self, vm):
        vm.wait_boot()
        self.mark("booted")
        self.assert_healthy_boot(vm, "a", 1)
        self.assertEqual(vm.power_cycles, 3)
        v = self.versions()
        self.assertEqual(v["running"], {"slot": "a", "version": 1})
        self.assertTrue(v["boots next"].startswith("lnetr-1.conf (the default"), v)

    def phase4_stall_and_install_again(self, vm):
        # A stuck worker: the watchdog (WatchdogSec=10) is no longer fed,
        # systemd restarts the dataplane, and it answers again.
        restarts = int(self.ok(vm, "systemctl show -P NRestarts lnetr-dataplane").strip())
        self.assertIn("stalled", self.ok(
            vm, "echo 'fault stall 0 120' | socat -t 5 - UNIX-CONNECT:/run/lnetr/dataplane.sock"))
        self.wait_for(vm, "test $(systemctl show -P NRestarts lnetr-dataplane) -gt %d" % restarts, 90)
        self.assertIn("Watchdog timeout", self.ok(vm, "journalctl -u lnetr-dataplane --no-pager -o cat | grep -i watchdog"))
        self.wait_for(vm, "lnetrctl system show | grep -q 'state: up'", 120)
        # Version 2 again, one try, for the boots on an old CPU.
        cp = self.ssh("system update http://192.168.100.1:8000/lnetr-2.update --no-reboot --tries 1")
        self.assertIn("version 2 (slot b) boots next, on trial (1 boot(s))", cp.stdout)
        # Over the blessed version 2, and no longer pinned to version 1.
        v = self.versions()
        self.assertEqual([(x["slot"], x["version"], x["state"]) for x in v["slots"]],
                         [("a", 1, "blessed"), ("b", 2, "on trial (1 try left)")])
        self.assertEqual(self.ok(vm, "ls /boot/efi/loader/entries").split(), ["lnetr-1.conf", "lnetr-2+1.conf"])
        self.assertNotIn("default", self.ok(vm, "cat /boot/efi/loader/loader.conf"))

    def phase5_6_old_cpu(self, vm):
        self.mark('boot 5: version 2 on trial; its dataplane refuses the CPU')
        # ---- boot 5: version 2 on trial; its dataplane refuses the CPU ----
        # It fails for good (no restarts): the health check does not wait
        # out its timeout, and says why on the console before the reboot.
        vm.console.expect(r"Command line: .*lnetr\.slot=b lnetr\.version=2", 240)
        vm.console.expect(r"lnetr did not come up: lnetr-dataplane failed and is not restarted: this version on "
                          r"trial is not blessed; rebooting\. .*lnetr-dataplane: this CPU lacks [a-z0-9_ ]*ssse3 "
                          r"sse4_1 sse4_2 popcnt", 240)
        vm.console.expect(r"reboot: Restarting system", 240)
        vm.rebooting()
        self.mark('boot 6: version 1, the fallback; down, and saying why')
        # ---- boot 6: version 1, the fallback; down, and saying why ----
        vm.wait_boot()
        self.assertIn("lnetr.slot=a lnetr.version=1", self.ok(vm, "cat /proc/cmdline"))
        self.assertEqual(sorted(self.ok(vm, "ls /boot/efi/loader/entries").split()),
                         ["lnetr-1.conf", "lnetr-2+0-1.conf"])
        self.wait_for(vm, "systemctl is-failed lnetr-dataplane", 120)
        self.assertEqual(self.ok(vm, "systemctl show -P NRestarts lnetr-dataplane").strip(), "0")
        dp = self.system_show()["dataplane"]
        self.assertEqual(dp["state"], "down")
        self.assertRegex(dp["last_stop"], r"^stopped with exit status 79 at .*: lnetr-dataplane: this CPU lacks ")
        s, banner = self.session()
        self.assertIn("WARNING: the router is not forwarding: the dataplane is down", banner)
        self.assertIn("this CPU lacks", banner)
        s.send("exit")
        s.wait(30)
        # A blessed version is not rebooted: its health check fails.
        self.wait_for(vm, "systemctl is-failed lnetr-healthy", 120)
        self.assertIn("lnetr did not come up", self.ok(vm, "journalctl -u lnetr-healthy -o cat --no-pager"))
        cycles = vm.power_cycles
        time.sleep(15)
        self.assertEqual(vm.power_cycles, cycles, "a blessed version rebooted")


@unittest.skipIf(skip_reason(), skip_reason())
class ApplianceByTheDocs(ApplianceSteps, unittest.TestCase):

    def test_build_boot_operate_update_and_roll_back(self):
        self.four_boots()


@unittest.skipIf(skip_reason(), skip_reason())
class ApplianceOverTime(ApplianceSteps, unittest.TestCase):

    def test_update_roll_back_reboot_stall_and_refuse_an_old_cpu(self):
        vm = self.four_boots()
        vm.poweroff()
        vm = self.boot(cpu="qemu64", new_disk=False)
        self.addCleanup(lambda: vm.stop())
        self.phase5_6_old_cpu(vm)
        self.mark("boots 5 and 6 done")


if __name__ == "__main__":
    unittest.main()
