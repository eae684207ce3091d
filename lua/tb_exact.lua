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
ARGV[1]   limit N      } refill rate = N / period
ARGV[2]   period, ms   }
ARGV[3]   burst b: capacity (>= 0)
ARGV[4]   n: tokens this request costs (>= 0; default 1). n = 0 is a check:
          allowed when 1 would be, taking nothing. n > b is never allowed
          and takes nothing.

ARGV[5]   optional (after n): block_for, ms (>= 0; absent or 0: none). A
          denial (of an n that fits) records blocked-until = now +
          block_for (field bu); until then every call is denied, takes
          nothing, and answers remaining 0, retry_ms to the block's end.
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

Invariant: after every call t + H <= b (H = tokens held by unexpired leases).
Uses Redis server time only.
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
        error('tb_exact: bad ARGV[' .. i .. ']')
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

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key = KEYS[1]
local limit, period, b = num3(ARGV, 1, 1, 1, 0)
local n = ARGV[4] == nil and 1 or num(ARGV, 4, 0) -- (the agent sends no n for 1)
local need = n > 0 and n or 1 -- a check (n = 0) passes where 1 would
local rate = limit / (period * 1000) -- tokens per microsecond
local block = ARGV[5] == nil and 0 or num(ARGV, 5, 0)

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])

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
