-- SPDX-License-Identifier: Apache-2.0
-- lib/fmt.lua - fmt[x]: the number x as the text a script stores, exactly
-- string.format('%.17g', x), remembered. Needs the locals floor and format.
-- Included by lua/assemble.sh (--@ lib/fmt.lua).

local fmt = setmetatable({}, {__index = function(strs, x) -- fmt[x]: format('%.17g', x)
    local s
    if x == floor(x) and x < 2 ^ 53 and x > -2 ^ 53 and x ~= 0 then
        s = format('%d', x) -- the same text for whole numbers below 2^53, and cheaper
    else
        s = format('%.17g', x)
    end
    if x ~= 0 and x == x then strs[x] = s end -- 0 and -0 are one key; NaN none
    return s
end})
