"""lnetr-dataplane routing real LNet traffic between two TCP networks.

Topology (three network namespaces joined by veth pairs, real kernel TCP):

    a: lnetr-peer 10.N.1.2@tcp  --  r: lnetr-dataplane 10.N.1.1@tcp / 10.N.2.1@tcp1  --  b: lnetr-peer 10.N.2.2@tcp1

The router runs two workers (two CPTs), so messages cross between workers
through the credit rings.  Every check reads what the processes report:
lnetr-peer's YAML/JSON and the router's control socket (JSON).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from lnetr_test import Host, PeerTestCase, build_dir

SIZES = [0, 1, 4095, 4096, 4097, 65536, 1048576]


def dataplane_binary():
    return os.environ.get("LNETR_DATAPLANE") or os.path.join(build_dir(), "dataplane", "lnetr-dataplane")


def ip(*args):
    subprocess.run(["ip"] + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Topology:
    """Namespaces <tag>a, <tag>r, <tag>b and two links; removed by down()."""

    def __init__(self):
        n = os.getpid() % 200 + 20
        self.tag = "lr%d" % os.getpid()
        self.ns = {k: self.tag + k for k in "arb"}
        self.a_ip, self.ra_ip = "10.%d.1.2" % n, "10.%d.1.1" % n
        self.b_ip, self.rb_ip = "10.%d.2.2" % n, "10.%d.2.1" % n
        self.a_nid, self.b_nid = self.a_ip + "@tcp", self.b_ip + "@tcp1"
        self.ra_nid, self.rb_nid = self.ra_ip + "@tcp", self.rb_ip + "@tcp1"
        self.if_ra, self.if_rb = "ra" + str(os.getpid() % 100000), "rb" + str(os.getpid() % 100000)

    def up(self):
        self.down()
        for ns in self.ns.values():
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
        for side, peer_if, peer_ip, r_if, r_ip in (("a", "eth0", self.a_ip, self.if_ra, self.ra_ip),
                                                    ("b", "eth0", self.b_ip, self.if_rb, self.rb_ip)):
            tmp = self.tag + side + "x"
            ip("link", "add", tmp, "type", "veth", "peer", "name", r_if)
            ip("link", "set", tmp, "netns", self.ns[side])
            ip("link", "set", r_if, "netns", self.ns["r"])
            ip("-n", self.ns[side], "link", "set", tmp, "name", peer_if)
            ip("-n", self.ns[side], "addr", "add", peer_ip + "/24", "dev", peer_if)
            ip("-n", self.ns[side], "link", "set", peer_if, "up")
            ip("-n", self.ns["r"], "addr", "add", r_ip + "/24", "dev", r_if)
            ip("-n", self.ns["r"], "link", "set", r_if, "up")

    def down(self):
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def host(self, side):
        return Host.netns(self.ns[side])

    def set_link(self, side, up):
        """Take the router's link towards `side` down or up."""
        r_if = self.if_ra if side == "a" else self.if_rb
        ip("-n", self.ns["r"], "link", "set", r_if, "up" if up else "down")


ROUTER_CONFIG = """\
net:
  - net type: tcp
    local NI(s):
      - interfaces:
          0: {if_ra}
        tunables:
          peer_credits: 8
          peer_buffer_credits: 8
          credits: 64
  - net type: tcp1
    local NI(s):
      - interfaces:
          0: {if_rb}
routing:
  enable: {routing}
buffers:
  tiny: 128
  small: 256
  large: 32
dataplane:
  cores: [0, 1]
  main_core: 0
  poll: adaptive
  control_socket: {sock}
  alive_router_check_interval: {check}
  router_ping_timeout: {check}
  socklnd:
    sock_timeout: {sock_timeout}
"""


