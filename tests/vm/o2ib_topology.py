"""The o2ib router topology in one qemu guest, shared by the o2ib tests
(test_o2ib.py) and the o2ib benchmark (tests/bench/o2ib_bench.py).

Four soft-RoCE devices, each on its own virtio NIC, their traffic crossing
the qemu hub (lnetr_vm.Guest.setup_rxe):

    A   10.99.2.1@o2ib    eth0/rxe0 ---+   (Y 10.99.2.4@o2ib on eth0 too: o2ib clients)
    Z   10.99.2.3@o2ib    eth1/rxe1    |  (a second node on net o2ib, for direct tests)
    R   10.99.2.2@o2ib    eth1/rxe1 ---+   lnetr-dataplane, one worker:
        10.99.3.2@o2ib1   eth2/rxe2 ---+     o2ib, o2ib1 (verbs), tcp and tcp2 (kernel
    C   10.99.3.1@o2ib1   eth3/rxe3 ---+     sockets on dummy interfaces), tcp1 (a DPDK
        (X 10.99.3.4@o2ib1 on eth3 too: o2ib1 clients)
    B   10.98.0.2@tcp     dum0 (with R 10.98.0.1@tcp;         af_packet port on veth vr)
                          B2 10.98.0.3@tcp: tcp clients)
    E   10.96.0.2@tcp2    dum1 (with R 10.96.0.1@tcp2)
    D   10.97.0.2@tcp1    netns t, veth vt <-> vr (R's DPDK port, 10.97.0.1)
                          (D2 10.97.0.3@tcp1 on vt too: a server there)

A, B, C and E are servers (D2 too, in the benchmark); clients have NIDs
of their own (a second process with a server's NID would be a restarted
node to the router).  The router's control socket and API socket live in
the guest's /tmp (a Unix socket cannot be made on the 9p share).
"""

import json
import os
import sys
import time
from pathlib import Path

import lnetr_vm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from lnetr_router import not_at_rest  # noqa: E402
from lnetr_test import parse_yaml  # noqa: E402

A, Y, Z, R_IB, R_IB1, C = "10.99.2.1", "10.99.2.4", "10.99.2.3", "10.99.2.2", "10.99.3.2", "10.99.3.1"
X = "10.99.3.4"
R_TCP, B, B2, R_TCP1, D, D2 = "10.98.0.1", "10.98.0.2", "10.98.0.3", "10.97.0.1", "10.97.0.2", "10.97.0.3"
R_TCP2, E = "10.96.0.1", "10.96.0.2"

ROUTER_CONFIG = """\
net:
  - net type: tcp
    local NI(s):
      - nid: {r_tcp}@tcp
  - net type: tcp2
    local NI(s):
      - nid: {r_tcp2}@tcp2
  - net type: tcp1
    local NI(s):
      - interfaces:
          0: vr
  - net type: o2ib
    local NI(s):
      - interfaces:
          0: eth1
  - net type: o2ib1
    local NI(s):
      - interfaces:
          0: eth2
buffers:
  tiny: 256
  small: 512
  large: 48
dataplane:
  cores: [0]
  main_core: 1
  poll: {poll}
  hugepages: no
  memory_mb: 512
  control_socket: {sock}
  shm_name: /lnetr-vm-o2ib
  alive_router_check_interval: 0
  o2iblnd:
    keepalive: 100
    remote_keys: {remote_keys}
  ports:
    - name: vr
      device: "net_af_packet0,iface=vr"
      address: {r_tcp1}/24
control:
  socket: {api}
  metrics: "127.0.0.1:9798"
"""

# A request to the router's control socket, run in the guest.
REQUEST = ("python3 -c \"import socket,sys;s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1]);"
           "s.sendall(sys.argv[2].encode()+b'\\n');b=b''\n"
           "while True:\n c=s.recv(1<<20)\n if not c: break\n b+=c\n"
           "sys.stdout.write(b.decode())\" ")

# Each server: its NID and its routes ("nets|gateway").
SERVERS = {
    "A": (f"{A}@o2ib", f"tcp,tcp1,tcp2,o2ib1|{R_IB}@o2ib"),
    "C": (f"{C}@o2ib1", f"tcp,tcp1,tcp2,o2ib|{R_IB1}@o2ib1"),
    "B": (f"{B}@tcp", f"o2ib,o2ib1,tcp1,tcp2|{R_TCP}@tcp"),
    "E": (f"{E}@tcp2", f"o2ib,o2ib1,tcp1,tcp|{R_TCP2}@tcp2"),
    "D2": (f"{D2}@tcp1", f"o2ib,o2ib1,tcp,tcp2|{R_TCP1}@tcp1"),  # in netns t
}


