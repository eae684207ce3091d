/* SPDX-License-Identifier: Apache-2.0 */
/* gclaim.c - a region's claimer and every agent's notes of active keys
 * (gclaim.h): the I/O around gplan.h, on the loop thread. */
#include "global/gclaim.h"

#include <ev.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/log.h"
#include "core/warning.h"
#include "metrics/metrics.h"
#include "core/util.h"
#include "global/gplan.h"
#include "limits/bucket.h"
#include "store/store.h"
#include "store/store_epoch.h"

#define GC_NOTE_MAX 4096   /* keys noted per interval (more wait for the next) */
#define GC_READ_MAX 10000  /* active keys one round reads */
#define GC_ACTIVE_MS (GPLAN_ACTIVE_US / 1000) /* a key not noted for this long leaves the set */
#define GC_REGIONS_MS 60000 /* a region without a round for this long is not counted */
#define GC_LOCK_ROUNDS 3   /* the lease lock's ttl, in intervals */
#define GC_MEMBER_MAX 512  /* "LIMIT:PERIOD:BURST:KEY": longer keys are not followed */
#define GC_SOON 0.005      /* s: a key new to this agent is noted this soon */
#define GC_POLL_MAX 0.1    /* s: the claimer looks for new keys at least this often */
#define GC_PROBE_MIN_US 100000 /* a round's wait for a probe of a global Redis known down */
#define GC_REGIONS_EVERY 10    /* ticks between an agent's reads of the regions, but the claimer's */

enum { PH_IDLE, PH_ACTIVE, PH_READ, PH_GLOBAL };

struct gclaim *gclaim_current;

/* One key the claimer follows. */
struct gentry {
    struct gentry *next; /* hash chain */
    struct gclaim *g;
    struct gkey k;
    struct gstep step;
    uint64_t limit, period_ms, burst;
    unsigned seen_round; /* the round that last read it from the set */
    unsigned calls;      /* calls on it not answered: kept until none */
    unsigned pcalls;     /* of which regional (tb_pool): a round skips it until none */
    unsigned gen;        /* the round generation of its round calls (stale: ignored) */
    int64_t pamt;        /* the amount of its last tb_pool call (a round has one at a time) */
    size_t keylen;
    char key[]; /* after [redis] prefix */
};

struct gclaim {
    struct ev_loop *loop;
    struct store *reg, *glob;
    struct store_epoch *epoch; /* the global keyspace's: its loss named (global_state_lost) */
    ev_timer tick;
    int stopped;
    unsigned inflight; /* calls of ours not answered (either store) */
    int zombie;        /* gclaim_free came while calls were in flight */
    /* settings */
    uint64_t interval_us, ttl_us, timeout_us;
    double max_fraction;
    double reserve; /* [global] reserve */
    char *prefix, *gprefix, *agent;
    size_t prefix_len, gprefix_len;
    char region[64];
    /* notes: keys seen since the last flush (members, deduplicated) */
    char **notes;
    size_t nnotes;
    uint64_t *note_hash, *prev_hash; /* this interval's notes, the last flush's */
    size_t note_cap; /* slots of each, a power of two */
    ev_timer flush_soon; /* a key new to this agent goes out at once */
    ev_timer poll;       /* the claimer looks for keys new to the region */
    uint64_t poll_score; /* the newest note it has seen (Redis' ms) */
    /* the claimer's keys */
    struct gentry **tab;
    size_t tab_cap, nkeys;
    unsigned round;
    int in_round;    /* a round's calls are out */
    int phase;       /* of the round: PH_* */
    unsigned gen;    /* the round's generation: an abandoned round's replies are stale */
    ev_timer limit;  /* the round's phase must be answered by then */
    ev_timer soon;   /* a round before the next tick (gplan_next_us) */
    uint64_t reg_timeout_us;
    unsigned waits;  /* its calls not answered yet, this phase */
    int global_down; /* the last global call failed */
    uint64_t down_since_us; /* the global connection is down since (0: up) */
    unsigned ticks;
    int any_ok;      /* this round's global call got an answer */
    uint64_t sent_us;
    struct gentry **batch;
    size_t nbatch;
    struct gclaim_stats st;
};

/* ---- small helpers ---------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h ? h : 1;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static struct gplan_cfg plan_cfg(const struct gclaim *g, const struct gentry *e)
{
    uint64_t rtt = (uint64_t)(g->st.rtt_ms * 1000);
    return (struct gplan_cfg){
        .limit = e->limit,
        .period_us = e->period_ms * 1000,
        .burst = e->burst,
        .interval_us = g->interval_us,
        .ttl_us = g->ttl_us,
        .gttl_us = gplan_gttl_us(g->interval_us, g->ttl_us, rtt > g->timeout_us ? rtt : g->timeout_us),
        .rtt_us = rtt,
        .max_fraction = g->max_fraction,
        .regions = g->st.regions ? g->st.regions : 1,
        .reserve = gclaim_reserve(g, e->burst),
    };
}

static void destroy(struct gclaim *g);
static int call_end(struct gclaim *g);

/* A call of ours is answered (e: on that key, or NULL). 1: do nothing more
 * (stopped; after gclaim_free, the last one frees g). */
static int call_done(struct gclaim *g, struct gentry *e)
{
    if (e)
        e->calls--;
    return call_end(g);
}

