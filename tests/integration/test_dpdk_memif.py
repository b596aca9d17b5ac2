"""Two lnetr routers joined by a DPDK net_memif link, lnetr's own TCP/IP on
both ends of it: socklnd between two user-space stacks over a DPDK device
shared by two processes (no kernel on that hop, no privileges needed for
memif, no hugepages).

    a: lnetr-peer @tcp -- r1: lnetr-dataplane @tcp (kernel) / @tcp9 (memif)
                            == memif ==
       r2: lnetr-dataplane @tcp9 (memif) / @tcp1 (kernel) -- b: lnetr-peer @tcp1

A reaches B over two routers (a multi-hop LNet route); every byte of every
PUT and GET is checked, and both routers' credits and buffers come back to
rest.  AllDpdk: the peers on memif too (lnetr_memif.py), nothing but
lnetr's own TCP/IP on the path, at MTU 1500 and 9000; and the router on
net_virtio_user ports against the peers' net_vhost, a NIC's stand-in with
checksum offload, TSO and LRO.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from lnetr_memif import MemifTopology
from lnetr_router import control_request, dataplane_binary, ip, not_at_rest
from lnetr_test import Host, PeerTestCase, peer_binary, run_together

SIZES = [0, 1, 4096, 65536, 1048576]

CONFIG = """\
net:
  - net type: {kernel_net}
    local NI(s):
      - interfaces:
          0: {kernel_if}
  - net type: tcp9
    local NI(s):
      - interfaces:
          0: mif
route:
  - net: {far_net}
    gateway: {other}@tcp9
buffers:
  tiny: 128
  small: 256
  large: 32
dataplane:
  cores: [{core}]
  main_core: {core}
  control_socket: {sock}
  shm_name: /{tag}
  socklnd:
    sock_timeout: 10
  ports:
    - name: mif
      device: "net_memif{index},role={role},socket={memif_sock},socket-abstract=no,id=0"
      address: {addr}/24
