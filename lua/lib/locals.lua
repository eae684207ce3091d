-- SPDX-License-Identifier: Apache-2.0
-- lib/locals.lua - the library functions the tb_* and sw_* scripts call, as
-- locals (a local costs less than a global lookup), and why the helpers
-- after it remember. Included by lua/assemble.sh (--@ lib/locals.lua).

-- num(ARGV, i, min [, default]) and fmt[x] (x as text, exact) remember the
-- numbers they convert: the operations of a batch repeat the same few
-- (rules, Redis time), and strtod() and '%.17g' cost more than the
-- arithmetic. Calls, even of math.min, cost more than the lines around them:
-- the hot paths make few (fmt is a table: a number already seen costs no
-- call).
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local huge, format = math.huge, string.format
