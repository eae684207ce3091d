-- SPDX-License-Identifier: Apache-2.0
-- lib/bucket.lua - the token bucket's advance to now: refill(), by_expiry(),
-- rebase() and advance(), for the tb_* scripts (after lib/fmt.lua); a fed
-- bucket (lib/fed.lua) advances at rate 0. Included
-- by lua/assemble.sh (--@ lib/bucket.lua).

-- Advance to now. The refill never lifts t above b - H, where H is what
-- the leases held AT THAT TIME, and runs at r - P, where P is the rate the
-- rate leases (q:<agent>) refill on their agents AT THAT TIME: a lease that
-- expired since the last call lifts the cap and gives its rate back only from
-- its expiry on. So expiries are applied in time order (refill up to each,
-- then drop it: its tokens count as spent), then the refill runs on to now.
-- Refilling the whole gap against the final cap would bank refill that was
-- never allowed while those tokens were held, and let b + H through at once
-- when the lease ends.
local function refill(t, ts, to, cap, r) -- t from ts on to `to`, at rate r, under cap
    if to > ts then -- ts never goes back (advance() rebases a ts ahead of now)
        if t < cap and r > 0 then t = min(cap, t + r * (to - ts)) end
        ts = to
    end
    return t, ts
end
local function by_expiry(x, y) return x.e < y.e end
-- A step back of Redis' clock (NTP stepping it, a VM restored, a failover to
-- a master behind) leaves ts, the time of the key's last call, ahead of now,
-- by d. Every time the key stores moves back by d with it, as if the clock had
-- not stepped: the refill restarts from now with the tokens there are (none for
-- the step), each lease keeps the life it had left (e:<agent> was set at a
-- call no later than ts, so it ends by now + ttl), and a block (bu) or a key
-- at its limit (x, xt) ends when it would have. Without it no refill came
-- until the clock passed ts again: a key at its limit locked out for the
-- step's length. A hash gets the moved times here (the caller writes ts); a
-- string's bu goes with the string tb_exact writes. Rare: one TYPE call.
local function rebase(key, f, d)
    local kv = {}
    for k, v in next, f do
        if k == 'bu' or k == 'x' or k == 'xt' or string.sub(k, 1, 2) == 'e:' then
            local s = fmt[tonumber(v) - d]
            f[k] = s -- (an existing field: allowed while next() walks f)
            local n = #kv
            kv[n + 1], kv[n + 2] = k, s
        end
    end
    if kv[1] and redis.call('TYPE', key).ok == 'hash' then redis.call('HSET', key, unpack(kv)) end
end
-- held, exp and share of a key without leases (most keys): NONE, never written.
local NONE = {}
local function advance(key, f, b, rate, now, t0)
    local t, ts = f.t, f.ts -- (no tonumber() calls on a new key)
    t, ts = t and tonumber(t), ts and tonumber(ts) or now
    -- new bucket: full (fed, rate 0: empty, or its reserve t0)
    if t == nil then t = t0 or (rate > 0 and b or 0) end
    if ts > now then -- the clock stepped back: see rebase()
        rebase(key, f, ts - now)
        ts = now
    end
    local leases, H, P = nil, 0, 0
    for k, v in next, f do
        if string.sub(k, 1, 2) == 'h:' then
            local a = string.sub(k, 3)
            local l = {a = a, h = tonumber(v), q = tonumber(f['q:' .. a]) or 0,
                       e = tonumber(f['e:' .. a]) or 0}
            H, P = H + l.h, P + l.q
            leases = leases or {}
            leases[#leases + 1] = l
        end
    end
    local held, exp, share = NONE, NONE, NONE
    if leases then -- none on most keys
        held, exp, share = {}, {}, {}
        table.sort(leases, by_expiry)
        for _, l in ipairs(leases) do
            if l.e <= now then
                t, ts = refill(t, ts, l.e, b - H, rate - P)
                H, P = H - l.h, P - l.q
                redis.call('HDEL', key, 'h:' .. l.a, 'e:' .. l.a, 'q:' .. l.a, 'qn:' .. l.a,
                           'hn:' .. l.a, 'd:' .. l.a)
            else
                held[l.a], exp[l.a], share[l.a] = l.h, l.e, l.q
            end
        end
    end
    if now > ts then t, ts = refill(t, ts, now, b - H, rate - P) end
    if b - H < t then t = b - H end -- min(t, b - H)
    return t, ts, H, held, exp, share, P
end
