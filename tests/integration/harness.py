# SPDX-License-Identifier: Apache-2.0
"""Processes for the integration tests: the agent, redis-server and haproxy,
each on a free loopback port, stopped at the end whatever happens."""
import errno
import fcntl
import os
import re
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
AGENT = os.environ.get("AGENT", os.path.join(TOP, "build", "src", "spoa-ratelimit"))
BENCH = os.environ.get("BENCH", os.path.join(TOP, "build", "src", "spoa-bench"))

# ---- ports -------------------------------------------------------------------
#
# Every server under test gets a port chosen here and binds it itself a moment
# later. Two things could take the port in that moment, and each is ruled out:
# - the kernel, handing it to an outgoing connection (redis-cli, the agent's
#   Redis link, HAProxy's SPOP connections) as its local port: ports are chosen
#   outside /proc/sys/net/ipv4/ip_local_port_range, which the kernel never uses
#   for that;
# - another test run on this machine (CI and developers share it): each port
#   handed out is locked (flock on /tmp/spoa-test-ports/PORT) for as long as this
#   process lives, and a locked port is never handed out by another run.
# What remains (a foreign program binding the port in between) is caught by
# the servers' start-up: the agent and redis-server are started again on new
# ports when they exit saying the port is in use (start_retrying below).

PORT_LOCK_DIR = "/tmp/spoa-test-ports"
_held_ports = {}  # port -> open lock file, kept for the life of the process
# The ports the shipped kit (haproxy/) names, which the tests replace as text
# (kit_agents): a port handed out equal to one of them would be rewritten too
# (an HTTP port of 12345 became the agent's, and HAProxy could not bind it).
KIT_PORTS = frozenset((12345, 12346))


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _port_ranges(span):
    """Inclusive (first, last) ranges from which p and p + span both lie
    outside the ephemeral range (and p + span <= 65535)."""
    lo, hi = _ephemeral_range()
    out = []
    for first, last in ((10000, lo - 1), (hi + 1, 65535)):
        last -= span
        if last >= first:
            out.append((first, last))
    return out


def _bindable(p):
    """Nothing bound to p on loopback, TIME_WAIT leftovers included (no
    SO_REUSEADDR here, unlike the servers: stricter than they are)."""
    for fam, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            sk = socket.socket(fam, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        with sk:
            try:
                sk.bind((host, p))
            except OSError as e:
                if fam == socket.AF_INET6 and e.errno == errno.EADDRNOTAVAIL:
                    continue
                return False
    return True


def _lock_port(p):
    os.makedirs(PORT_LOCK_DIR, exist_ok=True)
    f = open(os.path.join(PORT_LOCK_DIR, str(p)), "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return False
    _held_ports[p] = f
    return True


def free_port(plus=()):
    """A loopback TCP port nobody listens on, outside the ephemeral range,
    not handed out before by this run or any other running one. plus: offsets
    whose ports must be free too and are reserved with it (a Redis Cluster
    node also binds its bus on port + 10000)."""
    span = max(plus, default=0)
    ranges = _port_ranges(span)
    if not ranges:
        raise RuntimeError("no port range outside the ephemeral one for span %d" % span)
    for _ in range(500):
        first, last = random.choice(ranges)
        p = random.randint(first, last)
        group = [p] + [p + d for d in plus]
        if any(q in _held_ports or q in KIT_PORTS for q in group):
            continue
        locked = []
        for q in group:
            if not _lock_port(q):
                break
            locked.append(q)
        if len(locked) == len(group) and all(_bindable(q) for q in group):
            return p
        # the ones locked but not usable stay locked: never tried again
    raise RuntimeError("no free port")


class PortInUse(RuntimeError):
    """A server exited at start because its port was taken."""


def wait_port(port, host="127.0.0.1", timeout=10.0, proc=None):
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("process exited with %s" % proc.returncode)
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("port %d not listening after %.0fs" % (port, timeout))


class Proc:
    def __init__(self, argv, logname, cwd=None, env=None):
        self.log = tempfile.NamedTemporaryFile(prefix=logname + "-", suffix=".log", delete=False)
        self.argv = argv
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=cwd,
                                  env=env, start_new_session=True)

    def output(self):
        with open(self.log.name, "rb") as f:
            return f.read().decode(errors="replace")

    def kill_sig(self, sig):
        if self.p.poll() is None:
            self.p.send_signal(sig)

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


class Agent(Proc):
    """The agent with an INI whose [agent] section gets listen/stats ports.
    stop() checks the exit code: the agent must exit 0 on SIGTERM, and under
    ASan (run-tests sets exitcode=23) a leak found at exit fails the test."""

    def __init__(self, ini, workers=2, stats=True, extra_agent="", wait=True, env=None):
        """env: the agent's environment (None: this process's)."""
        self.workers = workers
        self.extra_agent = extra_agent
        self.dir = tempfile.mkdtemp(prefix="spoa-test-")
        self.ini = os.path.join(self.dir, "agent.ini")
        for attempt in range(3):
            self.port = free_port()
            self.stats_port = free_port() if stats else None
            self.rewrite(ini, extra_agent)
            super().__init__([AGENT, "-c", self.ini], "agent", env=env)
            if not wait:
                return
            try:
                wait_port(self.port, proc=self.p)
                if stats:
                    wait_port(self.stats_port, proc=self.p)
                return
            except RuntimeError:
                self.kill()
                if "in use" not in self.output() or attempt == 2:
                    raise RuntimeError("agent did not start:\n" + self.output()[-3000:])

    @property
    def addr(self):
        return ("127.0.0.1", self.port)

    def rewrite(self, ini, extra_agent=None):
        """Write the INI (for a reload: the same ports and workers).
        extra_agent: more [agent] lines (default: those given at start)."""
        if extra_agent is None:
            extra_agent = self.extra_agent
        head = "[agent]\nlisten = 127.0.0.1:%d\nworkers = %d\n" % (self.port, self.workers)
        if self.stats_port:
            head += "stats = 127.0.0.1:%d\n" % self.stats_port
        with open(self.ini, "w") as f:
            f.write(head + extra_agent + ini)

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.stats_port,
                                    timeout=5) as r:
            return r.read().decode()

    def get(self, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.stats_port, path),
                                    timeout=5) as r:
            return r.read().decode()

    def post(self, path):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.stats_port, path),
                                     data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read().decode()

    def metric(self, name, **labels):
        """Value of one sample, or None."""
        want = name
        if labels:
            want += "{" + ",".join('%s="%s"' % kv for kv in labels.items()) + "}"
        for line in self.metrics().splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return None

    def stop(self, sig=signal.SIGTERM, timeout=10.0, check=True):
        """Stop with sig (SIGTERM: the agent answers what is in flight and
        exits 0 within 5 s). check: raise unless the exit code is 0 (also
        when the agent had already exited, e.g. crashed, before this call)."""
        rc = super().stop(sig, timeout)
        shutil.rmtree(self.dir, ignore_errors=True)
        if check and rc != 0:
            raise AssertionError("agent exit code %s (23: ASan report; negative: killed by "
                                 "that signal, -9 after not stopping within %.0f s):\n%s"
                                 % (rc, timeout, self.output()[-4000:]))
        return rc


