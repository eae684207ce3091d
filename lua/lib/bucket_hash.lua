-- SPDX-License-Identifier: Apache-2.0
-- lib/bucket_hash.lua - hgetall(): a token bucket as hash fields, a string
-- bucket turned into its hash first, for the tb_* scripts that write fields.
-- Included by lua/assemble.sh (--@ lib/bucket_hash.lua).

-- HGETALL of the bucket. tb_exact.lua keeps a key no lease was claimed on
-- as a string "1 t ts [bu]": this script writes hash fields, so such a key
-- becomes the hash of the same fields, with its TTL, first (atomically:
-- within this call). A key never mixes the two. A string "2 t px" is a new
-- key the agent decided with a plain SET NX PX px (lua/README.md): its ts is
-- its creation on Redis' clock, PEXPIRETIME - px, plus 1 ms (the creation
-- may have been up to 1 ms later: less refill, never more).
local function hgetall(key)
    local raw = redis.pcall('HGETALL', key)
    if raw.err == nil then return raw end
    local s = redis.call('GET', key) -- (fails unless a string: not a bucket)
    local t, ts, bu = string.match(s, '^1 (%S+) (%S+) ?(%S*)$')
    if t == nil then
        local px
        t, px = string.match(s, '^2 (%S+) (%d+)$')
        local e = t and redis.call('PEXPIRETIME', key) or -1
        if e < 0 then error('bad bucket string') end
        ts, bu = string.format('%d', (e - tonumber(px) + 1) * 1000), ''
    end
    local ttl = redis.call('PTTL', key)
    raw = {'t', t, 'ts', ts}
    if bu ~= '' then raw[5], raw[6] = 'bu', bu end
    redis.call('DEL', key)
    redis.call('HSET', key, unpack(raw))
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
    return raw
end
