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
ARGV[2]   limit N      } refill rate = N / period
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

Invariant: after every call t + H <= b and P <= r, where H and P count the
slices and shares of every unexpired lease. Expired leases vanish (counted as
spent), a report only moves held tokens back to t, the refill of t is capped
at b - H and runs at r - P, and every agent keeps its local tokens under its
slice and refills them at its share: so the fleet spends at most b + r*T in
any interval T (the proof: lua/README.md).
Uses Redis server time only; agents never send timestamps.
]]

-- num(ARGV, i, min) and fmt[x] (x as text, exact) remember the numbers they
-- convert: the operations of a batch repeat the same few (rules, Redis time),
-- and strtod() and '%.17g' cost more than the arithmetic. Calls, even of
-- math.min, cost more than the lines around them: the hot paths make few
-- (fmt is a table: a number already seen costs no call).
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local huge, format = math.huge, string.format
local ints = {}
local function num(ARGV, i, min)
    local s = ARGV[i]
    local v = ints[s] -- floor(tonumber(s)) of an s that passed: >= 0
    if v ~= nil and v >= min then return v end -- (floor(x) >= min iff x >= min)
    v = tonumber(s)
    if v == nil or v ~= v or v < min or v == huge then
        error('tb_claim: bad ARGV[' .. i .. ']')
    end
    v = floor(v)
    ints[s] = v
    return v
end
-- num() of ARGV[i], ARGV[i + 1] and ARGV[i + 2], with these minimums: one call
-- where all three were seen before.
local function num3(ARGV, i, m1, m2, m3)
    local x, y, z = ints[ARGV[i]], ints[ARGV[i + 1]], ints[ARGV[i + 2]]
    if x and x >= m1 and y and y >= m2 and z and z >= m3 then return x, y, z end
    return num(ARGV, i, m1), num(ARGV, i + 1, m2), num(ARGV, i + 2, m3)
end
local fmt = setmetatable({}, {__index = function(strs, x) -- fmt[x]: format('%.17g', x)
    local s
    if x == floor(x) and x < 2 ^ 53 and x > -2 ^ 53 and x ~= 0 then
        s = format('%d', x) -- the same text for whole numbers below 2^53, and cheaper
    else
        s = format('%.17g', x)
    end
    if x ~= 0 and x == x then strs[x] = s end -- 0 and -0 are one key; NaN none
    return s
end})

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

-- (1) Advance to now. The refill never lifts t above b - H, where H is what
-- the leases held AT THAT TIME, and runs at r - P, where P is the rate the
-- rate leases (q:<agent>) refill on their agents AT THAT TIME: a lease that
-- expired since the last call lifts the cap and gives its rate back only from
-- its expiry on. So expiries are applied in time order (refill up to each,
-- then drop it: its tokens count as spent), then the refill runs on to now.
-- Refilling the whole gap against the final cap would bank refill that was
-- never allowed while those tokens were held, and let b + H through at once
-- when the lease ends.
-- The same functions, refill() to advance(), stand in tb_claim, tb_return,
-- tb_exact and tb_reset (each script must load alone); tests/unit/test_scripts_contract.c
-- checks the copies are identical.
local function refill(t, ts, to, cap, r) -- t from ts on to `to`, at rate r, under cap
    if to > ts then -- ts never goes back (advance() rebases a ts ahead of now)
        if t < cap and r > 0 then t = min(cap, t + r * (to - ts)) end
        ts = to
    end
    return t, ts
