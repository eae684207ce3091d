"""Processes for the integration tests: the agent, redis-server and haproxy,
each on a free loopback port, stopped at the end whatever happens."""
import os
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

_used_ports = set()


def free_port():
    """A loopback TCP port nobody listens on, not handed out before."""
    for _ in range(200):
        p = random.randint(20000, 60000)
        if p in _used_ports:
            continue
        with socket.socket() as sk:
            try:
                sk.bind(("127.0.0.1", p))
            except OSError:
                continue
        _used_ports.add(p)
        return p
    raise RuntimeError("no free port")


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
    """The agent with an INI whose [agent] section gets listen/stats ports."""

    def __init__(self, ini, workers=2, stats=True, extra_agent="", wait=True):
        self.port = free_port()
        self.stats_port = free_port() if stats else None
        self.dir = tempfile.mkdtemp(prefix="spoa-test-")
        self.ini = os.path.join(self.dir, "agent.ini")
        head = "[agent]\nlisten = 127.0.0.1:%d\nworkers = %d\n" % (self.port, workers)
        if stats:
            head += "stats = 127.0.0.1:%d\n" % self.stats_port
        head += extra_agent
        with open(self.ini, "w") as f:
            f.write(head + ini)
        super().__init__([AGENT, "-c", self.ini], "agent")
        if wait:
            wait_port(self.port, proc=self.p)
            if stats:
                wait_port(self.stats_port, proc=self.p)

    @property
    def addr(self):
        return ("127.0.0.1", self.port)

    def rewrite(self, ini, extra_agent=""):
        head = "[agent]\nlisten = 127.0.0.1:%d\nworkers = 2\n" % self.port
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

    def metric(self, name, **labels):
        """Value of one sample, or None."""
        want = name
        if labels:
            want += "{" + ",".join('%s="%s"' % kv for kv in labels.items()) + "}"
        for line in self.metrics().splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return None

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        rc = super().stop(sig, timeout)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


class Redis(Proc):
    def __init__(self, port=None):
        self.port = port or free_port()
        super().__init__(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--protected-mode", "no"],
                         "redis")
        wait_port(self.port, proc=self.p)

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port)] + list(args),
                              capture_output=True, text=True, timeout=10).stdout.strip()


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
        text = text.replace("127.0.0.1:12345", "127.0.0.1:%d" % agent_port)
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
