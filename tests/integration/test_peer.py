"""lnetr-peer against itself, a hand-written kernel node and a fake kernel
router, on loopback addresses 127.0.0.21-29 (needs root).

Addresses: 21 client, 22 server A, 23 server B, 24 second client,
25 fake gateway, 26 hand-written kernel node, 28/29 nobody.
"""

import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

from lnetr_test import (ACK, CONN_CONTROL, GET, LNET_PID, NI_DOWN, NONE_WMD, PING_MATCH_BITS, PUT, REPLY,
                        TEST_PORTAL, FakeGateway, Msg, PeerTestCase, SocklndConn, nid4, parse_yaml, pattern,
                        peer_binary, ping_info)

C = "127.0.0.21@tcp"
A = "127.0.0.22@tcp"
B = "127.0.0.23@tcp"
D = "127.0.0.24@tcp"
GW = "127.0.0.25@tcp"
K = "127.0.0.26@tcp"
DEAD_GW = "127.0.0.28@tcp"
NOBODY = "127.0.0.29@tcp"
REMOTE = "10.99.0.5@tcp7"  # a node behind the (fake) gateway
REMOTE_NI = "10.99.0.1@tcp7"  # the gateway's NI on tcp7

SIZES = [0, 1, 4095, 4096, 4097, 65536, 1048576]


def drops(stats):
    return stats["drops"]


