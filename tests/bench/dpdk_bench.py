#!/usr/bin/env python3
"""DPDK benchmark: the router's two transports and the raw forwarding
ceiling of the same ports, side by side on one topology, in alternating
rounds.  Needs root and the release build.

    a: lnetr-peer (kernel TCP) -- r -- b: lnetr-peer (kernel TCP)

The router's veth ends have tx checksum/TSO/GSO/GRO off on every path (a
DPDK port needs that, and the paths must share one topology).  Every router
path runs one worker on the same core.

    kernel          lnetr-dataplane on kernel TCP sockets (addresses on r's veths)
    af_xdp          lnetr-dataplane on DPDK net_af_xdp ports, its own TCP/IP (large
                    payloads kept in the frames they arrived in, copied into frames sent)
    af_packet       the same on net_af_packet ports (large payloads kept in their
                    received frames and chained from there into frames sent: zero_copy)
    af_packet_copy  the same with zero_copy: 0 (every byte copied in and out)
    tap             the same on net_tap ports bridged to the veths: checksums and
                    TCP segmentation left to the device (the PMD's software GSO)
    tap_no_tso      the same with tso: 0 (checksums offloaded, one segment a frame)
    ceiling_af_xdp  dpdk-testpmd io-forwarding between the same two veths
                    (net_af_xdp), an iperf3 TCP stream from a to b across it
    ceiling_af_packet  the same with net_af_packet

Loads (lnetr-peer brw from a against a server in b, --check none on the
client; the server verifies every PUT): 0-byte PUTs 64 in flight (message
rate), 1 MiB PUTs and GETs 8 in flight (MB/s).  For the router paths it
records the dataplane's CPU per forwarded message and per forwarded KiB,
and bytes_copied, bytes_referenced (sent) and rx_bytes_referenced (received) per
forwarded byte.  The ceilings carry iperf3, not LNet:
they bound what any forwarder on these ports could move.

Prints the medians and the per-round ratios to `kernel` and to the ceiling
of the same PMD; writes every sample as JSON.
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
sys.path.insert(0, HERE)
os.environ.setdefault("LNETR_BUILD", os.path.join(ROOT, "build", "release"))

from lnetr_router import Router, Topology, brw, ip, status_delta  # noqa: E402
from lnetr_test import Processes, parse_yaml, peer_binary  # noqa: E402
from router_bench import busy_cpu_seconds, cpu_model, say  # noqa: E402

PATHS = ["kernel", "af_xdp", "af_packet", "af_packet_copy", "tap", "tap_no_tso", "ceiling_af_xdp",
         "ceiling_af_packet"]
WORKER_CORE = 1
LOADS = [  # name, op, size, concurrency
    ("put0_c64", "write", 0, 64),
    ("write1m_c8", "write", 1048576, 8),
    ("read1m_c8", "read", 1048576, 8),
]


def user_system_seconds(pid):
    """User and system CPU seconds of a process.  On veth, a DPDK port's
    transmit kicks run the receiving namespace's kernel TCP in this
    process's system time, so the two are reported apart."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


