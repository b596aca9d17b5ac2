"""lnetr-dataplane routing on DPDK ports: both of its nets served by its own
TCP/IP on net_af_packet ports over the veths (no kernel address on the
router's ends), the peers on kernel TCP in their namespaces.

    a: lnetr-peer (kernel TCP) -- r: lnetr-dataplane, DPDK port per veth -- b: lnetr-peer (kernel TCP)

The same assertions as the kernel-socket router tests (test_router.py):
pings, 10,000 PUT/GET of every size with every byte checked, credits and
buffers back at rest; then again over impaired links (random loss from
iptables in a and b, and the dataplane's seeded impairment stage: loss,
duplication, reordering, delay).
"""

import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

from lnetr_router import Router, Topology, dataplane_binary, parse_metrics, scrape_metrics
from lnetr_test import PeerTestCase, build_dir, parse_yaml


def decode_binary():
    return os.environ.get("LNETR_DECODE") or os.path.join(build_dir(), "cli", "decode", "lnetr-decode")

SIZES = [0, 1, 4095, 4096, 4097, 65536, 1048576]


class DpdkRouterTestCase(PeerTestCase):
    pmd = "net_af_packet"
    impair = None
    metrics = "off"
    dpdk = True  # or "a": only A's side on a DPDK port
    cores = (0,)
    check_interval = 1
    zero_copy = True
    queues = 1  # per port
    conns_per_peer = 1  # the router's and the peers'
    tso = None  # the ports' `tso` (None: not given)
    tcp1_lnd = None  # the tcp1 NI's `lnd tunables`
    dataplane = None  # more dataplane keys
    ipv6_b = False  # net tcp1 (B, the router's port rb) on IPv6

    def setUp(self):
        super().setUp()
        if not os.access(dataplane_binary(), os.X_OK):
            self.fail("lnetr-dataplane not found at %s" % dataplane_binary())
        self.topo = Topology(dpdk=self.dpdk, queues=self.queues if self.queues > 1 else None, ipv6_b=self.ipv6_b)
        self.topo.up()
        self.addCleanup(self.topo.down)
        self.dir = tempfile.mkdtemp(prefix="lnetr-dpdk-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.router = Router(self.topo, self.dir, cores=self.cores, poll="busy" if len(self.cores) == 1 else "adaptive",
                             pmd=self.pmd, impair=self.impair, metrics=self.metrics, zero_copy=self.zero_copy,
                             queues=self.queues, conns_per_peer=self.conns_per_peer, tso=self.tso,
                             tcp1_lnd=self.tcp1_lnd, dataplane=self.dataplane)
        err = self.router.start(self.procs)
        if err:
            self.fail(err)
        if self.pmd == "net_tap":
            self.router.bridge_taps()

    def drop_randomly(self, chain, probability):
        """iptables in both peers' namespaces: drop TCP on eth0 at random,
        going out (chain OUTPUT) or coming in (INPUT)."""
        for side in ("a", "b"):
            cp = self.topo.host(side).run(["iptables", "-A", chain, "-o" if chain == "OUTPUT" else "-i", "eth0", "-p",
                                           "tcp", "-m", "statistic", "--mode", "random", "--probability",
                                           str(probability), "-j", "DROP"], timeout=30)
            if cp.returncode != 0:
                self.skipTest("iptables statistic match unavailable: " + cp.stderr)

    def peer_options(self, side):
        return self.topo.peer_options(side, self.check_interval) + ["--conns-per-peer", str(self.conns_per_peer)]

    def peer(self, side, args, timeout=600):
        return self.run_peer(self.topo.nid(side), args, self.peer_options(side), host=self.topo.host(side),
                             timeout=timeout)

    def server(self, side):
        return self.start_server(self.topo.nid(side), self.peer_options(side), host=self.topo.host(side))

    def scrape(self):
        """lnetr-control started beside the router, and its /metrics: {(name, labels): value}."""
        _, err = self.router.start_control(self.procs)
        self.assertIsNone(err)
        rc, ctype, body, stderr = scrape_metrics(self.topo.host("r"), self.metrics)
        self.assertEqual(rc, 0, stderr)
        return parse_metrics(body)

    def assert_router_idle(self, timeout=20):
        st, problems = self.router.wait_idle(timeout)
        if problems:
            self.fail("router not idle: " + "; ".join(problems))
        return st

    def cli(self, *args):
        """lnetrctl on the router: (rc, stdout, stderr)."""
        from test_lnetrctl import lnetrctl_binary
        cp = self.topo.host("r").run([lnetrctl_binary(), "--socket", self.router.api_sock] + list(args), timeout=60)
        return cp.returncode, cp.stdout, cp.stderr

    def tshark(self, path, *args):
        cp = subprocess.run(["tshark", "-r", path] + list(args), capture_output=True, text=True, timeout=120)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        return [line.split("\t") for line in cp.stdout.splitlines()]

    def brw_all_sizes(self, count, timeout=30):
        """`count` PUTs then `count` GETs of every size from A to B; the results."""
        b = self.server("b")
        results = {}
        for op in ("write", "read"):
            json_path = os.path.join(self.dir, op + ".json")
            rc, doc, cp = self.peer("a", ["brw", self.topo.b_nid, "--op", op, "--sizes", ",".join(map(str, SIZES)),
                                          "--count", str(count), "--concurrency", "32", "--duration", "900",
                                          "--timeout", str(timeout), "--json", json_path])
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            with open(json_path) as f:
                results[op] = json.load(f)
            self.assertEqual(results[op]["ops"], count, results[op])
            self.assertEqual(results[op]["errors"], 0, results[op])
        rc, stats = self.stop_server(b)
        self.assertEqual(rc, 0, "the server found corrupted data: %s" % stats)
        return results


