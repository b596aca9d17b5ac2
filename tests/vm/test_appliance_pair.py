"""Two appliances as the gateways of one route, lnetr-peer clients writing
verified data through them, and one of them updated with `system update`
(which drains it first): the clients see no failed operation, the updated
router comes back, and both carry traffic again.

    client 10.1.0.2@tcp  --  A 10.1.0.1 / 10.2.0.1   --  server 10.2.0.2@tcp1
                         --  B 10.1.0.3 / 10.2.0.3   --
    management 192.168.100.1: A .10, B .11

One image serves both (`--nic` names each appliance's NICs by their MACs),
booted with the documented qemu command (docs/appliance.md) on taps of their
own.  The clients and servers check their gateways every 5 s; the routers
use the example configuration's intervals, so an updated router routes again
110 s after it is healthy, as a kernel router would.

Opt-in (suite `long`, `-Dlong_tests=true`): two TCG guests at once, about
25 minutes.  Needs root, qemu, OVMF and Debian's archive.
"""

import json
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from lnetr_test import Host, Processes, parse_yaml, peer_binary  # noqa: E402

from appliance import Appliance, Networks, doc_blocks, qemu_argv, shell_commands, taps_of  # noqa: E402
from test_appliance import DOC, IMAGES, skip_reason  # noqa: E402

ROUTERS = {
    "a": {"lan0": ("52:54:00:4c:4e:01", "10.1.0.1"), "lan1": ("52:54:00:4c:4e:02", "10.2.0.1"),
          "mgmt0": ("52:54:00:4c:4e:03", "192.168.100.10")},
    "b": {"lan0": ("52:54:00:4c:4e:11", "10.1.0.3"), "lan1": ("52:54:00:4c:4e:12", "10.2.0.3"),
          "mgmt0": ("52:54:00:4c:4e:13", "192.168.100.11")},
}
HOSTS = {"lan0": "10.1.0.2/24", "lan1": "10.2.0.2/24", "mgmt0": "192.168.100.1/24"}
CLIENT, SERVER = "10.1.0.2@tcp", "10.2.0.2@tcp1"


