/* SPDX-License-Identifier: Apache-2.0 */
/* sim_redis.c - one Redis server in process: the agent's scripts in Lua 5.1
 * over a hash table of hashes with Redis's expiry rules. */
#include "tools/sim_redis.h"
#include "tools/sim_pool.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/util.h"
#include "scripts.h"
#include "store/script.h"

#define NO_HEAP ((size_t)-1)
#define MAX_CMD_ARGS 64 /* the scripts pass at most 5 */
#define NUMBUF 32

/* One field of a hash: the name is fixed, the value is rewritten in place. */
struct rfield {
    char *name, *val;
    uint32_t nlen, vlen, vcap;
};

struct rkey {
    struct rkey *next; /* hash chain */
    uint64_t hash;
    uint64_t expire_ms; /* absolute, Redis time; 0: none */
    size_t heap_pos;    /* in the expiry heap, or NO_HEAP */
    struct rfield *f;
    uint32_t nf, cap;
    uint32_t keylen;
    char key[];
};

struct sim_redis {
    lua_State *L;
    struct sim_pool pool;
    int ref[SIM_REDIS_SCRIPTS]; /* each script's compiled function */
    uint64_t now_us;            /* the virtual time of the call running */
    struct rkey **slots;
    size_t nslots, count, peak;
    struct rkey **heap; /* keys with a TTL, by expire_ms */
    size_t nheap, heapcap;
    char err[256];
};

/* ---- keys ------------------------------------------------------------------ */

static uint64_t key_hash(const char *k, size_t len)
{
    return util_hash_mix(util_hash(UTIL_HASH_INIT, k, len));
}

static struct rkey *key_find(struct sim_redis *r, const char *k, size_t len)
{
    uint64_t h = key_hash(k, len);
    for (struct rkey *e = r->slots[h & (r->nslots - 1)]; e; e = e->next)
        if (e->hash == h && e->keylen == len && memcmp(e->key, k, len) == 0)
            return e;
    return NULL;
}

static int grow(struct sim_redis *r)
{
    size_t n = r->nslots * 2;
    struct rkey **slots = calloc(n, sizeof(*slots));
    if (!slots)
        return -1;
    for (size_t i = 0; i < r->nslots; i++) {
        struct rkey *e = r->slots[i], *next;
        for (; e; e = next) {
            next = e->next;
            e->next = slots[e->hash & (n - 1)];
            slots[e->hash & (n - 1)] = e;
        }
    }
    free(r->slots);
    r->slots = slots;
    r->nslots = n;
    return 0;
}

static struct rkey *key_create(struct sim_redis *r, const char *k, size_t len)
{
    if (r->count >= r->nslots && grow(r) < 0)
        return NULL;
    struct rkey *e = calloc(1, sizeof(*e) + len + 1);
    if (!e)
        return NULL;
    e->hash = key_hash(k, len);
    e->keylen = (uint32_t)len;
    e->heap_pos = NO_HEAP;
    memcpy(e->key, k, len);
    e->next = r->slots[e->hash & (r->nslots - 1)];
    r->slots[e->hash & (r->nslots - 1)] = e;
    if (++r->count > r->peak)
        r->peak = r->count;
    return e;
}

/* ---- expiry heap (indexed: a key knows its position) -------------------- */

static void heap_set(struct sim_redis *r, size_t i, struct rkey *e)
{
    r->heap[i] = e;
    e->heap_pos = i;
}

static void heap_up(struct sim_redis *r, size_t i)
{
    struct rkey *e = r->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (r->heap[p]->expire_ms <= e->expire_ms)
            break;
        heap_set(r, i, r->heap[p]);
        i = p;
    }
    heap_set(r, i, e);
}

