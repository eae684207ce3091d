/* SPDX-License-Identifier: Apache-2.0 */
/* rules_slot.c - concurrency slots as HAProxy sees them: the token an ACK's
 * `slot` var carries, and the release message that sends it back.
 *
 * A token must let any agent of the fleet free the slot: it names the rule,
 * where the slot is held (Redis, or this agent's local table), the slot's
 * unique id and the key, as RULE ":" SRC ID ":" HEXKEY (SRC 'r' or 'l', ID 16
 * hex digits, HEXKEY the slot key in hex). The slot key is the client key,
 * hashed when longer than a hash (rules_slot_key), so that a token has a
 * bound (RULES_SLOT_TOKEN_MAX) whatever max_key allows. A token comes back
 * from HAProxy's variable, never from the client; still, garbage or a forged
 * token only ever misses: a slot is freed only when its id matches.
 */
#include "rules.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "metrics/metrics.h"

static const char hex[] = "0123456789abcdef";

int rules_slot_key(const char *client_key, size_t len, char *out)
{
    return rules_client_key(client_key, len, NULL, RULES_HASHED_KEY_LEN, out,
                            RULES_SLOT_KEY_MAX + 1);
}

size_t rules_slot_token(char *out, const char *rule, size_t rule_len, char src, uint64_t id,
                        const char *skey, size_t skey_len)
{
    char *p = out;

    memcpy(p, rule, rule_len);
    p += rule_len;
    *p++ = ':';
    *p++ = src;
    for (int i = 15; i >= 0; i--)
        *p++ = hex[(id >> (4 * i)) & 15];
    *p++ = ':';
    for (size_t i = 0; i < skey_len; i++) {
        *p++ = hex[(uint8_t)skey[i] >> 4];
        *p++ = hex[(uint8_t)skey[i] & 15];
    }
    return (size_t)(p - out);
}

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int rules_slot_parse(const char *s, size_t len, struct rules_slot *out)
{
    const char *c1 = memchr(s, ':', len);
    size_t rl, rest;
    uint64_t id = 0;

    if (!c1 || (rl = (size_t)(c1 - s)) == 0 || rl > CFG_MAX_NAME)
        return -1;
    rest = len - rl - 1;
    /* SRC, 16 digits, ':', an even number of hex digits (a key may be empty) */
    if (rest < 18 || (c1[1] != 'r' && c1[1] != 'l') || c1[18] != ':')
        return -1;
    for (int i = 0; i < 16; i++) {
        int v = hex_val(c1[2 + i]);
        if (v < 0)
            return -1;
        id = id << 4 | (uint64_t)v;
    }
    const char *k = c1 + 19;
    size_t klen = rest - 18;
    if (klen % 2 || klen / 2 > RULES_SLOT_KEY_MAX || id == 0)
        return -1;
    for (size_t i = 0; i < klen / 2; i++) {
        int hi = hex_val(k[2 * i]), lo = hex_val(k[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out->key[i] = (char)(hi << 4 | lo);
    }
    out->key[klen / 2] = '\0';
    out->key_len = klen / 2;
    out->rule = s;
    out->rule_len = rl;
    out->src = c1[1];
    out->id = id;
    return 0;
}

/* The concurrency rule named rule (len bytes), or -1. */
static int cc_rule_named(const struct config *cfg, const char *rule, size_t len)
{
    for (size_t i = 0; i < cfg->nrules; i++) {
        const struct cfg_rule *r = &cfg->rules[i];
        if (r->algorithm == BUCKET_CONCURRENCY && r->name_len == len &&
            memcmp(r->name, rule, len) == 0)
            return (int)i;
    }
    return -1;
}

int rules_release_rule(const struct config *cfg, const char *name, size_t len)
{
    for (size_t i = 0; i < cfg->nrules; i++) {
        const struct cfg_rule *r = &cfg->rules[i];
        if (r->algorithm == BUCKET_CONCURRENCY && strlen(r->release) == len &&
            memcmp(r->release, name, len) == 0)
            return (int)i;
    }
    return -1;
}

static int release_push(struct rule_eval *ev, const struct rule_release *rel)
{
    if (ev->nreleases == ev->releases_cap) {
        size_t cap = ev->releases_cap ? ev->releases_cap * 2 : 4;
        struct rule_release *grown = realloc(ev->releases, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        ev->releases = grown;
        ev->releases_cap = cap;
    }
    ev->releases[ev->nreleases++] = *rel;
    return 0;
}

/* One token of a release (s, len bytes): a release to do, or an unknown
 * one (rule -1) counted under the rule whose release message brought it. */
static int release_token(const struct ruleset *rs, unsigned via, const char *s, size_t len,
                         struct rule_eval *ev)
{
    struct rules_slot slot;
    struct rule_release rel = {.rule = -1, .via = via};

    if (rules_slot_parse(s, len, &slot) == 0 &&
        (rel.rule = cc_rule_named(rs->cfg, slot.rule, slot.rule_len)) >= 0) {
        rel.src = slot.src;
        rel.id = slot.id;
        if (rules_eval_keys_append(ev, slot.key, slot.key_len, &rel.key_off) < 0)
            return -ENOMEM;
        rel.key_len = slot.key_len;
    }
    return release_push(ev, &rel);
}

int rules_match_release(const struct ruleset *rs, const struct spop_message *m, unsigned via,
                        struct rule_eval *ev)
{
    const struct spop_data *v = NULL;
    char num[64];
    const char *txt;
    int n = -1, ret;

    for (unsigned i = 0; i < m->nargs; i++)
        if (m->args[i].name.len == 4 && memcmp(m->args[i].name.ptr, "slot", 4) == 0)
            v = &m->args[i].value;
    if (v)
        n = rules_value_text(v, num, sizeof(num), &txt);
    if (n <= 0) /* no slot: a request that held none (blocked, or no rule) */
        return 0;
    /* space separated: one token per concurrency rule that admitted it */
    for (size_t at = 0, end; at < (size_t)n; at = end + 1) {
        end = at;
        while (end < (size_t)n && txt[end] != ' ')
            end++;
        if (end > at && (ret = release_token(rs, via, txt + at, end - at, ev)) < 0)
            return ret;
    }
    return 0;
}