@unittest.skipIf(skip_reason(), skip_reason())
class TwoRoutersOneUpdated(unittest.TestCase):

    def setUp(self):
        self.blocks = doc_blocks(DOC)
        IMAGES.mkdir(parents=True, exist_ok=True)
        self.rundir = Path(tempfile.mkdtemp(prefix="pair-", dir=IMAGES))
        self.home = self.rundir / "home"
        (self.home / ".ssh").mkdir(parents=True)
        key = self.home / ".ssh" / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        self.ssh_config = self.rundir / "ssh_config"
        self.ssh_config.write_text("Host *\n  IdentityFile %s\n  UserKnownHostsFile /dev/null\n"
                                   "  StrictHostKeyChecking no\n  ConnectTimeout 20\n  LogLevel ERROR\n" % key)
        self.images = self.rundir / "build" / "image"
        nics = " ".join("--nic %s=%s,%s/24" % (name, mac, addr)
                        for r in ROUTERS.values() for name, (mac, addr) in r.items())
        for version in (1, 2):
            self.sh("images/build --version %d --config deploy/examples/lnetr.yaml %s --admin-key %s.pub "
                    "--admin-sudo --out %s --test-console" % (version, nics, key, self.images), cwd=ROOT, timeout=3600)
        _, qemu = shell_commands(self.blocks["qemu"])
        self.qemu = qemu
        self.net = Networks({name: (["lnetr-" + name, "lnetrb-" + name], HOSTS[name]) for name in HOSTS})
        self.net.up()
        self.addCleanup(self.net.down)
        self.procs = Processes()
        self.addCleanup(self.procs.cleanup)
        http = self.net.popen("mgmt0", ["python3", "-m", "http.server", "8000", "--bind", "192.168.100.1",
                                        "--directory", str(self.images)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(http.wait)
        self.addCleanup(http.kill)

    def sh(self, cmd, cwd, timeout=600, check=True, netns=None):
        argv = ["bash", "-c", cmd]
        if netns:
            argv = ["ip", "netns", "exec", self.net.ns[netns]] + argv
        cp = subprocess.run(argv, cwd=str(cwd), capture_output=True, text=True, timeout=timeout)
        if check and cp.returncode != 0:
            raise AssertionError("%s: exit %d\n%s%s" % (cmd, cp.returncode, cp.stdout[-3000:], cp.stderr[-5000:]))
        return cp

    def ssh(self, router, command, check=True, timeout=600):
        return self.sh("ssh -F %s admin@%s %s" % (self.ssh_config, ROUTERS[router]["mgmt0"][1], shlex.quote(command)),
                       cwd=self.rundir, check=check, netns="mgmt0", timeout=timeout)

    def boot(self, router):
        """The documented qemu command, with this router's taps, MACs and
        firmware variables."""
        d = self.rundir / ("qemu-" + router)
        (d / "build").mkdir(parents=True)
        (d / "build" / "image").symlink_to(self.images)
        cmd = self.qemu
        if router == "b":
            cmd = cmd.replace("ifname=lnetr-", "ifname=lnetrb-")
            for name, (mac, _) in ROUTERS["b"].items():
                cmd = cmd.replace(ROUTERS["a"][name][0], mac)
        self.sh(self.blocks["qemu"].split("\n")[0], cwd=d)  # cp of the firmware variables
        taps = set(taps_of(cmd))
        vm = Appliance(qemu_argv(cmd, str(d)), str(d), disk=str(self.images / "lnetr-1.img"), netns=self.net.ns["r"],
                       on_start=lambda: self.net.bridge_taps(only=taps))
        self.addCleanup(vm.stop)
        return vm

    def forwarded(self, router):
        return parse_yaml(self.ssh(router, "system show").stdout)["system"]["dataplane"]

    def wait_routing(self, router, timeout):
        end = time.monotonic() + timeout
        while True:
            dp = self.forwarded(router)
            if dp.get("routing") == "enabled":
                return dp
            self.assertLess(time.monotonic(), end, dp)
            time.sleep(5)

    def test_clients_see_no_failed_operation_while_a_router_is_updated(self):
        vms = {r: self.boot(r) for r in ROUTERS}
        for vm in vms.values():
            vm.wait_boot(600)
        # --admin-sudo: admin may run anything as root, with its password.
        groups = vms["a"].root("id -nG admin")[1].split()
        self.assertIn("sudo", groups)
        self.assertIn("(ALL : ALL) ALL", vms["a"].root("sudo -l -U admin")[1])
        for r, vm in vms.items():
            end = time.monotonic() + 300
            while vm.root("systemctl is-active lnetr-healthy")[0] != 0:
                self.assertLess(time.monotonic(), end, "router %s never healthy" % r)
                time.sleep(3)
        routes = lambda far, side: sum((["--route", "%s=%s@%s" % (far, ROUTERS[r][side][1], "tcp" if side == "lan0"
                                                                  else "tcp1")] for r in ROUTERS), [])
        server = self.procs.start([peer_binary(), "--nid", SERVER, "--router-check-interval", "5"] +
                                  routes("tcp", "lan1") + ["server"], host=Host.netns(self.net.ns["lan1"]))
        self.assertTrue(server.wait_stderr("serving", timeout=20), server.stderr_so_far)
        before = {r: self.forwarded(r)["forwarded"] for r in ROUTERS}
        # A write load long enough to cover the drain, the update, the
        # reboot and the updated router's return.
        out = self.rundir / "brw.json"
        load = self.procs.start([peer_binary(), "--nid", CLIENT, "--router-check-interval", "5"] + routes("tcp1", "lan0") +
                                ["brw", SERVER, "--op", "write", "--size", "65536", "--concurrency", "4",
                                 "--duration", "1500", "--timeout", "120", "--json", str(out)],
                                host=Host.netns(self.net.ns["lan0"]))
        time.sleep(30)
        mid = {r: self.forwarded(r)["forwarded"] for r in ROUTERS}
        for r in ROUTERS:
            self.assertGreater(mid[r], before[r], "router %s carries none of the load" % r)
        # Update A: drained (clients move to B), written, rebooted.
        vms["a"].rebooting()
        cp = self.ssh("a", "system update http://192.168.100.1:8000/lnetr-2.update", check=False, timeout=1800)
        self.assertIn("drain: done after", cp.stdout, cp.stdout + cp.stderr)
        self.assertIn("every peer using this router has seen routing disabled", cp.stdout)
        vms["a"].wait_boot(600)
        self.assertIn("lnetr.version=2", vms["a"].root("cat /proc/cmdline")[1])
        self.wait_routing("a", 600)
        # A carries traffic again.
        back = self.forwarded("a")["forwarded"]
        time.sleep(30)
        self.assertGreater(self.forwarded("a")["forwarded"], back, "the updated router carries nothing")
        load.stop(signal.SIGINT)
        with open(out) as f:
            res = json.load(f)
        self.assertGreater(res["ops"], 100, res)
        self.assertEqual(res["errors"], 0, res)
        server.stop()
        self.assertIn("pattern_errors: 0", server.stdout)


if __name__ == "__main__":
    unittest.main()
