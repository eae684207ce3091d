-- SPDX-License-Identifier: Apache-2.0
--[[ tb_exact.lua - one exact token bucket decision (rules with lease = off).
Shares the key layout of tb_claim.lua, so exact calls and leases can act on
the same bucket: held leases keep capping the refill.

KEYS[1]   the bucket: a hash (t, ts, bu, h:<agent>, e:<agent>; see tb_claim.lua)
          once a lease was claimed on it, else a string "1 t ts [bu]" (the
          same fields; the 1 is the layout's version). A hash needs HGETALL,
          HSET and PEXPIRE per decision; a string a GET and a SET PX (and
          a PEXPIRETIME for a "2 t px"), as does a key Redis has never seen
          (the GET finds nothing). The other tb_* scripts turn a string into
          a hash before they write fields.
ARGV[1]   limit N      } refill rate = N / period; -N: a fed bucket (below)
ARGV[2]   period, ms   }
ARGV[3]   burst b: capacity (>= 0)
ARGV[4]   n: tokens this request costs (>= 0; default 1). n = 0 is a check:
          allowed when 1 would be, taking nothing. n > b is never allowed
          and takes nothing.

ARGV[5]   optional (after n): block_for, ms (>= 0; absent or 0: none). A
          denial (of an n that fits) records blocked-until = now +
          block_for (field bu); until then every call is denied, takes
          nothing, and answers remaining 0, retry_ms to the block's end.
ARGV[6]   optional, a fed bucket's (after n and block_for): its reserve, what
          a missing key holds (tb_claim.lua's ARGV[12], lib/fed.lua)
Returns   {allowed, remaining, retry_ms, reset_ms, time_ms}
            allowed   1 when n tokens were taken (n = 0: when t >= 1), else 0
                      (nothing taken)
            remaining max(0, floor(t)) after the call
            retry_ms  0 when another request of n would pass now, else ms
                      until it is expected to (exact when no lease is held);
                      one period when n > b (it never passes)
            reset_ms  ms until t + H reaches b if no held token is spent
            time_ms   Redis' time of the call, ms (what tb_refund.lua takes
                      back as taken_ms)

A fed bucket (limit -N, as in tb_claim.lua: no refill, a missing key
empty, N / period only for retry_ms and reset_ms) is always a hash; a denial
of an n that fits adds n to its unmet demand (field u), and from its
deadline (field dl) on it allows nothing.

Invariant: after every call t + H <= b (H = tokens held by unexpired leases).
Uses Redis server time only.
]]

--@ lib/locals.lua
--@ lib/num.lua
--@ lib/num3.lua
--@ lib/fmt.lua
--@ lib/fed.lua

--@ lib/bucket.lua

--@ lib/bucket_hash.lua

-- The fields of a string key ("1 t ts" or "1 t ts bu", as enc() writes
-- them), as a hash's would be read: one match, no table of the split. A
-- string "2 t px" is a new key the agent decided with a plain SET NX PX px,
-- not knowing Redis' time (lua/README.md): its ts is its creation on Redis'
-- clock, PEXPIRETIME - px, plus 1 ms (the creation may have been up to 1 ms
-- later: less refill, never more).
local match = string.match
local function dec(s, key)
    local t, ts, bu = match(s, '^1 (%S+) (%S+) ?(%S*)$')
    if t == nil then
        local px
        t, px = match(s, '^2 (%S+) (%d+)$')
        local e = t and redis.call('PEXPIRETIME', key) or -1
        if e < 0 then error('tb_exact: bad bucket string') end
        return {t = t, ts = (e - tonumber(px) + 1) * 1000}
    end
    return {t = t, ts = ts, bu = bu ~= '' and bu or nil}
end
local function enc(t, ts, bu)
    if bu then return '1 ' .. fmt[t] .. ' ' .. fmt[ts] .. ' ' .. fmt[bu] end
    return '1 ' .. fmt[t] .. ' ' .. fmt[ts]
end

--@ lib/bucket_times.lua

