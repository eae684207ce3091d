# SPDX-License-Identifier: Apache-2.0
"""A handshake flood against SPOP ports, for the soak (soak.py): keeps `count`
connections open across the given ports for `seconds`: a third of them silent
(connected, nothing sent), a third stopped after the first 10 bytes of a
HAPROXY-HELLO, a third one byte short of a HELLO frame of 16380 bytes. A
connection the agent closes (hello timeout, a cap on connections or
handshakes) is replaced by a new one, at most `rate` new connections a second
over all ports, so that the flood keeps up its numbers without spinning on a
port that refuses everything.

Run as a program it prints one line of JSON with what happened:
  python3 flood.py PORT[,PORT...] COUNT SECONDS [RATE]
opened (connections started), connected, failed (connect errors), closed_by_peer
(closed by the agent, after an AGENT-DISCONNECT or not), disconnects (of those,
the ones that got bytes first: an AGENT-DISCONNECT), max_open. At the end every
connection still open is reset (SO_LINGER 0), leaving no TIME_WAIT behind on
the flood's side."""
import errno
import json
import selectors
import socket
import struct
import sys
import time

import spop

# What each kind of connection sends once connected, in turn: nothing; the
# first 10 bytes of a HAPROXY-HELLO; a frame of the largest size HAProxy
# offers (16380 bytes) but one byte, so that the agent's read buffer is filled
# and never handed a whole frame (the most memory a connection that never
# finishes its HELLO can hold).
HELLO = spop.hello()
BIG = 16380
SENDS = [b"", HELLO[:10], BIG.to_bytes(4, "big") + HELLO[4:] + b"\0" * (BIG - 1 - len(HELLO[4:]))]


class Conn:
    __slots__ = ("sock", "send", "connecting", "got_bytes")

    def __init__(self, sock, send):
        self.sock, self.send, self.connecting, self.got_bytes = sock, send, True, False


def flood(ports, count, seconds, rate=1000.0):
    sel = selectors.DefaultSelector()
    conns = {}
    st = {"opened": 0, "connected": 0, "failed": 0, "closed_by_peer": 0, "disconnects": 0,
          "max_open": 0}
    nxt = 0  # round robin over ports, and silent/half-HELLO alternately
    end = time.monotonic() + seconds
    allowance, last = float(min(count, rate)), time.monotonic()

    def drop(c, peer):
        sel.unregister(c.sock)
        del conns[c.sock.fileno()]
        if peer:
            st["closed_by_peer"] += 1
            st["disconnects"] += c.got_bytes
        c.sock.close()

    while True:
        now = time.monotonic()
        if now >= end:
            break
        allowance = min(float(count), allowance + (now - last) * rate)
        last = now
        while len(conns) < count and allowance >= 1.0:
            allowance -= 1.0
            port = ports[nxt % len(ports)]
            send = SENDS[(nxt // len(ports)) % len(SENDS)]
            nxt += 1
            sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sk.setblocking(False)
            st["opened"] += 1
            rc = sk.connect_ex(("127.0.0.1", port))
            if rc not in (0, errno.EINPROGRESS):
                st["failed"] += 1
                sk.close()
                continue
            c = Conn(sk, send)
            conns[sk.fileno()] = c
            sel.register(sk, selectors.EVENT_WRITE, c)
        st["max_open"] = max(st["max_open"], len(conns))
        for key, _ in sel.select(timeout=min(0.05, max(0.0, end - time.monotonic()))):
            c = key.data
            if c.connecting:
                err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    st["failed"] += 1
                    drop(c, False)
                    continue
                c.connecting = False
                st["connected"] += 1
                if c.send:
                    try:
                        c.sock.sendall(c.send)  # fits in a fresh socket's buffer
                    except OSError:
                        drop(c, True)
                        continue
                sel.modify(c.sock, selectors.EVENT_READ, c)
                continue
            try:
                data = c.sock.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                c.got_bytes = True  # an AGENT-DISCONNECT; the close follows
            else:
                drop(c, True)
    linger = struct.pack("ii", 1, 0)
    for c in list(conns.values()):
        try:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        except OSError:
            pass
        sel.unregister(c.sock)
        c.sock.close()
    conns.clear()
    sel.close()
    return st


def main():
    ports = [int(p) for p in sys.argv[1].split(",")]
    count, seconds = int(sys.argv[2]), float(sys.argv[3])
    rate = float(sys.argv[4]) if len(sys.argv) > 4 else 1000.0
    print(json.dumps(flood(ports, count, seconds, rate)), flush=True)


if __name__ == "__main__":
    main()