class Redis(Proc):
    """redis-server on loopback, no persistence. port: a given port (to
    restart a Redis where it was); by default a free one, and another one
    if that is taken at start."""

    def __init__(self, port=None, args=()):
        for attempt in range(3):
            self.port = port or free_port()
            super().__init__(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--protected-mode", "no"]
                             + list(args), "redis")
            try:
                wait_port(self.port, proc=self.p)
                return
            except RuntimeError:
                self.kill()
                if port or "in use" not in self.output() or attempt == 2:
                    raise RuntimeError("redis-server did not start:\n" + self.output()[-3000:])

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port)] + list(args),
                              capture_output=True, text=True, timeout=10).stdout.strip()


def kit_agents(cfg, ports):
    """The kit's haproxy.cfg with its agents' addresses (agent1 127.0.0.1:12345,
    agent2 127.0.0.1:12346) changed: `ports` is one port for both server lines
    (one agent behind two names) or a (port1, port2) pair."""
    p1, p2 = (ports, ports) if isinstance(ports, int) else ports
    assert "127.0.0.1:12346" in cfg, "the kit has no second agent at 127.0.0.1:12346"
    cfg = cfg.replace("127.0.0.1:12345", "127.0.0.1:%d" % p1)
    return cfg.replace("127.0.0.1:12346", "127.0.0.1:%d" % p2)


def kit_unprivileged(cfg):
    """The kit's haproxy.cfg without what only an installed HAProxy wants: the
    chroot, the user/group switch and the stats socket in /run/haproxy (tests
    run side by side, and maybe not as root)."""
    new = re.sub(r"\n    (chroot|user|group|stats socket /run/haproxy/)[^\n]*", "", cfg)
    assert new != cfg, "the kit has no chroot/user/stats socket lines"
    return new


class HAProxy(Proc):
    """haproxy with the shipped haproxy/ files copied and only the ports changed.
    binary: the haproxy to run (default: the one on PATH, Debian's). files: {name:
    text} written over the copies (a test's own map files)."""

    def __init__(self, agent_port, http_port=None, stats_port=9145, binary="haproxy",
                 files=None):
        self.http_port = http_port or free_port()
        self.dir = tempfile.mkdtemp(prefix="haproxy-test-")
        src = os.path.join(TOP, "haproxy")
        for name in os.listdir(src):
            shutil.copy(os.path.join(src, name), self.dir)
        for name, text in (files or {}).items():
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)
        cfg = os.path.join(self.dir, "haproxy.cfg")
        with open(cfg) as f:
            text = f.read()
        text = text.replace("127.0.0.1:8080", "127.0.0.1:%d" % self.http_port)
        text = kit_agents(text, agent_port)
        text = kit_unprivileged(text)
        with open(cfg, "w") as f:
            f.write(text)
        # cwd: HAProxy 2.6 opens map files relative to its working directory
        super().__init__([binary, "-db", "-f", cfg], "haproxy", cwd=self.dir)
        wait_port(self.http_port, proc=self.p)

    def request(self, path="/", headers=None, method="GET"):
        """(status, headers dict lower-cased, body)."""
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.http_port, path),
                                     headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        rc = super().stop(sig, timeout)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


# Poll pred every step seconds until it holds or timeout passes: its last value.
def wait_for(pred, timeout=10.0, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def stop_cleanly(test, agent, timeout=8):
    """test.addCleanup: SIGTERM agent, which must then exit 0 (its last output
    in the failure otherwise)."""
    def stop():
        rc = agent.stop(timeout=timeout)
        if rc != 0:
            raise AssertionError("agent exit %s after SIGTERM:\n%s" % (rc, agent.output()[-3000:]))
    test.addCleanup(stop)


def rss_kb(pid):
    """The process' resident set, in kB (0 when /proc says nothing)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def raw_http(port, method, path, timeout=5):
    """What one read gets back for a bare HTTP/1.0 request to 127.0.0.1:port:
    b"" when the listener closes without answering (a refused peer)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(("%s %s HTTP/1.0\r\n\r\n" % (method, path)).encode())
    except OSError:
        pass  # closed before the request went out
    data = b""
    try:
        data = s.recv(4096)
    except ConnectionResetError:
        pass
    s.close()
    return data
