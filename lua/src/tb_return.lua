-- SPDX-License-Identifier: Apache-2.0
--[[ tb_return.lua - close the caller's lease on a shared token bucket: report
what it spent and give every unspent token back.

KEYS[1]   the bucket hash, same layout as tb_claim.lua (t, ts, and per agent h:, e:,
          and for a rate lease q:, hn:, qn:, d:)
ARGV[1]   agent id (non-empty)
ARGV[2]   limit N      } refill rate = N / period; -N: a fed bucket (tb_claim.lua)
ARGV[3]   period, ms   }
ARGV[4]   burst b: capacity (>= 0)
ARGV[5]   used: tokens spent from the lease since the last report (capped at held);
          a rate lease: its slice less the tokens it gives back

Returns   {granted, remaining, held, holders, retry_ms, reset_ms, lease_ms, mine,
           share_ppm, had}
          as tb_claim.lua, with granted = lease_ms = mine = share_ppm = 0: the
          caller's fields are deleted and its held - used tokens go back to t
          (a rate lease: its last granted slice - used), its share to the
          central refill. A lease that already expired returns nothing (its
          tokens vanished).

A fed bucket drops what comes back from its deadline (field dl) on, as
tb_claim.lua does (lib/fed.lua); ARGV[6], optional: its reserve (what a
missing key holds, tb_claim.lua's ARGV[12]).

Invariant: after every call t + H <= b (H = tokens held by unexpired leases).
Uses Redis server time only.
]]

--@ lib/locals.lua
--@ lib/num.lua
--@ lib/fmt.lua
--@ lib/fed.lua

--@ lib/bucket.lua

--@ lib/bucket_hash.lua

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key, agent = KEYS[1], ARGV[1]
if agent == nil or agent == '' then error('tb_return: empty agent id') end
local limit, period, b, used = num(ARGV, 2, -1e15), num(ARGV, 3, 1), num(ARGV, 4, 0), num(ARGV, 5, 0)
local fed = limit < 1 and fedrate(ARGV, 2, period) -- fed: the rule's rate (lib/fed.lua)
local rate = fed or limit / (period * 1000) -- tokens per microsecond
local brate = fed and 0 or rate -- the bucket's refill
local fres = fed and fedreserve(ARGV, 6) or 0 -- fed: its reserve (lib/fed.lua)

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])

local raw = hgetall(key)
local f = raw -- the fields by name; f is only read: a new key's empty reply will do
if raw[1] ~= nil then
    f = {}
    for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
end

local t, ts, H, held, exp, share, P = advance(key, f, b, brate, now, fed and fres)

-- Settle and close the caller's lease: unspent tokens go back to t. A rate
-- lease's tokens are under the slice last granted (hn), which may be below
-- the one counted (see tb_claim.lua): what it did not spend is hn - used.
local counted = held[agent] or 0
local had = counted
local mine = min(counted, tonumber(f['hn:' .. agent]) or counted)
local ret = mine - min(used, mine)
if held[agent] then held[agent], exp[agent] = nil, nil end -- (held may be NONE)
t, H, P = t + ret, H - counted, P - (share[agent] or 0)
t = min(t, b - H)
if fed then t = fedgate(key, f, t, now) end

local holders, emin, emax = 0, nil, now
for a, _ in next, held do
    holders = holders + 1
    emin = min(emin or exp[a], exp[a])
    emax = max(emax, exp[a])
end

redis.call('HSET', key, 't', fmt[t], 'ts', fmt[ts])
redis.call('HDEL', key, 'h:' .. agent, 'e:' .. agent, 'q:' .. agent, 'qn:' .. agent,
           'hn:' .. agent, 'd:' .. agent)

local rate_ms = rate * 1000
local free_ms = rate > P and (rate - P) * 1000 or rate_ms -- refill of t (after the leases, if none)
local retry = 0
if t < 1 then
    retry = (1 - t) / free_ms
    if (b - H < 1 or rate <= P) and emin then retry = max(retry, (emin - now) / 1000) end
end
local reset = max(0, b - H - t) / free_ms
local life = max((ts - now) / 1000 + (b - t) / rate_ms, (emax - now) / 1000)
if P > 0 then life = (emax - now) / 1000 + (b - t) / rate_ms end
local pttl = min(ceil(life) + 1000, 1e15)
if fed then pttl = fedttl(pttl, t >= 1 or f.u ~= nil or t < fres, f.dl, now) end
redis.call('PEXPIRE', key, fmt[pttl])
return {0, max(0, floor(t)), H, holders, ceil(retry), ceil(reset), 0, 0, 0, had}
