"""lnetr-dataplane routing real LNet traffic between two TCP networks.

Topology (three network namespaces joined by veth pairs, real kernel TCP):

    a: lnetr-peer 10.N.1.2@tcp  --  r: lnetr-dataplane 10.N.1.1@tcp / 10.N.2.1@tcp1  --  b: lnetr-peer 10.N.2.3@tcp1

The router runs two workers (two CPTs); A hashes to CPT 0 and B to CPT 1, so
messages cross between workers through the credit rings.  Every check reads what the processes report:
lnetr-peer's YAML/JSON and the router's control socket (JSON).
"""

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import tempfile
import time
import unittest

from lnetr_router import Router, Topology, brw, control_binary, dataplane_binary, rss_kib
from lnetr_test import PeerTestCase

SIZES = [0, 1, 4095, 4096, 4097, 65536, 1048576]


class RouterTestCase(PeerTestCase):
    """A topology, the router in r, and helpers to drive peers in a and b."""

    routing = 1
    check = 2  # alive_router_check_interval = router_ping_timeout (s)
    sock_timeout = 10
    check_interval = 1  # the peers' gateway checks (s)
    router_options = {}  # more Router() arguments
    topology_options = {}  # Topology() arguments

    def setUp(self):
        super().setUp()
        if not os.access(dataplane_binary(), os.X_OK):
            self.fail("lnetr-dataplane not found at %s" % dataplane_binary())
        self.topo = Topology(**self.topology_options)
        self.topo.up()
        self.addCleanup(self.topo.down)
        self.dir = tempfile.mkdtemp(prefix="lnetr-router-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.router = Router(self.topo, self.dir, routing=self.routing, check=self.check,
                             sock_timeout=self.sock_timeout, **self.router_options)
        err = self.router.start(self.procs)
        if err:
            self.fail(err)

    def control(self, line):
        return self.router.control(line)

    def status(self):
        return self.router.status()

    def assert_router_pings(self, features):
        """Ping the router from both sides: its ping info lists both NIs, both
        UP, with `features`."""
        for side, rnid in (("a", self.topo.ra_nid), ("b", self.topo.rb_nid)):
            rc, doc, cp = self.peer(side, ["ping", rnid, "--timeout", "5"])
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            item = doc["ping"][0]
            self.assertEqual(item["primary nid"], self.topo.ra_nid)
            self.assertEqual([n["nid"] for n in item["peer_ni"]], [self.topo.ra_nid, self.topo.rb_nid])
            self.assertEqual(item["features"], features)
            self.assertEqual(item["status"], {self.topo.ra_nid: "up", self.topo.rb_nid: "up"})

    def peer_options(self, side):
        return self.topo.peer_options(side, self.check_interval)

    def nid(self, side):
        return self.topo.nid(side)

    def peer(self, side, args, timeout=600):
        """Run one lnetr-peer command on `side`; (rc, YAML doc, process)."""
        return self.run_peer(self.nid(side), args, self.peer_options(side), host=self.topo.host(side), timeout=timeout)

    def server(self, side):
        return self.start_server(self.nid(side), self.peer_options(side), host=self.topo.host(side))

    def assert_router_idle(self, timeout=15):
        """Every credit and buffer back at its configured value."""
        st, problems = self.router.wait_idle(timeout)
        if problems:
            self.fail("router not idle: " + "; ".join(problems))
        return st