/* A regional (tb_pool) call on e answered. */
static int pool_done(struct gclaim *g, struct gentry *e)
{
    e->pcalls--;
    return call_done(g, e);
}

static int call_end(struct gclaim *g)
{
    g->inflight--;
    if (g->zombie && !g->inflight) {
        destroy(g);
        return 1;
    }
    return g->stopped;
}

/* ---- the key table ---------------------------------------------------------------------- */

static struct gentry *lookup(const struct gclaim *g, const char *key, size_t keylen)
{
    if (!g->tab_cap)
        return NULL;
    for (struct gentry *e = g->tab[hash_bytes(key, keylen) & (g->tab_cap - 1)]; e; e = e->next)
        if (e->keylen == keylen && memcmp(e->key, key, keylen) == 0)
            return e;
    return NULL;
}

static struct gentry *upsert(struct gclaim *g, const char *key, size_t keylen)
{
    struct gentry *e = lookup(g, key, keylen);
    if (e)
        return e;
    if (g->nkeys + 1 > g->tab_cap / 2) { /* grow */
        size_t cap = g->tab_cap ? g->tab_cap * 2 : 64;
        struct gentry **t = calloc(cap, sizeof(*t));
        if (!t)
            return NULL;
        for (size_t i = 0; i < g->tab_cap; i++)
            for (struct gentry *x = g->tab[i], *nx; x; x = nx) {
                nx = x->next;
                size_t b = hash_bytes(x->key, x->keylen) & (cap - 1);
                x->next = t[b];
                t[b] = x;
            }
        free(g->tab);
        g->tab = t;
        g->tab_cap = cap;
    }
    e = calloc(1, sizeof(*e) + keylen + 1);
    if (!e)
        return NULL;
    e->g = g;
    e->keylen = keylen;
    memcpy(e->key, key, keylen);
    size_t b = hash_bytes(key, keylen) & (g->tab_cap - 1);
    e->next = g->tab[b];
    g->tab[b] = e;
    g->nkeys++;
    return e;
}

/* Forget the keys idle for a while (no call of ours on them). */
static void sweep(struct gclaim *g)
{
    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry **p = &g->tab[i]; *p;) {
            struct gentry *e = *p;
            if (gplan_idle(&e->k) && e->seen_round != g->round && !e->calls) {
                *p = e->next;
                free(e);
                g->nkeys--;
            } else {
                p = &e->next;
            }
        }
}

/* ---- notes: this agent's active keys, to the region's set --------------------------------- */

void gclaim_note(struct gclaim *g, const char *key, size_t keylen, uint64_t limit,
                 uint64_t period_ms, uint64_t burst)
{
    char m[GC_MEMBER_MAX];
    if (!g || g->stopped || g->nnotes >= GC_NOTE_MAX)
        return;
    int n = snprintf(m, sizeof(m), "%" PRIu64 ":%" PRIu64 ":%" PRIu64 ":", limit, period_ms, burst);
    if (n < 0 || (size_t)n + keylen >= sizeof(m))
        return;
    memcpy(m + n, key, keylen);
    m[(size_t)n + keylen] = '\0';
    uint64_t h = hash_bytes(m, (size_t)n + keylen);
    size_t mask = g->note_cap - 1, i = h & mask;
    for (; g->note_hash[i]; i = (i + 1) & mask)
        if (g->note_hash[i] == h)
            return; /* (a collision drops a note for one interval: harmless) */
    char *c = xstrdup(m);
    if (!c)
        return;
    g->note_hash[i] = h;
    g->notes[g->nnotes++] = c;
    /* not in the last flush: new here, maybe new to the region, whose
     * claimer has nothing for it yet: its first tokens wait for this note */
    for (i = h & mask; g->prev_hash[i]; i = (i + 1) & mask)
        if (g->prev_hash[i] == h)
            return;
    if (!ev_is_active(&g->flush_soon))
        ev_timer_start(g->loop, &g->flush_soon);
}

/* KEYS[1] the region's set, ARGV the members: each scored now (Redis' clock,
 * ms), the set kept alive. */
static const char note_script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "for i = 1, #ARGV do redis.call('ZADD', KEYS[1], now, ARGV[i]) end\n"
    "redis.call('PEXPIRE', KEYS[1], " "600000" ")\n"
    "return #ARGV\n";

static void on_noted(void *arg, const struct store_result *res)
{
    (void)res; /* lost notes come again next interval */
    call_done(arg, NULL);
}

static void flush_notes(struct gclaim *g)
{
    char key[256];
    if (!g->nnotes)
        return;
    const char **argv = malloc((g->nnotes + 4) * sizeof(*argv));
    size_t *argvlen = malloc((g->nnotes + 4) * sizeof(*argvlen));
    int kl = snprintf(key, sizeof(key), "%sg:active", g->prefix);
    if (argv && argvlen && kl > 0 && (size_t)kl < sizeof(key)) {
        argv[0] = "EVAL", argvlen[0] = 4;
        argv[1] = note_script, argvlen[1] = sizeof(note_script) - 1;
        argv[2] = "1", argvlen[2] = 1;
        argv[3] = key, argvlen[3] = (size_t)kl;
        for (size_t i = 0; i < g->nnotes; i++)
            argv[4 + i] = g->notes[i], argvlen[4 + i] = strlen(g->notes[i]);
        g->inflight++;
        store_read(g->reg, key, (size_t)kl, (int)(4 + g->nnotes), argv, argvlen, on_noted, g);
    }
    free(argv);
    free(argvlen);
    for (size_t i = 0; i < g->nnotes; i++)
        free(g->notes[i]);
    g->nnotes = 0;
    uint64_t *t = g->prev_hash;
    g->prev_hash = g->note_hash;
    g->note_hash = t;
    memset(g->note_hash, 0, g->note_cap * sizeof(*g->note_hash));
}