class Bench:
    def __init__(self, args, topo, procs, workdir):
        self.args, self.topo, self.procs, self.workdir = args, topo, procs, workdir
        n = topo.a_ip.split(".")[1]
        # The ceilings bridge a and b at layer 2: a shared subnet for iperf3.
        self.l2_a_ip, self.l2_b_ip = "10.%s.9.1" % n, "10.%s.9.2" % n
        ip("-n", topo.ns["a"], "addr", "add", self.l2_a_ip + "/24", "dev", "eth0")
        ip("-n", topo.ns["b"], "addr", "add", self.l2_b_ip + "/24", "dev", "eth0")
        self.iperf_server = procs.start(["iperf3", "-s"], host=topo.host("b"))
        self.current = None  # (path, Router or testpmd Proc)
        self.server = None

    def router_addresses(self, on):
        t = self.topo
        for name, addr in ((t.if_ra, t.ra_ip), (t.if_rb, t.rb_ip)):
            if on:
                ip("-n", t.ns["r"], "addr", "add", addr + "/24", "dev", name)
            else:
                ip("-n", t.ns["r"], "addr", "flush", "dev", name)

    def stop_current(self):
        if not self.current:
            return
        path, thing = self.current
        if self.server:
            self.server.stop(signal.SIGINT)
            stats = (parse_yaml(self.server.stdout) or {}).get("server", {})
            self.pattern_errors += stats.get("pattern_errors", 1)
            self.server = None
        thing.proc.stop() if isinstance(thing, Router) else thing.stop(signal.SIGINT)
        if path.startswith("tap"):
            thing.unbridge_taps()
        # The next path's router may answer from another MAC (net_tap's).
        for side in ("a", "b"):
            ip("-n", self.topo.ns[side], "neigh", "flush", "all")
        if path == "kernel":
            self.router_addresses(False)
        self.current = None
        time.sleep(0.5)

    pattern_errors = 0

    def use(self, path):
        self.stop_current()
        t = self.topo
        if path.startswith("ceiling_"):
            pmd = "net_" + path[len("ceiling_"):]
            argv = ["dpdk-testpmd", "--no-huge", "--no-shconf", "-m", "512", "--no-pci",
                    "-l", "0,%d" % WORKER_CORE, "--file-prefix", "bench%d" % os.getpid(),
                    "--vdev=%s0,iface=%s" % (pmd, t.if_ra), "--vdev=%s1,iface=%s" % (pmd, t.if_rb), "--",
                    "--forward-mode=io", "--total-num-mbufs=16384", "--stats-period", "1", "-a"]
            p = self.procs.start(argv, host=t.host("r"))
            time.sleep(3)  # EAL start, ports up
            if p.popen.poll() is not None:
                raise RuntimeError("dpdk-testpmd exited: %s" % p.popen.stderr.read()[-2000:])
            self.current = (path, p)
            return
        if path == "kernel":
            self.router_addresses(True)
            t.dpdk = False
        pmd = "net_" + path.replace("_copy", "").replace("_no_tso", "")
        router = Router(t, self.workdir, cores=(WORKER_CORE,), poll="adaptive", pmd=pmd,
                        zero_copy=not path.endswith("_copy"),
                        tso=not path.endswith("_no_tso") if pmd == "net_tap" else None)
        t.dpdk = True
        err = router.start(self.procs)
        if err:
            raise RuntimeError(err)
        if pmd == "net_tap":
            router.bridge_taps()
        self.current = (path, router)
        self.server = self.procs.start([peer_binary(), "--nid", t.b_nid] + t.peer_options("b") + ["server"],
                                       host=t.host("b"))
        time.sleep(0.5)

    def iperf(self):
        cp = self.topo.host("a").run(["iperf3", "-c", self.l2_b_ip, "-t", str(self.args.duration), "-J"],
                                     timeout=self.args.duration + 60)
        doc = json.loads(cp.stdout)
        if "error" in doc:
            raise RuntimeError("iperf3: " + doc["error"])
        return {"MB_per_s": doc["end"]["sum_received"]["bits_per_second"] / 8e6,
                "retransmits": doc["end"]["sum_sent"].get("retransmits")}

    def load(self, op, size, conc):
        router = self.current[1]
        st0 = router.status()
        dp0 = router.cpu_seconds()
        us0, sy0 = user_system_seconds(router.proc.pid)
        m0, t0 = busy_cpu_seconds(), time.monotonic()
        t = self.topo
        res, cp = brw(t.host("a"), t.a_nid, t.peer_options("a"), t.b_nid, op, size, conc, self.args.duration,
                      os.path.join(self.workdir, "brw.json"), check="none")
        m1, t1 = busy_cpu_seconds(), time.monotonic()
        if res is None or res["errors"]:
            raise RuntimeError("brw %s %d over %s failed: %s%s%s" % (op, size, self.current[0], res, cp.stdout,
                                                                    cp.stderr))
        st1 = router.status()
        d = status_delta(st0, st1, ("bytes_copied", "bytes_referenced", "rx_bytes_referenced"))
        msgs, fwd = d["messages"], d["bytes"]
        copied, referenced, rx_referenced = d["bytes_copied"], d["bytes_referenced"], d["rx_bytes_referenced"]
        def port_sum(st, key):
            return sum(p.get(key, 0) for p in st.get("ports", []))
        tso_frames = port_sum(st1, "tso_frames") - port_sum(st0, "tso_frames")
        tso_segments = port_sum(st1, "tso_segments") - port_sum(st0, "tso_segments")
        dp = router.cpu_seconds() - dp0
        us1, sy1 = user_system_seconds(router.proc.pid)
        return {"dataplane_user_us_per_kib": (us1 - us0) * 1e6 / (fwd / 1024) if fwd else None,
                "dataplane_system_us_per_kib": (sy1 - sy0) * 1e6 / (fwd / 1024) if fwd else None,"ops_per_s": res["ops_per_s"], "MB_per_s": res["MB_per_s"], "latency_us": res["latency_us"],
                "ops": res["ops"], "forwarded_messages": msgs, "forwarded_bytes": fwd,
                "machine_busy_cores": (m1 - m0) / (t1 - t0),
                "dataplane_cpu_us_per_message": dp * 1e6 / max(msgs, 1),
                "dataplane_cpu_us_per_kib": dp * 1e6 / (fwd / 1024) if fwd else None,
                "bytes_copied_per_forwarded_byte": copied / fwd if fwd else None,
                "bytes_referenced_per_forwarded_byte": referenced / fwd if fwd else None,
                "rx_bytes_referenced_per_forwarded_byte": rx_referenced / fwd if fwd else None,
                "tso_frames": tso_frames, "tso_segments_per_frame": tso_segments / tso_frames if tso_frames else None}

    def round(self, order):
        samples = {}
        for path in order:
            self.use(path)
            if path.startswith("ceiling_"):
                samples[path] = {"iperf3": self.iperf()}
                say("  %-18s iperf3 %7.1f MB/s" % (path, samples[path]["iperf3"]["MB_per_s"]))
                continue
            s = {name: self.load(op, size, conc) for name, op, size, conc in LOADS}
            samples[path] = s
            say("  %-18s put0_c64 %7.0f ops/s  write %6.1f MB/s  read %6.1f MB/s  copied/fwd %s" %
                (path, s["put0_c64"]["ops_per_s"], s["write1m_c8"]["MB_per_s"], s["read1m_c8"]["MB_per_s"],
                 "%.2f" % s["write1m_c8"]["bytes_copied_per_forwarded_byte"]
                 if s["write1m_c8"]["bytes_copied_per_forwarded_byte"] is not None else "-"))
        self.stop_current()
        return samples


