"""The three-namespace router topology, shared by the router tests, the
router benchmark (tests/bench/router_bench.py) and the demo (deploy/demo).

    a: peer 10.N.1.2@tcp -- r: lnetr-dataplane 10.N.1.1@tcp / 10.N.2.1@tcp1 -- b: peer 10.N.2.3@tcp1

The router runs two workers (CPTs 0 and 1) unless told other cores.  LNet places a peer on the CPT
(sum of its NID's eight bytes) mod 2: A on CPT 0 and B on CPT 1, so every
routed message crosses from one worker to the other through the credit rings.

With direct=True a third veth joins a and b on net tcp2 (10.N.3.1@tcp2,
10.N.3.2@tcp2), so the same two hosts can also talk without the router.
Python 3 standard library only.
"""

import json
import os
import re
import socket
import subprocess
import time

from lnetr_test import Host, build_dir, peer_binary


def dataplane_binary():
    return os.environ.get("LNETR_DATAPLANE") or os.path.join(build_dir(), "dataplane", "lnetr-dataplane")


def control_binary():
    return os.environ.get("LNETR_CONTROL") or os.path.join(build_dir(), "control", "lnetr-control")


def ip(*args):
    subprocess.run(["ip"] + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _unix_request(path, data, timeout=10, half_close=False, fd=None):
    """Send `data` on a Unix socket (with descriptor `fd` beside it, if
    given), read the answer to EOF, parse it as JSON."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    if fd is not None:
        sent = socket.send_fds(s, [data.encode()], [fd])
        data = data[sent:]
    s.sendall(data.encode())
    if half_close:
        s.shutdown(socket.SHUT_WR)
    chunks = []
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
    s.close()
    return json.loads(b"".join(chunks))


def api_request(path, command=None, args=None, text=None, timeout=10):
    """One management-API request on lnetr-control's socket `path` (a
    command and its args, or a raw request text); the response document."""
    doc = text if text is not None else json.dumps({"version": 1, "command": command, "args": args or {}})
    return _unix_request(path, doc, timeout, half_close=True)


def control_request(path, line, fd=None):
    """One request on a dataplane's control socket `path` (a descriptor
    passed with it: capture start's file); its JSON answer."""
    return _unix_request(path, line + "\n", fd=fd)


def scrape_metrics(host, address):
    """GET /metrics from lnetr-control at `address` over HTTP, run inside
    `host`'s namespace: (returncode, content type, body, stderr)."""
    code = ("import sys, urllib.request; r = urllib.request.urlopen('http://%s/metrics', timeout=10); "
            "sys.stdout.write(r.headers.get('Content-Type') + '\\n' + r.read().decode())" % address)
    cp = host.run(["python3", "-c", code], timeout=30)
    ctype, _, body = cp.stdout.partition("\n")
    return cp.returncode, ctype, body, cp.stderr


