"""A router behind two gateways, for lnetr-control's gateway-health tests.

    a: lnetr-peer A 10.N.1.2@tcp (and a probe client 10.N.1.4@tcp)
       |
    r: lnetr-dataplane + lnetr-control R  10.N.1.1@tcp / 10.N.2.1@tcp1
       |                                       routes: tcp2 via G1 (priority 0), via G2 (priority 1)
    [bridge tcp1]
       |                        |
    g1: lnetr-dataplane G1     g2: lnetr-dataplane G2     10.N.2.11/12@tcp1 / 10.N.3.11/12@tcp2
       |                        |                          route: tcp via R
    [bridge tcp2]
       |
    b: lnetr-peer B 10.N.3.3@tcp2                          routes: tcp via G1 and G2

The bridges live in a sixth namespace (s).  Every gateway is a real lnetr
router with one worker; B answers a routed request through the gateway it
came from, as Linux does.  Python 3 standard library only.
"""

import os
import subprocess

from lnetr_router import control_binary, dataplane_binary, ip
from lnetr_test import Host

DATAPLANE_CONFIG = """\
net:
  - net type: {net0}
    local NI(s):
{net0_nis}
  - net type: {net1}
    local NI(s):
      - interfaces:
          0: eth1
{routes}
buffers:
  tiny: 128
  small: 256
  large: 32
global:
  health_sensitivity: 100
dataplane:
  cores: [{cores}]
  main_core: {main_core}
  poll: adaptive
  control_socket: {sock}
  shm_name: /{shm}
  alive_router_check_interval: {check}
  router_ping_timeout: {timeout}
  socklnd:
    sock_timeout: 10
    min_reconnectms: 200
    max_reconnectms: 1000
control:
  socket: {api_sock}
  metrics: 127.0.0.1:9798
"""


