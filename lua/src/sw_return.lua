-- SPDX-License-Identifier: Apache-2.0
--[[ sw_return.lua - close the caller's lease on a shared sliding window
counter: report what it spent and take the unspent units off the count.

KEYS[1]   the counter hash, same layout as sw_claim.lua (w, c, p, h:<agent>, w:<agent>)
ARGV[1]   agent id (non-empty)
ARGV[2]   limit N      } at most N per window of period ms (estimated)
ARGV[3]   period, ms   }
ARGV[4]   burst: ignored (same ARGV as tb_return.lua)
ARGV[5]   used: units spent from the lease since the last report (capped at held)
ARGV[6]   mode: "1" = fixed window (optional; absent or "0": sliding): N per
          window, windows [k x period + offset, (k + 1) x period + offset) of
          Redis time, nothing carried over from the previous one (p stays 0)
ARGV[7]   offset, ms (with mode 1): the windows' shift, taken mod period
Returns   {granted, remaining, held, holders, retry_ms, reset_ms, lease_ms, mine, 0, 0}
          as sw_claim.lua, with granted = 0, lease_ms = 0 and mine = 0: the
          caller's h:/w: fields are deleted and, when they were charged in the
          current window, its held - used units are subtracted from c. Units of
          an older window are not subtracted (they stay counted).

Invariant: c <= N and the sum of current-window holdings <= c after every call.
Uses Redis server time only.
]]

--@ lib/locals.lua
--@ lib/num.lua
--@ lib/fmt.lua

--@ lib/window.lua

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key, agent = KEYS[1], ARGV[1]
if agent == nil or agent == '' then error('sw_return: empty agent id') end
local limit, period, used = num(ARGV, 2, 1), num(ARGV, 3, 1), num(ARGV, 5, 0)
local wus = period * 1000 -- window length, microseconds
-- Fixed mode (ARGV[6] = 1): windows shifted by ARGV[7] ms, no weight from
-- the previous window: at most N per window, counted to the boundary.
local fixed = ARGV[6] == '1'
local off = fixed and (num(ARGV, 7, 0) * 1000) % wus or 0

--@ lib/window_roll.lua

-- Forget leases of older windows; keep the current ones.
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

-- Close the caller's lease: its unspent units leave the count.
local mine = held[agent] or 0
c = max(0, c - (mine - min(used, mine)))
held[agent] = nil
redis.call('HSET', key, 'w', fmt[W], 'c', fmt[c], 'p', fmt[p])
redis.call('HDEL', key, 'h:' .. agent, 'w:' .. agent)

local est = p * left / wus + c
--@ lib/window_wait.lua
local H, holders = 0, 0
for _, h in next, held do H, holders = H + h, holders + 1 end
redis.call('PEXPIRE', key, fmt[ceil((fixed and left or left + wus) / 1000) + 1000])
return {0, max(0, floor(limit - est)), H, holders,
        ceil(wait_us(limit - 1) / 1000), ceil(wait_us(0) / 1000), 0, 0, 0, 0}
