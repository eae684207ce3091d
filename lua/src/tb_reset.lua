-- SPDX-License-Identifier: Apache-2.0
--[[ tb_reset.lua - reset one client's token bucket (the agent's POST /reset):
full again, less what the unexpired leases of every agent still hold.

KEYS[1]   the bucket hash, same layout as tb_claim.lua (t, ts, h:<agent>, e:<agent>)
ARGV[1]   limit N      } refill rate = N / period; -N: a fed bucket (tb_claim.lua)
ARGV[2]   period, ms   }
ARGV[3]   burst b: capacity (>= 0)
ARGV[4]   optional, a fed bucket's: its reserve (tb_claim.lua's ARGV[12])

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
bucket is a full one. A fed bucket (limit -N) holds only tokens the global
bucket granted its region: a reset there would make tokens out of nothing,
so it keeps its tokens, its leases and its key, and only lifts a block (the
global bucket is the one to reset). Uses Redis server time only.
]]

--@ lib/locals.lua
--@ lib/num.lua
--@ lib/fmt.lua
--@ lib/fed.lua

--@ lib/bucket.lua

--@ lib/bucket_hash.lua

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key = KEYS[1]
local limit, period, b = num(ARGV, 1, -1e15), num(ARGV, 2, 1), num(ARGV, 3, 0)
local fed = limit < 1 and fedrate(ARGV, 1, period) -- fed: the rule's rate (lib/fed.lua)
local rate = fed and 0 or limit / (period * 1000) -- tokens per microsecond (the refill)
local fres = fed and fedreserve(ARGV, 4) or 0 -- fed: its reserve (lib/fed.lua)

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])

local raw = hgetall(key)
local f = raw -- the fields by name; f is only read: a new key's empty reply will do
if raw[1] ~= nil then
    f = {}
    for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
end

local t, ts, H, held, exp, share, P = advance(key, f, b, rate, now, fed and fres)
local before = t
if fed then -- a fed bucket: nothing made; a block lifted
    t = fedgate(key, f, t, now)
    local holders = 0
    for _ in next, exp do holders = holders + 1 end
    if raw[1] ~= nil then
        redis.call('HSET', key, 't', fmt[t], 'ts', fmt[ts])
        if f.bu then redis.call('HDEL', key, 'bu') end
    end
    return {max(0, floor(t)), H, holders, max(0, floor(before))}
end

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