class DpdkRouting(DpdkRouterTestCase):
    metrics = "127.0.0.1:9798"  # inside namespace r

    def test_ping_through_and_to_the_router(self):
        b = self.server("b")
        rc, doc, cp = self.peer("a", ["ping", self.topo.b_nid, "--timeout", "5"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.assertEqual(doc["ping"][0]["primary nid"], self.topo.b_nid)
        self.stop_server(b)
        for side in ("a", "b"):
            rc, doc, cp = self.peer(side, ["ping", self.topo.gateway(side), "--timeout", "5"])
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            item = doc["ping"][0]
            self.assertEqual([n["nid"] for n in item["peer_ni"]], [self.topo.ra_nid, self.topo.rb_nid])
            self.assertEqual(item["status"], {self.topo.ra_nid: "up", self.topo.rb_nid: "up"})
        # The kernel answers ICMP echo from the router's address: it is
        # lnetr's stack that does (the veth end has no address).
        cp = self.topo.host("a").run(["ping", "-c", "2", "-W", "2", self.topo.ra_ip], timeout=30)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        cp = subprocess.run(["ip", "-n", self.topo.ns["r"], "-4", "addr", "show", "dev", self.topo.if_ra],
                            capture_output=True, text=True)
        self.assertNotIn("inet ", cp.stdout)
        ports = {p["name"]: p for p in self.router.status()["ports"]}
        ra = ports[self.topo.if_ra]
        self.assertGreaterEqual(ra["icmp_echo_replies"], 2, ra)
        self.assertEqual(ra["link"], "up")
        self.assertGreater(ra["arp_replies_out"] + ra["arp_requests_out"], 0, ra)
        self.assertEqual(ra["dropped_malformed"], 0, ra)
        self.assertGreater(ports[self.topo.if_rb]["rx_frames"], 0)
        # lnetr-control exports the ports' counters to Prometheus.
        series = self.scrape()
        for side in (self.topo.if_ra, self.topo.if_rb):
            labels = frozenset({("port", side)})
            self.assertEqual(series[("lnetr_port_link_up", labels)], 1)
            self.assertGreater(series[("lnetr_port_rx_frames_total", labels)], 0)
            self.assertGreater(series[("lnetr_port_tx_bytes_total", labels)], 0)
            self.assertEqual(series[("lnetr_port_rx_malformed_total", labels)], 0)
            self.assertIn(("lnetr_port_tcp_retransmits_total", labels), series)
        self.assertIn(("lnetr_bytes_copied_total", frozenset({("cpt", "0")})), series)
        self.assertIn(("lnetr_bytes_referenced_total", frozenset({("cpt", "0")})), series)

    def test_puts_and_gets_of_every_size_are_delivered_intact(self):
        self.brw_all_sizes(10000)
        st = self.assert_router_idle()
        self.assertGreaterEqual(st["statistics"]["route_count"], 40000)
        per_round = sum(SIZES)
        self.assertGreaterEqual(st["statistics"]["route_length"], 2 * (10000 // len(SIZES)) * per_round)
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])
        self.assertEqual(st["socklnd"]["closed"]["bad_message"], 0)
        self.assert_copies(st, chained=True)

    def assert_copies(self, st, chained, rx_referenced=True):
        """Copies per forwarded byte, as counted.  Payloads of the large pool
        (over 4 KiB) stay in the frames they arrived in (rx_referenced: the
        port's zero_copy is on); smaller ones are copied into the router
        buffer.  Payloads of 16 KiB or more are lent to the TCP send queue
        and go out chained from where they lie where the device takes
        chained frames (af_packet does), else are copied into the outgoing
        frame (af_xdp); smaller ones are copied into the send queue and from
        there into frames.  So, by reference: every large-pool byte received,
        every 16 KiB+ byte sent where frames chain; copied: the rest, at most
        three times each."""
        for p in st["ports"]:
            self.assertEqual(p["zero_copy"], chained, p)
            self.assertEqual(p["rx_zero_copy"], rx_referenced, p)
        forwarded = st["statistics"]["route_length"]
        copied = sum(w["bytes_copied"] for w in st["workers"])
        referenced = sum(w["bytes_referenced"] for w in st["workers"])
        rx_ref = sum(w["rx_bytes_referenced"] for w in st["workers"])
        lent = sum(s for s in SIZES if s >= 16384) / sum(SIZES)
        large = sum(s for s in SIZES if s > 4096) / sum(SIZES)
        ratio = copied / forwarded
        print(f"bytes copied per byte forwarded: {ratio:.3f}, sent by reference: {referenced / forwarded:.3f}, "
              f"received by reference: {rx_ref / forwarded:.3f}")
        for p in st["ports"]:
            print(p["name"], {k: p[k] for k in ("rx_frames_kept", "rx_keep_refused", "rx_frames_budget", "rx_multiseg")},
                  {k: p["tcp"][k] for k in ("out_of_order", "bytes_reassembled", "duplicates", "retransmits")})
        # Bytes that arrived out of order (after a loss) are held copied by
        # TCP until the hole fills: neither kept nor copy-free.
        reassembled = sum(p["tcp"]["bytes_reassembled"] for p in st["ports"])
        lo = hi = 0.0  # copies per forwarded byte of the large ones
        if chained:
            self.assertGreater(referenced, 0.95 * lent * forwarded)
        else:
            self.assertEqual(referenced, 0)
            lo += lent  # each lent byte copied once into its frame
            hi += lent
        if rx_referenced:
            self.assertGreater(rx_ref + reassembled, 0.95 * large * forwarded)
        else:
            self.assertEqual(rx_ref, 0)
            lo += large  # straight into the buffer, or through the receive queue
            hi += 2 * large
        self.assertGreater(ratio, lo)
        self.assertLess(ratio, hi + 3 * (1 - large) + 2 * reassembled / forwarded + 0.05)


# Counts the IPv4 TCP packets from an address by their TOS byte, seen on
# the namespace's interfaces for a while: {tos: count} as JSON.
TOS_CAPTURE = """
import json, socket, sys, time
src, end, seen = socket.inet_aton(sys.argv[1]), time.time() + float(sys.argv[2]), {}
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
s.settimeout(0.2)
print("capturing", file=sys.stderr, flush=True)
while time.time() < end:
    try:
        f = s.recv(65535)
    except socket.timeout:
        continue
    if len(f) >= 34 and f[23] == 6 and f[26:30] == src:
        seen[f[15]] = seen.get(f[15], 0) + 1
print(json.dumps(seen), flush=True)
"""


class DpdkCapture(DpdkRouterTestCase):
    """lnetrctl capture on the router's DPDK ports during a brw,
    docs/operations.md's commands run as written (names replaced by this
    topology's): the file is read by tshark's LNet dissector and by
    lnetr-decode, which both find the PUTs and GETs with their NIDs, and
    holds exactly the frames the capture says it wrote, only those of the
    port and NID asked for.  Then a capture that ends itself at its count,
    and the refusals."""

    def test_a_capture_on_a_dpdk_port_during_a_brw(self):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "vm"))
        from appliance import doc_blocks, shell_commands  # noqa: E402
        _, err = self.router.start_control(self.procs)
        self.assertIsNone(err)
        here = os.path.dirname(os.path.abspath(__file__))
        commands = shell_commands(doc_blocks(os.path.join(here, "..", "..", "docs", "operations.md"))["capture"])
        names = {"dpdk0": self.topo.if_ra, "10.1.0.2@tcp1": self.topo.a_nid, "/tmp/": self.dir + "/"}
        for k, v in names.items():
            commands = [c.replace(k, v) for c in commands]
        pcap = os.path.join(self.dir, "lnet.pcapng")
        b = self.server("b")
        brw = None
        for cmd in commands:
            argv = shlex.split(cmd)
            if argv[0] == "lnetrctl":
                rc, out, err = self.cli(*argv[1:])
                self.assertEqual(rc, 0, "%s: %s%s" % (cmd, out, err))
                shown = parse_yaml(out)["capture"]
            else:
                argv[0] = {"lnetr-decode": decode_binary()}.get(argv[0], argv[0])
                cp = subprocess.run(argv, capture_output=True, text=True, timeout=120)
                self.assertEqual(cp.returncode, 0, "%s: %s" % (cmd, cp.stderr))
                shown = cp.stdout
            if argv[1:3] == ["capture", "start"] and brw is None:
                self.assertEqual((shown["state"], shown["port"], shown["host"], shown["file"]),
                                 ("running", self.topo.if_ra, self.topo.a_ip, pcap), shown)
                # The brw, while the capture runs: PUTs and GETs of three sizes.
                for op in ("write", "read"):
                    rc, doc, cp = self.peer("a", ["brw", self.topo.b_nid, "--op", op, "--sizes", "0,4096,65536",
                                                  "--count", "30", "--concurrency", "4", "--timeout", "30"])
                    self.assertEqual(rc, 0, cp.stdout + cp.stderr)
                brw = True
            elif argv[1:3] == ["capture", "show"]:
                self.assertEqual((shown["state"], shown["count"], shown["dropped"]), ("running", 0, 0), shown)
                self.assertGreater(shown["frames"], 100, shown)
            elif argv[1:3] == ["capture", "stop"]:
                stopped = shown
                self.assertEqual((stopped["state"], stopped["dropped"]), ("off", 0), stopped)
                self.assertGreater(stopped["frames"], 100, stopped)
                self.assertEqual(os.path.getsize(pcap), stopped["bytes"] + self.header_bytes(pcap), stopped)
            elif argv[0] == "tshark":
                tshark = shown
            elif argv[0] == decode_binary():
                decoded = shown
        rc, stats = self.stop_server(b)
        self.assertEqual(rc, 0, "the server found corrupted data: %s" % stats)
        # The file holds what the capture wrote, only port ra's frames to
        # or from A, both ways.
        fields = self.tshark(pcap, "-T", "fields", "-e", "ip.src", "-e", "ip.dst")
        self.assertEqual(len(fields), stopped["frames"])
        ips = {(f[0], f[1]) for f in fields if f[0]}
        self.assertEqual(ips, {(self.topo.a_ip, self.topo.ra_ip), (self.topo.ra_ip, self.topo.a_ip)}, ips)
        # tshark's LNet dissector: PUTs (1) and GETs (2) from A to B, ACKs
        # (0) and REPLYs (3) back, each with both NIDs' addresses.
        seen = set()
        for line in self.tshark(pcap, "-Y", "lnet", "-T", "fields", "-e", "lnet.msg_type", "-e", "lnet.nid.addr",
                                "-E", "occurrence=a"):
            for t, addrs in zip(line[0].split(","), [line[1].split(",")[i:i + 2]
                                                    for i in range(0, len(line[1].split(",")), 2)]):
                seen.add((int(t), tuple(sorted(addrs))))
        pair = tuple(sorted((self.topo.a_ip, self.topo.b_ip)))
        for t in (0, 1, 2, 3):
            self.assertIn((t, pair), seen, seen)
        self.assertIn("LNET", tshark)
        # lnetr-decode: the same messages, by name, with their NIDs.
        for kind in ("PUT", "GET", "ACK", "REPLY"):
            self.assertRegex(decoded, r"LNET %s %s -> %s" % (kind, re.escape(self.topo.a_nid if kind in ("PUT", "GET")
                                                                              else self.topo.b_nid),
                                                           re.escape(self.topo.b_nid if kind in ("PUT", "GET")
                                                                     else self.topo.a_nid)))
        # The last command's capture (every port, 1,000 frames) ends by
        # itself once the peers' traffic fills it.
        b = self.server("b")
        rc, doc, cp = self.peer("a", ["brw", self.topo.b_nid, "--op", "write", "--sizes", "65536", "--count", "100",
                                      "--concurrency", "4", "--timeout", "30"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.stop_server(b)
        rc, out, err = self.cli("capture", "show")
        shown = parse_yaml(out)["capture"]
        self.assertEqual((shown["state"], shown["frames"], shown["count"], shown.get("stopped")),
                         ("off", 1000, 1000, "the count was reached"), shown)
        fields = self.tshark(os.path.join(self.dir, "all.pcapng"), "-T", "fields", "-e", "frame.interface_name")
        self.assertEqual(len(fields), 1000)
        # (pcapng names each port's interface: af_packet's, the kernel's.)
        self.assertEqual({f[0] for f in fields}, {self.topo.if_ra, self.topo.if_rb})
        # Refusals, each naming what is wrong (lnetctl's error block).
        for args, errno, needle in (
                (("capture", "stop"), 2, "no capture is running"),
                (("capture", "start", "--port", "nosuch", pcap), 19, self.topo.if_rb),
                (("capture", "start", "--nid", "10.1.1.1@o2ib", pcap), 22, "o2ib"),
                (("capture", "start", os.path.join(self.dir, "no", "such", "dir.pcapng")), 2, "cannot write")):
            rc, out, err = self.cli(*args)
            self.assertEqual(rc, 1, out + err)
            item = parse_yaml(err)["manage"][0]["capture"]
            self.assertEqual(item["errno"], -errno, err)
            self.assertIn(needle, item["descr"])
        rc, out, err = self.cli("capture", "start", pcap)
        self.assertEqual(rc, 0, err)
        # A second start, even on the running capture's own file, is
        # refused and empties nothing.
        time.sleep(0.5)
        size = os.path.getsize(pcap)
        self.assertGreater(size, 0)
        rc, out, err = self.cli("capture", "start", pcap)
        self.assertEqual(rc, 1, out + err)
        self.assertIn("already", err)
        self.assertGreaterEqual(os.path.getsize(pcap), size)
        self.assertEqual(self.cli("capture", "stop")[0], 0)
        self.assert_router_idle()

    @staticmethod
    def header_bytes(path):
        """The pcapng file's bytes before its first packet block: the
        section header and the interfaces' descriptions."""
        with open(path, "rb") as f:
            data = f.read()
        off = 0
        while off + 8 <= len(data):
            btype, blen = struct.unpack_from("<II", data, off)
            if btype == 6:  # enhanced packet block
                break
            off += blen
        return off


def reserve_hugepages(case, pages):
    """At least `pages` free 2 MB hugepages and a hugetlbfs mount, for the
    test `case`; given back when it ends (the count as it was, the mount
    removed).  Skips the test if the kernel cannot find the memory."""
    path = "/proc/sys/vm/nr_hugepages"
    with open(path) as f:
        before = int(f.read())
    free = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("HugePages_Free:"):
                free = int(line.split()[1])
    if free < pages:
        try:
            with open(path, "w") as f:
                f.write(str(before + pages - free))
        except OSError as e:
            case.skipTest("cannot reserve hugepages here: %s" % e)

        def give_back():
            with open(path, "w") as f:
                f.write(str(before))
        case.addCleanup(give_back)
        with open("/proc/meminfo") as f:
            got = [int(l.split()[1]) for l in f if l.startswith("HugePages_Free:")][0]
        if got < pages:
            case.skipTest("only %d of %d hugepages could be reserved" % (got, pages))
    with open("/proc/mounts") as f:
        mounted = any(l.split()[2] == "hugetlbfs" for l in f)
    if not mounted:
        mnt = tempfile.mkdtemp(prefix="lnetr-huge-")
        case.addCleanup(os.rmdir, mnt)
        cp = subprocess.run(["mount", "-t", "hugetlbfs", "-o", "pagesize=2M", "nodev", mnt], capture_output=True,
                            text=True)
        if cp.returncode != 0:
            case.skipTest("cannot mount hugetlbfs here: %s" % cp.stderr.strip())
        case.addCleanup(subprocess.run, ["umount", mnt])


class DpdkDumpcap(DpdkRouterTestCase):
    """dataplane.dumpcap: Debian's dpdk-dumpcap attaches to the running
    dataplane as a DPDK secondary process and captures a port's frames
    with a libpcap filter during a brw (docs/operations.md's commands, the
    prefix, port and file this test's); the dataplane leaves neither
    hugepage files nor its runtime directory behind."""
    dataplane = {"dumpcap": 1, "hugepages": "yes"}

    def setUp(self):
        reserve_hugepages(self, 256)
        super().setUp()

    def test_dpdk_dumpcap_attaches_and_captures_a_filtered_brw(self):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "vm"))
        from appliance import doc_blocks, shell_commands  # noqa: E402
        here = os.path.dirname(os.path.abspath(__file__))
        commands = shell_commands(doc_blocks(os.path.join(here, "..", "..", "docs", "operations.md"))["dumpcap"])
        self.assertEqual(len(commands), 2, commands)
        names = {"--file-prefix=lnetr": "--file-prefix=" + self.topo.tag, "/tmp/": self.dir + "/"}
        for k, v in names.items():
            commands = [c.replace(k, v) for c in commands]
        listed = self.topo.host("r").run(shlex.split(commands[0]), timeout=120)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertIn("net_af_packet0", listed.stdout)
        self.assertIn("net_af_packet1", listed.stdout)
        pcap = os.path.join(self.dir, "dumpcap.pcapng")
        dumpcap = subprocess.Popen(["ip", "netns", "exec", self.topo.ns["r"]] + shlex.split(commands[1]),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: dumpcap.poll() is not None or dumpcap.kill())
        # Attached once it has made the file (its output is buffered).
        end = time.monotonic() + 60
        while not os.path.exists(pcap) and dumpcap.poll() is None and time.monotonic() < end:
            time.sleep(0.1)
        self.assertTrue(os.path.exists(pcap), dumpcap.poll() is not None and dumpcap.communicate())
        time.sleep(1)
        b = self.server("b")
        rc, doc, cp = self.peer("a", ["brw", self.topo.b_nid, "--op", "write", "--sizes", "65536", "--count", "50",
                                      "--concurrency", "4", "--timeout", "30"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        rc, stats = self.stop_server(b)
        self.assertEqual(rc, 0, "the server found corrupted data: %s" % stats)
        out, err = dumpcap.communicate(timeout=60)
        self.assertEqual(dumpcap.returncode, 0, out + err)
        cp = subprocess.run(["tshark", "-r", pcap, "-T", "fields", "-e", "tcp.port", "-e", "lnet.msg_type"],
                            capture_output=True, text=True, timeout=120)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        lines = [l.split("\t") for l in cp.stdout.splitlines()]
        self.assertGreaterEqual(len(lines), 200)  # -c 200 (it stops at the end of a burst)
        self.assertTrue(all("988" in l[0].split(",") for l in lines), lines[:5])  # -f 'tcp port 988'
        self.assertIn("1", {t for l in lines for t in l[1].split(",")})  # PUTs among them
        self.router.proc.stop()
        with open("/proc/mounts") as f:
            mounts = [l.split()[1] for l in f if l.split()[2] == "hugetlbfs"]
        self.assertEqual([f for m in mounts for f in os.listdir(m) if f.startswith(self.topo.tag)], [])
        self.assertFalse(os.path.exists("/var/run/dpdk/" + self.topo.tag))
        self.assertEqual(self.router.proc.returncode, 0)


class DpdkNets(DpdkRouterTestCase):
    """A net on a DPDK port deleted and added again at run time: the port
    stays open, and the NI added on it carries verified PUTs and GETs."""

    def test_a_ports_net_deleted_and_added_again(self):
        from test_lnetrctl import lnetrctl_binary  # noqa: E402
        _, err = self.router.start_control(self.procs)
        self.assertIsNone(err)

        def cli(*args):
            cp = self.topo.host("r").run([lnetrctl_binary(), "--socket", self.router.api_sock] + list(args), timeout=60)
            self.assertEqual(cp.returncode, 0, "%s: %s%s" % (args, cp.stdout, cp.stderr))

        cli("net", "del", "--net", "tcp1")
        st = self.assert_router_idle()
        self.assertEqual([ni["nid"] for ni in st["nis"]], [self.topo.ra_nid])
        rc, doc, cp = self.peer("a", ["ping", self.topo.b_nid, "--timeout", "2"])
        self.assertNotEqual(rc, 0, cp.stdout)  # (no NI on tcp1)
        cli("net", "add", "--net", "tcp1", "--if", self.topo.if_rb)
        ni = {n["nid"]: n for n in self.router.status()["nis"]}[self.topo.rb_nid]
        self.assertEqual(ni["transport"], "dpdk")
        self.brw_all_sizes(8)
        self.assert_router_idle()


class DpdkRoutingSynFlood(DpdkRouterTestCase):
    metrics = "127.0.0.1:9798"  # inside namespace r

    def test_a_syn_flood_holds_no_slot_and_real_peers_connect(self):
        """30,000 spoofed SYNs in 10 s at A's DPDK port (150 made-up
        addresses, never answering) while A connects and writes 1 MiB
        messages to B: half-open connections stay at their bound, the rest
        get SYN cookies, A's connection is made from one, and every byte
        arrives intact."""
        b = self.server("b")
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flood.py")
        flood = self.procs.start(["python3", script, "syn", self.topo.ra_ip, "988", "10", "30000"],
                                 host=self.topo.host("a"))
        time.sleep(2)  # the half-open connections at their bound before A connects
        json_path = os.path.join(self.dir, "write.json")
        rc, doc, cp = self.peer("a", ["brw", self.topo.b_nid, "--op", "write", "--size", "1048576",
                                      "--concurrency", "4", "--duration", "5", "--timeout", "30", "--json", json_path])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        with open(json_path) as f:
            res = json.load(f)
        self.assertGreater(res["ops"], 0, res)
        self.assertEqual(res["errors"], 0, res)
        port = {p["name"]: p for p in self.router.status()["ports"]}[self.topo.if_ra]
        self.assertLessEqual(port["tcp_half_open"], 256, port)
        self.assertLess(port["tcp_connections"], 300, port)
        self.assertGreater(port["syncookies_sent"], 1000, port)
        self.assertGreaterEqual(port["syncookies_accepted"], 1, port)  # A's connection
        flood.wait(60)
        self.assertEqual(flood.returncode, 0, flood.stderr)
        self.assertEqual(json.loads(flood.stdout)["sent"], 30000)
        rc, stats = self.stop_server(b)
        self.assertEqual(rc, 0, "the server found corrupted data: %s" % stats)
        series = self.scrape()
        labels = frozenset({("port", self.topo.if_ra), ("result", "sent")})
        self.assertGreater(series[("lnetr_port_tcp_syncookies_total", labels)], 1000)
        self.assert_router_idle()


class DpdkRoutingTos(DpdkRouterTestCase):
    """An NI's `tos` on a DPDK port: every TCP segment lnetr's own TCP sends
    from that NI carries it in its IPv4 header; the other NI's carry 0."""
    tcp1_lnd = {"tos": 104}  # 0x68, AF31

    def test_the_nis_tos_is_in_its_segments_headers(self):
        b = self.server("b")
        captures = {}
        for side, ip in (("a", self.topo.ra_ip), ("b", self.topo.rb_ip)):
            captures[side] = self.procs.start(["python3", "-c", TOS_CAPTURE, ip, "8"], host=self.topo.host(side))
            self.assertTrue(captures[side].wait_stderr("capturing", timeout=10), captures[side].stderr_so_far)
        rc, doc, cp = self.peer("a", ["brw", self.topo.b_nid, "--op", "write", "--size", "65536", "--count", "50",
                                      "--concurrency", "4", "--timeout", "10"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        seen = {}
        for side, p in captures.items():
            p.wait(timeout=30)
            seen[side] = {int(k): v for k, v in json.loads(p.stdout.strip().splitlines()[-1]).items()}
        self.stop_server(b)
        self.assertEqual(set(seen["b"]), {0x68}, seen)  # tcp1 (towards B): every segment
        self.assertGreater(seen["b"][0x68], 50, seen)
        self.assertEqual(set(seen["a"]), {0}, seen)     # tcp: the default
        ni = {n["nid"]: n for n in self.router.status()["nis"]}[self.topo.rb_nid]
        self.assertEqual(ni["lnd_tunables"]["tos"], 104)


class DpdkRoutingTwoWorkers(DpdkRouterTestCase):
    """Two workers, A's net on a DPDK port and B's on kernel sockets: A's
    peers are pinned to worker 0 (which polls the port), B hashes to
    worker 1, so every message crosses between the workers' rings."""
    dpdk = "a"
    cores = (0, 1)

    def test_messages_cross_between_the_port_worker_and_a_socket_worker(self):
        self.brw_all_sizes(2000)
        st = self.assert_router_idle()
        self.assertEqual({p["nid"]: p["cpt"] for p in st["peers"]}, {self.topo.a_nid: 0, self.topo.b_nid: 1})
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])
        self.assertEqual([p["name"] for p in st["ports"]], [self.topo.if_ra])
        transports = {n["nid"]: n["transport"] for n in st["nis"]}
        self.assertEqual(transports, {self.topo.ra_nid: "dpdk", self.topo.rb_nid: "socket"})
        # Both workers forwarded: each sends to the peers it owns.
        self.assertTrue(all(w["tx_msgs"] > 0 for w in st["workers"]), st["workers"])


class DpdkRoutingTwoWorkersPortB(DpdkRouterTestCase):
    """B's net on the DPDK port: B's NID hashes to CPT 1, but its
    connections live in worker 0, which polls the port, so B is pinned
    there (A, on kernel sockets, is on CPT 0 by its hash)."""
    dpdk = "b"
    cores = (0, 1)

    def test_the_ports_peers_are_pinned_to_its_worker(self):
        self.brw_all_sizes(1000)
        st = self.assert_router_idle()
        self.assertEqual({p["nid"]: p["cpt"] for p in st["peers"]}, {self.topo.a_nid: 0, self.topo.b_nid: 0})
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])


