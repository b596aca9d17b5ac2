#!/usr/bin/env python3
"""Router benchmark: the same LNet loads between the same two hosts over
four paths, in alternating rounds, so that every path sees the same machine
noise.  Needs root and the release build.

    direct      a --tcp2--> b                      one veth, no router
    ip_forward  a --> r (Linux IP forwarding) --> b  two veths, the kernel
                                                   forwards the TCP segments
    lnetr       a --> r (lnetr-dataplane, adaptive polling) --> b
    lnetr_busy  a --> r (lnetr-dataplane, busy polling) --> b
    lnetr_1w    a --> r (lnetr-dataplane, one worker on core 1, adaptive) --> b

direct is the floor of what the two endpoints cost; ip_forward is what a
router that only forwards packets (and terminates nothing) adds on these
veths; lnetr terminates socklnd on both sides, so every message crosses two
TCP connections, the credit rings between its two workers (A and B are on
different CPTs) and a router buffer.  This machine may have as few cores as
the router has workers, and the two peers need cores too: lnetr_busy shows
what spinning workers cost the peers, lnetr_1w leaves a core to the peers
(one CPT, so no hand-off between workers).

Loads (lnetr-peer brw and ping from namespace a against a server in b):
    ping        ping --count N, median round trip
    put0_c1     0-byte PUTs (PUT + ACK), one in flight: the latency a hop adds
    put0_c64    0-byte PUTs, 64 in flight: the small-message rate
    write1m_c8  1 MiB PUTs, 8 in flight: MB/s
    read1m_c8   1 MiB GETs (GET + REPLY), 8 in flight: MB/s

For every load it also records the machine's busy CPU seconds (/proc/stat,
all processes and softirq) per operation, and for the lnetr paths the
dataplane's own CPU seconds per forwarded LNet message.  The clients run
with --check none (the server still verifies every PUT).

Virtual CPUs that go idle take tens of microseconds to wake, which would
make a path with spinning workers look faster than the direct one.  So
while ping and put0_c1 run, one SCHED_IDLE spinner per core (it runs only
when nothing else wants the core) keeps every core awake on every path.
They are stopped for the throughput loads, where they would take cycles
from the peers (the cores may be hyperthreads of one physical core).
--no-spinners measures latency without them.  Prints a table of
medians and ratios to direct and writes every sample as JSON.

--router-in-guest: lnetr-dataplane in a qemu TCG guest instead, its two
nets on two virtio-net NICs backed by host taps, each tap moved into the
namespace of its peer (client a, server b, both native on the host):

    a: lnetr-peer --tap-- eth0 [guest: lnetr-dataplane, one worker] eth1 --tap-- b: lnetr-peer

Why a guest: MSG_ZEROCOPY on a kernel TCP socket spares the copy only when
the segments leave by a device.  Every path between host namespaces (veth,
loopback, tun) delivers locally, where Linux copies zero-copy data anyway;
the guest kernel's sends to its virtio-net NICs are a real device path.
Paths, in alternating order each round, the same guest and peers:

    guest_copy  dataplane.socklnd.zc_min_payload: 2147483647 (every payload
                copied into the socket)
    guest_zc    zc_min_payload: 16384, the default (payloads of 16 KiB and
                more sent with MSG_ZEROCOPY)
    guest_zc2k  zc_min_payload: 2048, the least Linux takes (not run unless
                named: with --guest-loads write4k_c8,...,write32k_c8 it
                shows from what size zero copy pays)
    guest_dpdk  the same two NICs as DPDK ports (not run unless named):
                bound to uio_pci_generic in the guest (its kernel has no
                VFIO no-IOMMU mode), the virtio PMD with the offloads qemu's
                tap offers (checksums, TSO and LRO), lnetr's own TCP, 2 MB
                hugepages reserved on the guest's kernel command line.  The
                NICs go back to virtio-pci (and their addresses) for the
                kernel paths.  This is what an appliance on virtio runs, and
                the ratios to guest_zc judge DPDK against kernel sockets on
                the same machine.

the dataplane restarted for each.  Loads (--guest-loads): 1 MiB and 64 KiB
brw write and read, 8 in flight; also 4, 8, 16 and 32 KiB writes.  For
each: MB/s; the guest's busy CPU (all its vCPUs,
/proc/stat) per MiB forwarded; the dataplane's user and system CPU per KiB
forwarded; bytes copied per byte forwarded (the workers' bytes_copied);
and the change in every counter under the status sections named *sock*
(socklnd's, zero-copy counters included), with those sections saved whole
before and after.  Under TCG absolute numbers mean little (an emulated CPU
runs the router and qemu's device model shares the host's cores with the
peers): the per-round ratios to guest_copy are what it measures.
The dataplane comes from build/release-vm (the guest's CPU has no
AVX-512; --vm-build), the peers from build/release.
"""

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "vm"))
os.environ.setdefault("LNETR_BUILD", os.path.join(ROOT, "build", "release"))

from lnetr_router import ROUTER_NETS, Router, Topology, brw, ip  # noqa: E402
from lnetr_test import Host, Processes, parse_yaml, peer_binary  # noqa: E402
import lnetr_vm  # noqa: E402

PATHS = ["direct", "ip_forward", "lnetr", "lnetr_busy", "lnetr_1w"]
ROUTERS = {  # path: (poll, worker cores)
    "lnetr": ("adaptive", (0, 1)),
    "lnetr_busy": ("busy", (0, 1)),
    "lnetr_1w": ("adaptive", (1,)),
}
LATENCY_LOADS = {"put0_c1"}  # measured with the cores kept awake (below)
LOADS = [  # name, op, size, concurrency
    ("put0_c1", "write", 0, 1),
    ("put0_c64", "write", 0, 64),
    ("write1m_c8", "write", 1048576, 8),
    ("read1m_c8", "read", 1048576, 8),
]


