"""Helpers for lnetr's integration tests (Python 3 standard library only).

* Where the binaries are: LNETR_BUILD (meson sets it to the build root) or
  LNETR_PEER (the lnetr-peer binary itself).
* Processes: Host names where a command runs (a network namespace, or any
  command prefix such as ["ip", "netns", "exec", "ns1"]); Processes starts
  them, remembers every one, and kills what is left (by pid, never by name)
  at cleanup, so a failing test leaves nothing running.
* YAML: parse_yaml() reads the block-style subset lnetr-peer and lnetctl
  print (maps, "- " lists at or below their key, plain and quoted scalars).
* socklnd: a small independent implementation of the wire protocol (acceptor
  request, HELLO V3, LNet messages) to play a kernel node by hand:
  SocklndConn connects (active side), FakeGateway accepts (passive side) and
  answers like a kernel LNet router.  These run in the test process, so in
  the test's own network namespace.
* pattern(): the test-data pattern, written again from its definition in
  cli/peer/pattern.hpp, so the C++ and this agree independently.
"""

import concurrent.futures
import errno
import json
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import time
import unittest

# ---- binaries and hosts -------------------------------------------------------------


def build_dir():
    d = os.environ.get("LNETR_BUILD")
    if d:
        return d
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "build", "debug")


def peer_binary():
    return os.environ.get("LNETR_PEER") or os.path.join(build_dir(), "cli", "peer", "lnetr-peer")


def run_together(calls):
    """Call each of `calls` in a thread of its own, all at once; their
    results in order (what one of them raised is raised here)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(c) for c in calls]
        return [f.result() for f in futures]


def need_root(test_case):
    """Skip unless root: socklnd needs privileged ports."""
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root (socklnd binds privileged ports)")


class Host:
    """Where commands run: `prefix` goes in front of every command.

    Host() is this namespace; Host.netns("r1") runs in network namespace r1
    through `ip netns exec r1`.
    """

    def __init__(self, prefix=None, name="local"):
        self.prefix = list(prefix or [])
        self.name = name

    @classmethod
    def netns(cls, ns):
        return cls(["ip", "netns", "exec", ns], name=ns)

    def cmd(self, argv):
        return self.prefix + list(argv)

    def run(self, argv, timeout=60, check=False):
        """Run to completion; a CompletedProcess with text stdout/stderr."""
        return subprocess.run(self.cmd(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, check=check)


LOCAL = Host()


class Proc:
    """A started process: its Popen, and what it printed once finished."""

    def __init__(self, popen, argv):
        self.popen = popen
        self.argv = argv
        self.stdout = None
        self.stderr = None
        self.returncode = None
        self._err_text = ""  # stderr read by wait_stderr()
        self._err_seen = 0

    @property
    def pid(self):
        return self.popen.pid

    @property
    def stderr_so_far(self):
        """What the wait_stderr*() calls have read (all of stderr once stopped)."""
        return self.stderr if self.stderr is not None else self._err_text

    def _read_stderr(self, end):
        """Append what stderr has to _err_text, waiting until `end`
        (monotonic); False on timeout or end of file."""
        left = end - time.monotonic()
        if left <= 0:
            return False
        fd = self.popen.stderr.fileno()
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            return False
        chunk = os.read(fd, 65536)
        if not chunk:
            return False
        self._err_text += chunk.decode(errors="replace")
        return True

    def wait_stderr_text(self, pred, timeout=10.0):
        """Read stderr until pred(everything read so far) is true; False on
        timeout or exit.  Independent of wait_stderr()'s position."""
        end = time.monotonic() + timeout
        while not pred(self._err_text):
            if not self._read_stderr(end):
                return pred(self._err_text)
        return True

    def wait_stderr(self, needle, timeout=10.0):
        """Read stderr until a line contains `needle`; False on timeout or exit.

        Reads the raw descriptor: a buffered readline() would pull several
        lines into Python's buffer where select() cannot see them.
        """
        end = time.monotonic() + timeout
        while True:
            done, _, rest = self._err_text.rpartition("\n")
            if needle in done[self._err_seen:]:
                self._err_seen = len(done)
                return True
            self._err_seen = len(done)
            if not self._read_stderr(end):
                return needle in rest

    def stop(self, sig=signal.SIGINT, timeout=30):
        """Signal (unless already gone) and collect exit status and output."""
        if self.returncode is None:
            if self.popen.poll() is None:
                self.popen.send_signal(sig)
            try:
                out, err = self.popen.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                out, err = self.popen.communicate()
            self.stdout = out
            self.stderr = self._err_text + err
            self.returncode = self.popen.returncode
        return self

    def wait(self, timeout=60):
        """Wait for a process that ends by itself."""
        if self.returncode is None:
            try:
                out, err = self.popen.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                return self.stop(signal.SIGKILL)
            self.stdout = out
            self.stderr = self._err_text + err
            self.returncode = self.popen.returncode
        return self


