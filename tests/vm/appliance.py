"""The lnetr appliance image booted in qemu (UEFI: OVMF and systemd-boot),
for tests/vm/test_appliance.py, driven by the commands docs/appliance.md
gives an operator.

    blocks = doc_blocks(DOC)                           # {"build": "...", "qemu": "...", ...}
    net = Networks(NICS); net.up()                     # namespaces: clients, servers, management
    argv = qemu_argv(shell_commands(blocks["qemu"])[1], run_dir)
    with Appliance(argv, run_dir, netns=net.ns["r"]) as vm:
        vm.console.expect("lnetr login: ")             # ttyS0: the serial console
        rc, out = vm.root("systemctl is-active lnetr.target")   # hvc0: test-only root shell

The disk is used through a qcow2 overlay (the built image stays as it was);
reboots happen inside the one qemu process, so the firmware and the boot
loader choose the entry as on hardware.  Standard library only.
"""

import os
import pty
import re
import select
import shlex
import signal
import socket
import subprocess
import threading
import time


# ---- the document ---------------------------------------------------------------

def doc_blocks(path):
    """The fenced blocks of a Markdown file marked `<!-- test: NAME -->`:
    {NAME: text}."""
    with open(path) as f:
        text = f.read()
    return {m.group(1): m.group(2) for m in
            re.finditer(r"<!-- test: ([\w-]+) -->\n```[^\n]*\n(.*?)```", text, re.S)}


def shell_commands(block):
    """The commands of a shell block: continuation lines joined, comments
    and blank lines left out."""
    out, cur = [], ""
    for line in block.splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        cur += line.rstrip()
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        out.append(" ".join(cur.split()))
        cur = ""
    return out


def shell_lines(block, prompt="lnetrctl > "):
    """What an operator types at `prompt` in a block of a shell session."""
    return [l[len(prompt):].strip() for l in block.splitlines() if l.startswith(prompt)]


def qemu_argv(command, run_dir, cpu=None):
    """The documented qemu command, as the test runs it: the disk through a
    qcow2 overlay in run_dir, the serial console on a Unix socket instead of
    the terminal (-nographic), a test-only root shell on a virtio console,
    and optionally another CPU model."""
    argv = shlex.split(command)
    out = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-nographic":
            out += ["-display", "none", "-monitor", "none",
                    "-chardev", "socket,id=s0,path=%s,server=on,wait=off" % os.path.join(run_dir, "ttyS0"),
                    "-serial", "chardev:s0"]
        elif a == "-cpu" and cpu:
            out += ["-cpu", cpu]
            i += 1
        elif a == "-drive" and "if=virtio" in argv[i + 1] and "file=" in argv[i + 1]:
            out += ["-drive", "file=%s,format=qcow2,if=virtio" % os.path.join(run_dir, "disk.qcow2")]
            i += 1
        else:
            out.append(a)
        i += 1
    return out + ["-device", "virtio-serial-pci",
                  "-chardev", "socket,id=s1,path=%s,server=on,wait=off" % os.path.join(run_dir, "hvc0"),
                  "-device", "virtconsole,chardev=s1"]


def disk_of(command):
    """The disk file of the documented qemu command."""
    for a in shlex.split(command):
        m = re.search(r"(?:^|,)file=([^,]+),format=raw,if=virtio", a)
        if m:
            return m.group(1)
    raise ValueError("no virtio disk in %r" % command)


def taps_of(command):
    """{tap name: MAC} of the documented qemu command's NICs."""
    argv = shlex.split(command)
    ifname = {m.group(1): m.group(2) for a in argv for m in [re.search(r"tap,id=([^,]+),ifname=([^,]+)", a)] if m}
    macs = {m.group(1): m.group(2) for a in argv for m in [re.search(r"netdev=([^,]+),mac=([0-9a-f:]+)", a)] if m}
    return {ifname[k]: macs[k] for k in ifname}


# ---- the networks around it ----------------------------------------------------------

def ip(*args):
    subprocess.run(["ip"] + list(args), check=True, capture_output=True)


