# SPDX-License-Identifier: Apache-2.0
"""Steady HTTP traffic through the kit for the agent-down tests: `clients`
threads, each on its own keep-alive http.client connection, together paced at
about `rate` requests a second. Every request is recorded as (start time,
latency in seconds, decided): decided when the agent answered (the kit then
sets no `RateLimit-Status: unavailable`), so a window of the run can be read
afterwards: share decided, latency percentiles.

Also: HAProxy's CPU use from /proc/PID/stat, and a stopped process always
continued (SIGCONT) by whoever stopped it, test failure or not."""
import contextlib
import http.client
import os
import re
import signal
import threading
import time


class Load:
    def __init__(self, port, clients=16, rate=300.0, path="/api", headers=None):
        self.port = port
        self.clients = clients
        self.interval = clients / float(rate)  # each client's pace
        self.path = path
        self.headers = dict(headers or {})
        self.records = []    # (start, latency, decided, status, path)
        self.failures = 0    # connection errors (a new connection is made)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                        for i in range(clients)]
        for t in self.threads:
            t.start()

    def _client(self, i):
        conn = None
        seq = 0
        # spread the clients over one interval
        next_at = time.monotonic() + self.interval * i / self.clients
        while not self.stopping.is_set():
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            next_at = max(next_at + self.interval, time.monotonic() - self.interval)
            start = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                seq += 1
                path = "%s/%d/%d" % (self.path, i, seq)
                conn.request("GET", path, headers=self.headers)
                r = conn.getresponse()
                r.read()
                decided = r.getheader("RateLimit-Status") != "unavailable"
                rec = (start, time.monotonic() - start, decided, r.status, path)
            except (OSError, http.client.HTTPException):
                if conn is not None:
                    conn.close()
                conn = None
                with self.lock:
                    self.failures += 1
                continue
            with self.lock:
                self.records.append(rec)
        if conn is not None:
            conn.close()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(10)

    def window(self, start, end):
        """The requests started in [start, end) (time.monotonic())."""
        with self.lock:
            return [r for r in self.records if start <= r[0] < end]


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))]


def haproxy_times(log):
    """{path: Ta}: the total active time (ms) HAProxy logged for each request,
    from the kit's log-format (%TR/%Tw/%Tc/%Tr/%Ta %ST ... %{+Q}r). Unlike the
    clients' own clock it leaves out their threads' scheduling."""
    return {m.group(2): int(m.group(1)) for m in
            re.finditer(r" -?\d+/-?\d+/-?\d+/-?\d+/(\d+) \d{3} .*?\"GET (\S+) HTTP", log)}


def summary(records, times=None):
    """(count, share decided, p50 ms, p99 ms): the clients' latencies, or
    HAProxy's (times, from haproxy_times) for the requests it logged."""
    if times is None:
        lat = [r[1] * 1000 for r in records]
    else:
        lat = [times[r[4]] for r in records if r[4] in times]
    decided = sum(1 for r in records if r[2])
    return (len(records), decided / float(len(records)) if records else 0.0,
            percentile(lat, 50), percentile(lat, 99))


def cpu_seconds(pid):
    """utime + stime of every thread of pid, in seconds (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def cpu_share(pid, seconds):
    """Cores pid used over the next `seconds` (wall clock)."""
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


@contextlib.contextmanager
def stopped(pid):
    """SIGSTOP pid for the with-block; SIGCONT on the way out, whatever happens."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
