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

#include "bucket.h"
#include "config/config.h"
#include "metrics.h"
#include "spop/spop.h"

struct ruleset {
    struct config *cfg;
    struct bucket_params *params;   /* per rule */
    struct bucket_params *backstop; /* per rule: share x rate and burst, for fail-open */
    struct metrics_rule **metrics;  /* per rule */
    atomic_int refs;
};

/* Build a ruleset owning cfg (freed with the ruleset). NULL when out of
 * memory (cfg is freed then too). refs starts at 1. */
struct ruleset *ruleset_new(struct config *cfg);
void ruleset_ref(struct ruleset *rs);
void ruleset_unref(struct ruleset *rs); /* frees at zero; NULL is a no-op */

/* Outcome of one rule for one request, filled by whoever decides. */
struct rule_outcome {
    struct bucket_result res;
    int degraded; /* decided without Redis because it was unreachable */
};

/* One rule applying to one request. The key is a copy (no view into the
 * frame), so a hit may outlive the input buffer while Redis answers. */
struct rule_hit {
    unsigned rule;           /* index in ruleset->cfg->rules */
    size_t key_off, key_len; /* client key in rule_eval.keys */
    struct rule_outcome out;
};

/* The rules that apply to one NOTIFY. Reusable: rules_eval_reset() keeps
 * the allocations. */
struct rule_eval {
    struct rule_hit *hits;
    size_t nhits, hits_cap;
    char *keys;
    size_t keys_len, keys_cap;
};

void rules_eval_reset(struct rule_eval *ev);
void rules_eval_free(struct rule_eval *ev);
/* Move src into dst (dst must be empty/zeroed); src is left empty. */
void rules_eval_move(struct rule_eval *dst, struct rule_eval *src);

static inline const char *rules_hit_key(const struct rule_eval *ev, const struct rule_hit *h)
{
    return ev->keys + h->key_off;
}

/* Find the rules that apply to the messages of a NOTIFY payload: each rule
 * at most once, in config order. Returns 0, SPOP_EINVAL when the payload is
 * malformed, or -ENOMEM. Keys longer than max_key are replaced by a hash. */
int rules_match(const struct ruleset *rs, const uint8_t *payload, size_t len,
                struct rule_eval *ev);

/* The client key a request is counted under, as rules_match() builds it,
 * from the text of its key args (len bytes; several args joined with '|'):
 * that text, with limits appended when not NULL (a rule taking its limits
 * per request from args keys each client by its limits too: RULES_LIMITS_SEP
 * then "N/PERIODms/BURST"), replaced by "#" and a 128-bit hash of it when
 * longer than max_key. Written NUL-terminated into out (cap bytes: a hashed
 * key needs RULES_HASHED_KEY_LEN + 1). Returns its length, or -1 when out is
 * too small. For the operator's GET /key and POST /reset, which must find
 * the bucket a request with that key would use. */
#define RULES_LIMITS_SEP '\x1f'
#define RULES_HASHED_KEY_LEN 33
int rules_client_key(const char *key, size_t len, const struct bucket_params *limits,
                     size_t max_key, char *out, size_t cap);

/* Count the decisions in the rule metrics (allowed / blocked / would_block,
 * blocked clients). */
void rules_account(const struct ruleset *rs, const struct rule_eval *ev, uint64_t now_us);

/* Write the ACK actions (set-var, scope txn) for the decided hits: see the
 * variables table of interface.md. With no hit, only blocked=false. */
int rules_encode_actions(struct spop_writer *w, const struct ruleset *rs,
                         const struct rule_eval *ev);

/* Whether the request is blocked (a non-shadow rule denied it). */
int rules_blocked(const struct ruleset *rs, const struct rule_eval *ev);

/* The text form of a typed value as used in keys and matches: strings and
 * binaries as they are, integers in decimal, addresses as inet_ntop text (a
 * v4-mapped v6 address as plain v4), booleans "true"/"false". Returns the
 * length written into buf (at most cap), or -1 for NULL (missing) values.
 * Strings are not copied: *out points either to buf or into the value. */
int rules_value_text(const struct spop_data *d, char *buf, size_t cap, const char **out);

#endif