static void start_round(struct gclaim *g);

static void flush_soon_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct gclaim *g = w->data;
    (void)loop;
    (void)revents;
    if (g->stopped)
        return;
    flush_notes(g);
    if (g->st.claimer && !g->in_round) /* (its read comes after the notes: one connection) */
        start_round(g);
}

/* KEYS[1] the region's set: the members noted after ARGV[1] (ms), with
 * their scores, at most ARGV[2]. */
static const char poll_script[] =
    "return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf', 'WITHSCORES', "
    "'LIMIT', 0, tonumber(ARGV[2]))\n";


/* Notes since the last poll: a key the claimer does not follow yet gets a
 * round now, not at the next tick. */
static void on_poll(void *arg, const struct store_result *res)
{
    struct gclaim *g = arg;
    int fresh = 0;
    if (call_done(g, NULL) || res->status != STORE_OK)
        return;
    for (size_t i = 0; i + 1 < res->nstr; i += 2) {
        const char *m = res->str[i], *p = m;
        for (int j = 0; j < 3 && p; j++) {
            p = memchr(p, ':', res->str_len[i] - (size_t)(p - m));
            p = p ? p + 1 : NULL;
        }
        uint64_t sc = strtoull(res->str[i + 1], NULL, 10);
        if (sc > g->poll_score)
            g->poll_score = sc;
        if (p && !lookup(g, p, res->str_len[i] - (size_t)(p - m)))
            fresh = 1;
    }
    if (fresh && g->st.claimer && !g->in_round)
        start_round(g);
}

static void poll_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct gclaim *g = w->data;
    char key[256], after[24];
    (void)loop;
    (void)revents;
    if (g->stopped || !g->st.claimer || g->in_round)
        return;
    int kl = snprintf(key, sizeof(key), "%sg:active", g->prefix);
    snprintf(after, sizeof(after), "%" PRIu64, g->poll_score);
    const char *argv[] = {"EVAL", poll_script, "1", key, after, "1000"};
    size_t argvlen[] = {4, sizeof(poll_script) - 1, 1, (size_t)kl, strlen(after), 4};
    g->inflight++;
    store_read(g->reg, key, (size_t)kl, 6, argv, argvlen, on_poll, g);
}

/* ---- the round ---------------------------------------------------------------------------- */

/* The next round before the next tick, for a key one claim per interval
 * cannot feed (gplan_next_us). */
static void soon_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct gclaim *g = w->data;
    (void)loop;
    (void)revents;
    if (!g->stopped && g->st.claimer && !g->in_round)
        start_round(g);
}

static void round_end(struct gclaim *g)
{
    g->in_round = 0;
    g->phase = PH_IDLE;
    g->nbatch = 0;
    ev_timer_stop(g->loop, &g->limit);
    uint64_t next = g->interval_us;
    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry *e = g->tab[i]; e; e = e->next) {
            struct gplan_cfg c = plan_cfg(g, e);
            uint64_t n = gplan_next_us(&c, &e->k);
            if (n < next)
                next = n;
        }
    if (next < g->interval_us && !g->stopped) {
        ev_timer_stop(g->loop, &g->soon);
        ev_timer_set(&g->soon, (double)next / 1e6, 0.);
        ev_timer_start(g->loop, &g->soon);
    }
}

static void arm(struct gclaim *g, int phase, uint64_t us)
{
    g->phase = phase;
    ev_timer_stop(g->loop, &g->limit);
    ev_timer_set(&g->limit, (double)us / 1e6, 0.);
    ev_timer_start(g->loop, &g->limit);
}

/* The global Redis did not answer an operation (down, cut off, too slow,
 * an error): what was withdrawn for it is lost, and the region goes on its
 * own until a call passes. */
static void global_failed(struct gclaim *g, struct gentry *e, const char *why)
{
    uint64_t lost = gplan_failed(&e->k);
    g->st.forfeited += lost;
    g->st.failed++;
    METRIC_ADD(global_forfeited, lost);
    METRIC_INC(global_failed);
    if (!g->global_down) {
        g->global_down = 1;
        warning_raise(WARNING_GLOBAL_UNREACHABLE,
                      "region %s cannot reach the global Redis ([global]): it spends what it "
                      "holds of each scope = global rule, then admits its backstop share "
                      "(1/%u of the rule) until a call passes: %s",
                      g->region, g->st.regions ? g->st.regions : 1, why);
    }
}

/* A phase not answered in time: the round is given up, its late replies
 * ignored (a late grant is never deposited: the global bucket counts it
 * held until the region's lease expires, under-admission only). */
static void limit_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct gclaim *g = w->data;
    (void)loop;
    (void)revents;
    if (g->phase == PH_GLOBAL)
        for (size_t i = 0; i < g->tab_cap; i++)
            for (struct gentry *e = g->tab[i]; e; e = e->next)
                if (e->k.op && e->gen == g->gen)
                    global_failed(g, e, "no answer within [global] timeout");
    LOG_DEBUG("\"global round given up\" region=%s phase=%d", g->region, g->phase);
    g->gen++;
    round_end(g);
}