static void heap_down(struct sim_redis *r, size_t i)
{
    struct rkey *e = r->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= r->nheap)
            break;
        if (c + 1 < r->nheap && r->heap[c + 1]->expire_ms < r->heap[c]->expire_ms)
            c++;
        if (e->expire_ms <= r->heap[c]->expire_ms)
            break;
        heap_set(r, i, r->heap[c]);
        i = c;
    }
    heap_set(r, i, e);
}

static void heap_remove(struct sim_redis *r, struct rkey *e)
{
    size_t i = e->heap_pos;
    if (i == NO_HEAP)
        return;
    e->heap_pos = NO_HEAP;
    struct rkey *last = r->heap[--r->nheap];
    if (i == r->nheap)
        return;
    heap_set(r, i, last);
    heap_up(r, i);
    heap_down(r, last->heap_pos);
}

static int set_expire(struct sim_redis *r, struct rkey *e, uint64_t at_ms)
{
    uint64_t old = e->expire_ms;
    e->expire_ms = at_ms;
    if (e->heap_pos != NO_HEAP) {
        if (at_ms < old)
            heap_up(r, e->heap_pos);
        else
            heap_down(r, e->heap_pos);
        return 0;
    }
    if (r->nheap == r->heapcap) {
        size_t cap = r->heapcap ? r->heapcap * 2 : 1024;
        struct rkey **h = realloc(r->heap, cap * sizeof(*h));
        if (!h)
            return -1;
        r->heap = h;
        r->heapcap = cap;
    }
    heap_set(r, r->nheap++, e);
    heap_up(r, r->nheap - 1);
    return 0;
}

static void key_delete(struct sim_redis *r, struct rkey *e)
{
    struct rkey **link = &r->slots[e->hash & (r->nslots - 1)];
    while (*link != e)
        link = &(*link)->next;
    *link = e->next;
    heap_remove(r, e);
    for (uint32_t i = 0; i < e->nf; i++) {
        free(e->f[i].name);
        free(e->f[i].val);
    }
    free(e->f);
    free(e);
    r->count--;
}

/* Redis deletes a key once "now > expire": lazily on access and actively in
 * the background; running every due deletion before each call is the same
 * as far as any command can tell, and keeps memory to what Redis holds. */
static void expire_due(struct sim_redis *r, uint64_t now_ms)
{
    while (r->nheap > 0 && r->heap[0]->expire_ms < now_ms)
        key_delete(r, r->heap[0]);
}

/* ---- hash fields ------------------------------------------------------------- */

static struct rfield *field_find(struct rkey *e, const char *name, size_t len)
{
    for (uint32_t i = 0; i < e->nf; i++)
        if (e->f[i].nlen == len && memcmp(e->f[i].name, name, len) == 0)
            return &e->f[i];
    return NULL;
}

static int field_set_val(struct rfield *f, const char *v, size_t len)
{
    if (len + 1 > f->vcap) {
        uint32_t cap = len + 1 < 32 ? 32 : (uint32_t)len + 1;
        char *p = realloc(f->val, cap);
        if (!p)
            return -1;
        f->val = p;
        f->vcap = cap;
    }
    memcpy(f->val, v, len);
    f->val[len] = '\0';
    f->vlen = (uint32_t)len;
    return 0;
}

/* 1 when the field is new, 0 when overwritten, -1 out of memory. */
static int field_set(struct rkey *e, const char *name, size_t nlen, const char *v, size_t vlen)
{
    struct rfield *f = field_find(e, name, nlen);
    if (f)
        return field_set_val(f, v, vlen);
    if (e->nf == e->cap) {
        uint32_t cap = e->cap ? e->cap * 2 : 4;
        struct rfield *nf = realloc(e->f, cap * sizeof(*nf));
        if (!nf)
            return -1;
        e->f = nf;
        e->cap = cap;
    }
    f = &e->f[e->nf];
    memset(f, 0, sizeof(*f));
    f->name = malloc(nlen + 1);
    if (!f->name || field_set_val(f, v, vlen) < 0) {
        free(f->name);
        return -1;
    }
    memcpy(f->name, name, nlen);
    f->name[nlen] = '\0';
    f->nlen = (uint32_t)nlen;
    e->nf++;
    return 1;
}

