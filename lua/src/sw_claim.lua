-- SPDX-License-Identifier: Apache-2.0
--[[ sw_claim.lua - lease units from a shared sliding window counter, settling
the caller's previous lease in the same atomic step.

Two fixed windows of length w = period, aligned on multiples of w in Redis
time; estimate = p * (1 - elapsed / w) + c. A claim pre-charges its grant to
c, so the estimate already counts every leased unit; unspent units are taken
off c when they are returned within the window they were charged in. Units
of an older window stay counted (over-counting only), and a lease ends at the
window boundary.

KEYS[1]   the counter, one hash per (rule, client key):
            w          current window id: floor(Redis time / w)
            c, p       units counted in the current and the previous window
            h:<agent>  units pre-charged to <agent> and not yet reported
            w:<agent>  window id they were charged in
ARGV[1]   agent id (non-empty)
ARGV[2]   limit N      } at most N per window of period ms (estimated)
ARGV[3]   period, ms   }
ARGV[4]   burst: ignored (same ARGV as tb_claim.lua)
ARGV[5]   want: units requested (>= 0; 0 = only settle and report)
ARGV[6]   used: units spent from the lease since the last report (capped at held)
ARGV[7]   returned: unspent units given back (capped at held - used)
ARGV[8]   ttl, ms: longest lease (>= 1)

ARGV[9], ARGV[10]  ignored (tb_claim's rate lease; sent empty)
ARGV[11]  optional: block_for, ms, as in tb_claim.lua (field bu); sent
          (empty or 0 for none) before the mode
ARGV[12]  mode: "1" = fixed window (optional; absent or "0": sliding): N per
          window, windows [k x period + offset, (k + 1) x period + offset) of
          Redis time, nothing carried over from the previous one (p stays 0)
ARGV[13]  offset, ms (with mode 1): the windows' shift, taken mod period
Returns   {granted, remaining, held, holders, retry_ms, reset_ms, lease_ms, mine, 0, 0}
          (the last two: tb_claim's share_ppm and had; no rate leases here)
            granted   units charged and added to the caller's lease:
                      min(want, floor(N - estimate)); 0 in the window's last
                      ms, where no lease could be spent (see lease_ms)
            remaining max(0, floor(N - estimate)) after the call
            held      units held by leases of the current window, caller included
            holders   number of agents holding such a lease
            retry_ms  0 when remaining >= 1, else ms until the estimate falls
                      to N - 1 (if nothing more is charged)
            reset_ms  ms until the estimate falls to 0
            lease_ms  when the caller holds units: min(ttl, ms left in the
                      window), rounded down (0 in the window's last ms), else 0;
                      the agent may spend them until (time it SENT this call)
                      + lease_ms
            mine      units the caller now holds (0: no lease)

Invariant: c <= N and the sum of current-window holdings <= c after every call.
Uses Redis server time only; agents never send timestamps.
]]

--@ lib/locals.lua
--@ lib/num.lua
--@ lib/fmt.lua

--@ lib/window.lua

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key, agent = KEYS[1], ARGV[1]
if agent == nil or agent == '' then error('sw_claim: empty agent id') end
local limit, period = num(ARGV, 2, 1), num(ARGV, 3, 1)
local want, used, ret, ttl = num(ARGV, 5, 0), num(ARGV, 6, 0), num(ARGV, 7, 0), num(ARGV, 8, 1)
local wus = period * 1000 -- window length, microseconds
-- Fixed mode (ARGV[12] = 1): windows shifted by ARGV[13] ms, no weight from
-- the previous window: at most N per window, counted to the boundary.
local fixed = ARGV[12] == '1'
local off = fixed and (num(ARGV, 13, 0) * 1000) % wus or 0

--@ lib/window_roll.lua

-- Leases of older windows are over: forget them (their units stay counted).
local held = {}
for fk, v in next, f do
    if string.sub(fk, 1, 2) == 'h:' then
        local a = string.sub(fk, 3)
        if tonumber(f['w:' .. a]) == W then
            held[a] = tonumber(v)
        else
            redis.call('HDEL', key, fk, 'w:' .. a)
        end
    end
end

-- Settle the caller: unspent units returned in their window leave the count.
local mine = held[agent] or 0
used = min(used, mine)
ret = min(ret, mine - used)
mine = mine - used - ret
c = max(0, c - ret)

-- Penalty box (block_for, ARGV[11] in ms; absent or 0: none): until the
-- Redis time in field bu, every call is denied and grants nothing.
local block = (ARGV[11] == nil or ARGV[11] == '') and 0 or num(ARGV, 11, 0)
local bu = block > 0 and tonumber(f.bu) or nil
-- A block ends block_ms after the denial that began it: one further away was
-- left by a step back of the clock (or a reload that shortened block_for).
if bu and bu > now + block * 1000 then
    bu = now + block * 1000
    redis.call('HSET', key, 'bu', fmt[bu])
end
if bu and bu <= now then bu = nil end
-- A blocked caller's lease ends here, its units counted as spent (they stay
-- in c, as when its window ends: it may have spent some since it sent this).
if bu then want, mine = 0, 0 end

-- Grant what fits under the limit, and pre-charge it. Not in the window's
-- last millisecond: the lease would end there (lease_ms 0), so the units
-- would be charged to this window and never spent, and the agent, still
-- short, would claim and be charged again. Its next claim lands in the next
-- window instead.
local est = p * left / wus + c
local g = 0
if left >= 1000 then g = max(0, min(want, floor(limit - est))) end
-- A request denied here (want > 0, nothing fits) starts a block; not in the
-- window's last millisecond, where nothing is granted anyway.
local started = block > 0 and not bu and want > 0 and g == 0 and left >= 1000
if started then
    bu = now + block * 1000
    redis.call('HSET', key, 'bu', fmt[bu])
end
c, mine, est = c + g, mine + g, est + g
held[agent] = mine
redis.call('HSET', key, 'w', fmt[W], 'c', fmt[c], 'p', fmt[p])
if mine > 0 then
    redis.call('HSET', key, 'h:' .. agent, fmt[mine], 'w:' .. agent, fmt[W])
else
    held[agent] = nil
    redis.call('HDEL', key, 'h:' .. agent, 'w:' .. agent)
end

--@ lib/window_wait.lua
local H, holders = 0, 0
for _, h in next, held do H, holders = H + h, holders + 1 end
local pttl = ceil((fixed and left or left + wus) / 1000) + 1000
local remaining, retry, reset = max(0, floor(limit - est)), ceil(wait_us(limit - 1) / 1000),
    ceil(wait_us(0) / 1000)
if bu then -- blocked: retry and reset at its end; the key lives past it
    local bleft = ceil((bu - now) / 1000)
    -- (the whole block only when this call started it: the agent counts those)
    if bleft >= block and block > 1 and not started then bleft = block - 1 end
    retry, remaining, reset = bleft, 0, max(reset, bleft)
    pttl = max(pttl, bleft + 1000)
end
redis.call('PEXPIRE', key, fmt[pttl])
return {g, remaining, H, holders, retry, reset,
        mine > 0 and floor(min(ttl * 1000, left) / 1000) or 0, mine, 0, 0}