def parse_metrics(text):
    """Prometheus text exposition -> {(name, frozenset(labels)): value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if not m:
            raise ValueError("unparsable metrics line: %r" % line)
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


RSS_KEY = bytes.fromhex("6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa")


def steer_queue(peer_ip, local_ip, queues):
    """The queue of a DPDK port with `queues` queues and address `local_ip`
    that owns peer `peer_ip` (router/forward.hpp): the Toeplitz hash of the
    two addresses (IPv4 or IPv6) with the default key, its low 6 bits
    modulo the queues."""
    raw = socket.inet_pton(socket.AF_INET6 if ":" in peer_ip else socket.AF_INET, peer_ip) + \
        socket.inet_pton(socket.AF_INET6 if ":" in local_ip else socket.AF_INET, local_ip)
    key = int.from_bytes(RSS_KEY, "big")
    data, bits = int.from_bytes(raw, "big"), len(raw) * 8
    h = 0
    for bit in range(bits):
        if data >> (bits - 1 - bit) & 1:
            h ^= (key >> (len(RSS_KEY) * 8 - 32 - bit)) & 0xffffffff
    return (h % 64) % queues


class Topology:
    """Namespaces <tag>a, <tag>r, <tag>b and their links; removed by down()."""

    def __init__(self, direct=False, dpdk=False, queues=None, ipv6_b=False):
        pid = os.getpid()
        # dpdk: the router's veth ends carry DPDK ports (lnetr's own TCP/IP):
        # no kernel address there, and offloads off on them.  True: both
        # sides; "a" or "b": that side only (the other on kernel sockets).
        self.dpdk = dpdk
        n = pid % 100 * 2 + 21  # odd: A (.1.2@tcp) on CPT 0, B (.2.3@tcp1) on CPT 1
        hb = 3  # B's host byte
        if queues:  # ports with `queues` queues: addresses that put A on queue 0, B on queue 1
            b_addr = "fd00:%x:2::%x" if ipv6_b else "10.%d.2.%d"
            rb_addr = "fd00:%x:2::1" if ipv6_b else "10.%d.2.1"
            n, hb = next((m, h) for m in range(n, n + 2 * 100, 2) for h in range(3, 250)
                         if steer_queue("10.%d.1.2" % (m % 256), "10.%d.1.1" % (m % 256), queues) == 0 and
                         steer_queue(b_addr % (m % 256, h), rb_addr % (m % 256), queues) == 1)
            n %= 256
        self.direct = direct
        self.tag = "lr%d" % pid
        self.ns = {k: self.tag + k for k in "arb"}
        self.a_ip, self.ra_ip = "10.%d.1.2" % n, "10.%d.1.1" % n
        self.b_ip, self.rb_ip = "10.%d.2.%d" % (n, hb), "10.%d.2.1" % n
        # ipv6_b: net tcp1 (B and the router's rb end) on IPv6 addresses only.
        self.ipv6_b = ipv6_b
        if ipv6_b:
            self.b_ip, self.rb_ip = "fd00:%x:2::%x" % (n, hb), "fd00:%x:2::1" % n
        self.a_nid, self.b_nid = self.a_ip + "@tcp", self.b_ip + "@tcp1"
        self.ra_nid, self.rb_nid = self.ra_ip + "@tcp", self.rb_ip + "@tcp1"
        self.a_direct_nid, self.b_direct_nid = "10.%d.3.1@tcp2" % n, "10.%d.3.2@tcp2" % n
        self.if_ra, self.if_rb = "ra%d" % (pid % 100000), "rb%d" % (pid % 100000)

    def _veth(self, ns1, if1, ip1, ns2, if2, ip2, dpdk_end=False):
        tmp1, tmp2 = self.tag + "x", self.tag + "y"
        ip("link", "add", tmp1, "type", "veth", "peer", "name", tmp2)
        for ns, tmp, name, addr, port in ((ns1, tmp1, if1, ip1, False), (ns2, tmp2, if2, ip2, dpdk_end)):
            ip("link", "set", tmp, "netns", ns)
            ip("-n", ns, "link", "set", tmp, "name", name)
            if not port and ":" in addr:  # IPv6: usable at once, without duplicate address detection
                ip("-n", ns, "addr", "add", addr + "/64", "dev", name, "nodad")
            elif not port:
                ip("-n", ns, "addr", "add", addr + "/24", "dev", name)
            if dpdk_end:  # GSO superframes and partial checksums cannot cross a DPDK port
                subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-K", name, "tx", "off", "tso", "off",
                                "gso", "off", "gro", "off"], check=True, stdout=subprocess.DEVNULL)
            ip("-n", ns, "link", "set", name, "up")

    def up(self):
        self.down()
        for ns in self.ns.values():
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
        self._veth(self.ns["a"], "eth0", self.a_ip, self.ns["r"], self.if_ra, self.ra_ip, self.dpdk_side("a"))
        self._veth(self.ns["b"], "eth0", self.b_ip, self.ns["r"], self.if_rb, self.rb_ip, self.dpdk_side("b"))
        if self.direct:
            self._veth(self.ns["a"], "eth1", self.a_direct_nid.split("@")[0],
                       self.ns["b"], "eth1", self.b_direct_nid.split("@")[0])

    def dpdk_side(self, side):
        return self.dpdk is True or self.dpdk == side

    def down(self):
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def host(self, side):
        return Host.netns(self.ns[side])

    def nid(self, side):
        return self.a_nid if side == "a" else self.b_nid

    def gateway(self, side):
        """The router's NID on `side`'s net."""
        return self.ra_nid if side == "a" else self.rb_nid

    def peer_options(self, side, check_interval=1):
        """lnetr-peer options for `side`: the far net through the router."""
        far = "tcp1" if side == "a" else "tcp"
        # A reaches B's IPv6 NIDs through the router only over socklnd V4.
        large = ["--large-nids"] if self.ipv6_b and side == "a" else []
        return ["--route", "%s=%s" % (far, self.gateway(side)), "--router-check-interval", str(check_interval)] + large

    def set_link(self, side, up):
        """Take the router's link towards `side` down or up."""
        r_if = self.if_ra if side == "a" else self.if_rb
        ip("-n", self.ns["r"], "link", "set", r_if, "up" if up else "down")