class RouterTestCase(PeerTestCase):
    """A topology, the router in r, and helpers to drive peers in a and b."""

    routing = 1
    check = 2  # alive_router_check_interval = router_ping_timeout (s)
    sock_timeout = 10

    def setUp(self):
        super().setUp()
        if not os.access(dataplane_binary(), os.X_OK):
            self.fail("lnetr-dataplane not found at %s" % dataplane_binary())
        self.topo = Topology()
        self.topo.up()
        self.addCleanup(self.topo.down)
        self.dir = tempfile.mkdtemp(prefix="lnetr-router-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sock = os.path.join(self.dir, "dp.sock")
        self.router = self.start_router()

    def start_router(self):
        cfg = os.path.join(self.dir, "lnetr.yaml")
        with open(cfg, "w") as f:
            f.write(ROUTER_CONFIG.format(if_ra=self.topo.if_ra, if_rb=self.topo.if_rb, sock=self.sock,
                                         routing=self.routing, check=self.check, sock_timeout=self.sock_timeout))
        p = self.procs.start([dataplane_binary(), "--config", cfg], host=self.topo.host("r"))
        if not p.wait_stderr("forwarding with", timeout=30):
            p.stop()
            self.fail("lnetr-dataplane did not start: rc=%s\n%s" % (p.returncode, p.stderr))
        return p

    def control(self, line):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(self.sock)
        s.sendall((line + "\n").encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        return json.loads(data)

    def status(self):
        return self.control("status")

    def peer_options(self, side, check_interval=1):
        gw = self.topo.ra_nid if side == "a" else self.topo.rb_nid
        net = "tcp1" if side == "a" else "tcp"
        return ["--route", "%s=%s" % (net, gw), "--router-check-interval", str(check_interval)]

    def nid(self, side):
        return self.topo.a_nid if side == "a" else self.topo.b_nid

    def peer(self, side, args, timeout=600):
        """Run one lnetr-peer command on `side`; (rc, YAML doc, process)."""
        return self.run_peer(self.nid(side), args, self.peer_options(side), host=self.topo.host(side), timeout=timeout)

    def server(self, side):
        return self.start_server(self.nid(side), self.peer_options(side), host=self.topo.host(side))

    def assert_router_idle(self, timeout=15):
        """Every credit and buffer back at its configured value."""
        end = time.monotonic() + timeout
        while True:
            st = self.status()
            problems = []
            for cpt in st["buffers"]:
                for pool in ("tiny", "small", "large"):
                    p = cpt[pool]
                    if p["credits"] != p["nbuffers"]:
                        problems.append("cpt %d %s credits %d of %d" % (cpt["cpt"], pool, p["credits"], p["nbuffers"]))
                for ni in cpt["ni_tx"]:
                    if ni["available_tx_credits"] != ni["max_tx_credits"]:
                        problems.append("cpt %d NI %s tx credits %d of %d" %
                                        (cpt["cpt"], ni["nid"], ni["available_tx_credits"], ni["max_tx_credits"]))
            for p in st["peers"]:
                if p["available_tx_credits"] != p["max_ni_tx_credits"] or \
                        p["available_rtr_credits"] != p["max_rtr_credits"]:
                    problems.append("peer %s tx %d/%d rtr %d/%d" % (p["nid"], p["available_tx_credits"],
                                                                   p["max_ni_tx_credits"], p["available_rtr_credits"],
                                                                   p["max_rtr_credits"]))
            if not problems:
                return st
            if time.monotonic() > end:
                self.fail("router not idle: " + "; ".join(problems))
            time.sleep(0.2)


class Routing(RouterTestCase):

    def test_ping_through_and_to_the_router(self):
        b = self.server("b")
        # A reaches B through the router, and the router itself on its net.
        rc, doc, cp = self.peer("a", ["ping", self.topo.b_nid, "--timeout", "5"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.assertEqual(doc["ping"][0]["primary nid"], self.topo.b_nid)
        self.stop_server(b)  # frees B's address for the ping from B's side
        for side, rnid in (("a", self.topo.ra_nid), ("b", self.topo.rb_nid)):
            rc, doc, cp = self.peer(side, ["ping", rnid, "--timeout", "5"])
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            item = doc["ping"][0]
            # A kernel router's ping info: features 0x1a, both NIs, both UP.
            self.assertEqual(item["primary nid"], self.topo.ra_nid)
            self.assertEqual([n["nid"] for n in item["peer_ni"]], [self.topo.ra_nid, self.topo.rb_nid])
            self.assertEqual(item["features"], "0x1a")
            self.assertEqual(item["status"], {self.topo.ra_nid: "up", self.topo.rb_nid: "up"})

    def test_puts_and_gets_of_every_size_are_delivered_intact(self):
        b = self.server("b")
        results = {}
        for op in ("write", "read"):
            json_path = os.path.join(self.dir, op + ".json")
            rc, doc, cp = self.peer("a", ["brw", self.topo.b_nid, "--op", op, "--sizes", ",".join(map(str, SIZES)),
                                          "--count", "10000", "--concurrency", "64", "--duration", "600",
                                          "--timeout", "30", "--json", json_path])
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            with open(json_path) as f:
                results[op] = json.load(f)
            self.assertEqual(results[op]["ops"], 10000, results[op])
            self.assertEqual(results[op]["errors"], 0, results[op])
        rc, stats = self.stop_server(b)
        self.assertEqual(rc, 0, "the server found corrupted data: %s" % stats)
        st = self.assert_router_idle()
        # Every PUT with its ACK, every GET with its REPLY: 40000 forwarded,
        # plus the peers' gateway checks and pings.
        self.assertGreaterEqual(st["statistics"]["route_count"], 40000)
        per_round = sum(SIZES)
        expected_bytes = 2 * (10000 // len(SIZES)) * per_round
        self.assertGreaterEqual(st["statistics"]["route_length"], expected_bytes)
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])
        self.assertEqual(st["socklnd"]["closed"]["bad_message"], 0)

    def test_malformed_connections_are_closed_and_counted(self):
        b = self.server("b")
        # Run the hand-written kernel node inside namespace a.
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_peer.py")
        cp = self.topo.host("a").run(["python3", script, self.topo.a_nid, self.topo.ra_nid], timeout=60)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        st = self.status()
        closed = st["socklnd"]["closed"]
        refused = st["socklnd"]["refused"]
        self.assertGreaterEqual(refused["bad_acceptor"], 1, st["socklnd"])  # bad acceptor magic
        self.assertGreaterEqual(closed["bad_message"], 2, st["socklnd"])  # bad socklnd type, oversize payload
        self.assertGreaterEqual(closed["timeout"] + closed["peer_closed"] + closed["io_error"], 1, st["socklnd"])
        # Other connections are unaffected: A still reaches B.
        rc, doc, cp = self.peer("a", ["put", self.topo.b_nid, "--size", "4096", "--count", "10"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.stop_server(b)
        self.assert_router_idle()


class RoutingFailures(RouterTestCase):
    sock_timeout = 5

    def test_server_killed_during_load_then_back(self):
        b = self.server("b")
        json_path = os.path.join(self.dir, "load.json")
        load = self.procs.start(self.peer_argv(self.nid("a"), ["brw", self.topo.b_nid, "--op", "write", "--size",
                                                               "1048576", "--concurrency", "16", "--duration", "6",
                                                               "--timeout", "8", "--json", json_path],
                                               self.peer_options("a")), host=self.topo.host("a"))
        time.sleep(2)
        b.stop(signal.SIGKILL)
        load.wait(timeout=60)
        with open(json_path) as f:
            res = json.load(f)
        # A saw errors (timeouts, failed sends), not a hang.
        self.assertGreater(res["errors"], 0, res)
        self.assertGreater(res["ops"], 0, res)
        self.assert_router_idle(timeout=30)
        st = self.status()
        self.assertGreater(st["drops"]["send_failed"] + st["drops"]["peer_down"], 0, st["drops"])
        # B comes back: traffic resumes.
        b2 = self.server("b")
        end = time.monotonic() + 30
        while True:
            rc, doc, cp = self.peer("a", ["put", self.topo.b_nid, "--size", "65536", "--count", "5", "--timeout", "5"])
            if rc == 0 or time.monotonic() > end:
                break
            time.sleep(1)
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.stop_server(b2)
        self.assert_router_idle()


class RoutingDisabled(RouterTestCase):

    def test_disable_sets_the_bit_drains_then_refuses(self):
        b = self.server("b")
        rc, doc, cp = self.peer("a", ["put", self.topo.b_nid, "--size", "100", "--count", "3"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        reply = self.control("routing 0")
        self.assertEqual(reply["routing"], "stopping")
        # RTE_DISABLED (0x04) at once, as Linux: peers stop choosing us.
        rc, doc, cp = self.peer("a", ["ping", self.topo.ra_nid, "--timeout", "5"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.assertEqual(doc["ping"][0]["features"], "0x1e")
        # Enabling while stopping is refused like Linux's EBUSY.
        self.assertEqual(self.control("routing 1")["errno"], -16)
        # During the drain period messages still flow.  (This peer does not
        # check its gateway; a checking one would now avoid the router.)
        rc, doc, cp = self.peer("a", ["put", self.topo.b_nid, "--size", "100", "--count", "3"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        deadline = time.monotonic() + 4 * self.check + 5
        while self.status()["routing"]["state"] == "stopping":
            self.assertLess(time.monotonic(), deadline, "routing never stopped")
            time.sleep(0.2)
        self.assertEqual(self.status()["routing"]["state"], "disabled")
        # Disabled: routed messages are dropped and counted.
        before = self.status()["drops"]["routing_disabled"]
        rc, doc, cp = self.peer("a", ["put", self.topo.b_nid, "--size", "100", "--count", "1", "--timeout", "2"],
                                timeout=60)
        self.assertNotEqual(rc, 0)
        self.assertEqual(self.status()["drops"]["routing_disabled"], before + 1)
        self.stop_server(b)

    def peer_options(self, side, check_interval=0):
        return super().peer_options(side, check_interval)


if __name__ == "__main__":
    unittest.main()