class Processes:
    """Starts processes and guarantees they are gone at cleanup()."""

    def __init__(self):
        self.procs = []

    def start(self, argv, host=LOCAL):
        cmd = host.cmd(argv)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc = Proc(p, cmd)
        self.procs.append(proc)
        return proc

    def cleanup(self):
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.terminate()
        deadline = time.monotonic() + 5
        for p in self.procs:
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()
            for f in (p.popen.stdout, p.popen.stderr):
                if f:
                    f.close()
        self.procs = []


class PeerTestCase(unittest.TestCase):
    """A TestCase with a Processes registry and lnetr-peer helpers."""

    def setUp(self):
        need_root(self)
        if not os.access(peer_binary(), os.X_OK):
            self.fail("lnetr-peer not found at %s (set LNETR_BUILD or LNETR_PEER)" % peer_binary())
        self.procs = Processes()
        self.addCleanup(self.procs.cleanup)

    def peer_argv(self, nid, args, options=()):
        return [peer_binary(), "--nid", nid] + list(options) + list(args)

    def run_peer(self, nid, args, options=(), host=LOCAL, timeout=120):
        """Run a one-shot lnetr-peer command; (returncode, parsed YAML, CompletedProcess)."""
        cp = host.run(self.peer_argv(nid, args, options), timeout=timeout)
        try:
            doc = parse_yaml(cp.stdout)
        except ValueError as e:
            self.fail("unparsable YAML (%s) from %s:\n%s\nstderr:\n%s" % (e, args, cp.stdout, cp.stderr))
        return cp.returncode, doc, cp

    def start_server(self, nid, options=(), host=LOCAL, duration=None):
        args = ["server"] + (["--duration", str(duration)] if duration else [])
        p = self.procs.start(self.peer_argv(nid, args, options), host=host)
        if not p.wait_stderr("serving", timeout=10):
            p.stop()
            self.fail("lnetr-peer server %s did not start: rc=%s\n%s" % (nid, p.returncode, p.stderr))
        return p

    def stop_server(self, p):
        """SIGINT the server; (returncode, its stats document)."""
        p.stop(signal.SIGINT)
        try:
            doc = parse_yaml(p.stdout)
        except ValueError as e:
            self.fail("unparsable server YAML (%s):\n%s" % (e, p.stdout))
        return p.returncode, doc


# ---- YAML subset ----------------------------------------------------------------------


def _scalar(s):
    s = s.strip()
    if s == "" or s == "~" or s == "null":
        return None
    if s in ("[]", "{}"):  # empty flow collections
        return [] if s == "[]" else {}
    if s.startswith("! "):  # libyaml's non-specific tag (lnetctl prints it)
        s = s[2:].strip()
    if len(s) >= 2 and s[0] == "'" and s[-1] == "'":
        return s[1:-1].replace("''", "'")
    if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
        return json.loads(s)
    if s in ("true", "True"):
        return True
    if s in ("false", "False"):
        return False
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return s


def _split_key(content):
    """'key: value' -> (key, value or ''), 'key:' -> (key, '')."""
    if content.endswith(":"):
        return content[:-1], ""
    i = content.find(": ")
    if i < 0:
        raise ValueError("not a key: %r" % content)
    return content[:i], content[i + 2:]


def parse_yaml(text):
    """Parse one block-style YAML document (the subset lnetctl/lnetr-peer print)."""
    lines = []
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#") or raw.strip() in ("---", "..."):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        lines.append([indent, raw.strip()])
    if not lines:
        return None
    value, i = _block(lines, 0, lines[0][0])
    if i != len(lines):
        raise ValueError("unexpected indentation at %r" % lines[i][1])
    return value


def _is_item(content):
    return content == "-" or content.startswith("- ")


def _block(lines, i, indent):
    if _is_item(lines[i][1]):
        return _list(lines, i, indent)
    return _map(lines, i, indent)


