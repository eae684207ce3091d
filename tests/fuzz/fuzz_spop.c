/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_spop.c - fuzz target for everything the agent does with bytes from
 * HAProxy, short of sockets: the SPOP connection state machine, the codec,
 * rule matching (with limits taken from args, clamped to their ceilings),
 * decisions in memory, through the lease cache and exact calls against a
 * stand-in Redis, the fail-open backstop, and ACK encoding.
 *
 * One input is one connection under one config. Its first byte is the "mode"
 * (how the rest is chunked into reads, whether a valid HAPROXY-HELLO is put
 * in front so that NOTIFY parsing is reached, whether ACKs are sent from
 * inside the callback or after it as when Redis answers later, how output is
 * drained); the next CFG_BYTES choose the config (see config_text(): which
 * rules, their keys, matches, limits fixed or from args with max_*, shadow,
 * sliding window, lease on or off, standalone or with Redis); the other
 * bytes are what HAProxy sends. Everything the agent writes back is parsed
 * again, and the invariants are checked: each frame decodes within the
 * negotiated size, AGENT-HELLO comes first, nothing follows an
 * AGENT-DISCONNECT, ACK actions decode and say blocked as the decisions do,
 * one ACK per answered NOTIFY, no frame split at the end; every hit is
 * decided, with limits inside its rule's ceilings and a sane retry time; the
 * leases never admit more than the stand-in Redis granted, also once a
 * blocked request's tokens went back ([agent] charge = all-or-nothing: a
 * refund never gives back more than was taken). A broken invariant aborts.
 *
 * Built two ways:
 *  - tests/fuzz/fuzz_spop: with -fsanitize=fuzzer (configure CC=clang
 *    --enable-fuzzing; run it with "make fuzz").
 *  - tests/fuzz/fuzz_smoke: with -DFUZZ_STANDALONE and fuzz_spop_smoke.c
 *    (its seeds and mutations, and the driver of fuzz_main.h), as a
 *    regression test in "make check".
 */
#include "fuzz_spop.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limits/bucket.h"
#include "config/config.h"
#include "lease/lease.h"
#include "limiter/limiter_charge.h"
#include "limiter/limiter_core.h"
#include "limiter/limiter_jobs.h"
#include "limiter/limiter_req.h"
#include "rules/rules.h"
#include "spop/spop.h"
#include "spop/spop_conn.h"
#include "spop_vectors.h"
#include "store/store_result.h"

#define AGENT_FRAME SPOP_DEFAULT_FRAME_SIZE
#define MAX_DEFERRED 16 /* NOTIFYs waiting for their ACK, as while Redis answers */
#define MAX_CALLS 64    /* stand-in Redis calls for one hit, at most */
#define CLOCK_START_US 1000000000ULL
#define CLOCK_STEP_US 7919ULL
#define LEASE_TTL_MS 1000
#define CLOSED_RETRY_US 1000000ULL

/* The config of the CFG_BYTES at cfg into buf (a few hundred bytes per
 * rule). The args are those of the captured NOTIFYs (key, ip, path, method,
 * plan, n, neg, missing, b) and of the seeds' own (rate, burst). */
