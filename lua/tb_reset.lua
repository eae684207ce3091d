-- SPDX-License-Identifier: Apache-2.0
--[[ tb_reset.lua - reset one client's token bucket (the agent's POST /reset):
full again, less what the unexpired leases of every agent still hold.

KEYS[1]   the bucket hash, same layout as tb_claim.lua (t, ts, h:<agent>, e:<agent>)
ARGV[1]   limit N      } refill rate = N / period
ARGV[2]   period, ms   }
ARGV[3]   burst b: capacity (>= 0)

Returns   {remaining, held, holders, before}
            remaining max(0, floor(t)) after the reset: floor(b - H)
            held      H: tokens held by unexpired leases, every agent's
            holders   number of agents holding such a lease
            before    max(0, floor(t)) just before the reset (refilled to now)

A lease still running is not taken back: its agent may spend its tokens until
it expires, without asking Redis. So the reset sets t = b - H (and ts = now)
rather than t = b: t + H <= b still holds after it, and the fleet admits at
most b + r*T in any interval of length T from the reset on, as before it.
Expired leases are dropped first, as every script does (advance(): their
tokens count as spent). With no lease left the key is deleted: a missing
bucket is a full one. Uses Redis server time only.
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
        error('tb_reset: bad ARGV[' .. i .. ']')
    end
    v = floor(v)
    ints[s] = v
    return v
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

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key = KEYS[1]
local limit, period, b = num(ARGV, 1, 1), num(ARGV, 2, 1), num(ARGV, 3, 0)
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
local before = t

-- (2) Reset: full, less the leases that run on. b - H < 0 only after the
-- burst shrank below what is held: t is then the same debt a claim leaves.
local holders, emax = 0, now
for _, e in next, exp do
    holders = holders + 1
    emax = max(emax, e)
end
if holders == 0 then
    redis.call('DEL', key)
    return {b, 0, 0, max(0, floor(before))}
end
t, ts = b - H, now
redis.call('HSET', key, 't', fmt[t], 'ts', fmt[ts])
if f.bu then redis.call('HDEL', key, 'bu') end -- the penalty box is lifted too

-- (3) The key outlives every lease and the time to refill fully, as in tb_claim.
local rate_ms = rate * 1000
local life = max((b - t) / rate_ms, (emax - now) / 1000)
if P > 0 then life = (emax - now) / 1000 + (b - t) / rate_ms end
redis.call('PEXPIRE', key, fmt[min(ceil(life) + 1000, 1e15)])
return {max(0, floor(t)), H, holders, max(0, floor(before))}