def _list(lines, i, indent):
    out = []
    while i < len(lines) and lines[i][0] == indent and _is_item(lines[i][1]):
        content = lines[i][1]
        if content == "-":
            i += 1
            if i < len(lines) and lines[i][0] > indent:
                v, i = _block(lines, i, lines[i][0])
                out.append(v)
            else:
                out.append(None)
            continue
        rest = content[2:]
        if ": " in rest or rest.endswith(":"):
            lines[i] = [indent + 2, rest]  # the item's first key
            v, i = _map(lines, i, indent + 2)
            out.append(v)
        else:
            out.append(_scalar(rest))
            i += 1
    return out, i


def _map(lines, i, indent):
    out = {}
    while i < len(lines) and lines[i][0] == indent and not _is_item(lines[i][1]):
        key, rest = _split_key(lines[i][1])
        i += 1
        if rest.strip():
            out[key] = _scalar(rest)
        elif i < len(lines) and lines[i][0] > indent:
            out[key], i = _block(lines, i, lines[i][0])
        elif i < len(lines) and lines[i][0] == indent and _is_item(lines[i][1]):
            out[key], i = _list(lines, i, indent)  # libyaml puts items at their key's indent
        else:
            out[key] = None
    if i < len(lines) and lines[i][0] > indent:
        raise ValueError("unexpected indentation at %r" % lines[i][1])
    return out, i


# ---- the data pattern (cli/peer/pattern.hpp) ------------------------------------------

_M = (1 << 64) - 1
_STEP = 0xA0761D6478BD642F
TEST_PORTAL = 42


def _block_hash(seed, block):
    x = (block * 0x9E3779B97F4A7C15 + seed * 0xD1B54A32D192ED03 + 0x2545F4914F6CDD1D) & _M
    x ^= x >> 32
    x = (x * 0xD6E8FEB86659FD93) & _M
    x ^= x >> 29
    return x


def pattern(seed, offset, n):
    """Bytes offset..offset+n-1 of the test pattern for `seed`."""
    first, last = offset >> 3, (offset + n + 7) >> 3
    words = bytearray()
    for w in range(first, last):
        words += struct.pack("<Q", (_block_hash(seed, w >> 3) + (w & 7) * _STEP) & _M)
    start = offset - first * 8
    return bytes(words[start:start + n])


# ---- socklnd by hand (spec: socklnd.md, lnet-header.md) ---------------------------------

ACCEPTOR_MAGIC = 0xACCE7100
HELLO_MAGIC = 0x45726963
PING_MAGIC = 0x70696E67
LNET_PID = 12345
PING_MATCH_BITS = 0x8000000000000000
NI_UP = 0x15AAC0DE
NI_DOWN = 0xDEADFACE
MSG_LNET, MSG_NOOP = 0xC1, 0xC0
CONN_ANY, CONN_CONTROL, CONN_BULK_IN, CONN_BULK_OUT, CONN_NONE = 0, 1, 2, 3, -1
ACK, PUT, GET, REPLY = 0, 1, 2, 3
NONE_WMD = (_M, _M)
LND_TCP = 2


def nid4(text):
    """'10.0.0.1@tcp3' -> 64-bit nid4 (tcp nets only)."""
    addr, _, net = text.partition("@")
    net = net or "tcp"
    if not net.startswith("tcp"):
        raise ValueError("only tcp nets: %s" % text)
    num = int(net[3:] or "0")
    ip = struct.unpack(">I", socket.inet_aton(addr))[0]
    return (((LND_TCP << 16) | num) << 32) | ip


def nid_text(n):
    net, ip = n >> 32, n & 0xFFFFFFFF
    num = net & 0xFFFF
    return "%s@tcp%s" % (socket.inet_ntoa(struct.pack(">I", ip)), num if num else "")


def ip_of(nid):
    return nid.partition("@")[0]


def pack_acceptor(target):
    return struct.pack("<IIQ", ACCEPTOR_MAGIC, 1, target)


def pack_hello(src, dst, incarnation, ctype, dst_incarnation=0):
    return struct.pack("<IIQQIIQQii", HELLO_MAGIC, 3, src, dst, LNET_PID, 0, incarnation, dst_incarnation, ctype, 0)


HELLO_V3_SIZE = 56


def unpack_hello(b):
    f = struct.unpack("<IIQQIIQQii", b)
    keys = ("magic", "version", "src_nid", "dst_nid", "src_pid", "dst_pid", "src_incarnation", "dst_incarnation",
            "ctype", "nips")
    return dict(zip(keys, f))


