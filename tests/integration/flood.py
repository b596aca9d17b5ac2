"""Floods of made-up LNet peers at a router, run inside a client's
namespace; one JSON line of what happened on stdout.

    python3 flood.py sources LOCAL_IP ROUTER_NID DEST_NID COUNT
        COUNT connections, each from a privileged port of LOCAL_IP with a
        HELLO naming a made-up source NID (10.77.x.y@tcp), each sending one
        PUT to DEST_NID through the router, then reset.
    python3 flood.py dests LOCAL_IP NID ROUTER_NID NET COUNT
        One connection from LOCAL_IP as NID sending COUNT PUTs, each to
        another made-up NID on NET (10.200.x.y@NET).
    python3 flood.py syn ROUTER_IP PORT SECONDS COUNT
        COUNT TCP SYNs to ROUTER_IP:PORT spread over SECONDS, each from a
        made-up address of the router's /24 (.100 to .249, no such hosts)
        and port: a spoofed SYN flood, never answered.

Python 3 standard library only.
"""

import json
import socket
import struct
import sys
import time

from lnetr_test import (CONN_ANY, CONN_NONE, HELLO_V3_SIZE, Msg, PUT, nid4, pack_acceptor, pack_hello, unpack_hello,
                        ip_of)


def made_up(prefix, i, net):
    return "%s.%d.%d@%s" % (prefix, (i >> 8) & 255, i & 255, net)


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def sources(local_ip, router, dest, count):
    accepted = refused = failed = 0
    port = 1023
    start = time.monotonic()
    for i in range(count):
        src = made_up("10.77", i, "tcp")
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset: no TIME_WAIT
        s.settimeout(10)
        try:
            for _ in range(512):  # a free privileged port
                port = port - 1 if port > 512 else 1023
                try:
                    s.bind((local_ip, port))
                    break
                except OSError:
                    continue
            s.connect((ip_of(router), 988))
            s.sendall(pack_acceptor(nid4(router)) + pack_hello(nid4(src), nid4(router), time.time_ns(), CONN_ANY))
            hello = unpack_hello(recv_exact(s, HELLO_V3_SIZE))
            if hello["ctype"] == CONN_NONE:
                refused += 1
            else:
                accepted += 1
                s.sendall(Msg(PUT, nid4(dest), nid4(src), payload=b"x" * 64).pack())
                time.sleep(0.001)
        except (OSError, ConnectionError):
            failed += 1
        finally:
            s.close()
    return {"accepted": accepted, "refused": refused, "failed": failed, "seconds": time.monotonic() - start}


def dests(local_ip, local, router, net, count):
    start = time.monotonic()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((local_ip, 1000))
    s.settimeout(60)
    s.connect((ip_of(router), 988))
    s.sendall(pack_acceptor(nid4(router)) + pack_hello(nid4(local), nid4(router), time.time_ns(), CONN_ANY))
    hello = unpack_hello(recv_exact(s, HELLO_V3_SIZE))
    sent = 0
    if hello["ctype"] != CONN_NONE:
        batch = b""
        for i in range(count):
            batch += Msg(PUT, nid4(made_up("10.200", i, net)), nid4(local), payload=b"y" * 16).pack()
            if len(batch) > 60000 or i == count - 1:
                s.sendall(batch)  # blocks while the router holds back (its credits)
                batch = b""
            sent += 1
    s.close()
    return {"sent": sent, "seconds": time.monotonic() - start}


def syn_flood(router_ip, port, seconds, count):
    """Raw IPv4 SYNs with made-up sources (the kernel sends what is built)."""
    def csum(b):
        if len(b) % 2:
            b += b"\0"
        s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
        while s >> 16:
            s = (s & 0xffff) + (s >> 16)
        return ~s & 0xffff

    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    dst = socket.inet_aton(router_ip)
    prefix = router_ip.rsplit(".", 1)[0]
    start = time.monotonic()
    sent = 0
    for i in range(count):
        src = socket.inet_aton("%s.%d" % (prefix, 100 + i % 150))
        sport = 20000 + (i * 7) % 40000
        tcp = struct.pack("!HHIIBBHHH", sport, port, (i * 2654435761) & 0xffffffff, 0, 7 << 4, 0x02, 64240, 0, 0)
        tcp += struct.pack("!BBH", 2, 4, 1460) + b"\x01\x01\x04\x02"  # MSS, NOP NOP SACK-permitted
        pseudo = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
        tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), i & 0xffff, 0, 64, 6, 0, src, dst)
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
        raw.sendto(ip + tcp, (router_ip, 0))
        sent += 1
        ahead = start + seconds * (i + 1) / count - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    return {"sent": sent, "seconds": time.monotonic() - start}


def main():
    kind = sys.argv[1]
    if kind == "syn":
        print(json.dumps(syn_flood(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))))
        return 0
    if kind == "sources":
        out = sources(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        out = dests(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
