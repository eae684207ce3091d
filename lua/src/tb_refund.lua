-- SPDX-License-Identifier: Apache-2.0
--[[ tb_refund.lua - give back the tokens of an exact decision (tb_exact.lua)
whose request another rule blocked ([agent] charge = all-or-nothing).

KEYS[1]   the bucket hash, same layout as tb_claim.lua (t, ts, h:<agent>, e:<agent>)
ARGV[1]   limit N      } refill rate = N / period; -N: a fed bucket (tb_claim.lua)
ARGV[2]   period, ms   }
ARGV[3]   burst b: capacity (>= 0)
ARGV[4]   n: tokens the decision took (>= 0)
ARGV[5]   taken_ms: Redis' time of that decision (tb_exact's time_ms); a token
          bucket does not need it (same ARGV as sw_refund.lua)
ARGV[6]   optional, a fed bucket's: its reserve (tb_claim.lua's ARGV[12])

Returns   {given, remaining}
            given     tokens given back (<= n)
            remaining max(0, floor(t)) after the call

A refund never over-admits: after advancing to now (expiries in time order,
as every script does), t = min(b - H, t + n). Without the decision, t would
be at least what it is plus n, capped by the same b - H: so the refund never
lifts t above what the bucket would hold had the request never come, and
t + H <= b still holds. A missing key is a full bucket: nothing to give back
(the key is not made again). A missing fed bucket is empty, but its tokens
went with it: nothing is given back either (under-admission only); one
past its deadline (field dl) drops what is given back (lib/fed.lua), and a
fed key holding a token lives at least 60 s. Uses Redis server time only.
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
local n = num(ARGV, 4, 0)
local fres = fed and fedreserve(ARGV, 6) or 0 -- fed: its reserve (lib/fed.lua)
local rate = fed and 0 or limit / (period * 1000) -- tokens per microsecond (the refill)

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])

local raw = hgetall(key)
if raw[1] == nil then return {0, fed and fres or b} end -- gone: full (fed: its reserve), nothing to give back
local f = {}
for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end

local t, ts, H = advance(key, f, b, rate, now, fed and fres)
local before = t
if t + n < b - H then t = t + n elseif b - H > t then t = b - H end
if fed then t = fedgate(key, f, t, now) end
redis.call('HSET', key, 't', fmt[t], 'ts', fmt[ts])
-- The TTL stays: a fuller bucket is full again sooner than it says (a fed
-- one never refills: it lives as lib/fed.lua says).
if fed then
    local pttl = redis.call('PTTL', key)
    local keep = fedttl(pttl, t >= 1 or f.u ~= nil or t < fres, f.dl, now)
    if keep > pttl then redis.call('PEXPIRE', key, fmt[keep]) end
end
local given = floor(t - before + 0.5)
return {given > 0 and given or 0, max(0, floor(t))}
