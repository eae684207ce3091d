-- SPDX-License-Identifier: Apache-2.0
--[[ tb_claim.lua - lease tokens, or a share of the rate, from a shared token
bucket, settling the caller's previous lease in the same atomic step.

KEYS[1]   the bucket, one hash per (rule, client key):
            t          tokens in the bucket (real; < 0 only after the burst shrank
                       below what is held, as a debt)
            ts         Redis time of the last refill, microseconds
            h:<agent>  tokens leased to <agent>, not yet reported (integer > 0);
                       a rate lease: its slice of the burst, as counted
            e:<agent>  Redis time when that lease expires, microseconds
            q:<agent>  a rate lease: its share of the rate, tokens per
                       microsecond, as counted (absent: a token lease)
            hn:<agent>, qn:<agent>  a rate lease: slice and share as last
                       granted (the counted ones are never lower: see (2))
            d:<agent>  a rate lease: the demand it reported, ppm of the rate
            x          until this Redis time no share is granted: a request of
                       a rate lease was denied while the demands reported add
                       up to 90 % of the rate (the key is at its limit)
ARGV[1]   agent id (non-empty)
ARGV[2]   limit N      } refill rate = N / period; -N: a fed bucket (below)
ARGV[3]   period, ms   }
ARGV[4]   burst b: capacity (>= 0)
ARGV[5]   want: tokens requested (>= 0; 0 = only settle and report); with a
          rate lease: tokens taken for requests waiting on this call
ARGV[6]   used: tokens spent from the lease since the last report (capped at held)
ARGV[7]   returned: unspent tokens given back (capped at held - used)
ARGV[8]   ttl, ms: lifetime of the lease from now (>= 1)
ARGV[9]   optional, with ARGV[10]: a rate lease. The share of the rate wanted,
          in millionths of the rate (0: none: end the rate lease)
ARGV[10]  the caller's demand on this key, requests per time in millionths of
          the rate (weights the shares when the pool runs short)

ARGV[11]  optional: block_for, ms (>= 0; absent or 0: none). ARGV[9] and
          ARGV[10] are then sent, empty for a token lease. A claim that
          finds nothing to grant (want > 0, no token) records blocked-until
          = now + block_for (field bu); until then every claim grants
          nothing, ends the caller's lease (tokens counted as spent) and
          answers remaining 0, retry_ms to the block's end.
Returns   {granted, remaining, held, holders, retry_ms, reset_ms, lease_ms, mine,
           share_ppm, had}
            granted   tokens added to the caller's lease: min(want, floor(t));
                      a rate lease: tokens moved to its local bucket (slice
                      growth), plus those taken for its waiting requests
            remaining max(0, floor(t)) after the call
            held      H: tokens held by all unexpired leases, caller included
            holders   number of agents holding a lease
            retry_ms  0 when remaining >= 1, else ms until one token is expected
                      (exact while b - H >= 1 and no rate lease runs; otherwise
                      at least until the first lease expires)
            reset_ms  ms until t + H reaches b if no held token is spent
            lease_ms  ttl when the caller still holds tokens, else 0: the agent
                      may spend them until (time it SENT this call) + lease_ms
            mine      tokens the caller now holds in Redis (0: no lease); a
                      rate lease: its slice, the capacity of its local bucket
            share_ppm the caller's share of the rate, millionths (0: a token lease)
            had       what Redis counted the caller held before this call (0:
                      its lease had expired, or it had none)

A fed bucket (limit -N: the regional bucket of a scope = global rule,
lua/README.md "Fed buckets") never refills: a missing key is empty (or
holds the region's reserve, ARGV[12]: ARGV[9] to ARGV[11] are then sent, as
for a block_for), its tokens come only from tb_pool.lua's deposits, N / period only answers
retry_ms and reset_ms. No rate lease (ARGV[9], ARGV[10] grant no share); a
claim granted less than want adds the shortfall to field u (unmet demand,
read and cleared by tb_pool.lua); from the Redis time in field dl on it
grants nothing (its free tokens dropped, counted in field l). The key lives
past dl, and at least 60 s while it holds a token or unmet demand, or
less than its reserve free.

