-- SPDX-License-Identifier: Apache-2.0
--[[ sw_exact.lua - one sliding window counter decision (rules with lease = off).
Shares the key layout of sw_claim.lua, so exact calls and leases can act on
the same counter (leased units are already counted in c).

KEYS[1]   the counter hash (w, c, p, h:<agent>, w:<agent>; see sw_claim.lua)
ARGV[1]   limit N      } at most N per window of period ms (estimated)
ARGV[2]   period, ms   }
ARGV[3]   burst: ignored (same ARGV as tb_exact.lua)
ARGV[4]   n: units this request costs (>= 0; default 1). n = 0 is a check:
          allowed when 1 would be, counting nothing. n > N is never allowed.
ARGV[5]   optional (after n): block_for, ms (>= 0; absent or 0: none). A
          denial (of an n that fits) records blocked-until = now +
          block_for (field bu); until then every call is denied, takes
          nothing, and answers remaining 0, retry_ms to the block's end.
ARGV[6]   mode: "1" = fixed window (optional; absent or "0": sliding): N per
          window, windows [k x period + offset, (k + 1) x period + offset) of
          Redis time, nothing carried over from the previous one (p stays 0)
ARGV[7]   offset, ms (with mode 1): the windows' shift, taken mod period
Returns   {allowed, remaining, retry_ms, reset_ms, time_ms}
            allowed   1 when estimate + n <= N and n was counted, else 0
            remaining max(0, floor(N - estimate)) after the call
            retry_ms  0 when another request of n would pass now, else ms until
                      the estimate falls to N - n (if nothing more is counted);
                      one period when n > N (it never passes)
            reset_ms  ms until the estimate falls to 0
            time_ms   Redis' time of the call, ms: sw_refund.lua gives back
                      only while the window of this time is current

Invariant: c <= N after every call.
Uses Redis server time only.
]]

--@ lib/locals.lua
--@ lib/num.lua
--@ lib/fmt.lua

--@ lib/window.lua

-- per call. Everything above takes its input as parameters: lua/batch.sh defines it
-- once per batch, and runs what follows once per operation.
local key = KEYS[1]
local limit, period, n = num(ARGV, 1, 1), num(ARGV, 2, 1), num(ARGV, 4, 0, 1)
local need = n > 0 and n or 1 -- a check (n = 0) passes where 1 would
local wus = period * 1000 -- window length, microseconds
-- Fixed mode (ARGV[6] = 1): windows shifted by ARGV[7] ms, no weight from
-- the previous window: at most N per window, counted to the boundary.
local fixed = ARGV[6] == '1'
local off = fixed and (num(ARGV, 7, 0) * 1000) % wus or 0

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local k = floor((now - off) / wus) -- guard the division's rounding
if k * wus + off > now then k = k - 1 elseif (k + 1) * wus + off <= now then k = k + 1 end

-- Roll the windows forward to k (never back: a window ahead, left by a step
-- back of the clock, is first rebased to k). Stale leases are left to
-- sw_claim.lua: they do not change the count.
local f = redis.call('HMGET', key, 'w', 'c', 'p', 'bu')
local W, c, p = tonumber(f[1]), tonumber(f[2]) or 0, tonumber(f[3]) or 0
if W and k < W then rebase_window(key, nil, W, k); W = k end -- the clock stepped back
if W == nil or k > W + 1 then
    W, c, p = k, 0, 0
elseif k == W + 1 then
    W, c, p = k, 0, c
end
if fixed then p = 0 end -- nothing carries over
local left = min(wus, max(0, (W + 1) * wus + off - now))

-- Penalty box (block_for, ARGV[5] in ms; absent or 0: none): until the
-- Redis time in field bu, every call is denied and takes nothing.
local block = num(ARGV, 5, 0, 0)
local bu = block > 0 and tonumber(f[4]) or nil
-- A block ends block_ms after the denial that began it: one further away was
-- left by a step back of the clock (or a reload that shortened block_for).
if bu and bu > now + block * 1000 then
    bu = now + block * 1000
    redis.call('HSET', key, 'bu', fmt[bu])
end
if bu and bu <= now then bu = nil end
local est = p * left / wus + c
local allowed = 0
if not bu and est + need <= limit then c, est, allowed = c + n, est + n, 1 end
redis.call('HSET', key, 'w', fmt[W], 'c', fmt[c], 'p', fmt[p])
-- A denial starts a block, unless n never fits (the client's error).
local started = block > 0 and not bu and allowed == 0 and need <= limit
if started then
    bu = now + block * 1000
    redis.call('HSET', key, 'bu', fmt[bu])
end

--@ lib/window_wait.lua
local pttl = ceil((fixed and left or left + wus) / 1000) + 1000
local remaining = max(0, floor(limit - est))
-- n over N never fits: one period, as the agent's own buckets say
local retry, reset = need > limit and period or ceil(wait_us(limit - need) / 1000), ceil(wait_us(0) / 1000)
if bu then -- blocked: retry and reset at its end; the key lives past it
    local bleft = ceil((bu - now) / 1000)
    -- (the whole block only when this call started it: the agent counts those)
    if bleft >= block and block > 1 and not started then bleft = block - 1 end
    retry, remaining, reset = bleft, 0, max(reset, bleft)
    pttl = max(pttl, bleft + 1000)
end
redis.call('PEXPIRE', key, fmt[pttl])
return {allowed, remaining, retry, reset, floor(now / 1000)}