class Networks:
    """Namespaces <tag>r (qemu and the bridges), and one per network the
    appliances serve, each with one host on a veth bridged to the
    appliances' taps: {name: (tap or [taps], host address/len)}."""

    def __init__(self, nets, tag="lap"):
        self.nets = nets
        self.tag = "%s%d" % (tag, os.getpid() % 100000)
        self.ns = {"r": self.tag + "r"}
        self.ns.update({name: self.tag + name for name in nets})

    def up(self):
        self.down()
        for ns in self.ns.values():
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
        r = self.ns["r"]
        for i, (name, (tap, addr)) in enumerate(sorted(self.nets.items())):
            host, br, end = self.ns[name], "br%d" % i, "v%d" % i
            ip("link", "add", self.tag + "x", "type", "veth", "peer", "name", self.tag + "y")
            ip("link", "set", self.tag + "x", "netns", host)
            ip("-n", host, "link", "set", self.tag + "x", "name", "eth0")
            ip("-n", host, "addr", "add", addr, "dev", "eth0")
            ip("-n", host, "link", "set", "eth0", "up")
            ip("link", "set", self.tag + "y", "netns", r)
            ip("-n", r, "link", "set", self.tag + "y", "name", end)
            ip("-n", r, "link", "add", br, "type", "bridge")
            ip("-n", r, "link", "set", end, "master", br)
            ip("-n", r, "link", "set", end, "up")
            ip("-n", r, "link", "set", br, "up")

    def bridge_taps(self, only=None, timeout=30):
        """Put qemu's taps (made in r when it starts; those in `only`, or
        all) on their bridges."""
        r = self.ns["r"]
        for i, (name, (taps, _)) in enumerate(sorted(self.nets.items())):
            for tap in [taps] if isinstance(taps, str) else taps:
                if only is not None and tap not in only:
                    continue
                end = time.monotonic() + timeout
                while subprocess.run(["ip", "-n", r, "link", "show", tap], capture_output=True).returncode != 0:
                    if time.monotonic() > end:
                        raise AssertionError("qemu made no tap %s" % tap)
                    time.sleep(0.1)
                ip("-n", r, "link", "set", tap, "master", "br%d" % i)
                ip("-n", r, "link", "set", tap, "up")

    def down(self):
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def run(self, name, argv, **kw):
        """A command in network `name`'s namespace."""
        return subprocess.run(["ip", "netns", "exec", self.ns[name]] + list(argv), **kw)

    def popen(self, name, argv, **kw):
        return subprocess.Popen(["ip", "netns", "exec", self.ns[name]] + list(argv), **kw)


def open_ports(net, name, address, ports, timeout=2.0):
    """The TCP ports of `ports` that accept a connection to `address` from
    network `name` (connects in parallel; a dropped SYN times out)."""
    probe = ("import socket, sys, threading\n"
             "addr, ports, t = sys.argv[1], [int(p) for p in sys.argv[2].split(',')], float(sys.argv[3])\n"
             "found = []\n"
             "def one(p):\n"
             "    s = socket.socket(); s.settimeout(t)\n"
             "    try:\n"
             "        s.connect((addr, p)); found.append(p)\n"
             "    except OSError:\n"
             "        pass\n"
             "    finally:\n"
             "        s.close()\n"
             "ts = [threading.Thread(target=one, args=(p,)) for p in ports]\n"
             "[t.start() for t in ts]; [t.join() for t in ts]\n"
             "print(','.join(map(str, sorted(found))))\n")
    cp = net.run(name, ["python3", "-c", probe, address, ",".join(map(str, sorted(ports))), str(timeout)],
                 capture_output=True, text=True, timeout=60)
    if cp.returncode != 0:
        raise AssertionError("port probe from %s failed: %s" % (name, cp.stderr))
    return {int(p) for p in cp.stdout.strip().split(",") if p}


# ---- consoles ---------------------------------------------------------------------------