static void config_text(const uint8_t *cfg, char *buf, size_t cap)
{
    static const char *const rates[] = {"3/1s", "1000/1m", "1/1h", "5/1s"};
    static const char *const max_rates[] = {"10/1s", "100/1m", "1000000/1d", "2/1s"};
    static const char *const keys[] = {NULL, "key", "ip", "key, plan, n, neg, b"};
    static const char *const matches[] = {
        "match = plan ^(free|paid)$\n", "match = method ^(GET|POST)$\n  path ^/\n",
        "match = path ^/login\n", "match = b ^true$\nmatch = n ^[0-9]{1,3}$\n"};
    unsigned g = cfg[0], nrules = 1 + (g & G_NRULES_MASK);
    size_t n = 0;

    n += (size_t)snprintf(buf + n, cap - n, "[agent]\nmax_key = %s\nshadow = %s\n",
                          g & G_SMALL_KEY ? "16" : "512", g & G_SHADOW ? "yes" : "no");
    if (g & G_SHARE)
        n += (size_t)snprintf(buf + n, cap - n, "[fallback]\nshare = 0.25\nmode = closed\n");
    if (g & G_FRACTION)
        n += (size_t)snprintf(buf + n, cap - n, "[lease]\nmax_fraction = 1\n");
    for (unsigned i = 0; i < nrules && n < cap; i++) {
        unsigned r = cfg[1 + i], k = (r >> R_KEYS_SHIFT) & 3;

        n += (size_t)snprintf(buf + n, cap - n, "[rule:r%u]\n%s", i,
                              i % 2 ? "message = check-rate\n" : "");
        if (keys[k])
            n += (size_t)snprintf(buf + n, cap - n, "key = %s\n", keys[k]);
        if (r & R_MATCH)
            n += (size_t)snprintf(buf + n, cap - n, "%s", matches[i]);
        if (r & R_RATE_ARG)
            n += (size_t)snprintf(buf + n, cap - n, "rate = arg:rate\nmax_rate = %s\n",
                                  max_rates[i]);
        else
            n += (size_t)snprintf(buf + n, cap - n, "rate = %s\n", rates[i]);
        if (r & R_BURST_ARG)
            n += (size_t)snprintf(buf + n, cap - n, "burst = arg:burst\nmax_burst = %u\n",
                                  i == 2 ? 1000000u : 4u + i);
        else if (i == 1) /* and a penalty box: its denials block the key for 2 s */
            n += (size_t)snprintf(buf + n, cap - n, "burst = 2\nblock_for = 2s\n");
        /* costs: rule 2's from the arg n (clamped, or 1 when unusable), rule 3's fixed */
        if (i >= 2)
            n += (size_t)snprintf(buf + n, cap - n, "%s",
                                  i == 2 ? "cost = arg:n\nmax_cost = 5\n" : "cost = 2\n");
        n += (size_t)snprintf(buf + n, cap - n, "%s%s%s%s", r & R_SHADOW ? "shadow = yes\n" : "",
                              r & R_SLIDING ? "algorithm = sliding-window\n" : "",
                              r & R_LEASE_OFF ? "lease = off\n" : "",
                              i == 3 ? "on_redis_down = closed\n" : "");
    }
}

/* The rulesets of the last RS_CACHE configs seen, built once each: most
 * inputs reuse one (the seeds have a few configs, and mutations mostly
 * change the frames); building one per input was most of the smoke run's
 * time under ASan. fuzz_rs and fuzz_lcfg are the current input's. */
#define RS_CACHE 16
static struct {
    uint8_t cfg[CFG_BYTES];
    struct ruleset *rs;
    struct lease_config lcfg;
} rs_cache[RS_CACHE];
static unsigned rs_next; /* the slot replaced next */
static const struct ruleset *fuzz_rs;
static struct lease_config fuzz_lcfg;

/* Totals over all inputs, for the standalone summary: how deep inputs go. */
static unsigned long long total_acks, total_disconnects, total_hits, total_leased, total_arg_limits,
    total_blocked, total_refunded;

/* A NOTIFY decided but not answered yet. */
struct held_notify {
    uint64_t stream_id, frame_id;
    struct rule_eval ev;
};

/* One input = one connection. */
struct fuzz_run {
    unsigned mode;
    unsigned cfg;
    struct spop_conn c;
    struct bucket_table *buckets;  /* standalone decisions */
    struct bucket_table *backstop; /* fail-open, as with Redis down */
    struct bucket_table *redis;    /* the stand-in Redis: its buckets, by Redis key */
    struct lease_table *leases;
    struct lease_waiter *waiters; /* the core's, one per hit */
    size_t waiters_cap;
    uint64_t granted;   /* tokens the stand-in Redis leased out */
    uint64_t leased_ok; /* decisions the lease cache allowed from them */
    uint64_t now_us;
    struct rule_eval ev;
    struct held_notify held[MAX_DEFERRED];
    size_t nheld;
    uint32_t rng; /* chunk sizes of MODE_CHUNK 7 */

    /* What HAProxy reads: drained output not parsed yet, and what was seen. */
    uint8_t *wire;
    size_t wire_len, wire_cap;
    size_t acks_queued, acks_seen, frames_seen;
    int hello_seen, disconnect_seen;
};

static void fuzz_fail(const char *what)
{
    fprintf(stderr, "fuzz_spop: invariant broken: %s\n", what);
#ifdef FUZZ_STANDALONE
    fuzz_spop_report_input();
#endif
    abort();
}

/* The ruleset for config bytes cfg; NULL when the config is refused (a
 * config_text() bug: every choice must make a valid file). */
