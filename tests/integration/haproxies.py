# SPDX-License-Identifier: Apache-2.0
"""Every HAProxy the HAProxy tests run against, and the kit started under each.

Found: the `haproxy` on PATH (Debian 12's is 2.6), and the first HAProxy 3.1 or
later among `$HAPROXY3` (a path), the `haproxy` on PATH when its `-v` says 3.1+,
and ../shared/haproxy-3.4/haproxy beside the repository (where our CI clones
it); plus any paths listed in HAPROXIES (colon-separated). A test class written
once becomes one class per HAProxy found, named after its version
(ShippedKit_2_6_12, ShippedKit_3_4_0).

A plain clone usually has no 3.1+ binary: its 3.x tests are then left out with
one line saying how to run them, and the run passes. REQUIRE_HAPROXY3=1 (set
by .ci/run) makes them mandatory: without a 3.1+ binary a failing test says
where it was looked for. A missing `haproxy` on PATH gives skipped classes
(run-tests installs it, and counts a skip as a failure).
`python3 haproxies.py [--short]` prints the versions found."""
import csv
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from harness import TOP, HAProxy, Proc, free_port, kit_agents, kit_unprivileged, wait_port

# Where our CI keeps an HAProxy 3.4 build: beside the checkout, not in it.
SHARED_34 = os.path.normpath(os.path.join(TOP, "..", "shared", "haproxy-3.4", "haproxy"))
HOW_TO_RUN_3X = ("HAProxy 3.1+ tests skipped: no HAProxy 3.1 or later found "
                 "(looked at $HAPROXY3, haproxy on PATH, %s); "
                 "run them with HAPROXY3=/path/to/haproxy-3.x ./run-tests" % SHARED_34)


class Build:
    def __init__(self, path, version):
        self.path = path
        self.version = version                    # (3, 4, 0)
        self.text = ".".join(map(str, version))   # "3.4.0"
        self.label = "_".join(map(str, version))  # "3_4_0"

    def atleast(self, major, minor):
        return self.version[:2] >= (major, minor)

    def __repr__(self):
        return "HAProxy %s (%s)" % (self.text, self.path)


def version_of(path):
    out = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"version (\d+)\.(\d+)(?:\.(\d+))?", out)
    if not m:
        raise RuntimeError("%s -v: no version in %r" % (path, out[:200]))
    return tuple(int(x or 0) for x in m.groups())


def _usable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def require_3x():
    return os.environ.get("REQUIRE_HAPROXY3") == "1"


@functools.lru_cache(maxsize=None)
def survey():
    """([Build], [(label, why a wanted HAProxy is missing)], 3.x note or None):
    each binary once. The note says why no 3.1+ build is under test."""
    builds, missing, seen = [], [], set()

    def add(path):
        real = os.path.realpath(path)
        if real in seen:
            return None
        seen.add(real)
        b = Build(path, version_of(path))
        builds.append(b)
        return b

    on_path = shutil.which("haproxy")
    if _usable(on_path):
        add(on_path)
    else:
        missing.append(("debian", "haproxy not found on PATH (Debian package haproxy)"))
    note = None
    if not any(b.atleast(3, 1) for b in builds):
        for path in (os.environ.get("HAPROXY3"), on_path, SHARED_34):
            if _usable(path) and version_of(path)[:2] >= (3, 1):
                add(path)
                break
        else:
            note = HOW_TO_RUN_3X
            if os.environ.get("HAPROXY3"):
                note += " ($HAPROXY3=%s is not an executable HAProxy 3.1+)" % (
                    os.environ["HAPROXY3"])
    for i, p in enumerate(os.environ.get("HAPROXIES", "").split(":")):
        if p and _usable(p):
            add(p)
        elif p:
            missing.append(("extra_%d" % i, "HAPROXIES entry %s not found" % p))
    return builds, missing, note


