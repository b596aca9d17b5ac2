"""The qemu guest harness itself, in one boot: the agent runs commands, the
project's build is there, both soft-RoCE devices are ACTIVE, RDMA CM and
verbs connect across them over the qemu hub, background commands are
spawned and killed. Needs root and qemu; skips otherwise."""

import os
import re
import signal
import sys
import time
import unittest
from pathlib import Path

import lnetr_vm

A, B = "10.99.2.1", "10.99.3.1"


def log(msg):
    print(f"vm-smoke: {msg}", file=sys.stderr, flush=True)


class VmSmoke(unittest.TestCase):
    guest = None

    @classmethod
    def setUpClass(cls):
        reason = lnetr_vm.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.t0 = time.monotonic()
        cls.guest = lnetr_vm.Guest(nics=2, name="vm-smoke")
        try:
            cls.guest.start()
            t = time.monotonic()
            cls.links = cls.guest.setup_rxe({0: f"{A}/24", 1: f"{B}/24"})
            cls.rxe_seconds = time.monotonic() - t
        except BaseException:
            cls.guest.stop(timeout=0)
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.guest:
            cls.guest.stop()
            log(f"boot {cls.guest.boot_seconds:.1f} s (guest uptime {cls.guest.ready_info['uptime']:.1f} s), "
                f"rxe setup {cls.rxe_seconds:.1f} s, whole test {time.monotonic() - cls.t0:.1f} s; "
                f"console log {cls.guest.console}")

    def run_ok(self, cmd, timeout=30, **kw):
        rc, out, err = self.guest.run(cmd, timeout=timeout, **kw)
        self.assertEqual(rc, 0, f"{cmd!r}: {rc}\n{out}\n{err}")
        return out

    def counter(self, dev, name):
        return int(self.run_ok(f"cat /sys/class/infiniband/{dev}/ports/1/hw_counters/{name}"))

    def test_agent_runs_commands(self):
        g = self.guest
        self.assertEqual(g.run("echo out; echo err >&2; exit 7"), (7, "out\n", "err\n"))
        self.assertEqual(g.run('echo "$(pwd) $FOO $(id -u)"', env={"FOO": "bar"}, cwd="/tmp"),
                         (0, "/tmp bar 0\n", ""))
        self.assertEqual(self.run_ok("uname -r").strip(), g.kernel.version)
        self.assertIn("UP", self.run_ok("ip -br link show lo"))
        self.run_ok("ping -c 1 -W 5 127.0.0.1")
        # The source tree and the build, read-write at the same path.
        root = lnetr_vm.SOURCE_ROOT
        self.run_ok(f"test -f {root}/meson.build")
        build = Path(os.environ.get("LNETR_BUILD") or root / "build").resolve()
        probe = build / f"vm-smoke-{os.getpid()}"
        try:
            self.run_ok(f"echo written in the guest > {probe}")
            self.assertEqual(probe.read_text(), "written in the guest\n")
        finally:
            probe.unlink(missing_ok=True)
        # Commands start in the host's directory, with its LNETR_* variables.
        self.assertEqual(self.run_ok("pwd").strip(), os.getcwd())
        self.assertEqual(self.run_ok("echo $LNETR_BUILD").strip(), os.environ.get("LNETR_BUILD", ""))
        # A project binary runs in the guest unchanged (unless built for an
        # instruction set qemu does not emulate: the o2ib tests skip then).
        peer = os.environ.get("LNETR_PEER")
        if peer and not g.build_cannot_run():
            self.assertIn("Usage: lnetr-peer", self.run_ok('"$LNETR_PEER" --help'))
        # A command past its timeout is killed and reported; the agent goes on.
        t = time.monotonic()
        with self.assertRaises(lnetr_vm.GuestTimeout):
            g.run("sleep 60", timeout=1)
        self.assertLess(time.monotonic() - t, 10)
        self.assertEqual(g.run("echo still here")[1], "still here\n")

    def test_rxe_devices_active(self):
        self.assertEqual(self.links, {"rxe0": "eth0", "rxe1": "eth1"})
        devices = self.run_ok("ibv_devices")
        for dev, eth in self.links.items():
            self.assertRegex(devices, rf"\b{dev}\b")
            info = self.run_ok(f"ibv_devinfo -d {dev}")
            self.assertIn("PORT_ACTIVE", info)
            self.assertIn("link_layer:\t\tEthernet", info)
            self.assertIn(f"netdev {eth}", self.run_ok(f"rdma link show {dev}/1"))
        self.assertEqual(self.run_ok("cat /sys/class/infiniband/rxe0/ports/1/gids/1").strip(),
                         "0000:0000:0000:0000:0000:ffff:0a63:0201")

    def test_rdma_cm_and_verbs_between_devices(self):
        g = self.guest
        sent, rcvd = self.counter("rxe1", "sent_pkts"), self.counter("rxe0", "rcvd_pkts")
        # RDMA CM: rping server on rxe0's address, client bound to rxe1's.
        server = g.spawn(f"exec rping -s -a {A} -C 3 -v -V")
        client = ("for i in $(seq 50); do "
                  f"rping -c -I {B} -a {A} -C 3 -v -V && exit 0; sleep 0.2; done; exit 1")
        rc, out, err = g.run(client, timeout=60)
        self.assertEqual(rc, 0, f"rping client: {out}\n{err}\nserver: {server.output()}")
        self.assertEqual(len(re.findall(r"^ping data: rdma-ping-\d", out, re.M)), 3, out)
        self.assertEqual(server.wait(30), 0, server.output())
        self.assertEqual(len(re.findall(r"^server ping data: rdma-ping-\d", server.output()[0], re.M)), 3)
        # The connection crossed the devices (and the qemu hub), not lo.
        self.assertGreater(self.counter("rxe1", "sent_pkts"), sent)
        self.assertGreater(self.counter("rxe0", "rcvd_pkts"), rcvd)
        # Plain verbs: an RC QP on each device, RoCEv2 GID index 1.
        server = g.spawn("exec ibv_rc_pingpong -d rxe0 -g 1 -n 50")
        client = ("for i in $(seq 50); do "
                  "ibv_rc_pingpong -d rxe1 -g 1 -n 50 127.0.0.1 && exit 0; sleep 0.2; done; exit 1")
        rc, out, err = g.run(client, timeout=60)
        self.assertEqual(rc, 0, f"ibv_rc_pingpong client: {out}\n{err}\nserver: {server.output()}")
        self.assertIn(f"GID ::ffff:{A}", out)
        self.assertIn("50 iters in", out)
        self.assertEqual(server.wait(30), 0, server.output())

    def test_spawn_and_kill(self):
        g = self.guest
        sleeps = "pgrep -a -x sleep | grep -c 'sleep 1001$' || true"
        p = g.spawn("echo started; sleep 1001 & sleep 1001; echo never")
        deadline = time.monotonic() + 20
        while "started" not in p.output()[0]:
            self.assertLess(time.monotonic(), deadline, p.output())
            time.sleep(0.05)
        self.assertIsNone(p.poll())
        self.assertEqual(self.run_ok(sleeps).strip(), "2")
        p.kill(signal.SIGTERM)
        self.assertEqual(p.wait(20), -signal.SIGTERM)
        # The whole process group went, the background sleep too.
        self.assertEqual(self.run_ok(sleeps).strip(), "0")
        self.assertNotIn("never", p.output()[0])
        q = g.spawn("exit 3")
        self.assertEqual(q.wait(20), 3)