def say(text=""):
    print(text, flush=True)


def busy_cpu_seconds(spinners=()):
    """CPU seconds the whole machine has spent not idle (every core), less
    what the spinners took."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK") - sum(process_cpu_seconds(p.pid) for p in spinners)


def process_cpu_seconds(pid):
    """User + system CPU seconds of a process (all its threads)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_spinners(procs):
    """One SCHED_IDLE busy loop per core."""
    spinners = []
    for core in range(os.cpu_count()):
        spinners.append(procs.start(["chrt", "--idle", "0", "taskset", "-c", str(core),
                                     "sh", "-c", "while :; do :; done"]))
    return spinners


class Bench:
    def __init__(self, args, topo, procs, workdir):
        self.args, self.topo, self.procs, self.workdir = args, topo, procs, workdir
        n = topo.a_ip.split(".")[1]
        # ip_forward: extra addresses on the same veths, routed through r by the kernel.
        self.fw_a_ip, self.fw_b_ip = "10.%s.5.2" % n, "10.%s.4.3" % n
        self.router = None
        self.servers = {}
        self.spinners = []
        # Pinned peers: every path sees the same placement (scheduling, not the
        # path, otherwise decides single-message latency on a small machine).
        self.client = self.pinned("a", args.client_core)
        self.server = self.pinned("b", args.server_core)

    def pinned(self, side, core):
        h = self.topo.host(side)
        return h if core < 0 else Host(h.prefix + ["taskset", "-c", str(core)], name=h.name)

    # -- set-up ------------------------------------------------------------------------

    def setup_ip_forward(self):
        t = self.topo
        ip("-n", t.ns["a"], "addr", "add", self.fw_a_ip + "/24", "dev", "eth0")
        ip("-n", t.ns["b"], "addr", "add", self.fw_b_ip + "/24", "dev", "eth0")
        ip("-n", t.ns["a"], "route", "add", self.fw_b_ip + "/32", "via", t.ra_ip)
        ip("-n", t.ns["b"], "route", "add", self.fw_a_ip + "/32", "via", t.rb_ip)
        ip("-n", t.ns["r"], "route", "add", self.fw_a_ip + "/32", "via", t.a_ip)
        ip("-n", t.ns["r"], "route", "add", self.fw_b_ip + "/32", "via", t.b_ip)
        subprocess.run(["ip", "netns", "exec", t.ns["r"], "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)

    def endpoints(self, path):
        """(client nid, client options, server nid) of a path."""
        t = self.topo
        if path == "direct":
            return t.a_direct_nid, [], t.b_direct_nid
        if path == "ip_forward":
            return self.fw_a_ip + "@tcp9", [], self.fw_b_ip + "@tcp9"
        return t.a_nid, t.peer_options("a", check_interval=int(self.args.duration * 10) + 1), t.b_nid

    def start_servers(self):
        for path in ("direct", "ip_forward", "lnetr"):
            _, _, nid = self.endpoints(path)
            opts = self.topo.peer_options("b", check_interval=int(self.args.duration * 10) + 1) if path == "lnetr" else []
            s = self.procs.start([peer_binary(), "--nid", nid] + opts + ["server"], host=self.server)
            if not s.wait_stderr("serving", timeout=10):
                raise RuntimeError("server %s did not start: %s" % (nid, s.stop().stderr))
            self.servers[path] = s

    def use_router(self, path):
        """Have the right lnetr-dataplane running (or none) for `path`."""
        want = ROUTERS.get(path)
        if self.router and self.router.kind != want:
            self.router.proc.stop(signal.SIGINT)
            self.router = None
        if want and not self.router:
            r = Router(self.topo, self.workdir, check=int(self.args.duration * 10) + 1, poll=want[0], cores=want[1])
            r.kind = want
            err = r.start(self.procs)
            if err:
                raise RuntimeError(err)
            self.router = r

    def spin(self, on):
        """Start or stop the SCHED_IDLE spinners (latency measurements only)."""
        on = on and self.args.spinners
        if on and not self.spinners:
            self.spinners = start_spinners(self.procs)
        elif not on and self.spinners:
            for p in self.spinners:
                p.stop(signal.SIGKILL)
            self.spinners = []

    # -- measurements --------------------------------------------------------------------

    def ping(self, path):
        nid, opts, target = self.endpoints(path)
        cp = self.client.run([peer_binary(), "--nid", nid] + opts +
                                     ["ping", target, "--count", str(self.args.pings), "--timeout", "5"])
        doc = parse_yaml(cp.stdout) if cp.returncode == 0 else None
        if not doc or "ping" not in doc:
            raise RuntimeError("ping over %s failed: %s%s" % (path, cp.stdout, cp.stderr))
        # The first ping of a fresh client also connects: leave it out.
        rtts = [p["rtt_us"] for p in doc["ping"][1:]]
        return {"rtt_us": statistics.median(rtts), "rtts_us": rtts}

    def load(self, path, op, size, conc):
        nid, opts, target = self.endpoints(path)
        st0 = self.router.status()["statistics"] if self.router else None
        dp0 = self.router.cpu_seconds() if self.router else None
        m0, t0 = busy_cpu_seconds(self.spinners), time.monotonic()
        res, cp = brw(self.client, nid, opts, target, op, size, conc, self.args.duration,
                      os.path.join(self.workdir, "brw.json"), check="none")
        m1, t1 = busy_cpu_seconds(self.spinners), time.monotonic()
        if res is None or res["errors"]:
            raise RuntimeError("brw %s %d over %s failed: %s%s%s" % (op, size, path, res, cp.stdout, cp.stderr))
        out = {"ops_per_s": res["ops_per_s"], "MB_per_s": res["MB_per_s"], "latency_us": res["latency_us"],
               "ops": res["ops"],
               # the brw process's start and connect are in the window too; small next to the load
               "machine_cpu_us_per_op": (m1 - m0) * 1e6 / res["ops"],
               "machine_busy_cores": (m1 - m0) / (t1 - t0)}
        if self.router:
            st1 = self.router.status()["statistics"]
            msgs = st1["route_count"] - st0["route_count"]
            out["forwarded_messages"] = msgs
            out["forwarded_bytes"] = st1["route_length"] - st0["route_length"]
            out["dataplane_cpu_us_per_message"] = (self.router.cpu_seconds() - dp0) * 1e6 / max(msgs, 1)
        return out

    def round(self, order):
        samples = {}
        for path in order:
            self.use_router(path)
            s = {}
            self.spin(True)
            s["ping"] = self.ping(path)
            for name, op, size, conc in LOADS:
                self.spin(name in LATENCY_LOADS)
                s[name] = self.load(path, op, size, conc)
            self.spin(False)
            samples[path] = s
            say("  %-10s ping %6.1f us  put0_c1 p50 %6.1f us  put0_c64 %7.0f ops/s  write %6.1f MB/s  "
                "read %6.1f MB/s" % (path, s["ping"]["rtt_us"], s["put0_c1"]["latency_us"]["p50"],
                                     s["put0_c64"]["ops_per_s"], s["write1m_c8"]["MB_per_s"],
                                     s["read1m_c8"]["MB_per_s"]))
        return samples


# -- summary -----------------------------------------------------------------------------

METRICS = [  # (label, getter, unit, higher is better)
    ("ping rtt", lambda s: s["ping"]["rtt_us"], "us", False),
    ("0 B PUT latency p50, c1", lambda s: s["put0_c1"]["latency_us"]["p50"], "us", False),
    ("0 B PUT rate, c64", lambda s: s["put0_c64"]["ops_per_s"], "ops/s", True),
    ("1 MiB write, c8", lambda s: s["write1m_c8"]["MB_per_s"], "MB/s", True),
    ("1 MiB read, c8", lambda s: s["read1m_c8"]["MB_per_s"], "MB/s", True),
    ("machine CPU per 0 B PUT, c64", lambda s: s["put0_c64"]["machine_cpu_us_per_op"], "us", False),
    ("machine CPU per 1 MiB write", lambda s: s["write1m_c8"]["machine_cpu_us_per_op"], "us", False),
    ("dataplane CPU per message, 0 B c64", lambda s: s["put0_c64"].get("dataplane_cpu_us_per_message"), "us", False),
    ("dataplane CPU per message, 1 MiB write", lambda s: s["write1m_c8"].get("dataplane_cpu_us_per_message"),
     "us", False),
]


def summarise(rounds):
    """Per metric and path: the median over the rounds, the spread, and the
    median of the per-round ratios to direct (each round runs every path
    back to back, so a ratio within a round cancels most machine noise)."""
    summary = {}
    for label, get, unit, better in METRICS:
        row = {"unit": unit, "higher_is_better": better, "median": {}, "min": {}, "max": {}, "ratio_to_direct": {}}
        for path in PATHS:
            vals = [get(r[path]) for r in rounds if path in r and get(r[path]) is not None]
            if not vals:
                continue
            row["median"][path] = statistics.median(vals)
            row["min"][path], row["max"][path] = min(vals), max(vals)
            ratios = [get(r[path]) / get(r["direct"]) for r in rounds
                      if path in r and "direct" in r and get(r[path]) is not None and get(r["direct"])]
            if ratios:
                row["ratio_to_direct"][path] = statistics.median(ratios)
        summary[label] = row
    return summary


def print_table(summary, paths):
    say("\nmedians over the rounds (in brackets: median of the per-round ratios to direct)")
    say("%-40s %6s" % ("", "") + "".join("%20s" % p for p in paths))
    for label, row in summary.items():
        cells = []
        for p in paths:
            v = row["median"].get(p)
            if v is None:
                cells.append("%20s" % "-")
                continue
            r = row["ratio_to_direct"].get(p)
            cells.append("%20s" % ("%.1f" % v + (" (%.2f)" % r if r is not None and p != "direct" else "")))
        say("%-40s %6s" % (label, row["unit"]) + "".join(cells))


def run_rounds(bench, paths, n):
    """n rounds over the paths, the order alternating so that no path always
    runs first (or just after a router start); the router stopped after."""
    rounds = []
    for i in range(n):
        order = paths if i % 2 == 0 else list(reversed(paths))
        say("round %d of %d: %s" % (i + 1, n, ", ".join(order)))
        rounds.append(bench.round(order))
    bench.use_router(None)
    return rounds


# -- --router-in-guest ---------------------------------------------------------------------

GUEST_PATHS = {  # path: dataplane.socklnd.zc_min_payload
    "guest_copy": 2147483647,  # never: every payload copied into the socket
    "guest_zc": 16384,         # the default: payloads of 16 KiB and more by MSG_ZEROCOPY
    "guest_zc2k": 2048,        # the least Linux takes: where zero copy starts to pay (--guest-loads small)
    "guest_dpdk": 16384,       # DPDK ports (GUEST_DPDK), socklnd's default
}
GUEST_DPDK = {"guest_dpdk"}  # paths whose router drives the NICs as DPDK ports
# The DPDK ports' counters that say what the offloads did (status "ports").
GUEST_PORT_KEYS = ["rx_frames", "tx_frames", "tso_frames", "tso_segments", "rx_lro", "large_segments_in",
                   "csum_offloaded", "csum_verified", "tx_chained", "tx_bytes_held"]
GUEST_HUGEPAGES = 384        # 2 MB pages reserved at boot when a DPDK path runs
GUEST_DEFAULT_PATHS = ["guest_copy", "guest_zc"]
GUEST_LOADS = [  # name, op, size, concurrency (--guest-loads: a subset, by name)
    ("write1m_c8", "write", 1048576, 8),
    ("read1m_c8", "read", 1048576, 8),
    ("write64k_c8", "write", 65536, 8),
    ("read64k_c8", "read", 65536, 8),
    ("write4k_c8", "write", 4096, 8),
    ("write8k_c8", "write", 8192, 8),
    ("write16k_c8", "write", 16384, 8),
    ("write32k_c8", "write", 32768, 8),
]
GUEST_DEFAULT_LOADS = ["write1m_c8", "read1m_c8", "write64k_c8", "read64k_c8"]
GUEST_DIR = "/tmp/lnetr-router-bench"  # in the guest: a Unix socket cannot be made on its 9p shares

# One worker; no gateways of its own to check.  Credits and buffers as the
# host mode's router (lnetr_router.ROUTER_CONFIG); a small memory pool as the
# o2ib guest's (tests/vm/o2ib_topology.py), on hugepages for DPDK ports.
GUEST_ROUTER_DATAPLANE = """\
dataplane:
  cores: [0]
  main_core: 1
  poll: adaptive
  hugepages: {hugepages}
  memory_mb: 512
  control_socket: {sock}
  shm_name: /lnetr-router-bench
  alive_router_check_interval: 0
  socklnd:
    zc_min_payload: {zc_min_payload}
{ports}"""
GUEST_PORT = """\
    - name: {name}
      device: "{pci}"
      address: {address}/24
"""

# Run in the guest: the dataplane's status, through lnetr_router's own
# control_request (the source tree is at the same path there).
GUEST_STATUS = ("python3 -c 'import json, sys; sys.path.insert(0, sys.argv[1]); "
                "from lnetr_router import control_request; "
                "print(json.dumps(control_request(sys.argv[2], \"status\")))' %s %s"
                % (os.path.join(os.path.abspath(ROOT), "tests", "integration"), GUEST_DIR + "/dp.sock"))


def stat_busy_seconds(proc_stat):
    """Busy CPU seconds (every CPU, not idle or iowait) from /proc/stat's text."""
    v = [int(x) for x in proc_stat.splitlines()[0].split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def pid_cpu_seconds(pid_stat):
    """(user, system) CPU seconds from /proc/PID/stat's text."""
    fields = pid_stat.rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK"), int(fields[12]) / os.sysconf("SC_CLK_TCK")


def sock_sections(st):
    """The status document's sections whose name says sock (socklnd's, and
    whatever else is added under such a name), whole."""
    return {k: v for k, v in st.items() if "sock" in k.lower()}


def sock_counters(st, path="", inside=False):
    """Every number in the status document under a key whose name contains
    "sock", at any depth: {"socklnd.tx_msgs": n, "workers[0].sock_x.y": n, ...}
    (inside: every number of `st`)."""
    out = {}
    if isinstance(st, dict):
        for k, v in st.items():
            out.update(sock_counters(v, "%s.%s" % (path, k) if path else k, inside or "sock" in k.lower()))
    elif isinstance(st, list):
        for i, v in enumerate(st):
            out.update(sock_counters(v, "%s[%d]" % (path, i), inside))
    elif inside and isinstance(st, (int, float)) and not isinstance(st, bool):
        out[path] = st
    return out


class GuestTopology(Topology):
    """Namespaces a and b of the router topology (its addresses, NIDs and
    peer options), each joined to the guest router by a tap of its own
    instead of a veth to namespace r: a's tap faces the guest's NIC on net
    tcp, b's the NIC on tcp1.  qemu makes the taps (in this namespace) and
    removes them when it exits; attach() moves them into a and b."""

    def __init__(self):
        super().__init__()
        del self.ns["r"]
        self.taps = {"a": self.tag + "ta", "b": self.tag + "tb"}

    def up(self):
        self.down()
        for ns in self.ns.values():
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")

    def attach(self, guest):
        """Each tap into its namespace, addressed and up (moving it takes it
        down; qemu keeps its descriptor); the guest's NICs addressed as the
        router's ends."""
        self.if_ra, self.if_rb = guest.tap_nic(self.taps["a"]), guest.tap_nic(self.taps["b"])
        for side, addr in (("a", self.a_ip), ("b", self.b_ip)):
            ns, tap = self.ns[side], self.taps[side]
            ip("link", "set", tap, "netns", ns)
            ip("-n", ns, "addr", "add", addr + "/24", "dev", tap)
            ip("-n", ns, "link", "set", tap, "up")
        guest.run("ip addr add %s/24 dev %s && ip link set %s up && ip addr add %s/24 dev %s && ip link set %s up"
                  % (self.ra_ip, self.if_ra, self.if_ra, self.rb_ip, self.if_rb, self.if_rb), timeout=60, check=True)
        # Both ways through each tap before anything depends on it.
        for side, target in (("a", self.ra_ip), ("b", self.rb_ip)):
            cp = self.host(side).run(["ping", "-c", "1", "-W", "10", target], timeout=30)
            if cp.returncode != 0:
                raise RuntimeError("no ping from %s to the guest's %s: %s%s" % (side, target, cp.stdout, cp.stderr))


class GuestBench:
    """The guest router and the host's peers; one sample per path and load."""

    def __init__(self, args, topo, guest, procs, workdir):
        self.args, self.topo, self.g, self.procs, self.workdir = args, topo, guest, procs, workdir
        self.dataplane = os.path.join(args.vm_build, "dataplane", "lnetr-dataplane")
        self.router = self.router_pid = self.router_path = None
        self.server = None
        self.client = self.pinned("a", args.client_core)
        self.server_host = self.pinned("b", args.server_core)
        self.idle = {}
        self.loads = args.guest_loads
        # The NICs' PCI functions, and which driver has them now.
        self.pci = {side: self.sh("basename $(readlink -f /sys/class/net/%s/device/..)" % nic).strip()
                    for side, nic in (("a", topo.if_ra), ("b", topo.if_rb))}
        self.nics = "kernel"
        if args.dpdk:
            self.sh("modprobe -d /mods uio_pci_generic && mount -t hugetlbfs nodev /dev/hugepages && "
                    "grep -q '^HugePages_Total: *%d$' /proc/meminfo" % GUEST_HUGEPAGES)

    def pinned(self, side, core):
        h = self.topo.host(side)
        return h if core < 0 else Host(h.prefix + ["taskset", "-c", str(core)], name=h.name)

    def sh(self, cmd, timeout=60):
        return self.g.run(cmd, timeout=timeout, check=True)[1]

    def nics_to(self, kind):
        """The two NICs to DPDK ("dpdk": uio_pci_generic) or back to the
        kernel ("kernel": virtio-pci, the netdevs addressed and up again),
        by sysfs (dpdk-devbind.py takes seconds under TCG)."""
        if self.nics == kind:
            return
        t = self.topo
        override = "uio_pci_generic" if kind == "dpdk" else ""
        script = ["set -e"]
        for pci in self.pci.values():
            dev = "/sys/bus/pci/devices/" + pci
            script += ["echo '%s' > %s/driver_override" % (override, dev),
                       "if [ -e %s/driver ]; then echo %s > %s/driver/unbind; fi" % (dev, pci, dev),
                       "echo %s > /sys/bus/pci/drivers_probe" % pci,
                       "test $(basename $(readlink -f %s/driver)) = %s" % (dev, override or "virtio-pci")]
        self.sh("\n".join(script))
        if kind == "kernel":
            names = {}
            for side, pci in self.pci.items():
                end = time.monotonic() + 30
                while True:
                    rc, out, _ = self.g.run("ls /sys/bus/pci/devices/%s/virtio*/net/" % pci, timeout=30)
                    if rc == 0 and out.split():
                        names[side] = out.split()[0]
                        break
                    if time.monotonic() > end:
                        raise RuntimeError("no netdev on %s after binding it to virtio-pci" % pci)
                    time.sleep(0.5)
            t.if_ra, t.if_rb = names["a"], names["b"]
            self.sh("ip addr add %s/24 dev %s && ip link set %s up && ip addr add %s/24 dev %s && ip link set %s up"
                    % (t.ra_ip, t.if_ra, t.if_ra, t.rb_ip, t.if_rb, t.if_rb))
        self.nics = kind

    def start_server(self):
        t = self.topo
        self.server = self.procs.start([peer_binary(), "--nid", t.b_nid] + t.peer_options("b", check_interval=0) +
                                       ["server"], host=self.server_host)
        if not self.server.wait_stderr("serving", timeout=10):
            raise RuntimeError("server %s did not start: %s" % (t.b_nid, self.server.stop().stderr))

    def use_router(self, path):
        """The guest's dataplane with `path`'s configuration (restarted for it)."""
        if self.router_path == path:
            return
        self.stop_router()
        if path is None:
            return
        t = self.topo
        dpdk = path in GUEST_DPDK
        self.nics_to("dpdk" if dpdk else "kernel")
        ports = "" if not dpdk else "  ports:\n" + "".join(
            GUEST_PORT.format(name=name, pci=self.pci[side], address=addr)
            for side, name, addr in (("a", t.if_ra, t.ra_ip), ("b", t.if_rb, t.rb_ip)))
        config = (ROUTER_NETS.format(if_ra=t.if_ra, if_rb=t.if_rb, tcp1_lnd="", routing=1) +
                  GUEST_ROUTER_DATAPLANE.format(sock=GUEST_DIR + "/dp.sock", zc_min_payload=GUEST_PATHS[path],
                                                hugepages="yes" if dpdk else "no", ports=ports))
        self.sh("mkdir -p %s && cat > %s/%s.yaml <<'EOF'\n%sEOF" % (GUEST_DIR, GUEST_DIR, path, config))
        self.router = self.g.spawn("echo $$ > %s/dp.pid; exec %s --config %s/%s.yaml"
                                   % (GUEST_DIR, self.dataplane, GUEST_DIR, path))
        end = time.monotonic() + 90
        while "forwarding with" not in self.router.output()[1]:
            if self.router.poll() is not None or time.monotonic() > end:
                out, err = self.router.output()
                raise RuntimeError("the guest's lnetr-dataplane (%s) did not start: rc %s\n%s%s"
                                   % (path, self.router.poll(), out, err[-3000:]))
            time.sleep(0.2)
        self.router_pid = int(self.sh("cat %s/dp.pid" % GUEST_DIR))
        self.router_path = path
        # A ping from a to b through it: connects it to the server (and
        # shows the path works) before anything is measured.
        t = self.topo
        end = time.monotonic() + 60
        while True:
            cp = self.client.run([peer_binary(), "--nid", t.a_nid] + t.peer_options("a", check_interval=0) +
                                 ["ping", t.b_nid, "--count", "1", "--timeout", "5"], timeout=60)
            if cp.returncode == 0:
                break
            if time.monotonic() > end:
                raise RuntimeError("no LNet ping from a to b through the guest router: %s%s"
                                   % (cp.stdout, cp.stderr))
            time.sleep(1)
        # What the guest spends with the router idle, in a window taken as
        # the loads' are (the harness' agent polls its 9p share every 5 ms
        # for 2 s after each command, then every 20 ms; the dataplane polls
        # adaptively): the floor under the loads' CPU.
        s0 = self.snapshot(True)
        time.sleep(self.args.duration)
        s1 = self.snapshot(False)
        window = s1["uptime"] - s0["uptime"]
        self.idle.setdefault(path, []).append({
            "window_s": window, "guest_busy_cores": (s1["busy"] - s0["busy"]) / window,
            "dataplane_cores": (s1["user"] + s1["system"] - s0["user"] - s0["system"]) / window})

    def stop_router(self):
        if self.router is not None:
            self.router.kill(signal.SIGTERM)
            try:
                self.router.wait(30)
            except lnetr_vm.GuestTimeout:
                self.router.kill(signal.SIGKILL)
                self.router.wait(30)
            self.g.run("rm -f %s/dp.sock %s/dp.pid" % (GUEST_DIR, GUEST_DIR))
        self.router = self.router_pid = self.router_path = None

    def snapshot(self, before):
        """The guest's uptime and /proc/stat, the dataplane's /proc/PID/stat
        and its status.  The /proc reads bound the CPU window: before the
        load they come after the status request, after it first, so that
        the Python started for the request runs outside the window."""
        procs = "cat /proc/uptime; head -n1 /proc/stat; cat /proc/%d/stat" % self.router_pid
        cmd = "%s; echo; %s" % ((GUEST_STATUS, procs) if before else (procs, GUEST_STATUS))
        out = self.sh(cmd, timeout=60)
        lines = [l for l in out.splitlines() if l.strip()]
        st_line = next(l for l in lines if l.startswith("{"))
        stat_line = next(l for l in lines if l.startswith("cpu "))
        pid_line = next(l for l in lines if l.startswith("%d (" % self.router_pid))
        uptime = float(lines[lines.index(stat_line) - 1].split()[0])
        user, system = pid_cpu_seconds(pid_line)
        return {"status": json.loads(st_line), "uptime": uptime, "busy": stat_busy_seconds(stat_line),
                "user": user, "system": system}

    def load(self, path, op, size, conc):
        t = self.topo
        s0 = self.snapshot(True)
        h0, t0 = busy_cpu_seconds(), time.monotonic()
        res, cp = brw(self.client, t.a_nid, t.peer_options("a", check_interval=0), t.b_nid, op, size, conc,
                      self.args.duration, os.path.join(self.workdir, "brw.json"), check="none")
        h1, t1 = busy_cpu_seconds(), time.monotonic()
        s1 = self.snapshot(False)
        if res is None or res["errors"]:
            raise RuntimeError("brw %s %d over %s failed: %s%s%s" % (op, size, path, res, cp.stdout, cp.stderr))
        st0, st1 = s0["status"], s1["status"]
        fwd = st1["statistics"]["route_length"] - st0["statistics"]["route_length"]
        msgs = st1["statistics"]["route_count"] - st0["statistics"]["route_count"]
        copied = sum(w.get("bytes_copied", 0) for w in st1["workers"]) - \
            sum(w.get("bytes_copied", 0) for w in st0["workers"])
        busy, user, system = s1["busy"] - s0["busy"], s1["user"] - s0["user"], s1["system"] - s0["system"]
        window = s1["uptime"] - s0["uptime"]
        floor = self.idle[path][-1]["guest_busy_cores"]
        c0, c1 = sock_counters(st0), sock_counters(st1)
        p0, p1 = sock_counters(st0.get("ports", []), inside=True), sock_counters(st1.get("ports", []), inside=True)
        mib, kib = fwd / 1048576, fwd / 1024
        return {
            "ops_per_s": res["ops_per_s"], "MB_per_s": res["MB_per_s"], "latency_us": res["latency_us"],
            "ops": res["ops"], "forwarded_messages": msgs, "forwarded_bytes": fwd,
            # The windows hold the brw process's start and connect too; small next to the load.
            "guest_window_s": window, "guest_busy_s": busy, "guest_busy_cores": busy / window,
            "guest_cpu_ms_per_mib": busy * 1e3 / mib if fwd else None,
            # Less the idle floor measured after this dataplane started.
            "guest_idle_busy_cores": floor,
            "guest_cpu_ms_per_mib_net": (busy - floor * window) * 1e3 / mib if fwd else None,
            "dataplane_user_s": user, "dataplane_sys_s": system,
            "dataplane_user_us_per_kib": user * 1e6 / kib if fwd else None,
            "dataplane_sys_us_per_kib": system * 1e6 / kib if fwd else None,
            "bytes_copied": copied, "copied_per_byte": copied / fwd if fwd else None,
            "host_busy_cores": (h1 - h0) / (t1 - t0),
            "sock_deltas": {k: c1[k] - c0[k] for k in c1 if k in c0},
            "sock_before": sock_sections(st0), "sock_after": sock_sections(st1),
            # DPDK ports: frames, TSO and LRO units, checksums offloaded, bytes held.
            "port_deltas": {k: p1[k] - p0[k] for k in p1 if k in p0 and p1[k] != p0[k]},
        }

    def round(self, order):
        samples = {}
        for path in order:
            self.use_router(path)
            s = {}
            for name, op, size, conc in self.loads:
                s[name] = self.load(path, op, size, conc)
            samples[path] = s
            say("  %-10s " % path + "  ".join(
                "%s %6.1f MB/s %5.3f copied/B" % (name.split("_")[0], s[name]["MB_per_s"], s[name]["copied_per_byte"] or 0)
                for name, _, _, _ in self.loads))
        return samples


GUEST_METRICS = [  # (label, key, unit, higher is better)
    ("rate", "MB_per_s", "MB/s", True),
    ("guest CPU per MiB", "guest_cpu_ms_per_mib", "ms", False),
    ("guest CPU per MiB, idle floor out", "guest_cpu_ms_per_mib_net", "ms", False),
    ("dataplane user CPU per KiB", "dataplane_user_us_per_kib", "us", False),
    ("dataplane sys CPU per KiB", "dataplane_sys_us_per_kib", "us", False),
    ("bytes copied per byte", "copied_per_byte", "B/B", False),
]


def guest_summarise(rounds, paths, loads):
    """Per load, metric and path: the median over the rounds, the spread,
    and the medians of the per-round ratios of each path to guest_copy and
    to guest_zc (the paths run back to back in each round, on the same
    guest).  Counters under the *sock* sections whose name says zc or
    zero_copy, and that changed, are summarised too: bytes_* per byte
    forwarded, the others per MiB forwarded; so are the DPDK ports' offload
    counters (GUEST_PORT_KEYS, summed over both ports) per MiB."""
    summary = {}
    for name, _, _, _ in loads:
        rows = [(label, (lambda s, k=key: s[name][k]), unit, better) for label, key, unit, better in GUEST_METRICS]
        zc_keys = sorted({k for r in rounds for p in r.values() for k, v in p[name]["sock_deltas"].items()
                          if v and any(w in k.rsplit(".", 1)[-1].lower() for w in ("zc", "zero_copy"))})
        for k in zc_keys:
            per = 1 if k.rsplit(".", 1)[-1].startswith("bytes") else 1048576
            rows.append(("%s per %s" % (k, "byte" if per == 1 else "MiB"),
                         (lambda s, k=k, per=per: s[name]["sock_deltas"].get(k, 0) * per / s[name]["forwarded_bytes"]
                          if s[name]["forwarded_bytes"] else None), "", None))
        for k in GUEST_PORT_KEYS:
            if any(q.endswith("." + k) for r in rounds for p in r.values() for q in p[name].get("port_deltas", {})):
                rows.append(("ports' %s per MiB" % k,
                             (lambda s, k=k: sum(v for q, v in s[name].get("port_deltas", {}).items()
                                                 if q.endswith("." + k)) * 1048576 / s[name]["forwarded_bytes"]
                              if s[name]["forwarded_bytes"] else None), "", None))
        for label, get, unit, better in rows:
            row = {"unit": unit, "higher_is_better": better, "median": {}, "min": {}, "max": {}}
            for path in paths:
                vals = [get(r[path]) for r in rounds if path in r and get(r[path]) is not None]
                if vals:
                    row["median"][path] = statistics.median(vals)
                    row["min"][path], row["max"][path] = min(vals), max(vals)
            for base in ("guest_copy", "guest_zc"):
                to = row["to_" + base[6:]] = {}
                for path in paths:
                    ratios = [get(r[path]) / get(r[base]) for r in rounds
                              if path != base and path in r and base in r and get(r[path]) is not None
                              and get(r[base])]
                    if ratios:
                        to[path] = statistics.median(ratios)
            summary["%s: %s" % (name, label)] = row
    return summary


def print_guest_table(summary, paths):
    others = [p for p in paths if p != "guest_copy"]
    dpdk = [p for p in paths if p in GUEST_DPDK and "guest_zc" in paths]
    say("\nmedians over the rounds; /copy, /zc: median of the per-round ratios of a path to guest_copy, guest_zc")
    say("%-48s %5s" % ("", "") + "".join("%14s" % p for p in paths) + "".join("%14s" % (p[6:] + "/copy") for p in others)
        + "".join("%14s" % (p[6:] + "/zc") for p in dpdk))
    for label, row in summary.items():
        cells = ["%14s" % ("-" if row["median"].get(p) is None else "%.4g" % row["median"][p]) for p in paths]
        cells += ["%14s" % ("-" if row["to_copy"].get(p) is None else "%.3f" % row["to_copy"][p]) for p in others]
        cells += ["%14s" % ("-" if row["to_zc"].get(p) is None else "%.3f" % row["to_zc"][p]) for p in dpdk]
        say("%-48s %5s" % (label, row["unit"]) + "".join(cells))


def guest_main(args, paths):
    """--router-in-guest: boot the guest with a tap per net, attach the
    taps to namespaces a and b, run the rounds; the guest, the taps (they
    go with qemu) and the namespaces are gone afterwards, whatever
    happened."""
    reason = lnetr_vm.skip_reason()
    if reason:
        sys.exit("router_bench: %s" % reason)
    for binary in (os.path.join(args.vm_build, "dataplane", "lnetr-dataplane"), peer_binary()):
        if not os.access(binary, os.X_OK):
            sys.exit("router_bench: %s is missing (sudo deploy/setup release release-vm)" % binary)
    # SIGTERM ends the run through the clean-up below, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    topo = GuestTopology()
    procs = Processes()
    workdir = tempfile.mkdtemp(prefix="lnetr-bench-")
    rounds, errors, guest_info, idle = [], 0, {}, {}
    t_start = time.monotonic()
    # The guest's commands see the VM build as LNETR_BUILD; the host's peers keep theirs.
    env = {k: v for k, v in os.environ.items() if k.startswith("LNETR_")}
    env["LNETR_BUILD"] = args.vm_build
    try:
        topo.up()
        with lnetr_vm.Guest(nics=0, taps=[topo.taps["a"], topo.taps["b"]], name="router-bench",
                            shares=[args.vm_build], env=env,
                            append="hugepages=%d" % GUEST_HUGEPAGES if args.dpdk else "") as g:
            topo.attach(g)
            _, feats, _ = g.run("ethtool -k %s | grep -E '^(scatter-gather|tcp-segmentation-offload|"
                                "generic-receive-offload|tx-checksumming):'" % topo.if_ra, timeout=30)
            guest_info = {"kernel": g.kernel.version, "boot_s": g.boot_seconds, "smp": g.smp, "mem_mb": g.mem_mb,
                          "nic_offloads": dict(l.split(": ", 1) for l in feats.splitlines() if ": " in l)}
            bench = GuestBench(args, topo, g, procs, workdir)
            bench.start_server()
            rounds = run_rounds(bench, paths, args.rounds)
            idle = bench.idle
            bench.server.stop(signal.SIGINT)
            stats = (parse_yaml(bench.server.stdout) or {}).get("server", {})
            errors += stats.get("pattern_errors", 1)
    finally:
        procs.cleanup()
        topo.down()
        shutil.rmtree(workdir, True)

    summary = guest_summarise(rounds, paths, args.guest_loads)
    print_guest_table(summary, paths)
    say("guest idle floor (router up, no load), median busy vCPUs of %d: " % guest_info.get("smp", 0) + ", ".join(
        "%s %.3f (dataplane %.3f)" % (p, statistics.median(x["guest_busy_cores"] for x in idle[p]),
                                      statistics.median(x["dataplane_cores"] for x in idle[p])) for p in paths if p in idle))
    say("server pattern errors: %d" % errors)
    doc = {
        "benchmark": "router_bench --router-in-guest",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "cpu": cpu_model()},
        "guest": guest_info,
        "args": vars(args),
        "paths": paths,
        "zc_min_payload": {p: GUEST_PATHS[p] for p in paths},
        "loads": [dict(zip(("name", "op", "size", "concurrency"), l)) for l in args.guest_loads],
        "guest_idle": idle,
        "rounds": rounds,
        "summary": summary,
        "server_pattern_errors": errors,
        "wall_s": time.monotonic() - t_start,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    say("wrote %s" % args.json)
    return 1 if errors else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds over every path (default 3)")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of each brw load (default 3; 5 with --router-in-guest)")
    ap.add_argument("--pings", type=int, default=21, help="pings per round and path (default 21)")
    ap.add_argument("--paths", default=None, help="comma-separated subset of " + ",".join(PATHS) +
                    " (with --router-in-guest: of " + ",".join(GUEST_PATHS) + ")")
    ap.add_argument("--router-in-guest", action="store_true",
                    help="the router in a qemu guest on two tap NICs, the peers in namespaces on the taps: "
                    "copied against MSG_ZEROCOPY sends (see the module's docstring)")
    ap.add_argument("--guest-loads", default=",".join(GUEST_DEFAULT_LOADS),
                    help="with --router-in-guest: the loads, comma-separated, of " + ",".join(l[0] for l in GUEST_LOADS) +
                    " (default " + ",".join(GUEST_DEFAULT_LOADS) + ")")
    ap.add_argument("--vm-build", default=os.path.join(os.path.abspath(ROOT), "build", "release-vm"),
                    help="with --router-in-guest: the build the guest's dataplane comes from (default build/release-vm)")
    ap.add_argument("--client-core", type=int, default=-1, help="pin the client to this core (default -1: not pinned)")
    ap.add_argument("--server-core", type=int, default=-1, help="pin the servers to this core (default -1: not pinned)")
    ap.add_argument("--no-spinners", dest="spinners", action="store_false",
                    help="do not keep the cores out of idle with SCHED_IDLE spinners")
    ap.add_argument("--json", default=None,
                    help="where to write the samples and summary (default build/bench/router_bench.json; "
                    "with --router-in-guest build/bench/router_guest_bench.json)")
    args = ap.parse_args()
    guest = args.router_in_guest
    if args.duration is None:
        args.duration = 5.0 if guest else 3.0
    if args.json is None:
        args.json = os.path.join(ROOT, "build", "bench", "router_guest_bench.json" if guest else "router_bench.json")
    known = list(GUEST_PATHS) if guest else PATHS
    if args.paths is None:
        args.paths = ",".join(GUEST_DEFAULT_PATHS if guest else PATHS)
    if os.geteuid() != 0:
        sys.exit("router_bench: needs root (network namespaces, socklnd's privileged ports)")
    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(known)
    if unknown:
        sys.exit("router_bench: unknown path(s) %s; expected some of %s" % (", ".join(sorted(unknown)), ", ".join(known)))
    if guest:
        args.vm_build = os.path.abspath(args.vm_build)
        by_name = {l[0]: l for l in GUEST_LOADS}
        names = [n for n in args.guest_loads.split(",") if n]
        if not names or set(names) - set(by_name):
            sys.exit("router_bench: --guest-loads: expected some of %s" % ",".join(by_name))
        args.guest_loads = [by_name[n] for n in names]
        args.dpdk = bool(GUEST_DPDK & set(paths))
        return guest_main(args, paths)

    topo = Topology(direct=True)
    procs = Processes()
    workdir = tempfile.mkdtemp(prefix="lnetr-bench-")
    rounds = []
    try:
        topo.up()
        bench = Bench(args, topo, procs, workdir)
        bench.setup_ip_forward()
        bench.start_servers()
        rounds = run_rounds(bench, paths, args.rounds)
        errors = 0
        for s in bench.servers.values():
            s.stop(signal.SIGINT)
            stats = (parse_yaml(s.stdout) or {}).get("server", {})
            errors += stats.get("pattern_errors", 1)
    finally:
        procs.cleanup()
        topo.down()
        shutil.rmtree(workdir, True)

    summary = summarise(rounds)
    print_table(summary, paths)
    say("server pattern errors: %d" % errors)
    doc = {
        "benchmark": "router_bench",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "cpu": cpu_model()},
        "args": vars(args),
        "paths": paths,
        "rounds": rounds,
        "summary": summary,
        "server_pattern_errors": errors,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    say("wrote %s" % args.json)
    return 1 if errors else 0


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
