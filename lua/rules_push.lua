-- SPDX-License-Identifier: Apache-2.0
-- rules_push.lua - write a new version of the fleet's rule set, atomically
-- (spoa-ratelimit --push and --rollback; layout and contract: lua/README.md,
-- "Rules from Redis"; positions by name: src/rules_store/rules_script.h).
--
-- KEYS[1] PREFIX{rules}:current   the current version: "N SHA256" (N alone by hand)
-- KEYS[2] PREFIX{rules}:versions  sorted set of the kept versions (score: N)
-- Version N is the hash PREFIX{rules}:v:N (text, sha256, time, host,
-- message), its name made from KEYS[1] without "current": all three keys
-- carry the {rules} hash tag, so they sit on one Cluster slot.
--
-- ARGV: op ("push" | "rollback"), if_version ("" or N), history (>= 1),
-- host, message, then for push: text, sha256; for rollback: N.
-- Reply {status, version}: status 1 written, version the new one;
-- 0 if_version is not the current version (the current one in version);
-- -1 rollback of a version not kept (the current one in version).
if redis.replicate_commands then redis.replicate_commands() end
local base = string.sub(KEYS[1], 1, -8)
local op, want, keep = ARGV[1], ARGV[2], tonumber(ARGV[3])
if (op ~= 'push' and op ~= 'rollback') or not keep or keep < 1 then
    return redis.error_reply('bad ARGV[1] or ARGV[3]')
end
local cur = tonumber(string.match(redis.call('GET', KEYS[1]) or '', '^%d+') or '0')
if want ~= '' and tonumber(want) ~= cur then
    return {0, cur}
end
local text, sha = ARGV[6], ARGV[7]
local message = ARGV[5]
if op == 'rollback' then
    local from = tonumber(ARGV[6])
    if not from or not redis.call('ZSCORE', KEYS[2], from) then
        return {-1, cur}
    end
    local old = redis.call('HMGET', base .. 'v:' .. from, 'text', 'sha256')
    if not old[1] then
        return {-1, cur}
    end
    text, sha = old[1], old[2] or ''
    if message == '' then message = 'rollback to ' .. from end
end
local t = redis.call('TIME')
local n = cur + 1
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
return {1, n}