class OldCpu(unittest.TestCase):
    """On a CPU without the instructions Debian's DPDK is built for (qemu's
    default model, qemu64: no SSSE3, SSE4 or POPCNT), the programs built
    with DPDK refuse in one line, with their own exit status, before any
    code that uses them runs (no SIGILL); the others run, in a build for
    no particular CPU."""

    def test_dpdk_programs_refuse_by_name(self):
        reason = lnetr_vm.skip_reason()
        if reason:
            self.skipTest(reason)
        with lnetr_vm.Guest(nics=0, smp=1, mem_mb=512, name="vm-old-cpu", cpu="qemu64") as g:
            flags = g.run("grep -m1 '^flags' /proc/cpuinfo")[1].split()
            self.assertNotIn("sse4_2", flags)
            for prog in ("LNETR_DATAPLANE", "LNETR_PEER"):
                rc, out, err = g.run(f'"${prog}" --version', timeout=60)
                name = Path(os.environ[prog]).name
                self.assertEqual(rc, 79, f"{name}: {out}{err}")
                self.assertEqual(out, "")
                m = re.fullmatch(rf"{name}: this CPU lacks ([a-z0-9_ ]+), which this build [^\n]*-cpu host[^\n]*\n", err)
                self.assertTrue(m, err)
                # What Debian's DPDK is built for (corei7); a release build
                # for this host's CPU needs more.
                self.assertLessEqual({"ssse3", "sse4_1", "sse4_2", "popcnt"}, set(m.group(1).split()), err)
            # The others need no more than the compiler's default CPU,
            # unless the build itself targets one (a release build's
            # -march, which applies to every program).
            if os.environ.get("LNETR_MARCH", "") in ("", "none"):
                rc, out, err = g.run('"$LNETR_LNETRCTL" --version', timeout=60)
                self.assertEqual((rc, err), (0, ""), out)


if __name__ == "__main__":
    unittest.main()
