-- SPDX-License-Identifier: Apache-2.0
--[[ cc_reset.lua - free every slot of one key (the operator's POST /reset),
or only read them (GET /key).

KEYS[1]   the slot set, as cc_acquire.lua
ARGV[1]   1: free them all; 0: read only

Returns   {held, earliest_ms, latest_ms}
            held        unexpired slots held before the call
            earliest_ms ms until the earliest deadline (0: none held)
            latest_ms   ms until the latest deadline (0: none held)
]]

-- per call
local key = KEYS[1]
local free = tonumber(ARGV[1])
if free ~= 0 and free ~= 1 then error('cc_reset: bad ARGV[1]') end

local tm = redis.call('TIME')
local now = math.floor((tonumber(tm[1]) * 1000000 + tonumber(tm[2])) / 1000)

if free == 1 then redis.call('ZREMRANGEBYSCORE', key, '-inf', now) end
local live = redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf', 'WITHSCORES')
local held, first, last = #live / 2, 0, 0
if held > 0 then
    first = tonumber(live[2]) - now
    last = tonumber(live[#live]) - now
end
if free == 1 then redis.call('DEL', key) end
return {held, first, last}