static int field_del(struct rkey *e, const char *name, size_t nlen)
{
    struct rfield *f = field_find(e, name, nlen);
    if (!f)
        return 0;
    free(f->name);
    free(f->val);
    *f = e->f[--e->nf];
    return 1;
}

/* ---- redis.call ------------------------------------------------------------------- */

struct cmd {
    int argc;
    const char *argv[MAX_CMD_ARGS];
    size_t len[MAX_CMD_ARGS];
    char nums[MAX_CMD_ARGS][NUMBUF];
};

/* The arguments as Redis takes them from Lua: strings as they are, numbers
 * formatted with %.17g. */
static const char *read_args(lua_State *L, struct cmd *c)
{
    c->argc = lua_gettop(L);
    if (c->argc == 0)
        return "Please specify at least one argument for this redis lib call";
    if (c->argc > MAX_CMD_ARGS)
        return "sim: too many arguments";
    for (int i = 0; i < c->argc; i++) {
        if (lua_type(L, i + 1) == LUA_TNUMBER) {
            int n = snprintf(c->nums[i], NUMBUF, "%.17g", lua_tonumber(L, i + 1));
            c->argv[i] = c->nums[i];
            c->len[i] = (size_t)n;
        } else if (lua_type(L, i + 1) == LUA_TSTRING) {
            c->argv[i] = lua_tolstring(L, i + 1, &c->len[i]);
        } else {
            return "Lua redis lib command arguments must be strings or integers";
        }
    }
    return NULL;
}

static int is(const struct cmd *c, const char *name)
{
    return strlen(name) == c->len[0] && strncasecmp(c->argv[0], name, c->len[0]) == 0;
}

static struct sim_redis *self(lua_State *L)
{
    return lua_touserdata(L, lua_upvalueindex(1));
}

/* Sorted sets, for cc_acquire.lua and cc_release.lua: a hash whose fields
 * are the members, their values the scores. Only what those scripts call:
 * ZADD [XX], ZREM, ZCARD, ZREMRANGEBYSCORE, ZRANGEBYSCORE (a bound may be
 * -inf, +inf or "(x"), ZRANGE key 0 0 WITHSCORES (the least), and PTTL. */
static double score_of(const char *s, size_t len, int *open)
{
    char buf[NUMBUF];
    *open = len > 0 && s[0] == '(';
    if (*open)
        s++, len--;
    if (len >= sizeof(buf))
        len = sizeof(buf) - 1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return strtod(buf, NULL); /* "-inf", "+inf" included */
}

