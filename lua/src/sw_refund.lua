-- SPDX-License-Identifier: Apache-2.0
--[[ sw_refund.lua - give back the units of an exact decision (sw_exact.lua)
whose request another rule blocked ([agent] charge = all-or-nothing).

KEYS[1]   the counter hash, same layout as sw_claim.lua (w, c, p, ...)
ARGV[1]   limit N      } at most N per window of period ms (estimated)
ARGV[2]   period, ms   }
ARGV[3]   burst: ignored (same ARGV as tb_refund.lua)
ARGV[4]   n: units the decision counted (>= 0)
ARGV[5]   taken_ms: Redis' time of that decision (sw_exact's time_ms)
ARGV[6]   mode: "1" = fixed window (optional; absent or "0": sliding), as in
          sw_exact.lua: windows shifted by
ARGV[7]   offset, ms (with mode 1), nothing carried over from the previous one

Returns   {given, remaining}
            given     units given back: min(n, c) while the window of
                      taken_ms is still the current one, else 0
            remaining max(0, floor(N - estimate)) after the call

Only the window the units were counted in gives them back: once it rolled
they sit in p, where the request's absence would have left them too little
to matter; giving nothing back then only under-admits. c never goes below 0
and never loses more than n: the count is never lower than it would be had
the request never come. Uses Redis server time only.
]]

--@ lib/locals.lua
--@ lib/num.lua
--@ lib/fmt.lua

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key = KEYS[1]
local limit, period, n = num(ARGV, 1, 1), num(ARGV, 2, 1), num(ARGV, 4, 0, 0)
local taken = num(ARGV, 5, 0, 0)
local wus = period * 1000 -- window length, microseconds
local fixed = ARGV[6] == '1'
local off = fixed and (num(ARGV, 7, 0) * 1000) % wus or 0

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local function window(us) -- guard the division's rounding
    local k = floor((us - off) / wus)
    if k * wus + off > us then k = k - 1 elseif (k + 1) * wus + off <= us then k = k + 1 end
    return k
end
local k, kt = window(now), window(taken * 1000)

local f = redis.call('HMGET', key, 'w', 'c', 'p')
local W, c, p = tonumber(f[1]), tonumber(f[2]) or 0, tonumber(f[3]) or 0
local given = 0
if W ~= nil and W == k and kt == k and c > 0 and n > 0 then
    given = n < c and n or c
    c = c - given
    redis.call('HSET', key, 'c', fmt[c])
end
-- the estimate now, for remaining (windows rolled forward as sw_exact would)
if W == nil or k > W + 1 then c, p = 0, 0 elseif k == W + 1 then c, p = 0, c end
if fixed then p = 0 end -- nothing carries over
local left = min(wus, max(0, (k + 1) * wus + off - now))
local est = p * left / wus + c
return {given, max(0, floor(limit - est))}
