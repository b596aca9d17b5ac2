"""A soak: the gateway topology (lnetr_gateways.py: A on tcp, router R with
lnetr-control, gateways G1 and G2, B on tcp2) under a mixed load for
LNETR_SOAK_SECONDS (180 s in CI; the opt-in `soak` suite runs an hour),
with, in turn, every 15 s: a fault rule on R dropping one of A's PUTs in
50, G1 killed and restarted (a gateway flap), and a second client coming
and going (peer churn).  Asserted at the end: B found no corrupted byte,
R's credits and buffers are at rest, its RSS is flat (the last sample
within 10% and 8 MB of the first after warm-up), and what R dropped is
the fault rule's, or what G1 held when it was killed.
"""

import json
import os
import signal
import time

from lnetr_router import rss_kib
from test_gateways import GatewayTestCase

CHUNK = 15  # seconds per round of load (and per event)


class Soak(GatewayTestCase):

    def setUp(self):
        # Under AddressSanitizer freed memory waits in a quarantine (256 MB
        # by default) before reuse, so RSS grows with what is allocated,
        # not with what is kept: a small one makes RSS mean what it says.
        if os.environ.get("LNETR_SANITIZED") == "1":
            opts = os.environ.get("ASAN_OPTIONS", "")
            os.environ["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "quarantine_size_mb=8"
        super().setUp()

    def test_mixed_load_with_gateway_flaps_faults_and_churn(self):
        seconds = float(os.environ.get("LNETR_SOAK_SECONDS", "180"))
        end = time.monotonic() + seconds
        samples, errors, ops, rnd = [], 0, 0, 0
        events = ("fault", "flap", "churn")
        while time.monotonic() < end:
            event = events[rnd % len(events)]
            json_path = os.path.join(self.dir, "load-%d.json" % rnd)
            op = "write" if rnd % 2 == 0 else "read"
            argv = self.peer_argv(self.topo.a_nid, ["brw", self.topo.b_nid, "--op", op, "--sizes",
                                                    "0,4096,65536,1048576", "--concurrency", "8", "--duration",
                                                    str(CHUNK), "--timeout", "5", "--json", json_path],
                                  self.a_options())
            load = self.procs.start(argv, host=self.topo.host("a"))
            time.sleep(2)
            if event == "fault":
                rule = self.ok("fault add", {"kind": "drop", "source": self.topo.a_nid, "type": "PUT",
                                             "rate": 50})["fault"]
                time.sleep(CHUNK - 4)
                self.ok("fault del", {"id": rule["id"]})
            elif event == "flap":
                self.dp["g1"].stop(signal.SIGKILL)
                time.sleep(3)
                self.start_dataplane("g1")
            else:
                for _ in range(5):
                    self.run_peer(self.topo.probe_nid, ["put", self.topo.b_nid, "--size", "65536", "--count", "20",
                                                        "--timeout", "5"], self.a_options(), host=self.topo.host("a"),
                                  timeout=60)
            res = self.finish_load(load, json_path, timeout=CHUNK + 60)
            errors += res.get("errors", 0)
            ops += res.get("ops", 0)
            if event == "flap" or event == "fault":
                self.assertLessEqual(res.get("errors", 0), 64, (event, res))
            else:
                self.assertEqual(res.get("errors", 0), 0, (event, res))
            samples.append(rss_kib(self.dp["r"].popen.pid))
            rnd += 1
        self.assertGreater(ops, 0)
        self.assert_r_idle(timeout=30)
        base = samples[min(2, len(samples) - 1)]
        print("\nsoak: %.0f s, %d rounds, %d ops, %d errors; R's RSS %s KiB" %
              (seconds, rnd, ops, errors, samples))
        self.assertLessEqual(samples[-1], max(base * 1.10, base + 8192), samples)
        drops = self.status("r")["drops"]
        self.assertEqual({why: n for why, n in drops.items() if n and why not in ("fault", "send_failed")}, {}, drops)
        self.finish()  # B's pattern checks: no corrupted byte; R at rest


if __name__ == "__main__":
    import unittest
    unittest.main()
