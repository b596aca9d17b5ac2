"""The daemons as their systemd units run them, started by hand the same way.

The user, groups and capabilities come from the unit files in deploy/systemd
(User=, AmbientCapabilities=, ...), applied with setpriv to numeric ids (the
host's /etc/passwd is left alone; the image test runs the real units).  The
service manager's side of sd_notify is a Unix datagram socket of the test's
(NOTIFY_SOCKET), and WATCHDOG_USEC asks for a watchdog as WatchdogSec= does.

Topology as test_router: a (tcp) -- r: lnetr-dataplane -- b (tcp1).
"""

import os
import re
import shutil
import socket
import tempfile
import threading
import time
import unittest

from lnetr_router import Router, Topology, api_request, control_binary, dataplane_binary
from lnetr_test import PeerTestCase

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
UNITS = os.path.join(ROOT, "deploy", "systemd")

DAEMON_UID = 64101   # the units' User=lnetr
ADMIN_GID = 64102    # lnetr-admin: the management socket's group
MONITOR_GID = 64103  # lnetr-monitor: the read-only socket's group
OTHER_UID = 64110    # a user in neither group


def unit_setting(unit, key):
    """The words of `key=` in deploy/systemd/`unit` (all its lines joined)."""
    words = []
    with open(os.path.join(UNITS, unit + ".in")) as f:
        for line in f:
            k, sep, v = line.strip().partition("=")
            if sep and k == key:
                words += v.split()
    return words


def as_user(uid, gid, groups=(), caps=()):
    """setpriv arguments: that uid/gid and groups, only `caps` (ambient, as
    AmbientCapabilities= gives them), no new privileges."""
    c = ",".join(["-all"] + ["+" + x.lower().removeprefix("cap_") for x in caps])
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid,
            "--groups=" + ",".join(map(str, groups)) if groups else "--clear-groups",
            "--inh-caps=" + c, "--ambient-caps=" + c, "--bounding-set=" + c, "--no-new-privs"]