static int in_range(double v, double lo, int lo_open, double hi, int hi_open)
{
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

static const char *run_zset(lua_State *L, struct sim_redis *r, const struct cmd *c, struct rkey *e)
{
    int lo_open, hi_open, n = 0;
    uint64_t now_ms = r->now_us / 1000;

    if (is(c, "ZCARD")) {
        lua_pushnumber(L, e ? e->nf : 0);
        return NULL;
    }
    if (is(c, "PTTL")) {
        lua_pushnumber(L, !e ? -2 : !e->expire_ms ? -1 : (double)(e->expire_ms - now_ms));
        return NULL;
    }
    if (is(c, "ZREM") || is(c, "ZREMRANGEBYSCORE")) {
        int byscore = is(c, "ZREMRANGEBYSCORE");
        if (c->argc < 3 || (byscore && c->argc != 4))
            return "wrong number of arguments";
        double lo = byscore ? score_of(c->argv[2], c->len[2], &lo_open) : 0;
        double hi = byscore ? score_of(c->argv[3], c->len[3], &hi_open) : 0;
        for (uint32_t i = 0; e && byscore && i < e->nf;) {
            int o;
            if (in_range(score_of(e->f[i].val, e->f[i].vlen, &o), lo, lo_open, hi, hi_open))
                n += field_del(e, e->f[i].name, e->f[i].nlen); /* the last moves to i */
            else
                i++;
        }
        for (int i = 2; e && !byscore && i < c->argc; i++)
            n += field_del(e, c->argv[i], c->len[i]);
        if (e && e->nf == 0)
            key_delete(r, e);
        lua_pushnumber(L, n);
        return NULL;
    }
    if (is(c, "ZADD")) {
        int xx = c->argc == 5 && c->len[2] == 2 && strncasecmp(c->argv[2], "XX", 2) == 0;
        if (c->argc != 4 && !xx)
            return "sim: ZADD key [XX] score member only";
        const char *sc = c->argv[2 + xx], *m = c->argv[3 + xx];
        size_t sl = c->len[2 + xx], ml = c->len[3 + xx];
        if (xx && (!e || !field_find(e, m, ml))) {
            lua_pushnumber(L, 0);
            return NULL;
        }
        if (!e && !(e = key_create(r, c->argv[1], c->len[1])))
            return "OOM";
        int v = field_set(e, m, ml, sc, sl);
        if (v < 0)
            return "OOM";
        lua_pushnumber(L, v);
        return NULL;
    }
    if (is(c, "ZRANGEBYSCORE")) {
        if (c->argc != 4)
            return "sim: ZRANGEBYSCORE key min max only";
        double lo = score_of(c->argv[2], c->len[2], &lo_open);
        double hi = score_of(c->argv[3], c->len[3], &hi_open);
        lua_createtable(L, 0, 0);
        for (uint32_t i = 0; e && i < e->nf; i++) {
            int o;
            if (in_range(score_of(e->f[i].val, e->f[i].vlen, &o), lo, lo_open, hi, hi_open)) {
                lua_pushlstring(L, e->f[i].name, e->f[i].nlen);
                lua_rawseti(L, -2, ++n);
            }
        }
        return NULL;
    }
    if (is(c, "ZRANGE")) {
        if (c->argc != 5 || c->len[2] != 1 || c->argv[2][0] != '0' || c->len[3] != 1 ||
            c->argv[3][0] != '0')
            return "sim: ZRANGE key 0 0 WITHSCORES only";
        lua_createtable(L, 2, 0);
        struct rfield *least = NULL;
        double best = 0;
        for (uint32_t i = 0; e && i < e->nf; i++) {
            int o;
            double v = score_of(e->f[i].val, e->f[i].vlen, &o);
            if (!least || v < best)
                least = &e->f[i], best = v;
        }
        if (least) {
            lua_pushlstring(L, least->name, least->nlen);
            lua_rawseti(L, -2, 1);
            lua_pushlstring(L, least->val, least->vlen);
            lua_rawseti(L, -2, 2);
        }
        return NULL;
    }
    return "Unknown Redis command called from script";
}

/* Run one command; pushes its reply, or returns an error message. */
static const char *run(lua_State *L, struct sim_redis *r, const struct cmd *c)
{
    uint64_t now_ms = r->now_us / 1000;
    struct rkey *e = c->argc > 1 ? key_find(r, c->argv[1], c->len[1]) : NULL;

    if (is(c, "TIME")) {
        char buf[NUMBUF];
        lua_createtable(L, 2, 0);
        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)(r->now_us / 1000000));
        lua_pushstring(L, buf);
        lua_rawseti(L, -2, 1);
        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)(r->now_us % 1000000));
        lua_pushstring(L, buf);
        lua_rawseti(L, -2, 2);
        return NULL;
    }
    if (c->argc < 2)
        return "wrong number of arguments";
    if (is(c, "HGETALL")) {
        lua_createtable(L, e ? (int)e->nf * 2 : 0, 0);
        for (uint32_t i = 0; e && i < e->nf; i++) {
            lua_pushlstring(L, e->f[i].name, e->f[i].nlen);
            lua_rawseti(L, -2, (int)(2 * i + 1));
            lua_pushlstring(L, e->f[i].val, e->f[i].vlen);
            lua_rawseti(L, -2, (int)(2 * i + 2));
        }
        return NULL;
    }
    if (is(c, "HGET") || is(c, "HMGET")) {
        int multi = is(c, "HMGET");
        if (c->argc < 3 || (!multi && c->argc != 3))
            return "wrong number of arguments";
        if (multi)
            lua_createtable(L, c->argc - 2, 0);
        for (int i = 2; i < c->argc; i++) {
            struct rfield *f = e ? field_find(e, c->argv[i], c->len[i]) : NULL;
            if (f)
                lua_pushlstring(L, f->val, f->vlen);
            else
                lua_pushboolean(L, 0); /* a nil bulk reply is false in Lua */
            if (multi)
                lua_rawseti(L, -2, i - 1);
        }
        return NULL;
    }
    if (is(c, "HSET")) {
        if (c->argc < 4 || c->argc % 2)
            return "wrong number of arguments for 'hset' command";
        if (!e && !(e = key_create(r, c->argv[1], c->len[1])))
            return "OOM";
        int added = 0;
        for (int i = 2; i < c->argc; i += 2) {
            int v = field_set(e, c->argv[i], c->len[i], c->argv[i + 1], c->len[i + 1]);
            if (v < 0)
                return "OOM";
            added += v;
        }
        lua_pushnumber(L, added);
        return NULL;
    }
    if (is(c, "HINCRBY")) { /* (the fed scripts' unmet demand u and lost tokens l) */
        char buf[NUMBUF], *end;
        if (c->argc != 4)
            return "wrong number of arguments for 'hincrby' command";
        if (c->len[3] == 0 || c->len[3] >= sizeof(buf))
            return "value is not an integer or out of range";
        memcpy(buf, c->argv[3], c->len[3]);
        buf[c->len[3]] = '\0';
        long long by = strtoll(buf, &end, 10), v = 0;
        if (*end)
            return "value is not an integer or out of range";
        struct rfield *f = e ? field_find(e, c->argv[2], c->len[2]) : NULL;
        if (f) {
            if (f->vlen == 0 || f->vlen >= sizeof(buf))
                return "hash value is not an integer";
            memcpy(buf, f->val, f->vlen);
            buf[f->vlen] = '\0';
            v = strtoll(buf, &end, 10);
            if (*end)
                return "hash value is not an integer";
        }
        v += by;
        int n = snprintf(buf, sizeof(buf), "%lld", v);
        if (!e && !(e = key_create(r, c->argv[1], c->len[1])))
            return "OOM";
        if (field_set(e, c->argv[2], c->len[2], buf, (size_t)n) < 0)
            return "OOM";
        lua_pushnumber(L, (double)v);
        return NULL;
    }
    if (is(c, "PEXPIRETIME")) {
        lua_pushnumber(L, !e ? -2 : !e->expire_ms ? -1 : (double)e->expire_ms);
        return NULL;
    }
    if (is(c, "HDEL")) {
        if (c->argc < 3)
            return "wrong number of arguments for 'hdel' command";
        int n = 0;
        for (int i = 2; e && i < c->argc; i++)
            n += field_del(e, c->argv[i], c->len[i]);
        if (e && e->nf == 0)
            key_delete(r, e); /* an empty hash does not exist */
        lua_pushnumber(L, n);
        return NULL;
    }
    if (is(c, "PEXPIRE")) {
        char buf[NUMBUF], *end;
        if (c->argc != 3)
            return "wrong number of arguments for 'pexpire' command";
        if (c->len[2] == 0 || c->len[2] >= sizeof(buf))
            return "value is not an integer or out of range";
        memcpy(buf, c->argv[2], c->len[2]);
        buf[c->len[2]] = '\0';
        long long ms = strtoll(buf, &end, 10);
        if (*end)
            return "value is not an integer or out of range";
        if (!e) {
            lua_pushnumber(L, 0);
            return NULL;
        }
        if (ms <= 0)
            key_delete(r, e);
        else if (set_expire(r, e, now_ms + (uint64_t)ms) < 0)
            return "OOM";
        lua_pushnumber(L, 1);
        return NULL;
    }
    if (is(c, "EXISTS") || is(c, "DEL")) {
        int n = 0;
        for (int i = 1; i < c->argc; i++) {
            struct rkey *k = key_find(r, c->argv[i], c->len[i]);
            if (k && is(c, "DEL"))
                key_delete(r, k);
            n += k != NULL;
        }
        lua_pushnumber(L, n);
        return NULL;
    }
    return run_zset(L, r, c, e);
}

