-- SPDX-License-Identifier: Apache-2.0
--[[ sw_reset.lua - reset one client's sliding window counter (the agent's
POST /reset): both windows emptied, except the units leases still hold.

KEYS[1]   the counter hash, same layout as sw_claim.lua (w, c, p, h:<agent>, w:<agent>)
ARGV[1]   limit N      } at most N per window of period ms (estimated)
ARGV[2]   period, ms   }
ARGV[3]   burst: ignored (same ARGV as tb_reset.lua)
ARGV[4]   mode: "1" = fixed window (optional; absent or "0": sliding): N per
          window, windows [k x period + offset, (k + 1) x period + offset) of
          Redis time, nothing carried over from the previous one (p stays 0)
ARGV[5]   offset, ms (with mode 1): the windows' shift, taken mod period
Returns   {remaining, held, holders, before}
            remaining max(0, floor(N - estimate)) after the reset
            held      units held by leases of the current window, every agent's
            holders   number of agents holding such a lease
            before    max(0, floor(N - estimate)) just before the reset

A lease of the current window is not taken back: its agent may spend its
units until the window ends, without asking Redis, and a return takes its
unspent units off c. So the reset sets p = 0 and c = held (the units charged
for those leases) rather than c = 0: held <= c <= N still holds after it.
Leases of older windows are dropped first, as sw_claim drops them. With no
lease left the key is deleted: a missing counter is an empty one. Uses Redis
server time only.
]]

--@ lib/locals.lua
--@ lib/num.lua
--@ lib/fmt.lua

--@ lib/window.lua

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key = KEYS[1]
local limit, period = num(ARGV, 1, 1), num(ARGV, 2, 1)
local wus = period * 1000 -- window length, microseconds
-- Fixed mode (ARGV[4] = 1): windows shifted by ARGV[5] ms, no weight from
-- the previous window: at most N per window, counted to the boundary.
local fixed = ARGV[4] == '1'
local off = fixed and (num(ARGV, 5, 0) * 1000) % wus or 0

--@ lib/window_roll.lua
local before = max(0, floor(limit - (p * left / wus + c)))

-- Leases of older windows are over: forget them (their units stay counted).
local H, holders = 0, 0
for fk, v in next, f do
    if string.sub(fk, 1, 2) == 'h:' then
        local a = string.sub(fk, 3)
        if tonumber(f['w:' .. a]) == W then
            H, holders = H + tonumber(v), holders + 1
        else
            redis.call('HDEL', key, fk, 'w:' .. a)
        end
    end
end

if holders == 0 then
    redis.call('DEL', key)
    return {limit, 0, 0, before}
end
c, p = H, 0
redis.call('HSET', key, 'w', fmt[W], 'c', fmt[c], 'p', fmt[p])
if f.bu then redis.call('HDEL', key, 'bu') end -- the penalty box is lifted too
redis.call('PEXPIRE', key, fmt[ceil((fixed and left or left + wus) / 1000) + 1000])
return {max(0, floor(limit - c)), H, holders, before}
