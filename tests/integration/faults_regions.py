# SPDX-License-Identifier: Apache-2.0
"""The fault matrix's region rows (issue 46, item 3): failures at both
levels of one quota across regions, each measured against its allowance
(doc/design.md, "Regions", "What each failure may over- or under-admit").

The fleet is regions.py's: a global Redis behind a delay tap (replies
80 ms late), two regions each with its own Redis and two agents
(workers = 1), [global] interval its default (1 s: rounds come sooner
for a key that needs them). Two `scope = global` rules, `20/1s burst 10` (the issue's)
and `600/1m burst 20`, each with a hot key (paced at 4 times its rate), a
near-limit key (at its rate) and an under-limit key (at half of it), every
key sent from a client on each of the four agents. A fault is injected
while the clients run; every decision is recorded bracketed by its
NOTIFY's send and its ACK's read (fleet.LoadClient), so the worst excess
over b + r*T across the four agents (fleet.worst_window, rigorous) is real
whatever the machine's speed.

The faults: the global Redis stopped (SIGSTOP) 5 s, slow (its replies
400 ms late for 6 s), killed and restarted empty on its port; region 0
cut from it 5 s (a faults.Proxy in front of it for region 0's agents);
region 0's Redis stopped 5 s; region 0's claimer killed (SIGKILL).
test_faults_regions.py asserts each allowance and prints the table
(faults.row(): fault, allowance, worst excess, utilisation, degraded
decisions, warnings)."""
import re
import signal
import sys
import time

import fleet
import regions
import soak_check
from faults import LOADS, WARN_RE, Proxy, Result
from fleet import LoadClient, unique
from harness import Redis, wait_for

# (name, rate per s, rate as written, burst)
RULES = (("api", 20.0, "20/1s", 10), ("minute", 10.0, "600/1m", 20))
RULES_INI = "".join("[rule:%s]\nkey = key\nmatch = path ^/%s/\nrate = %s\nburst = %d\n"
                    "scope = global\n\n" % (n, n, rate, b) for n, _, rate, b in RULES)
REGIONS, PER_REGION = 2, 2
AGENTS = REGIONS * PER_REGION
DELAY = 0.08  # the global Redis' replies, late by this (a far region)
SHARE = 0.05  # regions.region_ini's [fallback] share (each agent's backstop)
INTERVAL = 1.0  # [global] interval: its default (region_ini sets none)
# After the global Redis answers again: a round's global timeout, an
# interval, a regional lease's ttl and the round trip (region_ini's
# settings; doc/design.md "Regions", "settling"): by then the backstop
# tokens are withdrawn and the agents' leases of them over.
SETTLE = 1.0 + INTERVAL + 1.0 + DELAY
CLEAR_RE = WARN_RE.pattern.replace("msg=warning", 'msg="warning cleared"')


class Fleet(regions.RegionFleet):
    """regions.RegionFleet with these rules; cut_region: that region's
    agents reach the global Redis through a faults.Proxy (self.proxy)."""

    def __init__(self, cut_region=None):
        super().__init__(regions=REGIONS, per_region=PER_REGION, delay=DELAY, rules=RULES_INI)
        self.cut_region = cut_region
        self.proxy = None

    def global_port(self, region):
        port = super().global_port(region)
        if region != self.cut_region:
            return port
        if self.proxy is None:
            self.proxy = Proxy(port)
        return self.proxy.port

    def start(self):
        try:
            super().start()
            # each region's claimer has made a round with the global Redis,
            # which counts both regions (the backstop and standing shares)
            if not wait_for(lambda: self.claimers() == REGIONS and all(
                    a.metric("spoa_ratelimit_regions") == REGIONS
                    for a in self.agents if a.metric("spoa_ratelimit_global_claimer") == 1),
                    timeout=30):
                raise AssertionError("no claimer per region seeing %d regions:\n%s"
                                     % (REGIONS, self.agents[0].output()[-2000:]))
        except BaseException:
            self.stop()
            raise
        return self

    def claimer(self, region):
        """The agent holding region's lease lock, or None."""
        for a in self.agents_of(region):
            if a.p.poll() is None and a.metric("spoa_ratelimit_global_claimer") == 1:
                return a
        return None

    def warnings(self):
        """{kind: agents that raised it}."""
        out = {}
        for a in self.agents:
            for k in set(WARN_RE.findall(a.output())):
                out[k] = out.get(k, 0) + 1
        return out

    def cleared(self):
        """{kind: agents that logged it cleared}."""
        out = {}
        for a in self.agents:
            for k in set(re.findall(CLEAR_RE, a.output())):
                out[k] = out.get(k, 0) + 1
        return out

    def restart_global(self):
        """Kill the global Redis (-9) and start an empty one on its port
        (the tap connects each new connection to that port)."""
        port = self.glob.port
        self.glob.kill()
        self.redises.remove(self.glob)
        self.glob = Redis(port)
        self.redises.append(self.glob)

    def stop(self):
        rcs = super().stop()
        if self.proxy:
            self.proxy.stop()
        return rcs


