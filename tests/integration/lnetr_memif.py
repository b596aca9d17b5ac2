"""An all-DPDK topology: lnetr-peers on net_memif ports with lnetr's own
TCP/IP, and between them either lnetr-dataplane (two memif ports) or, for
the ceiling, dpdk-testpmd io-forwarding (a wire that forwards frames and
terminates nothing).  No kernel on the data path, no namespaces, no
hugepages, no privileges needed by memif itself.

    router:  A @tcp  ==memif==  lnetr-dataplane (pa @tcp, pb @tcp1)  ==memif==  B @tcp1
    wire:    A @tcp  ==memif==  dpdk-testpmd (io)                    ==memif==  B @tcp

With `pairs=2` the router has a second pair of one-queue ports (pa1 @tcp2,
pb1 @tcp3) between peers A1 and B1; pair k's NIs list CPT k (of the
router's cores), so that each pair is forwarded by its own worker.

With `link="virtio"` the router's ports are net_virtio_user devices and
the peers' their vhost-user backends (net_vhost): a NIC's stand-in with
offloads.  The router's side negotiates TCP checksum offload both ways,
TSO (host TSO4: it hands 64 KiB units to its port whole) and LRO (guest
TSO4: it receives 64 KiB units in chains of buffers); the copying is the
vhost library's, in the peers.  `link="virtio-plain"` is the same with
TSO and LRO off (`tso: 0`, `lro: 0`, the peers' vhost without host TSO):
a frame per segment both ways.  The router's ports are the vhost-user
servers (they create the sockets, and take each new peer run's
connection); the peers connect as clients.

The dataplane and testpmd are the memif servers (they create the
sockets); the peers connect as clients.  Frames up to the MTU fit one
memif buffer (bsize), as net_memif needs (dataplane/tcp/port.cpp).
"""

import os
import shutil
import signal
import time

from lnetr_router import control_request, dataplane_binary

ROUTER_CONFIG = """\
net:
{nets}buffers:
  tiny: 512
  small: 512
  large: {large}
dataplane:
  cores: [{cores}]
  main_core: {main_core}
  poll: {poll}
  control_socket: {sock}
  shm_name: /{tag}
  socklnd:
    sock_timeout: 10
  ports:
{ports}"""
NET = """\
  - net type: {net}
    local NI(s):
      - interfaces:
          0: {port}
{cpt}"""
PORT = """\
    - name: {port}
      device: "{device}"
      address: {address}/24
      mtu: {mtu}
{extra}"""
MEMIF_DEVICE = "net_memif{index},role=server,socket={socket},socket-abstract=no,id=0,bsize={bsize}"
VIRTIO_DEVICE = "net_virtio_user{index},path={socket},server=1,queue_size=1024"
LINKS = ("memif", "virtio", "virtio-plain")


def memif_bsize(mtu):
    """A memif buffer that holds a whole frame of the MTU (a power of two)."""
    n = 2048
    while n < mtu + 18:
        n *= 2
    return n


