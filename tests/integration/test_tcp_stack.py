"""The dataplane's own TCP/IP stack (dataplane/tcp/) against the Linux
kernel's TCP, before DPDK ports carry it: lnetr-tcp-echo runs the stack on a
veth end through an AF_PACKET socket in one namespace, the kernel's sockets
talk to it from another.

    k: kernel, 10.N.9.2/24 on veth ka  --  r: lnetr-tcp-echo as 10.N.9.1 on veth kr (no kernel address)

and the same over IPv6 (fd00:N:9::2/64 and ::1: neighbour discovery, TCP
over IPv6).

Offloads are off on both ends (a DPDK port sees what the wire carries).
Loss comes from iptables' statistic match in k, both ways.
"""

import json
import os
import shutil
import subprocess
import time
import unittest

from lnetr_test import Host, build_dir


def echo_binary():
    return os.environ.get("LNETR_TCP_ECHO") or os.path.join(build_dir(), "tests", "integration", "lnetr-tcp-echo")


def run(*args):
    subprocess.run(list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


# A kernel client in namespace k: send N random bytes, read them back, compare.
CLIENT = r"""
import os, socket, sys, time
n = int(sys.argv[2]); data = os.urandom(n)
s = socket.create_connection((sys.argv[1], 988), timeout=60)
start = time.monotonic(); got = bytearray(); sent = 0
s.setblocking(False)
while len(got) < n:
    if sent < n:
        try: sent += s.send(data[sent:sent + 65536])
        except BlockingIOError: pass
    try:
        chunk = s.recv(1 << 20)
        if not chunk: break
        got += chunk
    except BlockingIOError: time.sleep(0.0005)
    if time.monotonic() - start > 60: break
s.close()
print("ok" if bytes(got) == data else "MISMATCH %d of %d" % (len(got), n), "%.3f" % (time.monotonic() - start))
"""

# A kernel echo server in namespace k (one connection).
SERVER = r"""
import socket, sys
l = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], 988)); l.listen(1); print("listening", flush=True)
c, _ = l.accept(); c.settimeout(60)
while True:
    b = c.recv(1 << 20)
    if not b: break
    c.sendall(b)
c.close()
"""


class KernelPeer(unittest.TestCase):
    ipv6 = False

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (network namespaces, AF_PACKET)")
        if not os.access(echo_binary(), os.X_OK):
            self.fail("lnetr-tcp-echo not found at %s" % echo_binary())
        if not shutil.which("ethtool") or not shutil.which("iptables"):
            self.fail("ethtool and iptables are needed (deploy/setup installs them)")
        pid = os.getpid()
        n = pid % 200 + 20
        self.ns = {"k": "lt%dk" % pid, "r": "lt%dr" % pid}
        self.k_ip, self.r_ip = "10.%d.9.2" % n, "10.%d.9.1" % n
        if self.ipv6:
            self.k_ip, self.r_ip = "fd00:%x:9::2" % n, "fd00:%x:9::1" % n
        self.addCleanup(self.down)
        for ns in self.ns.values():
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "link", "add", "lt%dx" % pid, "type", "veth", "peer", "name", "lt%dy" % pid)
        for tmp, side, name in (("lt%dx" % pid, "k", "ka"), ("lt%dy" % pid, "r", "kr")):
            run("ip", "link", "set", tmp, "netns", self.ns[side])
            run("ip", "-n", self.ns[side], "link", "set", tmp, "name", name)
            run("ip", "netns", "exec", self.ns[side], "ethtool", "-K", name, "tx", "off", "rx", "off", "tso", "off",
                "gso", "off", "gro", "off")
            run("ip", "-n", self.ns[side], "link", "set", name, "up")
        if self.ipv6:  # usable at once (no duplicate address detection)
            run("ip", "-n", self.ns["k"], "addr", "add", self.k_ip + "/64", "dev", "ka", "nodad")
        else:
            run("ip", "-n", self.ns["k"], "addr", "add", self.k_ip + "/24", "dev", "ka")
        run("ip", "netns", "exec", self.ns["r"], "sysctl", "-qw", "net.ipv6.conf.kr.disable_ipv6=1")
        self.k, self.r = Host.netns(self.ns["k"]), Host.netns(self.ns["r"])
        self.procs = []

    def down(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self, host, argv):
        p = subprocess.Popen(host.cmd(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def serve(self):
        p = self.start(self.r, [echo_binary(), "--if", "kr", "--ip", self.r_ip, "--listen", "988", "--limit", "300"])
        time.sleep(0.3)
        return p

    def finish(self, p):
        p.terminate()
        out, err = p.communicate(timeout=30)
        return json.loads(out.strip().splitlines()[-1]), err

    def lose(self, percent):
        for chain in ("INPUT", "OUTPUT"):
            run("ip", "netns", "exec", self.ns["k"], "ip6tables" if self.ipv6 else "iptables", "-A", chain, "-p", "tcp", "-m", "statistic", "--mode",
                "random", "--probability", str(percent / 100), "-j", "DROP")

    def test_a_kernel_client_gets_its_bytes_echoed(self):
        server = self.serve()
        cp = self.k.run(["python3", "-c", CLIENT, self.r_ip, str(8 << 20)], timeout=120)
        self.assertTrue(cp.stdout.startswith("ok"), cp.stdout + cp.stderr)
        stats, err = self.finish(server)
        print("\nkernel client -> lnetr stack echo, 8 MiB: %s s" % cp.stdout.split()[1])
        self.assertEqual(stats["dropped_malformed"], 0, stats)  # every kernel segment decoded, checksums right
        self.assertGreater(stats["frames_in"], 1000, stats)

    def test_our_client_to_a_kernel_listener(self):
        server = self.start(self.k, ["python3", "-c", SERVER, self.k_ip])
        self.assertEqual(server.stdout.readline().strip(), "listening")
        target = ("[%s]" if self.ipv6 else "%s") % self.k_ip
        cp = self.r.run([echo_binary(), "--if", "kr", "--ip", self.r_ip, "--connect", target + ":988", "--bytes",
                         str(4 << 20), "--limit", "90"], timeout=120)
        stats = json.loads(cp.stdout.strip().splitlines()[-1])
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertEqual((stats["echoed"], stats["bad"]), (4 << 20, 0), stats)
        self.assertIn(stats["ended"], ("closed", "time_wait"), stats)  # both FINs exchanged

    def test_loss_both_ways_is_repaired(self):
        self.lose(2)
        server = self.serve()
        cp = self.k.run(["python3", "-c", CLIENT, self.r_ip, str(2 << 20)], timeout=120)
        self.assertTrue(cp.stdout.startswith("ok"), cp.stdout + cp.stderr)
        stats, err = self.finish(server)
        print("\n2%% loss both ways, 2 MiB echoed in %s s" % cp.stdout.split()[1])
        self.assertEqual(stats["dropped_malformed"], 0, stats)


class KernelPeerIpv6(KernelPeer):
    """The same over IPv6: the kernel finds lnetr's stack by neighbour
    discovery and speaks TCP over IPv6 to it, both ways, with loss."""
    ipv6 = True


if __name__ == "__main__":
    unittest.main()
