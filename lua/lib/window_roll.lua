-- SPDX-License-Identifier: Apache-2.0
-- lib/window_roll.lua - the sw_* scripts' window at Redis' now: now, its
-- window k (shifted by off), the key's fields f (raw: HGETALL's reply), its
-- window W rolled forward to k with counts c and p (p = 0 in fixed mode),
-- and left, the us to k's end. Needs key, wus, off and fixed set, and
-- lib/window.lua before it. Included by lua/assemble.sh (--@ lib/window_roll.lua).

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local k = floor((now - off) / wus) -- guard the division's rounding
if k * wus + off > now then k = k - 1 elseif (k + 1) * wus + off <= now then k = k + 1 end

local raw = redis.call('HGETALL', key)
local f = raw -- the fields by name; f is only read: a new key's empty reply will do
if raw[1] ~= nil then
    f = {}
    for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end
end

-- Roll the windows forward to k (never back: a window ahead of k, left by a
-- step back of the clock, is first rebased to it, lib/window.lua).
local W, c, p = tonumber(f.w), tonumber(f.c) or 0, tonumber(f.p) or 0
if W and k < W then rebase_window(key, f, W, k); W = k end -- the clock stepped back
if W == nil or k > W + 1 then
    W, c, p = k, 0, 0
elseif k == W + 1 then
    W, c, p = k, 0, c
end
if fixed then p = 0 end -- nothing carries over
local left = min(wus, max(0, (W + 1) * wus + off - now)) -- us to the boundary
