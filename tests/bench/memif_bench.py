#!/usr/bin/env python3
"""All-DPDK benchmark: lnetr's own cost with no kernel on the data path,
beside the ceiling of the same ports, at MTU 1500 and 9000, in alternating
rounds.  Needs root (for the namespaces-free DPDK processes: only to read
their /proc) and the release build.

    lnetr_MTU   A (lnetr-peer, memif) == lnetr-dataplane, one worker == B (memif)
    wire_MTU    A (lnetr-peer, memif) == dpdk-testpmd io-forwarding == B (memif)
    virtio_MTU  A (lnetr-peer, vhost) == lnetr-dataplane on net_virtio_user
                ports with TSO, LRO and checksum offload == B (vhost): a
                NIC's stand-in (the copies are the vhost side's, in the peers)
    virtioplain_MTU  the same with tso: 0 and lro: 0, a frame per segment
    cpt2_apart     two pairs of peers, a router for each with one worker
                   (cores 0 and 1, poll: busy), both loaded at once
    cpt2_together  the same pairs through one router with two workers
                   (pair k's ports on CPT k), both loaded at once
    capture_MTU    lnetr_MTU with a capture of every frame running
                   (lnetrctl capture's, through the control socket; the
                   file emptied after each load): what a running capture
                   costs the worker, and what it drops (not by default)

Both peers run lnetr's TCP/IP on net_memif ports (tests/integration/
lnetr_memif.py); the router runs one worker on core 1 (poll: adaptive),
testpmd its forwarding core on core 1, and the peers share core 0.  The
wire forwards frames and terminates nothing, so A and B speak LNet to each
other directly across it: the same loads with a forwarder that costs
(almost) nothing, which bounds what any router between these peers could
reach here.

Loads (lnetr-peer brw from A against a server in B, --check none on the
client; the server verifies every PUT), after a warm-up that is not
counted: 0 B PUTs 64 in flight, 4 KiB and 1 MiB writes and reads.  For the
router paths, from its status around each load: busy TSC cycles per
forwarded message and per forwarded KiB (the worker's busy_cycles: loop
iterations that found work), the busy share of the worker's cycles, and
bytes copied per byte forwarded.

The cpt2 paths show scaling: each worker's busy cycles per message it
forwarded, in a router of its own (apart) and beside a second worker of
the same router (together), under the same load on the machine: what
changes is only what the two workers share (memory written by both would
show as cycles).  Six busy threads share two cores there, and a worker's
busy cycles then include the time others held its core; "own" figures
scale them by the worker's CPU time over its cycles' seconds (cpu_ns:
preemptions assumed to land in busy and idle turns alike, which busy
polling, never sleeping, makes fair).

Prints medians and per-round ratios (router to wire of the same MTU, and
MTU 9000 to 1500); writes every sample as JSON.

--baseline DATAPLANE: an A/B of two routers in one run.  Every router path
P (lnetr_*, virtio*) gets a twin P@base, run right after it in every round
with that lnetr-dataplane binary (a build of an earlier commit) and the
same peers; each metric then has the median per-round ratio of P to
P@base (ratio_to_baseline).
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, HERE)
os.environ.setdefault("LNETR_BUILD", os.path.join(ROOT, "build", "release"))

from lnetr_memif import MemifTopology  # noqa: E402
from lnetr_test import Host, Processes, parse_yaml, peer_binary, run_together  # noqa: E402
from lnetr_router import brw, control_request, status_delta  # noqa: E402
from router_bench import cpu_model, say  # noqa: E402

PATHS = ["lnetr_1500", "lnetr_9000", "wire_1500", "wire_9000", "cpt2_apart", "cpt2_together",
         "virtio_1500", "virtio_9000", "virtioplain_1500", "virtioplain_9000", "capture_1500", "capture_9000"]
DEFAULT_PATHS = PATHS[:4] + PATHS[6:10]
LINK = {"virtio": "virtio", "virtioplain": "virtio-plain"}  # path kind -> MemifTopology link
# Port counters summed over the router's ports around a load (status "ports").
PORT_KEYS = ("rx_frames", "tx_frames", "rx_bytes", "tx_bytes", "tso_frames", "tso_segments", "rx_lro",
             "large_segments_in", "rx_chained", "rx_chain_buffers", "csum_offloaded", "csum_verified")
WORKER_CORE, PEER_CORE, MAIN_CORE = 1, 0, 0
LOADS = [  # name, op, size, concurrency
    ("put0_c64", "write", 0, 64),
    ("write4k_c32", "write", 4096, 32),
    ("read4k_c32", "read", 4096, 32),
    ("write1m_c8", "write", 1048576, 8),
    ("read1m_c8", "read", 1048576, 8),
]
SCALING_LOADS = LOADS[:2]  # per message: 0 B and 4 KiB


class Bench:
    def __init__(self, args, procs, workdir):
        self.args, self.procs, self.workdir = args, procs, workdir
        self.topos = []
        self.capture = None  # the capture file of a capture_ path
        self.pairs = []  # (topology, pair) of each peer pair loaded
        self.servers = []
        self.pattern_errors = 0
        self.dataplane = os.environ.get("LNETR_DATAPLANE")  # the router under test (None: the build's)

    def stop_current(self):
        for server in self.servers:
            server.stop()
            stats = (parse_yaml(server.stdout) or {}).get("server", {})
            self.pattern_errors += stats.get("pattern_errors", 1)
        self.servers = []
        for t in self.topos:
            t.stop()
        if self.topos:
            time.sleep(0.5)
        self.topos, self.pairs = [], []
        if self.capture:
            os.unlink(self.capture)
            self.capture = None

    def topology(self, name, **kw):
        d = os.path.join(self.workdir, name)
        os.makedirs(d, exist_ok=True)
        t = MemifTopology(self.procs, d, tag="lnetrmb%d%s" % (os.getpid(), name), **kw).start()
        self.topos.append(t)
        return t

    def use(self, path):
        self.stop_current()
        path, _, twin = path.partition("@")
        if twin:  # the baseline router binary (--baseline)
            os.environ["LNETR_DATAPLANE"] = self.args.baseline
        elif self.dataplane is None:
            os.environ.pop("LNETR_DATAPLANE", None)
        else:
            os.environ["LNETR_DATAPLANE"] = self.dataplane
        kind, mtu = path.split("_")
        if path == "cpt2_together":  # one router, a worker per pair
            t = self.topology("r", cores=(0, 1), main_core=MAIN_CORE, poll="busy", pairs=2)
            self.pairs = [(t, 0), (t, 1)]
        elif path == "cpt2_apart":  # a router per pair, one worker each
            self.pairs = [(self.topology("r%d" % c, cores=(c,), main_core=MAIN_CORE, poll="busy"), 0) for c in (0, 1)]
        else:
            t = self.topology("r", kind="wire" if kind == "wire" else "router", mtu=int(mtu), cores=(WORKER_CORE,),
                              main_core=MAIN_CORE, peer_core=PEER_CORE, link=LINK.get(kind, "memif"))
            self.pairs = [(t, 0)]
            if kind == "capture":
                self.capture = os.path.join(self.workdir, "capture.pcapng")
                fd = os.open(self.capture, os.O_WRONLY | os.O_CREAT, 0o600)
                try:
                    st = control_request(t.ctl, "capture start port=* host=* count=0", fd=fd)
                finally:
                    os.close(fd)
                if st.get("state") != "running":
                    raise RuntimeError("capture did not start: %s" % st)
        for t, k in self.pairs:
            server = self.procs.start([peer_binary(), "--nid", t.nid("b", k)] + t.peer_options("b", k) + ["server"])
            self.servers.append(server)
            if not server.wait_stderr("serving", timeout=30):
                raise RuntimeError("server did not start: %s" % server.stop().stderr)

    def brw_pair(self, t, k, op, size, conc):
        return brw(Host(), t.nid("a", k), t.peer_options("a", k), t.nid("b", k), op, size, conc,
                   self.args.duration, os.path.join(t.dir, "brw%d.json" % k), check="none",
                   warmup=self.args.warmup)

    def load(self, op, size, conc):
        """One load on every pair at once; with a router, what it cost."""
        routers = [t for t in self.topos if t.kind == "router"]
        st0 = [t.status() for t in routers]
        cap0 = control_request(routers[0].ctl, "capture show") if self.capture else None
        results = run_together([lambda t=t, k=k: self.brw_pair(t, k, op, size, conc) for t, k in self.pairs])
        if self.capture:
            # What the capture kept and dropped over the load (warm-up
            # included); the file is emptied for the next (the dataplane
            # writes on past its end: a sparse file).
            cap1 = control_request(routers[0].ctl, "capture show")
            frames, dropped = cap1["frames"] - cap0["frames"], cap1["dropped"] - cap0["dropped"]
            os.truncate(self.capture, 0)
        for (t, _), (res, cp) in zip(self.pairs, results):
            if res is None or res["errors"]:
                raise RuntimeError("brw %s %d over %s_%d failed: %s%s%s" % (op, size, t.kind, t.mtu, res, cp.stdout,
                                                                           cp.stderr))
        res = results[0][0]
        out = {"ops_per_s": sum(r["ops_per_s"] for r, _ in results), "MB_per_s": sum(r["MB_per_s"] for r, _ in results),
               "latency_us": res["latency_us"], "ops": sum(r["ops"] for r, _ in results)}
        if self.capture:
            out["capture"] = {"frames": frames, "dropped": dropped,
                              "dropped_share": dropped / (frames + dropped) if frames + dropped else None}
        if not routers:
            return out
        st1 = [t.status() for t in routers]
        if len(self.pairs) > 1:  # each worker's share, in CPT order over the routers
            out["workers"] = [per_worker(w0, w1, b.get("tsc_hz")) for a, b in zip(st0, st1)
                              for w0, w1 in zip(a["workers"], b["workers"])]
        d = [status_delta(a, b, ("busy_cycles", "cycles", "bytes_copied")) for a, b in zip(st0, st1)]
        msgs, fwd = sum(x["messages"] for x in d), sum(x["bytes"] for x in d)
        busy, cycles, copied = (sum(x[k] for x in d) for k in ("busy_cycles", "cycles", "bytes_copied"))
        pd = {k: sum(p1.get(k, 0) - p0.get(k, 0) for a, b in zip(st0, st1)
                     for p0, p1 in zip(a.get("ports", []), b.get("ports", []))) for k in PORT_KEYS}

        def per(a, b):
            return pd[a] / pd[b] if pd[b] else None
        # What the ports' offloads did: bytes per frame each way, TCP
        # segments per frame sent (a TSO frame counts the segments the
        # device cut it into), the share of frames received that the
        # device joined (LRO) or whose checksum it vouched for, and of
        # TCP segments sent whose checksum it filled in.
        out["ports"] = dict(pd, **{
            "bytes_per_rx_frame": per("rx_bytes", "rx_frames"), "bytes_per_tx_frame": per("tx_bytes", "tx_frames"),
            "segments_per_tx_frame": (pd["tx_frames"] - pd["tso_frames"] + pd["tso_segments"]) / pd["tx_frames"]
            if pd["tx_frames"] else None,
            "lro_share": per("rx_lro", "rx_frames"), "rx_checksum_verified_share": per("csum_verified", "rx_frames"),
            "tx_checksum_offloaded_share": per("csum_offloaded", "tx_frames")})
        out.update({
            "forwarded_messages": msgs, "forwarded_bytes": fwd, "tsc_hz": st1[0].get("tsc_hz"),
            "busy_cycles_per_message": busy / msgs if msgs else None,
            "busy_cycles_per_kib": busy / (fwd / 1024) if fwd else None,
            "busy_share": busy / cycles if cycles else None,
            "bytes_copied_per_forwarded_byte": copied / fwd if fwd else None,
            "bytes_copied_per_message": copied / msgs if msgs else None,
        })
        return out

    def round(self, order):
        samples = {}
        for path in order:
            self.use(path)
            loads = SCALING_LOADS if path.startswith("cpt2") else LOADS
            s = {name: self.load(op, size, conc) for name, op, size, conc in loads}
            samples[path] = s
            if path.startswith("cpt2"):
                say("  %-11s " % path + "  ".join(
                    "%s w%d %7d msgs %5.0f cyc/msg (own %5.0f, on cpu %3.0f%%)" % (
                        name, i, w["messages"], w["busy_cycles_per_message"] or 0,
                        w["own_busy_cycles_per_message"] or 0, 100 * (w["on_cpu_share"] or 0))
                    for name, _, _, _ in loads for i, w in enumerate(s[name]["workers"]) if w["messages"]))
                continue
            line = "  %-11s put0 %7.0f/s  4k w/r %6.0f/%6.0f/s  1m w/r %6.1f/%6.1f MB/s" % (
                path, s["put0_c64"]["ops_per_s"], s["write4k_c32"]["ops_per_s"], s["read4k_c32"]["ops_per_s"],
                s["write1m_c8"]["MB_per_s"], s["read1m_c8"]["MB_per_s"])
            if path.startswith("capture"):
                line += "  dropped " + " ".join("%s %.3f" % (name, s[name]["capture"]["dropped_share"] or 0)
                                                for name, _, _, _ in loads)
            if not path.startswith("wire"):
                w = s["write1m_c8"]
                line += "  cyc/msg(0B) %5.0f  cyc/KiB(1m w) %4.0f  copied/B %.3f  B/frame rx/tx %5.0f/%5.0f" % (
                    s["put0_c64"]["busy_cycles_per_message"], w["busy_cycles_per_kib"],
                    w["bytes_copied_per_forwarded_byte"], w["ports"]["bytes_per_rx_frame"] or 0,
                    w["ports"]["bytes_per_tx_frame"] or 0)
            say(line)
        self.stop_current()
        return samples


def per_worker(w0, w1, tsc_hz):
    """One worker's share of a load, from its status entries around it:
    messages it forwarded, its busy cycles per message, and those scaled
    by its time on the core (cpu_ns) over its cycles' seconds."""
    msgs = w1["route_count"] - w0["route_count"]
    busy, cycles = w1["busy_cycles"] - w0["busy_cycles"], w1["cycles"] - w0["cycles"]
    cpu_ns = w1["cpu_ns"] - w0["cpu_ns"]
    on_cpu = cpu_ns * tsc_hz / 1e9 / cycles if cycles and tsc_hz else None
    return {"cpt": w1["cpt"], "messages": msgs, "busy_cycles": busy, "cycles": cycles, "cpu_ns": cpu_ns,
            "on_cpu_share": on_cpu,
            "busy_cycles_per_message": busy / msgs if msgs else None,
            "own_busy_cycles_per_message": busy * on_cpu / msgs if msgs and on_cpu else None}