Invariant: after every call t + H <= b and P <= r, where H and P count the
slices and shares of every unexpired lease. Expired leases vanish (counted as
spent), a report only moves held tokens back to t, the refill of t is capped
at b - H and runs at r - P, and every agent keeps its local tokens under its
slice and refills them at its share: so the fleet spends at most b + r*T in
any interval T (the proof: lua/README.md).
Uses Redis server time only; agents never send timestamps.
]]

--@ lib/locals.lua
--@ lib/num.lua
--@ lib/num3.lua
--@ lib/fmt.lua
--@ lib/fed.lua

-- The names of an agent's fields (h:<agent>, ...), made once per agent: the
-- claims of a batch mostly come from one agent.
local named = {}
local function fields(agent)
    local n = named[agent]
    if n == nil then
        n = {h = 'h:' .. agent, e = 'e:' .. agent, q = 'q:' .. agent, qn = 'qn:' .. agent,
             hn = 'hn:' .. agent, d = 'd:' .. agent}
        named[agent] = n
    end
    return n
end

--@ lib/bucket.lua

--@ lib/bucket_hash.lua

--@ lib/bucket_times.lua

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key, agent = KEYS[1], ARGV[1]
if agent == nil or agent == '' then error('tb_claim: empty agent id') end
local my = named[agent] or fields(agent) -- my.h is 'h:' .. agent, ...
local limit, period, b = num3(ARGV, 2, -1e15, 1, 0)
-- fed: a fed bucket's rule rate (lib/fed.lua); it refills at brate = 0,
-- rate is the rule's (for retry_ms and reset_ms only), no rate lease.
local fed = limit < 1 and fedrate(ARGV, 2, period)
local fres = fed and fedreserve(ARGV, 12) or 0 -- fed: its reserve, what a missing key holds
local want, used, ret = num3(ARGV, 5, 0, 0, 0)
local ttl = num(ARGV, 8, 1)
-- A rate lease: both or neither of ARGV[9] and ARGV[10].
local rated = ARGV[9] ~= nil and ARGV[9] ~= '' -- (sent empty before a block_for)
local qwant, demand = 0, 0
if rated then qwant, demand = min(num(ARGV, 9, 0), 1e6), min(num(ARGV, 10, 0), 1e9) end
local RATE_POOL = 0.7 -- at most this share of r goes to rate leases; the rest stays central
local RATE_MIN_SLICE = 2 -- the smallest slice of the burst worth a rate lease
local rate = limit / (period * 1000) -- tokens per microsecond
local brate = rate -- the bucket's refill
if fed then rate, brate, rated = fed, 0, false end

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])

local raw = hgetall(key)
local f = raw -- the fields by name; f is only read: a new key's empty reply will do
if raw[1] ~= nil then
    f = {}
    for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
end

local t, ts, H, held, exp, share, P = advance(key, f, b, brate, now, fed and fres)

-- (2) The caller applies each reply before its next call on this key (one
-- call at a time per key and agent), so a rate lease's slice and share as
-- counted, which stayed at least the previous grant until now (the agent may
-- have used that one until our last reply reached it), fall to the last
-- grant. Then settle: spent tokens are gone, returned ones go back to t.
-- Caps make sure a report never creates tokens. Spent tokens stayed in H
-- until now (they capped the refill while unreported): under-admission only.
local had = held[agent] or 0
local mine, qold = had, share[agent] or 0
if had > 0 then
    local hn, qn = tonumber(f[my.hn]), tonumber(f[my.qn])
    if hn and hn < mine then H, mine = H - mine + hn, hn end
    if qn and qn < qold then P, qold = P - qold + qn, qn end
end
-- Lines run on every call write max(a, b) as `b > a and b or a` and min(a, b)
-- as `b < a and b or a`: what math.max and math.min return, without a call
-- (a call costs more than the arithmetic around it).
used = mine < used and mine or used -- min(used, mine)
ret = mine - used < ret and mine - used or ret -- min(ret, mine - used)
mine = mine - used - ret
t, H = t + ret, H - used - ret
t = b - H < t and b - H or t -- min(t, b - H): only binds after the burst shrank (debt)

