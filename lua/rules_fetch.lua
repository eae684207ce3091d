-- SPDX-License-Identifier: Apache-2.0
-- rules_fetch.lua - one version of the fleet's rule set, read by an agent
-- with [rules] source = redis (src/rules_redis/rules_redis.c), only if its
-- text is within the cap: the size and the text in one atomic call, so that
-- a text swapped for a larger one between a size query and the read is
-- never sent (layout: lua/README.md, "Rules from Redis"). Reads only: the
-- agent calls it with EVAL_RO, which read-only key access allows.
--
-- KEYS[1] PREFIX{rules}:v:N   hash: text, sha256, time, host, message
-- ARGV[1] the cap, bytes (CFG_MAX_RULES_TEXT, 1 MiB)
-- Reply: {text, sha256} (nil for a missing field), or {size} when the text
-- is larger than the cap.
local cap = tonumber(ARGV[1])
if not cap or cap < 0 then return redis.error_reply('bad ARGV[1]') end
local size = redis.call('HSTRLEN', KEYS[1], 'text')
if size > cap then return {size} end
return redis.call('HMGET', KEYS[1], 'text', 'sha256')
