"""lnetr-control's gateway health with real gateways (lnetr_gateways.py):
R reaches tcp2 through G1 (priority 0) and G2 (priority 1), both real lnetr
routers; A on tcp writes to B on tcp2 through R and a gateway.

* Failover: under a continuous PUT load G1 is killed; traffic moves to G2
  within alive_router_check_interval + router_ping_timeout, R drops nothing
  it accepted, and traffic moves back once G1 returns.
* Asymmetric failure: G1's link to tcp2 goes down while G1 itself still
  answers; its ping reply shows its tcp2 NI DOWN and R stops using it.

Every check reads what the processes report: lnetr-control's log, the
dataplanes' status documents (control socket), lnetr-peer's JSON and YAML.
"""

import json
import os
import subprocess
import shutil
import signal
import socket
import tempfile
import time
import unittest

from lnetr_gateways import GatewayTopology
from lnetr_router import api_request, control_request, dataplane_binary, not_at_rest, parse_metrics, scrape_metrics
from lnetr_test import PeerTestCase

CHECK = 1    # R: alive_router_check_interval = router_ping_timeout (s)
G_CHECK = 2  # the gateways' (their NI-status timeout is twice this)


class GatewayTestCase(PeerTestCase):

    topology_options = {}  # GatewayTopology() arguments
    r_check = CHECK  # R's alive_router_check_interval and router_ping_timeout (s)
    g_check = G_CHECK  # the gateways'

    def setUp(self):
        super().setUp()
        if not os.access(dataplane_binary(), os.X_OK):
            self.fail("lnetr-dataplane not found at %s" % dataplane_binary())
        self.topo = t = GatewayTopology(**self.topology_options)
        t.up()
        self.addCleanup(t.down)
        self.dir = tempfile.mkdtemp(prefix="lnetr-gateways-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.g1, self.g2 = t.g_nid["g1"]["tcp1"], t.g_nid["g2"]["tcp1"]
        self.cfg = {"r": t.write_config("r", self.dir, [("tcp2", self.g1, 0), ("tcp2", self.g2, 1)], (0, 1),
                                        self.r_check, self.r_check)}
        for g, core in (("g1", 0), ("g2", 1)):
            self.cfg[g] = t.write_config(g, self.dir, [("tcp", t.r_nid["tcp1"], 0)], (core,), self.g_check,
                                         self.g_check)
        self.dp = {}
        for name in ("g1", "g2", "r"):
            self.start_dataplane(name)
        self.b = self.start_server(t.b_nid, self.b_options(), host=t.host("b"))
        self.ctl = t.start_control(self.procs, self.cfg["r"])
        both = ["gateway %s: alive" % self.g1, "gateway %s: alive" % self.g2]
        if not self.ctl.wait_stderr_text(lambda text: all(n in text for n in both), timeout=15):
            self.ctl.stop()
            self.fail("lnetr-control did not report both gateways alive:\n" + self.ctl.stderr_so_far)

    def start_dataplane(self, name):
        p, err = self.topo.start_dataplane(self.procs, name, self.cfg[name])
        if err:
            self.fail(err)
        self.dp[name] = p

    def a_options(self):
        return ["--route", "tcp2=%s" % self.topo.r_nid["tcp"], "--router-check-interval", "1"]

    def b_options(self):
        t = self.topo
        return ["--route", "tcp=%s" % t.g_nid["g1"]["tcp2"], "--route", "tcp=%s" % t.g_nid["g2"]["tcp2"],
                "--router-check-interval", "1"]

    def api(self, command, args=None, text=None):
        """A management-API request to R's lnetr-control; its response."""
        return api_request(os.path.join(self.dir, "r-control.sock"), command, args, text)

    def ok(self, command, args=None):
        """A request that must succeed; its data."""
        res = self.api(command, args)
        self.assertEqual(res["errno"], 0, res)
        self.assertEqual((res["version"], res["command"]), (1, command), res)
        return res["data"]

    def routes(self):
        return {(r["net"], r["gateway"]): r for r in self.ok("route show", {"verbose": 1})["route"]}

    def status(self, name):
        return control_request(os.path.join(self.dir, name + ".sock"), "status")

    def forwarded(self, name):
        """Messages router `name` forwarded so far (None if it is not running)."""
        try:
            return self.status(name)["statistics"]["route_count"]
        except OSError:
            return None

    def wait_for(self, pred, timeout, step=0.02):
        """Seconds until pred() held, or None on timeout."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if pred():
                return time.monotonic() - start
            time.sleep(step)
        return None

    def start_load(self, json_path, duration, concurrency=8, size=4096, timeout=5):
        argv = self.peer_argv(self.topo.a_nid, ["brw", self.topo.b_nid, "--op", "write", "--size", str(size),
                                                "--concurrency", str(concurrency), "--duration", str(duration),
                                                "--timeout", str(timeout), "--json", json_path], self.a_options())
        return self.procs.start(argv, host=self.topo.host("a"))

    def finish_load(self, load, json_path, timeout=120):
        load.wait(timeout=timeout)
        with open(json_path) as f:
            return json.load(f)

    def assert_r_idle(self, timeout=15):
        end = time.monotonic() + timeout
        while True:
            problems = not_at_rest(self.status("r"))
            if not problems:
                return
            if time.monotonic() > end:
                self.fail("router R not idle: " + "; ".join(problems))
            time.sleep(0.2)

    def finish(self):
        rc, stats = self.stop_server(self.b)
        self.assertEqual(stats["server"]["pattern_errors"], 0, stats)
        self.assert_r_idle()
        self.ctl.stop(signal.SIGTERM)
        self.assertEqual(self.ctl.returncode, 0, self.ctl.stderr_so_far)


class Failover(GatewayTestCase):

    def test_traffic_moves_to_the_other_gateway_and_back(self):
        json_path = os.path.join(self.dir, "load.json")
        load = self.start_load(json_path, duration=14)
        # Priority 0 first: everything goes through G1.
        self.assertIsNotNone(self.wait_for(lambda: (self.forwarded("g1") or 0) > 300, 10), "no traffic via G1")
        self.assertEqual(self.forwarded("g2"), 0)

        self.dp["g1"].stop(signal.SIGKILL)
        killed = time.monotonic()
        # A probe client pings B through R until an answer comes back: the
        # load's own messages lost with G1 stall it for its timeout.
        moved = None
        while time.monotonic() - killed < 10:
            rc, doc, _ = self.run_peer(self.topo.probe_nid, ["ping", self.topo.b_nid, "--timeout", "0.5"],
                                       self.a_options(), host=self.topo.host("a"), timeout=30)
            if rc == 0:
                moved = time.monotonic() - killed
                break
        self.assertIsNotNone(moved, "B unreachable after G1 was killed")
        print("\nfailover: B answers through G2 %.3f s after G1 was killed (probe ping)" % moved)
        self.assertLess(moved, 2 * CHECK, "slower than alive_router_check_interval + router_ping_timeout")
        self.assertGreater(self.forwarded("g2"), 0)

        time.sleep(1.5)
        self.start_dataplane("g1")  # a new incarnation, counters from 0
        back = self.wait_for(lambda: (self.forwarded("g1") or 0) > 50, 15)
        self.assertIsNotNone(back, "traffic did not move back to G1:\n" + self.ctl.stderr_so_far)
        print("failback: traffic through G1 %.3f s after it restarted" % back)
        # Back to priority 0 entirely: G2 forwards nothing more.
        g2 = self.forwarded("g2")
        time.sleep(1)
        self.assertEqual(self.forwarded("g2"), g2)

        res = self.finish_load(load, json_path)
        st = self.status("r")["statistics"]
        print("load: %d ops, %d errors; R re-routed %d, dropped %d" %
              (res["ops"], res["errors"], st["reroute_count"], st["drop_count"]))
        # What R accepted it delivered (re-routing what G1 could no longer
        # take); only what G1 held when it died is lost, at most the load's
        # messages in flight.
        self.assertEqual(st["drop_count"], 0, self.status("r")["drops"])
        self.assertLessEqual(res["errors"], 8, res)
        self.assertGreater(res["ops"], 1000, res)
        self.finish()
        log = self.ctl.stderr_so_far
        self.assertIn("gateway %s: dead (" % self.g1, log)
        self.assertIn("route tcp2 via %s: down (its gateway is dead)" % self.g1, log)
        self.assertIn("route tcp2 via %s: up" % self.g1, log)
        self.assertNotIn("gateway %s: dead" % self.g2, log)


class PingsDropped(GatewayTestCase):

    def test_a_gateway_whose_pings_are_lost_goes_down_and_comes_back(self):
        """A fault rule on R drops G1's answers to R's gateway checks: G1 is
        found dead and its route goes down, a load then flows through G2
        alone; deleting the rule brings G1's route back and the load
        through it.  (A gateway that forwards to R counts as alive, as in
        LNet, so the rule goes in while nothing flows.)"""
        r_tcp1 = self.topo.r_nid["tcp1"]
        rule = self.ok("fault add", {"kind": "drop", "source": self.g1, "dest": r_tcp1, "type": "REPLY",
                                     "rate": 1})["fault"]
        dead = "gateway %s: dead" % self.g1
        down = self.ctl.wait_stderr_text(
            lambda text: dead in text and "route tcp2 via %s: down" % self.g1 in text.split(dead, 1)[1], timeout=15)
        self.assertTrue(down, "G1 not dead, or its route not down:\n" + self.ctl.stderr_so_far)
        g1, g2 = self.forwarded("g1"), self.forwarded("g2")
        json_path = os.path.join(self.dir, "load1.json")
        res = self.finish_load(self.start_load(json_path, duration=3), json_path)
        self.assertEqual(res["errors"], 0, res)
        self.assertEqual(self.forwarded("g1"), g1)  # nothing through the gateway that does not answer
        self.assertGreater(self.forwarded("g2"), g2 + 100)
        shown = {f["id"]: f for f in self.ok("fault show")["fault"]["faults"]}
        self.assertGreaterEqual(shown[rule["id"]]["dropped"], 1, shown)
        self.assertEqual(shown[rule["id"]]["matched"]["PUT"], 0, shown)  # only the checks' REPLYs
        self.ok("fault del", {"id": rule["id"]})
        up = self.ctl.wait_stderr_text(lambda text: "route tcp2 via %s: up" % self.g1 in text.split(dead, 1)[1],
                                       timeout=10)
        self.assertTrue(up, "G1's route did not come back:\n" + self.ctl.stderr_so_far)
        json_path = os.path.join(self.dir, "load2.json")
        res = self.finish_load(self.start_load(json_path, duration=3), json_path)
        self.assertEqual(res["errors"], 0, res)
        self.assertGreater(self.forwarded("g1"), g1 + 100)  # priority 0 again
        drops = self.status("r")["drops"]
        self.assertGreaterEqual(drops["fault"], 1)
        self.assertEqual(sum(n for why, n in drops.items() if why != "fault"), 0, drops)
        self.finish()


class AsymmetricFailure(GatewayTestCase):

    def test_a_gateway_whose_far_ni_is_down_is_not_used(self):
        down_line = "route tcp2 via %s: down (its gateway's ping info lists no UP NI on the remote net" % self.g1
        self.topo.set_link("g1", "eth1", False)
        seen = self.ctl.wait_stderr_text(lambda text: down_line in text, timeout=10)
        self.assertTrue(seen, self.ctl.stderr_so_far)
        # G1 still answers: it is alive, only its route is down.
        self.assertNotIn("gateway %s: dead" % self.g1, self.ctl.stderr_so_far)

        g1, g2 = self.forwarded("g1"), self.forwarded("g2")
        json_path = os.path.join(self.dir, "asym.json")
        res = self.finish_load(self.start_load(json_path, duration=2, concurrency=4), json_path)
        self.assertEqual(res["errors"], 0, res)
        self.assertGreater(res["ops"], 100, res)
        self.assertEqual(self.forwarded("g1") - g1, 0)
        self.assertGreaterEqual(self.forwarded("g2") - g2, res["ops"])

        # lnetr-control restarted now carries the route on down: G1 is not
        # used before the new process has checked it.
        self.ctl.stop(signal.SIGKILL)
        self.ctl = self.topo.start_control(self.procs, self.cfg["r"])
        checked = "gateway %s: alive" % self.g1
        self.assertTrue(self.ctl.wait_stderr_text(lambda text: checked in text, timeout=10), self.ctl.stderr_so_far)
        self.assertIn("carried on from the published table", self.ctl.stderr_so_far)
        self.assertNotIn("route tcp2 via %s: up" % self.g1, self.ctl.stderr_so_far)
        self.assertNotEqual(self.routes()[("tcp2", self.g1)]["state"], "up")

        self.topo.set_link("g1", "eth1", True)
        up_line = "route tcp2 via %s: up" % self.g1
        self.assertTrue(self.ctl.wait_stderr_text(lambda text: up_line in text, timeout=15), self.ctl.stderr_so_far)
        g1 = self.forwarded("g1")
        json_path = os.path.join(self.dir, "again.json")
        res = self.finish_load(self.start_load(json_path, duration=2, concurrency=4), json_path)
        self.assertEqual(res["errors"], 0, res)
        self.assertGreaterEqual(self.forwarded("g1") - g1, res["ops"])
        self.finish()


class MultiRail(GatewayTestCase):
    """Discovery of Multi-Rail gateways: G1 has two NIs on tcp1.  R pings
    each gateway and pushes its own ping info to it (ACKed); when the link
    of the G1 NI its routes name goes down under load, R moves to G1's other
    NI on tcp1 and traffic goes on through G1, not G2."""

    topology_options = {"g1_rail": True}

    def gateways(self):
        return {g["nid"]: g for g in self.ok("gateway show")["gateway"]}

    def test_a_gateway_that_loses_an_ni_carries_on_through_its_other(self):
        rail = self.topo.ip["g1"]["eth2"] + "@tcp1"
        # Discovered: ping, then push (both gateways ACK R's ping info).
        pushed = self.wait_for(lambda: all(g["push_acks"] >= 1 for g in self.gateways().values()), 10)
        self.assertIsNotNone(pushed, self.gateways())
        g1 = self.gateways()[self.g1]
        self.assertEqual(sorted(n["nid"] for n in g1["nis"] if n["nid"].endswith("@tcp1")), sorted([self.g1, rail]))
        self.assertNotIn("rail", g1)
        json_path = os.path.join(self.dir, "load.json")
        load = self.start_load(json_path, duration=10, timeout=3)
        self.assertIsNotNone(self.wait_for(lambda: (self.forwarded("g1") or 0) > 300, 10), "no traffic via G1")
        self.topo.set_link("g1", "eth0", False)
        lost = time.monotonic()
        moved = "gateway %s: its NI %s failed; using its NI %s (Multi-Rail)" % (self.g1, self.g1, rail)
        self.assertTrue(self.ctl.wait_stderr_text(lambda text: moved in text, timeout=10), self.ctl.stderr_so_far)
        print("\nmulti-rail: R moved to G1's other NI %.3f s after the link went down" % (time.monotonic() - lost))
        res = self.finish_load(load, json_path)
        self.assertGreater(res["ops"], 300, res)
        # Once the connections to the lost NI have timed out (sock_timeout),
        # verified writes and reads go through G1's other NI alone.
        time.sleep(3)
        before = self.forwarded("g1"), self.forwarded("g2")
        for op in ("write", "read"):
            json_path = os.path.join(self.dir, op + ".json")
            rc, doc, cp = self.run_peer(self.topo.a_nid, ["brw", self.topo.b_nid, "--op", op, "--size", "65536",
                                                          "--concurrency", "4", "--duration", "2", "--json",
                                                          json_path], self.a_options(), host=self.topo.host("a"))
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            with open(json_path) as f:
                res = json.load(f)
            self.assertEqual(res["errors"], 0, res)
            self.assertGreater(res["ops"], 20, res)
        self.assertGreater(self.forwarded("g1") - before[0], 40)
        self.assertEqual(self.forwarded("g2"), before[1])
        g1 = self.gateways()[self.g1]
        self.assertEqual((g1["state"], g1["rail"]), ("up", rail), g1)
        self.assertGreaterEqual(g1["failovers"], 1, g1)
        self.assertEqual(self.routes()[("tcp2", self.g1)]["state"], "up")
        self.assertNotIn("gateway %s: dead" % self.g1, self.ctl.stderr_so_far)
        # peer show -v: G1 as one discovered Multi-Rail peer with its NIs as
        # it last said (its NI whose link is down: DOWN).
        peers = {p["primary nid"]: p for p in self.ok("peer show", {"verbose": 1})["peer"]}
        g1 = peers[self.g1]
        self.assertTrue(g1["Multi-Rail"], g1)
        self.assertEqual([(n["nid"], n["state"]) for n in g1["peer ni"]],
                         [(self.g1, "down"), (rail, "up"), (self.topo.g_nid["g1"]["tcp2"], "up")], g1)
        self.assertGreater(next(n for n in g1["peer ni"] if n["nid"] == rail)["statistics"]["send_count"], 0, g1)
        d = g1["discovery"]
        self.assertEqual((d["gateway"], d["features"], d["discovers"], d["rail"]), (self.g1, "0x1a", True, rail), d)
        self.assertGreaterEqual(d["push_acks"], 1, d)
        self.assertNotIn(rail, peers)  # (not a peer of its own)
        # A checks R (ping, then push): discovered by its push, and given
        # R's ping info back; listed with its counters like any peer.
        a = peers[self.topo.a_nid]
        self.assertTrue(a["Multi-Rail"], a)
        self.assertEqual([(n["nid"], n["state"]) for n in a["peer ni"]], [(self.topo.a_nid, "up")], a)
        self.assertGreater(a["peer ni"][0]["statistics"]["recv_count"], 0, a)
        d = a["discovery"]
        self.assertEqual((d["state"], d["from"], d["pings"]), ("discovered", "push", 0), d)
        self.assertGreaterEqual(d["push_acks"], 1, d)
        self.finish()


class PushedState(GatewayTestCase):
    """A gateway's pushes of its ping info: with R's own checks a minute
    apart, G2 stopping routing reaches R's routes at once.  (The gateways
    take their NIs on tcp1 for DOWN after 80 s without a ping from it.)"""

    r_check = 60
    g_check = 40

    def test_a_gateway_that_stops_routing_says_so_at_once(self):
        g2 = os.path.join(self.dir, "g2.sock")
        self.assertIsNotNone(self.wait_for(lambda: self.gateways_acked(), 10))
        control_request(g2, "routing 0")
        disabled = time.monotonic()
        down = "route tcp2 via %s: down (its gateway's ping info says routing is disabled)" % self.g2
        self.assertTrue(self.ctl.wait_stderr_text(lambda text: down in text, timeout=10), self.ctl.stderr_so_far)
        print("\npush: R took G2's route down %.3f s after G2 disabled routing" % (time.monotonic() - disabled))
        self.assertIn("gateway %s pushed its ping info: routing disabled" % self.g2, self.ctl.stderr_so_far)
        gw = {g["nid"]: g for g in self.ok("gateway show")["gateway"]}[self.g2]
        self.assertGreaterEqual(gw["pushes_received"], 1, gw)
        self.assertEqual((gw["state"], gw["pings"]), ("up", 1), gw)  # (no check of R's own since)
        # Traffic to tcp2 goes through G1 alone from then on.
        g1, g2 = self.forwarded("g1"), self.forwarded("g2")
        json_path = os.path.join(self.dir, "load.json")
        res = self.finish_load(self.start_load(json_path, duration=2, concurrency=4), json_path)
        self.assertEqual(res["errors"], 0, res)
        self.assertEqual(self.forwarded("g2"), g2)
        self.assertGreaterEqual(self.forwarded("g1") - g1, res["ops"])
        self.finish()

    def gateways_acked(self):
        return all(g["push_acks"] >= 1 for g in self.ok("gateway show")["gateway"])


class AsymmetricRoute(GatewayTestCase):
    """drop_asym_route on R: a message for R from tcp2 is taken only through a
    gateway on one of R's routes back to tcp2."""

    def ping_r(self, via):
        """Ping R's tcp1 NID from a probe on tcp2 that routes through `via`
        (g1 or g2); True if R answered."""
        t = self.topo
        opts = ["--route", "tcp1=%s" % t.g_nid[via]["tcp2"], "--router-check-interval", "0"]
        rc, doc, cp = self.run_peer(self.probe, ["ping", t.r_nid["tcp1"], "--timeout", "1"], opts, host=t.host("b"))
        return rc == 0

    def asym_drops(self):
        return self.status("r")["drops"]["asym_route"]

    def test_messages_through_a_gateway_not_routing_back_are_dropped(self):
        t = self.topo
        probe_ip = t.ip["b"]["eth0"].rsplit(".", 1)[0] + ".4"
        t.host("b").run(["ip", "addr", "add", probe_ip + "/24", "dev", "eth0"], check=True)
        self.probe = probe_ip + "@tcp2"
        # R keeps only G1 as its way back to tcp2 (every worker on the new table).
        versions = lambda: [w["route_version"] for w in self.status("r")["workers"]]
        before = max(versions())
        self.ok("route del", {"net": "tcp2", "gateway": self.g2})
        self.assertIsNotNone(self.wait_for(lambda: min(versions()) > before, 5), "route table not adopted")
        self.assertEqual(self.ok("global show")["global"]["drop_asym_route"], 0)
        # Off (the kernel's default): answered whichever way the ping came.
        self.assertTrue(self.ping_r("g2"))
        self.assertTrue(self.ping_r("g1"))
        self.assertEqual(self.ok("set", {"drop_asym_route": 1})["global"]["drop_asym_route"], 1)
        self.assertEqual(self.ok("global show")["global"]["drop_asym_route"], 1)
        self.assertEqual(self.status("r")["drop_asym_route"], 1)
        # On: through G2, which R would not route back through, dropped and
        # counted; through G1 answered.
        self.assertFalse(self.ping_r("g2"))
        self.assertEqual(self.asym_drops(), 1)
        self.assertTrue(self.ping_r("g1"))
        self.assertEqual(self.asym_drops(), 1)
        # Off again: answered.
        self.assertEqual(self.ok("set", {"drop_asym_route": 0})["global"]["drop_asym_route"], 0)
        self.assertTrue(self.ping_r("g2"))
        self.assertEqual(self.asym_drops(), 1)
        self.finish()