class Msg:
    """An LNet message: the 72-byte header's fields plus the payload."""

    def __init__(self, type, dest_nid, src_nid, payload=b"", dest_pid=LNET_PID, src_pid=LNET_PID, **fields):
        self.type = type
        self.dest_nid, self.src_nid = dest_nid, src_nid
        self.dest_pid, self.src_pid = dest_pid, src_pid
        self.payload = payload
        self.payload_length = fields.pop("payload_length", len(payload))
        self.wmd = fields.pop("wmd", NONE_WMD)  # ack_wmd / return_wmd / dst_wmd
        self.match_bits = fields.pop("match_bits", 0)
        self.hdr_data = fields.pop("hdr_data", 0)
        self.ptl_index = fields.pop("ptl_index", 0)
        self.offset = fields.pop("offset", 0)  # put offset / get src_offset
        self.sink_length = fields.pop("sink_length", 0)
        self.mlength = fields.pop("mlength", 0)
        self.raw_header = None
        if fields:
            raise TypeError("unknown fields %s" % fields)

    def union(self):
        w0, w1 = self.wmd
        if self.type == PUT:
            return struct.pack("<QQQQII", w0, w1, self.match_bits, self.hdr_data, self.ptl_index, self.offset)
        if self.type == GET:
            return struct.pack("<QQQIII4x", w0, w1, self.match_bits, self.ptl_index, self.offset, self.sink_length)
        if self.type == REPLY:
            return struct.pack("<QQ24x", w0, w1)
        if self.type == ACK:
            return struct.pack("<QQQI12x", w0, w1, self.match_bits, self.mlength)
        raise ValueError(self.type)

    def pack(self, zc_cookie=0):
        hdr = struct.pack("<QQIIII", self.dest_nid, self.src_nid, self.dest_pid, self.src_pid, self.type,
                          self.payload_length) + self.union()
        assert len(hdr) == 72
        return struct.pack("<IIQQ", MSG_LNET, 0, zc_cookie, 0) + hdr + self.payload

    @classmethod
    def unpack_header(cls, hdr):
        dest, src, dpid, spid, typ, plen = struct.unpack_from("<QQIIII", hdr, 0)
        m = cls(typ, dest, src, dest_pid=dpid, src_pid=spid, payload_length=plen)
        u = hdr[32:72]
        if typ == PUT:
            w0, w1, m.match_bits, m.hdr_data, m.ptl_index, m.offset = struct.unpack("<QQQQII", u)
        elif typ == GET:
            w0, w1, m.match_bits, m.ptl_index, m.offset, m.sink_length = struct.unpack("<QQQIII4x", u)
        elif typ == REPLY:
            w0, w1 = struct.unpack("<QQ24x", u)
        else:
            w0, w1, m.match_bits, m.mlength = struct.unpack("<QQQI12x", u)
        m.wmd = (w0, w1)
        m.raw_header = bytes(hdr)
        return m


def ping_info(nid, features=0x1E, seq=1, status=NI_UP, extra=()):
    """A ping-info buffer (little-endian): 0@lo with `seq`, `nid`, then `extra` (nid, status) pairs."""
    nis = [(nid, status)] + list(extra)
    b = struct.pack("<IIII", PING_MAGIC, features, LNET_PID, 1 + len(nis))
    b += struct.pack("<QII", 0x0009000000000000, seq, 0)
    for n, st in nis:
        b += struct.pack("<QII", n, st, 0)
    return b


class SocklndConn:
    """One socklnd connection made by hand from a privileged port, as a kernel node makes it."""

    def __init__(self, local_nid, remote_nid, ctype=CONN_CONTROL, port=988, src_port=None, incarnation=None):
        self.local = nid4(local_nid)
        self.remote = nid4(remote_nid)
        self.incarnation = incarnation or time.time_ns()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for p in ([src_port] if src_port else range(1023, 511, -1)):
                try:
                    self.sock.bind((ip_of(local_nid), p))
                    break
                except OSError as e:
                    if e.errno != errno.EADDRINUSE or src_port:
                        raise
            self.sock.settimeout(10)
            self.sock.connect((ip_of(remote_nid), port))
            self.sock.sendall(pack_acceptor(self.remote) + pack_hello(self.local, self.remote, self.incarnation,
                                                                      ctype))
            self.hello_raw = self.recv_exact(HELLO_V3_SIZE)
            self.hello = unpack_hello(self.hello_raw)
        except BaseException:
            self.sock.close()
            raise

    def close(self):
        self.sock.close()

    def recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed after %d of %d bytes" % (len(buf), n))
            buf += chunk
        return bytes(buf)

    def send(self, msg):
        self.sock.sendall(msg.pack())

    def recv(self, timeout=10):
        """The next LNet message (NOOPs skipped)."""
        self.sock.settimeout(timeout)
        while True:
            typ, _csum, _c0, _c1 = struct.unpack("<IIQQ", self.recv_exact(24))
            if typ == MSG_NOOP:
                continue
            m = Msg.unpack_header(self.recv_exact(72))
            m.payload = self.recv_exact(m.payload_length)
            return m

    def closed_by_peer(self, timeout=5):
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