class DpdkRoutingQueues(DpdkRouterTestCase):
    """Two queues per port, one per worker.  Everything from a peer's
    address belongs to the queue the address hashes to, and so to that
    queue's worker (A's to worker 0, B's to worker 1: the topology's
    addresses are picked so).  net_af_packet's kernel fanout places each
    connection on a queue by its own flow hash instead, so that about half
    the frames arrive on the other queue, whose worker passes them to the
    owner's steering ring; with 9 connections per peer on each side, some
    are certain to."""
    cores = (0, 1)
    queues = 2
    conns_per_peer = 4
    metrics = "127.0.0.1:9798"  # inside namespace r
    count = 2000  # PUTs and GETs

    def test_each_peer_lives_in_the_worker_its_frames_are_steered_to(self):
        self.brw_all_sizes(self.count)
        self.assert_router_idle()
        # Each worker reports its queues' counters when it gets to it: read
        # them once frames have stopped moving (connections close after the
        # peers leave), when every frame passed on has been taken.
        def settled(st):
            return all(sum(q["rx_steered_in"] for q in p["per_queue"]) == p["rx_steered"] for p in st["ports"])
        deadline = time.time() + 30
        st = self.router.status()
        while not settled(st) and time.time() < deadline:
            time.sleep(0.5)
            st = self.router.status()
        self.assertEqual({p["nid"]: p["cpt"] for p in st["peers"]}, {self.topo.a_nid: 0, self.topo.b_nid: 1})
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])
        self.assertEqual([w["conns_misplaced"] for w in st["workers"]], [0, 0])
        ports = {p["name"]: p for p in st["ports"]}
        steered = 0
        for name, owner in ((self.topo.if_ra, 0), (self.topo.if_rb, 1)):
            p = ports[name]
            self.assertEqual(p["queues"], 2)
            self.assertFalse(p["rss"], "net_af_packet has no RSS of its own")
            queues = {q["queue"]: q for q in p["per_queue"]}
            self.assertEqual(sorted(queues), [0, 1])
            self.assertEqual(sum(q["rx_frames"] for q in queues.values()), p["rx_frames"])
            # Every frame passed to the other queue's worker arrived there
            # (those its full ring refused were dropped, and counted).
            self.assertEqual(sum(q["rx_steered_in"] for q in queues.values()), p["rx_steered"], p)
            self.assertEqual(sum(q["rx_steered_out"] for q in queues.values()), p["rx_steered"], p)
            steered += p["rx_steered"]
            # The peer's connections live in its owner's stack only, which
            # took in every segment, and sent every frame: the other
            # worker's took and sent none.
            self.assertEqual(queues[owner]["tcp_segments_in"], p["tcp"]["segments_in"], p)
            self.assertGreater(queues[owner]["tcp_segments_in"], 0, p)
            self.assertEqual(queues[1 - owner]["tcp_segments_in"], 0, p)
            # (On an IPv6 port the other queue sends ICMPv6 only: the port's
            # MLD reports from queue 0, and answers to solicitations from a
            # source that hashes to it, a peer's link-local or unspecified
            # address; no TCP.)
            others = p["nd"]["mld_reports_out"] + p["nd"]["adverts_out"] if ":" in self.topo.gateway(
                "a" if name == self.topo.if_ra else "b") else 0
            self.assertLessEqual(queues[1 - owner]["tx_frames"], others, p)
        self.assertGreater(steered, 0, "no frame arrived on a queue other than its owner's")
        # The kernel's pings of the router's addresses: answered by each
        # peer's owner, whichever queue the echo requests arrive on.
        for side, addr, name in (("a", self.topo.ra_ip, self.topo.if_ra), ("b", self.topo.rb_ip, self.topo.if_rb)):
            cp = self.topo.host(side).run(["ping", "-c", "3", "-i", "0.2", "-W", "2", addr], timeout=30)
            self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        # The same counters, scraped: per port, and per queue.
        series = self.scrape()
        for name in (self.topo.if_ra, self.topo.if_rb):
            labels = frozenset({("port", name)})
            self.assertGreaterEqual(series[("lnetr_port_rx_steered_total", labels)], ports[name]["rx_steered"])
            self.assertIn(("lnetr_port_rx_steer_dropped_total", labels), series)
            per_queue = [series[("lnetr_port_queue_rx_frames_total", labels | {("queue", str(q))})] for q in (0, 1)]
            self.assertEqual(sum(per_queue), series[("lnetr_port_rx_frames_total", labels)])
        # Both workers forwarded: each sends to the peer it owns.
        self.assertTrue(all(w["tx_msgs"] > 0 for w in st["workers"]), st["workers"])