/* tb_pool on e's regional bucket: move amt (0: read), dl_ms > 0 stores the
 * deadline that many ms from now, < 0 clears it. */
static void pool_call(struct gclaim *g, struct gentry *e, int64_t amt, int64_t dl_ms,
                      store_cb *cb, void *arg)
{
    char key[GC_MEMBER_MAX + 128], a[24], b[24], d[24], r[24];
    const char *argv[POOL_ARGC_RESERVE] = {a, b, d, r};
    size_t argvlen[POOL_ARGC_RESERVE];
    if (g->prefix_len + e->keylen >= sizeof(key))
        return;
    memcpy(key, g->prefix, g->prefix_len);
    memcpy(key + g->prefix_len, e->key, e->keylen);
    argvlen[0] = (size_t)snprintf(a, sizeof(a), "%" PRId64, amt);
    argvlen[1] = (size_t)snprintf(b, sizeof(b), "%" PRIu64, e->burst);
    argvlen[2] = (size_t)snprintf(d, sizeof(d), "%" PRId64, dl_ms);
    uint64_t reserve = gclaim_reserve(g, e->burst);
    argvlen[3] = (size_t)snprintf(r, sizeof(r), "%" PRIu64, reserve);
    g->inflight++;
    e->calls++;
    e->pcalls++;
    e->pamt = amt;
    int argc = reserve ? POOL_ARGC_RESERVE : dl_ms ? POOL_ARGC_DEADLINE : POOL_ARGC;
    store_eval(g->reg, SCRIPT_TB_POOL, key, g->prefix_len + e->keylen, argc, argv, argvlen, cb,
               arg);
}

static void on_fire_and_forget(void *arg, const struct store_result *res)
{
    struct gentry *e = arg;
    (void)res;
    pool_done(e->g, e);
}

/* Free tokens dropped at a lease's end: forfeited (the global bucket
 * counts them spent at its lease's expiry). */
static void on_forfeit(void *arg, const struct store_result *res)
{
    struct gentry *e = arg;
    if (pool_done(e->g, e))
        return;
    if (res->status == STORE_OK && res->n >= 1 && res->v[0] < 0) {
        e->g->st.forfeited += (uint64_t)-res->v[0];
        METRIC_ADD(global_forfeited, (uint64_t)-res->v[0]);
    }
}

static void send_global(struct gclaim *g);

static void phase_done(struct gclaim *g)
{
    if (--g->waits == 0)
        send_global(g);
}

/* The surplus withdrawn (or the backstop deposited): the key's operation. */
static void on_moved(void *arg, const struct store_result *res)
{
    struct gentry *e = arg;
    struct gclaim *g = e->g;
    if (pool_done(g, e))
        return;
    /* no answer (the connection lost, or an error): whether it ran is not
     * known. A deposit of backstop tokens counts as made, so that it is
     * never made twice (over-admission); a withdrawal as not made (what it
     * took, if it ran, is lost: under-admission). */
    int64_t moved = res->status == STORE_OK && res->n >= 1 ? res->v[0]
                    : e->pamt > 0                          ? e->pamt
                                                           : 0;
    struct gplan_cfg c = plan_cfg(g, e);
    if (moved > 0) { /* (late too: the tokens are in the bucket) */
        gplan_backstop_done(&e->k, (uint64_t)moved);
        g->st.backstop += (uint64_t)moved;
        METRIC_ADD(global_backstop, (uint64_t)moved);
    }
    if (e->gen != g->gen || g->phase != PH_READ)
        return; /* a given-up round's: a late withdrawal is lost, under-admission */
    gplan_withdrawn(&c, &e->k, &e->step, moved < 0 ? (uint64_t)-moved : 0, util_now_us());
    phase_done(g);
}

/* The regional bucket read: plan the key's round. */
static void on_read(void *arg, const struct store_result *res)
{
    struct gentry *e = arg;
    struct gclaim *g = e->g;
    if (pool_done(g, e) || e->gen != g->gen || g->phase != PH_READ)
        return;
    if (res->status != STORE_OK || res->n < 6) { /* the regional Redis: nothing this round */
        e->k.op = 0;
        phase_done(g);
        return;
    }
    struct gread r = {res->v[1] > 0 ? (uint64_t)res->v[1] : 0,
                      res->v[2] > 0 ? (uint64_t)res->v[2] : 0,
                      res->v[5] > 0 ? (uint64_t)res->v[5] : 0,
                      e->seen_round == g->round}; /* in the region's set: noted lately */
    struct gplan_cfg c = plan_cfg(g, e);
    uint64_t now = util_now_us();
    gplan_round(&c, &e->k, &r, g->global_down, now, &e->step);
    int64_t amt = (int64_t)e->step.backstop - (int64_t)e->step.withdraw;
    if (amt != 0) {
        pool_call(g, e, amt, 0, on_moved, e);
        return;
    }
    gplan_withdrawn(&c, &e->k, &e->step, 0, now);
    phase_done(g);
}

