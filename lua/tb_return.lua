--[[ tb_return.lua - close the caller's lease on a shared token bucket: report
what it spent and give every unspent token back.

KEYS[1]   the bucket hash, same layout as tb_claim.lua (t, ts, h:<agent>, e:<agent>)
ARGV[1]   agent id (non-empty)
ARGV[2]   limit N      } refill rate = N / period
ARGV[3]   period, ms   }
ARGV[4]   burst b: capacity (>= 0)
ARGV[5]   used: tokens spent from the lease since the last report (capped at held)

Returns   {granted, remaining, held, holders, retry_ms, reset_ms, lease_ms, mine}
          as tb_claim.lua, with granted = 0, lease_ms = 0 and mine = 0: the
          caller's h:/e: fields are deleted and its held - used tokens go back
          to t. A lease that already expired returns nothing (its tokens vanished).

Invariant: after every call t + H <= b (H = tokens held by unexpired leases).
Uses Redis server time only.
]]

local key, agent = KEYS[1], ARGV[1]
if agent == nil or agent == '' then error('tb_return: empty agent id') end
local function num(i, min)
    local v = tonumber(ARGV[i])
    if v == nil or v ~= v or v < min or v == math.huge then
        error('tb_return: bad ARGV[' .. i .. ']')
    end
    return math.floor(v)
end
local limit, period, b, used = num(2, 1), num(3, 1), num(4, 0), num(5, 0)
local rate = limit / (period * 1000) -- tokens per microsecond
local function fmt(x) return string.format('%.17g', x) end

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])

local f, raw = {}, redis.call('HGETALL', key)
for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end

-- Drop expired leases (tokens vanish); remember the live ones.
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

-- Settle and close the caller's lease: unspent tokens go back to t.
local mine = held[agent] or 0
local ret = mine - math.min(used, mine)
held[agent], exp[agent] = nil, nil
local t, ts = tonumber(f.t), tonumber(f.ts) or now
if t == nil then t = b end -- new bucket: full
t = t + ret

-- Refill, never above b - H.
local H, holders, emin, emax = 0, 0, nil, now
for a, h in pairs(held) do
    H, holders = H + h, holders + 1
    emin = math.min(emin or exp[a], exp[a])
    emax = math.max(emax, exp[a])
end
if now > ts then t, ts = t + rate * (now - ts), now end -- ts never goes back
t = math.min(t, b - H)

redis.call('HSET', key, 't', fmt(t), 'ts', fmt(ts))
redis.call('HDEL', key, 'h:' .. agent, 'e:' .. agent)

local rate_ms = rate * 1000
local retry = 0
if t < 1 then
    retry = (1 - t) / rate_ms
    if b - H < 1 and emin then retry = math.max(retry, (emin - now) / 1000) end
end
local reset = math.max(0, b - H - t) / rate_ms
local life = math.max((ts - now) / 1000 + (b - t) / rate_ms, (emax - now) / 1000)
redis.call('PEXPIRE', key, fmt(math.min(math.ceil(life) + 1000, 1e15)))
return {0, math.max(0, math.floor(t)), H, holders, math.ceil(retry), math.ceil(reset), 0, 0}
