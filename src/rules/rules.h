/* SPDX-License-Identifier: Apache-2.0 */
/* rules.h - from NOTIFY messages to rule hits, and from decisions to ACK
 * variables.
 *
 * A ruleset is an immutable, reference-counted view of one loaded config:
 * requests in flight keep the ruleset they started with across a reload.
 * Pure: no sockets, no event loop, no Redis.
 */
#ifndef RULES_H
#define RULES_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "limits/bucket.h"
#include "config/config.h"
#include "metrics/metrics.h"
#include "spop/spop.h"

/* A rule's first ACK variables (blocked, rule, limit, policy) as encoded,
 * [0] allowed and [1] blocked; len 0 for a rule whose limits come from args. */
#define RULES_ACK_HEAD_MAX 256
/* An allowed ACK's last variables (remaining, reset, ratelimit) up to their
 * values: the set-var heads of the three, then the rule's "\"NAME\";r=". */
#define RULES_ACK_TAIL_MAX (64 + CFG_MAX_NAME)
struct rules_ack_head {
    size_t len[2];
    uint8_t bytes[2][RULES_ACK_HEAD_MAX];
    size_t tail_len; /* 0: encoded per ACK */
    uint8_t tail[RULES_ACK_TAIL_MAX];
};

struct ruleset {
    struct config *cfg;
    /* Per rule. A rule with limits from args (config_rule_per_request) has
     * them per request in its hits; here it has its ceilings. */
    struct bucket_params *params;
    struct bucket_params *backstop; /* share x rate and burst, for fail-open */
    /* The share backstop[] was built with: with share = auto, a request
     * recomputes its backstop only when the fleet's share is another one. */
    double backstop_share;
    struct metrics_rule **metrics;    /* per rule */
    struct rules_ack_head *ack_heads; /* per rule */
    uint64_t *bucket_seeds;           /* per rule: bucket_rule_seed() of its name */
    /* Per rule, NULL until ruleset_redis_heads(): the start of its Redis
     * keys, the part a client key does not change. */
    struct rules_redis_head *redis_heads;
    /* Some rule is a concurrency rule: without one, no message is a release
     * and no hit holds a slot (neither is looked for per request). */
    int has_concurrency;
    atomic_int refs;
};

/* Build a ruleset owning cfg (freed with the ruleset). NULL when out of
 * memory (cfg is freed then too). refs starts at 1. */
struct ruleset *ruleset_new(struct config *cfg);

/* The start of a rule's Redis keys: prefix, algorithm, name, ':' (the
 * client key follows, behind a slot fence when it holds '{': limiter_jobs.c's
 * core_redis_key, which says the layout). */
#define RULES_REDIS_HEAD_MAX 112
struct rules_redis_head {
    uint8_t len;
    char s[RULES_REDIS_HEAD_MAX - 1];
};
/* Each rule's head with the [redis] prefix in force (a restart-only
 * setting: the agent's first config's, whatever a reload says), so that a
 * decision copies it whole rather than assembling it. Before it the limiter
 * assembles every key; both make the same bytes. 0, or -1 out of memory or
 * with a prefix too long (the limiter then assembles keys as before). */
int ruleset_redis_heads(struct ruleset *rs, const char *prefix);
/* The 3 bytes after the prefix: the algorithm's key family ("t2:", ...). */
const char *rules_redis_tag(enum bucket_algorithm a);
/* The fallback backstop's period: period_us / share (share in (0, 1]),
 * within [1, BUCKET_MAX_PERIOD_US] whatever the share. */
uint64_t rules_backstop_period(uint64_t period_us, double share);

void ruleset_ref(struct ruleset *rs);
void ruleset_unref(struct ruleset *rs); /* frees at zero; NULL is a no-op */

/* What an allowed decision took its tokens from, so that they can be given
 * back when another rule blocks the request ([agent] charge =
 * all-or-nothing: limiter.c). */
enum rule_charged {
    RULE_CHARGED_NONE = 0, /* nothing taken (denied, a check, fail-closed) */
    RULE_CHARGED_BUCKET,   /* the standalone in-memory bucket */
    RULE_CHARGED_BACKSTOP, /* the fail-open backstop bucket */
    RULE_CHARGED_LEASE,    /* this agent's lease of the Redis bucket */
    RULE_CHARGED_EXACT,    /* the Redis bucket itself (tb_exact / sw_exact) */
};

/* Outcome of one rule for one request, filled by whoever decides. */
struct rule_outcome {
    struct bucket_result res;
    int degraded; /* decided without Redis because it was unreachable */
    int charged;  /* enum rule_charged */
    /* When the tokens were taken: the local clock (us) for a bucket, a
     * backstop or a lease; Redis' clock (ms, EXACT_R_TIME_MS) for an exact
     * call. A sliding window gives back only within the window of the take. */
    uint64_t charged_at;
    uint64_t refunded; /* tokens given back (limiter_settle) */
};

/* One rule applying to one request. The key is a copy (no view into the
 * frame), so a hit may outlive the input buffer while Redis answers. */