/* The members of the region's set: the keys of this round. */
static void on_active(void *arg, const struct store_result *res)
{
    struct gclaim *g = arg;
    if (call_done(g, NULL) || g->phase != PH_ACTIVE)
        return;
    if (res->status == STORE_OK)
        for (size_t i = 0; i < res->nstr; i++) {
            const char *m = res->str[i], *p = m;
            uint64_t v[3];
            char *end;
            int ok = 1;
            for (int j = 0; j < 3 && ok; j++) {
                v[j] = strtoull(p, &end, 10);
                ok = end != p && *end == ':';
                p = end + 1;
            }
            size_t kl = res->str_len[i] - (size_t)(p - m);
            if (!ok || !kl || v[2] == 0 || v[1] == 0)
                continue;
            struct gentry *e = upsert(g, p, kl);
            if (!e)
                break;
            e->limit = v[0], e->period_ms = v[1], e->burst = v[2];
            e->seen_round = g->round;
        }
    /* every key followed: read its bucket (those no longer in the set too:
     * what they hold is given back) */
    g->waits = 1;
    g->nbatch = 0;
    arm(g, PH_READ, g->reg_timeout_us);
    store_cork(g->reg, 1); /* the reads go as one batch */
    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry *e = g->tab[i]; e; e = e->next) {
            struct gplan_cfg c = plan_cfg(g, e);
            e->k.op = 0;
            if (e->pcalls) /* a given-up round's regional call still out: next round */
                continue;
            e->gen = g->gen;
            if (gplan_expire(&c, &e->k, util_now_us())) {
                pool_call(g, e, -(int64_t)e->burst - 1, -1, on_forfeit, e);
            }
            g->waits++;
            pool_call(g, e, 0, 0, on_read, e);
        }
    store_cork(g->reg, 0);
    phase_done(g);
}

/* KEYS[1] the region's set: drop members older than ARGV[1] ms, answer the
 * newest ARGV[2]. */
static const char active_script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]))\n"
    "return redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', '-inf', 'LIMIT', 0, "
    "tonumber(ARGV[2]))\n";

static void start_round(struct gclaim *g)
{
    char key[256], ms[24], max[24];
    int kl = snprintf(key, sizeof(key), "%sg:active", g->prefix);
    snprintf(ms, sizeof(ms), "%llu", (unsigned long long)GC_ACTIVE_MS);
    snprintf(max, sizeof(max), "%d", GC_READ_MAX);
    const char *argv[] = {"EVAL", active_script, "1", key, ms, max};
    size_t argvlen[] = {4, sizeof(active_script) - 1, 1, (size_t)kl, strlen(ms), strlen(max)};
    g->round++;
    g->gen++;
    sweep(g);
    g->in_round = 1;
    arm(g, PH_ACTIVE, g->reg_timeout_us);
    g->inflight++;
    store_read(g->reg, key, (size_t)kl, 6, argv, argvlen, on_active, g);
}

/* A grant deposited. */
static void on_deposit(void *arg, const struct store_result *res)
{
    struct gentry *e = arg;
    if (pool_done(e->g, e))
        return;
    if (res->status == STORE_OK && res->n >= 1 && res->v[0] > 0)
        gplan_deposited(&e->k, (uint64_t)res->v[0]);
    else if (res->status != STORE_OK && e->pamt > 0)
        /* no answer: it may have run. Counted made, never made twice: the
         * tokens, if it did not, are lost (under-admission; the global
         * bucket counts them the region's until its next report) */
        gplan_deposited(&e->k, (uint64_t)e->pamt);
}

/* One global call's operation: its key and round (a reply may come after
 * its round was given up, and after the key's next round began). */
struct gcall {
    struct gentry *e;
    unsigned gen;
};

/* What the global bucket answered for one key. */
static void on_global(void *arg, const struct store_result *res)
{
    struct gcall *gc = arg;
    struct gentry *e = gc->e;
    struct gclaim *g = e->g;
    unsigned gen = gc->gen;
    free(gc);
    if (call_done(g, e))
        return;
    if (gen != g->gen || e->gen != gen || g->phase != PH_GLOBAL) {
        /* a given-up round's (see limit_cb); an answer says how far the
         * global Redis is now, for the next probe's wait */
        if (res->status == STORE_OK && g->sent_us) {
            double rtt = (double)(util_now_us() - g->sent_us) / 1000.0;
            if (rtt > g->st.rtt_ms)
                g->st.rtt_ms = rtt;
        }
        return;
    }
    uint64_t now = util_now_us();
    if (res->status != STORE_OK || res->n <= CLAIM_R_MINE) {
        global_failed(g, e, res->err ? res->err : "down");
    } else {
        struct gplan_cfg c = plan_cfg(g, e);
        uint64_t dl = 0, granted = (uint64_t)res->v[CLAIM_R_GRANTED];
        g->any_ok = 1;
        if (g->global_down) {
            g->global_down = 0;
            warning_clear(WARNING_GLOBAL_UNREACHABLE);
        }
        double rtt = (double)(now - g->sent_us) / 1000.0;
        g->st.rtt_ms = g->st.rtt_ms ? 0.8 * g->st.rtt_ms + 0.2 * rtt : rtt;
        if (gplan_recovered(&e->k))
            pool_call(g, e, -(int64_t)e->burst - 1, 0, on_fire_and_forget, e);
        g->st.granted += granted;
        g->st.returned += e->k.ret;
        METRIC_ADD(global_granted, granted);
        METRIC_ADD(global_returned, e->k.ret);
        uint64_t amt = gplan_reply(&c, &e->k, g->sent_us, now, granted,
                                   (uint64_t)res->v[CLAIM_R_MINE],
                                   (uint64_t)res->v[CLAIM_R_LEASE_MS],
                                   (uint64_t)res->v[CLAIM_R_RETRY_MS], &dl);
        if (amt || dl)
            pool_call(g, e, (int64_t)amt, dl ? (int64_t)(dl / 1000 ? dl / 1000 : 1) : -1,
                      on_deposit, e);
    }
    if (--g->waits == 0)
        round_end(g);
}

