-- SPDX-License-Identifier: Apache-2.0
-- lib/window_wait.lua - wait_us(): per call, the time until a window's
-- estimate falls to a threshold (sw_claim, sw_exact, sw_return: below their
-- -- per call line, on that call's locals). Included by lua/assemble.sh.

-- Microseconds until the estimate falls to thr, if nothing more is charged:
-- p decays over the rest of this window, then c decays over the next one.
local function wait_us(thr)
    if est <= thr then return 0 end
    if fixed then return left end -- a fixed window's count falls at the boundary
    thr = max(thr, 0)
    if c <= thr then return (est - thr) * wus / p end
    return left + (c - thr) * wus / c
end
