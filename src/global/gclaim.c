/* SPDX-License-Identifier: Apache-2.0 */
/* gclaim.c - a region's claimer and every agent's notes of active keys
 * (gclaim.h): the I/O around gplan.h, on the loop thread. */
#include "global/gclaim.h"
#include "global/gclaim_int.h"

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

struct gclaim *gclaim_current;

/* ---- small helpers ---------------------------------------------------------------------- */

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
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
    uint64_t h = gclaim_hash(m, (size_t)n + keylen);
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
    gclaim_call_done(arg, NULL);
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

static void flush_soon_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct gclaim *g = w->data;
    (void)loop;
    (void)revents;
    if (g->stopped)
        return;
    flush_notes(g);
    if (g->st.claimer && !g->in_round) /* (its read comes after the notes: one connection) */
        gclaim_start_round(g);
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
    if (gclaim_call_done(g, NULL) || res->status != STORE_OK)
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
        if (p && !gclaim_lookup(g, p, res->str_len[i] - (size_t)(p - m)))
            fresh = 1;
    }
    if (fresh && g->st.claimer && !g->in_round)
        gclaim_start_round(g);
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

/* ---- the lock and the regions ------------------------------------------------------------- */

static void on_lock(void *arg, const struct store_result *res)
{
    struct gclaim *g = arg;
    if (gclaim_call_done(g, NULL))
        return;
    int mine = res->status == STORE_OK && res->n >= 1 && res->v[0] == 1;
    if (mine != g->st.claimer)
        LOG_INFO("\"%s the claimer of region %s\"", mine ? "now" : "no longer", g->region);
    g->st.claimer = mine;
    atomic_store(&metrics.global_claimer, mine);
    if (mine && !g->in_round)
        gclaim_start_round(g);
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
    if (gclaim_call_done(g, NULL))
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
    ev_timer_init(&g->limit, gclaim_limit_cb, 1., 0.);
    g->limit.data = g;
    ev_timer_init(&g->soon, gclaim_soon_cb, 1., 0.);
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
     * restart-only (a reload warns of them: agent.c, config_page_pending);
     * the url, the credentials and the reserve apply (the reserve as the
     * reloaded rules send it) */
    g->reserve = cfg->global_reserve;
    store_options_from_global(cfg, &so);
    return store_reconfigure(g->glob, &so);
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
    gclaim_call_done(g, NULL);
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

void gclaim_free(struct gclaim *g)
{
    if (!g)
        return;
    gclaim_stop(g);
    if (g->inflight) { /* (the regional store outlives us: its last callback frees g) */
        g->zombie = 1;
        return;
    }
    gclaim_destroy(g);
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
    const struct gentry *e = g ? gclaim_lookup(g, key, keylen) : NULL;
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