"""


class MemifRouters(PeerTestCase):

    def setUp(self):
        super().setUp()
        pid = os.getpid()
        n = pid % 100 * 2 + 21
        self.tag = "lm%d" % pid
        self.ns = {k: self.tag + k for k in ("a", "r1", "r2", "b")}
        self.addCleanup(self.down)
        for ns in self.ns.values():
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
        self.a_ip, self.r1_ip = "10.%d.1.2" % n, "10.%d.1.1" % n
        self.b_ip, self.r2_ip = "10.%d.2.3" % n, "10.%d.2.1" % n
        self.m1_ip, self.m2_ip = "10.%d.9.1" % n, "10.%d.9.2" % n
        self.veth("a", "eth0", self.a_ip, "r1", "ra", self.r1_ip)
        self.veth("b", "eth0", self.b_ip, "r2", "rb", self.r2_ip)
        self.dir = tempfile.mkdtemp(prefix="lnetr-memif-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        memif_sock = os.path.join(self.dir, "memif.sock")
        self.socks = {}
        self.routers = {}
        # The memif server first (it creates the socket), then the client.
        for i, (r, kernel_net, kernel_if, far_net, other, role, addr, core) in enumerate((
                ("r1", "tcp", "ra", "tcp1", self.m2_ip, "server", self.m1_ip, 0),
                ("r2", "tcp1", "rb", "tcp", self.m1_ip, "client", self.m2_ip, 1))):
            sock = os.path.join(self.dir, r + ".sock")
            self.socks[r] = sock
            path = os.path.join(self.dir, r + ".yaml")
            with open(path, "w") as f:
                f.write(CONFIG.format(kernel_net=kernel_net, kernel_if=kernel_if, far_net=far_net, other=other,
                                      core=core % os.cpu_count(), sock=sock, tag=self.tag + r, index=i, role=role,
                                      memif_sock=memif_sock, addr=addr))
            p = self.procs.start([dataplane_binary(), "--config", path], host=Host.netns(self.ns[r]))
            self.routers[r] = p
            if not p.wait_stderr("forwarding with", timeout=30):
                p.stop()
                self.fail("%s did not start: rc=%s\n%s" % (r, p.returncode, p.stderr))

    def veth(self, ns1, if1, ip1, ns2, if2, ip2):
        tmp1, tmp2 = self.tag + "x", self.tag + "y"
        ip("link", "add", tmp1, "type", "veth", "peer", "name", tmp2)
        for ns, tmp, name, addr in ((ns1, tmp1, if1, ip1), (ns2, tmp2, if2, ip2)):
            ip("link", "set", tmp, "netns", self.ns[ns])
            ip("-n", self.ns[ns], "link", "set", tmp, "name", name)
            ip("-n", self.ns[ns], "addr", "add", addr + "/24", "dev", name)
            ip("-n", self.ns[ns], "link", "set", name, "up")

    def down(self):
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def side(self, s):
        nid = (self.a_ip + "@tcp") if s == "a" else (self.b_ip + "@tcp1")
        gw = (self.r1_ip + "@tcp") if s == "a" else (self.r2_ip + "@tcp1")
        far = "tcp1" if s == "a" else "tcp"
        return nid, ["--route", "%s=%s" % (far, gw), "--router-check-interval", "1"], Host.netns(self.ns[s])

    def routers_said(self):
        """What each router counted and logged, for a failure's message."""
        out = ""
        for r in ("r1", "r2"):
            try:
                st = self.status(r)
                out += "\n%s drops %s; ports %s" % (r, st["drops"], [
                    {k: p[k] for k in ("name", "link", "tx_stalls", "tx_dropped", "dropped_malformed", "tcp")}
                    for p in st["ports"]])
            except Exception as e:  # (the status is for the message only)
                out += "\n%s: no status (%s)" % (r, e)
            p = self.routers[r]
            if p.stderr is None:
                p.wait_stderr("(what it logged so far)", timeout=0.5)  # reads what is there
            out += "\n%s stderr:\n%s" % (r, p.stderr_so_far[-3000:])
        return out

    def status(self, r):
        try:
            return control_request(self.socks[r], "status")
        except OSError as e:
            p = self.routers[r]
            if p.popen.poll() is not None:
                p.wait()
                self.fail("%s exited (rc=%s):\n%s" % (r, p.returncode, p.stderr))
            raise

    def ping_through(self):
        """Wait until A reaches B over both routers (the memif link comes up
        in well under a second, and A's gateway check then sees R1's NIs
        up: a ping gets through within seconds)."""
        b_nid, _, _ = self.side("b")
        a_nid, a_opts, a_host = self.side("a")
        end = time.monotonic() + 30
        while True:
            rc, doc, cp = self.run_peer(a_nid, ["ping", b_nid, "--timeout", "2"], a_opts, host=a_host, timeout=60)
            if rc == 0 or time.monotonic() > end:
                break
            time.sleep(0.5)
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        return doc

    def wait_at_rest(self, routers, timeout):
        end = time.monotonic() + timeout
        while True:
            problems = [p for r in routers for p in not_at_rest(self.status(r))]
            if not problems or time.monotonic() > end:
                return problems
            time.sleep(0.2)

    def test_a_router_whose_memif_peer_dies_comes_back_to_rest(self):
        """R2 frozen, then killed, in the middle of 1 MiB PUTs: from then on
        R1's memif refuses every frame (and R1's driver unmaps the rings R1's
        worker may be using: unmap_guard.hpp).  R1 drops that backlog once the device has taken
        nothing for 5 s, with it the frames chained from its router buffers,
        and (once socklnd gives up on the connection) every credit and
        buffer is back."""
        b_nid, b_opts, b_host = self.side("b")
        a_nid, a_opts, a_host = self.side("a")
        server = self.start_server(b_nid, b_opts, host=b_host)
        self.ping_through()
        brw = self.procs.start([peer_binary(), "--nid", a_nid] + a_opts + [
            "brw", b_nid, "--op", "write", "--size", "1048576", "--concurrency", "16", "--duration", "60",
            "--timeout", "5", "--check", "none"], host=a_host)
        end = time.monotonic() + 30
        while self.status("r1")["statistics"]["route_count"] < 20 and time.monotonic() < end:
            time.sleep(0.1)
        self.assertGreaterEqual(self.status("r1")["statistics"]["route_count"], 20)
        # Frozen first, so that R1 is sure to have sent R2 data it never
        # acknowledges (R1 retransmits it into the dead link), then killed.
        os.kill(self.routers["r2"].pid, signal.SIGSTOP)
        time.sleep(1)
        self.routers["r2"].stop(signal.SIGKILL)
        time.sleep(2)
        brw.stop(signal.SIGINT)
        self.stop_server(server)
        problems = self.wait_at_rest(["r1"], 90)
        # Frames queued after a backlog was dropped (retransmits into the
        # dead link before TCP gives up) go the same way 5 s later.
        end = time.monotonic() + 20
        while self.status("r1")["ports"][0]["tx_backlog"] != 0 and time.monotonic() < end:
            time.sleep(0.2)
        st = self.status("r1")
        port = st["ports"][0]
        self.assertEqual(problems, [], port)
        self.assertGreaterEqual(port["tx_stalls"], 1, port)
        self.assertEqual(port["tx_backlog"], 0, port)
        self.assertGreater(port["bytes_referenced"], 0, port)

    def test_puts_and_gets_across_two_routers_joined_by_memif(self):
        b_nid, b_opts, b_host = self.side("b")
        a_nid, a_opts, a_host = self.side("a")
        server = self.start_server(b_nid, b_opts, host=b_host)
        doc = self.ping_through()
        self.assertEqual(doc["ping"][0]["primary nid"], b_nid)
        # (pings sent while R1 still had the route through R2 down were
        # dropped as route_down; nothing may be dropped from here on)
        drops = {r: self.status(r)["statistics"]["drop_count"] for r in ("r1", "r2")}
        for op in ("write", "read"):
            json_path = os.path.join(self.dir, op + ".json")
            rc, doc, cp = self.run_peer(a_nid, ["brw", b_nid, "--op", op, "--sizes", ",".join(map(str, SIZES)),
                                                "--count", "1000", "--concurrency", "16", "--duration", "600",
                                                "--timeout", "30", "--json", json_path], a_opts, host=a_host,
                                        timeout=900)
            self.assertEqual(rc, 0, cp.stdout + cp.stderr + self.routers_said())
            with open(json_path) as f:
                res = json.load(f)
            self.assertEqual((res["ops"], res["errors"]), (1000, 0), res)
        rc, stats = self.stop_server(server)
        self.assertEqual(rc, 0, "the server found corrupted data: %s" % stats)
        for r in ("r1", "r2"):
            st = self.status(r)
            self.assertGreaterEqual(st["statistics"]["route_count"], 4000, r)
            self.assertEqual(st["statistics"]["drop_count"], drops[r], (r, st["drops"]))
            port = st["ports"][0]
            self.assertTrue(port["device"].startswith("net_memif"), port)
            self.assertGreater(port["tcp"]["segments_in"], 1000, port)
            self.assertEqual(port["dropped_malformed"], 0, port)
            self.assertTrue(port["zero_copy"], port)  # memif takes chained frames
        self.assertEqual(self.wait_at_rest(("r1", "r2"), 20), [])


