"""lnetrctl against a real lnetr-control and lnetr-dataplane in network
namespaces: every verb with its YAML (and JSON) output parsed, errors and
exit codes, the export/import round trip onto a fresh router, top, and the
interactive shell driven through a real pseudo-terminal.

    a: peer 10.N.1.2@tcp -- r: lnetr-dataplane + lnetr-control -- b: peer 10.N.2.3@tcp1
"""

import json
import os
import pty
import re
import select
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

import yaml

from lnetr_test import build_dir, parse_yaml
from lnetr_router import brw, ip
from test_router import RouterTestCase


def settings_reference(section):
    """docs/configuration.md's generated reference of `section`: key ->
    (default, in force), as an operator reads it."""
    doc = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "configuration.md")
    with open(doc) as f:
        text = f.read()
    part = text.split("### `%s`\n" % section, 1)[1].strip().split("\n\n", 1)[0]
    rows = {}
    for line in part.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = (cells[1].strip("`"), cells[3])
    return rows


def lnetrctl_binary():
    return os.environ.get("LNETR_LNETRCTL") or os.path.join(build_dir(), "cli", "lnetrctl", "lnetrctl")


class LnetrctlTestCase(RouterTestCase):

    def setUp(self):
        super().setUp()
        if not os.access(lnetrctl_binary(), os.X_OK):
            self.fail("lnetrctl not found at %s" % lnetrctl_binary())
        self.ctl, err = self.router.start_control(self.procs)
        if err:
            self.fail(err)

    def cli(self, *args, stdin=None, timeout=60):
        """Run lnetrctl in r with `args`: (returncode, stdout, stderr)."""
        cp = self.topo.host("r").run([lnetrctl_binary(), "--socket", self.router.api_sock] + list(args),
                                     timeout=timeout) if stdin is None else subprocess.run(
            ["ip", "netns", "exec", self.topo.ns["r"], lnetrctl_binary(), "--socket", self.router.api_sock] +
            list(args), input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        return cp.returncode, cp.stdout, cp.stderr

    def yaml(self, *args):
        """A command that must succeed; its YAML output parsed."""
        rc, out, err = self.cli(*args)
        self.assertEqual(rc, 0, "%s: %s%s" % (args, out, err))
        try:
            return parse_yaml(out)
        except ValueError as e:
            self.fail("unparsable YAML from %s (%s):\n%s" % (args, e, out))

    def json(self, *args):
        rc, out, err = self.cli(*(args + ("--json",)))
        self.assertEqual(rc, 0, "%s: %s%s" % (args, out, err))
        return json.loads(out)

    def error(self, args, rc, action, obj, errno, needle):
        """A command that must fail as lnetctl reports failures."""
        got, out, err = self.cli(*args)
        self.assertEqual(got, rc, "%s: %s%s" % (args, out, err))
        doc = parse_yaml(err)
        item = doc[action][0]
        item = item if "errno" in item else item[obj]  # ping puts errno beside `ping:`
        self.assertIn(obj, doc[action][0], err)
        self.assertEqual(item["errno"], -errno, err)
        self.assertIn(needle, item["descr"])

    def routes(self):
        return {(r["net"], r["gateway"]): r for r in self.json("route", "show", "-v")["route"]}

    def brw(self, duration=1):
        """A short write load from a to b through the router; its results."""
        json_path = os.path.join(self.dir, "load.json")
        rc, doc, cp = self.peer("a", ["brw", self.topo.b_nid, "--op", "write", "--size", "4096", "--concurrency",
                                      "4", "--duration", str(duration), "--json", json_path])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        with open(json_path) as f:
            return json.load(f)


class Verbs(LnetrctlTestCase):

    def test_show_verbs_print_lnetctl_yaml_and_json(self):
        b = self.server("b")
        self.brw()
        t = self.topo
        nets = self.yaml("net", "show")["net"]
        self.assertEqual([n["net type"] for n in nets], ["tcp", "tcp1"])
        ni = nets[0]["local NI(s)"][0]
        self.assertEqual((ni["nid"], ni["status"], ni["interfaces"]["0"]), (t.ra_nid, "up", t.if_ra))
        self.assertNotIn("statistics", ni)
        ni = self.yaml("net", "show", "-v", "--net", "tcp")["net"][0]["local NI(s)"][0]
        self.assertGreater(ni["statistics"]["recv_count"], 0)
        self.assertEqual(ni["tunables"]["peer_credits"], 8)
        self.assertEqual(ni["CPT"], "[0,1]")
        self.assertEqual(self.json("net", "show", "--net", "tcp1")["net"][0]["local NI(s)"][0]["nid"], t.rb_nid)

        routing = self.yaml("routing", "show")
        self.assertEqual([list(c)[0] for c in routing["routing"][:2]], ["cpt[0]", "cpt[1]"])
        self.assertEqual(routing["routing"][0]["cpt[0]"]["small"]["nbuffers"], 128)
        self.assertEqual(routing["routing"][2]["enable"], 1)
        self.assertEqual(routing["buffers"], {"tiny": 128, "small": 256, "large": 32})

        peers = {p["primary nid"]: p for p in self.yaml("peer", "show")["peer"]}
        self.assertEqual(set(peers), {t.a_nid, t.b_nid})
        self.assertEqual(peers[t.b_nid]["peer ni"][0], {"nid": t.b_nid, "state": "up"})
        peer = self.yaml("peer", "show", "-v", "--nid", t.a_nid)["peer"][0]["peer ni"][0]
        self.assertEqual(peer["max_ni_tx_credits"], 8)
        self.assertEqual(peer["available_rtr_credits"], 8)
        self.assertGreater(peer["statistics"]["recv_count"], 100)
        self.error(("peer", "show", "--nid", "10.9.9.9@tcp"), 1, "show", "peer", 2, "no peer 10.9.9.9@tcp")

        stats = self.yaml("stats", "show")["statistics"]
        self.assertGreater(stats["route_count"], 100)
        self.assertEqual(stats["drop_count"], 0)
        self.assertEqual(self.cli("stats", "reset"), (0, "", ""))
        self.assertLess(self.yaml("stats", "show")["statistics"]["route_count"], 100)

        g = self.yaml("global", "show")["global"]
        self.assertEqual((g["health_sensitivity"], g["discovery"]), (100, 1))
        workers = self.yaml("dataplane", "show")["dataplane"]["workers"]
        self.assertEqual([w["cpt"] for w in workers], [0, 1])
        self.assertTrue(all(0 <= w["busy_ratio"] <= 1 and w["ring_size"] > 0 for w in workers), workers)
        self.assertEqual(len(self.json("buffers", "show")["buffers"]), 2)

        res = self.yaml("ping", t.b_nid, t.ra_nid)["ping"]
        self.assertEqual([r["primary nid"] for r in res], [t.b_nid, t.ra_nid])
        self.error(("ping", "10.%s.2.99@tcp1" % t.b_ip.split(".")[1], "--timeout", "1"), 1, "manage", "ping", 110,
                   "no answer within 1 s")
        self.stop_server(b)

    def test_routes_and_tunables_change_through_lnetrctl(self):
        b = self.server("b")
        t = self.topo
        self.assertEqual(self.cli("route", "add", "--net", "tcp5", "--gateway", t.b_nid, "--hop", "2",
                                  "--priority", "3", "--health_sensitivity", "250"), (0, "", ""))
        r = self.routes()[("tcp5", t.b_nid)]
        self.assertEqual((r["hop"], r["priority"], r["health_sensitivity"]), (2, 3, 250))
        self.assertEqual(self.yaml("route", "show")["route"], [{"net": "tcp5", "gateway": t.b_nid}])
        self.assertEqual(self.yaml("route", "show", "--net", "tcp9")["route"], [])
        gw = self.yaml("gateway", "show")["gateway"][0]
        self.assertEqual(gw["nid"], t.b_nid)
        # A NID range adds (and deletes) one route per gateway.
        prefix = t.b_ip.rsplit(".", 1)[0]
        self.assertEqual(self.cli("route", "add", "--net", "tcp6", "--gateway", prefix + ".[10-11]@tcp1")[0], 0)
        self.assertEqual({k for k in self.routes() if k[0] == "tcp6"},
                         {("tcp6", prefix + ".10@tcp1"), ("tcp6", prefix + ".11@tcp1")})
        self.error(("route", "add", "--net", "tcp5", "--gateway", t.b_nid), 1, "add", "route", 17, "exists")
        self.assertEqual(self.cli("route", "del", "--net", "tcp6", "--gateway", prefix + ".[10-11]@tcp1")[0], 0)
        self.assertEqual(set(self.routes()), {("tcp5", t.b_nid)})
        self.error(("route", "del", "--net", "tcp6", "--gateway", t.b_nid), 1, "del", "route", 2, "no route")

        for name, value in (("health_sensitivity", 200), ("alive_router_check_interval", 7),
                            ("router_ping_timeout", 4), ("drop_asym_route", 1), ("drop_asym_route", 0)):
            self.assertEqual(self.cli("set", name, str(value)), (0, "", ""))
            self.assertEqual(self.yaml("global", "show")["global"][name], value)
        # Router buffers grow at once (more memory for small ones: 128 per
        # CPT), with Linux's warning below its recommended minimum.
        rc, out, err = self.cli("set", "small_buffers", "512")
        self.assertEqual((rc, out), (0, ""), err)
        self.assertIn("lnetrctl: warning: 256 small buffers per CPT is below the 4096 recommended", err)
        shown = self.yaml("routing", "show")
        self.assertEqual(shown["buffers"], {"tiny": 128, "small": 512, "large": 32})
        cpts = [list(c.values())[0] for c in shown["routing"][:-1]]
        self.assertEqual([(c["small"]["nbuffers"], c["small"]["credits"]) for c in cpts], [(256, 256)] * 2, shown)
        self.assertEqual(self.yaml("export")["buffers"]["small"], 512)
        self.assertEqual(self.cli("set", "routing", "0")[0], 0)
        self.assertEqual(self.yaml("routing", "show")["routing"][2]["enable"], 2)  # draining
        # As a kernel router: not enabled again until it has stopped.
        self.error(("set", "routing", "1"), 1, "manage", "routing", 16, "routing is stopping")
        self.stop_server(b)

    def test_router_buffers_resized_under_load(self):
        """lnetctl set large_buffers while 1 MiB PUTs, 32 in flight, flow
        through the router (A's on CPT 0, B's on CPT 1): the pools grow at once, shrink as their buffers
        come back (as Linux's do), no message is lost or damaged, and at
        rest every credit and buffer is home."""
        def large():
            shown = self.yaml("routing", "show")
            return [list(c.values())[0]["large"] for c in shown["routing"][:-1]]

        self.assertEqual([p["nbuffers"] for p in large()], [16, 16])
        b = self.server("b")
        done = {}

        def load():
            done["res"], done["cp"] = brw(self.topo.host("a"), self.topo.a_nid, self.peer_options("a"),
                                          self.topo.b_nid, "write", 1048576, 32, 8,
                                          os.path.join(self.dir, "load.json"))
        t = threading.Thread(target=load)
        t.start()
        time.sleep(2)
        rc, out, err = self.cli("set", "large_buffers", "96")
        self.assertEqual((rc, out), (0, ""), err)
        self.assertIn("48 large buffers per CPT is below the 256 recommended", err)
        self.assertEqual([p["nbuffers"] for p in large()], [48, 48])  # at once
        time.sleep(2)
        self.assertEqual(self.cli("set", "large_buffers", "8")[:2], (0, ""))
        end = time.monotonic() + 20
        while [p["nbuffers"] for p in large()] != [4, 4] and time.monotonic() < end:
            time.sleep(0.2)
        # (CPT 0's given up as they came back, CPT 1's idle ones at once.)
        self.assertEqual([p["nbuffers"] for p in large()], [4, 4])
        t.join()
        res, cp = done["res"], done["cp"]
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertEqual(res["errors"], 0, res)
        self.assertGreater(res["ops"], 0, res)
        rc, stats = self.stop_server(b)
        self.assertEqual(rc, 0, "the server found corrupted data: %s" % stats)
        self.assert_router_idle()
        self.assertEqual([(p["nbuffers"], p["credits"]) for p in large()], [(4, 4), (4, 4)])
        self.assertEqual(self.yaml("export")["buffers"]["large"], 8)

    def test_read_only_socket_serves_shows_and_refuses_changes(self):
        ro = self.router.api_sock[:-len(".sock")] + "-ro.sock"
        os.chmod(self.dir, 0o755)  # let an unprivileged user reach the sockets
        # Mode 0660: the read-only socket for its group (nogroup here, which
        # uid 65534 below runs as), the management socket for root's.
        self.assertEqual((os.stat(ro).st_mode & 0o777, os.stat(ro).st_gid), (0o660, 65534))
        self.assertEqual(os.stat(self.router.api_sock).st_mode & 0o777, 0o660)

        def as_nobody(socket_path, *args):
            cp = self.topo.host("r").run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                          lnetrctl_binary(), "--socket", socket_path] + list(args))
            return cp.returncode, cp.stdout, cp.stderr

        # A monitoring user may look, through the read-only socket ...
        rc, out, err = as_nobody(ro, "route", "show", "-v")
        self.assertEqual(rc, 0, err)
        before = parse_yaml(out)["route"]
        for verb in (("net", "show"), ("global", "show"), ("stats", "show"), ("export",), ("fault", "show"),
                     ("capture", "show")):
            rc, out, err = as_nobody(ro, *verb)
            self.assertEqual(rc, 0, "%s: %s" % (verb, err))
        # ... but change nothing there, and not reach the management socket.
        for verb in (("route", "add", "--net", "tcp5", "--gateway", self.topo.b_nid), ("set", "routing", "0"),
                     ("set", "drop_asym_route", "1"), ("stats", "reset"), ("ping", self.topo.b_nid),
                     ("fault", "add", "--kind", "drop", "--rate", "1"), ("fault", "del", "--all"),
                     ("capture", "start", "/tmp/lnetr-ro-%d.pcapng" % os.getpid()), ("capture", "stop")):
            rc, out, err = as_nobody(ro, *verb)
            self.assertNotEqual(rc, 0, verb)
            self.assertIn("errno: -13", err, verb)
            self.assertIn("read-only socket", err, verb)
        if os.path.exists("/tmp/lnetr-ro-%d.pcapng" % os.getpid()):
            os.unlink("/tmp/lnetr-ro-%d.pcapng" % os.getpid())
        rc, out, err = as_nobody(self.router.api_sock, "route", "show")
        self.assertNotEqual(rc, 0)
        self.assertIn("Permission denied", err)
        # Root, on the read-only socket, is refused changes all the same.
        cp = self.topo.host("r").run([lnetrctl_binary(), "--socket", ro, "route", "add", "--net", "tcp5",
                                      "--gateway", self.topo.b_nid])
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("read-only socket", cp.stderr)
        self.assertEqual(self.yaml("route", "show", "-v")["route"], before)
        self.assertEqual(self.yaml("routing", "show")["routing"][2]["enable"], 1)

    def test_every_tunable_of_an_export_is_applied_or_named(self):
        # A kernel export with every global tunable off its default, an NI's
        # lnd tunables and CPT list, and a peer: each is applied, or named
        # in a warning, never taken silently.
        t = self.topo
        text = """net:
    - net type: tcp1
      local NI(s):
        - interfaces:
              0: %s
          lnd tunables:
              conns_per_peer: 4
              timeout: 20
              tos: 104
          CPT: "[0]"
peer:
    - primary nid: %s
      Multi-Rail: True
      peer ni:
        - nid: %s
global:
    numa_range: 1
    max_interfaces: 200
    discovery: 1
    drop_asym_route: 1
    retry_count: 3
    transaction_timeout: 60
    health_sensitivity: 250
    recovery_interval: 1
    router_sensitivity: 50
    lnd_timeout: 14
    response_tracking: 1
    recovery_limit: 30
    max_recovery_ping_interval: 60
""" % (t.if_rb, t.b_nid, t.b_nid)
        path = os.path.join(self.dir, "tunables.yaml")
        with open(path, "w") as f:
            f.write(text)
        rc, out, err = self.cli("import", path)
        self.assertEqual(rc, 0, err)
        # Every global key docs/configuration.md says lnetr does not apply
        # is named, and `global show` prints the default the doc gives.
        warned = {k: int(d) for k, (d, eff) in settings_reference("global").items()
                  if eff == "warned unless the default" and k != "max_intf"}
        self.assertEqual(set(warned), {"numa_range", "max_interfaces", "retry_count", "router_sensitivity",
                                       "response_tracking", "recovery_limit", "max_recovery_ping_interval"})
        for key in warned:
            self.assertRegex(err, r"global\.%s: %s \d+ is not in force: " % (key, key))
        for named in ("transaction_timeout 60 is not applied at run time",
                      "CPT list is not in force", "configured peers are not used",
                      "tunables are not changed by an import"):
            self.assertIn(named, err)
        # Applied: drop_asym_route and health_sensitivity (recovery_interval
        # is deprecated and ignored, as by the kernel; lnd_timeout is derived).
        g = self.yaml("global", "show")["global"]
        self.assertEqual((g["drop_asym_route"], g["health_sensitivity"]), (1, 250), g)
        self.assertEqual(self.status()["drop_asym_route"], 1)
        # Shown: what is in force, not what the file asked for.
        # (transaction_timeout is in force as the dataplane read it at start.)
        self.assertEqual({k: g[k] for k in warned}, warned, g)
        self.assertEqual((g["transaction_timeout"], g["lnd_timeout"]), (150, 49), g)
        ni = self.yaml("net", "show", "--net", "tcp1", "-v")["net"][0]["local NI(s)"][0]
        self.assertEqual(ni["lnd tunables"], {"conns_per_peer": 1, "timeout": 10, "tos": -1}, ni)
        self.assertEqual(ni["CPT"], "[0,1]")

    def test_export_then_import_on_a_fresh_router(self):
        t = self.topo
        for net, prio in (("tcp5", 1), ("tcp6", 2)):
            self.assertEqual(self.cli("route", "add", "--net", net, "--gateway", t.b_nid, "--priority", str(prio),
                                      "--hop", "1")[0], 0)
        full = self.yaml("export")
        self.assertEqual([n["net type"] for n in full["net"]], ["tcp", "tcp1"])
        self.assertIn("statistics", full["net"][0]["local NI(s)"][0])
        self.assertIn("state", full["route"][0])
        path = os.path.join(self.dir, "backup.yaml")
        self.assertEqual(self.cli("export", "--backup", path)[0], 0)
        with open(path) as f:
            backup = parse_yaml(f.read())
        self.assertEqual(backup["routing"], {"enable": 1})
        self.assertNotIn("state", backup["route"][0])
        before = self.routes()

        # A fresh router from the same file knows none of those routes ...
        self.ctl.stop(signal.SIGTERM)
        self.router.proc.stop(signal.SIGTERM)
        err = self.router.start(self.procs)
        self.assertIsNone(err, err)
        self.ctl, err = self.router.start_control(self.procs)
        self.assertIsNone(err, err)
        self.assertEqual(self.routes(), {})
        # ... until the export is imported (the full one, state and all, too).
        self.assertEqual(self.cli("import", path), (0, "", ""))
        self.assertEqual({k: (r["hop"], r["priority"]) for k, r in self.routes().items()},
                         {k: (r["hop"], r["priority"]) for k, r in before.items()})
        # Importing it again: every route exists already, each reported.
        rc, out, err = self.cli("import", path)
        self.assertEqual(rc, 1, out + err)
        failed = parse_yaml(err)["manage"]
        self.assertEqual(len(failed), 2, err)
        self.assertEqual({f["import"]["errno"] for f in failed}, {-17}, err)
        rc, out, err = self.cli("import", "--del", stdin=json.dumps(full))
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(self.routes(), {})
        self.error(("import", os.path.join(self.dir, "missing.yaml")), 1, "manage", "import", 2, "cannot read")

    def test_backup_has_every_key_of_lnetctls_and_imports_back_unchanged(self):
        # Every key a kernel router's `lnetctl export --backup` writes is in
        # ours, with the value in force, but `peer` (lnetr has no configured
        # peers: it learns them). So importing ours back changes nothing and
        # says nothing, and exporting again gives the same document.
        vectors = os.environ.get("LNETR_VECTORS") or os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                                 "shared", "vectors")
        with open(os.path.join(vectors, "v4-lnetctl", "router-run-R-export-backup.yaml")) as f:
            linux = yaml.safe_load(f)  # (lnetctl's indentation is beyond parse_yaml)

        def keys(v, at=""):
            out = set()
            if isinstance(v, dict):
                for k, x in v.items():
                    out |= {at + "/" + str(k)} | keys(x, at + "/" + str(k))
            elif isinstance(v, list):
                for x in v:
                    out |= keys(x, at + "[]")
            return out

        path = os.path.join(self.dir, "backup.yaml")
        self.assertEqual(self.cli("export", "--backup", path)[0], 0)
        with open(path) as f:
            ours = yaml.safe_load(f)
        self.assertEqual({k for k in keys(linux) - keys(ours) if not k.startswith("/peer")}, set(), ours)
        self.assertEqual(self.cli("import", path)[:3:2], (0, ""))
        rc, out, err = self.cli("export", "--backup")
        self.assertEqual((rc, yaml.safe_load(out)), (0, ours), err)

    def test_import_of_files_lnetctl_wrote(self):
        vectors = os.environ.get("LNETR_VECTORS") or os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                                 "shared", "vectors")
        # A kernel router's export: applies, its router buffers too (below
        # Linux's recommended minimum per CPT: warned about, as Linux does).
        rc, out, err = self.cli("import", os.path.join(vectors, "v4-lnetctl", "router-run-R-export.yaml"))
        self.assertEqual(rc, 0, out + err)
        self.assertIn("router-run-R-export.yaml:315:12: buffers.large: 64 large buffers per CPT is below the 256 "
                      "recommended", err)
        self.assertEqual(self.yaml("routing", "show")["buffers"], {"tiny": 512, "small": 1024, "large": 128})
        # A node's export with routes: those through gateways on tcp are
        # added as written; the one through tcp5 (not a net here) is an error.
        rc, out, err = self.cli("import", os.path.join(vectors, "v4-lnetctl-import", "Q-after-export.yaml"))
        self.assertEqual(rc, 1, out + err)
        failed = parse_yaml(err[err.index("manage:"):])["manage"]  # after the warnings
        self.assertEqual([(f["import"]["route"], f["import"]["errno"]) for f in failed],
                         [("tcp7 via 10.201.1.52@tcp5", -113)], err)
        routes = self.routes()
        self.assertEqual((routes[("tcp8", "10.201.1.50@tcp")]["hop"], routes[("tcp8", "10.201.1.50@tcp")]["priority"]),
                         (3, 2))
        self.assertEqual(len(routes), 4)

    def test_top_shows_rates_per_net_and_peer(self):
        b = self.server("b")
        t = self.topo
        json_path = os.path.join(self.dir, "load.json")
        load = self.procs.start(self.peer_argv(t.a_nid, ["brw", t.b_nid, "--op", "write", "--size", "4096",
                                                         "--concurrency", "4", "--duration", "4", "--json",
                                                         json_path], self.peer_options("a")), host=t.host("a"))
        time.sleep(1)
        rc, out, err = self.cli("top", "--count", "2", "--interval", "0.5")
        load.wait(timeout=60)
        self.assertEqual(rc, 0, err)
        frames = [f for f in out.split("lnetrctl top:") if f.strip()]
        self.assertEqual(len(frames), 2, out)
        for frame in frames:
            lines = frame.splitlines()
            fwd = next(l for l in lines if l.startswith("forwarded"))
            self.assertGreater(float(fwd.split()[1]), 0, frame)
            nets = {l.split()[0]: l.split() for l in lines if l.startswith(("tcp ", "tcp1 "))}
            self.assertGreater(float(nets["tcp"][2]), 0, frame)  # received from a
            self.assertGreater(float(nets["tcp1"][1]), 0, frame)  # sent to b
            self.assertTrue(any(l.startswith(t.a_nid) for l in lines), frame)
        self.stop_server(b)


