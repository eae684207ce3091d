-- SPDX-License-Identifier: Apache-2.0
-- rules_history.lua - the kept versions of the fleet's rule set, newest
-- first (spoa-ratelimit --rules-history; layout: lua/README.md, "Rules from
-- Redis"). KEYS as rules_push.lua's. Reply: the current version, then per
-- kept version: N, time (unix s), host, sha256, message. Reads only.
local base = string.sub(KEYS[1], 1, -8)
local out = {tonumber(string.match(redis.call('GET', KEYS[1]) or '', '^%d+') or '0')}
for _, v in ipairs(redis.call('ZREVRANGE', KEYS[2], 0, -1)) do
    local h = redis.call('HMGET', base .. 'v:' .. v, 'time', 'host', 'sha256', 'message')
    out[#out + 1] = v
    for i = 1, 4 do out[#out + 1] = h[i] or '' end
end
return out
