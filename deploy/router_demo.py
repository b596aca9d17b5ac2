"""The router demo (deploy/demo runs it after building): three network
namespaces, lnetr-dataplane routing between tcp and tcp1 with lnetr-control
beside it, an lnetr-peer on each side, a short brw load through the router;
prints what it measured, the router's counters and a few of its Prometheus
series, then tears everything down.

    a: lnetr-peer @tcp  --  r: lnetr-dataplane + lnetr-control @tcp / @tcp1  --  b: lnetr-peer @tcp1

Exit status 0 only if every ping and operation succeeded, the server found
every byte intact and the router's credits and buffers came back to rest.
"""

import argparse
import os
import shutil
import signal
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

from lnetr_router import Router, Topology, brw, parse_metrics, scrape_metrics  # noqa: E402
from lnetr_test import Processes, build_dir, parse_yaml, peer_binary  # noqa: E402

METRICS = "127.0.0.1:9798"  # inside namespace r
LOADS = [  # (op, size, concurrency)
    ("write", 1048576, 8),
    ("read", 1048576, 8),
    ("write", 0, 64),
    ("read", 4096, 64),
]


def say(text=""):
    print(text, flush=True)


def lnetrctl(topo, router, *args):
    """Run lnetrctl in the router's namespace: (returncode, what it printed)."""
    binary = os.environ.get("LNETR_LNETRCTL") or os.path.join(build_dir(), "cli", "lnetrctl", "lnetrctl")
    cp = topo.host("r").run([binary, "--socket", router.api_sock] + list(args))
    return cp.returncode, cp.stdout + cp.stderr