# The router's nets, routing and buffers (format keys if_ra, if_rb,
# tcp1_lnd, routing), and the whole configuration of a Router.
ROUTER_NETS = """\
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
{tcp1_lnd}routing:
  enable: {routing}
buffers:
  tiny: 128
  small: 256
  large: 32
"""
ROUTER_CONFIG = ROUTER_NETS + """\
dataplane:
  cores: [{cores}]
  main_core: {main_core}
  poll: {poll}
  control_socket: {sock}
  shm_name: /{tag}
  alive_router_check_interval: {check}
  router_ping_timeout: {check}
{dataplane}  socklnd:
    sock_timeout: {sock_timeout}
    conns_per_peer: {conns_per_peer}
{socklnd}{ports}control:
  socket: {api_sock}
  readonly_socket_group: nogroup
  metrics: "{metrics}"
"""


class Router:
    """lnetr-dataplane in namespace r of a Topology, and its control socket."""

    def __init__(self, topo, workdir, routing=1, check=2, sock_timeout=10, poll="adaptive", cores=(0, 1),
                 metrics="off", pmd="net_af_packet", impair=None, zero_copy=True, queues=1, conns_per_peer=1,
                 tso=None, tcp1_lnd=None, tcp1_cpt=None, socklnd=None, limits=None, dataplane=None):
        """socklnd: more dataplane.socklnd keys ({"zc_min_payload": 65536});
        limits: dataplane.limits keys ({"peers": 100}); dataplane: more
        dataplane keys ({"dumpcap": 1})."""
        self.topo = topo
        self.sock = os.path.join(workdir, "dp.sock")
        self.api_sock = os.path.join(workdir, "control.sock")
        self.config = os.path.join(workdir, "lnetr.yaml")
        with open(self.config, "w") as f:
            f.write(ROUTER_CONFIG.format(if_ra=topo.if_ra, if_rb=topo.if_rb, sock=self.sock, routing=routing,
                                         check=check, sock_timeout=sock_timeout, poll=poll, tag=topo.tag, api_sock=self.api_sock,
                                         metrics=metrics, ports=self._ports(topo, pmd, impair, zero_copy, queues, tso),
                                         conns_per_peer=conns_per_peer,
                                         dataplane="".join("  %s: %s\n" % kv for kv in sorted((dataplane or {}).items())),
                                         socklnd="".join("    %s: %s\n" % kv for kv in sorted((socklnd or {}).items())) +
                                         ("" if not limits else "  limits:\n" + "".join(
                                             "    %s: %s\n" % kv for kv in sorted(limits.items()))),
                                         tcp1_lnd=("" if not tcp1_lnd else "        lnd tunables:\n" + "".join(
                                             "          %s: %s\n" % kv for kv in sorted(tcp1_lnd.items()))) +
                                         ("" if tcp1_cpt is None else '        CPT: "%s"\n' % tcp1_cpt),
                                         cores=", ".join(map(str, cores)), main_core=cores[0]))
        self.proc = None

    @staticmethod
    def _ports(topo, pmd, impair, zero_copy=True, queues=1, tso=None):
        """The dataplane.ports section when the topology has DPDK ends: each
        port named as its interface, so the nets' NIs are served by it."""
        if not topo.dpdk:
            return ""
        out = "  ports:\n"
        for i, (side, name, addr) in enumerate((("a", topo.if_ra, topo.ra_ip), ("b", topo.if_rb, topo.rb_ip))):
            if not topo.dpdk_side(side):
                continue
            iface = Router.tap_name(name) if pmd == "net_tap" else name
            qpairs = ",qpairs=%d" % queues if queues > 1 and pmd == "net_af_packet" else ""
            out += "    - name: %s\n      device: \"%s%d,iface=%s%s\"\n      address: \"%s/%d\"\n" % (
                name, pmd, i, iface, qpairs, addr, 64 if ":" in addr else 24)
            if queues > 1:
                out += "      queues: %d\n" % queues
            if not zero_copy:
                out += "      zero_copy: 0\n"
            if tso is not None:
                out += "      tso: %d\n" % tso
            if impair:
                out += "      impair:\n" + "".join("        %s: %s\n" % kv for kv in sorted(impair.items()))
        return out

    @staticmethod
    def tap_name(port_name):
        """The kernel interface a net_tap port creates for the port on
        `port_name`'s side."""
        return "t" + port_name

    def bridge_taps(self):
        """net_tap ports: the PMD created a tap interface in namespace r per
        port; join each to the router's veth end on its side with a bridge,
        so that frames between the tap and the peer's namespace cross the
        kernel bridge."""
        r = self.topo.ns["r"]
        for side, name in (("a", self.topo.if_ra), ("b", self.topo.if_rb)):
            if not self.topo.dpdk_side(side):
                continue
            br = "br" + side
            # The tap's kernel side has the PMD's MAC: give it (and so the
            # bridge) another, or the bridge keeps the PMD's frames for itself.
            ip("-n", r, "link", "set", Router.tap_name(name), "address", "02:00:00:00:%02x:01" % (1 + (side == "b")))
            ip("-n", r, "link", "add", br, "type", "bridge")
            for dev in (name, Router.tap_name(name)):
                ip("-n", r, "link", "set", dev, "master", br)
                ip("-n", r, "link", "set", dev, "up")
            ip("-n", r, "link", "set", br, "up")

    def unbridge_taps(self):
        """Undo bridge_taps once the dataplane is gone (its taps went with it)."""
        for side in ("a", "b"):
            if self.topo.dpdk_side(side):
                subprocess.run(["ip", "-n", self.topo.ns["r"], "link", "del", "br" + side],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self, procs, timeout=30, args=()):
        """Start it through `procs` (a Processes), with more command-line
        `args`; None, or why it did not start."""
        self.proc = procs.start([dataplane_binary(), "--config", self.config] + list(args), host=self.topo.host("r"))
        if self.proc.wait_stderr("forwarding with", timeout=timeout):
            return None
        self.proc.stop()
        return "lnetr-dataplane did not start: rc=%s\n%s" % (self.proc.returncode, self.proc.stderr)

    def start_control(self, procs, timeout=15):
        """lnetr-control beside it, through `procs`: (Proc, None) or (None, why not)."""
        p = procs.start([control_binary(), "--config", self.config], host=self.topo.host("r"))
        if p.wait_stderr("attached to", timeout=timeout):
            return p, None
        p.stop()
        return None, "lnetr-control did not attach: rc=%s\n%s" % (p.returncode, p.stderr)

    def api(self, command, args=None, timeout=10):
        """One management-API request to its lnetr-control; the response."""
        return api_request(self.api_sock, command, args, timeout=timeout)

    def control(self, line):
        """One request on the control socket; its JSON answer."""
        return control_request(self.sock, line)

    def status(self):
        return self.control("status")

    def cpu_seconds(self):
        """User + system CPU time the dataplane process has used."""
        # `ip netns exec` execs the command, so the pid is the dataplane's.
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wait_idle(self, timeout=15):
        """Wait until every credit and buffer is back at its configured value:
        (status, []) or, on timeout, (status, what is still out)."""
        end = time.monotonic() + timeout
        while True:
            st = self.status()
            problems = not_at_rest(st)
            if not problems or time.monotonic() > end:
                return st, problems
            time.sleep(0.2)