def describe():
    builds, missing, note = survey()
    line = "HAProxy versions under test: " + (", ".join(map(repr, builds)) or "none")
    for _, why in missing:
        line += "\n  skipped: " + why
    if note:
        line += "\n  " + note + (" [REQUIRE_HAPROXY3=1: this fails the run]"
                                  if require_3x() else "")
    return line


_announced = []


class _No3x(unittest.TestCase):
    """REQUIRE_HAPROXY3=1 and no HAProxy 3.1+ found: fails, saying where it looked."""

    def test_haproxy_3x_present(self):
        self.fail(survey()[2])


def per_haproxy(base, namespace):
    """Put into `namespace` one unittest class per HAProxy found, from the mixin
    `base` (whose tests read self.build), and a skipped one per missing HAProxy.
    A missing 3.1+ build fails the run once under REQUIRE_HAPROXY3=1 and is
    otherwise left out, with the line describe() prints."""
    if not _announced:
        _announced.append(True)
        print(describe(), file=sys.stderr)
        if survey()[2] and require_3x():
            namespace["HAProxy3Required"] = type("HAProxy3Required", (_No3x,),
                                                 {"__module__": namespace["__name__"]})
    builds, missing, _ = survey()
    for b in builds:
        if getattr(base, "min_version", None) and not b.atleast(*base.min_version):
            continue
        name = "%s_%s" % (base.__name__, b.label)
        namespace[name] = type(name, (base, unittest.TestCase),
                               {"build": b, "__module__": namespace["__name__"]})
    for label, why in missing:
        name = "%s_%s_missing" % (base.__name__, label)
        cls = type(name, (base, unittest.TestCase), {"build": None,
                                                     "__module__": namespace["__name__"]})
        namespace[name] = unittest.skip(why)(cls)


# ---- the kit, with the edits a test asks for -------------------------------

def backend_first(cfg):
    """Move `backend spoe-ratelimit` (the last section of the kit) above the frontend."""
    i = cfg.index("backend spoe-ratelimit")
    backend = cfg[i:].rstrip("\n") + "\n\n"
    cfg = cfg[:i].rstrip("\n") + "\n"
    j = cfg.index("frontend www")
    return cfg[:j] + backend + cfg[j:]


def plain_mode_tcp(cfg):
    """The kit as it was before 3.1 support: `mode tcp` whatever the version."""
    new = re.sub(r"\.if version_atleast\(3\.1\)\n\s*mode spop\n\.else\n(\s*mode tcp\n)\.endif\n",
                 r"\1", cfg)
    assert new != cfg, "the kit's backend has no version_atleast(3.1) block"
    return new


def spoe_processing(timeout):
    def edit(spoe):
        new = re.sub(r"timeout processing \S+", "timeout processing " + timeout, spoe)
        assert new != spoe
        return new
    return edit


def check_config(build, cfg_edits=(), spoe_edits=()):
    """`haproxy -c -dW` (warnings are errors) on an edited copy of the kit:
    (exit code, output)."""
    d = tempfile.mkdtemp(prefix="haproxy-check-")
    try:
        _copy_kit(d, cfg_edits, spoe_edits)
        p = subprocess.run([build.path, "-c", "-dW", "-f", "haproxy.cfg"], cwd=d,
                           capture_output=True, text=True, timeout=30)
        return p.returncode, p.stdout + p.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _copy_kit(d, cfg_edits, spoe_edits, ports=()):
    src = os.path.join(TOP, "haproxy")
    for name in os.listdir(src):
        shutil.copy(os.path.join(src, name), d)
    for name, edits in (("haproxy.cfg", cfg_edits), ("spoe-ratelimit.conf", spoe_edits)):
        path = os.path.join(d, name)
        with open(path) as f:
            text = f.read()
        for old, new in ports:
            text = text.replace(old, new)
        for e in edits:
            text = e(text)
        with open(path, "w") as f:
            f.write(text)