class DpdkRoutingQueuesIpv6(DpdkRoutingQueues):
    """The same with B's net on IPv6: B's address hashes (Toeplitz over the
    two IPv6 addresses) to queue 1, whose worker owns its neighbour
    discovery, pings and connections, whichever queue their frames arrive
    on."""
    ipv6_b = True
    count = 700


class DpdkRoutingIpv6(DpdkRouterTestCase):
    """Net tcp1 on IPv6: B and the router's port rb on fd00:N:2::/64, served
    by lnetr's own TCP/IP over IPv6 (neighbour discovery, ICMPv6 echo, TCP)
    on a DPDK port; A's net stays IPv4 on the other port.  B's NIDs are
    large: A and the router carry them over socklnd V4 (nid16 headers)."""

    ipv6_b = True

    def test_ipv6_net_on_a_dpdk_port_carries_verified_puts_and_gets(self):
        # B's server first: its router checks keep the router's tcp1 NI UP.
        b = self.server("b")
        # A capture of B's frames on port rb (lnetrctl takes the IPv6 NID).
        _, err = self.router.start_control(self.procs)
        self.assertIsNone(err)
        pcap = os.path.join(self.dir, "b.pcapng")
        rc, out, err = self.cli("capture", "start", "--port", self.topo.if_rb, "--nid", self.topo.b_nid, pcap)
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(parse_yaml(out)["capture"]["host"], self.topo.b_ip, out)
        # The kernel in B finds the router's address by neighbour discovery
        # and pings it: lnetr's stack answers (the veth end has no address).
        # (B's server resolved it already: the kernel forgets it first.)
        self.topo.host("b").run(["ip", "-6", "neigh", "flush", "dev", "eth0"], timeout=30)
        cp = self.topo.host("b").run(["ping", "-6", "-c", "2", "-W", "2", self.topo.rb_ip], timeout=30)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        rc, doc, cp = self.peer("a", ["ping", self.topo.b_nid, "--timeout", "5"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.assertEqual(doc["ping"][0]["primary nid"], self.topo.b_nid)
        self.stop_server(b)
        a = self.server("a")
        rc, doc, cp = self.peer("b", ["ping", self.topo.a_nid, "--timeout", "5"])
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.stop_server(a)
        rc, out, err = self.cli("capture", "stop")
        self.assertEqual(rc, 0, out + err)
        stopped = parse_yaml(out)["capture"]
        self.assertGreater(stopped["frames"], 10, stopped)
        # At once (the capture is read after): the router advertises its NI
        # on tcp1 DOWN to A once no node of tcp1 has pinged it for the
        # NI-status timeout (4 s here), as Linux does.
        self.brw_all_sizes(1400)
        # Only B's frames, both ways: its solicitation and echo among them,
        # and the LNet pings with B's large NID (lnetr-decode reads V4 HELLOs
        # and nid16 headers).
        fields = self.tshark(pcap, "-T", "fields", "-e", "ipv6.src", "-e", "ipv6.dst", "-e", "icmpv6.type")
        self.assertEqual(len(fields), stopped["frames"])
        self.assertTrue(all(self.topo.b_ip in (f[0], f[1]) for f in fields), fields)
        self.assertTrue({"135", "136", "128", "129"} <= {f[2] for f in fields}, fields)
        cp = subprocess.run([decode_binary(), pcap], capture_output=True, text=True, timeout=120)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertRegex(cp.stdout, r"LNET GET %s -> %s" % (re.escape(self.topo.a_nid), re.escape(self.topo.b_nid)))
        st = self.assert_router_idle()
        self.assertGreaterEqual(st["statistics"]["route_count"], 5600)
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])
        self.assertEqual(st["socklnd"]["closed"]["bad_message"], 0)
        self.assertEqual({p["nid"] for p in st["peers"]}, {self.topo.a_nid, self.topo.b_nid})
        ports = {p["name"]: p for p in st["ports"]}
        rb, ra = ports[self.topo.if_rb], ports[self.topo.if_ra]
        self.assertGreaterEqual(rb["nd"]["solicits_in"], 1, rb)
        self.assertEqual(rb["nd"]["adverts_out"], rb["nd"]["solicits_in"], rb)
        self.assertGreaterEqual(rb["nd"]["mld_reports_out"], 1, rb)
        self.assertGreaterEqual(rb["icmp_echo_replies"], 2, rb)
        self.assertEqual(rb["arp_requests_in"] + rb["arp_requests_out"], 0, rb)
        self.assertEqual(rb["dropped_malformed"], 0, rb)
        self.assertGreater(rb["tcp"]["segments_in"], 1000, rb)
        # A's port stays IPv4.
        self.assertEqual(ra["nd"], {"solicits_in": 0, "adverts_out": 0, "solicits_out": 0, "mld_reports_out": 0}, ra)
        self.assertEqual(ra["dropped_malformed"], 0, ra)