def worker_metric(load, worker, key, label):
    def get(s):
        ws = s.get(load, {}).get("workers")
        return ws[worker].get(key) if ws and ws[worker]["messages"] else None
    return (label, get, "cycles" if "cycles" in key else "")


def metric(load, key, unit, label):
    return (label, lambda s: s.get(load, {}).get(key), unit)


def capture_metric(load, key, label):
    return (label, lambda s: s.get(load, {}).get("capture", {}).get(key), "")


def port_metric(load, key, unit, label):
    return (label, lambda s: s.get(load, {}).get("ports", {}).get(key), unit)


METRICS = [
    metric("put0_c64", "ops_per_s", "ops/s", "0 B PUT rate, c64"),
    metric("write4k_c32", "ops_per_s", "ops/s", "4 KiB write rate, c32"),
    metric("read4k_c32", "ops_per_s", "ops/s", "4 KiB read rate, c32"),
    metric("write1m_c8", "MB_per_s", "MB/s", "1 MiB write, c8"),
    metric("read1m_c8", "MB_per_s", "MB/s", "1 MiB read, c8"),
    metric("put0_c64", "busy_cycles_per_message", "cycles", "busy cycles per message, 0 B PUT"),
    metric("write4k_c32", "busy_cycles_per_message", "cycles", "busy cycles per message, 4 KiB write"),
    metric("read4k_c32", "busy_cycles_per_message", "cycles", "busy cycles per message, 4 KiB read"),
    metric("write4k_c32", "busy_cycles_per_kib", "cycles", "busy cycles per KiB, 4 KiB write"),
    metric("write1m_c8", "busy_cycles_per_kib", "cycles", "busy cycles per KiB, 1 MiB write"),
    metric("read1m_c8", "busy_cycles_per_kib", "cycles", "busy cycles per KiB, 1 MiB read"),
    metric("put0_c64", "busy_share", "", "worker busy share, 0 B PUT"),
    metric("write1m_c8", "busy_share", "", "worker busy share, 1 MiB write"),
    metric("put0_c64", "bytes_copied_per_message", "B", "bytes copied per message, 0 B PUT"),
    metric("write4k_c32", "bytes_copied_per_forwarded_byte", "", "bytes copied / forwarded, 4 KiB write"),
    metric("write1m_c8", "bytes_copied_per_forwarded_byte", "", "bytes copied / forwarded, 1 MiB write"),
    metric("read1m_c8", "bytes_copied_per_forwarded_byte", "", "bytes copied / forwarded, 1 MiB read"),
    port_metric("write1m_c8", "bytes_per_rx_frame", "B", "bytes per frame received, 1 MiB write"),
    port_metric("write1m_c8", "bytes_per_tx_frame", "B", "bytes per frame sent, 1 MiB write"),
    port_metric("write1m_c8", "segments_per_tx_frame", "", "TCP segments per frame sent, 1 MiB write"),
    port_metric("write1m_c8", "lro_share", "", "frames received joined by LRO, 1 MiB write"),
    port_metric("write1m_c8", "rx_checksum_verified_share", "", "frames received, checksum verified by device"),
    port_metric("write1m_c8", "tx_checksum_offloaded_share", "", "segments sent, checksum left to device"),
] + [capture_metric(load, "dropped_share", "capture: frames dropped, %s" % load) for load, _, _, _ in LOADS] + [worker_metric(load, w, key, "worker %d %s, %s" % (w, what, load))
     for load, _, _, _ in SCALING_LOADS for w in (0, 1)
     for key, what in (("busy_cycles_per_message", "busy cycles/msg"),
                       ("own_busy_cycles_per_message", "own busy cycles/msg"), ("on_cpu_share", "on-CPU share"))]