static void send_global(struct gclaim *g)
{
    char key[GC_MEMBER_MAX + 128], nums[7][24];
    const char *argv[CLAIM_ARGC];
    size_t argvlen[CLAIM_ARGC];
    size_t n = 0;

    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry *e = g->tab[i]; e; e = e->next)
            n += e->k.op && e->gen == g->gen;
    if (!n) {
        round_end(g);
        return;
    }
    g->sent_us = util_now_us();
    /* down: the call probes; a round waits no longer than a few round trips
     * as last seen (GC_PROBE_MIN at least) for it, so that the backstop's
     * rounds keep coming (gplan_next_us); a late answer lengthens the next
     * probe's wait (on_global) */
    uint64_t wait = g->timeout_us;
    if (g->global_down) {
        uint64_t rtt4 = (uint64_t)(4000 * g->st.rtt_ms);
        wait = rtt4 > GC_PROBE_MIN_US ? rtt4 : GC_PROBE_MIN_US;
        if (wait > g->timeout_us)
            wait = g->timeout_us;
    }
    arm(g, PH_GLOBAL, wait);
    g->waits = 1;
    g->any_ok = 0;
    g->st.calls++;
    METRIC_INC(global_calls);
    store_cork(g->glob, 1);
    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry *e = g->tab[i]; e; e = e->next) {
            if (!e->k.op || e->gen != g->gen || g->gprefix_len + e->keylen >= sizeof(key))
                continue;
            struct gplan_cfg c = plan_cfg(g, e);
            uint64_t a[7] = {e->limit, e->period_ms, gplan_global_burst(&c), e->k.want,
                             e->k.used, e->k.ret, c.gttl_us / 1000};
            memcpy(key, g->gprefix, g->gprefix_len);
            memcpy(key + g->gprefix_len, e->key, e->keylen);
            argv[CLAIM_ARG_AGENT] = g->region;
            argvlen[CLAIM_ARG_AGENT] = strlen(g->region);
            for (int j = 0; j < 7; j++) {
                argvlen[CLAIM_ARG_LIMIT + j] =
                    (size_t)snprintf(nums[j], sizeof(nums[j]), "%" PRIu64, a[j]);
                argv[CLAIM_ARG_LIMIT + j] = nums[j];
            }
            struct gcall *gc = malloc(sizeof(*gc));
            if (!gc) {
                e->k.op = 0;
                continue;
            }
            gc->e = e;
            gc->gen = g->gen;
            g->st.claims++;
            METRIC_INC(global_claims);
            g->waits++;
            g->inflight++;
            e->calls++;
            store_eval(g->glob, SCRIPT_TB_CLAIM, key, g->gprefix_len + e->keylen, CLAIM_ARGC, argv,
                       argvlen, on_global, gc);
        }
    store_cork(g->glob, 0);
    if (--g->waits == 0)
        round_end(g);
}

/* ---- the lock and the regions ------------------------------------------------------------- */

static void on_lock(void *arg, const struct store_result *res)
{
    struct gclaim *g = arg;
    if (call_done(g, NULL))
        return;
    int mine = res->status == STORE_OK && res->n >= 1 && res->v[0] == 1;
    if (mine != g->st.claimer)
        LOG_INFO("\"%s the claimer of region %s\"", mine ? "now" : "no longer", g->region);
    g->st.claimer = mine;
    atomic_store(&metrics.global_claimer, mine);
    if (mine && !g->in_round)
        start_round(g);
}

/* KEYS[1] the global set of regions: this one's round now (Redis' clock),
 * those without one for ARGV[2] ms dropped; answers how many remain. */
static const char regions_script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "redis.call('ZADD', KEYS[1], now, ARGV[1])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))\n"
    "redis.call('PEXPIRE', KEYS[1], 10 * tonumber(ARGV[2]))\n"
    "return {redis.call('ZCARD', KEYS[1])}\n";

static void on_regions(void *arg, const struct store_result *res)
{
    struct gclaim *g = arg;
    if (call_done(g, NULL))
        return;
    if (res->status == STORE_OK && res->nstr >= 1) {
        unsigned long n = strtoul(res->str[0], NULL, 10);
        if (n >= 1 && n < 100000) {
            g->st.regions = (unsigned)n;
            atomic_store(&metrics.regions, (unsigned)n);
        }
    }
}

static void send_lock(struct gclaim *g, int release)
{
    char key[256], ttl[24];
    int kl = snprintf(key, sizeof(key), "%sg:lock", g->prefix);
    snprintf(ttl, sizeof(ttl), "%" PRIu64, GC_LOCK_ROUNDS * g->interval_us / 1000);
    const char *argv[3] = {g->agent, ttl, "release"};
    size_t argvlen[3] = {strlen(g->agent), strlen(ttl), 7};
    g->inflight++;
    store_eval(g->reg, SCRIPT_G_LOCK, key, (size_t)kl, release ? 3 : 2, argv, argvlen,
               release ? on_noted : on_lock, g);
}

