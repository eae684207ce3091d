-- SPDX-License-Identifier: Apache-2.0
-- rules_fleet.lua - the fleet's view of the rule set: which agent runs which
-- version (agents with [rules] source = redis report every 5 s; --fleet and
-- GET /fleet list them). Layout and contract: lua/README.md, "Rules from
-- Redis"; the reply is read by src/rules_redis/rules_fleet.c.
--
-- KEYS[1] PREFIX{rules}:agents   hash: agent -> "VERSION ERROR" (its last report)
-- KEYS[2] PREFIX{rules}:seen     sorted set: agent -> Redis time of that report, ms
-- and, only read, PREFIX{rules}:current (named from KEYS[1] without "agents"):
-- not declared, because EVAL's declared keys need write access, and agents
-- may only read the rule versions (doc/operations.md: a Redis ACL for that);
-- on the same slot as the declared ones, which Cluster allows.
-- ARGV: agent ("host=H pid=P listen=L", or "" to only read), version, error
-- (the last apply error, "" when none), live (ms: older reports are gone).
-- Reply: current version, Redis time (ms), then per live agent: agent,
-- seen (ms), version, error.
if redis.replicate_commands then redis.replicate_commands() end
local AGENTS, SEEN = KEYS[1], KEYS[2]
local current = string.sub(AGENTS, 1, -7) .. 'current'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = tonumber(ARGV[4])
if not live or live < 1 then return redis.error_reply('bad ARGV[4]') end
local oldest = now - live
if ARGV[1] ~= '' then
    -- a writer drops who has not reported for `live`, then reports
    local gone = redis.call('ZRANGEBYSCORE', SEEN, '-inf', string.format('(%d', oldest))
    for _, a in ipairs(gone) do redis.call('HDEL', AGENTS, a) end
    redis.call('ZREMRANGEBYSCORE', SEEN, '-inf', string.format('(%d', oldest))
    redis.call('ZADD', SEEN, string.format('%d', now), ARGV[1])
    redis.call('HSET', AGENTS, ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
    redis.call('PEXPIRE', AGENTS, live)
    redis.call('PEXPIRE', SEEN, live)
end
local out = {tonumber(string.match(redis.call('GET', current) or '', '^%d+') or '0'), now}
local seen = redis.call('ZRANGEBYSCORE', SEEN, string.format('%d', oldest), '+inf',
                        'WITHSCORES')
for i = 1, #seen, 2 do
    local r = redis.call('HGET', AGENTS, seen[i]) or ''
    local sp = string.find(r, ' ', 1, true)
    out[#out + 1] = seen[i]
    out[#out + 1] = seen[i + 1]
    out[#out + 1] = sp and string.sub(r, 1, sp - 1) or r
    out[#out + 1] = sp and string.sub(r, sp + 1) or ''
end
return out
