-- SPDX-License-Identifier: Apache-2.0
-- rules_push.lua - write a new version of the fleet's rule set, atomically
-- (spoa-ratelimit --push and --rollback; layout and contract: lua/README.md,
-- "Rules from Redis"; positions by name: src/rules_redis/rules_script.h).
--
-- KEYS[1] PREFIX{rules}:current   the current version: "N SHA256" (N alone by hand)
-- KEYS[2] PREFIX{rules}:versions  sorted set of the kept versions (score: N)
-- KEYS[3] PREFIX{rules}:agents    the agents' reports (rules_fleet.lua), only read
-- KEYS[4] PREFIX{rules}:seen      their times (ms), only read
-- Version N is the hash PREFIX{rules}:v:N (text, sha256, time, host,
-- message), its name made from KEYS[1] without "current": all the keys
-- carry the {rules} hash tag, so they sit on one Cluster slot.
--
-- ARGV: op ("push" | "rollback"), if_version ("" or N), history (>= 1),
-- host, message, then for push: text, sha256; for rollback: N, N's sha256
-- as the caller checked it; then force ("" or "1"), live (ms, >= 1).
-- Reply {status, version, fleet}, fleet the highest version an agent that
-- reported within `live` runs: status 1 written, version the new one;
-- 0 if_version is not the current version (the current one in version);
-- -1 rollback of a version not kept, or whose sha256 is not the one checked;
-- -2 the new number would not be above fleet: the store lost versions the
-- agents run (they apply no lower number); with force it is numbered
-- fleet + 1 instead.
if redis.replicate_commands then redis.replicate_commands() end
local base = string.sub(KEYS[1], 1, -8)
local op, want, keep = ARGV[1], ARGV[2], tonumber(ARGV[3])
local force, live = ARGV[8] == '1', tonumber(ARGV[9])
if (op ~= 'push' and op ~= 'rollback') or not keep or keep < 1 or not live or live < 1 then
    return redis.error_reply('bad ARGV[1], ARGV[3] or ARGV[9]')
end
local cur = tonumber(string.match(redis.call('GET', KEYS[1]) or '', '^%d+') or '0')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fleet = 0
for _, a in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], string.format('%d', now - live),
                              '+inf')) do
    local v = tonumber(string.match(redis.call('HGET', KEYS[3], a) or '', '^%d+') or '0')
    if v > fleet then fleet = v end
end
if want ~= '' and tonumber(want) ~= cur then
    return {0, cur, fleet}
end
local text, sha = ARGV[6], ARGV[7]
local message = ARGV[5]
if op == 'rollback' then
    local from = tonumber(ARGV[6])
    if not from or not redis.call('ZSCORE', KEYS[2], from) then
        return {-1, cur, fleet}
    end
    local old = redis.call('HMGET', base .. 'v:' .. from, 'text', 'sha256')
    -- only the text the caller checked: never one without a checksum
    if not old[1] or sha == '' or old[2] ~= sha then
        return {-1, cur, fleet}
    end
    text = old[1]
    if message == '' then message = 'rollback to ' .. from end
end
local n = cur + 1
if n <= fleet then
    if not force then return {-2, cur, fleet} end
    n = fleet + 1
end
redis.call('HSET', base .. 'v:' .. n, 'text', text, 'sha256', sha, 'time', t[1],
           'host', ARGV[4], 'message', message)
redis.call('ZADD', KEYS[2], n, n)
-- the number and the sha256: agents tell a version from one with the same
-- number pushed after this Redis lost its data
redis.call('SET', KEYS[1], n .. ' ' .. sha)
-- keep the newest `keep` versions: the older ones go, with their hashes
local old = redis.call('ZRANGE', KEYS[2], 0, -keep - 1)
for _, v in ipairs(old) do
    redis.call('DEL', base .. 'v:' .. v)
end
if #old > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -keep - 1)
end
return {1, n, fleet}
