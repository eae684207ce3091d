/* SPDX-License-Identifier: Apache-2.0 */
/* sim_region_pool.c - spoa-sim --regions: the claimer's regional script
 * (its Lua text) and its call on a region's bucket of one key, below both
 * sim_region.c (the claimer) and sim_region_fail.c (the failures), which
 * call it. */
#include "tools/sim_region_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/strbuf.h"
#include "store/script.h"
#include "tools/sim_fleet_int.h"
#include "tools/sim_redis.h"

/* The claimer's only regional script: move amt tokens into (amt > 0) or out
 * of (amt < 0) the bucket's free tokens, within what is free to take and
 * what b - H leaves room for (b: ARGV[2]); amt 0 only reads. ARGV[3] > 0
 * stores the deadline dl (no grant from then on: the free tokens go, as
 * the regional script past it would refuse them), < 0 clears it. Returns
 * {moved, floor(t), H, dl, lost}. Starts a missing key empty. */
const char sim_region_pool_lua[] =
    "local key, amt, b = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])\n"
    "local setdl = tonumber(ARGV[3]) or 0\n"
    "local tm = redis.call('TIME')\n"
    "local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])\n"
    "local raw = redis.call('HGETALL', key)\n"
    "local f = {}\n"
    "for i = 1, #raw, 2 do f[raw[i]] = raw[i + 1] end\n"
    "local t, H, dl, lost = tonumber(f.t) or 0, 0, tonumber(f.dl) or 0, 0\n"
    "if dl > 0 and now >= dl then\n" /* past the deadline: what is free goes */
    "  lost = math.floor(t)\n"
    "  t = t - lost\n"
    "  redis.call('HSET', key, 't', string.format('%.17g', t))\n"
    "  redis.call('HDEL', key, 'dl')\n"
    "  dl = 0\n"
    "end\n"
    "if setdl > 0 then dl = setdl redis.call('HSET', key, 'dl', string.format('%d', dl))\n"
    "elseif setdl < 0 and dl > 0 then dl = 0 redis.call('HDEL', key, 'dl') end\n"
    "for k, v in pairs(f) do\n"
    "  if string.sub(k, 1, 2) == 'h:' then\n"
    "    local e = tonumber(f['e:' .. string.sub(k, 3)]) or 0\n"
    "    if e > now then H = H + tonumber(v) end\n"
    "  end\n"
    "end\n"
    "local moved = 0\n"
    "if amt > 0 then\n"
    "  local room = math.floor(b - H) - math.floor(t)\n" /* (t's dust: the tiny own refill) */
    "  moved = math.max(0, math.min(amt, room))\n"
    "elseif amt < 0 then\n"
    "  moved = -math.max(0, math.min(-amt, math.floor(t)))\n"
    "end\n"
    "if moved ~= 0 or raw[1] == nil then\n"
    "  t = math.min(t + moved, math.max(b - H, 0))\n"
    "  redis.call('HSET', key, 't', string.format('%.17g', t))\n"
    "  if f.ts == nil then redis.call('HSET', key, 'ts', string.format('%d', now)) end\n"
    "end\n"
    "return {moved, math.floor(t), math.floor(H), dl, lost}\n";

size_t sim_region_key_name(uint32_t k, int global, char *buf)
{
    return (size_t)snprintf(buf, KEYBUF, KEY_PREFIX "%st2:" RULE_NAME ":%u", global ? "g:" : "", k);
}

/* The pool script on region ri's bucket of key k. */
int sim_region_pool(struct sim *s, struct region *R, uint32_t k, int64_t amt, uint64_t b,
                    int64_t dl, int64_t out[5])
{
    char key[KEYBUF], a[32], bb[32], d[32];
    const char *keys[1] = {key}, *argv[3] = {a, bb, d};
    size_t kl = sim_region_key_name(k, 0, key), al[3], n = 0;
    const char *err;

    al[0] = (size_t)snprintf(a, sizeof(a), "%lld", (long long)amt);
    al[1] = (size_t)snprintf(bb, sizeof(bb), "%llu", (unsigned long long)b);
    al[2] = (size_t)snprintf(d, sizeof(d), "%lld", (long long)dl);
    int64_t v[5] = {0, 0, 0, 0, 0};
    if (sim_redis_eval(R->redis, R->pool_script, s->now, 1, keys, &kl, dl ? 3 : 2, argv, al, v, 5,
                       &n, &err) < 0 ||
        n != 5) {
        if (s->res->redis_errors++ == 0)
            snprintf(s->res->redis_error, sizeof(s->res->redis_error), "pool: %s",
                     n != 5 ? "reply" : err);
        memset(out, 0, 5 * sizeof(*out));
        return -1;
    }
    memcpy(out, v, sizeof(v));
    return 0;
}
