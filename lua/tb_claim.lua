--[[ tb_claim.lua - lease tokens from a shared token bucket, settling the
caller's previous lease in the same atomic step.

KEYS[1]   the bucket, one hash per (rule, client key):
            t          tokens in the bucket (real; < 0 only after the burst shrank
                       below what is held, as a debt)
            ts         Redis time of the last refill, microseconds
            h:<agent>  tokens leased to <agent>, not yet reported (integer > 0)
            e:<agent>  Redis time when that lease expires, microseconds
ARGV[1]   agent id (non-empty)
ARGV[2]   limit N      } refill rate = N / period
ARGV[3]   period, ms   }
ARGV[4]   burst b: capacity (>= 0)
ARGV[5]   want: tokens requested (>= 0; 0 = only settle and report)
ARGV[6]   used: tokens spent from the lease since the last report (capped at held)
ARGV[7]   returned: unspent tokens given back (capped at held - used)
ARGV[8]   ttl, ms: lifetime of the lease from now (>= 1)

Returns   {granted, remaining, held, holders, retry_ms, reset_ms, lease_ms, mine}
            granted   tokens added to the caller's lease: min(want, floor(t))
            remaining max(0, floor(t)) after the call
            held      H: tokens held by all unexpired leases, caller included
            holders   number of agents holding a lease
            retry_ms  0 when remaining >= 1, else ms until one token is expected
                      (exact while b - H >= 1; otherwise at least until the
                      first lease expires)
            reset_ms  ms until t + H reaches b if no held token is spent
            lease_ms  ttl when the caller still holds tokens, else 0: the agent
                      may spend them until (time it SENT this call) + lease_ms
            mine      tokens the caller now holds in Redis (0: no lease)

Invariant: after every call t + H <= b. Expired leases vanish (counted as
spent), a report only moves held tokens back to t, and refill is capped at
b - H, so the fleet spends at most b + r*T in any interval T.
Uses Redis server time only; agents never send timestamps.
]]

local key, agent = KEYS[1], ARGV[1]
if agent == nil or agent == '' then error('tb_claim: empty agent id') end
local function num(i, min)
    local v = tonumber(ARGV[i])
    if v == nil or v ~= v or v < min or v == math.huge then
        error('tb_claim: bad ARGV[' .. i .. ']')
    end
    return math.floor(v)
end
local limit, period, b = num(2, 1), num(3, 1), num(4, 0)
local want, used, ret, ttl = num(5, 0), num(6, 0), num(7, 0), num(8, 1)
local rate = limit / (period * 1000) -- tokens per microsecond
local function fmt(x) return string.format('%.17g', x) end

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])

local f, raw = {}, redis.call('HGETALL', key)
for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end

-- (1) Advance to now. The refill never lifts t above b - H, where H is what
-- the leases held AT THAT TIME: a lease that expired since the last call
-- lifts the cap only from its expiry on. So expiries are applied in time
-- order (refill up to each, then drop it: its tokens count as spent), then
-- the refill runs on to now. Refilling the whole gap against the final cap
-- would bank refill that was never allowed while those tokens were held,
-- and let b + H through at once when the lease ends.
-- The same function stands in tb_claim, tb_return, tb_exact and tb_reset (each
-- script must load alone); tests/test_scripts.c checks the copies are identical.
local function advance(f, b, rate, now)
    local leases, H = {}, 0
    for k, v in pairs(f) do
        if string.sub(k, 1, 2) == 'h:' then
            local a = string.sub(k, 3)
            local l = {a = a, h = tonumber(v), e = tonumber(f['e:' .. a]) or 0}
            H = H + l.h
            leases[#leases + 1] = l
        end
    end
    table.sort(leases, function(x, y) return x.e < y.e end)
    local t, ts = tonumber(f.t), tonumber(f.ts) or now
    if t == nil then t = b end -- new bucket: full
    local function refill(to)
        if to > ts then -- ts never goes back
            if t < b - H then t = math.min(b - H, t + rate * (to - ts)) end
            ts = to
        end
    end
    local held, exp = {}, {}
    for _, l in ipairs(leases) do
        if l.e <= now then
            refill(l.e)
            H = H - l.h
            redis.call('HDEL', key, 'h:' .. l.a, 'e:' .. l.a)
        else
            held[l.a], exp[l.a] = l.h, l.e
        end
    end
    refill(now)
    return math.min(t, b - H), ts, H, held, exp
end
local t, ts, H, held, exp = advance(f, b, rate, now)

-- (2) Settle the caller: spent tokens are gone, returned ones go back to t.
-- Caps make sure a report never creates tokens. Spent tokens stayed in H
-- until now (they capped the refill while unreported): under-admission only.
local mine = held[agent] or 0
used = math.min(used, mine)
ret = math.min(ret, mine - used)
mine = mine - used - ret
t, H = t + ret, H - used - ret
held[agent] = mine
t = math.min(t, b - H) -- only binds after the burst shrank (debt)

-- (3) Grant whole tokens.
local g = math.max(0, math.min(want, math.floor(t)))
t, mine, H = t - g, mine + g, H + g
if mine > 0 then
    exp[agent] = now + ttl * 1000
    redis.call('HSET', key, 't', fmt(t), 'ts', fmt(ts),
               'h:' .. agent, fmt(mine), 'e:' .. agent, fmt(exp[agent]))
else
    exp[agent] = nil
    redis.call('HSET', key, 't', fmt(t), 'ts', fmt(ts))
    redis.call('HDEL', key, 'h:' .. agent, 'e:' .. agent)
end

-- (4) Report. The key outlives every lease and the time to refill fully:
-- after that it is equivalent to a missing (full) bucket.
local holders, emin, emax = 0, nil, now
for _, e in pairs(exp) do
    holders = holders + 1
    emin = math.min(emin or e, e)
    emax = math.max(emax, e)
end
local rate_ms = rate * 1000
local retry = 0
if t < 1 then
    retry = (1 - t) / rate_ms
    if b - H < 1 and emin then retry = math.max(retry, (emin - now) / 1000) end
end
local reset = math.max(0, b - H - t) / rate_ms
local life = math.max((ts - now) / 1000 + (b - t) / rate_ms, (emax - now) / 1000)
redis.call('PEXPIRE', key, fmt(math.min(math.ceil(life) + 1000, 1e15)))
return {g, math.max(0, math.floor(t)), H, holders, math.ceil(retry), math.ceil(reset),
        mine > 0 and ttl or 0, mine}