-- Penalty box (block_for, ARGV[11] in ms; absent or 0: none): until the
-- Redis time in field bu, every call is denied and grants nothing.
local block = (ARGV[11] == nil or ARGV[11] == '') and 0 or num(ARGV, 11, 0)
local bu = block > 0 and tonumber(f.bu) or nil
if bu and bu <= now then bu = nil end
-- A blocked caller's lease ends here, its tokens counted as spent (as when
-- it expires: it may have spent some since it sent this call), and a rate
-- lease ends as a token claim ends it (3).
if bu then
    want, rated = 0, false
    H, mine = H - mine, 0
end

-- (3) A rate lease (ARGV[9] given): the caller's share q of the rate, refilled
-- on the agent into its local bucket of capacity `slice`. Shares are sized by
-- demand: at most what was asked for, at most the caller's demand-weighted
-- part of RATE_POOL of the rate, never more than that pool less what the
-- others hold. The slice follows the share (b q / r rounded up): it grows
-- with tokens moved from t to the caller (granted) and, past those, with room
-- under b - H that no token fills (the local refill fills it). A slice or
-- share that shrinks stays counted at its old value until the caller's next
-- call (see (2)) or the lease's end: the caller uses the old one until this
-- reply reaches it. A token claim (no ARGV[9]) ends a rate lease the same way.
local q, slice, g, hcount, reserve, dsum = 0, mine, 0, mine, 0, 0
if rated and qold > rate * qwant / 1e6 then
    -- The caller cut its own share to what it asks for when it sent this
    -- call: that much of it is free from now on.
    P, qold = P - qold + rate * qwant / 1e6, rate * qwant / 1e6
end
if rated then
    local n = 1
    dsum = demand
    for a, _ in next, exp do
        if a ~= agent then
            dsum, n = dsum + (tonumber(f['d:' .. a]) or 0), n + 1
        end
    end
    local pool = RATE_POOL * rate
    reserve = (1 - RATE_POOL) * b
    -- No share while the key is at its limit (x: see (4)).
    if (tonumber(f.x) or 0) > now then pool = 0 end
    q = min(rate * qwant / 1e6, pool - (P - qold))
    if dsum > 0 then q = min(q, pool * demand / dsum) end
    -- A first share takes at most half of what is free, and no more than an
    -- even split between the agents with a lease on the key (token leases
    -- too): agents that have not asked yet find room; the shares converge to
    -- the demand-weighted ones as their holders renew.
    if qold == 0 then q = min(q, (pool - (P - qold)) / 2, pool / n) end
    -- More agents on the key than slices of RATE_MIN_SLICE in its burst:
    -- below the line, where a split rate strands more than it saves.
    if n * RATE_MIN_SLICE > b then q = 0 end
    -- Slices too stay within RATE_POOL of the burst, so that the central
    -- bucket keeps room for the requests local buckets could not serve.
    -- A slice of fewer than RATE_MIN_SLICE tokens cannot absorb the bursts of
    -- a local stream of requests (they would keep falling back to the
    -- central bucket, and be denied there): no rate lease then.
    local hfree = floor(RATE_POOL * b - (H - mine))
    slice = min(hfree, ceil(b * q / rate - 1e-9))
    if q <= 0 or slice < RATE_MIN_SLICE then
        q, slice = 0, 0
    end
    if slice > mine then
        -- Tokens for the slice come from t only above a reserve that
        -- stays for the requests local buckets cannot serve (the local
        -- refill fills the rest of the slice).
        g = min(slice - mine, max(0, floor(t - reserve)))
        t, mine, H = t - g, mine + g, H + g
        local room = max(0, floor(b - H - max(t, 0)))
        local extra = min(slice - mine, room)
        mine, H = mine + extra, H + extra
        slice, hcount = mine, mine
    else
        hcount = mine -- counted as before until the next call
    end
end
local qcount = q > qold and q or qold -- max(qold, q)
P = P - qold + qcount

-- A fed bucket grants nothing from its deadline on; what it cannot grant of
-- want is unmet demand, for its claimer.
local unmet = false -- fed: the key holds unmet demand
if fed then
    t = fedgate(key, f, t, now)
    local short = floor(t)
    short = want - (short < want and (short > 0 and short or 0) or want)
    if short > 0 then redis.call('HINCRBY', key, 'u', short) end
    unmet = short > 0 or f.u ~= nil
end

