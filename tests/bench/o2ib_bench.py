#!/usr/bin/env python3
"""o2ib benchmark: what lnetr costs forwarding over soft-RoCE against over
kernel TCP, side by side in one qemu guest, in alternating rounds.

The topology is tests/vm/o2ib_topology.py (one router worker, adaptive
polling).  Paths, each a client through the router to a server:

    tcp_tcp     B2@tcp (kernel sockets) -> E@tcp2 (kernel sockets)
    tcp_o2ib    B2@tcp -> A@o2ib
    o2ib_tcp    Y@o2ib -> B@tcp: the other way
    o2ib_o2ib   Y@o2ib -> C@o2ib1
    o2ib1_o2ib  X@o2ib1 -> A@o2ib: the other way
    dpdk_o2ib   D@tcp1 (R's DPDK af_packet port, lnetr's own TCP) -> A@o2ib
    o2ib_dpdk   Y@o2ib -> D2@tcp1 (a server in netns t): the other way
    o2ib_o2ib_pool  o2ib_o2ib with remote_keys: pool (the pool's own key in
                every PUT_ACK) instead of the default per-transfer memory
                windows, its router restarted for it each round

A router carries each direction with different verbs work.  Where the
client is on o2ib, its PUT's payload is RDMA-written by the client into the
router buffer the router's PUT_ACK names, and a GET's reply is RDMA-written
by the router into the sink the client's GET_REQ names; where the server is
on o2ib, the router writes PUTs into the server's sinks and the server
writes GET replies into the router's.  Each "other way" path is compared
with its twin in the same round (rate and CPU per message).

Loads (lnetr-peer brw, --check none on the client; the server verifies
every PUT): 0-byte PUTs 16 in flight (message rate), 1 MiB PUTs and GETs 4
in flight (MB/s).  For each it records the dataplane's CPU per forwarded
message, user and kernel apart, and the bytes it copied per byte forwarded.
User time is lnetr's own work (and the verbs provider's); kernel time is
the kernel TCP stack on kernel-socket nets and, on o2ib nets, mostly
soft-RoCE, which does in the poster's context what an HCA does in hardware
(packetising, the ICRC of every packet, copies): not lnetr's cost.

Under TCG absolute numbers mean little (an emulated CPU runs the router, the
peers and soft-RoCE's "hardware" alike): the ratios to tcp_tcp in the same
round, and the copy counts, are what it measures.  Prints medians and
per-round ratios; writes every sample as JSON.

The guest's CPU has no AVX-512, so the binaries come from build/release-vm
(release, -march=x86-64-v3) rather than build/release (-march=native).

    sudo deploy/setup release-vm && sudo python3 tests/bench/o2ib_bench.py [--rounds 3] [--duration 5]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "vm"))
os.environ.setdefault("LNETR_BUILD", str(ROOT / "build" / "release-vm"))

import lnetr_vm  # noqa: E402
from o2ib_topology import A, B, B2, C, D, D2, E, R_IB, R_IB1, R_TCP, R_TCP1, SERVERS, X, Y, Topology  # noqa: E402

PATHS = {  # name: client NID, its routes, target, netns, remote_keys
    "tcp_tcp": (f"{B2}@tcp", f"tcp2|{R_TCP}@tcp", f"{E}@tcp2", None, "transfer"),
    "tcp_o2ib": (f"{B2}@tcp", f"o2ib|{R_TCP}@tcp", f"{A}@o2ib", None, "transfer"),
    "o2ib_tcp": (f"{Y}@o2ib", f"tcp|{R_IB}@o2ib", f"{B}@tcp", None, "transfer"),
    "o2ib_o2ib": (f"{Y}@o2ib", f"o2ib1|{R_IB}@o2ib", f"{C}@o2ib1", None, "transfer"),
    "o2ib1_o2ib": (f"{X}@o2ib1", f"o2ib|{R_IB1}@o2ib1", f"{A}@o2ib", None, "transfer"),
    "dpdk_o2ib": (f"{D}@tcp1", f"o2ib|{R_TCP1}@tcp1", f"{A}@o2ib", "t", "transfer"),
    "o2ib_dpdk": (f"{Y}@o2ib", f"tcp1|{R_IB}@o2ib", f"{D2}@tcp1", None, "transfer"),
    "o2ib_o2ib_pool": (f"{Y}@o2ib", f"o2ib1|{R_IB}@o2ib", f"{C}@o2ib1", None, "pool"),
}
# Each path the other way: the same two nets, client and server swapped.
OTHER_WAY = {"o2ib_tcp": "tcp_o2ib", "o2ib1_o2ib": "o2ib_o2ib", "o2ib_dpdk": "dpdk_o2ib"}
SERVER_NETNS = {"D2": "t"}
LOADS = [  # name, op, size, concurrency
    ("put0_c16", "write", 0, 16),
    ("write1m_c4", "write", 1048576, 4),
    ("read1m_c4", "read", 1048576, 4),
]


def say(msg):
    print(msg, file=sys.stderr, flush=True)


def counters(st):
    w = st["workers"]
    return {
        "route_count": st["statistics"]["route_count"],
        "route_length": st["statistics"]["route_length"],
        "bytes_copied": sum(x["bytes_copied"] for x in w),
        "o2ib_copied": st.get("o2iblnd", {}).get("bytes_copied", 0),
        "sink_registrations": st.get("o2iblnd", {}).get("sink_registrations", 0),
        "sink_windows": st.get("o2iblnd", {}).get("sink_windows", 0),
        "sink_registration_ns": st.get("o2iblnd", {}).get("sink_registration_ns", 0),
    }


def run_load(topo, path, load, duration):
    client, route, target, netns, _ = PATHS[path]
    name, op, size, conc = load
    before, cpu0 = counters(topo.status()), topo.router_cpu_seconds()
    json_path = f"/tmp/lnetr-o2ib/brw-{path}-{name}.json"
    rc, doc, out, err = topo.client(client, route, f"brw {target} --op {op} --size {size} --concurrency {conc} "
                                                   f"--duration {duration} --timeout 30 --check none "
                                                   f"--json {json_path}", netns, timeout=duration + 180)
    after, cpu1 = counters(topo.status()), topo.router_cpu_seconds()
    res = json.loads(topo.sh(f"cat {json_path}"))
    msgs = after["route_count"] - before["route_count"]
    nbytes = after["route_length"] - before["route_length"]
    user, system = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    return {
        "path": path, "load": name, "rc": rc, "errors": res.get("errors"),
        "ops_per_s": res.get("ops_per_s"), "MB_per_s": res.get("MB_per_s"),
        "forwarded_messages": msgs, "forwarded_bytes": nbytes, "router_user_s": user, "router_sys_s": system,
        "user_us_per_msg": user * 1e6 / msgs if msgs else None,
        "sys_us_per_msg": system * 1e6 / msgs if msgs else None,
        "user_us_per_kib": user * 1e6 / (nbytes / 1024) if nbytes else None,
        "cpu_us_per_msg": (user + system) * 1e6 / msgs if msgs else None,
        "copied_per_byte": (after["bytes_copied"] - before["bytes_copied"]) / nbytes if nbytes else None,
        "o2ib_copied_per_byte": (after["o2ib_copied"] - before["o2ib_copied"]) / nbytes if nbytes else None,
        "sink_registrations": after["sink_registrations"] - before["sink_registrations"],
        "sink_windows": after["sink_windows"] - before["sink_windows"],
        # Per-transfer keys on a device without memory windows: timed around
        # ibv_reg_mr and ibv_dereg_mr.
        "us_per_registration": (after["sink_registration_ns"] - before["sink_registration_ns"]) / 1e3 /
        (after["sink_registrations"] - before["sink_registrations"])
        if after["sink_registrations"] > before["sink_registrations"] else None,
        "registration_share_of_cpu": (after["sink_registration_ns"] - before["sink_registration_ns"]) / 1e9 /
        (user + system) if user + system > 0 else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5, help="seconds per load")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--json", default=str(ROOT / "build" / "bench" / "o2ib_bench.json"))
    args = ap.parse_args()
    reason = lnetr_vm.skip_reason()
    if reason:
        sys.exit(f"o2ib_bench: {reason}")
    paths = args.paths.split(",")
    samples = []
    t0 = time.monotonic()
    with lnetr_vm.Guest(nics=4, name="o2ib-bench", mem_mb=3072) as g:
        topo = Topology(g, os.environ["LNETR_BUILD"], name="o2ib-bench")
        topo.setup()
        targets = {PATHS[p][2] for p in paths}
        for name, (nid, _) in SERVERS.items():
            if nid in targets:
                topo.start_server(name, SERVER_NETNS.get(name))
        keys = None
        for rnd in range(args.rounds):
            # Alternate the order of the paths from round to round.
            order = paths if rnd % 2 == 0 else list(reversed(paths))
            for path in order:
                want = PATHS[path][4]
                if keys != want:
                    topo.stop_router()
                    topo.start_router(remote_keys=want)
                    keys = want
                    time.sleep(3)  # the servers' gateway checks find it
                for load in LOADS:
                    s = run_load(topo, path, load, args.duration)
                    s["round"] = rnd
                    samples.append(s)
                    say(f"round {rnd} {path:13s} {load[0]:11s} ops/s {s['ops_per_s']} MB/s {s['MB_per_s']} "
                        f"user us/msg {s['user_us_per_msg']} sys us/msg {s['sys_us_per_msg']} copied/B "
                        f"{s['copied_per_byte']} errors {s['errors']}")
        topo.stop_router()
        topo.stop_servers()

    # Medians, and per-round ratios to tcp_tcp (and of transfer keys to pool).
    def med(path, load, key):
        v = [s[key] for s in samples if s["path"] == path and s["load"] == load and s[key] is not None]
        return statistics.median(v) if v else None

    def ratio(path, base, load, key):
        r = []
        for rnd in range(args.rounds):
            a = [s[key] for s in samples if s["path"] == path and s["load"] == load and s["round"] == rnd]
            b = [s[key] for s in samples if s["path"] == base and s["load"] == load and s["round"] == rnd]
            if a and b and a[0] and b[0]:
                r.append(a[0] / b[0])
        return statistics.median(r) if r else None

    summary = {}
    for path in paths:
        for load in LOADS:
            ln = load[0]
            summary[f"{path}/{ln}"] = {
                k: med(path, ln, k) for k in ("ops_per_s", "MB_per_s", "user_us_per_msg", "sys_us_per_msg",
                                              "user_us_per_kib", "cpu_us_per_msg", "copied_per_byte",
                                              "o2ib_copied_per_byte", "sink_registrations", "sink_windows",
                                              "us_per_registration", "registration_share_of_cpu")}
            if "tcp_tcp" in paths and path != "tcp_tcp":
                summary[f"{path}/{ln}"]["rate_vs_tcp_tcp"] = ratio(
                    path, "tcp_tcp", ln, "ops_per_s" if load[2] == 0 else "MB_per_s")
                summary[f"{path}/{ln}"]["user_per_msg_vs_tcp_tcp"] = ratio(path, "tcp_tcp", ln, "user_us_per_msg")
            twin = OTHER_WAY.get(path)
            if twin in paths:
                # The same nets the other way, same round.
                summary[f"{path}/{ln}"]["other_way"] = twin
                summary[f"{path}/{ln}"]["rate_vs_other_way"] = ratio(
                    path, twin, ln, "ops_per_s" if load[2] == 0 else "MB_per_s")
                summary[f"{path}/{ln}"]["user_per_msg_vs_other_way"] = ratio(path, twin, ln, "user_us_per_msg")
                summary[f"{path}/{ln}"]["sys_per_msg_vs_other_way"] = ratio(path, twin, ln, "sys_us_per_msg")
            if path == "o2ib_o2ib" and "o2ib_o2ib_pool" in paths:
                # Per-transfer keys (the default) against pool keys, same round.
                summary[f"{path}/{ln}"]["user_per_msg_vs_pool_keys"] = ratio(path, "o2ib_o2ib_pool", ln,
                                                                             "user_us_per_msg")
                summary[f"{path}/{ln}"]["sys_per_msg_vs_pool_keys"] = ratio(path, "o2ib_o2ib_pool", ln,
                                                                            "sys_us_per_msg")
                summary[f"{path}/{ln}"]["cpu_per_msg_vs_pool_keys"] = ratio(path, "o2ib_o2ib_pool", ln,
                                                                            "cpu_us_per_msg")
                summary[f"{path}/{ln}"]["rate_vs_pool_keys"] = ratio(
                    path, "o2ib_o2ib_pool", ln, "ops_per_s" if load[2] == 0 else "MB_per_s")
    out = {"when": time.strftime("%Y-%m-%d %H:%M"), "host": platform.node(), "rounds": args.rounds,
           "duration_s": args.duration, "wall_s": time.monotonic() - t0, "summary": summary, "samples": samples}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1))
    print("| path | load | rate | vs tcp_tcp | dataplane user CPU per msg (us) | vs tcp_tcp | kernel CPU per msg (us) "
          "| copied per byte |")
    print("|---|---|---|---|---|---|---|---|")

    def f(v, fmt="%.3g"):
        return "-" if v is None else fmt % v

    for key, v in summary.items():
        path, load = key.split("/")
        rate = f(v["ops_per_s"], "%.0f op/s") if load.startswith("put0") else f(v["MB_per_s"], "%.1f MB/s")
        print(f"| {path} | {load} | {rate} | {f(v.get('rate_vs_tcp_tcp'), '%.2f')} | {f(v['user_us_per_msg'], '%.0f')} "
              f"| {f(v.get('user_per_msg_vs_tcp_tcp'), '%.2f')} | {f(v['sys_us_per_msg'], '%.0f')} "
              f"| {f(v['copied_per_byte'], '%.5f')} |")
    for key, v in summary.items():
        if "rate_vs_other_way" in v:
            print(f"{key} / {v['other_way']}: rate {f(v['rate_vs_other_way'], '%.2f')}, user CPU per msg "
                  f"{f(v['user_per_msg_vs_other_way'], '%.2f')}, kernel {f(v['sys_per_msg_vs_other_way'], '%.2f')}")
    for key, v in summary.items():
        if "user_per_msg_vs_pool_keys" in v:
            print(f"remote_keys transfer / pool, {key.split('/')[1]}: user CPU per msg "
                  f"{f(v['user_per_msg_vs_pool_keys'], '%.2f')}, kernel {f(v['sys_per_msg_vs_pool_keys'], '%.2f')}, "
                  f"all {f(v['cpu_per_msg_vs_pool_keys'], '%.2f')}, rate {f(v['rate_vs_pool_keys'], '%.2f')}, "
                  f"windows bound {f(v['sink_windows'], '%.0f')}, sink registrations "
                  f"{f(v['sink_registrations'], '%.0f')}")
    say(f"o2ib_bench: {time.monotonic() - t0:.0f} s; JSON in {args.json}")


if __name__ == "__main__":
    main()
