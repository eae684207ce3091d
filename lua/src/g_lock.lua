-- SPDX-License-Identifier: Apache-2.0
--[[ g_lock.lua - the claimer's lease lock in the regional Redis: one agent
per region claims from the global bucket for it (doc/design.md "Regions").

KEYS[1]   the lock key (a string: the holder's agent id, with a PX ttl)
ARGV[1]   agent id (non-empty)
ARGV[2]   ttl, ms (>= 1): the lock's life from now when taken or renewed
          (ignored by a release)
ARGV[3]   optional: "release": give the lock up, only if the caller holds it
Returns   {ok, ms}
            take or renew: {1, ttl} when the lock was free or the caller's
            (it is now the caller's, for ttl ms); {0, pttl} when another
            agent holds it, pttl the ms left of its lock
            release: {1, 0} when the caller held it (deleted); {0, pttl}
            when another agent holds it (kept), {0, 0} when nobody does

Uses Redis' expiry only: the lock is free once its holder stops renewing
it for ttl ms.
]]

--@ lib/locals.lua
--@ lib/num.lua

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key, agent = KEYS[1], ARGV[1]
if agent == nil or agent == '' then error('g_lock: empty agent id') end
local holder = redis.call('GET', key)
if ARGV[3] == 'release' then
    if holder == agent then
        redis.call('DEL', key)
        return {1, 0}
    end
    return {0, holder and max(0, redis.call('PTTL', key)) or 0}
elseif ARGV[3] ~= nil and ARGV[3] ~= '' then
    error('g_lock: bad ARGV[3]')
end
local ttl = num(ARGV, 2, 1)
if holder == false or holder == agent then
    redis.call('SET', key, agent, 'PX', format('%d', ttl))
    return {1, ttl}
end
return {0, max(0, redis.call('PTTL', key))}