class Faults(LnetrctlTestCase):
    """LNet fault injection through lnetrctl (lctl net_drop_add /
    net_delay_add in spirit): each rule acts on the messages it names, is
    counted, and leaves the router at rest; what the peers see is what a
    lost or late message does to them."""

    def one(self, op, size=4096, timeout=3):
        """One PUT or GET from A to B; (rc, seconds, output)."""
        t0 = time.monotonic()
        rc, doc, cp = self.peer("a", [op, self.topo.b_nid, "--size", str(size), "--count", "1",
                                      "--timeout", str(timeout)])
        return rc, time.monotonic() - t0, cp.stdout + cp.stderr

    def rule(self, *args):
        rc, out, err = self.cli("fault", "add", *args)
        self.assertEqual(rc, 0, out + err)
        return parse_yaml(out)["fault"]["id"]

    def shown(self):
        return {r["id"]: r for r in self.yaml("fault", "show")["fault"]["faults"]}

    def test_the_documented_commands(self):
        """docs/operations.md's fault commands, run as written (the rules
        name NIDs this router never sees)."""
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "vm"))
        from appliance import doc_blocks, shell_commands  # noqa: E402
        commands = shell_commands(doc_blocks(os.path.join(here, "..", "..", "docs", "operations.md"))["fault"])
        self.assertGreaterEqual(len(commands), 7, commands)
        kinds = []
        for cmd in commands:
            argv = shlex.split(cmd)
            self.assertEqual(argv[0], "lnetrctl")
            rc, out, err = self.cli(*argv[1:])
            self.assertEqual(rc, 0, "%s: %s%s" % (cmd, out, err))
            if argv[1:3] == ["fault", "show"]:
                kinds = [r["kind"] for r in parse_yaml(out)["fault"]["faults"]]
        self.assertEqual(kinds, ["drop", "delay", "corrupt"])  # what the block added, in order
        self.assertEqual(self.shown(), {})  # ... and deleted

    def test_dropped_delayed_and_corrupted_messages(self):
        a, b = self.topo.a_nid, self.topo.b_nid
        server = self.server("b")
        self.assertEqual(self.one("put")[0], 0)  # the path works
        self.assertEqual(self.shown(), {})  # no rule: nothing is checked
        # A lost PUT: A's request times out, nothing reaches B; counted as
        # dropped by the rule and as a `fault` drop.
        rid = self.rule("--kind", "drop", "--source", a, "--dest", b, "--type", "PUT", "--rate", "1")
        rc, secs, out = self.one("put")
        self.assertNotEqual(rc, 0, out)
        r = self.shown()[rid]
        self.assertEqual((r["kind"], r["matched"]["PUT"], r["dropped"]), ("drop", 1, 1), r)
        self.assertEqual(self.status()["drops"]["fault"], 1)
        self.assert_router_idle()
        self.assertEqual(self.cli("fault", "del", "--id", str(rid))[0], 0)
        # A lost ACK (B got the PUT) and a lost REPLY: the requester times out.
        for op, kind in (("put", "ACK"), ("get", "REPLY")):
            rid = self.rule("--kind", "drop", "--source", b, "--dest", a, "--type", kind, "--rate", "1")
            rc, secs, out = self.one(op)
            self.assertNotEqual(rc, 0, "%s with its %s dropped: %s" % (op, kind, out))
            self.assertEqual(self.shown()[rid]["dropped"], 1)
            self.assert_router_idle()
            self.assertEqual(self.cli("fault", "del", "--id", str(rid))[0], 0)
        # A late GET: held 2 s by the router, then delivered and answered.
        rid = self.rule("--kind", "delay", "--dest", b, "--type", "GET", "--rate", "1", "--latency", "2")
        rc, secs, out = self.one("get", 65536, timeout=10)
        self.assertEqual(rc, 0, out)
        self.assertGreaterEqual(secs, 2.0)
        self.assertEqual(self.shown()[rid]["delayed"], 1)
        self.assertEqual(self.cli("fault", "del", "--all")[0], 0)
        # A corrupted PUT: delivered, and B's check of the pattern finds it.
        self.rule("--kind", "corrupt", "--dest", b, "--type", "PUT", "--rate", "1")
        self.one("put")
        rc, stats = self.stop_server(server)
        self.assertNotEqual(rc, 0, "the server should have found the corrupted byte: %s" % stats)
        self.assertEqual(self.cli("fault", "reset")[0], 0)
        self.assertEqual(list(self.shown().values())[0]["corrupted"], 0)
        self.assertEqual(self.cli("fault", "del", "--all")[0], 0)
        self.assert_router_idle()
        # Refused by name.
        rc, out, err = self.cli("fault", "add", "--kind", "drop", "--source", a)
        self.assertNotEqual(rc, 0)
        self.assertIn("exactly one of rate and interval", err)


