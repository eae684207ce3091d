-- SPDX-License-Identifier: Apache-2.0
-- lib/num.lua - num(ARGV, i, min [, default]): ARGV[i] as a whole number
-- (floored) of at least min, ARGV[i] absent giving default (nil: an error);
-- the error names the script (@SCRIPT@). Needs the locals floor and huge.
-- Included by lua/assemble.sh (--@ lib/num.lua).

local ints = {}
local function num(ARGV, i, min, default)
    local s = ARGV[i] or default
    local v = ints[s] -- floor(tonumber(s)) of an s that passed (< 0: a fed limit, lib/fed.lua)
    if v ~= nil and v >= min then return v end -- (floor(x) >= min iff x >= min)
    v = tonumber(s)
    if v == nil or v ~= v or v < min or v == huge then
        error('@SCRIPT@: bad ARGV[' .. i .. ']')
    end
    v = floor(v)
    ints[s] = v
    return v
end