def demo(args, topo, procs, workdir):
    if args.ports == "kernel":
        router = Router(topo, workdir, check=5, metrics=METRICS)
    else:  # one worker serves DPDK ports (lnetr's own TCP/IP on the veths)
        router = Router(topo, workdir, check=5, metrics=METRICS, cores=(0,), poll="busy", pmd="net_" + args.ports)
    err = router.start(procs)
    if err:
        say(err)
        return 1
    _, err = router.start_control(procs)
    if err:
        say(err)
        return 1
    for ni in router.api("net show")["data"]["net"]:
        for n in ni["local NI(s)"]:
            say("router NI %-18s on %-10s %s" % (n["nid"], ", ".join(n["interfaces"].values()), n["status"]))

    server = procs.start([peer_binary(), "--nid", topo.b_nid] + topo.peer_options("b") + ["server"],
                         host=topo.host("b"))
    if not server.wait_stderr("serving", timeout=10):
        say("lnetr-peer server did not start:\n%s" % server.stop().stderr)
        return 1
    say("server  %s in namespace %s" % (topo.b_nid, topo.ns["b"]))
    say("client  %s in namespace %s, route tcp1 via %s" % (topo.a_nid, topo.ns["a"], topo.ra_nid))
    failures = 0

    say("\n== ping (from the client)")
    for target in (topo.b_nid, topo.ra_nid):
        cp = topo.host("a").run([peer_binary(), "--nid", topo.a_nid] + topo.peer_options("a") +
                                ["ping", target, "--count", "3", "--timeout", "5"])
        doc = parse_yaml(cp.stdout) if cp.returncode == 0 else None
        if not doc or "ping" not in doc:
            say("ping %s failed: %s%s" % (target, cp.stdout, cp.stderr))
            failures += 1
            continue
        rtts = sorted(p["rtt_us"] for p in doc["ping"])
        first = doc["ping"][0]
        say("%-18s rtt %7.1f us (median of %d)  features %s  NIs %s" % (
            target, rtts[len(rtts) // 2], len(rtts), first["features"],
            ", ".join("%s %s" % kv for kv in first["status"].items())))

    say("\n== lnetrctl ping (from the router, through lnetr-control)")
    rc, out = lnetrctl(topo, router, "ping", topo.b_nid, "--timeout", "5")  # the client runs only while it has work
    say(out.rstrip())
    failures += rc != 0

    say("\n== brw through the router, %g s each" % args.duration)
    say("%-6s %8s %5s %9s %11s %9s %9s %9s %7s" % ("op", "size", "conc", "ops", "messages/s", "MB/s",
                                                  "p50 us", "p99 us", "errors"))
    for op, size, conc in LOADS:
        res, cp = brw(topo.host("a"), topo.a_nid, topo.peer_options("a"), topo.b_nid, op, size, conc,
                      args.duration, os.path.join(workdir, "brw.json"))
        if res is None:
            say("brw %s %d failed: %s%s" % (op, size, cp.stdout, cp.stderr))
            failures += 1
            continue
        failures += res["errors"] > 0
        lat = res["latency_us"]
        say("%-6s %8d %5d %9d %11.0f %9.1f %9.1f %9.1f %7d" % (op, size, conc, res["ops"], res["msgs_per_s"],
                                                            res["MB_per_s"], lat["p50"], lat["p99"], res["errors"]))

    server.stop(signal.SIGINT)
    stats = (parse_yaml(server.stdout) or {}).get("server", {})
    say("\n== server: %s PUTs verified, %s GETs served, %s pattern errors" % (
        stats.get("puts_verified"), stats.get("gets_served"), stats.get("pattern_errors")))
    failures += server.returncode != 0 or stats.get("pattern_errors") != 0

    st, problems = router.wait_idle()
    s = st["statistics"]
    say("\n== router counters")
    say("forwarded %d messages, %.1f MB; dropped %d (%s)" % (
        s["route_count"], s["route_length"] / 1e6, s["drop_count"],
        ", ".join("%s %d" % kv for kv in st["drops"].items() if kv[1]) or "none"))
    k = st["socklnd"]
    say("socklnd: %d messages sent in %d writes; %d connections accepted, %d connected, closed: %s" % (
        k["tx_msgs"], k["tx_writes"], k["conns_accepted"], k["conns_connected"],
        ", ".join("%s %d" % kv for kv in k["closed"].items() if kv[1]) or "none"))
    for cpt in st["buffers"]:
        say("cpt %d router buffers (credits/buffers, min): %s" % (cpt["cpt"], "  ".join(
            "%s %d/%d min %d" % (pool, cpt[pool]["credits"], cpt[pool]["nbuffers"], cpt[pool]["mincredits"])
            for pool in ("tiny", "small", "large"))))
    for p in st.get("ports", []):
        say("port %-10s %s: %d frames in, %d out; TCP retransmits %d; payload bytes copied %d, "
            "sent by reference %d, received by reference %d" % (
                p["name"], p["device"].split(",")[0], p["rx_frames"], p["tx_frames"], p["tcp"]["retransmits"],
                p["bytes_copied"], p["bytes_referenced"], p["rx_bytes_referenced"]))
    for p in st["peers"]:
        say("peer %-18s tx credits %d/%d min %d, router credits %d/%d min %d" % (
            p["nid"], p["available_tx_credits"], p["max_ni_tx_credits"], p["min_tx_credits"],
            p["available_rtr_credits"], p["max_rtr_credits"], p["min_rtr_credits"]))
    say("\n== lnetrctl peer show -v --nid %s" % topo.a_nid)
    rc, out = lnetrctl(topo, router, "peer", "show", "-v", "--nid", topo.a_nid)
    say(out.rstrip())
    failures += rc != 0
    if problems:
        say("NOT at rest: " + "; ".join(problems))
        failures += 1
    else:
        say("every credit and buffer is back at its configured value")

    say("\n== Prometheus: http://%s/metrics in namespace %s (a few of its series)" % (METRICS, topo.ns["r"]))
    rc, _, body, err = scrape_metrics(topo.host("r"), METRICS)
    if rc != 0:
        say("scrape failed: " + err[-300:])
        return 1
    series = parse_metrics(body)
    for name in ("lnetr_up", "lnetr_forwarded_messages_total", "lnetr_forwarded_bytes_total", "lnetr_ni_up",
                 "lnetr_peer_router_credits_min", "lnetr_router_buffers_min", "lnetr_worker_busy_ratio"):
        for (n, labels), value in sorted(series.items(), key=lambda kv: sorted(kv[0][1])):
            if n == name:
                shown = ",".join('%s="%s"' % kv for kv in sorted(labels))
                say("%s%s %g" % (n, "{%s}" % shown if shown else "", value))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of each brw load (default 3)")
    ap.add_argument("--ports", choices=("kernel", "af_packet", "af_xdp"), default="kernel",
                    help="how the router reaches its nets: kernel TCP sockets (default), or DPDK ports "
                         "(net_af_packet / net_af_xdp on the veths) with lnetr's own TCP/IP")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("deploy/demo: needs root (network namespaces, socklnd's privileged ports)")
    topo = Topology(dpdk=args.ports != "kernel")
    procs = Processes()
    workdir = tempfile.mkdtemp(prefix="lnetr-demo-")
    try:
        topo.up()
        rc = demo(args, topo, procs, workdir)
    finally:
        procs.cleanup()
        topo.down()
        shutil.rmtree(workdir, True)
    say("\ndemo %s; namespaces removed" % ("passed" if rc == 0 else "FAILED"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