class KitHAProxy(HAProxy):
    """HAProxy `build` running the shipped kit: the ports changed (HTTP on a free
    port; the agents at agent_port: one port for both server lines, or a pair),
    without chroot/user (harness.kit_unprivileged), then the given edits, and an
    admin socket (`show stat`) in the global section. files: {name: text}
    written over the copies (a test's own map files). master_worker: run it as
    `-W` (a master process and its worker) so that reload() can reload it the
    way systemd does, with SIGUSR2 to the master; the admin socket then exposes
    the listeners, so the new worker takes them over without a gap."""

    def __init__(self, build, agent_port, cfg_edits=(), spoe_edits=(), files=None,
                 master_worker=False):
        self.build = build
        self.http_port = free_port()
        self.dir = tempfile.mkdtemp(prefix="haproxy-test-")
        self.admin = os.path.join(self.dir, "admin.sock")
        expose = " expose-fd listeners" if master_worker else ""

        def admin_socket(cfg):
            return cfg.replace("global\n", "global\n    stats socket %s level admin%s\n"
                               % (self.admin, expose), 1)
        _copy_kit(self.dir, [lambda c: kit_agents(c, agent_port), kit_unprivileged]
                  + list(cfg_edits) + [admin_socket], spoe_edits,
                  ports=(("127.0.0.1:8080", "127.0.0.1:%d" % self.http_port),))
        for name, text in (files or {}).items():
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)
        # cwd: HAProxy 2.6 opens map files relative to its working directory
        argv = [build.path] + (["-W"] if master_worker else []) + ["-db", "-f", "haproxy.cfg"]
        Proc.__init__(self, argv, "haproxy-" + build.text, cwd=self.dir)
        wait_port(self.http_port, proc=self.p)

    def workers(self):
        """Pids of the master's children (master_worker), from /proc."""
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == self.p.pid:
                out.append(int(d))
        return sorted(out)

    def reload(self, timeout=30.0):
        """master_worker: SIGUSR2 to the master, then wait until a new worker
        runs and the HTTP port answers. Returns (old workers, new workers)."""
        old = set(self.workers())
        self.p.send_signal(signal.SIGUSR2)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.p.poll() is not None:
                raise RuntimeError("haproxy master exited with %s during a reload"
                                   % self.p.returncode)
            new = set(self.workers()) - old
            if new:
                wait_port(self.http_port, proc=self.p, timeout=max(1.0, end - time.monotonic()))
                return sorted(old), sorted(new)
            time.sleep(0.05)
        raise RuntimeError("no new haproxy worker %.0f s after SIGUSR2" % timeout)

    def admin_cmd(self, cmd):
        """One command on the admin socket: its whole answer, as text."""
        with socket.socket(socket.AF_UNIX) as sk:
            sk.settimeout(5)
            sk.connect(self.admin)
            sk.sendall(cmd.encode() + b"\n")
            out = b""
            while True:
                data = sk.recv(65536)
                if not data:
                    break
                out += data
        return out.decode()

    def show_info(self):
        """`show info` as a dict (Name: value)."""
        info = {}
        for line in self.admin_cmd("show info").splitlines():
            name, sep, value = line.partition(":")
            if sep:
                info[name.strip()] = value.strip()
        return info

    def show_stat(self):
        """`show stat` as a list of dicts (pxname, svname, status, check_status...)."""
        lines = self.admin_cmd("show stat").splitlines()
        head = lines[0].lstrip("# ").split(",")
        return [dict(zip(head, row)) for row in csv.reader(lines[1:]) if row]

    def server(self, proxy, server):
        for row in self.show_stat():
            if row["pxname"] == proxy and row["svname"] == server:
                return row
        return None


if __name__ == "__main__":
    if sys.argv[1:] == ["--short"]:  # "2.6.12, 3.4.0", for run-tests' summary
        builds, _, note = survey()
        print((", ".join(b.text for b in builds) or "none") + ("; 3.1+ not found" if note else ""))
    else:
        print(describe())
