-- SPDX-License-Identifier: Apache-2.0
-- lib/bucket_times.lua - times(): a token bucket decision's retry, reset,
-- remaining and the key's TTL (tb_claim, tb_exact). Included by
-- lua/assemble.sh (--@ lib/bucket_times.lua).

-- The reply's times and the key's TTL after a decision left t (real), ts and
-- H, P (tokens and rate the leases hold), for a request of need tokens; emin
-- and emax the first and last lease expiry (emin nil: none; emax >= now), bu
-- the end of a block (nil: none; started: this call began it, of block ms).
-- Returns retry_ms (0: would pass now), reset_ms, remaining and the key's
-- pttl, all whole. The key outlives every lease and the time to refill
-- fully: after that it is equivalent to a missing (full) bucket.
local function times(t, ts, H, P, b, rate, now, need, emin, emax, bu, block, started)
    local rate_ms = rate * 1000
    local free_ms = rate > P and (rate - P) * 1000 or rate_ms -- refill of t (after the leases, if none)
    local retry = 0
    if t < need then
        retry = (need - t) / free_ms
        if (b - H < need or rate <= P) and emin then retry = max(retry, (emin - now) / 1000) end
    end
    -- Lines run on every call write max(a, b) as `b > a and b or a` and min(a, b)
    -- as `b < a and b or a`: what math.max and math.min return, without a call
    -- (a call costs more than the arithmetic around it).
    local reset = b - H - t
    reset = (reset > 0 and reset or 0) / free_ms -- max(0, b - H - t) / free_ms
    local life, life_e = (ts - now) / 1000 + (b - t) / rate_ms, (emax - now) / 1000
    life = life_e > life and life_e or life
    if P > 0 then life = (emax - now) / 1000 + (b - t) / rate_ms end
    local pttl = ceil(life) + 1000
    local left = floor(t)
    if bu then -- blocked: retry and reset at its end; the key lives past it
        local bleft = ceil((bu - now) / 1000)
        -- (the whole block only when this call started it: the agent counts those)
        if bleft >= block and block > 1 and not started then bleft = block - 1 end
        retry, left = bleft, 0
        reset = reset > bleft and reset or bleft
        pttl = pttl > bleft + 1000 and pttl or bleft + 1000
    end
    return retry == 0 and 0 or ceil(retry), ceil(reset), left > 0 and left or 0,
           1e15 < pttl and 1e15 or pttl
end