class DpdkRoutingLong(DpdkRouterTestCase):
    """A long transfer through the DPDK ports, every byte checked: 10 GiB
    (5 GiB of PUTs, 5 GiB of GETs) on optimised builds, 1 GiB on debug and
    sanitizer builds (LNETR_LONG_GIB overrides)."""
    pmd = "net_af_xdp"

    def test_long_transfer_verified(self):
        optimized = os.environ.get("LNETR_OPTIMIZED") == "1"
        gib = float(os.environ.get("LNETR_LONG_GIB", "10" if optimized else "1"))
        count = int(gib * 1024 / 2)  # 1 MiB messages, half each way
        b = self.server("b")
        done = 0
        for op in ("write", "read"):
            json_path = os.path.join(self.dir, op + ".json")
            rc, doc, cp = self.peer("a", ["brw", self.topo.b_nid, "--op", op, "--size", "1048576",
                                          "--count", str(count), "--concurrency", "8", "--duration", "3600",
                                          "--timeout", "60", "--check", "full", "--json", json_path], timeout=3600)
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
            with open(json_path) as f:
                res = json.load(f)
            self.assertEqual((res["ops"], res["errors"]), (count, 0), res)
            done += res["bytes"]
        rc, stats = self.stop_server(b)
        self.assertEqual(rc, 0, "the server found corrupted data: %s" % stats)
        self.assertGreaterEqual(done, int(gib * (1 << 30)))
        st = self.assert_router_idle()
        self.assertGreaterEqual(st["statistics"]["route_length"], done)
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])
        self.assertEqual(st["socklnd"]["closed"]["bad_message"], 0)


