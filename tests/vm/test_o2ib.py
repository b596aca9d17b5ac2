"""o2iblnd over real verbs (soft-RoCE in a qemu guest), in one boot.

The topology (o2ib_topology.py): clients and servers (lnetr-peer) on two
o2ib nets, two kernel-socket tcp nets and a DPDK port, lnetr-dataplane
between them.  Every byte of every PUT and GET is verified by lnetr-peer;
the router's credits, buffers and o2ib connections must be back at rest
after each case.  A CONNREQ with a bad magic, version or queue depth comes
from lnetr-o2ib-probe, which prints the reject's bytes; a peer that writes
with a remote key after its transfer is lnetr-o2ib-stale-key.
"""

import json
import os
import sys
import time
import unittest
from pathlib import Path

import lnetr_vm
from o2ib_topology import A, B, B2, C, D, R_IB, R_IB1, R_TCP, R_TCP1, X, Y, Z, Topology, parse_yaml

BUILD = Path(os.environ.get("LNETR_BUILD", lnetr_vm.SOURCE_ROOT / "build" / "debug")).resolve()
PROBE = os.environ.get("LNETR_O2IB_PROBE", str(BUILD / "tests/vm/lnetr-o2ib-probe"))
STALE_KEY = os.environ.get("LNETR_O2IB_STALE_KEY", str(BUILD / "tests/vm/lnetr-o2ib-stale-key"))
CONTROL = os.environ.get("LNETR_CONTROL", str(BUILD / "control/lnetr-control"))
LNETRCTL = os.environ.get("LNETR_LNETRCTL", str(BUILD / "cli/lnetrctl/lnetrctl"))
SANITIZED = os.environ.get("LNETR_SANITIZED") == "1"
SIZES = [0, 1, 3976, 3977, 4096, 65536, 1 << 20]
# CONNREQs in test_9's storm: enough that it outlasts D's writes under TCG
# (400 took 8.6 s, which D's four 1 MiB writes sometimes outlasted).
STORM = 600


def log(msg):
    print(f"vm-o2ib: {msg}", file=sys.stderr, flush=True)


def nid4(ip, net_type, net_num=0):
    a = [int(x) for x in ip.split(".")]
    v = (net_type << 48) | (net_num << 32) | (a[0] << 24) | (a[1] << 16) | (a[2] << 8) | a[3]
    return v.to_bytes(8, "little")


def connreq(magic=0x0BE91B91, version=0x12, qd=8, frags=257, size=4096, dst=R_IB, src=Z):
    """A CONNREQ's bytes (hex), from src@o2ib to dst@o2ib, no checksum."""
    b = magic.to_bytes(4, "little") + version.to_bytes(2, "little") + bytes([0xC0, 0]) + \
        (56).to_bytes(4, "little") + bytes(4) + nid4(src, 5) + (12345).to_bytes(8, "little") + \
        nid4(dst, 5) + bytes(8) + qd.to_bytes(2, "little") + frags.to_bytes(2, "little") + \
        size.to_bytes(4, "little")
    return b.hex()


