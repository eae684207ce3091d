-- SPDX-License-Identifier: Apache-2.0
--[[ cc_acquire.lua - take one concurrency slot (algorithm = concurrency):
at most limit requests in flight per key, each slot freed by cc_release.lua
or, when its release never comes, at its deadline (max_hold).

KEYS[1]   the slot set: a sorted set, member = slot id, score = its deadline
          in ms of Redis time
ARGV[1]   limit (>= 1): slots held at most
ARGV[2]   max_hold, ms (>= 1): a slot frees itself this long after it was taken
ARGV[3]   the slot id (non-empty; 16 hex digits from the agent, unique)

Returns   {allowed, remaining, retry_ms, reset_ms, time_ms, expired}
            allowed   1 when the slot was taken, else 0 (nothing changed but
                      the expired slots freed)
            remaining limit - held after the call (0 when denied)
            retry_ms  denied: ms until the earliest deadline, at most 1000;
                      0 when allowed
            reset_ms  0 (a slot comes back with its release, not with time)
            time_ms   Redis' time of the call, ms (as *_exact answers it)
            expired   slots found past their deadline and freed by this call

A step back of Redis' clock leaves deadlines further than max_hold ahead: a
denial moves them to now + max_hold (no slot held for the step's length).

Invariant: the set never holds more than limit unexpired members: a member
is added only after the expired ones are removed and fewer than limit are
left. The key expires 2 x max_hold after the latest take (never sooner than
the latest deadline: slots past theirs are still counted as expired by the
next acquire), so a key nobody uses any more disappears. Uses Redis
server time only.
]]

local floor, huge = math.floor, math.huge
--@ lib/num.lua

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key = KEYS[1]
local limit, hold = num(ARGV, 1, 1), num(ARGV, 2, 1)
local id = ARGV[3]
if id == nil or id == '' then error('cc_acquire: bad ARGV[3]') end

local tm = redis.call('TIME')
local now = floor((tonumber(tm[1]) * 1000000 + tonumber(tm[2])) / 1000)

local expired = redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local held = redis.call('ZCARD', key)
if held >= limit then
    -- A deadline beyond now + max_hold was set before a step back of Redis'
    -- clock (or max_hold was shortened by a reload): it moves to now +
    -- max_hold, so that a slot whose release never comes is not held for the
    -- step's length too. Never earlier than its request could still run.
    -- Looked at on a denial only, where it matters.
    local late = redis.call('ZRANGEBYSCORE', key, '(' .. (now + hold), '+inf')
    for i = 1, #late do redis.call('ZADD', key, 'XX', now + hold, late[i]) end
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local retry = 1000
    if first[2] ~= nil then
        retry = tonumber(first[2]) - now
        if retry > 1000 then retry = 1000 elseif retry < 1 then retry = 1 end
    end
    return {0, 0, retry, 0, now, expired}
end
redis.call('ZADD', key, now + hold, id)
-- twice max_hold: a slot past its deadline stays to be counted as expired
-- by the next acquire; a key nobody uses any more still disappears
if redis.call('PTTL', key) < 2 * hold then redis.call('PEXPIRE', key, 2 * hold) end
return {1, limit - held - 1, 0, 0, now, expired}