class GatewayTopology:
    """Namespaces <tag>{a,r,g1,g2,b,s} and their links; removed by down()."""

    def __init__(self, g1_rail=False):
        """g1_rail: G1 is Multi-Rail, with a second NI on tcp1 (eth2,
        10.N.2.21), its addresses answering ARP only on their own interface
        as lnetctl setup-sysctl sets a Multi-Rail TCP node up."""
        self.g1_rail = g1_rail
        pid = os.getpid()
        self.n = pid % 100 * 2 + 21
        self.tag = "lg%d" % (pid % 100000)
        self.ns = {k: self.tag + k for k in ("a", "r", "g1", "g2", "b", "s")}
        n = self.n
        self.ip = {
            "a": {"eth0": "10.%d.1.2" % n},
            "r": {"eth0": "10.%d.1.1" % n, "eth1": "10.%d.2.1" % n},
            "g1": dict({"eth0": "10.%d.2.11" % n, "eth1": "10.%d.3.11" % n},
                       **({"eth2": "10.%d.2.21" % n} if g1_rail else {})),
            "g2": {"eth0": "10.%d.2.12" % n, "eth1": "10.%d.3.12" % n},
            "b": {"eth0": "10.%d.3.3" % n},
        }
        self.a_nid = self.ip["a"]["eth0"] + "@tcp"
        self.probe_nid = "10.%d.1.4@tcp" % n  # a second client in a, for probes beside a load
        self.b_nid = self.ip["b"]["eth0"] + "@tcp2"
        self.r_nid = {"tcp": self.ip["r"]["eth0"] + "@tcp", "tcp1": self.ip["r"]["eth1"] + "@tcp1"}
        self.g_nid = {g: {"tcp1": self.ip[g]["eth0"] + "@tcp1", "tcp2": self.ip[g]["eth1"] + "@tcp2"}
                      for g in ("g1", "g2")}

    def _link(self, ns, ifname, addr, bridge=None, peer_ns=None, peer_if=None, peer_addr=None):
        """A veth from `ns`:`ifname` to a bridge port in s, or to peer_ns:peer_if."""
        tmp1, tmp2 = self.tag + "x", self.tag + "y"
        ip("link", "add", tmp1, "type", "veth", "peer", "name", tmp2)
        ip("link", "set", tmp1, "netns", ns)
        ip("-n", ns, "link", "set", tmp1, "name", ifname)
        ip("-n", ns, "addr", "add", addr + "/24", "dev", ifname)
        ip("-n", ns, "link", "set", ifname, "up")
        if bridge:
            port = "p%s%s" % (ns[len(self.tag):], ifname[-1])
            ip("link", "set", tmp2, "netns", self.ns["s"])
            ip("-n", self.ns["s"], "link", "set", tmp2, "name", port)
            ip("-n", self.ns["s"], "link", "set", port, "master", bridge)
            ip("-n", self.ns["s"], "link", "set", port, "up")
        else:
            ip("link", "set", tmp2, "netns", peer_ns)
            ip("-n", peer_ns, "link", "set", tmp2, "name", peer_if)
            ip("-n", peer_ns, "addr", "add", peer_addr + "/24", "dev", peer_if)
            ip("-n", peer_ns, "link", "set", peer_if, "up")

    def up(self):
        self.down()
        for ns in self.ns.values():
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
        s = self.ns["s"]
        for br in ("br1", "br2"):
            ip("-n", s, "link", "add", br, "type", "bridge")
            ip("-n", s, "link", "set", br, "up")
        self._link(self.ns["a"], "eth0", self.ip["a"]["eth0"], peer_ns=self.ns["r"], peer_if="eth0",
                   peer_addr=self.ip["r"]["eth0"])
        ip("-n", self.ns["a"], "addr", "add", self.probe_nid.split("@")[0] + "/24", "dev", "eth0")
        self._link(self.ns["r"], "eth1", self.ip["r"]["eth1"], bridge="br1")
        for g in ("g1", "g2"):
            self._link(self.ns[g], "eth0", self.ip[g]["eth0"], bridge="br1")
            self._link(self.ns[g], "eth1", self.ip[g]["eth1"], bridge="br2")
        if self.g1_rail:
            g1 = self.ns["g1"]
            for key, value in (("arp_ignore", "1"), ("arp_announce", "2")):
                subprocess.run(["ip", "netns", "exec", g1, "sysctl", "-qw", "net.ipv4.conf.all.%s=%s" % (key, value)],
                               check=True)
            self._link(g1, "eth2", self.ip["g1"]["eth2"], bridge="br1")
        self._link(self.ns["b"], "eth0", self.ip["b"]["eth0"], bridge="br2")

    def down(self):
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def host(self, name):
        return Host.netns(self.ns[name])

    def set_link(self, name, ifname, up):
        ip("-n", self.ns[name], "link", "set", ifname, "up" if up else "down")

    def write_config(self, name, workdir, routes, cores, check, timeout):
        """The dataplane configuration of router `name` (r, g1 or g2); its path."""
        nets = ("tcp", "tcp1") if name == "r" else ("tcp1", "tcp2")
        rails = ("eth0", "eth2") if name == "g1" and self.g1_rail else ("eth0",)
        net0_nis = "\n".join("      - interfaces:\n          0: %s" % i for i in rails)
        lines = ["route:"] if routes else []
        for net, gw, prio in routes:
            lines += ["  - net: %s" % net, "    gateway: %s" % gw, "    priority: %d" % prio]
        path = os.path.join(workdir, name + ".yaml")
        with open(path, "w") as f:
            f.write(DATAPLANE_CONFIG.format(net0=nets[0], net0_nis=net0_nis, net1=nets[1], routes="\n".join(lines),
                                            cores=", ".join(map(str, cores)), main_core=cores[0],
                                            sock=os.path.join(workdir, name + ".sock"),
                                            shm=self.tag + name, check=check, timeout=timeout,
                                            api_sock=os.path.join(workdir, name + "-control.sock")))
        return path

    def start_dataplane(self, procs, name, config, timeout=30):
        """lnetr-dataplane in namespace `name`; (Proc, None) or (None, why not)."""
        p = procs.start([dataplane_binary(), "--config", config], host=self.host(name))
        if p.wait_stderr("forwarding with", timeout=timeout):
            return p, None
        p.stop()
        return None, "lnetr-dataplane in %s did not start: rc=%s\n%s" % (name, p.returncode, p.stderr)

    def start_control(self, procs, config):
        return procs.start([control_binary(), "--config", config], host=self.host("r"))