class DpdkRoutingAfXdp(DpdkRouterTestCase):
    """The same router on net_af_xdp ports (XDP sockets on the veths)."""
    pmd = "net_af_xdp"

    def test_puts_and_gets_through_af_xdp_ports(self):
        self.brw_all_sizes(2000)
        st = self.assert_router_idle()
        self.assertEqual(st["socklnd"]["closed"]["bad_message"], 0)
        self.assertTrue(all(p["device"].startswith("net_af_xdp") for p in st["ports"]), st["ports"])
        # af_xdp takes no chained frames (in this DPDK): every byte is copied
        # into the frame it leaves in.
        DpdkRouting.assert_copies(self, st, chained=False)


class DpdkRoutingCopying(DpdkRouterTestCase):
    """The same router with its ports' zero_copy off: every payload byte is
    copied in and out, and nothing is kept by reference."""
    zero_copy = False

    def test_puts_and_gets_copied(self):
        self.brw_all_sizes(1000)
        st = self.assert_router_idle()
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])
        DpdkRouting.assert_copies(self, st, chained=False, rx_referenced=False)


class DpdkRoutingTap(DpdkRouterTestCase):
    """The same router on net_tap ports, whose tap interfaces are bridged to
    the veths.  net_tap offers IPv4 and TCP checksum offload and TCP
    segmentation offload: lnetr leaves the checksums of what it sends to the
    device, skips summing what the device verified, and hands it frames of
    several segments to cut, and every byte still arrives intact at the
    kernel peers (`tso: 1`: net_tap's segmentation is the PMD's own
    software, so lnetr does not use it unless asked)."""
    pmd = "net_tap"
    tso = True
    metrics = "127.0.0.1:9798"  # inside namespace r

    def setUp(self):
        super().setUp()
        self.drop_randomly("INPUT", 0.005)  # some of the segments the device cut are lost

    def test_checksums_and_segmentation_offloaded_to_the_device(self):
        self.brw_all_sizes(1000)
        st = self.assert_router_idle()
        self.assertEqual(st["socklnd"]["closed"]["bad_message"], 0)
        for p in st["ports"]:
            self.assertTrue(p["device"].startswith("net_tap"), p)
            self.assertEqual(p["checksum_offload"], {"tx_ipv4": True, "tx_tcp": True, "rx": True}, p)
            self.assertGreater(p["csum_offloaded"], 10000, p)
            self.assertGreater(p["csum_verified"], 10000, p)
            self.assertEqual(p["dropped_malformed"], 0, p)
            # Frames chained from router buffers, summed by the device.
            self.assertTrue(p["zero_copy"], p)
            self.assertGreater(p["tx_chained"], 1000, p)
            # (each port sends one way's: the PUTs' payloads, or the GETs')
            self.assertGreater(p["bytes_referenced"], 0.9 * (1000 // len(SIZES)) * (65536 + 1048576), p)
            # Segmentation offload: frames of several segments, cut by the
            # device (each on the wire a segment of at most the MTU).
            self.assertTrue(p["tso"], p)
            self.assertGreater(p["tso_frames"], 100, p)
            self.assertGreater(p["tso_segments"], 2 * p["tso_frames"], p)
            self.assertGreater(p["tcp"]["retransmits"], 0, p)  # repaired, one segment at a time
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])
        # lnetr-control exports them (the router is idle: nothing moves between the two reads).
        series = self.scrape()
        for p in st["ports"]:
            labels = frozenset({("port", p["name"])})
            self.assertEqual(series[("lnetr_port_tso_frames_total", labels)], p["tso_frames"])
            self.assertEqual(series[("lnetr_port_tso_segments_total", labels)], p["tso_segments"])