def rss_kib(pid):
    """A process's resident set size (KiB)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def status_delta(st0, st1, worker_keys=()):
    """What a router did between two of its status documents: messages
    forwarded and their payload bytes, and the change in each of its
    workers' counters `worker_keys`, summed over the workers."""
    def workers(st, key):
        return sum(w.get(key, 0) for w in st["workers"])

    out = {"messages": st1["statistics"]["route_count"] - st0["statistics"]["route_count"],
           "bytes": st1["statistics"]["route_length"] - st0["statistics"]["route_length"]}
    for key in worker_keys:
        out[key] = workers(st1, key) - workers(st0, key)
    return out


def not_at_rest(st):
    """What in a status document is not back at its configured value."""
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
        if p["available_tx_credits"] != p["max_ni_tx_credits"] or p["available_rtr_credits"] != p["max_rtr_credits"]:
            problems.append("peer %s tx %d/%d rtr %d/%d" % (p["nid"], p["available_tx_credits"], p["max_ni_tx_credits"],
                                                           p["available_rtr_credits"], p["max_rtr_credits"]))
    for p in st.get("ports", []):
        if p["rx_frames_held"] != 0:  # received frames a payload (or a receive queue) still keeps
            problems.append("port %s holds %d received frames" % (p["name"], p["rx_frames_held"]))
    return problems


def brw(host, nid, options, target, op, size, concurrency, duration, json_path, check="full", timeout=30, warmup=0):
    """Run one lnetr-peer brw on `host` as `nid`; (its JSON result or None, CompletedProcess)."""
    argv = [peer_binary(), "--nid", nid] + list(options) + [
        "brw", target, "--op", op, "--size", str(size), "--concurrency", str(concurrency),
        "--duration", str(duration), "--timeout", str(timeout), "--check", check, "--json", json_path]
    if warmup:
        argv += ["--warmup", str(warmup)]
    cp = host.run(argv, timeout=duration + warmup + 4 * timeout + 60)
    try:
        with open(json_path) as f:
            return json.load(f), cp
    except (OSError, ValueError):
        return None, cp
