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
os.environ.setdefault("LNETR_BUILD", os.path.join(ROOT, "build", "release"))

from lnetr_router import Router, Topology, brw, ip  # noqa: E402
from lnetr_test import Host, Processes, parse_yaml, peer_binary  # noqa: E402

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds over every path (default 3)")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of each brw load (default 3)")
    ap.add_argument("--pings", type=int, default=21, help="pings per round and path (default 21)")
    ap.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ",".join(PATHS))
    ap.add_argument("--client-core", type=int, default=-1, help="pin the client to this core (default -1: not pinned)")
    ap.add_argument("--server-core", type=int, default=-1, help="pin the servers to this core (default -1: not pinned)")
    ap.add_argument("--no-spinners", dest="spinners", action="store_false",
                    help="do not keep the cores out of idle with SCHED_IDLE spinners")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench", "router_bench.json"),
                    help="where to write the samples and summary")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("router_bench: needs root (network namespaces, socklnd's privileged ports)")
    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        sys.exit("router_bench: unknown path(s) %s; expected some of %s" % (", ".join(sorted(unknown)), ", ".join(PATHS)))

    topo = Topology(direct=True)
    procs = Processes()
    workdir = tempfile.mkdtemp(prefix="lnetr-bench-")
    rounds = []
    try:
        topo.up()
        bench = Bench(args, topo, procs, workdir)
        bench.setup_ip_forward()
        bench.start_servers()
        for i in range(args.rounds):
            # Alternate the order so that no path always runs first (or just after a router start).
            order = paths if i % 2 == 0 else list(reversed(paths))
            say("round %d of %d: %s" % (i + 1, args.rounds, ", ".join(order)))
            rounds.append(bench.round(order))
        bench.use_router(None)
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