class Routing(RouterTestCase):

    def test_ping_through_and_to_the_router(self):
        b = self.server("b")
        # A reaches B through the router, and the router itself on its net.
        rc, doc, cp = self.peer("a", ["ping", self.topo.b_nid, "--timeout", "5"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.assertEqual(doc["ping"][0]["primary nid"], self.topo.b_nid)
        self.stop_server(b)  # frees B's address for the ping from B's side
        # A kernel router's ping info: features 0x1a, both NIs, both UP.
        self.assert_router_pings("0x1a")
        # Both workers route by the one snapshot published in shared memory.
        workers = self.status()["workers"]
        self.assertEqual(len(workers), 2)
        self.assertEqual(len({w["route_version"] for w in workers}), 1, workers)
        for w in workers:
            self.assertGreater(w["route_version"], 0, w)
            self.assertEqual((w["route_snapshots_adopted"], w["route_snapshots_rejected"]), (1, 0), w)
        self.assertTrue(os.path.exists("/dev/shm/" + self.topo.tag), os.listdir("/dev/shm"))

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
        # A and B live on different workers, and both workers' pools were used.
        self.assertEqual({p["nid"]: p["cpt"] for p in st["peers"]}, {self.topo.a_nid: 0, self.topo.b_nid: 1})
        for cpt in st["buffers"]:
            self.assertLess(cpt["large"]["mincredits"], cpt["large"]["nbuffers"], cpt)
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
        self.assertGreaterEqual(closed["timeout"] + closed["peer_closed"] + closed["peer_reset"], 1, st["socklnd"])
        # Other connections are unaffected: A still reaches B.
        rc, doc, cp = self.peer("a", ["put", self.topo.b_nid, "--size", "4096", "--count", "10"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.stop_server(b)
        self.assert_router_idle()


class Floods(RouterTestCase):
    """Made-up peers by the thousand (dataplane.limits): the tables stay
    within their limits, refusals are counted by name, legitimate traffic
    flows with its data intact throughout, and idle peers are freed."""

    # Per worker and table, and the made-up NIDs: more than both workers'
    # tables hold.  LNETR_FLOOD_PEERS, _SOURCES, _DESTS for a full-scale
    # run (docs/testing.md).
    PEERS = int(os.environ.get("LNETR_FLOOD_PEERS", "300"))
    SOURCES = int(os.environ.get("LNETR_FLOOD_SOURCES", "1000"))
    DESTS = int(os.environ.get("LNETR_FLOOD_DESTS", "20000"))
    router_options = {"limits": {"peers": PEERS, "peer_idle": 2, "connect_rate": 0}}

    def setUp(self):
        super().setUp()
        # Net tcp1's made-up NIDs 10.200.x.y: routed to B, whose kernel
        # refuses the router's connects (a local route, no listener).
        self.topo.host("r").run(["ip", "route", "add", "10.200.0.0/16", "via", self.topo.b_ip], check=True)
        self.topo.host("b").run(["ip", "route", "add", "local", "10.200.0.0/16", "dev", "lo"], check=True)

    def flood(self, *args):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flood.py")
        cp = self.topo.host("a").run(["python3", script] + [str(a) for a in args], timeout=300)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        return json.loads(cp.stdout)

    def load(self, seconds):
        """A's brw to B, every byte checked: its JSON result."""
        res, cp = brw(self.topo.host("a"), self.nid("a"), self.peer_options("a"), self.topo.b_nid, "write", 65536,
                      4, seconds, os.path.join(self.dir, "brw-%f.json" % time.monotonic()), timeout=10)
        self.assertIsNotNone(res, cp.stdout + cp.stderr)
        return res

    def tables(self):
        return self.status()["peer_tables"]

    def test_made_up_sources_and_destinations(self):
        b = self.server("b")
        pid = self.router.proc.pid
        rss_idle = rss_kib(pid)
        quiet = self.load(3)
        self.assertEqual(quiet["errors"], 0, quiet)
        rss = [rss_kib(pid)]
        # Legitimate load throughout both floods.
        json_path = os.path.join(self.dir, "during.json")
        during = self.procs.start(self.peer_argv(self.nid("a"), ["brw", self.topo.b_nid, "--op", "write", "--size",
                                                                 "65536", "--concurrency", "4", "--duration", "600",
                                                                 "--timeout", "10", "--check", "full", "--json",
                                                                 json_path], self.peer_options("a")),
                                  host=self.topo.host("a"))
        dst = self.flood("dests", self.topo.a_ip, "10.78.0.1@tcp", self.topo.ra_nid, "tcp1", self.DESTS)
        rss.append(rss_kib(pid))
        src = self.flood("sources", self.topo.a_ip, self.topo.ra_nid, self.topo.b_nid, self.SOURCES)
        rss.append(rss_kib(pid))
        during.stop(signal.SIGINT)
        with open(json_path) as f:
            flooded = json.load(f)
        t = self.tables()
        # Bounded: no table beyond its limit on either worker, and the
        # excess refused by name.  (Both tables see both floods: the
        # sources as peers, the destinations as next hops the router
        # connects to.  A flood the two workers' tables can hold, as with
        # the default limits at full scale, is refused nothing.)
        overflow = max(self.SOURCES, self.DESTS) > 2 * self.PEERS
        for name in ("lnet", "socklnd"):
            self.assertLessEqual(t[name]["peers"], 2 * self.PEERS + 4, t)
            if overflow:
                self.assertGreater(t[name]["refused"], 0, t)
            else:
                self.assertEqual(t[name]["refused"], 0, t)
        st = self.status()
        if overflow:
            self.assertGreater(st["socklnd"]["closed"]["refused_peer_table_full"], 0, st["socklnd"])
            self.assertGreater(st["drops"]["peer_table_full"], 0, st["drops"])
            self.assertGreater(src["refused"], 0, src)
        self.assertEqual(dst["sent"], self.DESTS, dst)
        # The known peers kept working, every byte checked.
        self.assertEqual(flooded["errors"], 0, flooded)
        self.assertGreater(flooded["ops"], 0, flooded)
        # Idle peers go (peer_idle 2 s; the socklnd peers after their
        # connect backoff): the tables shrink back to the live peers.
        end = time.monotonic() + 30
        while time.monotonic() < end:
            t = self.tables()
            if t["lnet"]["peers"] <= 4 and t["socklnd"]["peers"] <= 4:
                break
            time.sleep(0.5)
        self.assertLessEqual(t["lnet"]["peers"], 4, t)
        self.assertLessEqual(t["socklnd"]["peers"], 4, t)
        self.assertGreater(t["lnet"]["freed"], 0, t)
        self.assertGreater(t["socklnd"]["freed"], 0, t)
        after = self.load(3)
        self.assertEqual(after["errors"], 0, after)
        settled = rss_kib(pid)
        # What the aged-out peers held goes back to the system: the
        # dataplane trims its heap (every 10 s at most, once 8 MiB more of
        # it is free), so RSS gives back at least a third of what the
        # floods added.  (ASan keeps freed memory in quarantine: RSS says
        # nothing there.)
        peak = max(rss)
        if os.environ.get("LNETR_SANITIZED") != "1" and peak - rss_idle > 16384:
            bound = peak - (peak - rss_idle) // 3
            end = time.monotonic() + 15
            while settled > bound and time.monotonic() < end:
                time.sleep(1)
                settled = rss_kib(pid)
            self.assertLessEqual(settled, bound, "RSS did not return towards idle")
        print("floods: %d sources in %.1f s (%d refused), %d destinations in %.1f s; RSS KiB idle %d, peak %d, "
              "settled %d; legitimate 64 KiB writes %.0f/s quiet, %.0f/s during the floods, %.0f/s after; "
              "tables %s" % (self.SOURCES, src["seconds"], src["refused"], self.DESTS, dst["seconds"], rss_idle,
                             peak, settled, quiet["ops_per_s"], flooded["ops_per_s"], after["ops_per_s"],
                             json.dumps(t)))
        self.stop_server(b)
        self.assert_router_idle()


class RoutingIpv6(RouterTestCase):
    """Between an IPv4 net (tcp: A) and an IPv6 net (tcp1: B, the router's
    NI from its interface's IPv6 address), on kernel sockets.  B's NIDs are
    large: A and the router carry them over socklnd V4 (nid16 headers)."""

    topology_options = {"ipv6_b": True}
    SIZES = [0, 1, 4096, 4097, 65536, 1048576]

    def test_ping_through_and_to_the_router(self):
        b = self.server("b")
        rc, doc, cp = self.peer("a", ["ping", self.topo.b_nid, "--timeout", "5"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.assertEqual(doc["ping"][0]["primary nid"], self.topo.b_nid)
        self.stop_server(b)
        a = self.server("a")
        rc, doc, cp = self.peer("b", ["ping", self.topo.a_nid, "--timeout", "5"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.assertEqual(doc["ping"][0]["primary nid"], self.topo.a_nid)
        self.stop_server(a)
        # The IPv6 NI is a LARGE_ADDR entry after the nid4 ones: 0x1a | 0x20.
        self.assert_router_pings("0x3a")
        st = self.assert_router_idle()
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])

    def test_puts_and_gets_are_delivered_intact(self):
        b = self.server("b")
        for op in ("write", "read"):
            json_path = os.path.join(self.dir, op + ".json")
            rc, doc, cp = self.peer("a", ["brw", self.topo.b_nid, "--op", op, "--sizes",
                                          ",".join(map(str, self.SIZES)), "--count", "1200", "--concurrency", "16",
                                          "--duration", "300", "--timeout", "30", "--json", json_path])
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            with open(json_path) as f:
                result = json.load(f)
            self.assertEqual(result["ops"], 1200, result)
            self.assertEqual(result["errors"], 0, result)
        rc, stats = self.stop_server(b)
        self.assertEqual(rc, 0, "the server found corrupted data: %s" % stats)
        st = self.assert_router_idle()
        self.assertEqual({p["nid"] for p in st["peers"]}, {self.topo.a_nid, self.topo.b_nid})
        self.assertGreaterEqual(st["statistics"]["route_count"], 4800)
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])
        self.assertEqual(st["socklnd"]["closed"]["bad_message"], 0)


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

        def gone(st):
            closed = st["socklnd"]["closed"]
            return closed["peer_reset"] + closed["peer_closed"]

        before = gone(self.status())
        b.stop(signal.SIGKILL)
        # The router sees B's connections die while A's are still open (the
        # load runs on).  Whether it also fails sends depends on timing:
        # messages already handed to the kernel are lost with B's socket
        # without an error, as on a kernel router.
        end = time.monotonic() + 2
        while gone(self.status()) == before and time.monotonic() < end:
            time.sleep(0.1)
        self.assertGreater(gone(self.status()), before)
        self.assertIsNone(load.popen.poll(), "the load should still be running")
        load.wait(timeout=60)
        with open(json_path) as f:
            res = json.load(f)
        # A saw errors (timeouts, failed sends), not a hang.
        self.assertGreater(res["errors"], 0, res)
        self.assertGreater(res["ops"], 0, res)
        self.assert_router_idle(timeout=30)
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


    def test_server_stalled_then_killed_under_zero_copy_sends(self):
        """The router sends 1 MiB payloads on to B with MSG_ZEROCOPY. B stops
        reading (SIGSTOP) with some in flight, so the kernel holds what B's
        window does not take; after sock_timeout the router closes those
        connections, and keeps their buffers until the kernel has let go of
        them (zc_drains); then B dies. Every buffer and credit comes back,
        once (under ASan in the asan build)."""
        b = self.server("b")
        # B's connections up first (while stopped it could not handshake),
        # with payloads sent by copy: on these veths the kernel copies
        # zero-copy sends (into B's socket), and the first completion that
        # says so turns a connection to copying.
        rc, _, cp = self.peer("a", ["put", self.topo.b_nid, "--size", "1000", "--count", "2", "--timeout", "5"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        before = self.status()["socklnd"]
        os.kill(b.pid, signal.SIGSTOP)
        try:
            json_path = os.path.join(self.dir, "load.json")
            load = self.procs.start(self.peer_argv(self.nid("a"), [
                "brw", self.topo.b_nid, "--op", "write", "--size", "1048576", "--concurrency", "8",
                "--duration", "2", "--timeout", "20", "--json", json_path], self.peer_options("a")),
                host=self.topo.host("a"))
            end = time.monotonic() + 3 * self.sock_timeout
            st = self.status()["socklnd"]
            while st["zc_drains"] == before["zc_drains"] and time.monotonic() < end:
                time.sleep(0.2)
                st = self.status()["socklnd"]
            self.assertGreater(st["zc_sends"], before["zc_sends"], st)
            self.assertGreater(st["zc_drains"], before["zc_drains"], st)
            self.assertGreater(st["closed"]["timeout"], before["closed"]["timeout"], st)
        finally:
            b.stop(signal.SIGKILL)
        load.wait(timeout=60)
        st = self.assert_router_idle(timeout=30)
        self.assertEqual(st["socklnd"]["closed"]["bad_message"], 0)


class PeerDiscovery(RouterTestCase):
    """Discovery of the peers the router forwards to, as a kernel router
    with discovery on (ping-discovery-health.md §4): B runs no gateway
    checks, so the first PUT to it begins discovery (ping, then push); A
    checks the router (ping, then push), and its push is taken and answered
    with the router's own, once."""

    def peer_options(self, side):
        return self.topo.peer_options(side, 1 if side == "a" else 0)

    def discovery(self, nid, done):
        """The router's discovery of `nid` once `done(it)`, waited for."""
        deadline = time.monotonic() + 10
        while True:
            d = next((p.get("discovery") for p in self.status()["peers"] if p["nid"] == nid), None)
            if (d and done(d)) or time.monotonic() > deadline:
                return d
            time.sleep(0.05)

    def test_the_peers_it_forwards_to_are_pinged_then_pushed_once(self):
        t = self.topo
        b = self.server("b")
        for _ in range(2):
            rc, doc, cp = self.peer("a", ["put", t.b_nid, "--size", "4096", "--count", "20"])
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        d = self.discovery(t.b_nid, lambda d: d["state"] == "discovered")
        self.assertIsNotNone(d)
        # lnetr-peer's ping info: NI_STATUS | RTE_DISABLED | MULTI_RAIL | DISCOVERY.
        self.assertEqual((d["state"], d["features"], d["pushed"]), ("discovered", 0x1e, False), d)
        self.assertEqual(d["nis"], [{"nid": t.b_nid, "state": "up"}], d)
        self.assertEqual((d["pings"], d["pushes_sent"], d["push_acks"], d["failures"]), (1, 1, 1, 0), d)
        a = self.discovery(t.a_nid, lambda d: d["state"] == "discovered")
        self.assertIsNotNone(a)
        self.assertEqual((a["pushed"], a["pings"], a["pushes_sent"], a["push_acks"]), (True, 0, 1, 1), a)
        self.assertGreaterEqual(a["pushes_received"], 1, a)
        self.assertEqual(a["nis"], [{"nid": t.a_nid, "state": "up"}], a)
        rc, doc = self.stop_server(b)
        self.assertEqual(rc, 0, doc)
        # B saw one ping (ours: A pings only the router) and one push.
        s = doc["server"]
        self.assertEqual((s["pings_answered"], s["pushes_received"]), (1, 1), s)
        st = self.assert_router_idle()
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])


class RoutingDisabled(RouterTestCase):
    check_interval = 0  # these peers keep using the router while it drains

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



class PushOnNiChange(RouterTestCase):
    """When one of the router's NIs changes status it pushes its ping info to
    its Multi-Rail peers at once (ping-discovery-health.md §6.2): a client
    that checks its gateway only every 60 s stops using the dead path now."""

    def test_a_client_drops_the_route_within_a_second(self):
        b = self.server("b")  # pings R on tcp1 every second: R's tcp1 NI stays UP
        r_nid = self.topo.gateway("a")
        a = self.start_server(self.nid("a"), ["--route", "tcp1=%s" % r_nid, "--router-check-interval", "60"],
                              host=self.topo.host("a"))
        # A's first check pinged R and pushed to it: R now knows A is Multi-Rail.
        end = time.monotonic() + 10
        while not any(p["nid"] == self.nid("a") and p["multi_rail"] for p in self.status()["peers"]):
            self.assertLess(time.monotonic(), end, "A never pushed to the router")
            time.sleep(0.05)
        pushes = self.status()["statistics"]["push_count"]

        start = time.monotonic()
        self.topo.set_link("b", False)
        down = "route tcp1 via %s down" % r_nid
        self.assertTrue(a.wait_stderr(down, timeout=10), a.stderr_so_far)
        took = time.monotonic() - start
        print("\npush: A stopped using the route %.3f s after R's tcp1 link went down (its own check is every 60 s)"
              % took)
        self.assertLess(took, 2.0)

        self.topo.set_link("b", True)
        self.assertTrue(a.wait_stderr("route tcp1 via %s up" % r_nid, timeout=15), a.stderr_so_far)
        self.assertGreaterEqual(self.status()["statistics"]["push_count"], pushes + 2)
        self.stop_server(a)
        self.stop_server(b)
        self.assert_router_idle()


class NiLndTunables(RouterTestCase):
    """An NI's `lnd tunables` apply to that NI's connections only: tos sets
    their IP type of service, conns_per_peer how many bulk connections of
    each direction the router opens to a peer (read back with ss)."""

    # The router's tcp1 NI has tos 104 (0x68, AF31) and conns_per_peer 2
    # (tcp's: dataplane.socklnd's, 1).
    router_options = {"tcp1_lnd": {"tos": 104, "conns_per_peer": 2}}

    def test_an_nis_tos_and_conns_per_peer_apply_to_its_connections_only(self):
        # B checks no gateway: the router is the one that connects to it (B
        # accepts two bulk connections of each direction, as a kernel node
        # with conns_per_peer 2 does).
        b = self.start_server(self.nid("b"), ["--route", "tcp=%s" % self.topo.gateway("b"), "--router-check-interval",
                                              "0", "--conns-per-peer", "2"], host=self.topo.host("b"))
        # A load from a, so that both NIs have connections while we look.
        load = self.procs.start(self.peer_argv(self.nid("a"), ["brw", self.topo.b_nid, "--op", "write", "--size",
                                                               "4096", "--duration", "3"], self.peer_options("a")),
                                host=self.topo.host("a"))
        time.sleep(1.5)
        cp = self.topo.host("r").run(["ss", "-tni", "--tos"])
        load.wait(timeout=60)
        tos = {}  # local address -> the tos values of its connections
        to_b = 0  # connections the router opened to B (to its acceptor port)
        for line in cp.stdout.splitlines():
            f = line.split()
            if line.startswith("ESTAB") and len(f) >= 5:
                tos.setdefault(f[3].rsplit(":", 1)[0], []).append(
                    next((x.split(":")[1] for x in f if x.startswith("tos:")), "0x0"))
                to_b += f[4] == self.topo.b_ip + ":988"
        self.assertIn(self.topo.rb_ip, tos, cp.stdout)
        self.assertIn(self.topo.ra_ip, tos, cp.stdout)
        self.assertEqual(set(tos[self.topo.rb_ip]), {"0x68"}, cp.stdout)
        self.assertNotIn("0x68", tos[self.topo.ra_ip], cp.stdout)
        # CONTROL, then BULK_IN and BULK_OUT: conns_per_peer of each.
        self.assertEqual(to_b, 1 + 2 * 2, cp.stdout)
        ni = next(n for n in self.status()["nis"] if n["nid"].endswith("@tcp1"))
        self.assertEqual((ni["lnd_tunables"]["tos"], ni["lnd_tunables"]["conns_per_peer"]), (104, 2))
        ni = next(n for n in self.status()["nis"] if n["nid"].endswith("@tcp"))
        self.assertEqual((ni["lnd_tunables"]["tos"], ni["lnd_tunables"]["conns_per_peer"]), (-1, 1))
        self.stop_server(b)


class ControlSocket(RouterTestCase):
    """The dataplane serves its control socket's clients side by side, each
    with a deadline: clients that say nothing, or send their request a byte
    at a time, hold up neither other clients nor the control thread's own
    work (here: noticing a link go down)."""

    def test_bad_requests_are_answered_with_an_error(self):
        res = self.router.control("status " + "x" * 5000)
        self.assertEqual(res["errno"], -errno.E2BIG, res)
        res = self.router.control("o2ib connections 10.0.0.1@tcp nonsense")
        self.assertEqual(res["errno"], -errno.EINVAL, res)
        self.assertIn("'nonsense' is not a NID", res["descr"])
        # No o2ib NI: no connections, and status counts none.
        self.assertEqual(self.router.control("o2ib connections")["connections"], [])
        self.assertNotIn("o2iblnd", self.status())
        self.assertTrue(all(w["status_answered"] for w in self.status()["workers"]))

    def test_slow_and_silent_clients_hold_up_nothing(self):
        silent = []
        for _ in range(10):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.router.sock)
            self.addCleanup(s.close)
            silent.append(s)
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        slow.connect(self.router.sock)
        self.addCleanup(slow.close)
        stop = threading.Event()

        def dribble():  # "status" a byte every 0.3 s, never the newline
            for c in b"status" * 3:
                if stop.wait(0.3):
                    return
                try:
                    slow.send(bytes([c]))
                except OSError:
                    return
        t = threading.Thread(target=dribble)
        t.start()
        self.addCleanup(t.join)
        self.addCleanup(stop.set)
        time.sleep(0.2)
        # Another client is answered at once.
        start = time.monotonic()
        self.assertIn("routing", self.status())
        self.assertLess(time.monotonic() - start, 1.0)
        # The link watcher runs on.
        start = time.monotonic()
        self.topo.set_link("b", False)
        self.assertTrue(self.router.proc.wait_stderr(": link down", timeout=5), self.router.proc.stderr_so_far)
        self.assertLess(time.monotonic() - start, 1.5)
        self.topo.set_link("b", True)
        # Past their deadline (2 s for the request line) the stalled clients
        # are closed and counted.
        for s in silent + [slow]:
            s.settimeout(5)
            self.assertEqual(s.recv(100), b"")
        stop.set()
        self.assertGreaterEqual(self.status()["control_clients_timed_out"], 11)
        self.assertTrue(self.router.proc.wait_stderr("sent no request line in time", timeout=1))


class NiCpts(RouterTestCase):
    """An NI's CPT list: its net's peers and their connections are served by
    those CPTs' workers only.  The router has two CPTs; tcp1's NI lists the
    one B's NID does not hash to, so that only the list can put B there."""

    @property
    def router_options(self):
        # lnetr's CPT of a nid4: the sum of its 8 bytes (tcp1: 0x00020001).
        unlisted = (3 + sum(int(o) for o in self.topo.b_ip.split("."))) % 2
        self.cpt = 1 - unlisted
        return {"tcp1_cpt": "[%d]" % self.cpt}

    def test_the_nis_peers_live_in_its_cpts_workers(self):
        b = self.server("b")
        rc, doc, cp = self.peer("a", ["brw", self.topo.b_nid, "--op", "write", "--size", "4096", "--count", "200",
                                      "--concurrency", "8"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.stop_server(b)
        st = self.assert_router_idle()
        nis = {n["nid"]: n for n in st["nis"]}
        self.assertEqual(nis[self.topo.rb_nid]["cpts"], [self.cpt])
        self.assertEqual(nis[self.topo.ra_nid]["cpts"], [0, 1])
        b_entries = [p for p in st["peers"] if p["nid"] == self.topo.b_nid]
        self.assertTrue(b_entries, st["peers"])
        for p in b_entries:
            # Only the listed CPT holds B's credits and sends to it.
            if p["cpt"] != self.cpt:
                self.assertEqual(p["send_count"], 0, p)
        self.assertGreaterEqual(sum(p["send_count"] for p in b_entries if p["cpt"] == self.cpt), 200)
        # The NI's transmit credits are shared by its one CPT: all of them there.
        tx = {(c["cpt"], t["nid"]): t for c in st["buffers"] for t in c["ni_tx"]}
        self.assertEqual(tx[(self.cpt, self.topo.rb_nid)]["max_tx_credits"], 256)
        # (tcp's NI, on both CPTs: 64 / 2, but 8 * peer_credits at least.)
        self.assertEqual(tx[(self.cpt, self.topo.ra_nid)]["max_tx_credits"], 64)
        # lnetr-control shows the list in force.
        _, err = self.router.start_control(self.procs)
        self.assertIsNone(err, err)
        res = self.router.api("net show", {"net": "tcp1", "verbose": 1})
        self.assertEqual(res["errno"], 0, res)
        self.assertEqual(res["data"]["net"][0]["local NI(s)"][0]["CPT"], "[%d]" % self.cpt)


class RouteChurn(RouterTestCase):
    """Thousands of routes through thousands of gateways added and deleted at
    run time, round after round, while traffic flows between a and b: no
    request fails, nothing is dropped, and neither process grows.  Each round
    uses 2000 new gateways, so that after two rounds the gateway slots only
    last by being reused.  LNETR_CHURN_SECONDS (default 20) sets how long."""

    GATEWAYS = 2000

    def routes_text(self, rnd):
        lines = ["route:"]
        for i in range(self.GATEWAYS):
            gw = "172.%d.%d.%d@tcp1" % (16 + rnd % 16, i // 250, 1 + i % 250)
            lines += ["  - net: tcp%d" % (10 + i % 20), "    gateway: %s" % gw]
        return "\n".join(lines) + "\n"

    def api_ok(self, command, args=None):
        res = self.router.api(command, args, timeout=60)
        self.assertEqual(res["errno"], 0, res)
        return res["data"]

    def test_an_import_beyond_the_gateway_slots_changes_nothing(self):
        ctl, err = self.router.start_control(self.procs)
        self.assertIsNone(err, err)
        self.api_ok("set", {"alive_router_check_interval": 0})
        self.api_ok("route add", {"net": "tcp9", "gateway": self.topo.b_nid})
        before = self.api_ok("route show", {"verbose": 1})["route"]
        lines = ["route:"]
        for i in range(4097):  # one more than the dataplane's slots
            lines += ["  - net: tcp%d" % (10 + i % 20), "    gateway: 172.16.%d.%d@tcp1" % (i // 250, 1 + i % 250)]
        res = self.router.api("import", {"text": "\n".join(lines) + "\n", "name": "too-many"}, timeout=60)
        self.assertEqual(res["errno"], -errno.ENOSPC, res)
        self.assertEqual(self.api_ok("route show", {"verbose": 1})["route"], before)
        self.assertTrue(ctl.wait_stderr("import of too-many not applied", timeout=5), ctl.stderr)
        # What fits is taken: 4095 gateways more.
        res = self.api_ok("import", {"text": "\n".join(lines[:1 + 2 * 4095]) + "\n", "name": "fits"})["import"]
        self.assertEqual(res["errors"], [])
        self.assertEqual(len(self.api_ok("route show")["route"]), 4096)

    def test_thousands_of_routes_and_gateways_churn_under_load(self):
        ctl, err = self.router.start_control(self.procs)
        self.assertIsNone(err, err)
        # Gateway checks off: thousands of unreachable gateways would only be
        # connection attempts; what is under test is the tables and slots.
        self.api_ok("set", {"alive_router_check_interval": 0})
        seconds = float(os.environ.get("LNETR_CHURN_SECONDS", "20"))
        b = self.server("b")
        json_path = os.path.join(self.dir, "load.json")
        load = self.procs.start(self.peer_argv(self.nid("a"), ["brw", self.topo.b_nid, "--op", "write", "--size",
                                                               "65536", "--concurrency", "8", "--duration",
                                                               str(seconds + 10), "--timeout", "8", "--json",
                                                               json_path], self.peer_options("a")),
                                host=self.topo.host("a"))
        start = time.monotonic()
        rounds = 0
        baseline = None
        while rounds < 3 or time.monotonic() - start < seconds:
            text = self.routes_text(rounds)
            res = self.api_ok("import", {"text": text, "name": "round-%d" % rounds})["import"]
            self.assertEqual(res["errors"], [], res["errors"][:3])
            self.assertEqual(len(self.api_ok("route show")["route"]), self.GATEWAYS)
            res = self.api_ok("import", {"text": text, "name": "round-%d" % rounds, "del": 1})["import"]
            self.assertEqual(res["errors"], [], res["errors"][:3])
            self.assertEqual(self.api_ok("route show")["route"], [])
            rounds += 1
            if rounds == 2:  # after the first rounds' growth (allocator pools, tables at full size)
                baseline = (rss_kib(ctl.pid), rss_kib(self.router.proc.pid))
        end = (rss_kib(ctl.pid), rss_kib(self.router.proc.pid))
        print("\nroute churn: %d rounds of %d routes and gateways in %.0f s; RSS control %d -> %d KiB, "
              "dataplane %d -> %d KiB" % (rounds, self.GATEWAYS, time.monotonic() - start, baseline[0], end[0],
                                          baseline[1], end[1]))
        # (ASan holds freed memory in quarantine, so RSS says nothing there;
        # its leak check at exit does.)
        if os.environ.get("LNETR_SANITIZED") != "1":
            self.assertLess(end[0] - baseline[0], 8192, "lnetr-control grew")
            self.assertLess(end[1] - baseline[1], 8192, "lnetr-dataplane grew")
        load.wait(timeout=120)
        with open(json_path) as f:
            res = json.load(f)
        self.assertEqual(res["errors"], 0, res)
        self.assertGreater(res["ops"], 0, res)
        st = self.status()
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])
        self.stop_server(b)
        self.assert_router_idle()


class ControlProcess(RouterTestCase):
    def route_versions(self, above, timeout=10):
        """Wait until every worker routes by one snapshot newer than `above`."""
        end = time.monotonic() + timeout
        while True:
            versions = {w["route_version"] for w in self.status()["workers"]}
            if (len(versions) == 1 and min(versions) > above) or time.monotonic() > end:
                return versions
            time.sleep(0.1)

    def start_control(self):
        ctl = self.procs.start([control_binary(), "--config", self.router.config], host=self.topo.host("r"))
        self.assertTrue(ctl.wait_stderr("published route table", timeout=10), ctl.stderr)
        return ctl

    def test_run_time_drop_asym_route_outlives_a_dataplane_restart(self):
        ctl = self.start_control()
        self.assertEqual(self.status()["drop_asym_route"], 0)  # the file's
        res = self.router.api("set", {"drop_asym_route": 1})
        self.assertEqual(res["errno"], 0, res)
        self.assertEqual(self.status()["drop_asym_route"], 1)
        self.router.proc.stop(signal.SIGTERM)
        err = self.router.start(self.procs)
        self.assertIsNone(err, err)
        self.assertTrue(ctl.wait_stderr("given to the restarted dataplane", timeout=15), ctl.stderr_so_far)
        self.assertEqual(self.status()["drop_asym_route"], 1)
        res = self.router.api("global show")
        self.assertEqual(res["data"]["global"]["drop_asym_route"], 1, res)

    def test_run_time_buffer_pools_outlive_a_dataplane_restart(self):
        """set large_buffers without save: a dataplane that restarts (from
        its file's 32) is given 64 again by lnetr-control."""
        ctl = self.start_control()
        res = self.router.api("set", {"large_buffers": 64})
        self.assertEqual(res["errno"], 0, res)
        large = lambda: [c["large"]["nbuffers"] for c in self.status()["buffers"]]
        self.assertEqual(large(), [32, 32])
        self.router.proc.stop(signal.SIGTERM)
        err = self.router.start(self.procs)
        self.assertIsNone(err, err)
        self.assertTrue(ctl.wait_stderr("router buffer pools resized at run time given to the restarted dataplane",
                                        timeout=15), ctl.stderr_so_far)
        self.assertEqual(large(), [32, 32])
        self.assertEqual(self.router.api("export", {"backup": 1})["data"]["buffers"]["large"], 64)

    def test_control_publishes_and_traffic_survives_its_restart(self):
        b = self.server("b")
        (v0,) = self.route_versions(0)
        ctl = self.start_control()
        (v1,) = self.route_versions(v0)
        json_path = os.path.join(self.dir, "load.json")
        load = self.procs.start(self.peer_argv(self.nid("a"), ["brw", self.topo.b_nid, "--op", "write", "--size",
                                                               "65536", "--concurrency", "16", "--duration", "5",
                                                               "--timeout", "10", "--json", json_path],
                                               self.peer_options("a")), host=self.topo.host("a"))
        time.sleep(1.5)
        ctl.stop(signal.SIGKILL)  # the dataplane keeps the last snapshot
        time.sleep(1)
        self.assertIsNone(load.popen.poll(), "the load should still be running")
        ctl = self.start_control()  # re-attaches and publishes again
        (v2,) = self.route_versions(v1)
        load.wait(timeout=60)
        with open(json_path) as f:
            res = json.load(f)
        self.assertEqual(res["errors"], 0, res)
        self.assertGreater(res["ops"], 100, res)
        for w in self.status()["workers"]:
            self.assertEqual((w["route_snapshots_adopted"], w["route_snapshots_rejected"]), (3, 0), w)
        ctl.stop(signal.SIGTERM)
        self.assertEqual(ctl.returncode, 0, ctl.stderr)
        self.assertIn("stopped", ctl.stderr)
        rc, stats = self.stop_server(b)
        self.assertEqual(stats["server"]["pattern_errors"], 0, stats)
        self.assert_router_idle()

    def test_bad_configuration_is_refused(self):
        path = os.path.join(self.dir, "bad.yaml")
        with open(path, "w") as f:
            f.write("net:\n  - net type: tcp\n    local NI(s):\n      - interfaces:\n          0: eth0\n"
                    "dataplane:\n  shm_name: no-slash\n")
        cp = subprocess.run([control_binary(), "--config", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, timeout=30)
        self.assertEqual(cp.returncode, 1, cp.stderr)
        self.assertIn("bad.yaml:7:13: dataplane.shm_name: expected a shared-memory name", cp.stderr)


if __name__ == "__main__":
    unittest.main()