def summarise(rounds, paths):
    """Medians over the rounds, and medians of per-round ratios: each
    router path to the wire of its MTU, and MTU 9000 to 1500 on each."""
    summary = {}
    for label, get, unit in METRICS:
        row = {"unit": unit, "median": {}, "min": {}, "max": {}, "ratio_to_wire": {}, "ratio_9000_to_1500": {}}
        for p in paths:
            vals = [get(r[p]) for r in rounds if p in r and get(r[p]) is not None]
            if not vals:
                continue
            row["median"][p], row["min"][p], row["max"][p] = statistics.median(vals), min(vals), max(vals)
            kind, mtu = p.split("_")
            if kind == "cpt2":
                if mtu == "together":  # the same worker's figure in its own router
                    alone = "cpt2_apart"
                    ratios = [get(r[p]) / get(r[alone]) for r in rounds
                              if alone in r and p in r and get(r[p]) is not None and get(r[alone])]
                    if ratios:
                        row["ratio_to_alone"] = row.get("ratio_to_alone", {})
                        row["ratio_to_alone"][p] = statistics.median(ratios)
                continue
            wire = "wire_" + mtu
            ratios = [get(r[p]) / get(r[wire]) for r in rounds
                      if kind == "lnetr" and p in r and wire in r and get(r[wire])]
            if ratios:
                row["ratio_to_wire"][p] = statistics.median(ratios)
            plain = "virtioplain_" + mtu  # what the offloads change
            ratios = [get(r[p]) / get(r[plain]) for r in rounds
                      if kind == "virtio" and p in r and plain in r and get(r[plain])]
            if ratios:
                row.setdefault("ratio_to_plain", {})[p] = statistics.median(ratios)
            plain = "lnetr_" + mtu  # what a running capture changes
            ratios = [get(r[p]) / get(r[plain]) for r in rounds
                      if kind == "capture" and p in r and plain in r and get(r[plain])]
            if ratios:
                row.setdefault("ratio_to_no_capture", {})[p] = statistics.median(ratios)
            twin = p + "@base"  # the same path with the baseline router
            ratios = [get(r[p]) / get(r[twin]) for r in rounds if p in r and twin in r and get(r[twin])]
            if ratios:
                row.setdefault("ratio_to_baseline", {})[p] = statistics.median(ratios)
            if mtu == "9000":
                base = kind + "_1500"
                ratios = [get(r[p]) / get(r[base]) for r in rounds if p in r and base in r and get(r[base])]
                if ratios:
                    row["ratio_9000_to_1500"][p] = statistics.median(ratios)
        summary[label] = row
    return summary