static int l_call(lua_State *L)
{
    struct sim_redis *r = self(L);
    struct cmd c;
    const char *err = read_args(L, &c);
    if (!err)
        err = run(L, r, &c);
    if (err)
        return luaL_error(L, "%s", err);
    return 1;
}

/* redis.pcall: errors come back as a table {err = message}. */
static int l_pcall(lua_State *L)
{
    struct sim_redis *r = self(L);
    struct cmd c;
    const char *err = read_args(L, &c);
    if (!err)
        err = run(L, r, &c);
    if (!err)
        return 1;
    lua_newtable(L);
    lua_pushstring(L, err);
    lua_setfield(L, -2, "err");
    return 1;
}

static int reply_table(lua_State *L, const char *field)
{
    luaL_checkstring(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, 1);
    lua_setfield(L, -2, field);
    return 1;
}

static int l_error_reply(lua_State *L)
{
    return reply_table(L, "err");
}

static int l_status_reply(lua_State *L)
{
    return reply_table(L, "ok");
}

/* ---- life ------------------------------------------------------------------------ */

/* The scripts by enum store_script (lua/scripts.am), then the batch script. */
#define SCRIPT_SRC(NAME, name) [SCRIPT_##NAME] = script_##name,
static const char *const script_text[SCRIPT_BATCH + 1] = {
    STORE_SCRIPTS(SCRIPT_SRC)[SCRIPT_BATCH] = script_batch,
};
#undef SCRIPT_SRC

