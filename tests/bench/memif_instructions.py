#!/usr/bin/env python3
"""Instructions per forwarded message under callgrind: lnetr's own cost
without the noise of timing.  Needs the release-vm build (callgrind does
not run AVX-512 code: `deploy/setup release-vm`) and valgrind.

    A (lnetr-peer, memif, native) == lnetr-dataplane under callgrind,
                                     one worker, poll: busy == B (memif)

Only the worker's loop iterations are collected (--toggle-collect on
Worker::iterate).  Two windows, each opened by zeroing the counts and
closed by a dump (callgrind_control): the router idle for a few seconds,
which gives the instructions of an empty iteration; then a fixed trace,
lnetr-peer brw of --count operations (after its warm-up) at each size.  A
window's instructions less its empty iterations' (counted by the worker:
loops - busy_loops) over the messages forwarded in it is the figure.  The
empty iterations are subtracted because their number depends on timing,
not on the work: under callgrind the router is slow and the peers are not.
That subtraction is the figure's uncertainty: an empty iteration's cost
moves between runs (600 to 860 instructions: its timers are per unit of
time, spread over however many iterations that time held), so a trace
whose window is mostly empty iterations (4 KiB writes here, about 50 to
75%) has no usable figure and is not run; 0 B PUTs (a third) vary by a
few per cent between runs, 1 MiB writes (under 5%) by less.

Prints instructions per forwarded message (and per KiB forwarded), the
functions that cost most in the 0 B trace, and writes JSON.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, HERE)
os.environ.setdefault("LNETR_BUILD", os.path.join(ROOT, "build", "release"))
os.environ.setdefault("LNETR_DATAPLANE", os.path.join(ROOT, "build", "release-vm", "dataplane", "lnetr-dataplane"))

from lnetr_memif import MemifTopology  # noqa: E402
from lnetr_test import Processes, peer_binary  # noqa: E402
from router_bench import cpu_model, say  # noqa: E402

TRACES = [  # name, op, size, concurrency
    ("put0_c64", "write", 0, 64),
    ("write1m_c8", "write", 1048576, 8),
]


class Profiled:
    def __init__(self, procs, workdir, mtu):
        self.dir = workdir
        self.out = os.path.join(workdir, "callgrind.out")
        self.dumps = 0
        self.topo = MemifTopology(procs, workdir, mtu=mtu, cores=(1,), main_core=0, poll="busy", peer_core=0,
                                  tag="lnetrci%d" % os.getpid(),
                                  wrapper=["valgrind", "--tool=callgrind", "--callgrind-out-file=" + self.out,
                                           "--compress-strings=no", "--compress-pos=no", "--collect-atstart=no",
                                           "--toggle-collect=lnetr::dp::Worker::iterate(*)"])

    def control(self, flag):
        subprocess.run(["callgrind_control", flag, str(self.topo.proc.popen.pid)], check=True,
                       capture_output=True, timeout=120)

    def window(self, run):
        """Zero, run(), dump: the dump's file, its instructions, and what
        the router did meanwhile."""
        st0 = self.topo.status()
        self.control("-z")
        run()
        self.control("-d")
        st1 = self.topo.status()
        self.dumps += 1
        path = "%s.%d" % (self.out, self.dumps)
        with open(path) as f:
            instr = next(int(line.split()[1]) for line in f if line.startswith(("summary:", "totals:")))
        w0, w1 = st0["workers"][0], st1["workers"][0]
        return path, {"instructions": instr,
                      "messages": st1["statistics"]["route_count"] - st0["statistics"]["route_count"],
                      "bytes": st1["statistics"]["route_length"] - st0["statistics"]["route_length"],
                      "loops": w1["loops"] - w0["loops"], "busy_loops": w1["busy_loops"] - w0["busy_loops"]}


def top_functions(path, n):
    """The n functions of most instructions (self) in a dump."""
    cp = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", path], capture_output=True, text=True, timeout=300)
    rows = []
    for line in cp.stdout.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*([\d.]+)%\)\s+(.*)", line)
        # (The thread's entry points show the window's whole count: not
        # functions of the loop.)
        if m and "PROGRAM TOTALS" not in line and float(m.group(2)) < 99:
            obj = re.search(r" \[([^\]]*)\]$", m.group(3))
            name = re.sub(r" \[[^\]]*\]$", "", m.group(3))
            name = name.split(":", 1)[1] if name.startswith(("???:", "./", "/")) else name
            if name.startswith("0x") and obj:  # no symbol: say whose code it is
                name += " in " + os.path.basename(obj.group(1))
            rows.append({"function": name[:110], "share": float(m.group(2)) / 100})
    return rows[:n]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=5000, help="operations of each trace, after the warm-up (default 5000)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of each trace's warm-up (default 3)")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench", "memif_instructions.json"))
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if not shutil.which(tool):
            sys.exit("memif_instructions: %s not found (Debian package valgrind)" % tool)
    if not os.access(os.environ["LNETR_DATAPLANE"], os.X_OK):
        sys.exit("memif_instructions: no %s (deploy/setup release-vm)" % os.environ["LNETR_DATAPLANE"])

    procs = Processes()
    workdir = tempfile.mkdtemp(prefix="lnetr-memif-instr-")
    p = Profiled(procs, workdir, args.mtu)
    t = p.topo
    doc = {"benchmark": "memif_instructions", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cpus": os.cpu_count(), "cpu": cpu_model()}, "args": vars(args), "traces": {}}
    try:
        t.start(timeout=300)
        server = procs.start([peer_binary(), "--nid", t.nid("b")] + t.peer_options("b") + ["server"])
        if not server.wait_stderr("serving", timeout=60):
            raise RuntimeError("server did not start: %s" % server.stop().stderr)
        time.sleep(3)
        _, idle = p.window(lambda: time.sleep(3))
        per_empty = idle["instructions"] / max(idle["loops"], 1)
        doc["empty_iteration"] = dict(idle, instructions_per_iteration=per_empty)
        say("empty iteration: %.0f instructions (%d iterations)" % (per_empty, idle["loops"]))
        for name, op, size, conc in TRACES:
            argv = [peer_binary(), "--nid", t.nid("a")] + t.peer_options("a") + [
                "brw", t.nid("b"), "--op", op, "--size", str(size), "--concurrency", str(conc), "--count",
                str(args.count), "--duration", "3600", "--warmup", str(args.warmup), "--timeout", "120",
                "--check", "none"]
            def run():
                cp = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
                if cp.returncode != 0:
                    raise RuntimeError("brw %s %d failed: %s%s" % (op, size, cp.stdout, cp.stderr))
            # A window mostly of empty iterations (the routes through a
            # peer's new memif link came back late in its warm-up) gives
            # no usable figure: run the trace again, at most twice more.
            for attempt in range(3):
                path, w = p.window(run)
                empty = w["loops"] - w["busy_loops"]
                if w["messages"] and empty * per_empty < 0.5 * w["instructions"]:
                    break
                say("%s: %.0f%% of the window was empty iterations; again" % (
                    name, 100 * empty * per_empty / max(w["instructions"], 1)))
            else:
                raise RuntimeError("%s: every window was mostly empty iterations: no usable figure" % name)
            w["attempt"] = attempt + 1
            own = w["instructions"] - empty * per_empty
            w.update({"instructions_per_message": own / w["messages"],
                      "instructions_per_message_with_empty_iterations": w["instructions"] / w["messages"],
                      "empty_iterations_share": empty * per_empty / w["instructions"],
                      "messages_per_busy_iteration": w["messages"] / max(w["busy_loops"], 1),
                      "instructions_per_kib": own / (w["bytes"] / 1024) if w["bytes"] else None})
            if name == "put0_c64":
                w["top_functions"] = top_functions(path, 25)
            doc["traces"][name] = w
            say("%-12s %7d messages, %5.1f per busy iteration: %6.0f instructions per message%s "
                "(empty iterations were %.0f%% of the window)" % (
                    name, w["messages"], w["messages_per_busy_iteration"], w["instructions_per_message"],
                    ", %.0f per KiB" % w["instructions_per_kib"] if w["instructions_per_kib"] else "",
                    100 * w["empty_iterations_share"]))
        server.stop()
    finally:
        t.stop()
        procs.cleanup()
        shutil.rmtree(workdir, True)
    for row in doc["traces"]["put0_c64"].get("top_functions", [])[:15]:
        say("  %5.1f%%  %s" % (100 * row["share"], row["function"]))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    say("wrote %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