def clients(fl, seconds):
    """The paced clients: one per agent, rule and kind of key, named
    KEY/AGENT (faults.Result's convention)."""
    out, keys = [], {}
    for name, r, _, b in RULES:
        for kind, load in LOADS:
            key = unique("%s-%s" % (name, kind))
            keys[key] = (name, kind, b, r)
            for i, a in enumerate(fl.agents):
                out.append(LoadClient(a.addr, {"key": key, "path": "/%s/x" % name},
                                      [(seconds, "paced", load * r / AGENTS)],
                                      name="%s/%d" % (key, i), reconnect=True))
    return out, keys


def run(fault, seconds, inject, at=3.0, cut_region=None):
    """Start the fleet, run the clients for `seconds`, call inject(fleet,
    extra) `at` seconds in (the clients run in their threads); returns a
    faults.Result, its extra holding what inject measured, "cleared"
    ({kind: agents that cleared it}), "repaid" ({rule: fallback repaid})."""
    fl = Fleet(cut_region=cut_region).start()
    extra = {}
    try:
        cl, keys = clients(fl, seconds)
        with_switch = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)
        try:
            for c in cl:
                c.start()
            t0 = time.monotonic() + 0.1
            for c in cl:
                c.start_at(t0)
            extra["t0"], extra["clients"] = t0, cl
            if inject:
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                inject(fl, extra)
            for c in cl:
                c.join(seconds + 60)
        finally:
            sys.setswitchinterval(with_switch)
        recs = fleet.collect(cl)
        extra.pop("clients")
        extra["t_end"] = max(x.acked for x in recs)
        live = [a for a in fl.agents if a.p.poll() is None]
        extra["repaid"] = {n: sum(a.metric("spoa_ratelimit_fallback_repaid_total", rule=n) or 0
                                  for a in live) for n, _, _, _ in RULES}
        extra["backstop"] = sum(a.metric("spoa_ratelimit_global_backstop_tokens_total") or 0
                                for a in live)
        extra["cleared"] = fl.cleared()
        return Result(fault, recs, keys, fl.warnings(), extra)
    finally:
        fl.stop()


# ---- what a row measures ----------------------------------------------------

def region_of_rec(x):
    """The region of the agent that decided record x (clients KEY/AGENT)."""
    return int(x.client.rsplit("/", 1)[1]) // PER_REGION


def recs_of(res, key, region=None):
    """key's records (of one region's agents: region)."""
    out = [x for x in res.recs if x.client.startswith(key + "/")]
    if region is not None:
        out = [x for x in out if region_of_rec(x) == region]
    return out


def admitted_in(res, key, t1, t2, region=None):
    """Admissions of key decided surely inside [t1, t2]: sent after t1,
    acknowledged before t2."""
    return sum(1 for x in recs_of(res, key, region) if x.allowed and x.sent >= t1
               and x.acked <= t2)


def decided_in(res, t1, t2, region=None):
    """Decisions (any key) of region's agents sent and answered in [t1, t2]."""
    return sum(1 for x in res.recs if x.sent >= t1 and x.acked <= t2 and (
        region is None or region_of_rec(x) == region))


def excess_outside(res, key, t1, t2, region=None):
    """key's worst excess over b + r*T among the intervals that overlap no
    part of [t1, t2] (each decision bracketed: rigorous)."""
    _, _, b, r = res.keys[key]
    mine = recs_of(res, key, region)
    worst = float("-inf")
    for a, z in soak_check.segments(res.extra["t0"], res.extra["t_end"], [(t1, t2)]):
        part = [x for x in mine if x.sent >= a and x.acked <= z]
        worst = max(worst, fleet.worst_window(part, b, r, True)[0])
    return worst


def excess_of(res, key, region):
    """key's worst excess over b + r*T counting one region's agents only."""
    _, _, b, r = res.keys[key]
    return fleet.worst_window(recs_of(res, key, region), b, r, True)[0]


def p99_ms(res, t1=None, t2=None):
    lat = sorted((x.acked - x.sent) * 1000 for x in res.recs
                 if (t1 is None or x.sent >= t1) and (t2 is None or x.acked <= t2))
    return lat[int(0.99 * (len(lat) - 1))] if lat else 0.0


def hot_keys(res):
    return [k for k, v in sorted(res.keys.items()) if v[1] == "hot"]


# ---- the faults -------------------------------------------------------------