class NotifySocket:
    """The service manager's end of sd_notify: every datagram, timed."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        os.chmod(path, 0o777)
        self.sock.settimeout(0.2)
        self.messages = []  # (monotonic time, text)
        self.lock = threading.Lock()
        self.done = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.messages.append((time.monotonic(), data.decode()))

    def close(self):
        self.done = True
        self.thread.join()
        self.sock.close()

    def times(self, line):
        """When a datagram holding `line` (e.g. "WATCHDOG=1") came."""
        with self.lock:
            return [t for t, m in self.messages if line in m.split("\n")]

    def wait(self, line, timeout=20):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.times(line):
                return True
            time.sleep(0.05)
        return False

    def text(self):
        with self.lock:
            return [m for _, m in self.messages]


class ServiceTestCase(PeerTestCase):

    def setUp(self):
        super().setUp()
        for b in (dataplane_binary(), control_binary()):
            if not os.access(b, os.X_OK):
                self.fail("%s not found" % b)
        self.topo = Topology()
        self.topo.up()
        self.addCleanup(self.topo.down)
        # The daemons' user writes its sockets here, as in /run/lnetr.
        self.dir = tempfile.mkdtemp(prefix="lnetr-service-")
        os.chmod(self.dir, 0o755)
        os.chown(self.dir, DAEMON_UID, DAEMON_UID)
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.router = Router(self.topo, self.dir, metrics="off")
        with open(self.router.config) as f:
            text = f.read()
        text = text.replace("  readonly_socket_group: nogroup\n",
                            "  socket_group: %d\n  readonly_socket_group: %d\n" % (ADMIN_GID, MONITOR_GID))
        with open(self.router.config, "w") as f:
            f.write(text)
        self.notify = {}

    def start_daemon(self, which, env=(), watchdog_usec=None):
        """lnetr-dataplane or lnetr-control as its unit runs it: its user,
        groups and capabilities, NOTIFY_SOCKET (and WATCHDOG_USEC) set."""
        unit = "lnetr-%s.service" % which
        caps = unit_setting(unit, "AmbientCapabilities")
        groups = [ADMIN_GID, MONITOR_GID] if unit_setting(unit, "SupplementaryGroups") else []
        self.assertEqual(unit_setting(unit, "User"), ["lnetr"])
        self.assertEqual(unit_setting(unit, "Type"), ["notify"])
        path = os.path.join(self.dir, "notify-" + which)
        n = NotifySocket(path)
        self.addCleanup(n.close)
        self.notify[which] = n
        environ = ["NOTIFY_SOCKET=" + path] + list(env)
        if watchdog_usec:
            environ.append("WATCHDOG_USEC=%d" % watchdog_usec)
        binary = dataplane_binary() if which == "dataplane" else control_binary()
        argv = ["env"] + environ + as_user(DAEMON_UID, DAEMON_UID, groups, caps) + [
            binary, "--config", self.router.config]
        p = self.procs.start(argv, host=self.topo.host("r"))
        if not n.wait("READY=1", timeout=30):
            p.stop()
            self.fail("%s sent no READY=1: %s\n%s" % (which, n.text(), p.stderr))
        return p

    def proc_status(self, pid_of_env):
        """/proc status fields of the daemon (the child of env+setpriv: exec
        keeps the pid)."""
        out = {}
        with open("/proc/%d/status" % pid_of_env) as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.split()
        return out

    def lnetrctl(self, uid, gid, groups, socket_path, *args):
        cp = self.topo.host("r").run(as_user(uid, gid, groups) + [
            os.environ.get("LNETR_LNETRCTL", "lnetrctl"), "--socket", socket_path] + list(args), timeout=30)
        return cp


class Unprivileged(ServiceTestCase):

    def test_routes_as_the_units_user_with_their_capabilities_only(self):
        dp = self.start_daemon("dataplane")
        ctl = self.start_daemon("control")
        for p, want_caps in ((dp, unit_setting("lnetr-dataplane.service", "AmbientCapabilities")),
                             (ctl, [])):
            st = self.proc_status(p.pid)
            self.assertEqual(st["Uid"], [str(DAEMON_UID)] * 4, p.argv)
            self.assertEqual(st["NoNewPrivs"], ["1"])
            # The effective capabilities are exactly the unit's.
            self.assertEqual(int(st["CapEff"][0], 16), capability_mask(want_caps), (p.argv, st["CapEff"]))
        # The socket files are the daemons' own, in their groups.
        self.assertEqual(os.stat(self.router.sock).st_uid, DAEMON_UID)
        self.assertEqual(os.stat(self.router.api_sock).st_gid, ADMIN_GID)
        ro = self.router.api_sock.replace(".sock", "-ro.sock")
        self.assertEqual(os.stat(ro).st_gid, MONITOR_GID)
        self.assertTrue(ctl.wait_stderr("attached to", timeout=15), ctl.stderr_so_far)
        # LNet works through it: port 988 bound, pings and verified PUTs and GETs.
        b = self.start_server(self.topo.nid("b"), self.topo.peer_options("b", 1), host=self.topo.host("b"))
        rc, doc, cp = self.run_peer(self.topo.nid("a"), ["ping", self.topo.b_nid, "--timeout", "5"],
                                    self.topo.peer_options("a", 1), host=self.topo.host("a"))
        self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        for op in ("put", "get"):
            rc, doc, cp = self.run_peer(self.topo.nid("a"), [op, self.topo.b_nid, "--size", "1048576", "--count", "20"],
                                        self.topo.peer_options("a", 1), host=self.topo.host("a"))
            self.assertEqual(rc, 0, cp.stdout + cp.stderr)
        self.stop_server(b)

        # The management socket: its group manages; the read-only group
        # reads only; anyone else is refused by the socket's mode.
        gw = self.topo.rb_nid.replace(".1@", ".9@")
        admin = self.lnetrctl(OTHER_UID, OTHER_UID, [ADMIN_GID], self.router.api_sock,
                              "route", "add", "--net", "tcp9", "--gateway", gw)
        self.assertEqual(admin.returncode, 0, admin.stdout + admin.stderr)
        shown = self.lnetrctl(OTHER_UID, OTHER_UID, [MONITOR_GID], ro, "route", "show")
        self.assertEqual(shown.returncode, 0, shown.stdout + shown.stderr)
        self.assertIn("tcp9", shown.stdout)
        refused = self.lnetrctl(OTHER_UID, OTHER_UID, [MONITOR_GID], ro, "route", "del", "--net", "tcp9", "--gateway", gw)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("read-only", refused.stderr)
        for path in (self.router.api_sock, ro):
            stranger = self.lnetrctl(OTHER_UID, OTHER_UID, [], path, "route", "show")
            self.assertNotEqual(stranger.returncode, 0, stranger.stdout)
            self.assertIn("Permission denied", stranger.stderr)
        # The monitoring group cannot use the management socket either.
        not_admin = self.lnetrctl(OTHER_UID, OTHER_UID, [MONITOR_GID], self.router.api_sock, "route", "show")
        self.assertIn("Permission denied", not_admin.stderr)


class Notify(ServiceTestCase):

    def test_ready_status_and_a_watchdog_fed_only_while_every_worker_loops(self):
        dp = self.start_daemon("dataplane", env=["LNETR_TEST_FAULTS=1"], watchdog_usec=1_000_000)
        n = self.notify["dataplane"]
        # READY=1 came once NIs were up and the workers started.
        self.assertTrue(dp.wait_stderr("forwarding with", timeout=1), dp.stderr_so_far)
        self.assertTrue(any(m.startswith("READY=1\nSTATUS=forwarding: 2 NI(s), 2 worker(s)") for m in n.text()),
                        n.text())
        # Fed every half period (0.5 s) while both workers loop.
        time.sleep(3)
        fed = n.times("WATCHDOG=1")
        self.assertGreaterEqual(len(fed), 4, fed)
        # Worker 1 stuck for 3 s: not fed for that long, the worker named.
        answer = self.router.control("fault stall 1 3")
        self.assertEqual((answer["stalled"], answer["seconds"]), (1, 3), answer)
        stalled_at = time.monotonic()
        self.assertTrue(dp.wait_stderr("worker 1: its loop has not moved", timeout=3), dp.stderr_so_far)
        time.sleep(3.5)
        during = [t for t in n.times("WATCHDOG=1") if stalled_at + 1.05 < t < stalled_at + 2.9]
        self.assertEqual(during, [], n.times("WATCHDOG=1"))
        # It loops again: fed again.
        before = len(n.times("WATCHDOG=1"))
        time.sleep(1.5)
        self.assertGreater(len(n.times("WATCHDOG=1")), before)
        # Without LNETR_TEST_FAULTS the request does not exist (the other tests).
        # Stopping says so.
        dp.stop()
        self.assertEqual(dp.returncode, 0, dp.stderr)
        self.assertIn("STOPPING=1", n.text())

    def test_faults_are_refused_unless_asked_for(self):
        self.start_daemon("dataplane")
        answer = self.router.control("fault stall 0 1")
        self.assertIn("errno", answer)

    def test_control_ready_and_fed(self):
        self.start_daemon("dataplane")
        ctl = self.start_daemon("control", watchdog_usec=1_000_000)
        n = self.notify["control"]
        self.assertTrue(n.wait("STATUS=serving; attached to the dataplane"), n.text())
        time.sleep(2)
        self.assertGreaterEqual(len(n.times("WATCHDOG=1")), 3, n.text())
        ctl.stop()
        self.assertIn("STOPPING=1", n.text())


class Journal(ServiceTestCase):

    def test_lines_carry_severities_when_stderr_is_the_journal(self):
        # JOURNAL_STREAM names stderr (device:inode) as systemd sets it:
        # a shell reads its own stderr's identity and execs the dataplane.
        host = self.topo.host("r")
        argv = ["sh", "-c", 'JOURNAL_STREAM=$(stat -L -c "%d:%i" /proc/self/fd/2) exec "$0" "$@"',
                dataplane_binary(), "--config", self.router.config]
        p = self.procs.start(argv, host=host)
        self.assertTrue(p.wait_stderr("forwarding with", timeout=30), p.stderr_so_far)
        p.stop()
        lines = [l for l in p.stderr.splitlines() if l]
        self.assertTrue(lines)
        for line in lines:
            if line.startswith("EAL:") or line.startswith("TELEMETRY:"):
                continue  # DPDK's own
            self.assertRegex(line, r"^<[3-7]>(error|warning|info|debug): ", line)
        self.assertTrue(any(l.startswith("<6>info: forwarding with") for l in lines), lines)
        # Without it, lines carry their time and the program's name.
        p = self.procs.start([dataplane_binary(), "--config", self.router.config], host=host)
        self.assertTrue(p.wait_stderr("forwarding with", timeout=30), p.stderr_so_far)
        p.stop()
        self.assertRegex(p.stderr, r"(?m)^\d{4}-\d\d-\d\dT[0-9:.]+Z lnetr-dataplane info: forwarding with")


CAP_BITS = {"chown": 0, "dac_override": 1, "net_bind_service": 10, "net_broadcast": 11, "net_admin": 12,
            "net_raw": 13, "ipc_lock": 14, "sys_rawio": 17, "sys_admin": 21, "sys_nice": 23, "bpf": 39}


def capability_mask(caps):
    m = 0
    for c in caps:
        m |= 1 << CAP_BITS[c.lower().removeprefix("cap_")]
    return m


if __name__ == "__main__":
    unittest.main()
