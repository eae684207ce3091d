/* SPDX-License-Identifier: Apache-2.0 */
/* config_ack.c - the most bytes an ACK deciding by one rule can take
 * (config_ack_max_size): every variable rules_encode_actions() may set, at
 * its longest. config_check.c's end-of-file check holds max_frame_size against it;
 * tests/unit/rules/test_rules_match.c encodes the largest ACK of a rule and
 * checks that it fits.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "spop/spop.h"

static size_t decimal_digits(uint64_t v)
{
    size_t d = 1;

    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* One set-var action (rules.c): type, nb-args, scope, the name as a string,
 * the value's type byte, then vlen bytes of value. */
static size_t set_var_size(const char *name, size_t vlen)
{
    size_t n = strlen(name);

    return 3 + spop_varint_len(n) + n + 1 + vlen;
}

static size_t str_value_size(size_t len)
{
    return spop_varint_len(len) + len;
}

/* Mirrors rules_encode_actions(); tests/unit/rules/test_rules_match.c encodes the largest ACK
 * of a rule and checks that it fits in this. */
size_t config_ack_max_size(const struct cfg_rule *r)
{
    size_t name = strlen(r->name);
    /* a limit from an arg may be any N and window within the ceiling: count
     * the longest (the agent still shortens an ACK that does not fit) */
    uint64_t n = r->rate_arg ? CFG_MAX_COUNT : r->rate_n;
    uint64_t cap = r->rate_arg || r->burst_arg ? CFG_MAX_COUNT : r->burst > n ? r->burst : n;
    uint64_t window = ((r->rate_arg ? CFG_MAX_DURATION_MS : r->rate_period_ms) + 999) / 1000;
    /* "NAME";q=N;w=W and "NAME";r=R;t=T */
    size_t policy = 2 + name + 3 + decimal_digits(n) + 3 + decimal_digits(window ? window : 1);
    size_t ratelimit = 2 + name + 3 + decimal_digits(cap) + 3 + decimal_digits(CFG_ACK_MAX_SECONDS);
    size_t wait = spop_varint_len(CFG_ACK_MAX_SECONDS);

    /* a concurrency rule's slot token (several rules: several tokens, which
     * the agent drops from an ACK that cannot hold them) */
    size_t slot = r->algorithm == ALGO_CONCURRENCY
                      ? set_var_size("slot", str_value_size(CFG_SLOT_TOKEN_MAX))
                      : 0;

    return slot + 1 + 4 + 10 + 10 /* type, flags, stream-id and frame-id at their longest */
           + set_var_size("blocked", 0) + set_var_size("would_block", 0) +
           set_var_size("degraded", 0) + set_var_size("rule", str_value_size(name)) +
           set_var_size("limit", spop_varint_len(n)) +
           set_var_size("remaining", spop_varint_len(cap)) + set_var_size("reset", wait) +
           set_var_size("retry_after", wait) + set_var_size("policy", str_value_size(policy)) +
           set_var_size("ratelimit", str_value_size(ratelimit));
}