static void open_lib(lua_State *L, lua_CFunction f, const char *name)
{
    lua_pushcfunction(L, f);
    lua_pushstring(L, name);
    lua_call(L, 1, 0);
}

struct sim_redis *sim_redis_new(char *err, size_t errlen)
{
    static const luaL_Reg fns[] = {{"call", l_call},
                                   {"pcall", l_pcall},
                                   {"error_reply", l_error_reply},
                                   {"status_reply", l_status_reply},
                                   {NULL, NULL}};
    struct sim_redis *r = calloc(1, sizeof(*r));

    if (!r || !(r->slots = calloc(1024, sizeof(*r->slots))) ||
        !(r->L = lua_newstate(sim_pool_alloc, &r->pool))) {
        snprintf(err, errlen, "out of memory");
        sim_redis_free(r);
        return NULL;
    }
    r->nslots = 1024;
    /* The libraries Redis gives scripts that ours use. */
    open_lib(r->L, luaopen_base, "");
    open_lib(r->L, luaopen_table, LUA_TABLIBNAME);
    open_lib(r->L, luaopen_string, LUA_STRLIBNAME);
    open_lib(r->L, luaopen_math, LUA_MATHLIBNAME);
    lua_newtable(r->L);
    for (const luaL_Reg *f = fns; f->name; f++) {
        lua_pushlightuserdata(r->L, r);
        lua_pushcclosure(r->L, f->func, 1);
        lua_setfield(r->L, -2, f->name);
    }
    lua_setglobal(r->L, "redis");
    /* Collect as fast as garbage is made (each call leaves its tables
     * behind): a small heap stays in cache, which measured faster than
     * the default pause of 200 %. */
    lua_gc(r->L, LUA_GCSETPAUSE, 100);
    for (int i = 0; i <= SCRIPT_BATCH; i++) {
        const char *src = script_text[i];
        if (luaL_loadbuffer(r->L, src, strlen(src), "@script") != 0) {
            snprintf(err, errlen, "script %d does not compile: %s", i, lua_tostring(r->L, -1));
            sim_redis_free(r);
            return NULL;
        }
        r->ref[i] = luaL_ref(r->L, LUA_REGISTRYINDEX);
    }
    return r;
}

