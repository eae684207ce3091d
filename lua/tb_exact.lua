--[[ tb_exact.lua - one exact token bucket decision (rules with lease = off).
Shares the key layout of tb_claim.lua, so exact calls and leases can act on
the same bucket: held leases keep capping the refill.

KEYS[1]   the bucket hash (t, ts, h:<agent>, e:<agent>; see tb_claim.lua)
ARGV[1]   limit N      } refill rate = N / period
ARGV[2]   period, ms   }
ARGV[3]   burst b: capacity (>= 0)
ARGV[4]   n: tokens this request costs (>= 1; default 1)

Returns   {allowed, remaining, retry_ms, reset_ms}
            allowed   1 when n tokens were taken, else 0 (nothing taken)
            remaining max(0, floor(t)) after the call
            retry_ms  0 when another request of n would pass now, else ms
                      until it is expected to (exact when no lease is held)
            reset_ms  ms until t + H reaches b if no held token is spent

Invariant: after every call t + H <= b (H = tokens held by unexpired leases).
Uses Redis server time only.
]]

local key = KEYS[1]
local function num(i, min, default)
    local v = tonumber(ARGV[i] or default)
    if v == nil or v ~= v or v < min or v == math.huge then
        error('tb_exact: bad ARGV[' .. i .. ']')
    end
    return math.floor(v)
end
local limit, period, b, n = num(1, 1), num(2, 1), num(3, 0), num(4, 1, 1)
local rate = limit / (period * 1000) -- tokens per microsecond
local function fmt(x) return string.format('%.17g', x) end

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])

local f, raw = {}, redis.call('HGETALL', key)
for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end

-- Drop expired leases (tokens vanish); sum the live ones.
local H, emin, emax = 0, nil, now
for k, v in pairs(f) do
    if string.sub(k, 1, 2) == 'h:' then
        local a = string.sub(k, 3)
        local e = tonumber(f['e:' .. a]) or 0
        if e <= now then
            redis.call('HDEL', key, k, 'e:' .. a)
        else
            H = H + tonumber(v)
            emin = math.min(emin or e, e)
            emax = math.max(emax, e)
        end
    end
end

-- Refill, never above b - H; then take n if there are n.
local t, ts = tonumber(f.t), tonumber(f.ts) or now
if t == nil then t = b end -- new bucket: full
if now > ts then t, ts = t + rate * (now - ts), now end -- ts never goes back
t = math.min(t, b - H)
local allowed = 0
if t >= n then t, allowed = t - n, 1 end
redis.call('HSET', key, 't', fmt(t), 'ts', fmt(ts))

local rate_ms = rate * 1000
local retry = 0
if t < n then
    retry = (n - t) / rate_ms
    if b - H < n and emin then retry = math.max(retry, (emin - now) / 1000) end
end
local reset = math.max(0, b - H - t) / rate_ms
local life = math.max((ts - now) / 1000 + (b - t) / rate_ms, (emax - now) / 1000)
redis.call('PEXPIRE', key, fmt(math.min(math.ceil(life) + 1000, 1e15)))
return {allowed, math.max(0, math.floor(t)), math.ceil(retry), math.ceil(reset)}