METRICS = [  # (label, getter, unit)
    ("0 B PUT rate, c64", lambda s: s.get("put0_c64", {}).get("ops_per_s"), "ops/s"),
    ("1 MiB write, c8", lambda s: s.get("write1m_c8", {}).get("MB_per_s") or s.get("iperf3", {}).get("MB_per_s"),
     "MB/s"),
    ("1 MiB read, c8", lambda s: s.get("read1m_c8", {}).get("MB_per_s"), "MB/s"),
    ("dataplane CPU per message, 0 B", lambda s: s.get("put0_c64", {}).get("dataplane_cpu_us_per_message"), "us"),
    ("dataplane CPU per message, 1 MiB", lambda s: s.get("write1m_c8", {}).get("dataplane_cpu_us_per_message"),
     "us"),
    ("dataplane CPU per KiB, 1 MiB write", lambda s: s.get("write1m_c8", {}).get("dataplane_cpu_us_per_kib"), "us"),
    ("  of which user space", lambda s: s.get("write1m_c8", {}).get("dataplane_user_us_per_kib"), "us"),
    ("  of which kernel", lambda s: s.get("write1m_c8", {}).get("dataplane_system_us_per_kib"), "us"),
    ("bytes copied / forwarded, 1 MiB write",
     lambda s: s.get("write1m_c8", {}).get("bytes_copied_per_forwarded_byte"), ""),
    ("bytes sent by reference / forwarded, 1 MiB write",
     lambda s: s.get("write1m_c8", {}).get("bytes_referenced_per_forwarded_byte"), ""),
    ("bytes received by reference / forwarded, 1 MiB write",
     lambda s: s.get("write1m_c8", {}).get("rx_bytes_referenced_per_forwarded_byte"), ""),
    ("TCP segments per frame sent, 1 MiB write",
     lambda s: s.get("write1m_c8", {}).get("tso_segments_per_frame"), ""),
    ("machine busy cores, 1 MiB write", lambda s: s.get("write1m_c8", {}).get("machine_busy_cores"), "cores"),
]