class Topology:
    """The guest's devices, addresses and namespace; the router and the
    servers, started and stopped; status and clients."""

    def __init__(self, guest, build, name="o2ib"):
        self.g = guest
        self.build = Path(build)
        self.peer = os.environ.get("LNETR_PEER", str(self.build / "cli/peer/lnetr-peer"))
        self.dataplane = os.environ.get("LNETR_DATAPLANE", str(self.build / "dataplane/lnetr-dataplane"))
        self.dir = lnetr_vm.SOURCE_ROOT / "build" / "vm" / f"{name}-{os.getpid()}"
        self.sock = "/tmp/lnetr-o2ib/dp.sock"
        self.api = "/tmp/lnetr-o2ib/control.sock"
        self.router = None
        self.servers = {}

    def setup(self):
        self.g.setup_rxe({0: [f"{A}/24", f"{Y}/24"], 1: [f"{R_IB}/24", f"{Z}/24"], 2: f"{R_IB1}/24",
                           3: [f"{C}/24", f"{X}/24"]})
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sh("modprobe -d /mods -a veth dummy 2>/dev/null; true")
        self.sh(f"ip link add dum0 type dummy && ip link set dum0 up && ip addr add {R_TCP}/24 dev dum0 && "
                f"ip addr add {B}/24 dev dum0 && ip addr add {B2}/24 dev dum0")
        self.sh(f"ip link add dum1 type dummy && ip link set dum1 up && ip addr add {R_TCP2}/24 dev dum1 && "
                f"ip addr add {E}/24 dev dum1")
        self.sh(f"ip netns add t && ip link add vr type veth peer name vt && ip link set vt netns t && "
                f"ip -n t addr add {D}/24 dev vt && ip -n t addr add {D2}/24 dev vt && "
                f"ip -n t link set vt up && ip -n t link set lo up && "
                f"ip link set vr up && ethtool -K vr tx off tso off gso off gro off >/dev/null && "
                f"ip netns exec t ethtool -K vt tx off tso off gso off gro off >/dev/null")
        self.sh("mkdir -p /tmp/lnetr-o2ib")

    def sh(self, cmd, timeout=60):
        rc, out, err = self.g.run(cmd, timeout=timeout)
        if rc != 0:
            raise AssertionError(f"{cmd!r}: exit {rc}\n{out}\n{err}")
        return out

    def wait_for(self, cond, timeout, what):
        end = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > end:
                raise AssertionError(f"timed out waiting for {what}; router: "
                                     f"{self.router.output() if self.router else None}")
            time.sleep(0.3)

    def start_router(self, poll="adaptive", remote_keys="transfer"):
        (self.dir / "lnetr.yaml").write_text(ROUTER_CONFIG.format(
            r_tcp=R_TCP, r_tcp2=R_TCP2, r_tcp1=R_TCP1, sock=self.sock, api=self.api, poll=poll,
            remote_keys=remote_keys))
        self.router = self.g.spawn(f"exec {self.dataplane} --config {self.dir}/lnetr.yaml")
        self.wait_for(lambda: self.g.run(f"test -S {self.sock}")[0] == 0, 60, "the router's socket")
        return self.router

    def stop_router(self):
        if self.router:
            self.router.kill()
            self.router.wait(30)
            self.router = None
            self.g.run(f"rm -f {self.sock}")

    def router_pid(self):
        return int(self.sh("pgrep -f -o 'lnetr-dataplane --config'").split()[0])

    def router_cpu_seconds(self):
        """(user, system) CPU seconds of the dataplane process.  On an o2ib
        net the system time is mostly soft-RoCE's: rxe does in the kernel,
        in the poster's context, what an HCA does in hardware."""
        stat = self.sh(f"cat /proc/{self.router_pid()}/stat")
        fields = stat.rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tck, int(fields[12]) / tck

    @staticmethod
    def routes(spec):
        nets, gw = spec.split("|")
        return " ".join(f"--route {n}={gw}" for n in nets.split(","))

    def peer_cmd(self, nid, route, args, netns=None, check=0):
        pre = f"ip netns exec {netns} " if netns else ""
        return f"{pre}{self.peer} --nid {nid} {self.routes(route)} --router-check-interval {check} {args}"

    def start_server(self, name, netns=None):
        nid, route = SERVERS[name]
        # Servers check their gateway every 2 s, as a Linux node's router
        # checker does: a restarted one is heard by the router again.
        p = self.g.spawn("exec " + self.peer_cmd(nid, route, "server", netns, check=2))
        self.wait_for(lambda: "serving" in p.output()[1] or p.poll() is not None, 60, f"server {nid}")
        if p.poll() is not None:
            raise AssertionError(f"server {nid} exited: {p.output()}")
        self.servers[name] = p
        return p

    def stop_servers(self):
        for p in self.servers.values():
            p.kill()
            p.wait(20)
        self.servers = {}

    def client(self, nid, route, args, netns=None, timeout=120):
        """A client run (it does not listen): (rc, YAML document, stdout, stderr)."""
        rc, out, err = self.g.run(self.peer_cmd(nid, route, "--accept none " + args, netns), timeout=timeout)
        return rc, parse_yaml(out) if out.strip() else {}, out, err

    def request(self, line):
        """One request on the dataplane's control socket: its JSON answer."""
        return json.loads(self.sh(REQUEST + self.sock + " '" + line + "'", timeout=30))

    def status(self):
        return self.request("status")

    def problems(self, st):
        """What in a status is not at rest, o2ib connections included."""
        out = not_at_rest(st)
        conns = self.request("o2ib connections")["connections"] if "o2iblnd" in st else []
        for c in conns:
            if c["queued"] or c["waiting"] or c["rx_held"] or c["sends_posted"] or \
                    c["reserved_credits"] != c["queue_depth"]:
                out.append(f"o2ib connection to {c['peer']}: {c}")
        return out
