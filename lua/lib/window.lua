-- SPDX-License-Identifier: Apache-2.0
-- lib/window.lua - rebase_window(): a sliding or fixed window left ahead by a
-- step back of Redis' clock moved back to now's (the sw_* scripts, after
-- lib/fmt.lua). Included by lua/assemble.sh (--@ lib/window.lua).

-- A step back of Redis' clock across a window boundary (NTP stepping it, a
-- VM restored, a failover to a master behind) leaves the key's window W ahead
-- of now's window k. The count moves to window k as it is: c and p kept, so
-- nothing counted is lost and nothing counts twice (c becomes p at k's end, as
-- it would have at W's). Leases charged in W move with it (w:<agent> = k);
-- those of older windows, whose agents have stopped, are dropped (their units
-- stay counted), so that none of them reads as current. Without it window W
-- lasted until the clock passed it again: a key at its limit locked out for
-- the step's length. f: the key's fields by name, updated too (nil: read
-- here). Rare: nothing on the paths every call runs.
local function rebase_window(key, f, W, k)
    if f == nil then
        f = {}
        local raw = redis.call('HGETALL', key)
        for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
    end
    for fk, v in next, f do
        if string.sub(fk, 1, 2) == 'w:' then
            local hk = 'h:' .. string.sub(fk, 3)
            if tonumber(v) == W then
                f[fk] = fmt[k] -- (existing fields only: allowed while next() walks f)
                redis.call('HSET', key, fk, f[fk])
            else
                f[fk], f[hk] = nil, nil
                redis.call('HDEL', key, fk, hk)
            end
        end
    end
end