static const struct ruleset *fuzz_ruleset(const uint8_t *cfg)
{
    struct config *c = NULL;
    char text[4096], err[1024];

    for (unsigned i = 0; i < RS_CACHE; i++) {
        if (rs_cache[i].rs && memcmp(cfg, rs_cache[i].cfg, CFG_BYTES) == 0) {
            fuzz_lcfg = rs_cache[i].lcfg;
            return fuzz_rs = rs_cache[i].rs;
        }
    }
    config_text(cfg, text, sizeof(text));
    if (config_load_string(text, "fuzz.ini", &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_spop: config refused:\n%s---\n%s", err, text);
        fuzz_fail("a generated config is refused");
    }
    fuzz_lcfg = (struct lease_config){c->lease_interval_ms * 1000, LEASE_TTL_MS * 1000,
                                      c->lease_max_fraction,       0,
                                      !!(cfg[0] & G_EXACT_COLD),   1};
    struct ruleset *rs = ruleset_new(c);
    if (!rs)
        fuzz_fail("out of memory building the ruleset");
    ruleset_unref(rs_cache[rs_next].rs);
    rs_cache[rs_next].rs = rs;
    rs_cache[rs_next].lcfg = fuzz_lcfg;
    memcpy(rs_cache[rs_next].cfg, cfg, CFG_BYTES);
    rs_next = (rs_next + 1) % RS_CACHE;
    return fuzz_rs = rs;
}

/* ---- what HAProxy reads --------------------------------------------------- */

static void check_agent_hello(struct fuzz_run *r, const struct spop_frame *f)
{
    struct spop_reader rd = {f->payload, f->payload + f->payload_len};
    struct spop_str key;
    struct spop_data val;
    int ret, has_version = 0, has_max = 0, has_caps = 0;

    if (r->frames_seen != 0 || r->hello_seen)
        fuzz_fail("AGENT-HELLO is not the first frame");
    r->hello_seen = 1;
    while ((ret = spop_kv_next(&rd, &key, &val)) == 1) {
        if (key.len == 7 && memcmp(key.ptr, "version", 7) == 0)
            has_version = val.type == SPOP_DATA_STR;
        else if (key.len == 14 && memcmp(key.ptr, "max-frame-size", 14) == 0)
            has_max = val.type == SPOP_DATA_UINT32 && val.u.uint == r->c.max_frame;
        else if (key.len == 12 && memcmp(key.ptr, "capabilities", 12) == 0)
            has_caps = val.type == SPOP_DATA_STR;
    }
    if (ret < 0 || !has_version || !has_max || !has_caps)
        fuzz_fail("AGENT-HELLO does not decode or lacks an item");
}

static void check_ack(struct fuzz_run *r, const struct spop_frame *f)
{
    struct spop_reader rd = {f->payload, f->payload + f->payload_len};
    struct spop_str name;
    struct spop_data val;
    uint8_t action, scope;
    int ret, n = 0;

    if (!r->hello_seen)
        fuzz_fail("ACK before AGENT-HELLO");
    if (!(f->flags & SPOP_FLAG_FIN))
        fuzz_fail("ACK without the FIN flag");
    while ((ret = spop_action_next(&rd, &action, &scope, &name, &val)) == 1) {
        if (name.len == 0 || name.len > SPOP_MAX_VAR_NAME)
            fuzz_fail("ACK variable name empty or too long");
        /* rules_encode_actions always says txn.blocked first */
        if (n++ == 0 && (action != SPOP_ACT_SET_VAR || scope != SPOP_SCOPE_TXN || name.len != 7 ||
                         memcmp(name.ptr, "blocked", 7) != 0 || val.type != SPOP_DATA_BOOL))
            fuzz_fail("ACK does not start with set-var(txn.blocked)");
    }
    if (ret < 0 || n == 0)
        fuzz_fail("ACK actions do not decode");
    r->acks_seen++;
}

static void check_frame(struct fuzz_run *r, const struct spop_frame *f)
{
    struct spop_disconnect d;

    if (r->disconnect_seen)
        fuzz_fail("a frame after AGENT-DISCONNECT");
    switch (f->type) {
    case SPOP_FRAME_AGENT_HELLO:
        check_agent_hello(r, f);
        break;
    case SPOP_FRAME_ACK:
        check_ack(r, f);
        break;
    case SPOP_FRAME_AGENT_DISCONNECT:
        if (spop_disconnect_decode(f, &d) < 0)
            fuzz_fail("AGENT-DISCONNECT does not decode");
        if (d.status_code != r->c.status)
            fuzz_fail("AGENT-DISCONNECT status differs from spop_conn.status");
        r->disconnect_seen = 1;
        break;
    default:
        fuzz_fail("the agent wrote a frame of a type it must not send");
    }
    r->frames_seen++;
}

/* Parse every whole frame HAProxy has received so far. */
static void wire_parse(struct fuzz_run *r)
{
    size_t off = 0;

    for (;;) {
        struct spop_frame f;
        size_t used;
        int ret = spop_frame_decode(r->wire + off, r->wire_len - off, r->c.max_frame, &f, &used);

        if (ret == SPOP_EAGAIN)
            break;
        if (ret < 0)
            fuzz_fail("the agent wrote a frame that does not decode (or is too big)");
        check_frame(r, &f);
        off += used;
    }
    memmove(r->wire, r->wire + off, r->wire_len - off);
    r->wire_len -= off;
}

/* Write pending output as a socket would: all of it, or half at a time. */
static void drain(struct fuzz_run *r, int all)
{
    size_t len;
    const uint8_t *p;

    p = spop_conn_out(&r->c, &len);
    if (len == 0)
        return;
    if (!all && (r->mode & MODE_DRAIN_HALF) && len > 1)
        len = (len + 1) / 2;
    if (r->wire_len + len > r->wire_cap) {
        size_t cap = r->wire_cap ? r->wire_cap : 4096;
        uint8_t *w;

        while (cap < r->wire_len + len)
            cap *= 2;
        if (!(w = realloc(r->wire, cap)))
            fuzz_fail("out of memory");
        r->wire = w;
        r->wire_cap = cap;
    }
    memcpy(r->wire + r->wire_len, p, len);
    r->wire_len += len;
    spop_conn_out_consumed(&r->c, len);
    wire_parse(r);
}

/* ---- the agent's side ----------------------------------------------------- */

struct ack_arg {
    const struct ruleset *rs;
    const struct rule_eval *ev;
};

static int encode_ack(struct spop_writer *w, void *arg)
{
    const struct ack_arg *a = arg;
    return rules_encode_actions(w, a->rs, a->ev);
}

/* The ACK's first variable says what the decisions say (in a frame as small
 * as HAProxy may offer, where the other variables may not fit). */
static void check_ack_blocked(const struct rule_eval *ev)
{
    uint8_t buf[SPOP_MIN_FRAME_SIZE];
    struct spop_writer w = {buf, buf + sizeof(buf)};
    struct spop_reader rd = {buf, NULL};
    struct spop_str name;
    struct spop_data val;
    uint8_t action, scope;

    if (rules_encode_actions(&w, fuzz_rs, ev) != 0)
        fuzz_fail("the ACK of a decision does not fit the smallest frame");
    rd.end = w.p;
    if (spop_action_next(&rd, &action, &scope, &name, &val) != 1 || val.type != SPOP_DATA_BOOL ||
        (val.u.sint != 0) != (rules_blocked(fuzz_rs, ev) != 0))
        fuzz_fail("the ACK's blocked differs from the decisions");
}

static void ack(struct fuzz_run *r, uint64_t stream_id, uint64_t frame_id,
                const struct rule_eval *ev)
{
    struct ack_arg a = {fuzz_rs, ev};
    int closing = r->c.state == SPOP_CONN_CLOSING;

    check_ack_blocked(ev);
    if (spop_conn_ack(&r->c, stream_id, frame_id, encode_ack, &a) == 0 && !closing)
        r->acks_queued++;
}

static uint64_t ms_up(uint64_t us)
{
    return (us + 999) / 1000;
}

/* A table on first use: most inputs never need the backstop, the stand-in
 * Redis or the lease cache (allocations per input cost the smoke build under
 * ASan most of its time). */
static struct bucket_table *table(struct bucket_table **t)
{
    if (!*t && !(*t = bucket_table_new(1)))
        fuzz_fail("out of memory");
    return *t;
}

static struct lease_table *leases(struct fuzz_run *r)
{
    if (!r->leases) {
        if (!(r->leases = lease_table_new(&fuzz_lcfg, 1)))
            fuzz_fail("out of memory");
        lease_table_set_job_room(r->leases, sizeof(struct rjob)); /* the core's calls */
    }
    return r->leases;
}

/* The stand-in Redis runs job j as the scripts would, on exact buckets of
 * its own (one per Redis key): a claim takes what it wants or what is left,
 * an exact call one token. Returns the reply's values in v. */
static int redis_run(struct fuzz_run *r, const struct lease_job *j, uint64_t cost, int64_t *v)
{
    /* the scripts' penalty box too (block_ms): a blocked key grants nothing */
    const struct bucket_params p = {j->algorithm, j->limit,           j->period_ms * 1000,
                                    j->burst,     j->block_ms * 1000, j->offset_ms * 1000,
                                    j->period_ms, j->block_ms,        j->offset_ms, 0};
    struct bucket_result res, probe;
    uint64_t got = 0;

    if (j->kind == LEASE_JOB_EXACT) {
        bucket_table_take(table(&r->redis), "", j->key, j->keylen, &p, r->now_us, cost, &res);
        v[EXACT_R_ALLOWED] = res.allowed;
        v[EXACT_R_REMAINING] = (int64_t)res.remaining;
        v[EXACT_R_RETRY_MS] = (int64_t)ms_up(res.retry_us);
        v[EXACT_R_RESET_MS] = (int64_t)ms_up(res.reset_us);
        v[EXACT_R_TIME_MS] = (int64_t)(r->now_us / 1000);
        if (res.allowed)
            r->granted += cost;
        return EXACT_R_COUNT;
    }
    memset(v, 0, CLAIM_R_COUNT * sizeof(*v));
    if (j->kind != LEASE_JOB_CLAIM || j->want == 0)
        return CLAIM_R_COUNT; /* a give-back: nothing granted */
    bucket_table_take(table(&r->redis), "", j->key, j->keylen, &p, r->now_us, j->want, &res);
    if (res.allowed) {
        got = j->want;
    } else if (res.remaining > 0) { /* fewer than wanted: those */
        uint64_t left = res.remaining;
        bucket_table_take(table(&r->redis), "", j->key, j->keylen, &p, r->now_us, left, &res);
        got = res.allowed ? left : 0;
    }
    if (got == 0) /* how long until one would pass: takes nothing */
        bucket_table_take(table(&r->redis), "", j->key, j->keylen, &p, r->now_us, 1, &probe);
    else
        probe = (struct bucket_result){1, 0, 0, 0};
    r->granted += got;
    v[CLAIM_R_GRANTED] = (int64_t)got;
    v[CLAIM_R_REMAINING] = probe.allowed ? 0 : (int64_t)probe.remaining;
    v[CLAIM_R_HELD] = (int64_t)got;
    v[CLAIM_R_HOLDERS] = got > 0;
    v[CLAIM_R_RETRY_MS] = got ? 0 : (int64_t)(ms_up(probe.retry_us) ? ms_up(probe.retry_us) : 1);
    v[CLAIM_R_RESET_MS] = (int64_t)ms_up(res.reset_us);
    v[CLAIM_R_LEASE_MS] = got ? LEASE_TTL_MS : 0;
    v[CLAIM_R_MINE] = (int64_t)got;
    return CLAIM_R_COUNT;
}

/* The stand-in Redis answers j, a call the core handed back, at once:
 * returns what the core hands back next (a lease's next call), or NULL. */
static struct rjob *redis_answer(struct fuzz_run *r, struct limiter_core *c, struct rjob *j)
{
    struct store_result res = {.status = STORE_OK};

    if (j->kind == RJOB_LEASE) { /* a new key's first SET: as if it were there */
        j->lj->sent_us = r->now_us;
        res.n = redis_run(r, j->lj, 1, res.v);
    } else if (j->kind == RJOB_EXACT) {
        const struct lease_job lj = {.kind = LEASE_JOB_EXACT,
                                     .algorithm = j->algorithm,
                                     .limit = j->limit,
                                     .period_ms = j->period_ms,
                                     .burst = j->burst,
                                     .block_ms = j->block_ms,
                                     .offset_ms = j->offset_ms,
                                     .key = j->key,
                                     .keylen = j->keylen};
        res.n = redis_run(r, &lj, j->cost, res.v);
    } else if (j->kind == RJOB_CC_RELEASE) { /* a release message's: not held here */
        res.n = CC_RELEASE_R_COUNT;
    } else {
        fuzz_fail("a decision sent a call that is no lease's, exact or release");
    }
    return core_reply(c, j, &res, r->now_us);
}

/* The core on this input's tables: the stand-in Redis' keys have no prefix.
 * The backstop and the lease cache only with Redis (on first use). */
static void core_of(struct fuzz_run *r, struct limiter_core *c)
{
    int with_redis = (r->cfg & G_REDIS) != 0;

    memset(c, 0, sizeof(*c));
    c->buckets = r->buckets;
    c->backstop = with_redis ? table(&r->backstop) : r->backstop;
    c->leases = with_redis ? leases(r) : r->leases;
    c->redis = with_redis;
}

static void fuzz_req_done(struct limiter_req *req)
{
    (void)req;
    fuzz_fail("a request completed after its decision returned, with nothing in flight");
}

/* [agent] charge = all-or-nothing, by the agent's own core (core_settle,
 * src/limiter/limiter_charge.c) on this input's tables: a request a
 * non-shadow rule blocked gives back what the other non-shadow rules took,
 * each to where it came from; the refund calls it hands back are run by the
 * stand-in Redis. Never more than was taken, and a lease never gives back
 * what Redis did not grant it (leased_ok and granted go down together, so
 * the check after it still holds). */
static void refund(struct fuzz_run *r, struct rule_eval *ev)
{
    struct limiter_core c;
    struct limiter_req req = {.ev = *ev, .rs = (struct ruleset *)fuzz_rs};
    struct core_jobs jobs = {0};
    int was[8];

    if (fuzz_rs->cfg->charge == CHARGE_EACH || !rules_blocked(fuzz_rs, ev))
        return;
    core_of(r, &c);
    if (ev->nhits > sizeof(was) / sizeof(was[0]))
        fuzz_fail("more hits than rules");
    for (size_t i = 0; i < ev->nhits; i++)
        was[i] = ev->hits[i].out.charged;
    core_settle(&c, &req, r->now_us, 1, &jobs);
    for (size_t i = 0; i < ev->nhits; i++) {
        const struct rule_hit *h = &ev->hits[i];
        uint64_t back = h->out.refunded;

        if (was[i] == RULE_CHARGED_LEASE) {
            if (back > r->leased_ok)
                fuzz_fail("a lease gave back more than it spent");
            r->leased_ok -= back;
        }
        if (back > h->cost)
            fuzz_fail("a refund gave back more than the request took");
        total_refunded += back;
    }
    for (struct rjob *j = jobs.head, *next; j; j = next) {
        /* as the refund scripts: the call's own limits, at its take's time */
        const struct bucket_params p = {j->algorithm, j->limit,           j->period_ms * 1000,
                                        j->burst,     j->block_ms * 1000, j->offset_ms * 1000,
                                        j->period_ms, j->block_ms,        j->offset_ms, 0};
        unsigned k = 0;

        next = j->next;
        if (j->kind != RJOB_REFUND)
            fuzz_fail("settling sent a call that is no refund");
        while (k < fuzz_rs->cfg->nrules && fuzz_rs->metrics[k] != j->m)
            k++;
        if (k == fuzz_rs->cfg->nrules)
            fuzz_fail("a refund of no rule");
        uint64_t back = bucket_table_refund(table(&r->redis), "", j->key, j->keylen, &p,
                                            j->taken_ms, r->now_us, j->cost, NULL);
        if (back > r->granted)
            fuzz_fail("Redis took back more than it granted");
        if (back > j->cost)
            fuzz_fail("a refund gave back more than the request took");
        r->granted -= back;
        if (fuzz_rs->cfg->rules[k].lease)
            r->leased_ok = r->leased_ok > back ? r->leased_ok - back : 0;
        total_refunded += back;
        free(j);
    }
}

/* Decide every hit as the agent does, by its core: standalone, from the
 * buckets in memory; with Redis, leased rules through the lease cache and
 * the others by an exact call, each call answered at once by the stand-in
 * Redis; streams whose id is a multiple of 3 as with Redis down. */
static void decide(struct fuzz_run *r, const struct spop_frame *f, struct rule_eval *ev)
{
    int up = f->stream_id % 3 != 0;
    struct limiter_core c;
    struct limiter_req req = {.ev = *ev,
                              .rs = (struct ruleset *)fuzz_rs,
                              .waiters = r->waiters,
                              .waiters_cap = r->waiters_cap,
                              .done = fuzz_req_done};
    struct core_jobs jobs = {0};

    for (size_t i = 0; i < ev->nhits; i++) {
        struct rule_hit *h = &ev->hits[i];
        const struct cfg_rule *rule = &fuzz_rs->cfg->rules[h->rule];
        const struct bucket_params *top = &fuzz_rs->params[h->rule];

        /* a request's limits: its args, within the rule's ceilings */
        if (h->params.limit < 1 || h->params.burst < 1 || h->params.period_us < 1 ||
            h->params.period_us > BUCKET_MAX_PERIOD_US || h->backstop.burst < 1 ||
            h->params.algorithm != top->algorithm)
            fuzz_fail("a hit with unusable limits");
        /* a request's cost: its rule's, or its arg's within max_cost (1, also
         * within it, when that arg is unusable) */
        if (rule->cost_arg ? h->cost > rule->max_cost : h->cost != rule->cost)
            fuzz_fail("a hit's cost not its rule's, or above max_cost");
        if (rule->rate_arg || rule->burst_arg) {
            total_arg_limits++;
            if (rules_rate_above(h->params.limit, h->params.period_us, top->limit,
                                 top->period_us) ||
                h->params.burst > top->burst)
                fuzz_fail("a hit's limits above its rule's ceilings");
        }
        h->out.res = (struct bucket_result){0, 0, 0, 0};
    }
    core_of(r, &c);
    long decided = core_decide(&c, &req, r->now_us, up, up, &jobs);
    if (decided < 0)
        fuzz_fail("out of memory");
    r->waiters = req.waiters; /* kept from one request to the next, as the agent does */
    r->waiters_cap = req.waiters_cap;
    for (int calls = 0; jobs.head; calls++) {
        struct rjob *j = jobs.head;
        if (calls == MAX_CALLS * 4)
            fuzz_fail("a decision takes more Redis calls than it can need");
        jobs.head = j->next;
        if (!jobs.head)
            jobs.tail = NULL;
        if ((j = redis_answer(r, &c, j)))
            core_jobs_push(&jobs, j);
    }
    if (core_decide_end(&req, (unsigned)decided) != 0)
        fuzz_fail("a decision left waiting with no call in flight");
    for (size_t i = 0; i < ev->nhits; i++) {
        const struct rule_hit *h = &ev->hits[i];
        const struct cfg_rule *rule = &fuzz_rs->cfg->rules[h->rule];

        total_hits++;
        if (rule->lease && c.redis)
            total_leased++;
        /* what the leases (and a leased rule's exact calls) admitted, all
         * from tokens the stand-in Redis granted */
        if (rule->lease && h->out.res.allowed &&
            (h->out.charged == RULE_CHARGED_LEASE || h->out.charged == RULE_CHARGED_EXACT))
            r->leased_ok += h->cost;
        if (!h->out.res.allowed) {
            total_blocked++;
            if (h->out.res.retry_us == 0 || h->out.res.retry_us > BUCKET_MAX_PERIOD_US)
                fuzz_fail("denied without a sane retry time");
        } else if (h->out.res.retry_us != 0) {
            fuzz_fail("allowed with a retry time");
        }
    }
    refund(r, ev);
    if (r->leased_ok > r->granted)
        fuzz_fail("the leases allowed more than Redis granted");
}

/* The slot token parser on any bytes (a NOTIFY's payload, a release's
 * garbage): a token it takes writes back to the same bytes, its key within
 * the bound; and the releases rules_match found name a concurrency rule or
 * none. */
static void check_slots(const struct spop_frame *f, const struct rule_eval *ev)
{
    struct rules_slot s;
    char tok[RULES_SLOT_TOKEN_MAX];
    size_t len =
        f->payload_len < RULES_SLOT_TOKEN_MAX + 8 ? f->payload_len : RULES_SLOT_TOKEN_MAX + 8;

    if (rules_slot_parse((const char *)f->payload, len, &s) == 0) {
        if (s.key_len > RULES_SLOT_KEY_MAX || s.id == 0 || s.rule_len > CFG_MAX_NAME)
            fuzz_fail("a slot token out of its bounds");
        size_t n = rules_slot_token(tok, s.rule, s.rule_len, s.src, s.id, s.key, s.key_len);
        if (n != len || memcmp(tok, f->payload, n) != 0)
            fuzz_fail("a slot token that does not write back to itself");
    }
    for (size_t i = 0; i < ev->nreleases; i++) {
        const struct rule_release *rel = &ev->releases[i];
        if (rel->rule >= (int)fuzz_rs->cfg->nrules ||
            (rel->rule >= 0 && fuzz_rs->cfg->rules[rel->rule].algorithm != BUCKET_CONCURRENCY))
            fuzz_fail("a release naming a rule that is not a concurrency rule");
    }
}

static int on_notify(void *ctx, struct spop_conn *c, const struct spop_frame *f)
{
    struct fuzz_run *r = ctx;
    int ret;

    if (c != &r->c || c->state != SPOP_CONN_READY)
        fuzz_fail("NOTIFY handed over outside the READY state");
    ret = rules_match(fuzz_rs, f->payload, f->payload_len, &r->ev);
    if (ret < 0)
        return ret == SPOP_EINVAL ? SPOP_ST_INVALID : SPOP_ST_RES_ALLOC_ERR;
    r->now_us += (r->mode & MODE_CLOCK_FROM_ID) ? (f->frame_id & 0xfffff) * 1000 : CLOCK_STEP_US;
    check_slots(f, &r->ev);
    decide(r, f, &r->ev);
    rules_account(fuzz_rs, &r->ev, r->now_us);
    if ((r->mode & MODE_DEFER_ACK) && r->nheld < MAX_DEFERRED) {
        struct held_notify *h = &r->held[r->nheld++];

        h->stream_id = f->stream_id;
        h->frame_id = f->frame_id;
        rules_eval_move(&h->ev, &r->ev);
        return 0;
    }
    ack(r, f->stream_id, f->frame_id, &r->ev);
    return 0;
}

/* Answer the NOTIFYs held back, newest first (out of order, as pipelining
 * allows). */
static void answer_held(struct fuzz_run *r)
{
    while (r->nheld > 0) {
        struct held_notify *h = &r->held[--r->nheld];

        ack(r, h->stream_id, h->frame_id, &h->ev);
        rules_eval_free(&h->ev);
    }
}

/* Size of the next read for the chunk pattern of the mode byte. */
static size_t chunk_len(struct fuzz_run *r, size_t left)
{
    static const size_t fixed[] = {SIZE_MAX, 1, 2, 3, 7, 64, 1000};
    unsigned k = r->mode & MODE_CHUNK_MASK;
    size_t n;

    if (k < sizeof(fixed) / sizeof(fixed[0])) {
        n = fixed[k];
    } else {
        r->rng = r->rng * 1103515245u + 12345u;
        n = 1 + (r->rng >> 16) % 97;
    }
    return n < left ? n : left;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct spop_vector *hello = &spop_vectors[SPOP_VEC_HAPROXY_HELLO];
    struct fuzz_run r;
    const uint8_t *src[2];
    size_t srclen[2], nsrc = 0, reads = 0;
    int closed = 0;

    if (size < 1 + CFG_BYTES)
        return 0;
    fuzz_ruleset(data + 1);
    memset(&r, 0, sizeof(r));
    r.mode = data[0];
    r.cfg = data[1];
    r.rng = (uint32_t)size * 2654435761u;
    r.now_us = CLOCK_START_US;
    if (spop_conn_init(&r.c, (r.mode & MODE_SMALL_FRAME) ? SPOP_MIN_FRAME_SIZE : AGENT_FRAME) < 0 ||
        !(r.buckets = bucket_table_new(1)))
        fuzz_fail("out of memory");
    if (r.mode & MODE_PREPEND_HELLO) {
        src[nsrc] = hello->data;
        srclen[nsrc++] = hello->len;
    }
    src[nsrc] = data + 1 + CFG_BYTES;
    srclen[nsrc++] = size - 1 - CFG_BYTES;

    for (size_t s = 0; s < nsrc && !closed; s++) {
        size_t off = 0;

        while (off < srclen[s] && !closed) {
            size_t room;
            uint8_t *in = spop_conn_in_space(&r.c, &room);
            size_t n = chunk_len(&r, srclen[s] - off);

            if (room == 0)
                fuzz_fail("read buffer full without a whole frame: the agent would stall");
            if (n > room)
                n = room;
            memcpy(in, src[s] + off, n);
            off += n;
            closed = spop_conn_in_commit(&r.c, n, on_notify, &r);
            /* Held answers come after a few more reads, as Redis replies do:
             * by then the frames they answer are gone from the read buffer. */
            if (++reads % 3 == 0 || closed)
                answer_held(&r);
            drain(&r, 0);
        }
    }
    answer_held(&r);
    drain(&r, 1);
    if (r.wire_len != 0)
        fuzz_fail("output ends inside a frame");
    total_acks += r.acks_seen;
    total_disconnects += (unsigned long long)r.disconnect_seen;
    if (r.acks_seen != r.acks_queued)
        fuzz_fail("ACKs written differ from ACKs queued");
    if (closed && r.c.state != SPOP_CONN_CLOSING)
        fuzz_fail("asked to close outside the CLOSING state");

    spop_conn_release(&r.c);
    bucket_table_free(r.buckets);
    bucket_table_free(r.backstop);
    bucket_table_free(r.redis);
    lease_table_free(r.leases);
    free(r.waiters);
    rules_eval_free(&r.ev);
    free(r.wire);
    return 0;
}

#ifdef FUZZ_STANDALONE
void fuzz_spop_summary(const char *name)
{
    printf("%s: %llu ACKs, %llu AGENT-DISCONNECTs\n", name, total_acks, total_disconnects);
    printf("%s: %llu rule hits (%llu with limits from args, %llu through the lease cache), "
           "%llu blocked, %llu tokens given back\n",
           name, total_hits, total_arg_limits, total_leased, total_blocked, total_refunded);
    /* the cached rulesets, freed for the leak check */
    for (unsigned i = 0; i < RS_CACHE; i++) {
        ruleset_unref(rs_cache[i].rs);
        rs_cache[i].rs = NULL;
    }
    fuzz_rs = NULL;
}
#endif