-- (2) The decision on a bucket with fields f (hash fields by name, or dec()'s).
-- Writes nothing but advance()'s HDEL of expired leases (hashes only): the
-- caller writes t, ts and bu in the key's layout. block_for (ms; 0: none):
-- until the Redis time bu, every call is denied and takes nothing.
local function decide(key, f, b, rate, now, n, need, block, period)
    local t, ts, H, held, exp, share, P = advance(key, f, b, rate, now)
    local emin, emax = nil, now
    if held ~= NONE then -- (a key with leases)
        for a, _ in next, held do
            emin = min(emin or exp[a], exp[a])
            emax = max(emax, exp[a])
        end
    end
    local bu = block > 0 and tonumber(f.bu) or nil
    if bu and bu <= now then bu = nil end
    -- Take n if there are n (n = 0: if there is 1).
    local allowed = 0
    if not bu and t >= need then t, allowed = t - n, 1 end
    -- A denial starts a block, unless n never fits (the client's error).
    local started = block > 0 and not bu and allowed == 0 and need <= b
    if started then bu = now + block * 1000 end

    local retry, reset, left, pttl = times(t, ts, H, P, b, rate, now, need, emin, emax, bu,
                                           block, started)
    if need > b and not bu then retry = period end -- never fits: one period, as the agent's buckets say
    return {allowed, left, retry, reset, floor(now / 1000)}, t, ts, bu, started, pttl
end

-- (3) The decision on a fed bucket (limit -N; rate: the rule's, per
-- microsecond): decide()'s, on a hash advanced at rate 0, with the deadline
-- and the unmet demand of lib/fed.lua.
local function fedexact(key, b, rate, now, n, need, block, period, fres)
    local raw = hgetall(key)
    local f = raw -- (a new key's empty reply will do)
    if raw[1] ~= nil then
        f = {}
        for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
    end
    local t, ts, H, held, exp, share, P = advance(key, f, b, 0, now, fres)
    local emin, emax = nil, now
    for a, _ in next, held do
        emin = min(emin or exp[a], exp[a])
        emax = max(emax, exp[a])
    end
    t = fedgate(key, f, t, now)
    local bu = block > 0 and tonumber(f.bu) or nil
    if bu and bu <= now then bu = nil end
    local allowed = 0
    if not bu and t >= need then t, allowed = t - n, 1 end
    local started = block > 0 and not bu and allowed == 0 and need <= b
    if started then bu = now + block * 1000 end
    local unmet = allowed == 0 and not bu and n > 0 and n <= b
    if unmet then redis.call('HINCRBY', key, 'u', n) end
    local retry, reset, left, pttl = times(t, ts, H, P, b, rate, now, need, emin, emax, bu,
                                           block, started)
    if need > b and not bu then retry = period end
    redis.call('HSET', key, 't', fmt[t], 'ts', fmt[ts])
    if started then redis.call('HSET', key, 'bu', fmt[bu]) end
    redis.call('PEXPIRE', key, fmt[fedttl(pttl, t >= 1 or unmet or f.u ~= nil or t < fres, f.dl, now)])
    return {allowed, left, retry, reset, floor(now / 1000)}
end

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key = KEYS[1]
local limit, period, b = num3(ARGV, 1, -1e15, 1, 0)
local fed = limit < 1 and fedrate(ARGV, 1, period) -- fed: the rule's rate (lib/fed.lua)
local n = ARGV[4] == nil and 1 or num(ARGV, 4, 0) -- (the agent sends no n for 1)
local need = n > 0 and n or 1 -- a check (n = 0) passes where 1 would
local rate = limit / (period * 1000) -- tokens per microsecond
local block = ARGV[5] == nil and 0 or num(ARGV, 5, 0)

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
if fed then return fedexact(key, b, fed, now, n, need, block, period, fedreserve(ARGV, 6)) end

-- The key as it is, first: a key new to the agent is decided by one plain
-- SET (src/limiter_first.c), so most calls of this script come for a key the
-- agent decided before, which Redis still has. (Trying SET NX GET first, as a
-- new key wants, cost such a key the new state's text and three more
-- arguments of a command that fails; a new key now costs a GET that finds
-- nothing, about as much.)
local old = redis.pcall('GET', key)
local r, t, ts, bu, started, pttl
if old and old.err == nil then -- a string: its state, decided again
    r, t, ts, bu, started, pttl = decide(key, dec(old, key), b, rate, now, n, need, block, period)
    redis.call('SET', key, enc(t, ts, bu), 'PX', fmt[pttl])
    return r
end
if not old then
    -- A new key. Its state and reply are decide(key, NONE, ...) with what is
    -- known of a new bucket folded in (t = b, ts = now, no lease: H = P = 0,
    -- emin none; no block: a new bucket denies only an n > b, which starts
    -- none), written out because decide()'s general path cost Redis more than
    -- the SET (test_scripts_exact.c checks both give the same replies).
    local allowed, retry, rate_ms = 0, 0, rate * 1000
    t = b
    if b >= need then
        t, allowed = b - n, 1
        if t < need then retry = (need - t) / rate_ms end
    else
        retry = period -- never fits: one period, as the agent's buckets say
    end
    local life = (b - t) / rate_ms -- (also reset: b - H - t over the free rate)
    pttl = ceil(life) + 1000
    local left = floor(t)
    redis.call('SET', key, enc(t, now, nil), 'PX', fmt[1e15 < pttl and 1e15 or pttl])
    return {allowed, left > 0 and left or 0, retry == 0 and 0 or ceil(retry), ceil(life),
            floor(now / 1000)}
end
-- WRONGTYPE: a hash (a lease was claimed on it): its fields, as tb_claim.lua
-- keeps them.
local raw = redis.call('HGETALL', key)
local f = raw -- the fields by name; f is only read: an empty reply will do
if raw[1] ~= nil then
    f = {}
    for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
end
r, t, ts, bu, started, pttl = decide(key, f, b, rate, now, n, need, block, period)
redis.call('HSET', key, 't', fmt[t], 'ts', fmt[ts])
if started then redis.call('HSET', key, 'bu', fmt[bu]) end
redis.call('PEXPIRE', key, fmt[pttl])
return r