struct rule_hit {
    unsigned rule;           /* index in ruleset->cfg->rules */
    size_t key_off, key_len; /* client key in rule_eval.keys */
    /* The limits of this request: the rule's (ruleset params and backstop),
     * or those its args asked for, bounded by the rule's ceilings. */
    struct bucket_params params, backstop;
    /* Tokens this request takes (cost, or its arg clamped to max_cost; 1
     * when that arg is missing or invalid, counted as a mismatch). 0: a
     * check that takes nothing, allowed while a request of 1 would be. */
    uint64_t cost;
    struct rule_outcome out;
    /* A concurrency rule's slot, when the decision took one: its unique id
     * (0: none held) and where it is held, RULES_SLOT_REDIS or
     * RULES_SLOT_LOCAL (the in-memory table: standalone, or the fallback). */
    uint64_t slot_id;
    char slot_src;
};

#define RULES_SLOT_REDIS 'r'
#define RULES_SLOT_LOCAL 'l'

/* One token of a release message (rules_match_release): a slot to free. */
struct rule_release {
    int rule;     /* the concurrency rule it names; -1: unknown or malformed */
    unsigned via; /* the rule whose release message brought it (metrics) */
    char src;     /* RULES_SLOT_REDIS or RULES_SLOT_LOCAL */
    uint64_t id;
    size_t key_off, key_len; /* the slot key in rule_eval.keys */
    int freed;               /* set by whoever frees it: 1 it was held, 0 unknown */
};

/* The rules that apply to one NOTIFY. Reusable: rules_eval_reset() keeps
 * the allocations. */
struct rule_eval {
    struct rule_hit *hits;
    size_t nhits, hits_cap;
    char *keys;
    size_t keys_len, keys_cap;
    struct rx_scratch re;          /* for the match regexes */
    struct rule_release *releases; /* the slots release messages give back */
    size_t nreleases, releases_cap;
};

/* Append len bytes (and a NUL) to ev->keys: their offset in *off. 0 or
 * -ENOMEM. */
int rules_eval_keys_append(struct rule_eval *ev, const char *s, size_t len, size_t *off);

void rules_eval_reset(struct rule_eval *ev);
void rules_eval_free(struct rule_eval *ev);
/* Move src into dst (dst must be empty/zeroed); src is left empty. */
void rules_eval_move(struct rule_eval *dst, struct rule_eval *src);

static inline const char *rules_hit_key(const struct rule_eval *ev, const struct rule_hit *h)
{
    return ev->keys + h->key_off;
}

/* A client key longer than max_key, or starting with '#', is replaced by
 * '#' and 32 hex digits: the first 128 bits of its SHA-256. */
#define RULES_HASHED_KEY_LEN 33

/* Find the rules that apply to the messages of a NOTIFY payload: each rule
 * at most once, in config order. Returns 0, SPOP_EINVAL when the payload is
 * malformed, or -ENOMEM. Keys longer than max_key are replaced by a hash.
 *
 * A rule with rate = arg:NAME (or burst = arg:NAME) applies only when the
 * arg holds a valid rate (burst): a NULL or empty one skips it like a key
 * arg, an invalid one is counted as a mismatch (MISMATCH_ARG, sample
 * "NAME=VALUE"). A rate above max_rate is clamped to it, a burst to
 * max_burst. The client key of such a rule ends with its limits, "\x1f"
 * "N/PERIODms/BURST", so that keys given different limits never share a
 * bucket, a lease or a Redis key.
 *
 * A rule with cost = arg:NAME applies whatever that arg holds: its cost is
 * the arg's integer (>= 0), clamped to max_cost; a missing, empty or
 * invalid one costs 1 (never 0: a client must not get free requests by
 * leaving it out) and is counted as a mismatch (MISMATCH_ARG). */
int rules_match(const struct ruleset *rs, const uint8_t *payload, size_t len, struct rule_eval *ev);

/* The fail-open backstop of limits p under [fallback] share: share x rate
 * and share x burst, at least 1 (for a sliding or fixed window, share x N). */
void rules_backstop_params(const struct bucket_params *p, double share, struct bucket_params *b);

/* The limits of rule i for a request whose args say rate (text of its
 * rate = arg:NAME, "1000/1m") and burst (of burst = arg:NAME); NULL for a
 * rule that takes none: *p and its backstop *b, clamped to the rule's
 * ceilings as rules_match() does. 0, or RULES_BAD_RATE / RULES_BAD_BURST
 * when that text is missing or invalid (*p and *b then hold the ceilings). */
#define RULES_BAD_RATE (-1)
#define RULES_BAD_BURST (-2)
int rules_request_limits(const struct ruleset *rs, unsigned i, const char *rate, const char *burst,
                         struct bucket_params *p, struct bucket_params *b);

/* Whether rate n1 per p1 is above rate n2 per p2 (periods > 0), exactly. */
int rules_rate_above(uint64_t n1, uint64_t p1, uint64_t n2, uint64_t p2);