class DpdkRoutingTapDefault(DpdkRouterTestCase):
    """net_tap ports without `tso` given: the PMD's segmentation is software
    and costs more than lnetr's own, so it stays off; lnetr sends one
    segment a frame, checksums still offloaded."""
    pmd = "net_tap"

    def test_no_segmentation_offload_unless_asked(self):
        self.brw_all_sizes(100)
        st = self.assert_router_idle()
        for p in st["ports"]:
            self.assertFalse(p["tso"], p)
            self.assertEqual((p["tso_frames"], p["tso_segments"], p["tso_cut_here"]), (0, 0, 0), p)
            self.assertEqual(p["checksum_offload"], {"tx_ipv4": True, "tx_tcp": True, "rx": True}, p)
            self.assertGreater(p["tx_chained"], 10, p)


class DpdkRoutingImpaired(DpdkRouterTestCase):
    """Seeded loss, duplication, reordering and delay in the router's
    receive path, and random loss from iptables in both peers' namespaces."""
    impair = {"seed": 7, "loss": 0.01, "duplicate": 0.01, "reorder": 0.02, "delay_us": 200}

    def setUp(self):
        super().setUp()
        self.drop_randomly("OUTPUT", 0.01)

    def test_every_message_delivered_intact_over_lossy_links(self):
        self.brw_all_sizes(2000, timeout=60)
        st = self.assert_router_idle(timeout=60)
        self.assertEqual(st["socklnd"]["closed"]["bad_message"], 0)
        self.assertEqual(st["statistics"]["drop_count"], 0, st["drops"])
        # The impairment stage did act on both ports, and the iptables rules dropped.
        for p in st["ports"]:
            for what in ("dropped", "duplicated", "reordered", "delayed"):
                self.assertGreater(p["impair"][what], 0, p)
        for side in ("a", "b"):
            cp = self.topo.host(side).run(["iptables", "-L", "OUTPUT", "-v", "-x", "-n"], timeout=30)
            rule = [l for l in cp.stdout.splitlines() if "statistic" in l]
            self.assertTrue(rule and int(rule[0].split()[0]) > 0, cp.stdout)


if __name__ == "__main__":
    unittest.main()