def print_table(summary, paths):
    say("\nmedians over the rounds (in brackets: median per-round ratio of lnetr to the wire of its MTU; for "
        "cpt2_together, of the worker to the same in cpt2_apart; for virtio, to virtioplain of its MTU; with "
        "--baseline, of each router path to its @base twin)")
    say("%-42s %6s" % ("", "") + "".join("%18s" % p for p in paths))
    for label, row in summary.items():
        cells = []
        for p in paths:
            v = row["median"].get(p)
            r = row.get("ratio_to_baseline", {}).get(p)
            if r is None:
                r = row.get("ratio_to_no_capture", {}).get(p)
            if r is None:
                r = row["ratio_to_wire"].get(p, row.get("ratio_to_alone", {}).get(p, row.get("ratio_to_plain", {}).get(p)))
            text = "-" if v is None else ("%.3f" % v if v < 1 else "%.1f" % v if v < 100 else "%.0f" % v)
            cells.append("%18s" % (text + (" (%.2f)" % r if r is not None else "")))
        say("%-42s %6s" % (label, row["unit"]) + "".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds over every path (default 3)")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of each load, counted (default 3)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of load before it, not counted (default 3: each peer run brings its memif link up anew, which routes take a moment to see)")
    ap.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                    help="comma-separated subset of %s (default %s)" % (",".join(PATHS), ",".join(DEFAULT_PATHS)))
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench", "memif_bench.json"),
                    help="where to write the samples and summary")
    ap.add_argument("--baseline", default=None, metavar="DATAPLANE",
                    help="also run every router path with this lnetr-dataplane (path@base), for an A/B")
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    if set(paths) - set(PATHS):
        sys.exit("memif_bench: unknown path(s); expected some of " + ",".join(PATHS))
    if args.baseline:
        if not os.access(args.baseline, os.X_OK):
            sys.exit("memif_bench: --baseline %s is not an executable" % args.baseline)
        paths = [q for p in paths for q in ((p, p + "@base") if p.split("_")[0] in ("lnetr", "virtio", "virtioplain")
                                            else (p,))]
    if any(p.startswith("cpt2") for p in paths) and not {"cpt2_apart", "cpt2_together"} <= set(paths):
        sys.exit("memif_bench: cpt2_apart and cpt2_together go together (one is the other's baseline)")
    if os.cpu_count() <= WORKER_CORE:
        sys.exit("memif_bench: needs at least %d cores" % (WORKER_CORE + 1))
    if any(p.startswith("wire") for p in paths) and not shutil.which("dpdk-testpmd"):
        sys.exit("memif_bench: dpdk-testpmd not found (Debian package dpdk)")

    procs = Processes()
    workdir = tempfile.mkdtemp(prefix="lnetr-memif-bench-")
    rounds = []
    bench = Bench(args, procs, workdir)
    try:
        for i in range(args.rounds):
            order = paths if i % 2 == 0 else list(reversed(paths))
            say("round %d of %d: %s" % (i + 1, args.rounds, ", ".join(order)))
            rounds.append(bench.round(order))
    finally:
        bench.stop_current()
        procs.cleanup()
        shutil.rmtree(workdir, True)

    summary = summarise(rounds, paths)
    print_table(summary, paths)
    say("server pattern errors: %d" % bench.pattern_errors)
    doc = {"benchmark": "memif_bench", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "cpu": cpu_model()},
           "args": vars(args), "paths": paths, "worker_core": WORKER_CORE, "peer_core": PEER_CORE,
           "rounds": rounds, "summary": summary, "server_pattern_errors": bench.pattern_errors}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    say("wrote %s" % args.json)
    return 1 if bench.pattern_errors else 0


if __name__ == "__main__":
    sys.exit(main())