static void tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct gclaim *g = w->data;
    (void)loop;
    (void)revents;
    uint64_t now = util_now_us();
    g->st.up = store_up(g->glob);
    atomic_store(&metrics.global_up, g->st.up);
    /* every agent says when its connection to the global Redis is down a
     * while (the claimer also when its calls fail): a successor could not
     * claim either */
    if (g->st.up) {
        g->down_since_us = 0;
        if (!g->global_down)
            warning_clear(WARNING_GLOBAL_UNREACHABLE);
    } else if (!g->down_since_us) {
        g->down_since_us = now;
    } else if (now - g->down_since_us > 2 * g->interval_us) {
        warning_raise(WARNING_GLOBAL_UNREACHABLE,
                      "region %s has no connection to the global Redis ([global]) for %.1f s: "
                      "its claimer spends what the region holds of each scope = global rule, "
                      "then admits the backstop share (1/%u of the rule)",
                      g->region, (double)(now - g->down_since_us) / 1e6,
                      g->st.regions ? g->st.regions : 1);
    }
    flush_notes(g);
    send_lock(g, 0); /* (a round still out when it answers: the next waits) */
    /* the regions seen: the claimer each tick; the others now and then, so
     * that one taking over knows the 1/regions of its shares at once (it
     * may have to start on the backstop), or each tick with a reserve,
     * which every agent's calls carry split over the regions */
    if (g->st.claimer || g->reserve > 0 || g->ticks++ % GC_REGIONS_EVERY == 0) {
        char key[256], ms[24];
        int kl = snprintf(key, sizeof(key), "%sg:regions", g->gprefix);
        snprintf(ms, sizeof(ms), "%d", GC_REGIONS_MS);
        const char *argv[] = {"EVAL", regions_script, "1", key, g->region, ms};
        size_t argvlen[] = {4, sizeof(regions_script) - 1, 1, (size_t)kl, strlen(g->region),
                            strlen(ms)};
        g->inflight++;
        store_read(g->glob, key, (size_t)kl, 6, argv, argvlen, on_regions, g);
    }
}

/* ---- life ------------------------------------------------------------------------------- */

static void apply(struct gclaim *g, const struct config *cfg)
{
    g->interval_us = cfg->global_interval_ms * 1000;
    g->ttl_us = cfg->lease_ttl_ms * 1000;
    g->timeout_us = cfg->global_timeout_ms * 1000;
    /* the regional calls of a round: a few [redis] timeouts, at least an interval */
    g->reg_timeout_us = 5 * cfg->redis_timeout_ms * 1000;
    if (g->reg_timeout_us < g->interval_us)
        g->reg_timeout_us = g->interval_us;
    g->max_fraction = cfg->global_max_fraction;
    g->reserve = cfg->global_reserve;
}

struct gclaim *gclaim_new(struct ev_loop *loop, const struct config *cfg, struct store *regional,
                          const char *agent_id, char *err, size_t errlen)
{
    struct gclaim *g = calloc(1, sizeof(*g));
    struct store_options so;

    if (!g) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    g->loop = loop;
    g->reg = regional;
    apply(g, cfg);
    g->prefix = xstrdup(cfg->redis_prefix ? cfg->redis_prefix : "rl:");
    g->gprefix = xstrdup(cfg->global_prefix ? cfg->global_prefix : "rl:");
    g->agent = xstrdup(agent_id);
    g->note_cap = 2 * GC_NOTE_MAX;
    g->notes = calloc(GC_NOTE_MAX, sizeof(*g->notes));
    g->note_hash = calloc(g->note_cap, sizeof(*g->note_hash));
    g->prev_hash = calloc(g->note_cap, sizeof(*g->prev_hash));
    if (!g->prefix || !g->gprefix || !g->agent || !g->notes || !g->note_hash || !g->prev_hash) {
        snprintf(err, errlen, "out of memory");
        gclaim_free(g);
        return NULL;
    }
    g->prefix_len = strlen(g->prefix);
    g->gprefix_len = strlen(g->gprefix);
    snprintf(g->region, sizeof(g->region), "%s", cfg->global_region ? cfg->global_region : "");
    snprintf(g->st.region, sizeof(g->st.region), "%s", g->region);
    g->st.configured = 1;
    atomic_store(&metrics.global_configured, 1);
    store_options_from_global(cfg, &so);
    g->glob = store_new(loop, &so, err, errlen);
    if (!g->glob) {
        gclaim_free(g);
        return NULL;
    }
    /* the global buckets' epoch, checked as [redis]'s is (epoch_check): an
     * empty restart or a flush of the global Redis is named, not only the
     * connection it dropped */
    if (cfg->redis_epoch_check_ms &&
        !(g->epoch = store_epoch_new_as(loop, g->glob, g->gprefix,
                                        cfg->redis_epoch_check_ms / 1000., &store_epoch_global,
                                        NULL, NULL))) {
        snprintf(err, errlen, "out of memory");
        gclaim_free(g);
        return NULL;
    }
    ev_timer_init(&g->tick, tick_cb, g->interval_us / 1e6, g->interval_us / 1e6);
    g->tick.data = g;
    ev_timer_start(loop, &g->tick);
    ev_timer_init(&g->limit, limit_cb, 1., 0.);
    g->limit.data = g;
    ev_timer_init(&g->soon, soon_cb, 1., 0.);
    g->soon.data = g;
    ev_timer_init(&g->flush_soon, flush_soon_cb, GC_SOON, 0.);
    g->flush_soon.data = g;
    double poll = g->interval_us / 1e6 / 4;
    if (poll > GC_POLL_MAX)
        poll = GC_POLL_MAX;
    ev_timer_init(&g->poll, poll_cb, poll, poll);
    g->poll.data = g;
    ev_timer_start(loop, &g->poll);
    gclaim_current = g;
    return g;
}

