-- SPDX-License-Identifier: Apache-2.0
-- lib/num3.lua - num3(): three of num()'s numbers in one call (after
-- lib/num.lua). Included by lua/assemble.sh.

-- num() of ARGV[i], ARGV[i + 1] and ARGV[i + 2], with these minimums: one call
-- where all three were seen before.
local function num3(ARGV, i, m1, m2, m3)
    local x, y, z = ints[ARGV[i]], ints[ARGV[i + 1]], ints[ARGV[i + 2]]
    if x and x >= m1 and y and y >= m2 and z and z >= m3 then return x, y, z end
    return num(ARGV, i, m1), num(ARGV, i + 1, m2), num(ARGV, i + 2, m3)
end
