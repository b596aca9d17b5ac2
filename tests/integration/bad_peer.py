"""Misbehaving socklnd connections to a router, run inside the client's
namespace: `python3 bad_peer.py LOCAL_NID ROUTER_NID`.

Each connection breaks the protocol in one way; the router must close it
(and count it), and keep serving everyone else.  Exit status 0 when the
router closed every bad connection.
"""

import socket
import struct
import sys
import time

from lnetr_test import Msg, SocklndConn, ACCEPTOR_MAGIC, PUT, ip_of, nid4


def closed(conn, what):
    if not conn.closed_by_peer(timeout=20):
        print("router did not close the connection after %s" % what)
        return False
    return True


def main():
    local, router = sys.argv[1], sys.argv[2]
    ok = True

    # 1. A wrong acceptor magic.
    s = socket.socket()
    s.bind((ip_of(local), 1000))
    s.settimeout(10)
    s.connect((ip_of(router), 988))
    s.sendall(struct.pack("<IIQ", 0x12345678, 1, nid4(router)))
    try:
        ok &= s.recv(1) == b""
    except ConnectionResetError:
        pass
    s.close()

    # 2. An unknown socklnd message type after a good handshake.
    c = SocklndConn(local, router)
    c.sock.sendall(struct.pack("<IIQQ", 0xC2, 0, 0, 0) + bytes(72))
    ok &= closed(c, "a socklnd message of type 0xc2")
    c.close()

    # 3. A payload length beyond the LNet MTU.
    c = SocklndConn(local, router)
    m = Msg(PUT, nid4(router), nid4(local), payload_length=(1 << 20) + 1)
    c.sock.sendall(m.pack())
    ok &= closed(c, "a payload length of 1 MiB + 1")
    c.close()

    # 4. Half a header, then silence: the router's sock_timeout closes it.
    c = SocklndConn(local, router)
    c.sock.sendall(Msg(PUT, nid4(router), nid4(local), payload=b"x" * 10).pack()[:40])
    ok &= closed(c, "a truncated header (waiting for sock_timeout)")
    c.close()

    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
