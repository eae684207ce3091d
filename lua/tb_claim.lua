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

-- (1) Drop expired leases: their tokens count as spent and vanish.
local held, exp = {}, {}
for k, v in pairs(f) do
    if string.sub(k, 1, 2) == 'h:' then
        local a = string.sub(k, 3)
        local e = tonumber(f['e:' .. a]) or 0
        if e <= now then
            redis.call('HDEL', key, k, 'e:' .. a)
        else
            held[a], exp[a] = tonumber(v), e
        end
    end
end

-- (2) Settle the caller: spent tokens are gone, returned ones go back to t.
-- Caps make sure a report never creates tokens.
local mine = held[agent] or 0
used = math.min(used, mine)
ret = math.min(ret, mine - used)
mine = mine - used - ret
local t, ts = tonumber(f.t), tonumber(f.ts) or now
if t == nil then t = b end -- new bucket: full
t = t + ret

-- (3) Refill, never above b - H (this also clamps after the burst shrank).
held[agent] = mine
local H = 0
for _, h in pairs(held) do H = H + h end
if now > ts then t, ts = t + rate * (now - ts), now end -- ts never goes back
t = math.min(t, b - H)

-- (4) Grant whole tokens.
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

-- (5) Report. The key outlives every lease and the time to refill fully:
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
