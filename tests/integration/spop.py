# SPDX-License-Identifier: Apache-2.0
"""A small SPOP 2.0 client for the integration tests: speaks to the agent the
way HAProxy does (HELLO, pipelined NOTIFYs, DISCONNECT) and decodes ACKs.
Independent of the C codec on purpose: the two check each other."""
import socket
import struct

HAPROXY_HELLO, HAPROXY_DISCONNECT, NOTIFY = 1, 2, 3
AGENT_HELLO, AGENT_DISCONNECT, ACK = 101, 102, 103
FIN = 1

T_NULL, T_BOOL, T_INT32, T_UINT32, T_INT64, T_UINT64, T_IPV4, T_IPV6, T_STR, T_BIN = range(10)


def varint(v):
    v &= (1 << 64) - 1
    if v < 240:
        return bytes([v])
    out = bytearray([(v & 0xFF) | 0xF0])
    v = (v - 240) >> 4
    while v >= 128:
        out.append((v & 0xFF) | 0x80)
        v = (v - 128) >> 7
    out.append(v)
    return bytes(out)


def get_varint(buf, i):
    b = buf[i]
    i += 1
    if b < 240:
        return b, i
    v, shift = b, 4
    while True:
        b = buf[i]
        i += 1
        v += b << shift
        shift += 7
        if b < 128:
            return v, i


def s(x):
    if isinstance(x, str):
        x = x.encode()
    return varint(len(x)) + x


def typed(v):
    """Encode a Python value the way HAProxy types its samples."""
    if v is None:
        return bytes([T_NULL])
    if isinstance(v, bool):
        return bytes([T_BOOL | (0x10 if v else 0)])
    if isinstance(v, int):
        return bytes([T_INT64]) + varint(v)
    if isinstance(v, tuple) and v[0] == "ipv4":
        return bytes([T_IPV4]) + socket.inet_pton(socket.AF_INET, v[1])
    if isinstance(v, tuple) and v[0] == "ipv6":
        return bytes([T_IPV6]) + socket.inet_pton(socket.AF_INET6, v[1])
    if isinstance(v, tuple) and v[0] == "uint32":
        return bytes([T_UINT32]) + varint(v[1])
    if isinstance(v, bytes):
        return bytes([T_BIN]) + s(v)
    return bytes([T_STR]) + s(str(v))


def get_typed(buf, i):
    t = buf[i] & 0x0F
    fl = buf[i] >> 4
    i += 1
    if t == T_NULL:
        return None, i
    if t == T_BOOL:
        return bool(fl & 1), i
    if t in (T_INT32, T_INT64):
        v, i = get_varint(buf, i)
        if v >= 1 << 63:
            v -= 1 << 64
        return v, i
    if t in (T_UINT32, T_UINT64):
        return get_varint(buf, i)
    if t == T_IPV4:
        return socket.inet_ntop(socket.AF_INET, buf[i:i + 4]), i + 4
    if t == T_IPV6:
        return socket.inet_ntop(socket.AF_INET6, buf[i:i + 16]), i + 16
    n, i = get_varint(buf, i)
    raw = bytes(buf[i:i + n])
    return (raw.decode() if t == T_STR else raw), i + n


def frame(ftype, payload=b"", stream=0, fid=0, flags=FIN):
    body = bytes([ftype]) + struct.pack(">I", flags) + varint(stream) + varint(fid) + payload
    return struct.pack(">I", len(body)) + body


def kv(items):
    out = b""
    for k, v in items:
        out += s(k) + typed(v)
    return out


def hello(max_frame=16380, caps="pipelining,async", version="2.0", healthcheck=False,
          engine="e1", omit=()):
    items = []
    if "version" not in omit:
        items.append(("supported-versions", version))
    if "max" not in omit:
        items.append(("max-frame-size", ("uint32", max_frame)))
    if "caps" not in omit:
        items.append(("capabilities", caps))
    if healthcheck:
        items.append(("healthcheck", True))
    elif engine:
        items.append(("engine-id", engine))
    return frame(HAPROXY_HELLO, kv(items))


def notify(stream, fid, messages):
    """messages: list of (name, [(arg, value), ...])."""
    payload = b""
    for name, args in messages:
        payload += s(name) + bytes([len(args)])
        for a, v in args:
            payload += s(a) + typed(v)
    return frame(NOTIFY, payload, stream, fid)


def decode_frame(buf):
    """Returns (frame dict, rest) or (None, buf) when incomplete."""
    if len(buf) < 4:
        return None, buf
    (n,) = struct.unpack(">I", buf[:4])
    if len(buf) < 4 + n:
        return None, buf
    body = buf[4:4 + n]
    f = {"type": body[0], "flags": struct.unpack(">I", body[1:5])[0]}
    f["stream"], i = get_varint(body, 5)
    f["fid"], i = get_varint(body, i)
    f["payload"] = body[i:]
    return f, buf[4 + n:]


def decode_kv(payload):
    out, i = {}, 0
    while i < len(payload):
        n, i = get_varint(payload, i)
        k = bytes(payload[i:i + n]).decode()
        i += n
        out[k], i = get_typed(payload, i)
    return out


def decode_actions(payload):
    out, i = {}, 0
    while i < len(payload):
        act, nargs, scope = payload[i], payload[i + 1], payload[i + 2]
        i += 3
        n, i = get_varint(payload, i)
        name = bytes(payload[i:i + n]).decode()
        i += n
        assert scope == 2, "scope txn"
        if act == 1:
            assert nargs == 3
            out[name], i = get_typed(payload, i)
        else:
            assert act == 2 and nargs == 2
            out[name] = "<unset>"
    return out


class Client:
    def __init__(self, addr, timeout=5.0):
        if isinstance(addr, str) and addr.startswith("unix:"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(addr[5:])
        else:
            fam = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
            self.sock = socket.socket(fam, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(addr)
        self.buf = b""
        self.max_frame = None

    def send(self, data):
        self.sock.sendall(data)

    def recv_frame(self):
        while True:
            f, self.buf = decode_frame(self.buf)
            if f:
                return f
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data

    def handshake(self, **kw):
        self.send(hello(**kw))
        f = self.recv_frame()
        assert f and f["type"] == AGENT_HELLO, f
        h = decode_kv(f["payload"])
        self.max_frame = h["max-frame-size"]
        return h

    def decide(self, args, stream=1, fid=1, message="check-rate"):
        self.send(notify(stream, fid, [(message, list(args.items()))]))
        f = self.recv_frame()
        assert f and f["type"] == ACK and f["stream"] == stream and f["fid"] == fid, f
        return decode_actions(f["payload"])

    def closed(self, timeout=10.0):
        """True when the peer closed (EOF or reset) within `timeout` seconds,
        after any pending frames were read. False when more data came or
        nothing happened before the deadline: a peer that never closes must
        fail "the agent must close", however slow the machine is."""
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        finally:
            self.sock.settimeout(old)
        if data:
            self.buf += data
            return False
        return True

    def close(self):
        self.sock.close()
