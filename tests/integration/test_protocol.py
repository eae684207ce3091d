# SPDX-License-Identifier: Apache-2.0
"""SPOP as HAProxy speaks it: handshake, health checks, pipelining, and every
protocol error answered with its SPOE.txt status code."""
import os
import random
import socket
import struct
import time
import unittest

import spop
from harness import Agent

RULES = """
[rule:api]
key = key
rate = 1000000/1s
"""


class Protocol(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = Agent(RULES, extra_agent="max_frame_size = 16380\n")

    @classmethod
    def tearDownClass(cls):
        rc = cls.agent.stop()
        assert rc == 0, "agent exit %s\n%s" % (rc, cls.agent.output())

    def client(self):
        return spop.Client(self.agent.addr)

    def expect_disconnect(self, c, status):
        f = c.recv_frame()
        self.assertIsNotNone(f, "connection closed without AGENT-DISCONNECT")
        self.assertEqual(f["type"], spop.AGENT_DISCONNECT)
        kv = spop.decode_kv(f["payload"])
        self.assertEqual(kv["status-code"], status, kv)
        self.assertIsInstance(kv["message"], str)
        self.assertTrue(c.closed(), "agent must close after AGENT-DISCONNECT")
        c.close()

    def test_hello_negotiation(self):
        c = self.client()
        h = c.handshake(max_frame=4096)
        self.assertEqual(h["version"], "2.0")
        self.assertEqual(h["max-frame-size"], 4096)
        self.assertEqual(h["capabilities"], "pipelining")
        c.close()
        c = self.client()
        h = c.handshake(max_frame=65536, caps="")
        self.assertEqual(h["max-frame-size"], 16380)
        self.assertEqual(h["capabilities"], "")  # never announced when not offered
        c.close()

    def test_healthcheck(self):
        c = self.client()
        c.send(spop.hello(caps="", healthcheck=True, engine=None))
        f = c.recv_frame()
        self.assertEqual(f["type"], spop.AGENT_HELLO)
        self.assertIn("capabilities", spop.decode_kv(f["payload"]))
        self.assertTrue(c.closed())

    def test_500_pipelined(self):
        c = self.client()
        c.handshake()
        frames = b"".join(spop.notify(1000 + i, i + 1,
                                      [("check-rate", [("key", "k%d" % (i % 7))])])
                          for i in range(500))
        c.send(frames)
        seen = {}
        for _ in range(500):
            f = c.recv_frame()
            self.assertEqual(f["type"], spop.ACK)
            key = (f["stream"], f["fid"])
            self.assertNotIn(key, seen)
            seen[key] = spop.decode_actions(f["payload"])
        self.assertEqual(set(seen), {(1000 + i, i + 1) for i in range(500)})
        self.assertTrue(all(v["blocked"] is False for v in seen.values()))
        c.close()

    def test_64bit_ids_and_stream_zero(self):
        c = self.client()
        c.handshake()
        for sid, fid in ((0, 0), (0, 1), (2**64 - 1, 2**63 + 5)):
            self.assertIn("blocked", c.decide({"key": "x"}, stream=sid, fid=fid))
        c.close()

    def test_empty_notify_gets_ack(self):
        c = self.client()
        c.handshake()
        c.send(spop.frame(spop.NOTIFY, b"", 7, 9))
        f = c.recv_frame()
        self.assertEqual((f["type"], f["stream"], f["fid"]), (spop.ACK, 7, 9))
        self.assertEqual(spop.decode_actions(f["payload"]), {"blocked": False})
        c.close()

    def test_haproxy_disconnect(self):
        c = self.client()
        c.handshake()
        c.send(spop.frame(spop.HAPROXY_DISCONNECT,
                          spop.kv([("status-code", ("uint32", 2)), ("message", "a timeout")])))
        self.expect_disconnect(c, 0)

    def test_unknown_frame_skipped(self):
        c = self.client()
        c.handshake()
        c.send(spop.frame(77, b"whatever", 1, 1))
        self.assertIn("blocked", c.decide({"key": "a"}))
        c.close()

    def test_too_big(self):
        c = self.client()
        c.handshake(max_frame=1024)
        c.send(struct.pack(">I", 5000) + b"\x03\x00\x00\x00\x01\x01\x01")
        self.expect_disconnect(c, 3)

    def test_invalid(self):
        cases = [
            spop.frame(spop.NOTIFY, b"", 1, 1),              # NOTIFY before HELLO
            struct.pack(">I", 3) + b"\x01\x00\x00",          # shorter than a header
            spop.frame(spop.HAPROXY_HELLO, b"\x05hello\x08"),  # truncated kv
        ]
        for data in cases:
            c = self.client()
            c.send(data)
            self.expect_disconnect(c, 4)
        c = self.client()
        c.handshake()
        c.send(spop.frame(spop.NOTIFY, b"\x0acheck-rate\x02\x03key\x08\x50ab", 1, 1))
        self.expect_disconnect(c, 4)

    def test_handshake_errors(self):
        cases = [
            (spop.hello(omit=("version",)), 5),
            (spop.hello(omit=("max",)), 6),
            (spop.hello(omit=("caps",)), 7),
            (spop.hello(version="1.0"), 8),
            (spop.hello(max_frame=100), 9),
        ]
        for data, status in cases:
            c = self.client()
            c.send(data)
            self.expect_disconnect(c, status)

    def test_fragmentation(self):
        c = self.client()
        c.handshake()
        c.send(spop.frame(spop.NOTIFY, b"\x0acheck-rate\x00", 1, 1, flags=0))
        self.expect_disconnect(c, 10)

    def test_random_bytes_leave_others_working(self):
        good = self.client()
        good.handshake()
        rnd = random.Random(42)
        socks = []
        for i in range(40):
            sk = socket.create_connection(self.agent.addr, timeout=5)
            n = rnd.randint(1, 3000)
            data = bytes(rnd.getrandbits(8) for _ in range(n))
            if i % 4 == 0:  # a valid HELLO first, garbage after
                data = spop.hello() + data
            try:
                sk.sendall(data)
            except OSError:
                pass
            socks.append(sk)
        for i in range(50):
            self.assertIn("blocked", good.decide({"key": "g%d" % i}, stream=i, fid=1))
        for sk in socks:
            sk.close()
        # a new connection still works, and the agent is alive
        c = self.client()
        c.handshake()
        self.assertIn("blocked", c.decide({"key": "after"}))
        c.close()
        good.close()
        self.assertIsNone(self.agent.p.poll())

    def test_split_writes(self):
        c = self.client()
        data = spop.hello() + spop.notify(3, 4, [("check-rate", [("key", "split")])])
        for b in data:
            c.send(bytes([b]))
        f = c.recv_frame()
        self.assertEqual(f["type"], spop.AGENT_HELLO)
        f = c.recv_frame()
        self.assertEqual((f["type"], f["stream"], f["fid"]), (spop.ACK, 3, 4))
        c.close()


class ClientClosed(unittest.TestCase):
    """spop.Client.closed(), which every "the agent must close" rests on:
    true on EOF or reset, false on a peer that stays open (a timeout)."""

    def pair(self):
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        c = spop.Client(ls.getsockname())
        peer, _ = ls.accept()
        ls.close()
        return c, peer

    def test_open_peer_is_not_closed(self):
        c, peer = self.pair()
        try:
            t0 = time.monotonic()
            self.assertFalse(c.closed(timeout=0.3))
            self.assertGreaterEqual(time.monotonic() - t0, 0.3)
        finally:
            c.close()
            peer.close()

    def test_eof_and_reset_are_closed(self):
        c, peer = self.pair()
        peer.close()
        self.assertTrue(c.closed())
        c.close()
        c, peer = self.pair()
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()  # RST
        self.assertTrue(c.closed())
        c.close()

    def test_data_is_not_closed(self):
        c, peer = self.pair()
        peer.sendall(b"more")
        self.assertFalse(c.closed())
        self.assertEqual(c.buf, b"more")
        c.close()
        peer.close()


class Listeners(unittest.TestCase):
    def test_ipv6_and_unix(self):
        import tempfile
        from harness import free_port, Proc, AGENT
        d = tempfile.mkdtemp()
        path = os.path.join(d, "agent.sock")
        port = free_port()
        for listen, addr in (("[::1]:%d" % port, ("::1", port)), ("unix:" + path, "unix:" + path)):
            ini = os.path.join(d, "a.ini")
            with open(ini, "w") as f:
                f.write("[agent]\nlisten = %s\nworkers = 1\n%s" % (listen, RULES))
            p = Proc([AGENT, "-c", ini], "agent")
            end = time.time() + 10
            while True:
                try:
                    c = spop.Client(addr)
                    break
                except OSError:
                    self.assertIsNone(p.p.poll(), p.output())
                    self.assertLess(time.time(), end)
                    time.sleep(0.05)
            c.handshake()
            self.assertEqual(c.decide({"key": "v"})["blocked"], False)
            c.close()
            self.assertEqual(p.stop(), 0, p.output())


class AllowList(unittest.TestCase):
    def test_peer_outside_allow_is_closed(self):
        agent = Agent(RULES, extra_agent="allow = 10.0.0.0/8, ::1/128\n")
        try:
            sk = socket.create_connection(agent.addr, timeout=5)
            sk.sendall(spop.hello())
            try:
                data = sk.recv(4096)
            except ConnectionResetError:
                data = b""
            self.assertEqual(data, b"", "a refused peer gets no AGENT-HELLO")
            sk.close()
            self.assertIsNone(agent.p.poll())
        finally:
            self.assertEqual(agent.stop(), 0, agent.output())

    def test_peer_inside_allow_is_served(self):
        agent = Agent(RULES, extra_agent="allow = 127.0.0.0/8\n")
        try:
            c = spop.Client(agent.addr)
            c.handshake()
            self.assertIs(c.decide({"key": "a"})["blocked"], False)
            c.close()
        finally:
            self.assertEqual(agent.stop(), 0, agent.output())


if __name__ == "__main__":
    unittest.main()
