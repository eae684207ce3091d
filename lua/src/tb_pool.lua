-- SPDX-License-Identifier: Apache-2.0
--[[ tb_pool.lua - the region's claimer feeds a fed bucket (the regional bucket
of a scope = global rule, lua/README.md "Fed buckets"): deposit tokens the
global bucket granted the region, or withdraw free ones, set its deadline,
and read its unmet demand. Promoted from the simulator's pool script
(src/tools/sim_region_pool.c).

KEYS[1]   the regional bucket (tb_claim.lua's hash; a missing key is empty, or
          holds the reserve ARGV[4])
ARGV[1]   amt: tokens to move into (amt > 0) or out of (amt < 0) the free
          tokens t: a deposit within the room b - H - t leaves, a withdrawal
          within the whole tokens of t (0: only read, and set ARGV[3])
ARGV[2]   burst b (>= 0), the rule's
ARGV[3]   optional dl: > 0 store the deadline dl ms from now (kept as Redis
          time, microseconds: from it on the agents' scripts grant nothing):
          the claimer sends a length, never a time of its clock; < 0 clear
          it; 0 or absent: leave it
ARGV[4]   optional: the region's reserve s (>= 0; absent: 0): what a missing
          key holds (lib/fed.lua); a key holding less is kept
Returns   {moved, remaining, held, dl, lost, unmet}
            moved     tokens moved: > 0 deposited, < 0 withdrawn
            remaining max(0, floor(t)) after the call
            held      H: tokens held by the agents' unexpired leases
            dl        the deadline after the call (0: none)
            lost      whole tokens dropped because the deadline had passed:
                      those this call found free in t, and those the
                      agents' scripts dropped since (field l); the deadline
                      is then cleared (before ARGV[3] applies)
            unmet     demand the agents' scripts could not serve since the
                      last call (field u, read and cleared here)

Never refills (advance() at rate 0; expired leases are dropped, their
tokens counted as spent): t + H <= b after every call, as tb_claim.lua keeps
it. The key lives past every lease and the deadline, and at least 60 s
while it holds a token (lib/fed.lua); its pttl is never shortened. Uses
Redis server time only.
]]

--@ lib/locals.lua
--@ lib/num.lua
--@ lib/fmt.lua
--@ lib/fed.lua

--@ lib/bucket.lua

--@ lib/bucket_hash.lua

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key = KEYS[1]
local amt, b = num(ARGV, 1, -1e15), num(ARGV, 2, 0)
local setdl = (ARGV[3] == nil or ARGV[3] == '') and 0 or num(ARGV, 3, -1e18)
local fres = fedreserve(ARGV, 4) -- the region's reserve (lib/fed.lua)

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])

local raw = hgetall(key)
local f = raw -- the fields by name; f is only read: a new key's empty reply will do
if raw[1] ~= nil then
    f = {}
    for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
end
local t, ts, H, held, exp = advance(key, f, b, 0, now, fres)

-- The deadline: past it, what is free goes (the agents' scripts dropped
-- what they found free: field l), and it is cleared.
local dl, lost = tonumber(f.dl) or 0, tonumber(f.l) or 0
if dl > 0 and now >= dl then
    local free = floor(t)
    if free > 0 then t, lost = t - free, lost + free end
    dl = 0
end
if setdl > 0 then dl = now + floor(setdl) * 1000 elseif setdl < 0 then dl = 0 end
local del = {}
if f.l then del[#del + 1] = 'l' end
if f.dl and dl == 0 then del[#del + 1] = 'dl' end
local unmet = tonumber(f.u) or 0
if f.u then del[#del + 1] = 'u' end

-- Move: deposits within the room under b - H, withdrawals within the whole
-- free tokens.
local moved = 0
if amt > 0 then
    local room = floor(b - H) - floor(t)
    moved = min(amt, room)
    moved = moved > 0 and moved or 0
elseif amt < 0 then
    local free = floor(t)
    moved = -max(0, min(-amt, free))
end
t = t + moved

if raw[1] ~= nil or moved ~= 0 or dl > 0 then
    if del[1] then redis.call('HDEL', key, unpack(del)) end
    if dl > 0 then
        redis.call('HSET', key, 't', fmt[t], 'ts', fmt[ts], 'dl', fmt[dl])
    else
        redis.call('HSET', key, 't', fmt[t], 'ts', fmt[ts])
    end
    local emax = now
    for _, e in next, exp do emax = e > emax and e or emax end
    local pttl = fedttl(ceil((emax - now) / 1000) + 1000, t >= 1 or t < fres, dl, now)
    local cur = redis.call('PTTL', key)
    if cur < pttl then redis.call('PEXPIRE', key, fmt[pttl]) end
end
return {moved, max(0, floor(t)), H, dl, lost, unmet}
