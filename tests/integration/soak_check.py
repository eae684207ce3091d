# SPDX-License-Identifier: Apache-2.0
"""The soak's checks of the limits, on what its HTTP client saw (soak.py).

Each request of a bound-check key is recorded with `sent` (just before the
request was written) and `acked` (just after its response was read): the agent
decided somewhere in [sent, acked], so a run of admissions i..j happened
within [min sent, acked[j]], which is at least as long as their real span.
Counting them against b + r*T with that T (fleet.worst_window, rigorous) can
therefore not fail for an excess that did not happen, whatever the delays of
HAProxy, the machine or this client, and needs no slack. The price: it sees
an excess only when it is larger than what those delays hide."""
import fleet


class Rec:
    """One response to the bound-check client. rl: its RateLimit-Status
    header ('' when absent, 'degraded' when the fallback decided,
    'unavailable' when HAProxy got no answer from any agent and let the request
    pass: that one is HAProxy failing open, not the fleet admitting)."""
    __slots__ = ("sent", "acked", "status", "rl")

    def __init__(self, sent, acked, status, rl):
        self.sent, self.acked, self.status, self.rl = sent, acked, status, rl

    @property
    def allowed(self):
        return self.status == 200 and self.rl != "unavailable"


def merge(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def segments(t_begin, t_end, excluded):
    """The parts of [t_begin, t_end] outside the excluded intervals."""
    out, at = [], t_begin
    for a, b in merge(excluded):
        if a > at:
            out.append((at, min(a, t_end)))
        at = max(at, b)
    if at < t_end:
        out.append((at, t_end))
    return [(a, b) for a, b in out if b > a]


def up_bound(records, b, r, excluded, t_begin, t_end):
    """The bound b + r*T over every window that overlaps no excluded
    interval: Redis down or stalled (and the recovery after it), and the
    bracket of every answer the fallback gave while Redis was up (a Redis call
    that timed out; the fallback's admissions are not Redis' to bound).
    Returns (worst excess, admitted in that window, its T, segments checked,
    seconds covered)."""
    excluded = list(excluded) + [(x.sent, x.acked) for x in records if x.rl == "degraded"]
    worst = (float("-inf"), 0, 0.0)
    segs = segments(t_begin, t_end, excluded)
    for a, z in segs:
        recs = [x for x in records if x.sent >= a and x.acked <= z]
        ex, count, T, _, _ = fleet.worst_window(recs, b, r, True)
        if ex > worst[0]:
            worst = (ex, count, T)
    return worst + (len(segs), sum(z - a for a, z in segs))


def down_bound(records, t0, t1, b, r, burst_b, share, agents):
    """Admissions decided while Redis could give no token: answers whose
    request was written after t0 (Redis killed, or stopped) and whose response
    was read before t1 (Redis about to be restarted, or continued). Each of
    them came from a lease held at t0, or from an agent's backstop bucket.
    Redis keeps t + sum(h) <= b, so the leases held at t0 are at most b; each
    agent's backstop is a token bucket of burst_b (share x burst, at least 1)
    refilled at share x r, full at most when the outage begins. Returns
    (admitted, bound, requests, degraded admissions)."""
    recs = [x for x in records if x.sent >= t0 and x.acked <= t1]
    admitted = sum(1 for x in recs if x.allowed)
    degraded = sum(1 for x in recs if x.allowed and x.rl == "degraded")
    bound = b + agents * (burst_b + share * r * (t1 - t0))
    return admitted, bound, len(recs), degraded


def backstop_burst(burst, share):
    """The backstop's burst as src/rules/rules.c computes it: share x burst,
    truncated, at least 1."""
    return max(1, int(share * burst))