class Ping(PeerTestCase):
    def check_ping_item(self, item, nid):
        self.assertEqual(item["primary nid"], nid)
        self.assertIs(item["Multi-Rail"], True)  # 0x1e has MULTI_RAIL
        self.assertEqual(item["peer_ni"], [{"nid": nid}])
        self.assertGreater(item["rtt_us"], 0)

    def test_ping_each_other(self):
        a = self.start_server(A)
        b = self.start_server(B)
        rc, doc, cp = self.run_peer(C, ["ping", A, "--count", "2"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.assertEqual(len(doc["ping"]), 2)
        for item in doc["ping"]:
            self.check_ping_item(item, A)
        self.assertNotIn("manage", doc)
        rc, doc, cp = self.run_peer(C, ["ping", B])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.check_ping_item(doc["ping"][0], B)
        rc, doc, cp = self.run_peer(D, ["ping", A])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.check_ping_item(doc["ping"][0], A)

        rc, sa = self.stop_server(a)
        self.assertEqual(rc, 0)
        s = sa["server"]
        self.assertEqual(s["pings_answered"], 3)
        self.assertEqual(s["received"]["get"]["messages"], 3)
        self.assertEqual(s["sent"]["reply"]["messages"], 3)
        self.assertEqual(s["sent"]["reply"]["bytes"], 3 * 48)  # 0@lo + one NI
        self.assertEqual(sum(drops(s).values()), 0)
        rc, sb = self.stop_server(b)
        self.assertEqual(sb["server"]["pings_answered"], 1)

    def test_ping_nobody_fails_like_lnetctl(self):
        rc, doc, cp = self.run_peer(C, ["ping", NOBODY, "--count", "2"])
        self.assertNotEqual(rc, 0)
        self.assertNotIn("ping", doc)
        self.assertEqual(len(doc["manage"]), 2)
        for f in doc["manage"]:
            self.assertIn("ping", f)
            self.assertIsNone(f["ping"])
            self.assertLess(f["errno"], 0)
            self.assertTrue(f["descr"].startswith("failed to ping %s: " % NOBODY), f["descr"])
        # Refused at once, then Linux's back-off: -EIO without a new attempt.
        self.assertEqual(doc["manage"][0]["errno"], -111)
        self.assertEqual(doc["manage"][1]["errno"], -5)

    def test_ping_timeout_when_target_is_silent(self):
        # A listener that never answers the handshake: the ping times out
        # after --timeout (lnetctl's -110).
        import socket
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.28", 988))
        s.listen(8)
        self.addCleanup(s.close)
        t0 = time.monotonic()
        rc, doc, cp = self.run_peer(C, ["ping", DEAD_GW, "--timeout", "0.5"])
        self.assertNotEqual(rc, 0)
        self.assertEqual(doc["manage"][0]["errno"], -110)
        self.assertLess(time.monotonic() - t0, 5)

    def test_target_in_every_mode(self):
        # A brw client still answers pings (as every kernel node does).
        a = self.start_server(A)
        brw = self.procs.start(self.peer_argv(C, ["brw", A, "--op", "read", "--size", "4096", "--concurrency", "2",
                                                  "--duration", "3"]))
        deadline = time.monotonic() + 2.5
        doc = None
        while time.monotonic() < deadline:
            rc, doc, cp = self.run_peer(D, ["ping", C, "--timeout", "0.5"])
            if rc == 0:
                break
            time.sleep(0.1)
        self.assertIsNotNone(doc)
        self.assertIn("ping", doc, doc)
        self.assertEqual(doc["ping"][0]["primary nid"], C)
        brw.wait(timeout=30)
        self.assertEqual(brw.returncode, 0, brw.stdout + brw.stderr)
        self.stop_server(a)

    def test_same_nid_twice_is_refused_clearly(self):
        self.start_server(A)
        p = self.procs.start(self.peer_argv(A, ["server"]))
        p.wait(timeout=10)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("Address already in use", p.stderr)

    def test_unprivileged_user_is_told_to_be_root(self):
        cp = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", peer_binary(), "--nid",
                             A, "server", "--duration", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, timeout=30)
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("must run as root", cp.stderr)


class Data(PeerTestCase):
    def test_put_and_get_every_size_verified(self):
        a = self.start_server(A)
        for size in SIZES:
            for op in ("put", "get"):
                rc, doc, cp = self.run_peer(C, [op, A, "--size", str(size), "--count", "2", "--timeout", "10"])
                self.assertEqual(rc, 0, "%s %d: %s %s" % (op, size, cp.stdout, cp.stderr))
                r = doc[op]
                self.assertEqual((r["ok"], r["errors"], r["bytes"]), (2, 0, 2 * size), cp.stdout)
                self.assertGreater(r["latency_us"]["max"], 0)
        # Offsets move the pattern: the server checks PUTs from their offset
        # and answers GETs from their src_offset.
        rc, doc, cp = self.run_peer(C, ["put", A, "--size", "4097", "--offset", "5"])
        self.assertEqual(rc, 0, cp.stdout)
        rc, doc, cp = self.run_peer(C, ["get", A, "--size", "4097", "--offset", "3"])
        self.assertEqual(rc, 0, cp.stdout)

        rc, st = self.stop_server(a)
        self.assertEqual(rc, 0)
        s = st["server"]
        self.assertEqual(s["pattern_errors"], 0)
        self.assertEqual(s["puts_verified"], 2 * len(SIZES) + 1)
        self.assertEqual(s["gets_served"], 2 * len(SIZES) + 1)
        total = 2 * sum(SIZES) + 4097
        self.assertEqual(s["received"]["put"]["bytes"], total)
        self.assertEqual(s["sent"]["reply"]["bytes"], total)
        self.assertEqual(s["sent"]["ack"]["messages"], 2 * len(SIZES) + 1)
        self.assertEqual(sum(drops(s).values()), 0)
        self.assertEqual(s["response_failures"], 0)

    def test_corrupted_put_is_refused_with_mlength_0(self):
        a = self.start_server(A)
        rc, doc, cp = self.run_peer(C, ["put", A, "--size", "4096", "--corrupt", "100"])
        self.assertNotEqual(rc, 0)
        self.assertEqual(doc["put"]["ok"], 0)
        f = doc["failures"][0]
        self.assertEqual(f["error"], "ack_short")
        self.assertEqual(f["mlength"], 0)
        rc, doc, cp = self.run_peer(C, ["put", A, "--size", "4096"])  # the server goes on
        self.assertEqual(rc, 0, cp.stdout)
        rc, st = self.stop_server(a)
        self.assertNotEqual(rc, 0)  # a pattern error was seen
        self.assertEqual(st["server"]["pattern_errors"], 1)
        self.assertEqual(st["server"]["puts_verified"], 1)

    def brw(self, op, size):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "brw.json")
            rc, doc, cp = self.run_peer(C, ["brw", A, "--op", op, "--size", str(size), "--concurrency", "8",
                                            "--duration", "2", "--json", path])
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            with open(path) as f:
                j = json.load(f)
        self.assertEqual((j["op"], j["size"], j["concurrency"]), (op, size, 8))
        self.assertEqual(j["errors"], 0)
        self.assertEqual(j["errors_by_kind"], {})
        self.assertGreater(j["ops"], 8)
        self.assertGreater(j["ops_per_s"], 0)
        self.assertAlmostEqual(j["msgs_per_s"], 2 * j["ops_per_s"], delta=0.01)
        if size:
            self.assertGreater(j["MB_per_s"], 0)
            self.assertAlmostEqual(j["MiB_per_s"] * 1.048576, j["MB_per_s"], delta=0.01 * j["MB_per_s"] + 0.01)
        lat = j["latency_us"]
        self.assertGreater(lat["p50"], 0)
        self.assertLessEqual(lat["min"], lat["p50"])
        self.assertLessEqual(lat["p50"], lat["p90"])
        self.assertLessEqual(lat["p90"], lat["p99"])
        self.assertLessEqual(lat["p99"], lat["max"])
        self.assertEqual(doc["brw"]["ops"], j["ops"])
        return j

    def test_brw_write_and_read(self):
        a = self.start_server(A)
        w = self.brw("write", 1048576)
        r = self.brw("read", 1048576)
        z = self.brw("read", 0)
        rc, st = self.stop_server(a)
        self.assertEqual(rc, 0)
        s = st["server"]
        self.assertEqual(s["pattern_errors"], 0)
        self.assertGreaterEqual(s["puts_verified"], w["ops"])
        self.assertGreaterEqual(s["gets_served"], r["ops"] + z["ops"])


