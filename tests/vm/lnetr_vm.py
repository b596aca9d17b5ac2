"""qemu (TCG) guests for tests that need what the host lacks (verbs, rxe).

A guest is Debian's current kernel (downloaded with apt-get, never installed
on the host) booting a small busybox initramfs whose /init mounts the host's
/usr and /etc read-only over 9p and chroots into them, so every host binary
runs in the guest unchanged; the project's source root (and so its build
directories) is shared read-write at the same absolute path. An agent in the
guest (vm_agent.py) runs shell commands that the host hands it through a 9p
directory. Boot once, run many commands:

    with Guest(nics=2) as g:
        g.setup_rxe({0: "10.99.2.1/24", 1: "10.99.3.1/24"})
        rc, out, err = g.run("ibv_devices", timeout=30)
        server = g.spawn("rping -s -a 10.99.2.1 -C 3 -v")
        ...
        server.wait(30)

The kernel, its module tree and the initramfs are cached under
$LNETR_VM_CACHE (default <source root>/build/vm), keyed by the kernel
package's name and version; each guest's console log and control directory
are in $LNETR_VM_CACHE/runs/<run>/. Guest(taps=[...]) adds NICs on host tap
interfaces, to join a guest to host namespaces by a device path (the
router benchmark's --router-in-guest). Standard library only.
"""

import fcntl
import gzip
import hashlib
import json
import lzma
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
KERNEL_META = "linux-image-amd64"
KEEP_RUNS = 12     # run directories kept (newest first; ones in use never removed)
KEEP_KERNELS = 2   # kernel builds kept
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Modules the initramfs loads (with their dependencies, from modules.dep):
# what it takes to mount the 9p shares.
INITRD_MODULES = ["virtio_pci", "9pnet_virtio", "9p"]

# The initramfs' /init (busybox sh). The agent runs chrooted into a tmpfs
# root holding the 9p mounts; pid 1 stays here, waits for it, powers off.
INIT_SCRIPT = r"""#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
say() { echo "lnetr-vm: $* ($(cut -d' ' -f1 /proc/uptime) s)"; }
say "init"
for m in $(cat /modules/order); do
  insmod /modules/$m.ko || say "insmod $m failed"
done
R=/newroot
mount -t tmpfs -o mode=755 root $R
for d in usr etc proc sys dev run tmp var/tmp mods ctl root; do mkdir -p $R/$d; done
chmod 1777 $R/tmp $R/var/tmp
ln -s ../run $R/var/run
for l in bin sbin lib lib64; do ln -s usr/$l $R/$l; done
O=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o $O,cache=loose,ro husr $R/usr || say "cannot mount the host's /usr"
mount -t 9p -o $O,cache=loose,ro hetc $R/etc || say "cannot mount the host's /etc"
mount -t 9p -o $O,cache=loose,ro mods $R/mods || say "cannot mount the module tree"
mount -t 9p -o $O ctl $R/ctl || say "cannot mount the control share"
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm $R/dev/hugepages
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 shm $R/dev/shm
mount -t tmpfs -o mode=755 run $R/run
ip link set lo up
hostname lnetr-vm
# The kernel's own module requests (pid 1's root is this initramfs).
echo /bin/lnetr-modprobe > /proc/sys/kernel/modprobe
say "starting the agent"
chroot $R /usr/bin/env -i PATH=%(path)s HOME=/root LANG=C.UTF-8 /usr/bin/python3 -u /ctl/agent.py /ctl
say "agent exited with status $?"
poweroff -f
"""

MODPROBE_HELPER = r"""#!/bin/sh
exec /bin/chroot /newroot /usr/sbin/modprobe -d /mods "$@"
"""


class GuestError(Exception):
    """A guest failed (boot, agent, command); the message has the console's tail."""


class GuestTimeout(GuestError, TimeoutError):
    pass


def cache_root():
    return Path(os.environ.get("LNETR_VM_CACHE") or SOURCE_ROOT / "build" / "vm")