class O2ibOverVerbs(unittest.TestCase):
    guest = None

    @classmethod
    def setUpClass(cls):
        reason = lnetr_vm.skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.t0 = time.monotonic()
        cls.guest = lnetr_vm.Guest(nics=4, name="vm-o2ib", mem_mb=3072)
        cls.topo = Topology(cls.guest, BUILD)
        for b in (cls.topo.peer, cls.topo.dataplane, PROBE, STALE_KEY, CONTROL, LNETRCTL):
            if not os.path.exists(b):
                raise unittest.SkipTest(f"{b} is not built")
        try:
            cls.guest.start()
            reason = cls.guest.build_cannot_run()
            if reason:
                raise unittest.SkipTest(reason)
            cls.topo.setup()
            cls.topo.start_router()
            for name in ("A", "C", "B"):
                cls.topo.start_server(name)
        except BaseException:
            cls.guest.stop(timeout=0)
            raise
        cls.dir, cls.api = cls.topo.dir, cls.topo.api

    @classmethod
    def tearDownClass(cls):
        if cls.guest:
            try:
                cls.topo.stop_router()
            except Exception as e:  # noqa: BLE001
                log(f"stopping the router: {e}")
            cls.guest.stop()
            log(f"whole suite {time.monotonic() - cls.t0:.1f} s (boot {cls.guest.boot_seconds:.1f} s); "
                f"console {cls.guest.console}")

    # ---- helpers ------------------------------------------------------------------------

    def sh(self, cmd, timeout=60):
        return self.topo.sh(cmd, timeout)

    def wait_for(self, cond, timeout, what):
        self.topo.wait_for(cond, timeout, what)

    def peer(self, nid, route, args, netns=None, timeout=120):
        return self.topo.client(nid, route, args, netns, timeout)

    def status(self):
        return self.topo.status()

    def at_rest(self, timeout=30):
        """Wait until the router's credits, buffers and o2ib connections are
        all back; the status then."""
        end = time.monotonic() + timeout
        while True:
            st = self.status()
            problems = self.topo.problems(st)
            if not problems:
                return st
            if time.monotonic() > end:
                self.fail("router not at rest: " + "; ".join(problems))
            time.sleep(0.5)

    def xfer(self, client, route, target, op, size, count, netns=None):
        rc, doc, out, err = self.peer(client, route, f"{op} {target} --size {size} --count {count} --timeout 20",
                                      netns)
        self.assertEqual(rc, 0, f"{client} {op} {size} B to {target}: {out}\n{err}")
        return doc

    # ---- cases --------------------------------------------------------------------------

    def test_1_direct_o2ib(self):
        """lnetr-peer to lnetr-peer over o2ib, no router: ping, PUT and GET
        of every size (GETs over 3976 bytes as optimized GETs), brw."""
        z = self.guest.spawn("exec " + self.topo.peer_cmd(f"{Z}@o2ib", f"tcp|{R_IB}@o2ib", "server"))
        self.wait_for(lambda: "serving" in z.output()[1], 60, "server Z")
        route = f"tcp|{R_IB}@o2ib"
        try:
            # (The first connection over soft-RoCE in a TCG guest, under ASan, can
            # take several seconds.)
            rc, doc, out, err = self.peer(f"{Y}@o2ib", route, f"ping {Z}@o2ib --timeout 30")
            self.assertEqual(rc, 0, out + err)
            self.assertIn(f"{Z}@o2ib", out)
            for size in SIZES:
                self.xfer(f"{Y}@o2ib", route, f"{Z}@o2ib", "put", size, 2)
                self.xfer(f"{Y}@o2ib", route, f"{Z}@o2ib", "get", size, 2)
            rc, doc, out, err = self.peer(f"{Y}@o2ib", route,
                                          f"--stats brw {Z}@o2ib --op read --size 1048576 --concurrency 4 "
                                          f"--duration 3")
            self.assertEqual(rc, 0, out + err)
            o = doc["stats"]["o2iblnd"]
            self.assertGreater(o["rdma_bytes_received"], 0)  # the REPLYs, RDMA-written into the sinks
        finally:
            z.kill()
            z.wait(20)

    def test_2_tcp_to_o2ib_and_back(self):
        """B (tcp, kernel sockets) through R to A (o2ib), both ways: ping,
        PUT and GET of 0 B to 1 MiB, routed GETs; then at rest."""
        b_route, a_route = f"o2ib|{R_TCP}@tcp", f"tcp|{R_IB}@o2ib"
        rc, doc, out, err = self.peer(f"{B2}@tcp", b_route, f"ping {A}@o2ib --timeout 30")
        self.assertEqual(rc, 0, out + err)
        n = 2 if SANITIZED else 3
        for size in SIZES:
            self.xfer(f"{B2}@tcp", b_route, f"{A}@o2ib", "put", size, n)
            self.xfer(f"{B2}@tcp", b_route, f"{A}@o2ib", "get", size, n)
        # And from the o2ib side, to B's server.
        rc, doc, out, err = self.peer(f"{Y}@o2ib", a_route, f"ping {B}@tcp --timeout 30")
        self.assertEqual(rc, 0, out + err)
        for size in (0, 3977, 1 << 20):
            self.xfer(f"{Y}@o2ib", a_route, f"{B}@tcp", "put", size, n)
            self.xfer(f"{Y}@o2ib", a_route, f"{B}@tcp", "get", size, n)
        st = self.at_rest()
        o = st["o2iblnd"]
        self.assertGreater(o["rdma_bytes_received"], 0)
        self.assertGreater(o["rdma_bytes_written"], 0)
        self.assertEqual(o["post_failures"], 0)
        self.assertEqual(o["cq_errors"], 0)

    def test_3_o2ib_to_o2ib(self):
        """A (o2ib) through R to C (o2ib1): PUT and GET of every size, brw."""
        route = f"o2ib1|{R_IB}@o2ib"
        for size in SIZES:
            self.xfer(f"{Y}@o2ib", route, f"{C}@o2ib1", "put", size, 2)
            self.xfer(f"{Y}@o2ib", route, f"{C}@o2ib1", "get", size, 2)
        # Large buffers grown at run time (lnetrctl set large_buffers):
        # lent first, so the brw's RDMA lands in memory registered with the
        # RDMA devices while the router ran.
        grown = self.topo.request("buffers large 64")
        self.assertEqual(grown["per_cpt"], 64, grown)
        rc, doc, out, err = self.peer(f"{Y}@o2ib", route, f"brw {C}@o2ib1 --op write --size 1048576 --concurrency 8 "
                                                         f"--duration 3 --timeout 20")
        self.assertEqual(rc, 0, out + err)
        st = self.at_rest()
        self.assertEqual(st["o2iblnd"]["post_failures"], 0)
        self.assertEqual(st["o2iblnd"]["cq_errors"], 0)
        self.assertEqual([p["large"]["nbuffers"] for p in st["buffers"]], [64])
        self.assertEqual(self.topo.request("buffers large 48")["per_cpt"], 48)
        self.assertEqual([p["large"]["nbuffers"] for p in self.status()["buffers"]], [48])  # idle: at once

    def test_4_dpdk_port_to_o2ib_copies_nothing(self):
        """D (tcp1, R's DPDK af_packet port with lnetr's TCP) through R to A
        (o2ib), 1 MiB PUTs and GETs: payload left in received frames is
        RDMA-written from them, and RDMA-written router buffers leave
        chained: no payload byte copied."""
        route = f"o2ib|{R_TCP1}@tcp1"
        before = self.status()
        copied0 = sum(w["bytes_copied"] for w in before["workers"])
        n = 4 if SANITIZED else 8
        self.xfer(f"{D}@tcp1", route, f"{A}@o2ib", "put", 1 << 20, n, netns="t")
        self.xfer(f"{D}@tcp1", route, f"{A}@o2ib", "get", 1 << 20, n, netns="t")
        st = self.at_rest()
        copied = sum(w["bytes_copied"] for w in st["workers"]) - copied0
        routed = st["statistics"]["route_length"] - before["statistics"]["route_length"]
        self.assertGreaterEqual(routed, 2 * n * (1 << 20))
        port, port0 = st["ports"][0], before["ports"][0]
        o2ib_copied = st["o2iblnd"]["bytes_copied"] - before["o2iblnd"]["bytes_copied"]
        log(f"DPDK <-> o2ib: {routed} bytes routed, {copied} copied (port {port['bytes_copied'] - port0['bytes_copied']}, "
            f"o2ib {st['o2iblnd']['bytes_copied'] - before['o2iblnd']['bytes_copied']}, "
            f"port sent by reference {port['bytes_referenced'] - port0['bytes_referenced']}, "
            f"received by reference {port['rx_bytes_referenced'] - port0['rx_bytes_referenced']})")
        # o2iblnd copied no forwarded byte either way (what it copies is the
        # payload of the router's own small IMMEDIATEs: its ping replies to
        # the servers' gateway checks), and nothing through its own buffers;
        # the port received every PUT payload byte by reference.  What the
        # port copies is message headers into its TCP streams (and, when a
        # client exits, what its connection still held unacknowledged).
        originated = st["statistics"]["send_count"] - before["statistics"]["send_count"]
        self.assertLessEqual(o2ib_copied, 512 * originated)
        self.assertEqual(st["o2iblnd"]["bytes_bounced"], 0)
        self.assertEqual(port["rx_bytes_referenced"] - port0["rx_bytes_referenced"], n * (1 << 20))
        # Headers are all the port may copy: a bound per message, not per
        # byte routed (a sanitized run is slower, so it carries more of the
        # servers' gateway pings per MiB routed).
        messages = sum(st["statistics"][k] - before["statistics"][k] for k in ("route_count", "send_count", "recv_count"))
        self.assertLessEqual(copied, 512 * messages, f"payload bytes copied between the DPDK port and o2ib "
                                                     f"({copied} for {messages} messages)")

    def test_5_bad_connreqs_rejected_as_linux(self):
        """CONNREQs a kernel would refuse: the 24-byte reject Linux sends."""
        inc = None
        for what, data, why, version, knows in (
                ("bad magic", connreq(magic=0x12345678), 3, 0x12, False),
                ("version 0x13", connreq(version=0x13), 3, 0x12, False),
                ("queue depth 16", connreq(qd=16), 7, 0x12, True),
                ("LNet protocol probe", connreq(magic=0x45726963), 3, 0x12, False),
                ("not our NID", connreq(dst="10.99.2.77"), 3, 0x12, False)):
            rc, out, err = self.guest.run(f"{PROBE} --src {Z} --dst {R_IB} --data {data}", timeout=60)
            self.assertEqual(rc, 0, f"{what}: {out} {err}")
            self.assertTrue(out.startswith("rejected status=28 "), f"{what}: {out}")
            rej = bytes.fromhex(out.split("data=")[1].strip())[:24]
            self.assertEqual(rej[:4], (0x0BE91B91).to_bytes(4, "little"), what)
            self.assertEqual(int.from_bytes(rej[4:6], "little"), version, what)
            self.assertEqual(rej[6], why, what)
            self.assertEqual(rej[7], 0, what)
            incarnation = int.from_bytes(rej[8:16], "little")
            qd, frags, size = int.from_bytes(rej[16:18], "little"), int.from_bytes(rej[18:20], "little"), \
                int.from_bytes(rej[20:24], "little")
            self.assertEqual(size, 4096, what)
            if knows:
                self.assertNotEqual(incarnation, 0, what)
                self.assertEqual((qd, frags), (8, 257), what)
                inc = incarnation
            else:
                self.assertEqual((incarnation, qd, frags), (0, 0, 0), what)
        # A good one is accepted, with a CONNACK naming the router.
        rc, out, err = self.guest.run(f"{PROBE} --src {Z} --dst {R_IB} --data {connreq()}", timeout=60)
        self.assertTrue(out.startswith("established data="), out + err)
        ack = bytes.fromhex(out.split("data=")[1].strip())
        self.assertEqual(ack[6], 0xC1)
        self.assertEqual(int.from_bytes(ack[24:32], "little"), inc)  # its incarnation, as in the reject
        st = self.status()
        self.assertGreaterEqual(st["o2iblnd"]["rejects_sent"]["FATAL"], 4)
        self.assertGreaterEqual(st["o2iblnd"]["rejects_sent"]["MSG_QUEUE_SIZE"], 1)

    def test_7_lnetrctl_and_metrics_cover_o2ib(self):
        """lnetr-control over the router: lnetrctl shows the o2ib NIs with
        the tunables in force and the peers' connections with their
        credits; /metrics has the o2iblnd series."""
        control = self.guest.spawn(f"exec {CONTROL} --config {self.dir}/lnetr.yaml")
        try:
            self.wait_for(lambda: self.guest.run(f"test -S {self.api}")[0] == 0, 60, "lnetr-control's socket")
            # Traffic first, so that there are connections and counters.
            self.xfer(f"{B2}@tcp", f"o2ib|{R_TCP}@tcp", f"{A}@o2ib", "put", 1 << 20, 2)
            ctl = f"{LNETRCTL} --socket {self.api}"
            net = parse_yaml(self.sh(f"{ctl} net show --net o2ib -v"))
            ni = net["net"][0]["local NI(s)"][0]
            self.assertEqual(ni["nid"], f"{R_IB}@o2ib")
            self.assertEqual(ni["status"], "up")
            lt = ni["lnd tunables"]
            self.assertEqual(lt["peercredits_hiw"], 4)
            self.assertEqual(lt["concurrent_sends"], 8)
            self.assertEqual(lt["map_on_demand"], 1)
            self.assertNotIn("fmr_pool_size", lt)  # not in force in lnetr
            peers = parse_yaml(self.sh(f"{ctl} peer show --nid {A}@o2ib -v 2"))
            pni = peers["peer"][0]["peer ni"][0]
            conns = pni["o2ib connections"]
            self.assertGreaterEqual(len(conns), 1)
            self.assertEqual(conns[0]["queue_depth"], 8)
            self.assertEqual(conns[0]["version"], 18)  # 0x12
            dp = parse_yaml(self.sh(f"{ctl} dataplane show"))["dataplane"]
            verbs = {p["nid"]: p for p in dp["ports"] if p["transport"] == "verbs"}
            self.assertEqual(verbs[f"{R_IB}@o2ib"]["device"], "rxe1")
            self.assertEqual(verbs[f"{R_IB1}@o2ib1"]["device"], "rxe2")
            self.assertEqual(dp["o2iblnd"]["remote_keys"], "transfer")
            # Every sink a peer wrote into was a window of its own.
            self.assertGreater(dp["o2iblnd"]["sink_windows"], 0)
            self.assertEqual(dp["o2iblnd"]["sink_windows_refused"], 0)
            self.assertEqual(dp["o2iblnd"]["sink_registrations"], 0)
            self.assertGreaterEqual(dp["o2iblnd"]["connections"], 1)
            self.assertGreater(dp["o2iblnd"]["rdma_bytes_written"], 0)
            self.assertEqual(dp["o2iblnd"]["bytes_bounced"], 0)
            metrics = self.sh("python3 -c \"import urllib.request;"
                              "print(urllib.request.urlopen('http://127.0.0.1:9798/metrics').read().decode())\"")
            series = {}
            for line in metrics.splitlines():
                if line.startswith("lnetr_o2iblnd_"):
                    name_labels, value = line.rsplit(" ", 1)
                    series[name_labels] = float(value)
            self.assertGreater(series['lnetr_o2iblnd_rdma_bytes_total{direction="out"}'], 0)
            self.assertGreater(series['lnetr_o2iblnd_tx_messages_total{type="PUT_REQ"}'], 0)
            self.assertGreater(series["lnetr_o2iblnd_completions_total"], 0)
            self.assertEqual(series["lnetr_o2iblnd_bytes_bounced_total"], 0)
            self.assertGreater(series["lnetr_o2iblnd_sink_windows_total"], 0)
            self.assertEqual(series["lnetr_o2iblnd_sink_windows_refused_total"], 0)
            self.assertIn('lnetr_o2iblnd_connections_closed_total{reason="timeout"}', series)
            self.assertIn('lnetr_o2iblnd_rejects_sent_total{reason="CONN_STALE"}', series)
            self.assertTrue(any(k.startswith("lnetr_o2iblnd_connection_credits{") for k in series), series)
        finally:
            control.kill()
            control.wait(20)


    def test_8_stale_key_refused(self):
        """A peer keeps the key of its PUT's sink and RDMA-writes with it
        after the transfer: with per-transfer keys (the default) the device
        refuses it (a memory window, invalidated at PUT_DONE); with
        `remote_keys: pool` the write lands in a router buffer.  The
        PUT itself arrives verified; the router is at rest afterwards and
        routes on."""
        cmd = f"{STALE_KEY} --src {Z} --router {R_IB}@o2ib --to {C}@o2ib1 --size 65536"
        before = self.status()["o2iblnd"]
        rc, out, err = self.guest.run(cmd, timeout=90)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("put=ok ack=ok stale_write=remote access error", out, err)
        st = self.at_rest()
        self.assertGreater(st["o2iblnd"]["sink_windows"], before["sink_windows"])
        self.assertEqual(st["o2iblnd"]["sink_windows_refused"], 0)
        self.xfer(f"{Y}@o2ib", f"o2ib1|{R_IB}@o2ib", f"{C}@o2ib1", "put", 1 << 20, 2)
        # What the default closes: with pool keys the same write succeeds.
        self.topo.stop_router()
        try:
            self.topo.start_router(remote_keys="pool")
            rc, out, err = self.guest.run(cmd, timeout=90)
            self.assertEqual(rc, 0, out + err)
            self.assertIn("put=ok ack=ok stale_write=success", out, err)
        finally:
            self.topo.stop_router()
            self.topo.start_router()

    def test_9_connreq_storm(self):
        """600 CONNREQs from one address, 32 in flight, each naming another
        made-up source NID, while D writes to B (tcp1 -> tcp) through the
        same worker.  The worker takes one connection-manager event a turn,
        so the queue pairs the requests make (slow on soft-RoCE under TCG)
        are made between the turns that forward: D's writes all succeed
        during the storm.  What is let through stays within the
        per-address rate (dataplane.limits.connect_rate: 64 at once, then
        16 a second); anything refused is NO_RESOURCES and counted; nothing
        crashes (this storm found a use-after-free when a worker's
        completion queues grew), the router ends at rest and clients
        connect and transfer."""
        before = self.status()["o2iblnd"]
        t0 = time.monotonic()
        storm = self.guest.spawn(f"exec {PROBE} --src {Z} --dst {R_IB} --data {connreq(src='10.98.128.1')} "
                                 f"--count {STORM} --vary-src --parallel 32")
        rc, doc, out, err = self.peer(f"{D}@tcp1", f"tcp|{R_TCP1}@tcp1", f"put {B}@tcp --size 1048576 --count 4 "
                                      f"--timeout 20", "t")
        during = (doc or {}).get("put", {}) if isinstance(doc, dict) else {}
        storm_running = storm.poll() is None
        self.assertEqual(storm.wait(300), 0)
        elapsed = time.monotonic() - t0
        out = storm.output()[0].strip().splitlines()[-1]
        log(f"CONNREQ storm: {out} in {elapsed:.1f} s; D's 4 writes to B meanwhile "
            f"(storm still running after them: {storm_running}): rc {rc}, ok {during.get('ok')}, "
            f"errors {during.get('errors')}")
        f = dict(kv.split("=", 1) for kv in out.split()[1:])
        reasons = dict(r.split(":") for r in f["reasons"].split(",") if r)
        self.assertEqual(int(f["sent"]), STORM, out)
        self.assertEqual(int(f["established"]) + int(f["rejected"]) + int(f["errors"]), STORM, out)
        self.assertLessEqual(int(f["established"]), 64 + 16 * elapsed + 16, out)
        self.assertEqual(set(reasons) - {"2"}, set(), out)  # refusals: NO_RESOURCES only
        self.assertEqual((rc, during.get("ok"), during.get("errors")), (0, 4, 0), out + err)
        self.assertTrue(storm_running, "the storm ended before D's writes did: not all of them met it")
        st = self.at_rest(timeout=60)
        limited = st["o2iblnd"]["connreqs_rate_limited"] - before["connreqs_rate_limited"]
        self.assertLessEqual(limited, int(reasons.get("2", 0)))
        self.xfer(f"{D}@tcp1", f"tcp|{R_TCP1}@tcp1", f"{B}@tcp", "put", 1 << 20, 2, netns="t")
        self.xfer(f"{Y}@o2ib", f"o2ib1|{R_IB}@o2ib", f"{C}@o2ib1", "put", 1 << 20, 2)
        self.xfer(f"{Y}@o2ib", f"o2ib1|{R_IB}@o2ib", f"{C}@o2ib1", "get", 1 << 20, 2)

    def test_6_o2ib_peer_killed_mid_transfer(self):
        """A (o2ib) killed during a 1 MiB load from B: B sees errors, not a
        hang; the router's credits and buffers come back; traffic resumes
        when A is back."""
        b_route = f"o2ib|{R_TCP}@tcp"
        load = self.guest.spawn(self.topo.peer_cmd(f"{B2}@tcp", b_route,
                                              f"--accept none brw {A}@o2ib --op write --size 1048576 "
                                              f"--concurrency 8 --duration 6 --timeout 10"))
        time.sleep(2.5)
        self.topo.servers["A"].kill(9)
        self.topo.servers["A"].wait(20)
        rc = load.wait(90)
        self.assertIsNotNone(rc, "the load hung")
        self.assertNotEqual(rc, 0, "a load whose target died cannot have succeeded")
        self.at_rest(timeout=60)
        self.topo.start_server("A")
        # Once it has pinged its gateway (within 2 s), the router uses it again.
        end = time.monotonic() + 30
        while True:
            rc, doc, out, err = self.peer(f"{B2}@tcp", b_route, f"put {A}@o2ib --size 1048576 --count 2 --timeout 5")
            if rc == 0 or time.monotonic() > end:
                break
            time.sleep(1)
        self.assertEqual(rc, 0, out + err)
        st = self.at_rest()
        self.assertGreaterEqual(sum(st["o2iblnd"]["closed"].values()), 1)

    def test_9b_an_o2ib_ni_deleted_and_added_back_at_run_time(self):
        """R's o2ib1 NI deleted under a 1 MiB load from Y (o2ib) to C
        (o2ib1): the load sees errors, not a hang; the router comes to rest
        with its o2ib1 transport closed and o2ib untouched.  Added back (its
        RDMA device opened again, every pool registered with it), C is
        reached again, both ways."""
        route = f"o2ib1|{R_IB}@o2ib"
        load = self.guest.spawn(self.topo.peer_cmd(f"{Y}@o2ib", route,
                                                   f"--accept none brw {C}@o2ib1 --op write --size 1048576 "
                                                   f"--concurrency 8 --duration 6 --timeout 10"))
        time.sleep(2.5)
        got = self.topo.request(f"net del {R_IB1}@o2ib1")
        self.assertEqual((got.get("action"), got.get("nids")), ("deleted", [f"{R_IB1}@o2ib1"]), got)
        rc = load.wait(90)
        self.assertIsNotNone(rc, "the load hung")
        self.assertNotEqual(rc, 0, "a load to a deleted net cannot have succeeded")
        st = self.at_rest(timeout=60)
        self.assertNotIn(f"{R_IB1}@o2ib1", [n["nid"] for n in st["nis"]])
        self.assertGreaterEqual(st["o2iblnd"]["closed"]["ni_deleted"], 1, st["o2iblnd"]["closed"])
        self.assertGreaterEqual(st["drops"]["ni_deleted"], 1, st["drops"])
        # Its transport goes once its connections are gone (and the device
        # with it: nothing else holds it).
        workers = len(st["workers"])
        self.wait_for(lambda: self.topo.router.output()[1].count("RDMA transport of NI slot") == workers, 30,
                      "every worker's o2ib1 transport to close")
        self.xfer(f"{Y}@o2ib", f"tcp|{R_IB}@o2ib", f"{B}@tcp", "put", 65536, 2)
        rc, doc, out, err = self.peer(f"{Y}@o2ib", route, f"put {C}@o2ib1 --size 4096 --count 1 --timeout 5")
        self.assertNotEqual(rc, 0, "o2ib1 is gone: " + out + err)
        # Back, as the file has it.
        ni = '{"net": [{"net type": "o2ib1", "local NI(s)": [{"interfaces": {"0": "eth2"}}]}]}'
        got = self.topo.request("net add " + ni)
        self.assertEqual((got.get("action"), got.get("nids")), ("added", [f"{R_IB1}@o2ib1"]), got)
        self.assertIn("RDMA device rxe2 opened", self.topo.router.output()[1])
        for size in (0, 3977, 1 << 20):
            self.xfer(f"{Y}@o2ib", route, f"{C}@o2ib1", "put", size, 2)
            self.xfer(f"{Y}@o2ib", route, f"{C}@o2ib1", "get", size, 2)
        self.xfer(f"{X}@o2ib1", f"o2ib|{R_IB1}@o2ib1", f"{A}@o2ib", "put", 1 << 20, 2)
        st = self.at_rest()
        self.assertIn(f"{R_IB1}@o2ib1", [n["nid"] for n in st["nis"]])
        self.assertEqual(st["o2iblnd"]["post_failures"], 0)
        self.assertEqual(st["o2iblnd"]["cq_errors"], 0)


if __name__ == "__main__":
    unittest.main()