class Wire(PeerTestCase):
    """lnetr-peer's bytes as a hand-written kernel node sees them."""

    def test_kernel_node_by_hand(self):
        a = self.start_server(A)
        k = SocklndConn(K, A, CONN_CONTROL)
        self.addCleanup(k.close)
        ka, kk = nid4(A), nid4(K)
        # The accepting side's HELLO as Linux writes it (v1 frames 10, 21).
        h = k.hello
        self.assertEqual((h["magic"], h["version"]), (0x45726963, 3))
        self.assertEqual((h["src_nid"], h["dst_nid"], h["src_pid"], h["dst_pid"]), (ka, kk, LNET_PID, 0))
        self.assertNotEqual(h["src_incarnation"], 0)
        self.assertEqual((h["dst_incarnation"], h["ctype"], h["nips"]), (0, CONN_CONTROL, 0))

        # Ping (lnetctl's 3960 sink): a REPLY with the kernel node's ping info.
        wmd = (0x18EA46CB800B8647, 0x1C11)
        k.send(Msg(GET, ka, kk, wmd=wmd, match_bits=PING_MATCH_BITS, ptl_index=0, sink_length=3960))
        r = k.recv()
        self.assertEqual((r.type, r.dest_nid, r.src_nid, r.dest_pid, r.src_pid), (REPLY, kk, ka, LNET_PID, LNET_PID))
        self.assertEqual(r.wmd, wmd)
        self.assertEqual(r.raw_header[48:72], bytes(24))  # unused part zero
        self.assertEqual(r.payload, ping_info(ka, 0x1E, seq=1))
        # src_offset and sink_length honoured (truncating MD).
        k.send(Msg(GET, ka, kk, wmd=wmd, match_bits=PING_MATCH_BITS, ptl_index=0, offset=16, sink_length=20))
        self.assertEqual(k.recv().payload, ping_info(ka, 0x1E, seq=1)[16:36])

        # Push: ACKed with the bytes taken, ping match bits echoed.
        push = ping_info(kk, 0x1E, seq=5)
        k.send(Msg(PUT, ka, kk, push, wmd=(1, 2), match_bits=PING_MATCH_BITS, ptl_index=0))
        r = k.recv()
        self.assertEqual((r.type, r.wmd, r.match_bits, r.mlength), (ACK, (1, 2), PING_MATCH_BITS, len(push)))
        self.assertEqual(r.raw_header[60:72], bytes(12))

        # Test data: a good PUT is ACKed with its length, a bad one with 0.
        seed = 0x123456789
        good = pattern(seed, 0, 4096)
        k.send(Msg(PUT, ka, kk, good, wmd=(3, 4), match_bits=seed, ptl_index=TEST_PORTAL))
        r = k.recv()
        self.assertEqual((r.type, r.wmd, r.match_bits, r.mlength), (ACK, (3, 4), seed, 4096))
        bad = bytearray(good)
        bad[4095] ^= 0x40
        k.send(Msg(PUT, ka, kk, bytes(bad), wmd=(5, 6), match_bits=seed, ptl_index=TEST_PORTAL))
        r = k.recv()
        self.assertEqual((r.type, r.wmd, r.mlength), (ACK, (5, 6), 0))
        # A PUT that wants no ACK gets none (the next answer is the GET's).
        k.send(Msg(PUT, ka, kk, pattern(seed, 8, 100), wmd=NONE_WMD, match_bits=seed, ptl_index=TEST_PORTAL,
                   offset=8))
        k.send(Msg(GET, ka, kk, wmd=(7, 8), match_bits=seed + 1, ptl_index=TEST_PORTAL, offset=5, sink_length=777))
        r = k.recv()
        self.assertEqual((r.type, r.wmd), (REPLY, (7, 8)))
        self.assertEqual(r.payload, pattern(seed + 1, 5, 777))

        # Unmatched and unwanted messages are dropped, the stream goes on.
        k.send(Msg(ACK, ka, kk, wmd=(9, 9), match_bits=1, mlength=1))
        k.send(Msg(REPLY, ka, kk, b"0123456789", wmd=(9, 10)))
        k.send(Msg(GET, ka, kk, wmd=(9, 11), ptl_index=7, sink_length=10))
        k.send(Msg(PUT, ka, kk, b"x" * 10, wmd=(9, 12), match_bits=1, ptl_index=0))
        k.send(Msg(GET, nid4("10.9.9.9@tcp5"), kk, wmd=(9, 13), match_bits=PING_MATCH_BITS, sink_length=272))
        k.send(Msg(GET, ka, kk, wmd=(10, 10), match_bits=PING_MATCH_BITS, sink_length=272))
        r = k.recv()
        self.assertEqual((r.type, r.wmd), (REPLY, (10, 10)))
        # For another NID of this net: a protocol error, the connection closes.
        k.send(Msg(GET, nid4("127.0.0.99@tcp"), kk, wmd=(11, 11), match_bits=PING_MATCH_BITS, sink_length=272))
        self.assertTrue(k.closed_by_peer())

        rc, st = self.stop_server(a)
        s = st["server"]
        self.assertNotEqual(rc, 0)  # the bad PUT
        self.assertEqual(s["pattern_errors"], 1)
        self.assertEqual(s["puts_verified"], 2)
        self.assertEqual(s["pushes_received"], 1)
        self.assertEqual(s["pushes_invalid"], 0)
        self.assertEqual(s["protocol_errors"], 1)
        self.assertEqual(drops(s), {"not_for_us": 1, "portal0_no_match": 1, "no_portal": 1, "unmatched_reply": 1,
                                    "unmatched_ack": 1, "reply_too_long": 0, "rx_aborted": 0, "asym_route": 0})

    def test_drop_asym_route(self):
        a = self.start_server(A, ["--route", "tcp7=" + GW, "--router-check-interval", "0", "--drop-asym-route"])
        ka, kk, remote = nid4(A), nid4(K), nid4(REMOTE)
        # A kernel router at GW, our gateway to tcp7, forwards a ping from a
        # node there: answered, back through GW.
        g = SocklndConn(GW, A, CONN_CONTROL)
        self.addCleanup(g.close)
        g.send(Msg(GET, ka, remote, wmd=(1, 1), match_bits=PING_MATCH_BITS, ptl_index=0, sink_length=272))
        r = g.recv()
        self.assertEqual((r.type, r.wmd, r.dest_nid), (REPLY, (1, 1), remote))
        # K is no gateway of ours to tcp7: the same ping through K is dropped
        # (the next, K's own, is answered: the connection goes on).
        k = SocklndConn(K, A, CONN_CONTROL)
        self.addCleanup(k.close)
        k.send(Msg(GET, ka, remote, wmd=(2, 2), match_bits=PING_MATCH_BITS, ptl_index=0, sink_length=272))
        k.send(Msg(PUT, ka, remote, pattern(7, 0, 100), wmd=(2, 3), match_bits=7, ptl_index=TEST_PORTAL))
        k.send(Msg(GET, ka, kk, wmd=(2, 4), match_bits=PING_MATCH_BITS, ptl_index=0, sink_length=272))
        r = k.recv()
        self.assertEqual((r.type, r.wmd, r.dest_nid), (REPLY, (2, 4), kk))
        rc, st = self.stop_server(a)
        s = st["server"]
        self.assertEqual(drops(s)["asym_route"], 2)
        self.assertEqual(s["puts_verified"], 0)

    def test_asym_route_accepted_by_default(self):
        a = self.start_server(A, ["--route", "tcp7=" + GW, "--router-check-interval", "0"])
        ka, kk = nid4(A), nid4(K)
        k = SocklndConn(K, A, CONN_CONTROL)
        self.addCleanup(k.close)
        # Through K, not our gateway to tcp7: taken all the same.
        k.send(Msg(PUT, ka, nid4(REMOTE), pattern(7, 0, 100), wmd=NONE_WMD, match_bits=7, ptl_index=TEST_PORTAL))
        k.send(Msg(GET, ka, kk, wmd=(2, 4), match_bits=PING_MATCH_BITS, ptl_index=0, sink_length=272))
        self.assertEqual(k.recv().wmd, (2, 4))
        rc, st = self.stop_server(a)
        self.assertEqual(drops(st["server"])["asym_route"], 0)
        self.assertEqual(st["server"]["puts_verified"], 1)

    def test_user_space_peer_needs_accept_all(self):
        a = self.start_server(A)  # accept=secure: an unprivileged port is refused
        with self.assertRaises((ConnectionError, OSError)):
            k = SocklndConn(K, A, CONN_CONTROL, src_port=40000)
            k.recv(timeout=2)
        rc, st = self.stop_server(a)
        self.assertEqual(st["server"]["socklnd"]["refused"], {"insecure_port": 1})