class Nets(LnetrctlTestCase):

    def third_net(self):
        """Namespace C on a third link of the router: (host, C's NID, the
        router's interface and NID there)."""
        t = self.topo
        n = int(t.a_ip.split(".")[1])
        ns = t.tag + "c"
        subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ip("netns", "add", ns)
        self.addCleanup(subprocess.run, ["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
        ip("-n", ns, "link", "set", "lo", "up")
        if_rc = "rc%d" % (os.getpid() % 100000)
        c_ip, rc_ip = "10.%d.4.2" % n, "10.%d.4.1" % n
        t._veth(ns, "eth0", c_ip, t.ns["r"], if_rc, rc_ip)
        from lnetr_test import Host
        return Host.netns(ns), c_ip + "@tcp2", if_rc, rc_ip + "@tcp2"

    def test_nets_added_and_deleted_under_load_survive_save_and_restart(self):
        """docs/operations.md's net commands, run as written during 1 MiB
        writes: tcp2 added under load then carrying verified traffic, tcp1
        deleted under load with every credit, buffer and descriptor back
        and its peer gone, and both kept by save across a restart."""
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "vm"))
        from appliance import doc_blocks, shell_commands  # noqa: E402
        c_host, c_nid, if_rc, rc_nid = self.third_net()
        commands = [shlex.split(c.replace("eth2", if_rc))
                    for c in shell_commands(doc_blocks(os.path.join(here, "..", "..", "docs", "operations.md"))["nets"])]
        self.assertEqual([c[:3] for c in commands], [["lnetrctl", "net", "add"], ["lnetrctl", "net", "show"],
                                                    ["lnetrctl", "net", "del"], ["lnetrctl", "save"][:3]])
        a_opts = ["--route", "tcp1=%s" % self.topo.ra_nid, "--route", "tcp2=%s" % self.topo.ra_nid,
                  "--router-check-interval", "1"]
        c_opts = ["--route", "tcp=%s" % rc_nid, "--router-check-interval", "1"]
        b = self.server("b")

        def under_load(target, command):
            done = {}

            def load():
                done["res"], done["cp"] = brw(self.topo.host("a"), self.topo.a_nid, a_opts, target, "write",
                                              1048576, 32, 6, os.path.join(self.dir, "load.json"))
            t = threading.Thread(target=load)
            t.start()
            time.sleep(2)
            rc, out, err = self.cli(*command[1:])
            t.join()
            self.assertEqual((rc, out), (0, ""), "%s: %s" % (command, err))
            return done["res"], done["cp"]

        # Added while A writes to B: the writes go on untouched.
        res, cp = under_load(self.topo.b_nid, commands[0])
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertEqual(res["errors"], 0, res)
        shown = self.yaml(*commands[1][1:])["net"]
        self.assertEqual([(n["net type"], [ni["nid"] for ni in n["local NI(s)"]]) for n in shown], [("tcp2", [rc_nid])])
        self.assertEqual(shown[0]["local NI(s)"][0]["status"], "up")
        # ... and carries verified writes and reads between A and C.
        c = self.start_server(c_nid, c_opts, host=c_host)
        for op in ("write", "read"):
            res, cp = brw(self.topo.host("a"), self.topo.a_nid, a_opts, c_nid, op, 1048576, 8, 2,
                          os.path.join(self.dir, "c.json"))
            self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
            self.assertEqual(res["errors"], 0, res)
            self.assertGreater(res["ops"], 0, res)
        # Deleted while A writes to B through it: what was in flight is
        # dropped by name, nothing is leaked, and tcp2 goes on.
        # (Messages queued for B's NI are dropped as ni_deleted: the unit
        # tests count them.  Here kernel sockets take what is written at
        # once, and A stops sending to tcp1 as soon as the router's push of
        # its NI list reaches it, so few or none are.)
        res, cp = under_load(self.topo.b_nid, commands[2])
        self.assertGreater(res["errors"], 0, res)  # (B's net is gone)
        st = self.assert_router_idle()
        self.assertEqual(sorted(ni["nid"] for ni in st["nis"]), sorted([self.topo.ra_nid, rc_nid]))
        self.assertNotIn(self.topo.b_nid, [p["nid"] for p in st["peers"]])
        res, cp = brw(self.topo.host("a"), self.topo.a_nid, a_opts, c_nid, "write", 1048576, 8, 2,
                      os.path.join(self.dir, "c.json"))
        self.assertEqual((cp.returncode, res["errors"]), (0, 0), cp.stdout + cp.stderr)
        self.assertEqual(self.stop_server(c)[0], 0, "C found corrupted data")
        self.stop_server(b)
        # Saved, then a restarted router serves tcp and tcp2.
        rc, out, err = self.cli(*commands[3][1:])
        self.assertEqual(rc, 0, err)
        with open(self.router.config) as f:
            saved = parse_yaml(f.read())
        self.assertEqual([n["net type"] for n in saved["net"]], ["tcp", "tcp2"])
        self.assertEqual(saved["net"][1]["local NI(s)"][0]["interfaces"], {"0": if_rc})
        self.assertEqual(saved["net"][0]["local NI(s)"][0]["tunables"]["credits"], 64)  # as the file had it
        self.ctl.stop()
        self.router.proc.stop()
        self.assertIsNone(self.router.start(self.procs))
        self.ctl, err = self.router.start_control(self.procs)
        self.assertIsNone(err)
        nets = self.yaml("net", "show")["net"]
        self.assertEqual([(n["net type"], [ni["nid"] for ni in n["local NI(s)"]]) for n in nets],
                         [("tcp", [self.topo.ra_nid]), ("tcp2", [rc_nid])])

    def router_conns_to_b(self):
        """The established socklnd connections between B and the router
        (made by either side)."""
        rb_ip = self.topo.rb_nid.split("@")[0]
        cp = self.topo.host("b").run(["ss", "-Htn", "state", "established"])
        return sum(1 for line in cp.stdout.splitlines() if line.split()[-1].startswith(rb_ip + ":"))

    def test_net_set_changes_what_the_lnd_does_and_keeps_it(self):
        """docs/operations.md's net set commands, run as written: the
        router connects to a peer with the new conns_per_peer, a silent
        connection closes after the new LND timeout, and save and a
        dataplane restart keep both."""
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "vm"))
        from appliance import doc_blocks, shell_commands  # noqa: E402
        commands = [shlex.split(c) for c in
                    shell_commands(doc_blocks(os.path.join(here, "..", "..", "docs", "operations.md"))["net-set"])]
        self.assertEqual([c[:3] for c in commands], [["lnetrctl", "net", "set"]] * 2)
        for c in commands:
            rc, out, err = self.cli(*c[1:])
            self.assertEqual((rc, out), (0, ""), "%s: %s" % (c, err))
        nis = {ni["nid"]: ni for n in self.yaml("net", "show", "-v")["net"] for ni in n["local NI(s)"]}
        self.assertEqual(nis[self.topo.rb_nid]["lnd tunables"], {"conns_per_peer": 3, "timeout": 3, "tos": -1})
        self.assertEqual(nis[self.topo.ra_nid]["lnd tunables"], {"conns_per_peer": 1, "timeout": 3, "tos": -1})
        # The router and B connect with three bulk connections each way
        # beside the control one (whichever connects, the other refuses
        # more than its own conns_per_peer: B is given 3 too).
        b = self.start_server(self.topo.b_nid, self.peer_options("b") + ["--conns-per-peer", "3"],
                              host=self.topo.host("b"))
        rc, doc, cp = self.peer("a", ["put", self.topo.b_nid, "--size", "65536", "--count", "4"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        end = time.monotonic() + 10
        while time.monotonic() < end and self.router_conns_to_b() < 7:
            time.sleep(0.2)
        self.assertEqual(self.router_conns_to_b(), 7)
        self.stop_server(b)
        # A connection that goes silent mid-header closes after 3 s, not
        # the file's 10.
        probe = ("import sys, time\nfrom lnetr_test import Msg, SocklndConn, PUT, nid4\n"
                 "c = SocklndConn(sys.argv[1], sys.argv[2])\n"
                 "c.sock.sendall(Msg(PUT, nid4(sys.argv[2]), nid4(sys.argv[1]), payload=b'x').pack()[:40])\n"
                 "t = time.monotonic()\nok = c.closed_by_peer(timeout=20)\nprint(ok, time.monotonic() - t)\n")
        cp = self.topo.host("a").run(["env", "PYTHONPATH=" + here, sys.executable, "-c", probe, self.topo.a_nid,
                                      self.topo.ra_nid], timeout=60)
        closed, took = cp.stdout.split()
        self.assertEqual(closed, "True", cp.stdout + cp.stderr)
        self.assertGreater(float(took), 2, cp.stdout)
        self.assertLess(float(took), 8, cp.stdout)
        # Kept by save, and given again to a restarted dataplane.
        rc, out, err = self.cli("save")
        self.assertEqual(rc, 0, err)
        with open(self.router.config) as f:
            saved = parse_yaml(f.read())
        lnd = {n["net type"]: n["local NI(s)"][0]["lnd tunables"] for n in saved["net"]}
        self.assertEqual((lnd["tcp1"]["conns_per_peer"], lnd["tcp1"]["timeout"], lnd["tcp"]["timeout"]), (3, 3, 3), lnd)
        # The saved file alone (no lnetr-control to give anything again).
        self.ctl.stop()
        self.router.proc.stop()
        self.assertIsNone(self.router.start(self.procs))
        lnd = {ni["nid"]: ni["lnd_tunables"] for ni in self.router.status()["nis"]}
        self.assertEqual((lnd[self.topo.rb_nid]["conns_per_peer"], lnd[self.topo.rb_nid]["timeout"],
                          lnd[self.topo.ra_nid]["timeout"]), (3, 3, 3), lnd)

    def test_net_set_refusals_name_what_is_wrong(self):
        self.error(("net", "set", "--net", "tcp1", "--health", "500"), 1, "manage", "net", 95,
                   "lnetr keeps no health value of its own NIs")
        self.error(("net", "set", "--lnd-timeout", "5"), 1, "manage", "net", 22, "give a net of the LND")
        self.error(("net", "set", "--conns-per-peer", "2"), 1, "manage", "net", 22, "give the NI (nid), its net")
        self.error(("net", "set", "--net", "tcp7", "--conns-per-peer", "2"), 1, "manage", "net", 2, "no NI on net tcp7")
        rc, out, err = self.cli("net", "set", "--net", "tcp1", "--conns-per-peer", "200")
        self.assertEqual(rc, 2, out + err)
        self.assertIn("200", err)
        # A restarted dataplane alone is given what was set, not its file's.
        self.assertEqual(self.cli("net", "set", "--nid", self.topo.rb_nid, "--conns-per-peer", "2")[0], 0)
        self.router.proc.stop()
        self.assertIsNone(self.router.start(self.procs))
        end = time.monotonic() + 20
        cpp = None
        while time.monotonic() < end and cpp != 2:
            cpp = {ni["nid"]: ni["lnd_tunables"]["conns_per_peer"] for ni in self.router.status()["nis"]}.get(
                self.topo.rb_nid)
            time.sleep(0.2)
        self.assertEqual(cpp, 2)

    def test_refusals_name_what_is_wrong(self):
        self.error(("net", "add", "--net", "tcp5", "--if", "nosuch0"), 1, "add", "net", 22,
                   "interface nosuch0 does not exist")
        self.error(("net", "add", "--net", "tcp1", "--if", self.topo.if_rb), 1, "add", "net", 22,
                   "already has an NI on net tcp1")
        self.error(("net", "del", "--net", "tcp9"), 1, "del", "net", 2, "no NI on net tcp9")
        # An o2ib NI needs an RDMA device behind its address (this machine
        # has none): refused by name, nothing added.
        self.error(("net", "add", "--net", "o2ib5", "--if", self.topo.if_ra), 1, "add", "net", 99,
                   "no RDMA")
        self.assertNotIn("o2ib5", [n["net type"] for n in self.yaml("net", "show")["net"]])
        # A restarted dataplane alone is brought to what is in force.
        self.assertEqual(self.cli("net", "del", "--net", "tcp1")[0], 0)
        self.router.proc.stop()
        self.assertIsNone(self.router.start(self.procs))
        end = time.monotonic() + 20
        while time.monotonic() < end and self.topo.rb_nid in [ni["nid"] for ni in self.router.status()["nis"]]:
            time.sleep(0.2)
        self.assertEqual([ni["nid"] for ni in self.router.status()["nis"]], [self.topo.ra_nid])


class Errors(LnetrctlTestCase):

    def test_bad_arguments_say_what_was_expected(self):
        cases = [
            (("route", "add", "--net", "tcp5"), "--gateway is required"),
            (("route", "add", "--net", "tcp!", "--gateway", "10.0.0.1@tcp"), "expected a net such as"),
            (("route", "add", "--net", "tcp5", "--gateway", "nid"), "expected a NID or a NID range"),
            (("route", "show", "--hop", "300"), "300"),
            (("route",), "needs an action"),
            (("frobnicate",), "frobnicate"),
            (("set", "routing", "2"), "expected 0 (disable) or 1 (enable)"),
            (("ping",), "NID is required"),
        ]
        for args, needle in cases:
            rc, out, err = self.cli(*args)
            self.assertEqual(rc, 2, (args, out, err))
            self.assertIn(needle, err, args)
        rc, out, err = self.cli("route", "add", "--help")
        self.assertEqual(rc, 0, err)
        self.assertIn("--health_sensitivity", out)
        self.assertEqual(self.json("route", "show")["route"], [])  # nothing changed

    def test_a_stopped_control_process_is_a_clear_error(self):
        self.ctl.stop(signal.SIGTERM)
        self.error(("route", "show"), 1, "show", "route", 2, "is it running?")
        self.error(("set", "routing", "1"), 1, "manage", "routing", 2, "cannot reach lnetr-control")


class System(LnetrctlTestCase):
    """The system verbs on a router installed from the package: what runs
    and why the dataplane is down, the drain before a reboot, routing held
    by the appliance's updates; no slots to update."""

    check = 30  # the router's alive_router_check_interval: a drain need not wait for it

    def test_drain_ends_once_the_peers_using_the_router_have_seen_it(self):
        b = self.server("b")  # checks its gateway (this router) every second
        rc, doc, cp = self.peer("a", ["put", self.topo.b_nid, "--size", "65536", "--count", "20"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        a = self.server("a")  # a lives on, and checks its gateway too
        system = self.yaml("system", "show")["system"]
        self.assertRegex(system["lnetr"], r"^\d+\.\d+\.\d+$")
        self.assertEqual(system["control"], "attached")
        dp = system["dataplane"]
        self.assertEqual((dp["state"], dp["routing"], dp["nis"], dp["nis_up"], dp["buffers_held"]),
                         ("up", "enabled", 2, 2, 0), system)
        self.assertGreaterEqual(dp["forwarded"], 40)
        self.assertNotIn("last_stop", dp)
        t = time.monotonic()
        rc, out, err = self.cli("system", "drain", "--timeout", "60", "--quiet", "2")
        took = time.monotonic() - t
        self.assertEqual(rc, 0, out + err)
        self.assertIn("drain: routing disabled", out)
        self.assertIn("every peer using this router has seen routing disabled", out)
        # Well before the router's own check interval: b's next check saw it.
        self.assertLess(took, 15, out)
        dp = self.yaml("system", "show")["system"]["dataplane"]
        self.assertEqual((dp["routing"], dp["peers_unaware"], dp["buffers_held"]), ("stopping", 0, 0), dp)
        # Draining again: nothing to do.
        rc, out, err = self.cli("system", "drain", "--timeout", "60", "--quiet", "1")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("routing was already disabled", out)
        self.stop_server(a)
        self.stop_server(b)

    def test_drain_gives_up_after_its_timeout_while_a_peer_has_not_seen_it(self):
        # a pings the router once (it uses it), then stays silent: it cannot
        # have seen routing disabled; the router's check interval is longer
        # than the drain's timeout.
        rc, doc, cp = self.peer("a", ["ping", self.topo.ra_nid, "--timeout", "5"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        rc, out, err = self.cli("system", "drain", "--timeout", "4", "--quiet", "1")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("1 peer(s) yet to see routing disabled", out)
        self.assertIn("clients have not moved off after 4 s", err)

    def test_the_appliance_verbs_need_the_image(self):
        for verb in (("system", "versions"), ("system", "update", "x.update"), ("system", "rollback"),
                     ("system", "reboot")):
            self.error(verb, 1, "manage", "system", 95, "this is not the lnetr appliance image")
        rc, out, err = self.cli("system", "update")
        self.assertEqual(rc, 2, err)
        self.assertIn("SOURCE is required", err)

    def test_a_dataplane_down_says_why_everywhere(self):
        # What the unit's ExecStopPost writes beside the control socket.
        with open(os.path.join(os.path.dirname(self.router.sock), "dataplane.exit"), "w") as f:
            f.write("time=2026-11-27T16:30:05Z\nresult=exit-code\ncode=exited\nstatus=79\nrestarts=0\n"
                    "message=lnetr-dataplane: this CPU lacks ssse3 sse4_1 sse4_2 popcnt, which this build needs\n")
        self.router.proc.stop(signal.SIGTERM)
        dp = self.yaml("system", "show")["system"]["dataplane"]
        self.assertEqual(dp["state"], "down")
        self.assertIn("the dataplane does not answer on " + self.router.sock, dp["reason"])
        self.assertEqual(dp["last_stop"], "stopped with exit status 79 at 2026-11-27T16:30:05Z: lnetr-dataplane: "
                                          "this CPU lacks ssse3 sse4_1 sse4_2 popcnt, which this build needs")
        self.error(("net", "show"), 1, "show", "net", 112,
                   "(it stopped with exit status 79 at 2026-11-27T16:30:05Z: lnetr-dataplane: this CPU lacks")
        rc, out, err = self.cli(stdin="exit\n")
        self.assertEqual(rc, 0, err)
        self.assertIn("lnetrctl: warning: the dataplane is down: the dataplane does not answer", err)
        self.assertIn("lnetrctl: it stopped with exit status 79", err)
        rc, out, err = self.cli("system", "drain")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("the dataplane is not running", err)

    def test_a_dataplane_of_another_status_version_is_refused(self):
        # In its place on the control socket, one that answers in another
        # version of the status records (dataplane/status.hpp).
        self.router.proc.stop(signal.SIGTERM)
        if os.path.exists(self.router.sock):
            os.unlink(self.router.sock)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(self.router.sock)
        srv.listen(8)
        self.addCleanup(srv.close)

        def serve():
            while True:
                try:
                    c, _ = srv.accept()
                except OSError:
                    return
                with c:
                    c.recv(4096)
                    c.sendall(b'{"version": 99, "routing": {"state": "enabled", "enable": 1}}\n')
        threading.Thread(target=serve, daemon=True).start()
        dp = self.yaml("system", "show")["system"]["dataplane"]
        self.assertEqual(dp["state"], "down")
        self.assertIn("lnetr-dataplane answers in status version 99, lnetr-control reads version", dp["reason"])
        self.error(("net", "show"), 1, "show", "net", 71, "status version 99")
        # Said once in lnetr-control's log, not at every request.
        self.ctl.stop(signal.SIGTERM)
        self.assertEqual(self.ctl.stderr.count("answers in status version 99"), 1, self.ctl.stderr)

    def test_routing_held_while_the_hold_file_exists(self):
        hold = os.path.join(self.dir, "routing-held")
        open(hold, "w").close()
        self.router.proc.stop(signal.SIGTERM)
        self.assertIsNone(self.router.start(self.procs, args=["--routing-hold", hold]))
        self.assertIn("routing held disabled while %s exists" % hold, self.router.proc.stderr_so_far)
        self.assertEqual(self.status()["routing"]["state"], "disabled")
        self.assertEqual(self.cli("set", "routing", "1")[0], 0)
        self.assertEqual(self.status()["routing"]["state"], "starting")
        # Without the file, as configured.
        os.unlink(hold)
        self.router.proc.stop(signal.SIGTERM)
        self.assertIsNone(self.router.start(self.procs, args=["--routing-hold", hold]))
        self.assertEqual(self.status()["routing"]["state"], "enabled")


class Shell(LnetrctlTestCase):

    def test_save_writes_what_is_in_force_and_a_restart_keeps_it(self):
        with open(self.router.config) as f:
            original = f.read()
        # What runs now differs from the file: a route, forwarding off,
        # a tunable, the large router buffers.
        self.assertEqual(self.cli("route", "add", "--net", "tcp7", "--gateway", self.topo.b_nid, "--hop", "2",
                                  "--priority", "3", "--health_sensitivity", "300")[0], 0)
        self.assertEqual(self.cli("set", "health_sensitivity", "50")[0], 0)
        self.assertEqual(self.cli("set", "large_buffers", "64")[0], 0)
        self.assertEqual(self.cli("set", "routing", "0")[0], 0)
        ro = self.router.api_sock[:-len(".sock")] + "-ro.sock"
        cp = self.topo.host("r").run([lnetrctl_binary(), "--socket", ro, "save"])
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("read-only socket", cp.stderr)
        # A comment just above a section after one save rewrites stays with it.
        assert "\ndataplane:\n" in original
        original = original.replace("\ndataplane:\n", "\n# about the dataplane\ndataplane:\n")
        with open(self.router.config, "w") as f:
            f.write(original)
        os.chmod(self.router.config, 0o640)
        rc, out, err = self.cli("save")
        self.assertEqual((rc, out), (0, "saved to %s\n" % self.router.config), err)
        with open(self.router.config) as f:
            saved = f.read()
        self.assertIn("\n# about the dataplane\ndataplane:\n", saved)
        self.assertEqual(os.stat(self.router.config).st_mode & 0o777, 0o640)  # its mode kept
        self.assertEqual([n for n in os.listdir(self.dir) if n.startswith("lnetr.yaml.")], [])
        # Everything else kept as written (the nets, dataplane and control
        # sections, comments); the four sections in force.
        head = original.split("routing:\n")[0]
        self.assertTrue(saved.startswith(head), saved)
        self.assertIn("dataplane:\n", saved)
        self.assertIn("control:\n", saved)
        doc = parse_yaml(saved)
        self.assertEqual(doc["route"], [{"net": "tcp7", "gateway": self.topo.b_nid, "hop": 2, "priority": 3,
                                         "health_sensitivity": 300}])
        self.assertEqual(doc["routing"], {"enable": 0})
        self.assertEqual(doc["global"]["health_sensitivity"], 50)
        self.assertEqual(doc["buffers"], {"tiny": 128, "small": 256, "large": 64})
        # A restarted lnetr-control on a restarted dataplane: the same.
        self.ctl.stop()
        self.router.proc.stop()
        err = self.router.start(self.procs)
        self.assertIsNone(err)
        self.ctl, err = self.router.start_control(self.procs)
        self.assertIsNone(err)
        routes = self.routes()
        self.assertEqual(set(routes), {("tcp7", self.topo.b_nid)})
        self.assertEqual(routes[("tcp7", self.topo.b_nid)]["hop"], 2)
        self.assertEqual(routes[("tcp7", self.topo.b_nid)]["health_sensitivity"], 300)  # its own, not the global 50
        self.assertEqual(self.yaml("global", "show")["global"]["health_sensitivity"], 50)
        self.assertEqual(self.yaml("routing", "show")["routing"][2]["enable"], 0)
        self.assertEqual(self.yaml("routing", "show")["buffers"], {"tiny": 128, "small": 256, "large": 64})
        # Saved twice, the file is the same but for the time.
        self.assertEqual(self.cli("save")[0], 0)
        with open(self.router.config) as f:
            again = f.read()
        strip = lambda t: re.sub(r"saved \S+ \(", "saved (", t)
        self.assertEqual(strip(again), strip(saved))

    def test_as_a_login_shell(self):
        # ssh admin@router 'route show' runs the shell with -c.
        rc, out, err = self.cli("-c", "route show --json")
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out), {"route": []})
        rc, out, err = self.cli("-c", "route 'show")
        self.assertEqual(rc, 2)
        self.assertIn("unterminated quote", err)
        # The way out to a system shell: refused to a user outside group sudo.
        cp = subprocess.run(["ip", "netns", "exec", self.topo.ns["r"], "setpriv", "--reuid=65534", "--regid=65534",
                             "--clear-groups", lnetrctl_binary(), "--socket", self.router.api_sock],
                            input="shell\nexit\n", capture_output=True, text=True, timeout=30)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("shell: not permitted", cp.stderr)
        # Root gets one.
        cp = subprocess.run(["ip", "netns", "exec", self.topo.ns["r"], lnetrctl_binary(), "--socket",
                             self.router.api_sock], input="shell\necho from-bash-$((6*7))\n",
                            capture_output=True, text=True, timeout=30)
        self.assertIn("from-bash-42", cp.stdout)

    def test_a_session_completes_a_verb_and_runs_it(self):
        home = os.path.join(self.dir, "home")
        os.mkdir(home)
        pid, fd = pty.fork()
        if pid == 0:
            os.environ["HOME"] = home
            os.environ["TERM"] = "xterm"
            os.execvp("ip", ["ip", "netns", "exec", self.topo.ns["r"], lnetrctl_binary(), "--socket",
                             self.router.api_sock])
        self.addCleanup(self._reap, pid)
        seen = b""

        def expect(needle, timeout=10):
            nonlocal seen
            end = time.monotonic() + timeout
            while needle.encode() not in seen:
                left = end - time.monotonic()
                r, _, _ = select.select([fd], [], [], max(left, 0))
                if not r:
                    self.fail("no %r from the shell; it printed:\n%s" % (needle, seen.decode(errors="replace")))
                try:
                    seen += os.read(fd, 4096)
                except OSError:
                    self.fail("the shell ended; it printed:\n%s" % seen.decode(errors="replace"))
            at = seen.index(needle.encode()) + len(needle)
            before, seen = seen[:at], seen[at:]
            return before.decode(errors="replace")

        # Completion is judged by what runs: "pe<TAB> sh<TAB> --js<TAB>"
        # is "peer show --json" only if each word was completed.
        expect("lnetrctl > ")
        os.write(fd, b"pe\tsh\t--js\t\r")
        out = expect("lnetrctl > ")
        self.assertIn('"peer": []', out)
        os.write(fd, b"route add --net tcp5 --gateway " + self.topo.b_nid.encode() + b"\r")
        expect("lnetrctl > ")
        # A NID lnetr-control knows (the only one starting so).
        os.write(fd, b"route sh\t--gateway " + self.topo.b_nid[:-5].encode() + b"\t\r")
        out = expect("lnetrctl > ")
        self.assertIn("gateway: " + self.topo.b_nid, out)
        os.write(fd, b"help route add\r")
        out = expect("lnetrctl > ")
        self.assertIn("lnetrctl route add --net VALUE --gateway VALUE", out)
        os.write(fd, b"route bogus\r")
        out = expect("lnetrctl > ")
        self.assertIn("bogus", out)
        os.write(fd, b"exit\r")
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        with open(os.path.join(home, ".lnetrctl_history")) as f:
            self.assertIn("route add --net tcp5", f.read().replace("\\040", " "))  # libedit's encoding

    @staticmethod
    def _reap(pid):
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


if __name__ == "__main__":
    unittest.main()
