"""The lnetr appliance image booted in qemu (TCG, UEFI: OVMF and
systemd-boot), for tests/vm/test_appliance.py.

    with Appliance(disk, run_dir, netns="...", nics=["tapa", "tapb"], extra_disks=[...]) as vm:
        vm.console.expect("lnetr login: ")       # ttyS0: the serial console
        rc, out = vm.root("systemctl is-active lnetr.target")   # hvc0: test-only root shell

The disk is used through a qcow2 overlay (the built image stays as it was);
reboots happen inside the one qemu process, so the firmware and the boot
loader choose the entry as on hardware.  Standard library only.
"""

import os
import re
import shutil
import socket
import subprocess
import threading
import time

OVMF_CODE = "/usr/share/OVMF/OVMF_CODE_4M.fd"
OVMF_VARS = "/usr/share/OVMF/OVMF_VARS_4M.fd"


class SerialPort:
    """A qemu serial port on a Unix socket: everything it printed, and
    expect/send on it."""

    def __init__(self, path, log_path, timeout=60, typing=False):
        self.path = path
        self.typing = typing
        self.buf = ""
        self.pos = 0  # expect() consumed up to here
        self.lock = threading.Condition()
        self.log = open(log_path, "a", errors="replace")
        end = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)
        self.done = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while not self.done:
            try:
                data = self.sock.recv(65536)
            except OSError:
                break
            if not data:
                break
            text = data.decode(errors="replace").replace("\r", "")
            self.log.write(text)
            self.log.flush()
            with self.lock:
                self.buf += text
                self.lock.notify_all()

    def close(self):
        self.done = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)
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
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("serial %s: no %r within %d s; last output:\n%s" %
                                         (self.path, pattern, timeout, self.buf[-2000:]))
                self.lock.wait(min(left, 1))

    def skip(self):
        """Forget what came so far (the next expect looks only after it)."""
        with self.lock:
            self.pos = len(self.buf)


class Appliance:
    """One qemu machine booting `disk` (through an overlay in `run_dir`),
    its NICs on taps created in network namespace `netns`."""

    def __init__(self, disk, run_dir, netns=None, nics=(), extra_disks=(), mem_mb=1536, smp=2):
        self.run_dir = run_dir
        os.makedirs(run_dir, exist_ok=True)
        self.overlay = os.path.join(run_dir, "disk.qcow2")
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", os.path.abspath(disk), "-F", "raw",
                        self.overlay], check=True)
        self.vars = os.path.join(run_dir, "OVMF_VARS.fd")
        shutil.copy(OVMF_VARS, self.vars)
        argv = ["qemu-system-x86_64", "-machine", "q35", "-accel", "tcg", "-cpu", "max", "-m", str(mem_mb),
                "-smp", str(smp), "-display", "none", "-monitor", "none", "-nodefaults",
                "-drive", "if=pflash,format=raw,readonly=on,file=" + OVMF_CODE,
                "-drive", "if=pflash,format=raw,file=" + self.vars,
                "-drive", "file=%s,format=qcow2,if=virtio" % self.overlay]
        for d in extra_disks:
            argv += ["-drive", "file=%s,format=raw,if=virtio,readonly=on" % os.path.abspath(d)]
        for i, tap in enumerate(nics):
            argv += ["-netdev", "tap,id=n%d,ifname=%s,script=no,downscript=no" % (i, tap),
                     "-device", "virtio-net-pci,netdev=n%d,mac=%s" % (i, self.mac(i))]
        # ttyS0, a 16550 UART: the serial console.  hvc0, a virtio
        # console: the test's root shell (flow-controlled end to end).
        argv += ["-chardev", "socket,id=s0,path=%s,server=on,wait=off" % self.serial_path(0), "-serial", "chardev:s0",
                 "-device", "virtio-serial-pci",
                 "-chardev", "socket,id=s1,path=%s,server=on,wait=off" % self.serial_path(1),
                 "-device", "virtconsole,chardev=s1"]
        if netns:
            argv = ["ip", "netns", "exec", netns] + argv
        with open(os.path.join(run_dir, "qemu.argv"), "w") as f:
            f.write(" ".join(argv) + "\n")
        self.qemu_log = open(os.path.join(run_dir, "qemu.log"), "w")
        self.proc = subprocess.Popen(argv, stdout=self.qemu_log, stderr=subprocess.STDOUT)
        # A UART loses what arrives faster than an emulated CPU drains it:
        # what is typed there goes a few characters at a time.
        self.console = SerialPort(self.serial_path(0), os.path.join(run_dir, "console.log"), typing=True)
        self.test = SerialPort(self.serial_path(1), os.path.join(run_dir, "test-console.log"))
        self.boots = 0
        self.shell_ready = False

    @staticmethod
    def mac(i):
        return "52:54:00:4c:4e:%02x" % (i + 1)

    def serial_path(self, i):
        return os.path.join(self.run_dir, ("ttyS0", "hvc0")[i])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
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
        self.shell_ready = False
        self._shell(timeout=60)

    def _shell(self, timeout=60):
        end = time.monotonic() + timeout
        while True:
            self.test.skip()
            self.test.send("\n")
            try:
                self.test.expect(r"root@lnetr:.*# ", timeout=5)
                break
            except AssertionError:
                if time.monotonic() > end:
                    raise
        # No echo, colours or pagers: output is what commands print.
        # No prompt either: its "# " would land in a command's output
        # whenever it comes after skip() rather than before.
        self.test.send("stty -echo; export TERM=dumb SYSTEMD_PAGER= SYSTEMD_COLORS=0; PS1=''; PS2=''; "
                       "bind 'set enable-bracketed-paste off' 2>/dev/null\n")
        time.sleep(1)
        self.test.skip()
        self.shell_ready = True
        self.n = getattr(self, "n", 0)

    def root(self, cmd, timeout=120):
        """Run `cmd` as root on the test console; (exit status, output)."""
        self.n += 1
        tag = "__lnetr_done_%d_" % self.n
        self.test.skip()
        self.test.send("{ %s ; } 2>&1; echo %s$?__\n" % (cmd, tag))
        m = self.test.expect(r"(?s)(.*?)%s(\d+)__" % re.escape(tag), timeout)
        return int(m.group(2)), m.group(1).replace("\x1b[?2004l", "").replace("\x1b[?2004h", "").strip("\n")

    def reboot(self):
        """systemctl reboot from the test console (its shell goes away)."""
        self.console.skip()
        self.test.send("systemctl reboot\n")
