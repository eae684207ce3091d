-- SPDX-License-Identifier: Apache-2.0
--[[ cc_release.lua - give back one concurrency slot (the release message).

KEYS[1]   the slot set, as cc_acquire.lua
ARGV[1]   the slot id

Returns   {released, held}
            released  1 when the slot was held (unexpired) and is now free;
                      0 for an unknown, already freed or expired slot
                      (harmless: nothing else changes)
            held      unexpired slots held after the call
]]

-- per call
local key = KEYS[1]
local id = ARGV[1]
if id == nil or id == '' then error('cc_release: bad ARGV[1]') end

local tm = redis.call('TIME')
local now = math.floor((tonumber(tm[1]) * 1000000 + tonumber(tm[2])) / 1000)

redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local released = redis.call('ZREM', key, id)
return {released, redis.call('ZCARD', key)}
