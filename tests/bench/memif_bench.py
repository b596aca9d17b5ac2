#!/usr/bin/env python3
"""All-DPDK benchmark: lnetr's own cost with no kernel on the data path,
beside the ceiling of the same ports, at MTU 1500 and 9000, in alternating
rounds.  Needs root (for the namespaces-free DPDK processes: only to read
their /proc) and the release build.

    lnetr_MTU   A (lnetr-peer, memif) == lnetr-dataplane, one worker == B (memif)
    wire_MTU    A (lnetr-peer, memif) == dpdk-testpmd io-forwarding == B (memif)

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

Prints medians and per-round ratios (router to wire of the same MTU, and
MTU 9000 to 1500); writes every sample as JSON.
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
from lnetr_test import Host, Processes, parse_yaml, peer_binary  # noqa: E402
from lnetr_router import brw, status_delta  # noqa: E402
from router_bench import cpu_model, say  # noqa: E402

PATHS = ["lnetr_1500", "lnetr_9000", "wire_1500", "wire_9000"]
WORKER_CORE, PEER_CORE, MAIN_CORE = 1, 0, 0
LOADS = [  # name, op, size, concurrency
    ("put0_c64", "write", 0, 64),
    ("write4k_c32", "write", 4096, 32),
    ("read4k_c32", "read", 4096, 32),
    ("write1m_c8", "write", 1048576, 8),
    ("read1m_c8", "read", 1048576, 8),
]


class Bench:
    def __init__(self, args, procs, workdir):
        self.args, self.procs, self.workdir = args, procs, workdir
        self.topo = None
        self.server = None
        self.pattern_errors = 0

    def stop_current(self):
        if self.server:
            self.server.stop()
            stats = (parse_yaml(self.server.stdout) or {}).get("server", {})
            self.pattern_errors += stats.get("pattern_errors", 1)
            self.server = None
        if self.topo:
            self.topo.stop()
            self.topo = None
            time.sleep(0.5)

    def use(self, path):
        self.stop_current()
        kind, mtu = path.split("_")
        self.topo = MemifTopology(self.procs, self.workdir, kind="router" if kind == "lnetr" else "wire",
                                  mtu=int(mtu), cores=(WORKER_CORE,), main_core=MAIN_CORE, peer_core=PEER_CORE,
                                  tag="lnetrmb%d" % os.getpid()).start()
        t = self.topo
        self.server = self.procs.start([peer_binary(), "--nid", t.nid("b")] + t.peer_options("b") + ["server"])
        if not self.server.wait_stderr("serving", timeout=30):
            raise RuntimeError("server did not start: %s" % self.server.stop().stderr)

    def load(self, op, size, conc):
        t = self.topo
        router = t.kind == "router"
        st0 = t.status() if router else None
        res, cp = brw(Host(), t.nid("a"), t.peer_options("a"), t.nid("b"), op, size, conc, self.args.duration,
                      os.path.join(self.workdir, "brw.json"), check="none", warmup=self.args.warmup)
        if res is None or res["errors"]:
            raise RuntimeError("brw %s %d over %s_%d failed: %s%s%s" % (op, size, t.kind, t.mtu, res, cp.stdout,
                                                                       cp.stderr))
        out = {"ops_per_s": res["ops_per_s"], "MB_per_s": res["MB_per_s"], "latency_us": res["latency_us"],
               "ops": res["ops"]}
        if not router:
            return out
        st1 = t.status()
        d = status_delta(st0, st1, ("busy_cycles", "cycles", "bytes_copied"))
        msgs, fwd = d["messages"], d["bytes"]
        busy, cycles, copied = d["busy_cycles"], d["cycles"], d["bytes_copied"]
        out.update({
            "forwarded_messages": msgs, "forwarded_bytes": fwd, "tsc_hz": st1.get("tsc_hz"),
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
            s = {name: self.load(op, size, conc) for name, op, size, conc in LOADS}
            samples[path] = s
            line = "  %-11s put0 %7.0f/s  4k w/r %6.0f/%6.0f/s  1m w/r %6.1f/%6.1f MB/s" % (
                path, s["put0_c64"]["ops_per_s"], s["write4k_c32"]["ops_per_s"], s["read4k_c32"]["ops_per_s"],
                s["write1m_c8"]["MB_per_s"], s["read1m_c8"]["MB_per_s"])
            if path.startswith("lnetr"):
                line += "  cyc/msg(0B) %5.0f  cyc/KiB(1m w) %4.0f" % (
                    s["put0_c64"]["busy_cycles_per_message"], s["write1m_c8"]["busy_cycles_per_kib"])
            say(line)
        self.stop_current()
        return samples


def metric(load, key, unit, label):
    return (label, lambda s: s.get(load, {}).get(key), unit)


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
]


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
            wire = "wire_" + mtu
            ratios = [get(r[p]) / get(r[wire]) for r in rounds
                      if kind == "lnetr" and p in r and wire in r and get(r[wire])]
            if ratios:
                row["ratio_to_wire"][p] = statistics.median(ratios)
            if mtu == "9000":
                base = kind + "_1500"
                ratios = [get(r[p]) / get(r[base]) for r in rounds if p in r and base in r and get(r[base])]
                if ratios:
                    row["ratio_9000_to_1500"][p] = statistics.median(ratios)
        summary[label] = row
    return summary


def print_table(summary, paths):
    say("\nmedians over the rounds (in brackets: median per-round ratio of lnetr to the wire of its MTU)")
    say("%-42s %6s" % ("", "") + "".join("%18s" % p for p in paths))
    for label, row in summary.items():
        cells = []
        for p in paths:
            v = row["median"].get(p)
            r = row["ratio_to_wire"].get(p)
            text = "-" if v is None else ("%.3f" % v if v < 1 else "%.1f" % v if v < 100 else "%.0f" % v)
            cells.append("%18s" % (text + (" (%.2f)" % r if r is not None else "")))
        say("%-42s %6s" % (label, row["unit"]) + "".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds over every path (default 3)")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of each load, counted (default 3)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of load before it, not counted (default 3: each peer run brings its memif link up anew, which routes take a moment to see)")
    ap.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ",".join(PATHS))
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench", "memif_bench.json"),
                    help="where to write the samples and summary")
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    if set(paths) - set(PATHS):
        sys.exit("memif_bench: unknown path(s); expected some of " + ",".join(PATHS))
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