-- (4) Grant whole tokens. With a rate lease they are taken for the requests
-- waiting on this call and are not part of the slice (spent at once; any the
-- agent cannot spend at once, or keep under its slice, are dropped, counted
-- as spent).
local taken = floor(t)
taken = taken < want and taken or want
taken = taken > 0 and taken or 0 -- max(0, min(want, floor(t)))
if rated then
    t = t - taken
    mine = slice
    -- A local bucket that ran dry (requests wait on this call) gets one
    -- token more, if its slice has room beside the g just moved in: the next
    -- request there is decided there.
    if taken > 0 and g < mine and t >= 1 then t, taken = t - 1, taken + 1 end
    -- A request of a rate lease denied here while the agents' demands add up
    -- to 90 % of the rate or more, or the third such denial in about a ttl
    -- (xn counts them, decaying; agents on token leases report no demand):
    -- the key is at its limit, where splitting the rate strands it. No
    -- shares for a ttl: the leases end at their holders' next calls and
    -- token leases take over.
    if taken < want then
        local xn = (tonumber(f.xn) or 0) * math.exp(-(now - (tonumber(f.xt) or now)) / (ttl * 1000))
        xn = xn + 1
        redis.call('HSET', key, 'xn', fmt[xn], 'xt', fmt[now])
        if xn >= 3 or dsum >= 0.9e6 then redis.call('HSET', key, 'x', fmt[now + ttl * 1000]) end
    end
else
    t, mine, H = t - taken, mine + taken, H + taken
    hcount = mine
end
-- A request denied here (nothing to grant it: want > 0, no token) starts a
-- block; never for a burst under 1, where no request can ever pass.
local started = block > 0 and not bu and want > 0 and taken == 0 and b >= 1
if started then
    bu = now + block * 1000
    redis.call('HSET', key, 'bu', fmt[bu])
end

-- A rate lease's caller that got no share keeps a record (slice and share
-- 0) with its demand, for a ttl: the others' shares make room for it when
-- they renew.
local eold = exp[agent]
if exp == NONE then exp = {} end -- (advance()'s NONE is never written)
if mine > 0 or (rated and demand > 0) then
    exp[agent] = now + ttl * 1000
elseif (hcount > 0 or qcount > 0) and eold then
    exp[agent] = eold -- no lease any more; what is still counted ends with the old one
else
    exp[agent] = nil
end
if exp[agent] then
    redis.call('HSET', key, 't', fmt[t], 'ts', fmt[ts],
               my.h, fmt[hcount], my.e, fmt[exp[agent]])
    if qcount > 0 or rated then
        redis.call('HSET', key, my.q, fmt[qcount], my.qn, fmt[q],
                   my.hn, fmt[mine], my.d, fmt[rated and demand or 0])
    elseif raw[1] ~= nil and (f[my.q] or f[my.qn] or f[my.hn] or f[my.d]) then -- (a key with fields)
        -- (only if there: nothing since the HGETALL writes them, and a call saved is
        -- most of the cost of a claim on a new key)
        redis.call('HDEL', key, my.q, my.qn, my.hn, my.d)
    end
else
    redis.call('HSET', key, 't', fmt[t], 'ts', fmt[ts])
    if raw[1] ~= nil and (f[my.h] or f[my.e] or f[my.q] or f[my.qn] or f[my.hn] or f[my.d]) then
        redis.call('HDEL', key, my.h, my.e, my.q, my.qn, my.hn, my.d)
    end
end

-- (5) Report. The key outlives every lease and the time to refill fully:
-- after that it is equivalent to a missing (full) bucket.
local holders, emin, emax = 0, nil, now
for _, e in next, exp do
    holders = holders + 1
    local m = emin or e
    emin = e < m and e or m -- min(emin or e, e)
    emax = e > emax and e or emax
end
local retry, reset, left, pttl = times(t, ts, H, P, b, rate, now, 1, emin, emax, bu, block,
                                       started)
if fed then pttl = fedttl(pttl, t >= 1 or unmet or t < fres, f.dl, now) end
redis.call('PEXPIRE', key, fmt[pttl])
return {g + taken, left, H, holders, retry, reset, mine > 0 and ttl or 0, mine,
        floor(q / rate * 1e6), had}