class ManagementApi(GatewayTestCase):

    def test_routes_change_at_run_time_without_dropping_traffic(self):
        t = self.topo
        routes = self.routes()
        self.assertEqual(set(routes), {("tcp2", self.g1), ("tcp2", self.g2)})
        r1 = routes[("tcp2", self.g1)]
        self.assertEqual((r1["hop"], r1["priority"], r1["state"], r1["type"]), (-1, 0, "up", "single-hop"), r1)
        gws = {g["nid"]: g for g in self.ok("gateway show")["gateway"]}
        self.assertEqual((gws[self.g1]["state"], gws[self.g1]["health"]), ("up", 1000), gws)
        self.assertIn({"nid": t.g_nid["g1"]["tcp2"], "status": "up"}, gws[self.g1]["nis"])

        # Under a PUT load: the preferred route goes, then comes back.
        json_path = os.path.join(self.dir, "load.json")
        load = self.start_load(json_path, duration=9, concurrency=8)
        self.assertIsNotNone(self.wait_for(lambda: self.forwarded("g1") > 300, 10), "no traffic via G1")
        removed = self.ok("route del", {"net": "tcp2", "gateway": self.g1})["route"]
        self.assertEqual([(r["net"], r["gateway"]) for r in removed], [("tcp2", self.g1)])
        self.assertEqual(set(self.routes()), {("tcp2", self.g2)})
        g2 = self.forwarded("g2")
        self.assertIsNotNone(self.wait_for(lambda: self.forwarded("g2") > g2 + 300, 10), "traffic did not move to G2")
        g1 = self.forwarded("g1")
        time.sleep(0.5)
        self.assertEqual(self.forwarded("g1"), g1, "the deleted route is still used")
        added = self.ok("route add", {"net": "tcp2", "gateway": self.g1, "hop": 1, "priority": 0,
                                      "health_sensitivity": 250})["route"]
        self.assertEqual((added[0]["hop"], added[0]["health_sensitivity"]), (1, 250), added)
        self.assertIsNotNone(self.wait_for(lambda: self.forwarded("g1") > g1 + 300, 10), "traffic did not return")
        res = self.finish_load(load, json_path)
        self.assertEqual(res["errors"], 0, res)  # nothing in flight was dropped
        self.assertEqual(self.status("r")["statistics"]["drop_count"], 0)

        # lnetr-control killed under load: forwarding goes on; restarted, it
        # reports the same routes (the one added at run time included).
        before = self.routes()
        load = self.start_load(json_path, duration=4, concurrency=8)
        time.sleep(1)
        self.ctl.stop(signal.SIGKILL)
        time.sleep(1)
        self.ctl = self.topo.start_control(self.procs, self.cfg["r"])
        self.assertTrue(self.ctl.wait_stderr_text(lambda text: "carried on from the published table" in text, 10),
                        self.ctl.stderr_so_far)
        res = self.finish_load(load, json_path)
        self.assertEqual(res["errors"], 0, res)
        after = self.routes()
        self.assertEqual(set(after), set(before))
        for key, r in before.items():
            for field in ("hop", "priority", "health_sensitivity"):
                self.assertEqual(after[key][field], r[field], (key, field))
        self.assertIsNotNone(self.wait_for(lambda: all(r["state"] == "up" for r in self.routes().values()), 5))
        self.finish()

    def test_bad_requests_get_clear_errors_and_change_nothing(self):
        before = self.routes()
        cases = [
            (dict(text="version: 1\ncommand: route add\nargs: {net: tcp2, gateway: 10.9.9.9@tcp1, hop: 0}\n"),
             22, "argument 'hop'"),
            (dict(command="route add", args={"net": "tcp2", "gateway": "not-a-nid"}), 22, "expected a NID"),
            (dict(command="route add", args={"net": "tcp2", "gateway": self.g1}), 17, "exists already"),
            (dict(command="route add", args={"net": "tcp", "gateway": self.g1}), 17, "local net"),
            (dict(command="route add", args={"net": "tcp3", "gateway": "10.9.9.9@tcp9"}), 113, "not on a local net"),
            (dict(command="route add", args={"net": "tcp3", "gateway": self.g1, "priorty": 1}), 22, "'priorty'"),
            (dict(command="route del", args={"net": "tcp3"}), 2, "no route to tcp3"),
            (dict(command="route fly"), 22, "unknown command 'route fly'"),
            (dict(text="version: 2\ncommand: route show\n"), 71, "version \"2\" is not spoken"),
            (dict(text="command: route show\n"), 71, "without a version"),
            (dict(text="version: 1\ncommand: [oops\n"), 22, "request 3:1: YAML syntax error"),
            (dict(text="{\"version\": 1, \"command\": \"set\", \"args\": {\"health_sensitivity\": 5000}}"),
             22, "0..1000"),
        ]
        for req, err, needle in cases:
            res = self.api(req.get("command"), req.get("args"), req.get("text"))
            self.assertEqual(res["errno"], -err, (req, res))
            self.assertIn(needle, res["descr"], (req, res))
            self.assertEqual(res["version"], 1)
        self.assertEqual(self.routes(), before)
        self.assertEqual(self.ok("global show")["global"]["health_sensitivity"], 100)

        # A client that connects and sends nothing holds up nobody else.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as idle:
            idle.connect(os.path.join(self.dir, "r-control.sock"))
            start = time.monotonic()
            self.ok("route show")
            self.assertLess(time.monotonic() - start, 2)
        # A second lnetr-control for the same dataplane is refused and
        # leaves the first one's socket alone.
        second = self.topo.start_control(self.procs, self.cfg["r"])
        second.wait(timeout=10)
        self.assertEqual(second.returncode, 1, second.stderr_so_far)
        self.assertIn("another lnetr-control already runs", second.stderr_so_far)
        self.assertEqual(self.routes(), before)
        self.finish()

    def test_ping_through_the_dataplane(self):
        t = self.topo
        res = self.ok("ping", {"nid": self.g1})["ping"][0]
        self.assertEqual(res["primary nid"], self.g1)
        self.assertTrue(res["Multi-Rail"])
        self.assertEqual({n["nid"]: n["status"] for n in res["peer_ni"]},
                         {self.g1: "up", t.g_nid["g1"]["tcp2"]: "up"})
        self.assertGreater(res["rtt_us"], 0)
        # Several at once share the API's ping slots.
        for _ in range(3):
            self.assertEqual(self.ok("ping", {"nid": self.g2, "timeout": 2})["ping"][0]["primary nid"], self.g2)
        # A remote NID: through the preferred gateway (G1, priority 0; it
        # forwards at least the GET), answered by B itself.
        g1_before = self.forwarded("g1")
        far = self.ok("ping", {"nid": t.b_nid, "timeout": 2})["ping"][0]
        self.assertGreaterEqual(self.forwarded("g1"), g1_before + 1)
        self.assertEqual(far["primary nid"], t.b_nid)
        self.assertEqual([n["nid"] for n in far["peer_ni"]], [t.b_nid])
        self.assertGreater(far["rtt_us"], 0)
        nowhere = self.api("ping", {"nid": "10.9.9.9@tcp9"})
        self.assertEqual(nowhere["errno"], -113, nowhere)
        self.assertIn("no alive route to tcp9", nowhere["descr"])
        nobody = self.api("ping", {"nid": "10.%d.2.99@tcp1" % t.n})
        self.assertIn(nobody["errno"], (-110, -113), nobody)
        self.assertIn("failed to ping 10.%d.2.99@tcp1" % t.n, nobody["descr"])
        self.finish()

    def test_import_of_an_lnetctl_export_and_round_trip(self):
        vectors = os.environ.get("LNETR_VECTORS") or os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                                 "shared", "vectors")
        # A kernel router's own export: same nets as R; its router buffer
        # sizes are applied at run time.
        with open(os.path.join(vectors, "v4-lnetctl", "router-run-R-export.yaml")) as f:
            res = self.ok("import", {"text": f.read(), "name": "router-run-R-export.yaml"})["import"]
        self.assertEqual(res["errors"], [], res)
        self.assertEqual([d for d in res["done"] if "buffers" in d],
                         ["tiny_buffers 512", "small_buffers 1024", "large_buffers 128"], res)
        # A node's export with routes: the four through gateways on tcp are
        # added as written, the one through tcp5 (not a net of R) refused.
        with open(os.path.join(vectors, "v4-lnetctl-import", "Q-after-export.yaml")) as f:
            q = f.read()
        res = self.ok("import", {"text": q, "name": "Q-after-export.yaml"})["import"]
        self.assertEqual([(e["route"], e["errno"]) for e in res["errors"]], [("tcp7 via 10.201.1.52@tcp5", -113)], res)
        self.assertTrue(any("tcp5" in w for w in res["warnings"]), res)
        routes = self.routes()
        want = {("o2ib3", "10.201.1.53@tcp"): (-1, 0), ("tcp7", "10.201.1.50@tcp"): (1, 0),
                ("tcp7", "10.201.1.51@tcp"): (1, 1), ("tcp8", "10.201.1.50@tcp"): (3, 2)}
        for key, (hop, prio) in want.items():
            self.assertEqual((routes[key]["hop"], routes[key]["priority"]), (hop, prio), routes[key])
        # Nobody answers for those gateways: their routes go down.
        self.assertIsNotNone(self.wait_for(lambda: self.routes()[("tcp7", "10.201.1.50@tcp")]["state"] == "down", 10))

        # export, delete, import the export: the same routes.
        exported = self.ok("export")
        self.assertEqual(len(exported["route"]), 6)
        res = self.ok("import", {"text": q, "name": "Q-after-export.yaml", "del": 1})["import"]
        self.assertEqual(set(self.routes()), {("tcp2", self.g1), ("tcp2", self.g2)})
        res = self.ok("import", {"text": json.dumps(exported), "name": "export.json"})["import"]
        self.assertEqual(len(res["errors"]), 2, res)  # the two tcp2 routes exist already
        got = {k: (r["hop"], r["priority"]) for k, r in self.routes().items()}
        self.assertEqual(got, {(r["net"], r["gateway"]): (r["hop"], r["priority"]) for r in exported["route"]})
        self.finish()