/* The client key a request is counted under, as rules_match() builds it,
 * from the text of its key args (len bytes; several args joined with '|'):
 * that text, with limits appended when not NULL (a rule taking its limits
 * per request from args keys each client by its limits too: RULES_LIMITS_SEP
 * then "N/PERIODms/BURST"), replaced by "#" and a 128-bit hash of it
 * (SHA-256) when longer than max_key or when it starts with '#' (so that
 * only hashes start with '#': no client can name a hashed bucket). Written NUL-terminated into out
 * (cap bytes: a hashed key needs RULES_HASHED_KEY_LEN + 1). Returns its length, or -1 when out is
 * too small. For the operator's GET /key and POST /reset, which must find
 * the bucket a request with that key would use. */
#define RULES_LIMITS_SEP '\x1f'
int rules_client_key(const char *key, size_t len, const struct bucket_params *limits,
                     size_t max_key, char *out, size_t cap);

/* The most one request can ever take under p: a token bucket's burst, a
 * sliding window's N. A cost above it is denied and takes nothing. */
static inline uint64_t rules_capacity(const struct bucket_params *p)
{
    return bucket_windowed(p->algorithm) ? p->limit : p->burst;
}

/* ---- concurrency slots (rules_slot.c) ---- */

/* A slot key: the client key, or its hash ('#' and 32 hex digits) when
 * longer than that or when it starts with '#', so that a token has a bound
 * whatever max_key says. Written NUL-terminated into out
 * (RULES_SLOT_KEY_MAX + 1 bytes); returns its length. Concurrency rules use
 * it for their Redis keys and local table too. */
#define RULES_SLOT_KEY_MAX RULES_HASHED_KEY_LEN
int rules_slot_key(const char *client_key, size_t len, char *out);

/* The longest token: RULE ":" SRC 16-hex-id ":" hex of the slot key. */
#define RULES_SLOT_TOKEN_MAX (CFG_MAX_NAME + 1 + 17 + 1 + 2 * RULES_SLOT_KEY_MAX)
_Static_assert(RULES_SLOT_TOKEN_MAX == CFG_SLOT_TOKEN_MAX, "config_ack_max_size counts tokens");
/* The most tokens one ACK carries (one per concurrency rule that admitted
 * the request): the slots of further rules free themselves after max_hold. */
#define RULES_SLOT_TOKENS_MAX 8
/* Write the token of a slot into out (RULES_SLOT_TOKEN_MAX bytes, no NUL);
 * returns its length. */
size_t rules_slot_token(char *out, const char *rule, size_t rule_len, char src, uint64_t id,
                        const char *skey, size_t skey_len);

/* A token taken apart; rule points into the text parsed. */
struct rules_slot {
    const char *rule;
    size_t rule_len;
    char src;
    uint64_t id; /* never 0 */
    char key[RULES_SLOT_KEY_MAX + 1];
    size_t key_len;
};
/* 0, or -1 when s (len bytes) is not a token. */
int rules_slot_parse(const char *s, size_t len, struct rules_slot *out);

/* The first concurrency rule whose release message is name (len bytes), or
 * -1: such a message is a release, never a request. */
int rules_release_rule(const struct config *cfg, const char *name, size_t len);

/* A release message m (of rule via): each token of its arg slot (space
 * separated) into ev->releases; a malformed one, or one naming no
 * concurrency rule, with rule -1. 0 or -ENOMEM. */
int rules_match_release(const struct ruleset *rs, const struct spop_message *m, unsigned via,
                        struct rule_eval *ev);

/* Count the decisions in the rule metrics (and the costs over capacity) (allowed / blocked /
 * would_block, blocked clients). */
void rules_account(const struct ruleset *rs, const struct rule_eval *ev, uint64_t now_us);

/* Waits (reset, retry_after) in an ACK are capped at this many seconds
 * (about 317 years), so that an ACK's size has a bound:
 * config_ack_max_size(). */
#define RULES_MAX_SECONDS CFG_ACK_MAX_SECONDS

/* Write the ACK actions (set-var, scope txn) for the decided hits: see the
 * variables table of doc/haproxy.md. With no hit, only blocked=false. When w
 * has no room for them all, only blocked and (when blocked) retry_after are
 * written, counted in acks_truncated: the decision always reaches HAProxy.
 * remaining is capped at the rule's capacity (max of burst and N). */
int rules_encode_actions(struct spop_writer *w, const struct ruleset *rs,
                         const struct rule_eval *ev);

/* Whether the request is blocked (a non-shadow rule denied it). */
int rules_blocked(const struct ruleset *rs, const struct rule_eval *ev);
/* Fill rs->ack_heads (ruleset_new does): -1 if a head does not fit. */
int rules_ack_heads_build(struct ruleset *rs);

/* The text form of a typed value as used in keys and matches: strings and
 * binaries as they are, integers in decimal, addresses as inet_ntop text (a
 * v4-mapped v6 address as plain v4), booleans "true"/"false". Returns the
 * length written into buf (at most cap), or -1 for NULL (missing) values.
 * Strings are not copied: *out points either to buf or into the value. */
int rules_value_text(const struct spop_data *d, char *buf, size_t cap, const char **out);

#endif