class SerialPort:
    """A qemu serial port on a Unix socket: everything it printed, and
    expect/send on it.  `failure` (set by another thread) ends every wait
    on it with that message."""

    def __init__(self, path, log_path, timeout=60, typing=False):
        self.path = path
        self.typing = typing
        self.buf = ""
        self.pos = 0  # expect() consumed up to here
        self.lock = threading.Condition()
        self.log = open(log_path, "a", errors="replace")
        self.opened = time.monotonic()
        self.at_line_start = True
        self.failure = None
        self.closed = False
        self.sock = None
        self.thread = None
        self.connect(timeout)

    def connect(self, timeout=60):
        """(Again, when qemu started again) connect and read."""
        if self.thread:
            self.thread.join(5)
        end = time.monotonic() + timeout
        while not self.closed:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.path)
            except OSError:
                sock.close()
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)
                continue
            with self.lock:
                if self.closed:
                    sock.close()
                    return
                if self.sock:
                    self.sock.close()
                self.sock = sock
            self.thread = threading.Thread(target=self._read, args=(sock,), daemon=True)
            self.thread.start()
            return

    def _read(self, sock):
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                break
            if not data:
                break
            text = data.decode(errors="replace").replace("\r", "")
            with self.lock:
                if self.closed:
                    break
                # The log's lines start with the seconds since the port opened.
                for part in text.splitlines(keepends=True):
                    if self.at_line_start:
                        self.log.write("[+%7.1f] " % (time.monotonic() - self.opened))
                    self.log.write(part)
                    self.at_line_start = part.endswith("\n")
                self.log.flush()
                self.buf += text
                self.lock.notify_all()

    def note(self, line):
        """A line of the test's own in the log."""
        with self.lock:
            if not self.closed:
                self.log.write("%s[+%7.1f] ---- %s ----\n" % ("" if self.at_line_start else "\n",
                                                             time.monotonic() - self.opened, line))
                self.at_line_start = True
                self.log.flush()

    def fail(self, why):
        with self.lock:
            self.failure = why
            self.lock.notify_all()

    def close(self):
        with self.lock:
            self.closed = True
            sock = self.sock
        if sock:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self.thread:
            self.thread.join(5)
        with self.lock:
            self.log.close()

    def send(self, text):
        data = text.encode()
        if not self.typing:
            self.sock.sendall(data)
            return
        for i in range(0, len(data), 8):
            self.sock.sendall(data[i:i + 8])
            time.sleep(0.03)

    def expect(self, pattern, timeout=120):
        """Wait for `pattern` (a regex) after what earlier expects
        consumed; the match.  AssertionError with the tail on timeout."""
        rx = re.compile(pattern)
        end = time.monotonic() + timeout
        with self.lock:
            while True:
                m = rx.search(self.buf, self.pos)
                if m:
                    self.pos = m.end()
                    return m
                if self.failure:
                    raise AssertionError("serial %s: waiting for %r: %s; last output:\n%s" %
                                         (self.path, pattern, self.failure, self.buf[-3000:]))
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("serial %s: no %r within %d s; last output:\n%s" %
                                         (self.path, pattern, timeout, self.buf[-3000:]))
                self.lock.wait(min(left, 1))

    def skip(self):
        """Forget what came so far (the next expect looks only after it)."""
        with self.lock:
            self.pos = len(self.buf)


class Pty:
    """A program on a real pseudo-terminal (an interactive ssh session):
    send lines, expect output."""

    def __init__(self, argv, env=None):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.execvpe(argv[0], argv, env or os.environ)
            finally:
                os._exit(127)
        self.buf = ""
        self.pos = 0
        self.status = None

    def send(self, line):
        os.write(self.fd, (line + "\r").encode())

    def _fill(self, end):
        left = end - time.monotonic()
        if left <= 0 or self.status is not None:
            return False
        r, _, _ = select.select([self.fd], [], [], min(left, 1))
        if not r:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            data = b""
        if not data:
            _, st = os.waitpid(self.pid, 0)
            self.status = os.waitstatus_to_exitcode(st)
            return False
        self.buf += data.decode(errors="replace").replace("\r", "")
        return True

    def expect(self, pattern, timeout=120):
        rx = re.compile(pattern)
        end = time.monotonic() + timeout
        while True:
            m = rx.search(self.buf, self.pos)
            if m:
                self.pos = m.end()
                return m
            if not self._fill(end):
                raise AssertionError("no %r within %d s (exit %s); output:\n%s" %
                                     (pattern, timeout, self.status, self.buf[-4000:]))

    def since(self, mark):
        return self.buf[mark:]

    def wait(self, timeout=60):
        """Until it exits (reading what it prints); its exit status."""
        end = time.monotonic() + timeout
        while self.status is None:
            if not self._fill(end) and self.status is None:
                raise AssertionError("still running after %d s; output:\n%s" % (timeout, self.buf[-4000:]))
        return self.status

    def close(self):
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        try:
            os.close(self.fd)
        except OSError:
            pass


# ---- the machine ----------------------------------------------------------------------