class Metrics(GatewayTestCase):

    def scrape(self):
        """GET /metrics from R's lnetr-control over HTTP, inside namespace r."""
        rc, ctype, body, err = scrape_metrics(self.topo.host("r"), "127.0.0.1:9798")
        if rc != 0:
            self.ctl.stop()
        self.assertEqual(rc, 0, err[-300:] + "\nlnetr-control:\n" + self.ctl.stderr_so_far[-3000:])
        self.assertTrue(ctype.startswith("text/plain"), ctype)
        return body

    def test_metrics_after_a_known_load(self):
        json_path = os.path.join(self.dir, "load.json")
        res = self.finish_load(self.start_load(json_path, duration=2, concurrency=4), json_path)
        self.assertEqual(res["errors"], 0, res)
        self.assert_r_idle()
        # R's tcp NI is UP in its ping info while a node of tcp pinged it
        # within check + timeout (2 s here), which the time since the load
        # ended may outlast on a busy machine: the series must say what R's
        # own status says around the scrape.
        r_tcp = self.topo.r_nid["tcp"]

        def advertised():
            return [n["advertised"] for n in self.status("r")["nis"] if n["nid"] == r_tcp][0]

        before = advertised()
        text = self.scrape()
        after = advertised()
        if shutil.which("promtool"):
            cp = subprocess.run(["promtool", "check", "metrics"], input=text, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, timeout=60)
            self.assertEqual(cp.returncode, 0, cp.stdout)
        else:
            self.fail("promtool not installed (deploy/setup installs the prometheus package)")
        for line in text.splitlines():
            if line.startswith("# HELP "):
                self.assertGreater(len(line.split(" ", 3)[3]), 20, line)  # every series says what it means
            elif line and not line.startswith("#"):
                # ours, and prometheus-cpp's own about the exposer
                self.assertTrue(line.startswith(("lnetr_", "exposer_")), line)
        m = parse_metrics(text)

        def values(name, **labels):
            want = set(labels.items())
            return [v for (n, l), v in m.items() if n == name and want <= set(l)]

        def one(name, **labels):
            v = values(name, **labels)
            self.assertEqual(len(v), 1, (name, labels, v))
            return v[0]

        self.assertEqual(one("lnetr_up"), 1)
        self.assertEqual(one("lnetr_dataplane_up"), 1)
        self.assertEqual(one("lnetr_routing_enabled"), 1)
        self.assertGreaterEqual(one("lnetr_route_table_version"), 2)
        # Every PUT forwarded to B and its ACK back: at least 2 per operation.
        self.assertGreaterEqual(sum(values("lnetr_forwarded_messages_total")), 2 * res["ops"])
        self.assertGreaterEqual(sum(values("lnetr_forwarded_bytes_total")), 4096 * res["ops"])
        self.assertEqual(sum(values("lnetr_dropped_messages_total")), 0)
        self.assertEqual(len(values("lnetr_dropped_messages_total")), len(self.status("r")["drops"]))
        # By net: A's PUTs came in on tcp and left on tcp1 (to the gateways).
        self.assertGreaterEqual(one("lnetr_net_received_messages_total", net="tcp"), res["ops"])
        self.assertGreaterEqual(one("lnetr_net_received_bytes_total", net="tcp"), 4096 * res["ops"])
        self.assertGreaterEqual(one("lnetr_net_sent_messages_total", net="tcp1"), res["ops"])
        self.assertGreaterEqual(one("lnetr_net_sent_bytes_total", net="tcp1"), 4096 * res["ops"])
        self.assertLess(one("lnetr_net_sent_bytes_total", net="tcp"), 4096 * res["ops"])  # ACKs: no payload
        for g in (self.g1, self.g2):
            self.assertEqual(one("lnetr_gateway_up", gateway=g), 1)
            self.assertEqual(one("lnetr_gateway_health", gateway=g), 1000)
            self.assertGreater(one("lnetr_gateway_pings_total", gateway=g), 0)
            self.assertGreater(one("lnetr_gateway_ping_rtt_seconds", gateway=g), 0)
            self.assertEqual(one("lnetr_route_up", net="tcp2", gateway=g), 1)
        self.assertEqual(one("lnetr_route_priority", net="tcp2", gateway=self.g2), 1)
        self.assertEqual(one("lnetr_route_hops", net="tcp2", gateway=self.g1), -1)
        if before == after:
            self.assertEqual(one("lnetr_ni_up", nid=r_tcp), 1 if before == "up" else 0)
        self.assertEqual(one("lnetr_ni_link_up", nid=r_tcp), 1)
        # At rest: every buffer back, and the pools were used.
        for cpt in ("0", "1"):
            for pool in ("tiny", "small", "large"):
                self.assertEqual(one("lnetr_router_buffers_available", cpt=cpt, pool=pool),
                                 one("lnetr_router_buffers", cpt=cpt, pool=pool))
        self.assertLess(min(values("lnetr_router_buffers_min", pool="small")),
                        one("lnetr_router_buffers", cpt="0", pool="small"))
        a = one("lnetr_peer_tx_credits", peer=self.topo.a_nid)
        self.assertEqual(a, 8)
        self.assertEqual(len(values("lnetr_worker_busy_ratio")), 2)
        # Cycles: a worker's loop accounts for all of its time, sleeping
        # included; the load above was busy time, within it.
        hz = one("lnetr_worker_tsc_hz")
        self.assertGreater(hz, 1e8)
        for cpt in ("0", "1"):
            busy, cycles = one("lnetr_worker_busy_cycles_total", cpt=cpt), one("lnetr_worker_cycles_total", cpt=cpt)
            self.assertGreater(busy, 0)
            self.assertLessEqual(busy, cycles)
        t0 = time.monotonic()
        before = parse_metrics(self.scrape())
        time.sleep(1.5)
        after = parse_metrics(self.scrape())
        elapsed = time.monotonic() - t0
        for cpt in ("0", "1"):
            key = ("lnetr_worker_cycles_total", frozenset({("cpt", cpt)}))
            seconds = (after[key] - before[key]) / hz
            self.assertGreater(seconds, 0.7 * elapsed - 0.15, (cpt, seconds, elapsed))
            self.assertLess(seconds, 1.3 * elapsed + 0.15, (cpt, seconds, elapsed))
            # Its thread's time on the core: counted on 100 ms ticks, never
            # more than the time that passed (the workers here may sleep).
            key = ("lnetr_worker_cpu_seconds_total", frozenset({("cpt", cpt)}))
            self.assertGreater(after[key], 0)
            self.assertLess(after[key] - before[key], 1.3 * elapsed + 0.15, (cpt, elapsed))
            # Its log lines: queued, written out by the control thread, none
            # suppressed.
            line = "worker %s running on lcore" % cpt
            self.assertTrue(self.dp["r"].wait_stderr_text(lambda text: line in text, timeout=5),
                            self.dp["r"].stderr_so_far)
            self.assertEqual(after[("lnetr_worker_log_lines_suppressed_total", frozenset({("cpt", cpt)}))], 0)
        # Killing G1 shows in the gateway's and its route's series.
        self.dp["g1"].stop(signal.SIGKILL)
        self.assertIsNotNone(self.wait_for(
            lambda: parse_metrics(self.scrape()).get(("lnetr_gateway_up", frozenset({("gateway", self.g1)}))) == 0, 10))
        m = parse_metrics(self.scrape())
        self.assertEqual(m[("lnetr_route_up", frozenset({("net", "tcp2"), ("gateway", self.g1)}))], 0)
        self.assertLess(m[("lnetr_gateway_health", frozenset({("gateway", self.g1)}))], 1000)
        self.finish()

    def test_per_peer_series_are_bounded_and_nets_aggregate(self):
        # lnetr-control again, exporting per-peer series for one peer only.
        self.ctl.stop(signal.SIGTERM)
        with open(self.cfg["r"]) as f:
            text = f.read()
        self.assertTrue(text.rstrip().endswith("metrics: 127.0.0.1:9798"), text[-200:])
        bounded = os.path.join(self.dir, "r-bounded.yaml")
        with open(bounded, "w") as f:
            f.write(text.rstrip() + "\n  metrics_peers: 1\n")
        self.ctl = self.topo.start_control(self.procs, bounded)
        self.assertTrue(self.ctl.wait_stderr("published route table", timeout=15), self.ctl.stderr_so_far)
        json_path = os.path.join(self.dir, "load.json")
        res = self.finish_load(self.start_load(json_path, duration=1, concurrency=4), json_path)
        self.assertEqual(res["errors"], 0, res)
        m = parse_metrics(self.scrape())
        peers = {dict(l)["peer"] for (n, l) in m if n == "lnetr_peer_tx_credits"}
        self.assertEqual(len(peers), 1, peers)
        # The router's peers per net all the same: A on tcp, G1 and G2 on tcp1.
        net_peers = {dict(l)["net"]: v for (n, l), v in m.items() if n == "lnetr_net_peers"}
        self.assertEqual(net_peers.get("tcp"), 1, net_peers)
        self.assertEqual(net_peers.get("tcp1"), 2, net_peers)
        self.assertEqual(m[("lnetr_net_peers_down", frozenset({("net", "tcp1")}))], 0)
        self.assertLessEqual(m[("lnetr_net_peer_tx_credits_min", frozenset({("net", "tcp1")}))], 8)
        self.finish()


if __name__ == "__main__":
    unittest.main()