end
local function by_expiry(x, y) return x.e < y.e end
-- A step back of Redis' clock (NTP stepping it, a VM restored, a failover to
-- a master behind) leaves ts, the time of the key's last call, ahead of now,
-- by d. Every time the key stores moves back by d with it, as if the clock had
-- not stepped: the refill restarts from now with the tokens there are (none for
-- the step), each lease keeps the life it had left (e:<agent> was set at a
-- call no later than ts, so it ends by now + ttl), and a block (bu) or a key
-- at its limit (x, xt) ends when it would have. Without it no refill came
-- until the clock passed ts again: a key at its limit locked out for the
-- step's length. A hash gets the moved times here (the caller writes ts); a
-- string's bu goes with the string tb_exact writes. Rare: one TYPE call.
local function rebase(key, f, d)
    local kv = {}
    for k, v in next, f do
        if k == 'bu' or k == 'x' or k == 'xt' or string.sub(k, 1, 2) == 'e:' then
            local s = fmt[tonumber(v) - d]
            f[k] = s -- (an existing field: allowed while next() walks f)
            local n = #kv
            kv[n + 1], kv[n + 2] = k, s
        end
    end
    if kv[1] and redis.call('TYPE', key).ok == 'hash' then redis.call('HSET', key, unpack(kv)) end
end
-- held, exp and share of a key without leases (most keys): NONE, never written.
local NONE = {}
local function advance(key, f, b, rate, now)
    local t, ts = f.t, f.ts -- (no tonumber() calls on a new key)
    t, ts = t and tonumber(t), ts and tonumber(ts) or now
    if t == nil then t = b end -- new bucket: full
    if ts > now then -- the clock stepped back: see rebase()
        rebase(key, f, ts - now)
        ts = now
    end
    local leases, H, P = nil, 0, 0
    for k, v in next, f do
        if string.sub(k, 1, 2) == 'h:' then
            local a = string.sub(k, 3)
            local l = {a = a, h = tonumber(v), q = tonumber(f['q:' .. a]) or 0,
                       e = tonumber(f['e:' .. a]) or 0}
            H, P = H + l.h, P + l.q
            leases = leases or {}
            leases[#leases + 1] = l
        end
    end
    local held, exp, share = NONE, NONE, NONE
    if leases then -- none on most keys
        held, exp, share = {}, {}, {}
        table.sort(leases, by_expiry)
        for _, l in ipairs(leases) do
            if l.e <= now then
                t, ts = refill(t, ts, l.e, b - H, rate - P)
                H, P = H - l.h, P - l.q
                redis.call('HDEL', key, 'h:' .. l.a, 'e:' .. l.a, 'q:' .. l.a, 'qn:' .. l.a,
                           'hn:' .. l.a, 'd:' .. l.a)
            else
                held[l.a], exp[l.a], share[l.a] = l.h, l.e, l.q
            end
        end
    end
    if now > ts then t, ts = refill(t, ts, now, b - H, rate - P) end
    if b - H < t then t = b - H end -- min(t, b - H)
    return t, ts, H, held, exp, share, P
end

-- HGETALL of the bucket. tb_exact.lua keeps a key no lease was claimed on
-- as a string "1 t ts [bu]": this script writes hash fields, so such a key
-- becomes the hash of the same fields, with its TTL, first (atomically:
-- within this call). A key never mixes the two. A string "2 t px" is a new
-- key the agent decided with a plain SET NX PX px (lua/README.md): its ts is
-- its creation on Redis' clock, PEXPIRETIME - px, plus 1 ms (the creation
-- may have been up to 1 ms later: less refill, never more).
local function hgetall(key)
    local raw = redis.pcall('HGETALL', key)
    if raw.err == nil then return raw end
    local s = redis.call('GET', key) -- (fails unless a string: not a bucket)
    local t, ts, bu = string.match(s, '^1 (%S+) (%S+) ?(%S*)$')
    if t == nil then
        local px
        t, px = string.match(s, '^2 (%S+) (%d+)$')
        local e = t and redis.call('PEXPIRETIME', key) or -1
        if e < 0 then error('bad bucket string') end
        ts, bu = string.format('%d', (e - tonumber(px) + 1) * 1000), ''
    end
    local ttl = redis.call('PTTL', key)
    raw = {'t', t, 'ts', ts}
    if bu ~= '' then raw[5], raw[6] = 'bu', bu end
    redis.call('DEL', key)
    redis.call('HSET', key, unpack(raw))
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
    return raw