class Appliance:
    """One qemu process running `argv` (qemu_argv(): the disk an overlay of
    `disk` in run_dir) in network namespace `netns`; `on_start()` runs
    each time qemu has started (to bridge its taps).

    The guest's reboots are power cycles: qemu runs with -no-reboot and is
    started again when it exits.  TCG's warm resets were measured to spend
    60-100 s in the firmware loading the initramfs (5 s after a cold start)
    and twice hung the next kernel early in its boot."""

    def __init__(self, argv, run_dir, disk, netns=None, new_disk=True, on_start=None):
        self.run_dir = run_dir
        self.on_start = on_start
        os.makedirs(run_dir, exist_ok=True)
        overlay = os.path.join(run_dir, "disk.qcow2")
        if new_disk or not os.path.exists(overlay):
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", os.path.abspath(disk), "-F", "raw",
                            overlay], check=True)
        argv = list(argv) + ["-no-reboot"]
        if netns:
            argv = ["ip", "netns", "exec", netns] + argv
        self.argv = argv
        self.qemu_log = open(os.path.join(run_dir, "qemu.log"), "a")
        self.lock = threading.Lock()
        self.stopping = False
        self.power_cycles = 0
        self.proc = None
        try:
            self._start()
            # A UART loses what arrives faster than an emulated CPU drains
            # it: what is typed there goes a few characters at a time.
            self.console = SerialPort(os.path.join(run_dir, "ttyS0"), os.path.join(run_dir, "console.log"),
                                      typing=True)
            self.test = SerialPort(os.path.join(run_dir, "hvc0"), os.path.join(run_dir, "test-console.log"))
        except BaseException:
            if self.proc and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            raise
        self.boots = 0
        self.n = 0
        self.supervisor = threading.Thread(target=self._supervise, daemon=True)
        self.supervisor.start()

    def _start(self):
        for sock in ("ttyS0", "hvc0"):
            if os.path.exists(os.path.join(self.run_dir, sock)):
                os.unlink(os.path.join(self.run_dir, sock))
        with open(os.path.join(self.run_dir, "qemu.argv"), "a") as f:
            f.write(" ".join(self.argv) + "\n")
        self.proc = subprocess.Popen(self.argv, cwd=self.run_dir, stdout=self.qemu_log, stderr=subprocess.STDOUT)
        if self.on_start:
            self.on_start()

    def _supervise(self):
        """A reboot ends qemu with status 0 (-no-reboot): start it again,
        on the same disk.  Anything else ends every wait on its consoles
        at once, saying what happened."""
        while True:
            rc = self.proc.wait()
            with self.lock:
                if self.stopping:
                    return
                try:
                    if rc != 0:
                        raise RuntimeError("qemu exited with status %d (%s/qemu.log)" % (rc, self.run_dir))
                    self.qemu_log.write("qemu exited with status 0: the guest rebooted; starting it again\n")
                    self.qemu_log.flush()
                    self.power_cycles += 1
                    self.console.note("power cycle %d: qemu started again" % self.power_cycles)
                    self._start()
                except Exception as e:
                    self._fail("the guest's power cycle failed: %s" % e)
                    return
            try:
                self.console.connect()
                self.test.connect()
            except Exception as e:
                self._fail("cannot reach qemu's consoles after a power cycle: %s" % e)
                return

    def _fail(self, why):
        if self.proc.poll() is None:
            self.proc.kill()
        for port in (self.console, self.test):
            port.fail(why)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        with self.lock:
            self.stopping = True
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        for p in (self.console, self.test):
            p.close()
        self.qemu_log.close()

    def wait_boot(self, timeout=300):
        """Until the serial console's login prompt, then the test console's
        root shell is set up for commands."""
        self.console.expect(r"lnetr login: ", timeout)
        self.boots += 1
        end = time.monotonic() + 60
        while True:
            self.test.skip()
            self.test.send("\n")
            try:
                self.test.expect(r"root@lnetr:.*# ", timeout=5)
                break
            except AssertionError:
                if time.monotonic() > end:
                    raise
        # No echo, colours or pagers: output is what commands print.  No
        # prompt either: its "# " would land in a command's output whenever
        # it comes after skip() rather than before.
        self.test.send("stty -echo; export TERM=dumb SYSTEMD_PAGER= SYSTEMD_COLORS=0; PS1=''; PS2=''; "
                       "bind 'set enable-bracketed-paste off' 2>/dev/null\n")
        time.sleep(1)
        self.test.skip()

    def root(self, cmd, timeout=120):
        """Run `cmd` as root on the test console; (exit status, output)."""
        self.n += 1
        tag = "__lnetr_done_%d_" % self.n
        self.test.skip()
        self.test.send("{ %s ; } 2>&1; echo %s$?__\n" % (cmd, tag))
        m = self.test.expect(r"(?s)(.*?)%s(\d+)__" % re.escape(tag), timeout)
        return int(m.group(2)), m.group(1).replace("\x1b[?2004l", "").replace("\x1b[?2004h", "").strip("\n")

    def poweroff(self, timeout=180):
        """systemctl poweroff, and wait for qemu to exit (its disk caches
        flushed, as a kill would not)."""
        with self.lock:
            self.stopping = True
        self.test.send("systemctl poweroff\n")
        self.proc.wait(timeout)
        self.stop()

    def rebooting(self):
        """What the console prints from now on belongs to the next boot."""
        self.console.skip()
