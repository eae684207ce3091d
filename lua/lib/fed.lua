-- SPDX-License-Identifier: Apache-2.0
-- lib/fed.lua - a fed bucket (limit = -N: the regional bucket of a scope =
-- global rule, lua/README.md "Fed buckets"): fedrate(), fedreserve(),
-- fedgate(), fedttl() and FED_KEEP, for the tb_* scripts (after
-- lib/num.lua). Included by
-- lua/assemble.sh (--@ lib/fed.lua).

-- A fed bucket never refills by itself (its scripts advance it at rate 0,
-- and advance() starts a missing one empty): it holds only what the region's
-- claimer deposited (tb_pool.lua). The rule's rate N / period only answers
-- retry_ms and reset_ms. fedrate(): that rate, tokens per microsecond, of a
-- limit ARGV[i] = -N (N >= 1, floored); any other limit below 1 is num()'s
-- error for it (a limit is >= 1).
local function fedrate(ARGV, i, period)
    local v = tonumber(ARGV[i])
    if v == nil or v > -1 then num(ARGV, i, 1) end -- (raises: not a limit)
    return floor(-v) / (period * 1000)
end
-- The region's reserve s of a fed bucket (ARGV[i], optional: absent or
-- empty is 0): what a missing key holds, not nothing. Every region keeps s
-- tokens of every key, which the global bucket does not hand out (its
-- claimers run it at b - regions x s), so that a key new to the region is
-- decided at once; what the region spent below s its claimer claims back
-- from the global bucket. A key with less than s free is kept (fedttl's
-- keep): made again it would hold s, a debt forgiven (free, not free and
-- leased: an agent never returns a lease it spent).
local function fedreserve(ARGV, i)
    local v = ARGV[i]
    if v == nil or v == '' then return 0 end
    return num(ARGV, i, 0)
end
-- The deadline dl (Redis time, microseconds; tb_pool.lua writes it): from it
-- on the bucket grants nothing. fedgate() drops the whole tokens free in t
-- (t before the grant), counting them in field l (tb_pool.lua reports them
-- as lost); dl stays until tb_pool.lua clears it, so tokens given back after
-- it (tb_return, tb_refund) are dropped too. Returns t.
local function fedgate(key, f, t, now)
    local dl = tonumber(f.dl)
    if dl == nil or dl > now then return t end
    local lost = floor(t)
    if lost > 0 then
        t = t - lost
        redis.call('HINCRBY', key, 'l', lost)
    end
    return t
end
-- The key's pttl, at least pttl: a fed key that expires loses the tokens
-- deposited in it and its unmet demand (under-admission only), so it lives
-- past its deadline, and at least FED_KEEP ms while it holds a whole token
-- or unmet demand, or less than its reserve free (keep) (the caller's pttl
-- already outlives every lease).
local FED_KEEP = 60000
local function fedttl(pttl, keep, dl, now)
    dl = tonumber(dl)
    if dl and dl > now then
        local d = ceil((dl - now) / 1000) + 1000
        if d > pttl then pttl = d end
    end
    if keep and pttl < FED_KEEP then pttl = FED_KEEP end
    return pttl
end