void sim_redis_free(struct sim_redis *r)
{
    if (!r)
        return;
    if (r->L)
        lua_close(r->L);
    sim_pool_free(&r->pool);
    for (size_t i = 0; r->slots && i < r->nslots; i++)
        while (r->slots[i])
            key_delete(r, r->slots[i]);
    free(r->slots);
    free(r->heap);
    free(r);
}

size_t sim_redis_keys(const struct sim_redis *r)
{
    return r->count;
}

size_t sim_redis_keys_peak(const struct sim_redis *r)
{
    return r->peak;
}

static void set_strings(lua_State *L, const char *name, int n, const char *const *s,
                        const size_t *len)
{
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushlstring(L, s[i], len[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setglobal(L, name);
}

/* The reply on top of the stack as an array of integers. */
static const char *read_reply(lua_State *L, int64_t *v, size_t cap, size_t *n)
{
    if (lua_type(L, -1) != LUA_TTABLE)
        return "sim: the script did not answer an array";
    lua_getfield(L, -1, "err");
    if (lua_type(L, -1) == LUA_TSTRING)
        return lua_tostring(L, -1);
    lua_pop(L, 1);
    for (int i = 1;; i++) {
        lua_rawgeti(L, -1, i);
        int t = lua_type(L, -1);
        if (t == LUA_TNIL) {
            lua_pop(L, 1);
            return NULL;
        }
        if (t != LUA_TNUMBER)
            return "sim: a reply element is not an integer";
        if (*n >= cap)
            return "sim: reply too long";
        v[(*n)++] = (int64_t)lua_tonumber(L, -1); /* as Redis: (long long) truncates */
        lua_pop(L, 1);
    }
}

int sim_redis_eval(struct sim_redis *r, int script, uint64_t now_us, int nkeys,
                   const char *const *keys, const size_t *keylens, int argc,
                   const char *const *argv, const size_t *argvlen, int64_t *v, size_t cap,
                   size_t *n, const char **err)
{
    lua_State *L = r->L;
    int top = lua_gettop(L);
    const char *e;

    *n = 0;
    if (script < 0 || script > SCRIPT_BATCH) {
        *err = "NOSCRIPT No matching script";
        return -1;
    }
    r->now_us = now_us;
    expire_due(r, now_us / 1000);
    set_strings(L, "KEYS", nkeys, keys, keylens);
    set_strings(L, "ARGV", argc, argv, argvlen);
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->ref[script]);
    if (lua_pcall(L, 0, 1, 0) != 0)
        e = lua_tostring(L, -1);
    else
        e = read_reply(L, v, cap, n);
    if (e)
        snprintf(r->err, sizeof(r->err), "%s", e);
    lua_settop(L, top);
    *err = e ? r->err : NULL;
    return e ? -1 : 0;
}

uint64_t sim_redis_hget_u64(struct sim_redis *r, const char *key, size_t keylen, const char *field)
{
    struct rkey *e = key_find(r, key, keylen);
    struct rfield *f = e ? field_find(e, field, strlen(field)) : NULL;
    char buf[32];

    if (!f || f->vlen == 0 || f->vlen >= sizeof(buf))
        return 0;
    memcpy(buf, f->val, f->vlen);
    buf[f->vlen] = '\0';
    double v = strtod(buf, NULL);
    return v > 0 && v < 1.8e19 ? (uint64_t)v : 0;
}