int gclaim_reconfigure(struct gclaim *g, const struct config *cfg)
{
    struct store_options so;
    if (!g)
        return 0;
    /* [global]'s interval, timeout, max_fraction, region and topology are
     * restart-only (config.c warns of them); the url, the credentials and
     * the reserve apply (the reserve as the reloaded rules send it) */
    g->reserve = cfg->global_reserve;
    store_options_from_global(cfg, &so);
    return store_reconfigure(g->glob, &so);
}

uint64_t gclaim_reserve(const struct gclaim *g, uint64_t burst)
{
    return g ? bucket_fed_reserve(g->reserve, g->st.regions, burst) : 0;
}

struct greset {
    struct gclaim *g;
    store_cb *cb;
    void *arg;
};

static void on_greset(void *arg, const struct store_result *res)
{
    struct greset *r = arg;
    struct gclaim *g = r->g;
    r->cb(r->arg, res);
    free(r);
    call_end(g);
}

int gclaim_reset(struct gclaim *g, const char *key, size_t keylen, uint64_t limit,
                 uint64_t period_ms, uint64_t burst, store_cb *cb, void *arg)
{
    char k[GC_MEMBER_MAX + 128], nums[RESET_ARGC][24];
    const char *argv[RESET_ARGC];
    size_t argvlen[RESET_ARGC];
    if (!g || g->stopped || g->gprefix_len + keylen >= sizeof(k))
        return -1;
    struct greset *r = malloc(sizeof(*r));
    if (!r)
        return -1;
    *r = (struct greset){g, cb, arg};
    struct gplan_cfg c = {.burst = burst,
                          .regions = g->st.regions ? g->st.regions : 1,
                          .reserve = gclaim_reserve(g, burst)};
    uint64_t v[RESET_ARGC] = {limit, period_ms, gplan_global_burst(&c)};
    for (int i = 0; i < RESET_ARGC; i++) {
        argvlen[i] = (size_t)snprintf(nums[i], sizeof(nums[i]), "%" PRIu64, v[i]);
        argv[i] = nums[i];
    }
    memcpy(k, g->gprefix, g->gprefix_len);
    memcpy(k + g->gprefix_len, key, keylen);
    g->inflight++;
    store_eval(g->glob, SCRIPT_TB_RESET, k, g->gprefix_len + keylen, RESET_ARGC, argv, argvlen,
               on_greset, r);
    return 0;
}

void gclaim_stop(struct gclaim *g)
{
    if (!g || g->stopped)
        return;
    ev_timer_stop(g->loop, &g->tick);
    ev_timer_stop(g->loop, &g->limit);
    ev_timer_stop(g->loop, &g->soon);
    ev_timer_stop(g->loop, &g->flush_soon);
    ev_timer_stop(g->loop, &g->poll);
    if (g->st.claimer && store_up(g->reg))
        send_lock(g, 1); /* a successor need not wait for the lock's ttl */
    g->stopped = 1;
    atomic_store(&metrics.global_up, 0);
    atomic_store(&metrics.global_claimer, 0);
    store_epoch_stop(g->epoch); /* before its store goes */
    store_free(g->glob); /* its callbacks run now, and do nothing more */
    g->glob = NULL;
    store_epoch_free(g->epoch);
    g->epoch = NULL;
    if (gclaim_current == g)
        gclaim_current = NULL;
}

static void destroy(struct gclaim *g)
{
    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry *e = g->tab[i], *nx; e; e = nx) {
            nx = e->next;
            free(e);
        }
    free(g->tab);
    for (size_t i = 0; i < g->nnotes; i++)
        free(g->notes[i]);
    free(g->notes);
    free(g->note_hash);
    free(g->prev_hash);
    free(g->prefix);
    free(g->gprefix);
    free(g->agent);
    free(g);
}

void gclaim_free(struct gclaim *g)
{
    if (!g)
        return;
    gclaim_stop(g);
    if (g->inflight) { /* (the regional store outlives us: its last callback frees g) */
        g->zombie = 1;
        return;
    }
    destroy(g);
}

void gclaim_stats(const struct gclaim *g, struct gclaim_stats *out)
{
    if (!g) {
        memset(out, 0, sizeof(*out));
        return;
    }
    *out = g->st;
    out->keys = g->nkeys;
    out->up = g->glob && store_up(g->glob);
}

int gclaim_key(const struct gclaim *g, const char *key, size_t keylen,
               struct gclaim_key_state *out)
{
    const struct gentry *e = g ? lookup(g, key, keylen) : NULL;
    if (!e)
        return -1;
    uint64_t now = util_now_us();
    out->gheld = e->k.gheld;
    out->pool = e->k.pool;
    out->deadline_ms = e->k.deadline_us > now ? (e->k.deadline_us - now) / 1000 : 0;
    out->est = e->k.est;
    out->backstop = e->k.bs_on;
    return 0;
}