def skip_reason():
    """Why vm tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "vm tests need root (9p shares as root, modules in the guest)"
    for tool in ("qemu-system-x86_64", "apt-get", "dpkg-deb", "depmod"):
        if not shutil.which(tool) and not Path("/usr/sbin", tool).exists():
            return f"{tool} is not installed (deploy/setup installs it)"
    if not Path("/bin/busybox").exists() or "statically linked" not in _file_kind("/bin/busybox"):
        return "a static /bin/busybox is needed (package busybox-static)"
    return None


def _file_kind(path):
    # Without file(1): a static binary has no PT_INTERP program header.
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return "not a 64-bit ELF"
        phoff = int.from_bytes(head[32:40], "little")
        phentsize = int.from_bytes(head[54:56], "little")
        phnum = int.from_bytes(head[56:58], "little")
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    for i in range(phnum):
        if int.from_bytes(table[i * phentsize:i * phentsize + 4], "little") == 3:  # PT_INTERP
            return "dynamically linked"
    return "statically linked"


def _sh(argv, cwd=None):
    r = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


# --- the cached kernel and initramfs ---------------------------------------

class Kernel:
    """A kernel build in the cache: vmlinuz/vmlinux, its module root, the initramfs."""

    def __init__(self, directory):
        self.dir = Path(directory)
        info = json.loads((self.dir / "kernel.json").read_text())
        self.package, self.package_version, self.version = info["package"], info["version"], info["release"]
        self.root = self.dir / "root"                       # modprobe -d root (lib/modules/<version>)
        self.vmlinuz = self.root / "boot" / f"vmlinuz-{self.version}"
        self.vmlinux = self.dir / "vmlinux"                 # uncompressed, booted by PVH when there
        self.initrd = None

    def boot_image(self):
        return self.vmlinux if self.vmlinux.exists() else self.vmlinuz


def _extract_vmlinux(kernel, log):
    """The uncompressed ELF kernel from vmlinuz, if the kernel boots by PVH.

    qemu boots such an ELF directly (PVH entry): no firmware real-mode
    loader and no in-guest decompression, about 3 s less under TCG.
    """
    config = (kernel.root / "boot" / f"config-{kernel.version}").read_text()
    if "CONFIG_PVH=y" not in config.splitlines():
        log("kernel without CONFIG_PVH: booting vmlinuz")
        return
    image = kernel.vmlinuz.read_bytes()
    for magic, decompress in ((b"\xfd7zXZ\x00", lambda b: lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(b)),
                              (b"\x1f\x8b\x08", lambda b: zlib.decompressobj(31).decompress(b))):
        at = image.find(magic)
        if at < 0:
            continue
        try:
            elf = decompress(image[at:])
        except (lzma.LZMAError, zlib.error):
            continue
        if elf[:4] == b"\x7fELF":
            tmp = kernel.vmlinux.with_suffix(".tmp")
            tmp.write_bytes(elf)
            os.rename(tmp, kernel.vmlinux)
            return
    log(f"no xz or gzip payload in {kernel.vmlinuz}: booting it as it is")


def _kernel_package():
    """(package, version) of the kernel image linux-image-amd64 depends on now.

    One apt-cache call (about 0.5 s here: Debian's images keep no pkgcache):
    the candidate metapackage's Depends names the versioned image package,
    normally with its exact version.
    """
    code, text = _sh(["apt-cache", "show", "--no-all-versions", KERNEL_META])
    if code != 0:
        return None
    depends = next((line.split(":", 1)[1] for line in text.splitlines() if line.startswith("Depends:")), "")
    m = re.search(r"(linux-image-[^\s,(|]+)(?:\s*\(=\s*([^)\s]+)\))?", depends)
    if not m:
        return None
    pkg, ver = m.group(1), m.group(2)
    if not ver:
        code, text = _sh(["apt-cache", "show", "--no-all-versions", pkg])
        ver = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Version:")), None)
    return (pkg, ver) if ver else None


def _modules_in_order(moddir, names):
    """The .ko paths (relative to moddir) of names and their deps, deps first."""
    deps, by_name = {}, {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        deps[mod] = rest.split()
        base = os.path.basename(mod).split(".ko")[0]
        by_name[base] = mod
        by_name[base.replace("-", "_")] = mod
    order = []

    def visit(mod):
        if mod in order:
            return
        for d in reversed(deps.get(mod, [])):  # modules.dep lists the deepest last
            visit(d)
        order.append(mod)

    for n in names:
        if n not in by_name:
            raise GuestError(f"module {n} not in {moddir}/modules.dep")
        visit(by_name[n])
    return order


def _cpio(entries):
    """A newc cpio archive from (name, mode, data-or-None, rdev) entries."""
    out = bytearray()
    for ino, (name, mode, data, rdev) in enumerate(entries + [("TRAILER!!!", 0, b"", (0, 0))], 1):
        data = data or b""
        nb = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(nb), 0]
        out += b"070701" + b"".join(b"%08X" % v for v in fields) + nb
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def _build_initrd(kernel, path):
    moddir = kernel.root / "lib" / "modules" / kernel.version
    mods = _modules_in_order(moddir, INITRD_MODULES)
    d, f, l, c = 0o040755, 0o100755, 0o120777, 0o020600
    entries = [(n, d, None, (0, 0)) for n in ("bin", "dev", "proc", "sys", "newroot", "modules")]
    entries += [("dev/console", c, None, (5, 1)), ("dev/null", 0o020666, None, (1, 3))]
    entries.append(("bin/busybox", f, Path("/bin/busybox").read_bytes(), (0, 0)))
    entries.append(("bin/sh", l, b"busybox", (0, 0)))
    names = []
    for mod in mods:
        data = (moddir / mod).read_bytes()
        if mod.endswith(".xz"):
            data = lzma.decompress(data)
        name = os.path.basename(mod).split(".ko")[0]
        names.append(name)
        entries.append((f"modules/{name}.ko", 0o100644, data, (0, 0)))
    entries.append(("modules/order", 0o100644, ("\n".join(names) + "\n").encode(), (0, 0)))
    entries.append(("bin/lnetr-modprobe", f, MODPROBE_HELPER.encode(), (0, 0)))
    entries.append(("init", f, (INIT_SCRIPT % {"path": GUEST_PATH}).encode(), (0, 0)))
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(_cpio(entries), compresslevel=6, mtime=0))
    os.rename(tmp, path)


def prepare_kernel(log=None):
    """The cached kernel for a guest, built first if missing (under a lock).

    Resolves the kernel package linux-image-amd64 depends on (apt-cache, no
    download); on a cache miss downloads it with apt-get download, unpacks it
    with dpkg-deb -x and runs depmod -b; then takes vmlinux out of vmlinuz
    and builds the initramfs if they are missing.
    """
    log = log or (lambda msg: print(f"lnetr-vm: {msg}", file=sys.stderr, flush=True))
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pkg = _kernel_package()
        kdir = None
        if pkg:
            kdir = cache / f"kernel-{pkg[0].removeprefix('linux-image-')}_{pkg[1]}"
        else:  # apt lists missing or unreadable: the newest kernel built before, if any
            built = sorted(cache.glob("kernel-*/ready"), key=lambda p: p.stat().st_mtime)
            if built:
                kdir = built[-1].parent
                log(f"apt-cache cannot resolve {KERNEL_META}; using the cached {kdir.name}")
            else:
                log(f"apt-cache cannot resolve {KERNEL_META}; running apt-get update")
                _sh(["apt-get", "update", "-qq"])
                pkg = _kernel_package()
                if not pkg:
                    raise GuestError(f"apt-cache cannot resolve {KERNEL_META}, even after apt-get update")
                kdir = cache / f"kernel-{pkg[0].removeprefix('linux-image-')}_{pkg[1]}"
        if not (kdir / "ready").exists():
            kdir = _download_kernel(cache, pkg, log)
        kernel = Kernel(kdir)
        if not kernel.vmlinux.exists() and not (kdir / "no-vmlinux").exists():
            _extract_vmlinux(kernel, log)
            if not kernel.vmlinux.exists():
                (kdir / "no-vmlinux").touch()
        init_hash = hashlib.sha256((INIT_SCRIPT + MODPROBE_HELPER + repr(INITRD_MODULES)).encode()
                                   + Path("/bin/busybox").read_bytes()).hexdigest()[:12]
        kernel.initrd = kdir / f"initrd-{init_hash}.cpio.gz"
        if not kernel.initrd.exists():
            t = time.monotonic()
            for old in kdir.glob("initrd-*"):  # from an older /init
                old.unlink()
            _build_initrd(kernel, kernel.initrd)
            log(f"built {kernel.initrd} in {time.monotonic() - t:.1f} s")
        return kernel


def _download_kernel(cache, pkg, log):
    t0 = time.monotonic()
    tmp = cache / f"tmp-kernel-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        tmp.chmod(0o777)  # apt-get download drops to the _apt user where it can
        code, text = _sh(["apt-get", "download", f"{pkg[0]}={pkg[1]}"], cwd=tmp)
        if code != 0:  # the archive moved on: refresh the lists and take the new one
            log(f"apt-get download {pkg[0]}={pkg[1]} failed; running apt-get update")
            _sh(["apt-get", "update", "-qq"])
            new = _kernel_package()
            if not new:
                raise GuestError(f"apt-get download {pkg[0]}={pkg[1]} failed:\n{text}")
            pkg = new
            code, text = _sh(["apt-get", "download", f"{pkg[0]}={pkg[1]}"], cwd=tmp)
            if code != 0:
                raise GuestError(f"apt-get download {pkg[0]}={pkg[1]} failed:\n{text}")
        kdir = cache / f"kernel-{pkg[0].removeprefix('linux-image-')}_{pkg[1]}"
        if (kdir / "ready").exists():
            return kdir
        debs = list(tmp.glob("*.deb"))
        if len(debs) != 1:
            raise GuestError(f"apt-get download left {debs} in {tmp}:\n{text}")
        log(f"downloaded {debs[0].name} ({debs[0].stat().st_size >> 20} MiB) in {time.monotonic() - t0:.1f} s")
        code, text = _sh(["dpkg-deb", "-x", str(debs[0]), str(tmp / "root")])
        if code != 0:
            raise GuestError(f"dpkg-deb -x {debs[0]}: {text}")
        debs[0].unlink()
        releases = os.listdir(tmp / "root" / "lib" / "modules")
        if len(releases) != 1:
            raise GuestError(f"{pkg[0]} has modules for {releases}, expected one kernel")
        release = releases[0]
        code, text = _sh(["depmod", "-b", str(tmp / "root"), release])
        if code != 0:
            raise GuestError(f"depmod -b {tmp / 'root'} {release}: {text}")
        (tmp / "kernel.json").write_text(json.dumps({"package": pkg[0], "version": pkg[1], "release": release}) + "\n")
        shutil.rmtree(kdir, ignore_errors=True)
        os.rename(tmp, kdir)
        (kdir / "ready").touch()
        log(f"kernel {release} ({pkg[0]} {pkg[1]}) ready in {kdir} after {time.monotonic() - t0:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Keep the newest few kernel builds (a guest may still run an older one).
    built = sorted(cache.glob("kernel-*/ready"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in built[KEEP_KERNELS:]:
        shutil.rmtree(old.parent, ignore_errors=True)
    return kdir


# --- guests ------------------------------------------------------------------

def _set_pdeathsig():
    # qemu dies with the test process, whatever kills it.
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort
        pass


def _read(path, limit=None):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return ""
    if limit is not None and len(data) > limit:
        data = data[-limit:]
    return data.decode("utf-8", "replace")


class Process:
    """A command started in the guest by Guest.spawn()."""

    def __init__(self, guest, ident, cmd):
        self.guest, self.id, self.cmd = guest, ident, cmd
        self.returncode = None
        self._kills = 0

    def poll(self):
        """Exit status if it has ended (negative: killed by that signal), else None."""
        if self.returncode is None:
            text = _read(self.guest.ctl / "out" / f"{self.id}.rc").strip()
            if text:
                self.returncode = int(text)
        return self.returncode

    def wait(self, timeout=60):
        """Waits for the end; returns the exit status; GuestTimeout after timeout s."""
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            self.guest._check_alive(f"waiting for {self.cmd!r}")
            if time.monotonic() > deadline:
                out, err = self.output()
                raise GuestTimeout(f"{self.cmd!r} still running after {timeout} s\n"
                                   f"--- stdout (tail)\n{out[-2000:]}\n--- stderr (tail)\n{err[-2000:]}\n"
                                   + self.guest.console_tail())
            time.sleep(0.01)
        return self.returncode

    def kill(self, sig=signal.SIGTERM):
        """Sends sig to the command's process group (no-op once it has ended)."""
        if self.poll() is not None:
            return
        self._kills += 1
        self.guest._request(f"{self.id}.{self._kills}.kill", str(int(sig)))

    def output(self):
        """(stdout, stderr) written so far."""
        out = self.guest.ctl / "out"
        return _read(out / f"{self.id}.out"), _read(out / f"{self.id}.err")


def tap_nic_args(netdev, tap, pci_addr):
    """qemu arguments for a virtio-net NIC at PCI slot `pci_addr` backed by
    host tap interface `tap` (netdev id `netdev`), for Guest(taps=...) or a
    Guest's qemu_args.

    No ifup scripts (the caller places and addresses the tap), no vhost-net
    (qemu moves the frames itself, as it does for the hub's NICs; the host
    needs no vhost module), no option ROM (nothing boots from it). qemu
    creates the tap when it is missing and removes it when it exits.
    """
    return ["-netdev", f"tap,id={netdev},ifname={tap},script=no,downscript=no,vhost=off",
            "-device", f"virtio-net-pci,netdev={netdev},addr={pci_addr:#x},romfile="]


class Guest:
    """One qemu TCG guest; a context manager (start() on entry, stop() on exit).

    nics: virtio-net NICs eth0..ethN-1, all on one qemu hub (no host network).
    taps: host tap interfaces, one more virtio-net NIC on each (after the
      hub's: eth<nics>, eth<nics+1>, ...; tap_nic() names them). qemu
      creates each tap (vhost off: no vhost-net on the host) in qemu's
      network namespace as it starts, and it goes when qemu exits. A tap
      may be moved to another namespace once start() has returned (`ip link
      set TAP netns NS`; qemu keeps its descriptor): that namespace is then
      joined to the guest by a real device path, not a hub.
    shares: more host directories to share read-write at the same path (the
      source root always is, and $LNETR_BUILD when it lies outside it).
    env: variables for every command (run/spawn add theirs); by default the
      host's LNETR_* and sanitizer options (ASAN/UBSAN/LSAN_OPTIONS), whose
      paths hold in the guest. Commands start in the host's current
      directory when a share holds it (so relative paths work), else in /.
    machine: qemu machine type; q35 (PCIe, MSI-X) boots about 1 s faster than
      pc, whose ACPI interrupt links cost ~0.13 s per PCI device under TCG.
    qemu_args: extra qemu arguments; append: extra kernel command line.
    cpu: qemu's CPU model (max: every feature TCG emulates, which DPDK's
      builds need; qemu64 lacks SSSE3 and SSE4).
    """

    def __init__(self, nics=2, smp=2, mem_mb=2048, name="guest", shares=(), boot_timeout=180,
                 machine="q35", env=None, qemu_args=(), append="", log=None, taps=(), cpu="max"):
        self.nics, self.smp, self.mem_mb, self.name, self.machine = nics, smp, mem_mb, name, machine
        self.cpu = cpu
        self.taps = list(taps)
        if 0x10 + nics + len(self.taps) > 0x1f:
            raise GuestError(f"too many NICs ({nics} + {len(self.taps)} taps): PCI slots 0x10-0x1e hold them")
        self.boot_timeout, self.qemu_args, self.append = boot_timeout, list(qemu_args), append
        self.log = log or (lambda msg: print(f"lnetr-vm: {msg}", file=sys.stderr, flush=True))
        paths = [SOURCE_ROOT] + [Path(p).resolve() for p in shares]
        build = os.environ.get("LNETR_BUILD")
        if build:
            paths.append(Path(build).resolve())
        self.shares = []
        for p in paths:
            if not any(p == s or s in p.parents for s in self.shares):
                self.shares = [s for s in self.shares if p not in s.parents] + [p]
        if env is None:
            env = {k: v for k, v in os.environ.items()
                   if k.startswith("LNETR_") or k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")}
        self.env = dict(env)
        cwd = Path.cwd()
        self.cwd = str(cwd) if any(cwd == s or s in cwd.parents for s in self.shares) else "/"
        self.kernel = self.proc = self.run_dir = self.ctl = None
        self._qemu_err = None
        self.console = None
        self.boot_seconds = None
        self.ready_info = None
        self._seq = 0
        self._lock = None

    # -- lifecycle

    def start(self):
        t0 = time.monotonic()
        self.kernel = prepare_kernel(self.log)
        self._make_run_dir()
        argv = self._qemu_argv()
        (self.run_dir / "qemu.argv").write_text(" ".join(argv) + "\n")
        self._qemu_err = open(self.run_dir / "qemu.log", "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._qemu_err,
                                     stderr=subprocess.STDOUT, preexec_fn=_set_pdeathsig)
        deadline = time.monotonic() + self.boot_timeout
        while not (self.ctl / "ready").exists():
            if (self.ctl / "failed").exists():
                raise GuestError(f"guest agent setup failed: {_read(self.ctl / 'failed')}" + self.console_tail())
            self._check_alive("booting")
            if time.monotonic() > deadline:
                raise GuestTimeout(f"guest not ready after {self.boot_timeout} s" + self.console_tail())
            time.sleep(0.02)
        self.ready_info = json.loads(_read(self.ctl / "ready"))
        self.boot_seconds = time.monotonic() - t0
        self.log(f"{self.name}: kernel {self.kernel.version}, agent ready after {self.boot_seconds:.1f} s "
                 f"({self.ready_info['uptime']:.1f} s guest uptime); run directory {self.run_dir}")
        return self

    def stop(self, timeout=15):
        """Powers the guest off (kills qemu if it does not stop in time)."""
        try:
            if self.proc is not None and self.proc.poll() is None and timeout > 0:
                try:
                    self._request("poweroff", "")
                    self.proc.wait(timeout)
                except (OSError, subprocess.TimeoutExpired):
                    pass
        finally:
            if self.proc is not None:
                if self.proc.poll() is None:
                    self.proc.kill()
                self.proc.wait()
            for f in (self._qemu_err, self._lock):
                if f:
                    f.close()
            self._qemu_err = self._lock = None

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop(timeout=0)
            raise

    def __exit__(self, *exc):
        self.stop(timeout=15 if exc[0] is None else 0)

    # -- commands

    def build_cannot_run(self):
        """Why the build under test cannot run in this guest, or None.  A
        release build for the host's own CPU (LNETR_MARCH=native, set by
        meson) may use instructions qemu's TCG does not emulate (AVX-512 on
        this machine's hosts) and die of SIGILL wherever the compiler used
        them; the guest's CPU flags are compared with the host's."""
        if os.environ.get("LNETR_MARCH") != "native":
            return None
        _, out, _ = self.run("grep -m1 '^flags' /proc/cpuinfo", timeout=30)
        guest = set(out.split(":", 1)[-1].split())
        with open("/proc/cpuinfo") as f:
            host = set(next((l for l in f if l.startswith("flags")), ":").split(":", 1)[1].split())
        isa = ("avx", "amx", "sse", "ssse", "bmi", "fma", "f16c", "vaes", "vpclmul", "gfni", "sha", "adx",
               "movbe", "popcnt", "abm", "lzcnt", "rdrand", "rdseed", "xsave", "clflushopt", "clwb")
        missing = sorted(f for f in host - guest if f.startswith(isa))
        if not missing:
            return None
        return (f"this release build targets the host's CPU (-march=native), which has {' '.join(missing)}; "
                f"qemu TCG does not emulate them (deploy/setup release-vm builds one that runs in the guest)")

    def run(self, cmd, timeout=60, env=None, cwd=None, check=False):
        """Runs a shell command (bash -c, root, guest chroot); returns (rc, stdout, stderr).

        On timeout the command's process group is killed and GuestTimeout
        raised; with check=True a non-zero status raises GuestError.
        """
        p = self.spawn(cmd, env=env, cwd=cwd)
        try:
            rc = p.wait(timeout)
        except GuestTimeout:
            p.kill(signal.SIGKILL)
            raise
        out, err = p.output()
        for ext in ("out", "err", "rc"):
            try:
                (self.ctl / "out" / f"{p.id}.{ext}").unlink()
            except FileNotFoundError:
                pass
        if check and rc != 0:
            raise GuestError(f"{cmd!r} exited with {rc}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}")
        return rc, out, err

    def spawn(self, cmd, env=None, cwd=None):
        """Starts a command in the background (bash -c, its own process group); returns a Process."""
        self._check_alive(f"starting {cmd!r}")
        self._seq += 1
        ident = f"{self._seq:06d}"
        self._request(f"{ident}.json", json.dumps({"cmd": cmd, "env": {**self.env, **(env or {})},
                                                   "cwd": str(cwd or self.cwd)}))
        return Process(self, ident, cmd)

    def modprobe(self, *names, timeout=60):
        """Loads modules of the guest's kernel (modprobe -d /mods NAME...)."""
        self.run("modprobe -d /mods -a " + " ".join(names), timeout=timeout, check=True)

    def setup_rxe(self, addrs, over_wire=True, timeout=60):
        """Addresses on the NICs and one soft-RoCE device per NIC, ACTIVE.

        addrs: {nic: address or [addresses]} (nic an index or "ethN"), or a
        list in NIC order; addresses in CIDR form ("10.99.2.1/24"). Loads
        crc32_generic before rdma_rxe (the guest kernel cannot find it by
        itself), ib_uverbs and rdma_ucm; creates rxeN on ethN for every NIC
        given and waits until each is ACTIVE. Each NIC answers ARP for its own
        addresses only (arp_ignore=1, arp_announce=2).

        over_wire: traffic from an address of one NIC to an address of
        another leaves by the source's NIC and crosses the qemu hub, as
        between two hosts (policy routing: a table per NIC, the local table
        consulted after them, accept_local). Without it the kernel delivers
        such traffic through lo, where rxe cannot connect its devices: an RDMA
        CM connection from rxe1's address to rxe0's times out resolving the
        address, and RC QPs fail at RTR. Traffic
        without a chosen source address still goes through lo.
        Returns {"rxe0": "eth0", ...}.
        """
        if not isinstance(addrs, dict):
            addrs = dict(enumerate(addrs))
        nics = {}
        for nic, a in addrs.items():
            dev = nic if isinstance(nic, str) else f"eth{nic}"
            nics[dev] = [a] if isinstance(a, str) else list(a)
        script = ["set -e", "modprobe -d /mods crc32_generic",
                  "modprobe -d /mods -a rdma_rxe ib_uverbs rdma_ucm",
                  "sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2"]
        links = {}
        for dev, alist in sorted(nics.items()):
            rxe = "rxe" + dev.removeprefix("eth")
            links[rxe] = dev
            script.append(f"ip link set {dev} up")
            script += [f"ip addr add {a} dev {dev}" for a in alist]
        if over_wire and len(nics) > 1:
            script.append("sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.all.accept_local=1")
            for n, (dev, alist) in enumerate(sorted(nics.items())):
                table = 100 + n
                script.append(f"sysctl -qw net.ipv4.conf.{dev}.rp_filter=0 net.ipv4.conf.{dev}.accept_local=1")
                # What arrives on a NIC is looked up in the local table first.
                script.append(f"ip rule add pref 10 iif {dev} lookup local")
                for other, olist in nics.items():
                    if other != dev:
                        script += [f"ip route add {a.split('/')[0]} dev {dev} table {table}" for a in olist]
                script += [f"ip rule add pref 100 from {a.split('/')[0]} lookup {table}" for a in alist]
            script += ["ip rule add pref 1000 lookup local", "ip rule del pref 0 lookup local"]
        for rxe, dev in links.items():
            script.append(f"rdma link add {rxe} type rxe netdev {dev}")
        script.append(f"""for l in {' '.join(links)}; do
  for i in $(seq 400); do rdma link show $l/1 | grep -q 'state ACTIVE' && break; sleep 0.05; done
  rdma link show $l/1 | grep -q 'state ACTIVE' || {{ echo "$l not ACTIVE"; rdma link; exit 1; }}
done""")
        rc, out, err = self.run("\n".join(script), timeout=timeout)
        if rc != 0:
            _, dmesg, _ = self.run("dmesg | tail -n 30", timeout=30)
            raise GuestError(f"setup_rxe failed ({rc})\n--- stdout\n{out}\n--- stderr\n{err}\n--- dmesg\n{dmesg}")
        return links

    def tap_nic(self, tap):
        """The guest's interface (ethN) on host tap `tap` (one of taps)."""
        return f"eth{self.nics + self.taps.index(tap)}"

    # -- diagnostics

    def console_tail(self, lines=60):
        if self.console is None:
            return ""
        text = _read(self.console, 64 * 1024)
        tail = "\n".join(text.splitlines()[-lines:])
        qemu = _read(self.run_dir / "qemu.log", 4096).strip()
        return (f"\n--- console {self.console} (last {lines} lines)\n{tail}\n"
                + (f"--- qemu said\n{qemu}\n" if qemu else ""))

    # -- internals

    def _check_alive(self, what):
        if self.proc is None:
            raise GuestError(f"guest not started ({what})")
        rc = self.proc.poll()
        if rc is not None:
            raise GuestError(f"qemu exited with status {rc} while {what}" + self.console_tail())

    def _request(self, name, text):
        tmp = self.ctl / "tmp" / name
        tmp.write_text(text)
        os.rename(tmp, self.ctl / "req" / name)

    def _make_run_dir(self):
        runs = cache_root() / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        self._prune_runs(runs)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for n in range(1000):
            d = runs / f"{stamp}-{self.name}-{os.getpid()}-{n}"
            try:
                d.mkdir()
                break
            except FileExistsError:
                continue
        self.run_dir = d
        self._lock = open(d / "lock", "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self.ctl = d / "ctl"
        for sub in ("req", "out", "tmp"):
            (self.ctl / sub).mkdir(parents=True)
        shutil.copy(HERE / "vm_agent.py", self.ctl / "agent.py")
        mounts = [{"tag": f"src{i}", "path": str(p),
                   "options": "trans=virtio,version=9p2000.L,msize=512000,cache=mmap"}
                  for i, p in enumerate(self.shares)]
        (self.ctl / "config.json").write_text(json.dumps({"mounts": mounts, "nics": self.nics + len(self.taps)})
                                              + "\n")
        self.console = d / "console.log"

    @staticmethod
    def _prune_runs(runs):
        dirs = sorted((p for p in runs.iterdir() if p.is_dir()), key=lambda p: p.name, reverse=True)
        for d in dirs[KEEP_RUNS:]:
            try:
                with open(d / "lock", "a") as lk:
                    fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    shutil.rmtree(d, ignore_errors=True)
            except OSError:
                continue  # in use

    def _qemu_argv(self):
        k = self.kernel
        # The TSC as clocksource: under TCG the kernel would otherwise pick
        # the HPET, whose every read is an emulated MMIO access: a third of
        # the CPU of a program that reads the clock in its loop went there.
        # TCG's TSC follows the host's clock, so it is monotonic.
        cmdline = (f"console=ttyS0 loglevel=4 panic=-1 mitigations=off clocksource=tsc tsc=reliable "
                   f"{self.append}").strip()
        argv = ["qemu-system-x86_64", "-machine", self.machine, "-accel", "tcg", "-cpu", self.cpu, "-smp", str(self.smp),
                "-m", str(self.mem_mb), "-nodefaults", "-no-user-config", "-display", "none",
                "-no-reboot", "-kernel", str(k.boot_image()), "-initrd", str(k.initrd), "-append", cmdline,
                "-chardev", f"file,id=con,path={self.console}", "-serial", "chardev:con"]
        shares = [("husr", "/usr", True), ("hetc", "/etc", True), ("mods", str(k.root), True),
                  ("ctl", str(self.ctl), False)]
        shares += [(f"src{i}", str(p), False) for i, p in enumerate(self.shares)]
        if len(shares) > 13:
            raise GuestError(f"too many shares ({len(shares)}): PCI slots 3-15 hold them")
        for i, (tag, path, ro) in enumerate(shares):
            argv += ["-fsdev", f"local,id=fs{i},path={path},security_model=none,multidevs=remap"
                     + (",readonly=on" if ro else ""),
                     "-device", f"virtio-9p-pci,fsdev=fs{i},mount_tag={tag},addr={3 + i:#x}"]
        for i in range(self.nics):
            argv += ["-netdev", f"hubport,id=n{i},hubid=0",
                     "-device", f"virtio-net-pci,netdev=n{i},addr={0x10 + i:#x},romfile="]
        for i, tap in enumerate(self.taps):
            argv += tap_nic_args(f"t{i}", tap, 0x10 + self.nics + i)
        return argv + self.qemu_args