def summarise(rounds, paths):
    """Medians over the rounds, and medians of per-round ratios: each DPDK
    path to `kernel`, and each router path's write MB/s to the ceiling of
    its PMD (the kernel path to the af_xdp ceiling)."""
    summary = {}
    for label, get, unit in METRICS:
        row = {"unit": unit, "median": {}, "min": {}, "max": {}, "ratio_to_kernel": {}}
        for p in paths:
            vals = [get(r[p]) for r in rounds if p in r and get(r[p]) is not None]
            if not vals:
                continue
            row["median"][p], row["min"][p], row["max"][p] = statistics.median(vals), min(vals), max(vals)
            ratios = [get(r[p]) / get(r["kernel"]) for r in rounds
                      if p in r and "kernel" in r and get(r[p]) is not None and get(r["kernel"])]
            if ratios and p != "kernel":
                row["ratio_to_kernel"][p] = statistics.median(ratios)
        summary[label] = row
    ceil = {}
    for p in ("kernel", "af_xdp", "af_packet", "af_packet_copy"):
        c = "ceiling_" + ("af_xdp" if p == "kernel" else p.replace("_copy", ""))
        ratios = [r[p]["write1m_c8"]["MB_per_s"] / r[c]["iperf3"]["MB_per_s"] for r in rounds if p in r and c in r]
        if ratios:
            ceil[p] = {"ceiling": c, "median_ratio": statistics.median(ratios)}
    summary["write_to_ceiling"] = ceil
    # Segmentation offload on and off, on the same tap ports, per round.
    tso = {}
    for label, get, _ in METRICS:
        ratios = [get(r["tap"]) / get(r["tap_no_tso"]) for r in rounds
                  if "tap" in r and "tap_no_tso" in r and get(r["tap"]) is not None and get(r["tap_no_tso"])]
        if ratios:
            tso[label] = statistics.median(ratios)
    summary["tap_to_tap_no_tso"] = tso
    return summary


def print_table(summary, paths):
    say("\nmedians over the rounds (in brackets: median of the per-round ratios to kernel)")
    say("%-40s %6s" % ("", "") + "".join("%19s" % p for p in paths))
    for label, row in summary.items():
        if label in ("write_to_ceiling", "tap_to_tap_no_tso"):
            continue
        cells = []
        for p in paths:
            v = row["median"].get(p)
            r = row["ratio_to_kernel"].get(p)
            cells.append("%19s" % ("-" if v is None else ("%.2f" % v if v < 10 else "%.1f" % v) +
                                   (" (%.2f)" % r if r is not None else "")))
        say("%-40s %6s" % (label, row["unit"]) + "".join(cells))
    for p, c in summary["write_to_ceiling"].items():
        say("1 MiB write on %-10s / %s: %.2f" % (p, c["ceiling"], c["median_ratio"]))
    for label, r in summary["tap_to_tap_no_tso"].items():
        say("tap / tap_no_tso, %-40s %.2f" % (label, r))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds over every path (default 3)")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of each load (default 3)")
    ap.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ",".join(PATHS))
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench", "dpdk_bench.json"),
                    help="where to write the samples and summary")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("dpdk_bench: needs root (network namespaces, DPDK ports on veths)")
    paths = [p for p in args.paths.split(",") if p]
    if set(paths) - set(PATHS):
        sys.exit("dpdk_bench: unknown path(s); expected some of " + ",".join(PATHS))
    if os.cpu_count() <= WORKER_CORE:
        sys.exit("dpdk_bench: needs at least %d cores" % (WORKER_CORE + 1))

    topo = Topology(dpdk=True)
    procs = Processes()
    workdir = tempfile.mkdtemp(prefix="lnetr-dpdk-bench-")
    rounds = []
    try:
        topo.up()
        bench = Bench(args, topo, procs, workdir)
        for i in range(args.rounds):
            order = paths if i % 2 == 0 else list(reversed(paths))
            say("round %d of %d: %s" % (i + 1, args.rounds, ", ".join(order)))
            rounds.append(bench.round(order))
        errors = bench.pattern_errors
    finally:
        procs.cleanup()
        topo.down()
        shutil.rmtree(workdir, True)

    summary = summarise(rounds, paths)
    print_table(summary, paths)
    say("server pattern errors: %d" % errors)
    doc = {"benchmark": "dpdk_bench", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "cpu": cpu_model()},
           "args": vars(args), "paths": paths, "worker_core": WORKER_CORE, "rounds": rounds, "summary": summary,
           "server_pattern_errors": errors}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    say("wrote %s" % args.json)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