class AllDpdk(PeerTestCase):
    """Peers on memif with lnetr's TCP/IP, the router between them on two
    memif ports: no kernel anywhere on the data path (lnetr_memif.py), at
    the standard MTU and at 9000.  Every PUT checked by the server, every
    REPLY by the client; the router forwards large payloads without
    copying them and comes back to rest."""

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="lnetr-alldpdk-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def through_the_router(self, mtu, link="memif", capture=0):
        """`capture`: that many frames captured from the brws' start (the
        dataplane's capture, through its control socket)."""
        topo = MemifTopology(self.procs, self.dir, mtu=mtu, cores=(1 % os.cpu_count(),), main_core=0,
                             tag="lnetrad%d" % os.getpid(), link=link)
        try:
            topo.start()
        except RuntimeError as e:
            self.fail(str(e))
        a, b = topo.nid("a"), topo.nid("b")
        server = self.start_server(b, topo.peer_options("b"))
        end = time.monotonic() + 30
        while True:
            rc, doc, cp = self.run_peer(a, ["ping", b, "--timeout", "2"], topo.peer_options("a"), timeout=60)
            if rc == 0 or time.monotonic() > end:
                break
            time.sleep(0.5)
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.assertEqual(doc["ping"][0]["primary nid"], b)
        drops = topo.status()["statistics"]["drop_count"]
        pcap = os.path.join(self.dir, "capture.pcapng")
        if capture:
            fd = os.open(pcap, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                st = control_request(topo.ctl, "capture start port=* host=* count=%d" % capture, fd=fd)
            finally:
                os.close(fd)
            self.assertEqual(st["state"], "running", st)
        # (Each lnetr-peer run is a new memif client: the router sees its
        # port's link go down and up, pushes that to the peers, and routes
        # through it are down for a moment; the warm-up rides that out.)
        for op in ("write", "read"):
            json_path = os.path.join(self.dir, op + ".json")
            rc, doc, cp = self.run_peer(a, ["brw", b, "--op", op, "--sizes", ",".join(map(str, SIZES)),
                                            "--count", "400", "--concurrency", "16", "--duration", "600",
                                            "--warmup", "2", "--timeout", "30", "--json", json_path, "--stats"],
                                        topo.peer_options("a"), timeout=900)
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            with open(json_path) as f:
                res = json.load(f)
            self.assertEqual((res["ops"], res["errors"]), (400, 0), res)
            self.assertGreater(doc["stats"]["dpdk"]["tx_frames"], 0, doc["stats"])
        rc, stats = self.stop_server(server)
        self.assertEqual(rc, 0, "the server found corrupted data: %s" % stats)
        if capture:
            self.check_capture(topo, pcap, capture, mtu)
        st = topo.status()
        self.assertGreaterEqual(st["statistics"]["route_count"], 1600)
        self.assertEqual(st["statistics"]["drop_count"], drops, st["drops"])
        forwarded = st["statistics"]["route_length"]
        self.assertGreaterEqual(forwarded, 800 * sum(SIZES) // len(SIZES))
        for port in st["ports"]:
            self.assertEqual((port["mtu"], port["dropped_malformed"], port["tx_stalls"]), (mtu, 0, 0), port)
            # Jumbo frames on the wire: the 1 MiB payloads went in segments
            # of the MTU, one way or the other on each port (ACKs, mostly
            # one way, bring a direction's mean down; at MTU 1500 neither
            # mean can pass 1,514).
            if mtu > 1500:
                means = (port["rx_bytes"] / port["rx_frames"], port["tx_bytes"] / port["tx_frames"])
                self.assertGreater(max(means), 1514, port)
        # Payloads stay in the frames they arrived in and go out chained
        # from there, small ones too (the send queue holds their frames
        # until acknowledged): what is copied is mostly headers.
        copied = sum(w["bytes_copied"] for w in st["workers"])
        self.assertLess(copied, 0.05 * forwarded, (copied, forwarded))
        small = 2 * 400 * sum(s for s in SIZES if 0 < s < 16384) // len(SIZES)  # of both loads' small payloads
        held = sum(p["tx_bytes_held"] for p in st["ports"])
        self.assertGreater(held, small // 2, (held, small, [p["tx_hold_refused"] for p in st["ports"]]))
        # (Headers: 288 bytes a message; before, each small payload was
        # copied three times, 2 MB here.)
        self.assertLess(copied, 400 * st["statistics"]["route_count"] + 0.002 * forwarded, (copied, forwarded))
        problems = []
        end = time.monotonic() + 20
        while time.monotonic() < end:
            problems = not_at_rest(topo.status())
            if not problems:
                break
            time.sleep(0.2)
        self.assertEqual(problems, [])
        return st

    def check_capture(self, topo, pcap, count, mtu):
        """The capture ended itself at its count, and its file holds every
        frame whole (jumbo ones too, copied in several segments), which
        tshark's LNet dissector reads."""
        shown = control_request(topo.ctl, "capture show")
        self.assertEqual((shown["state"], shown["frames"], shown.get("stopped")),
                         ("off", count, "the count was reached"), shown)
        cp = subprocess.run(["tshark", "-r", pcap, "-T", "fields", "-e", "frame.len", "-e", "frame.cap_len"],
                            capture_output=True, text=True, timeout=300)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        lens = [tuple(map(int, line.split("\t"))) for line in cp.stdout.splitlines()]
        self.assertEqual(len(lens), count)
        self.assertEqual([l for l in lens if l[0] != l[1]], [])
        self.assertEqual(max(l[0] for l in lens), mtu + 14)
        cp = subprocess.run(["tshark", "-r", pcap, "-Y", "lnet.msg_type == 1"], capture_output=True, text=True,
                            timeout=300)
        self.assertGreater(len(cp.stdout.splitlines()), 0, cp.stderr)

    def test_standard_frames(self):
        self.through_the_router(1500)

    def test_two_pairs_two_workers(self):
        """Two pairs of one-queue ports, each pair's NIs on a CPT of their
        own (CPT: "[k]"): each pair's ports are polled, and its messages
        forwarded, by its own worker, both pairs loaded at once."""
        if os.cpu_count() < 2:
            self.skipTest("needs two cores")
        topo = MemifTopology(self.procs, self.dir, cores=(0, 1), main_core=0, pairs=2,
                             tag="lnetrad%d" % os.getpid())
        try:
            topo.start()
        except RuntimeError as e:
            self.fail(str(e))
        servers = [self.start_server(topo.nid("b", k), topo.peer_options("b", k)) for k in (0, 1)]
        for k in (0, 1):
            end = time.monotonic() + 30
            while True:
                rc, _, cp = self.run_peer(topo.nid("a", k), ["ping", topo.nid("b", k), "--timeout", "2"],
                                          topo.peer_options("a", k), timeout=60)
                if rc == 0 or time.monotonic() > end:
                    break
                time.sleep(0.5)
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        st0 = topo.status()
        def load(k, op):
            json_path = os.path.join(self.dir, "pair%d.json" % k)
            argv = self.peer_argv(topo.nid("a", k), ["brw", topo.nid("b", k), "--op", op, "--sizes",
                                                     ",".join(map(str, SIZES)), "--count", "300",
                                                     "--concurrency", "16", "--duration", "600", "--warmup", "2",
                                                     "--timeout", "30", "--json", json_path],
                                  topo.peer_options("a", k))
            cp = Host().run(argv, timeout=900)
            res = None
            if cp.returncode == 0:
                with open(json_path) as f:
                    res = json.load(f)
            return cp, res

        for cp, res in run_together([lambda: load(0, "write"), lambda: load(1, "read")]):
            self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
            self.assertEqual((res["ops"], res["errors"]), (300, 0), res)
        for server in servers:
            rc, stats = self.stop_server(server)
            self.assertEqual(rc, 0, "the server found corrupted data: %s" % stats)
        st = topo.status()
        for port in st["ports"]:
            worker = 0 if port["name"] in ("pa", "pb") else 1
            self.assertEqual([(q["queue"], q["worker"]) for q in port["per_queue"]], [(0, worker)], port)
        # Each worker forwarded its pair's 300 operations (a message and its
        # reply or ACK each, at least): a forward is counted by the worker
        # that sends it, so a pair served by the other worker shows here.
        for w0, w1 in zip(st0["workers"], st["workers"]):
            self.assertGreaterEqual(w1["route_count"] - w0["route_count"], 600, (w0["cpt"], w1["route_count"]))
        self.assertEqual(st["statistics"]["drop_count"], st0["statistics"]["drop_count"], st["drops"])

    def test_jumbo_frames(self):
        """And a capture of the first 3,000 frames (lnetrctl capture)."""
        self.through_the_router(9000, capture=3000)

    def test_virtio_ports_with_offloads(self):
        """The router's ports on net_virtio_user, the peers' on net_vhost
        (the vhost library copies between them, as a NIC's DMA would):
        lnetr's side hands its port frames of many segments to cut (TSO),
        receives units of many segments joined (LRO) and takes them in
        place, leaves every TCP checksum to the device both ways, and
        every byte still arrives intact."""
        if not shutil.which("dpdk-testpmd"):
            self.skipTest("dpdk-testpmd (Debian package dpdk) stands in for the peers while the router starts")
        st = self.through_the_router(1500, link="virtio")
        for port in st["ports"]:
            self.assertTrue(port["lro"] and port["tso"], port)
            self.assertEqual(port["checksum_offload"]["tx_tcp"], True, port)
            # Both directions carried 1 MiB payloads: units joined on the
            # way in (each taken where it lay, no chain copied), frames of
            # many segments on the way out.
            self.assertGreater(port["rx_lro"], 100, port)
            self.assertGreaterEqual(port["rx_chained"], port["rx_lro"] // 2, port)
            self.assertGreater(port["rx_chain_buffers"], 4 * port["rx_chained"], port)
            self.assertGreater(port["tso_frames"], 100, port)
            self.assertGreater(port["tso_segments"], 4 * port["tso_frames"], port)
            self.assertEqual(port["csum_odd_chains"], 0, port)
            # Every TCP segment received was vouched for by the device
            # (the rest are ARP).
            self.assertGreater(port["csum_verified"], 0.99 * port["rx_frames"], port)


if __name__ == "__main__":
    unittest.main()