def healthy(seconds=8.0):
    return run("regions: healthy", seconds, None)


def global_down(seconds=13.0, down=5.0, at=3.0):
    """The global Redis stopped (SIGSTOP) `down` s. extra["outage"]: (stopped,
    continued)."""
    def inject(fl, extra):
        t = time.monotonic()
        fl.glob.kill_sig(signal.SIGSTOP)
        try:
            time.sleep(down)
        finally:
            fl.glob.kill_sig(signal.SIGCONT)
        extra["outage"] = (t, time.monotonic())
    return run("regions: global Redis stopped %.0f s" % down, seconds, inject, at=at)


def global_slow(seconds=14.0, delay=0.4, slow_s=6.0):
    """The global Redis' replies `delay` s late (instead of 80 ms) for
    slow_s s. extra["slow"]: (slowed, back to 80 ms)."""
    def inject(fl, extra):
        t = time.monotonic()
        fl.tap.set_delay(delay)
        time.sleep(slow_s)
        fl.tap.set_delay(DELAY)
        extra["slow"] = (t, time.monotonic())
    return run("regions: global Redis %.0f ms late %.0f s" % (1000 * delay, slow_s), seconds,
               inject)


def global_restart(seconds=11.0, at=4.0):
    """The global Redis killed (-9) and restarted empty on its port.
    extra["gap"]: (killed, both regions' claimers counted by the new one)."""
    def inject(fl, extra):
        t = time.monotonic()
        fl.restart_global()
        # (the global set of regions: each claimer's round adds its region)
        wait_for(lambda: fl.glob.cli("ZCARD", "rl:g:regions") == str(REGIONS), 20, step=0.02)
        extra["gap"] = (t, time.monotonic())
        # the loss named: every agent's check of the global epoch key
        # (its connection back, then every [redis] epoch_check)
        wait_for(lambda: all(a.metric("spoa_ratelimit_warning", kind="global_state_lost") == 1
                             for a in fl.agents), 20, step=0.02)
        extra["named_s"] = time.monotonic() - t
    return run("regions: global Redis kill -9, restarted empty", seconds, inject, at=at)


def region_cut(seconds=13.0, cut_s=5.0, at=3.0):
    """Region 0's agents cut from the global Redis (their proxy) cut_s s;
    region 1 keeps it. extra["cut"]: (cut, healed); extra["back"]: region
    0's claimer answered by the global Redis again."""
    def inject(fl, extra):
        t = time.monotonic()
        fl.proxy.cut()
        time.sleep(cut_s)
        fl.proxy.heal()
        extra["cut"] = (t, time.monotonic())
        c = fl.claimer(0)
        base = c.metric("spoa_ratelimit_global_tokens_granted_total") if c else 0
        wait_for(lambda: all(a.metric("spoa_ratelimit_global_up") == 1
                             for a in fl.agents_of(0)), 20, step=0.02)
        extra["back"] = time.monotonic()
        extra["granted_after"] = base
    return run("regions: region 0 cut from the global Redis %.0f s" % cut_s, seconds, inject,
               at=at, cut_region=0)


def regional_down(seconds=13.0, down=5.0, at=3.0):
    """Region 0's Redis stopped (SIGSTOP) `down` s. extra["outage"]."""
    def inject(fl, extra):
        t = time.monotonic()
        fl.regional[0].kill_sig(signal.SIGSTOP)
        try:
            time.sleep(down)
        finally:
            fl.regional[0].kill_sig(signal.SIGCONT)
        extra["outage"] = (t, time.monotonic())
    return run("regions: region 0's Redis stopped %.0f s" % down, seconds, inject, at=at)


def claimer_killed(seconds=11.0, at=3.0):
    """Region 0's claimer killed (SIGKILL); its clients stop first (as
    HAProxy's requests go to the other agent). extra: "victim" (its index),
    "killed", "takeover" (the other agent of region 0 holds the lock; None:
    never within 30 s)."""
    def inject(fl, extra):
        c = fl.claimer(0)
        assert c is not None, "region 0 has no claimer"
        idx = fl.agents.index(c)
        mine = [x for x in extra["clients"] if x.name_.endswith("/%d" % idx)]
        for x in mine:
            x.stop()
        for x in mine:
            x.join(10)
        c.kill_sig(signal.SIGKILL)
        c.p.wait(10)
        t = time.monotonic()
        other = [a for a in fl.agents_of(0) if a is not c][0]
        ok = wait_for(lambda: other.metric("spoa_ratelimit_global_claimer") == 1, 30,
                      step=0.02)
        extra.update(victim=idx, killed=t, takeover=time.monotonic() if ok else None)
    return run("regions: region 0's claimer kill -9", seconds, inject, at=at)