class Routes(PeerTestCase):
    """Routes through a fake kernel router on 127.0.0.25 that plays tcp7."""

    def gateway(self, **kw):
        gw = FakeGateway(GW, REMOTE_NI, **kw)
        self.addCleanup(gw.close)
        return gw

    def opts(self, interval=1):
        return ["--route", "tcp7=" + GW, "--router-check-interval", str(interval)]

    def test_routed_ping_put_get(self):
        gw = self.gateway()
        rc, doc, cp = self.run_peer(C, ["ping", REMOTE], self.opts())
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.assertEqual(doc["ping"][0]["primary nid"], REMOTE)
        for op, size in (("put", 65536), ("get", 4097), ("put", 0)):
            rc, doc, cp = self.run_peer(C, [op, REMOTE, "--size", str(size)], self.opts())
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        # The header names the final destination; the bytes went to the gateway.
        msgs = [m for m in gw.messages() if m.dest_nid == nid4(REMOTE)]
        self.assertEqual([m.type for m in msgs], [GET, PUT, GET, PUT])
        for m in msgs:
            self.assertEqual(m.src_nid, nid4(C))
        self.assertEqual(msgs[0].sink_length, 3960)

    def test_router_checker_pings_and_pushes(self):
        gw = self.gateway()
        rc, doc, cp = self.run_peer(C, ["brw", REMOTE, "--op", "write", "--size", "65536", "--concurrency", "8",
                                        "--duration", "2.5", "--stats"], self.opts())
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        checks = [m for m in gw.messages(GET) if m.dest_nid == nid4(GW)]
        pushes = [m for m in gw.messages(PUT) if m.dest_nid == nid4(GW)]
        self.assertGreaterEqual(len(checks), 2)  # at start, then every second
        for m in checks:
            self.assertEqual((m.ptl_index, m.match_bits, m.sink_length), (0, PING_MATCH_BITS, 272))
        self.assertGreaterEqual(len(pushes), 2)  # the gateway is Multi-Rail with discovery
        for m in pushes:
            self.assertEqual((m.ptl_index, m.match_bits), (0, PING_MATCH_BITS))
            self.assertNotEqual(m.wmd, NONE_WMD)
            self.assertEqual(m.payload, ping_info(nid4(C), 0x1E, seq=1))
        g = doc["stats"]["gateways"][0]
        self.assertEqual((g["nid"], g["usable"], g["verdict"]), (GW, True, "up"))
        self.assertGreater(doc["brw"]["ops"], 0)

    def assert_route_goes_down(self, gw_opts, verdict, gateway=GW, usable=False):
        if gw_opts is not None:
            self.gateway(**gw_opts)
        opts = ["--route", "tcp7=" + gateway, "--router-check-interval", "1", "--stats"]
        rc, doc, cp = self.run_peer(C, ["ping", REMOTE, "--count", "3", "--timeout", "0.5"], opts)
        self.assertNotEqual(rc, 0, cp.stdout)
        # Once the first check has answered, no route is usable: -EHOSTUNREACH.
        self.assertEqual(doc["manage"][-1]["errno"], -113, cp.stdout)
        g = doc["stats"]["gateways"][0]
        self.assertEqual((g["usable"], g["verdict"]), (usable, verdict), cp.stdout)

    def test_gateway_not_routing_is_not_used(self):
        self.assert_route_goes_down({"features": 0x1E}, "rte_disabled")

    def test_gateway_with_remote_ni_down_is_not_used(self):
        # The gateway is fine (single-hop asymmetric failure): only its route
        # to tcp7, whose NI it lists DOWN, is not used.
        self.assert_route_goes_down({"remote_status": NI_DOWN}, "up", usable=True)

    def test_dead_gateway_is_not_used(self):
        self.assert_route_goes_down(None, "ping_failed", gateway=DEAD_GW)


if __name__ == "__main__":
    unittest.main()