class FakeGateway:
    """A kernel LNet router played by hand: listens on gateway_nid:988,
    answers pings with router ping info (features 0x1a, or whatever is set),
    ACKs pushes, and plays every node of `remote_net` itself: a ping of a
    remote NID is answered as that node would (through the gateway), a test
    PUT is ACKed with its length, a test GET is answered with the pattern.
    Counts what it sees in `seen` (a list of (conn_type, Msg))."""

    def __init__(self, gateway_nid, remote_net_nid, features=0x1A, remote_status=NI_UP):
        self.nid = nid4(gateway_nid)
        self.ip = ip_of(gateway_nid)
        self.remote_ni = nid4(remote_net_nid)  # the gateway's NI on the remote net
        self.features = features
        self.remote_status = remote_status
        self.incarnation = time.time_ns()
        self.seen = []
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((self.ip, 988))
        self.listener.listen(16)
        self.stop_flag = False
        self.conns = []
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.thread.start()

    def close(self):
        self.stop_flag = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (a bare close would not)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(timeout=5)
        for c in list(self.conns):
            try:
                c.close()
            except OSError:
                pass

    def messages(self, type=None):
        with self.lock:
            return [m for _, m in self.seen if type is None or m.type == type]

    def _accept_loop(self):
        while not self.stop_flag:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _recv_exact(c, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = c.recv(n - len(buf))
            if not chunk:
                raise ConnectionError()
            buf += chunk
        return bytes(buf)

    def _serve(self, c):
        try:
            magic, version, target = struct.unpack("<IIQ", self._recv_exact(c, 16))
            h = unpack_hello(self._recv_exact(c, HELLO_V3_SIZE))
            if magic != ACCEPTOR_MAGIC or version != 1 or target != self.nid or h["version"] != 3:
                c.close()
                return
            ctype = {CONN_BULK_IN: CONN_BULK_OUT, CONN_BULK_OUT: CONN_BULK_IN}.get(h["ctype"], h["ctype"])
            c.sendall(pack_hello(self.nid, h["src_nid"], self.incarnation, ctype))
            lock = threading.Lock()
            while True:
                typ, _, zc, _ = struct.unpack("<IIQQ", self._recv_exact(c, 24))
                if typ == MSG_NOOP:
                    continue
                m = Msg.unpack_header(self._recv_exact(c, 72))
                m.payload = self._recv_exact(c, m.payload_length)
                with self.lock:
                    self.seen.append((h["ctype"], m))
                if zc:
                    with lock:
                        c.sendall(struct.pack("<IIQQ", MSG_NOOP, 0, 0, zc))
                for answer in self._answers(m):
                    with lock:
                        c.sendall(answer.pack())
        except (OSError, ConnectionError, struct.error):
            pass

    def _answers(self, m):
        me = m.dest_nid  # answer as the node that was addressed (the gateway or a remote node)
        if m.type == GET and m.ptl_index == 0 and m.match_bits == PING_MATCH_BITS:
            if me == self.nid:
                info = ping_info(self.nid, self.features, seq=3, extra=[(self.remote_ni, self.remote_status)])
            else:
                info = ping_info(me, 0x1E, seq=1)
            data = info[m.offset:][:m.sink_length]
            return [Msg(REPLY, m.src_nid, me, data, wmd=m.wmd)]
        if m.type == PUT and m.wmd != NONE_WMD:
            if m.ptl_index == TEST_PORTAL:
                ok = m.payload == pattern(m.match_bits, m.offset, len(m.payload))
                mlen = len(m.payload) if ok else 0
            else:
                mlen = min(len(m.payload), 272)
            return [Msg(ACK, m.src_nid, me, wmd=m.wmd, match_bits=m.match_bits, mlength=mlen)]
        if m.type == GET and m.ptl_index == TEST_PORTAL:
            return [Msg(REPLY, m.src_nid, me, pattern(m.match_bits, m.offset, m.sink_length), wmd=m.wmd)]
        return []