class MemifTopology:
    """Addresses, sockets and the processes between the two peers.  `kind`
    is "router" (lnetr-dataplane) or "wire" (dpdk-testpmd)."""

    def __init__(self, procs, workdir, kind="router", mtu=1500, cores=(1,), main_core=0, poll="adaptive",
                 peer_core=None, tag=None, large=64, pairs=1, wrapper=(), link="memif"):
        self.procs, self.dir, self.kind, self.mtu = procs, workdir, kind, mtu
        if link not in LINKS or (link != "memif" and kind != "router"):
            raise ValueError("link %r: one of %s, and virtio ones need the router" % (link, ", ".join(LINKS)))
        self.link = link
        self.cores, self.main_core, self.poll, self.peer_core, self.large = cores, main_core, poll, peer_core, large
        if pairs > 1 and kind != "router":
            raise ValueError("several pairs of ports need the router")
        self.pairs = pairs
        self.wrapper = list(wrapper)  # argv before the dataplane's (a profiler)
        self.tag = tag or "lnetrm%d" % os.getpid()
        self.bsize = memif_bsize(mtu)
        self.ctl = os.path.join(workdir, "dp.sock")
        self.sock_a, self.sock_b = self.socket("a"), self.socket("b")
        self.ra, self.rb = self.router_address("a"), self.router_address("b")
        if kind == "router":
            self.a_nid, self.b_nid = self.nid("a"), self.nid("b")
        else:  # one net through the wire
            self.a_nid, self.b_nid = "10.77.1.2@tcp", "10.77.1.3@tcp"
        self.proc = None

    # ---- the middle ----

    # ---- names of pair k's sides ----

    def socket(self, side, pair=0):
        return os.path.join(self.dir, "%s%s.%s" % (side, pair or "", "memif" if self.link == "memif" else "vhost"))

    def vhost_device(self, side, pair=0):
        """A peer's vhost-user side of a router port, as a client; host TSO
        offered to the router's side (which lnetr-peer takes as its cue to
        send 64 KiB units too) only where it is to use it."""
        return "net_vhost0,iface=%s,client=1,queues=1,tso=%d" % (self.socket(side, pair), self.link == "virtio")

    def router_device(self, index, socket):
        if self.link == "memif":
            return MEMIF_DEVICE.format(index=index, socket=socket, bsize=self.bsize)
        return VIRTIO_DEVICE.format(index=index, socket=socket)

    def port(self, side, pair=0):
        return "p%s%s" % (side, pair or "")

    def net(self, side, pair=0):
        n = 2 * pair + (side == "b")
        return "tcp%s" % (n or "")

    def router_address(self, side, pair=0):
        return "10.77.%d.1" % (2 * pair + (side == "b") + 1)

    # ---- the middle ----

    def router_config(self):
        nets, ports = "", ""
        for k in range(self.pairs):
            for i, side in enumerate(("a", "b")):
                cpt = '        CPT: "[%d]"\n' % (k % len(self.cores)) if len(self.cores) > 1 else ""
                nets += NET.format(net=self.net(side, k), port=self.port(side, k), cpt=cpt)
                extra = "      tso: 0\n      lro: 0\n" if self.link == "virtio-plain" else ""
                ports += PORT.format(port=self.port(side, k), device=self.router_device(2 * k + i, self.socket(side, k)),
                                     address=self.router_address(side, k), mtu=self.mtu, extra=extra)
        return ROUTER_CONFIG.format(nets=nets, ports=ports, cores=", ".join(map(str, self.cores)),
                                    main_core=self.main_core, poll=self.poll, sock=self.ctl, tag=self.tag,
                                    large=self.large)

    def start(self, timeout=30):
        for k in range(self.pairs):
            for side in ("a", "b"):
                if os.path.exists(self.socket(side, k)):
                    os.unlink(self.socket(side, k))
        if self.kind == "router":
            cfg = os.path.join(self.dir, "lnetr.yaml")
            with open(cfg, "w") as f:
                f.write(self.router_config())
            self.proc = self.procs.start(self.wrapper + [dataplane_binary(), "--config", cfg])
            stand_ins = self.vhost_stand_ins()
            ok = self.proc.wait_stderr("forwarding with", timeout=timeout)
            for p in stand_ins:
                p.stop(signal.SIGINT)
        else:
            self.proc = self.procs.start(self.testpmd_argv())
            ok = self.wait_testpmd(timeout)
        if not ok:
            p = self.proc
            self.stop()
            raise RuntimeError("%s did not start: rc=%s\n%s" % (self.kind, p.returncode, p.stderr))
        return self

    def vhost_stand_ins(self):
        """A net_virtio_user port in server mode waits, as DPDK 22.11 probes
        it, for a vhost-user client to connect, and takes later clients
        (each peer run's) as reconnections.  So that the router can start
        before its peers, a dpdk-testpmd stands in for each peer's vhost
        side (the same features offered: the vhost library's, from the
        same device arguments) until the router is up."""
        if self.link == "memif":
            return []
        out = []
        for k in range(self.pairs):
            for side in ("a", "b"):
                vdev = self.vhost_device(side, k)
                out.append(self.procs.start([
                    shutil.which("dpdk-testpmd") or "dpdk-testpmd", "--no-huge", "--no-shconf", "-m", "256",
                    "--no-pci", "--file-prefix=%ss%s%d" % (self.tag, side, k), "-l", "0,1",
                    "--log-level=lib.eal:warning", "--vdev=" + vdev, "--", "--total-num-mbufs=2048", "--nb-cores=1",
                    "--stats-period=3600"]))
        return out

    def wait_testpmd(self, timeout):
        """testpmd creates the memif sockets when it probes the devices,
        then configures and starts them, which drops a client that came in
        between (and a DPDK memif client does not connect again): give it
        the time dpdk_bench.py gives it once both sockets exist."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.popen.poll() is not None:
                return False
            if os.path.exists(self.sock_a) and os.path.exists(self.sock_b):
                time.sleep(3)
                return self.proc.popen.poll() is None
            time.sleep(0.1)
        return False

    def testpmd_argv(self):
        dev = "net_memif%d,role=server,socket=%s,socket-abstract=no,id=0,bsize=%d"
        core = self.cores[0]
        return [shutil.which("dpdk-testpmd") or "dpdk-testpmd", "--no-huge", "--no-shconf", "-m", "1024",
                "--no-pci", "--file-prefix=%s" % self.tag, "-l", "%d,%d" % (self.main_core, core),
                "--main-lcore=%d" % self.main_core, "--log-level=lib.eal:warning",
                "--vdev=" + dev % (0, self.sock_a, self.bsize), "--vdev=" + dev % (1, self.sock_b, self.bsize),
                "--", "--forward-mode=io", "--auto-start", "--nb-cores=1", "--burst=32", "--txd=1024",
                "--rxd=1024", "--mbuf-size=%d" % (self.bsize + 128), "--total-num-mbufs=16384",
                # (with a stats period testpmd runs until a signal, not until stdin ends)
                "--stats-period=3600"]

    def stop(self, sig=signal.SIGINT):
        if self.proc:
            self.proc.stop(sig)
        self.proc = None

    # ---- the peers ----

    def peer_options(self, side, pair=0):
        """lnetr-peer's options for peer `side` ("a" or "b") of pair `pair`:
        its memif device, MTU and (through the router) route."""
        if self.link == "memif":
            device = "net_memif0,role=client,socket=%s,socket-abstract=no,id=0,bsize=%d" % (
                self.socket(side, pair), self.bsize)
        else:
            device = self.vhost_device(side, pair)
        opts = ["--dpdk", device, "--mtu", str(self.mtu)]
        if self.peer_core is not None:
            opts += ["--core", str(self.peer_core)]
        if self.kind == "router":
            far = "b" if side == "a" else "a"
            opts += ["--route", "%s=%s@%s" % (self.net(far, pair), self.router_address(side, pair),
                                              self.net(side, pair)), "--router-check-interval", "1"]
        else:
            opts += ["--router-check-interval", "0"]
        return opts

    def nid(self, side, pair=0):
        if self.kind != "router":
            return self.a_nid if side == "a" else self.b_nid
        return "10.77.%d.2@%s" % (2 * pair + (side == "b") + 1, self.net(side, pair))

    # ---- the router's state ----

    def status(self):
        return control_request(self.ctl, "status")