end

-- The reply's times and the key's TTL after a decision left t (real), ts and
-- H, P (tokens and rate the leases hold), for a request of need tokens; emin
-- and emax the first and last lease expiry (emin nil: none; emax >= now), bu
-- the end of a block (nil: none; started: this call began it, of block ms).
-- Returns retry_ms (0: would pass now), reset_ms, remaining and the key's
-- pttl, all whole. The key outlives every lease and the time to refill
-- fully: after that it is equivalent to a missing (full) bucket. The same
-- function stands in tb_claim and tb_exact; test_scripts_exact.c checks the
-- copies are identical.
local function times(t, ts, H, P, b, rate, now, need, emin, emax, bu, block, started)
    local rate_ms = rate * 1000
    local free_ms = rate > P and (rate - P) * 1000 or rate_ms -- refill of t (after the leases, if none)
    local retry = 0
    if t < need then
        retry = (need - t) / free_ms
        if (b - H < need or rate <= P) and emin then retry = max(retry, (emin - now) / 1000) end
    end
    -- Lines run on every call write max(a, b) as `b > a and b or a` and min(a, b)
    -- as `b < a and b or a`: what math.max and math.min return, without a call
    -- (a call costs more than the arithmetic around it).
    local reset = b - H - t
    reset = (reset > 0 and reset or 0) / free_ms -- max(0, b - H - t) / free_ms
    local life, life_e = (ts - now) / 1000 + (b - t) / rate_ms, (emax - now) / 1000
    life = life_e > life and life_e or life
    if P > 0 then life = (emax - now) / 1000 + (b - t) / rate_ms end
    local pttl = ceil(life) + 1000
    local left = floor(t)
    if bu then -- blocked: retry and reset at its end; the key lives past it
        local bleft = ceil((bu - now) / 1000)
        -- (the whole block only when this call started it: the agent counts those)
        if bleft >= block and block > 1 and not started then bleft = block - 1 end
        retry, left = bleft, 0
        reset = reset > bleft and reset or bleft
        pttl = pttl > bleft + 1000 and pttl or bleft + 1000
    end
    return retry == 0 and 0 or ceil(retry), ceil(reset), left > 0 and left or 0,
           1e15 < pttl and 1e15 or pttl
end

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key, agent = KEYS[1], ARGV[1]
if agent == nil or agent == '' then error('tb_claim: empty agent id') end
local my = named[agent] or fields(agent) -- my.h is 'h:' .. agent, ...
local limit, period, b = num3(ARGV, 2, 1, 1, 0)
local want, used, ret = num3(ARGV, 5, 0, 0, 0)
local ttl = num(ARGV, 8, 1)
-- A rate lease: both or neither of ARGV[9] and ARGV[10].
local rated = ARGV[9] ~= nil and ARGV[9] ~= '' -- (sent empty before a block_for)
local qwant, demand = 0, 0
if rated then qwant, demand = min(num(ARGV, 9, 0), 1e6), min(num(ARGV, 10, 0), 1e9) end
local RATE_POOL = 0.7 -- at most this share of r goes to rate leases; the rest stays central
local RATE_MIN_SLICE = 2 -- the smallest slice of the burst worth a rate lease
local rate = limit / (period * 1000) -- tokens per microsecond

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])

local raw = hgetall(key)
local f = raw -- the fields by name; f is only read: a new key's empty reply will do
if raw[1] ~= nil then
    f = {}
    for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
end

local t, ts, H, held, exp, share, P = advance(key, f, b, rate, now)

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
redis.call('PEXPIRE', key, fmt[pttl])
return {g + taken, left, H, holders, retry, reset, mine > 0 and ttl or 0, mine,
        floor(q / rate * 1e6), had}
