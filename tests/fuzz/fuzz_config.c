/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_config.c - fuzz target for the configuration parser: any bytes as an
 * INI file, through config_load_string() (inih with our line-counting
 * reader, every value parser, the whole-file checks) and, when the file is
 * accepted, ruleset_new() (the per-rule parameters and the fallback
 * backstop).
 *
 * Invariants, checked for every input (a broken one aborts):
 *  - refused: no config comes back, and every error line reads
 *    "fuzz.ini:LINE: message" (or "fuzz.ini: ...");
 *  - accepted: every value is inside the range the README gives for it
 *    (durations at most a year, counts, names, lists), the lease ttl is
 *    longer than its interval, the largest ACK of every rule fits in
 *    max_frame_size, the prefix has no unclosed '{', and the backstop's
 *    period and burst are usable (period in [1, BUCKET_MAX_PERIOD_US],
 *    burst >= 1).
 *
 * An accepted rule set is then put to work: the bytes after the file's first
 * NUL are values (NUL-separated; a leading \x01 makes a NULL arg, \x02 an
 * integer, \x03 an IPv4 address) given to the args the rules read (keys,
 * matches, rate and burst args), in NOTIFYs of one to three messages; each
 * goes through rules_match, an in-memory decision per hit (or the backstop),
 * and an ACK in a frame with the longest ids. Invariants:
 *  - every hit's limits are usable and within its rule's ceilings, its key
 *    at most max_key bytes (or a hash);
 *  - a denial has a retry time in (0, BUCKET_MAX_PERIOD_US];
 *  - the ACK fits max_frame_size whole (never truncated to the minimal
 *    one), and its first variable says blocked as rules_blocked does.
 *
 * Then the same text as a rule set from Redis (config_load_with_rules with
 * a fixed agent file): accepted, within the same ranges, holding only its
 * own rules and no setting of another section; refused, every error line
 * naming "redis:v1" or the file.
 *
 * Built two ways, as tests/fuzz/fuzz_spop.c: tests/fuzz/fuzz_config (libFuzzer, "make
 * fuzz") and tests/fuzz/fuzz_config_smoke (-DFUZZ_STANDALONE, in "make check":
 * seeds below and haproxy/ratelimit.ini, plus mutations; see fuzz_main.h).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "limits/bucket.h"
#include "config/config.h"
#include "metrics/metrics.h"
#include "rules/rules.h"
#include "rules_redis/rules_redis.h"
#include "spop/spop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned long long n_accepted, n_refused, n_requests, n_hits, n_blocked, n_budget;

static void fail(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_config: invariant broken: %s\n--- input ---\n%s\n---\n", what, text);
    abort();
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);

    if (n < 1 || n > CFG_MAX_NAME)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static void check_accepted(const struct config *cfg, const char *text)
{
    if (cfg->max_frame_size < 256 || cfg->max_frame_size > 16777216)
        fail("max_frame_size out of range", text);
    if (cfg->workers < 1 || cfg->workers > 256)
        fail("workers out of range", text);
    if (cfg->max_key < 16 || cfg->max_key > 65536 || cfg->max_entries < 1)
        fail("max_key or max_entries out of range", text);
    if (cfg->nallow > CFG_MAX_ALLOW || cfg->nrules > CFG_MAX_RULES)
        fail("list too long", text);
    if (!(cfg->fallback_share == CFG_SHARE_AUTO ||
          (cfg->fallback_share > 0 && cfg->fallback_share <= 1)) ||
        !(cfg->lease_max_fraction > 0 && cfg->lease_max_fraction <= 1) ||
        !(cfg->alert_share > 0 && cfg->alert_share <= 1))
        fail("share out of (0, 1]", text);
    if (cfg->lease_ttl_ms <= cfg->lease_interval_ms || cfg->lease_interval_ms < 1 ||
        cfg->lease_ttl_ms > CFG_MAX_DURATION_MS || cfg->redis_timeout_ms < 1 ||
        cfg->redis_timeout_ms > CFG_MAX_DURATION_MS)
        fail("durations out of range", text);
    if (cfg->redis_prefix) {
        const char *open = strchr(cfg->redis_prefix, '{');
        if (strlen(cfg->redis_prefix) > 64 || (open && !strchr(open, '}')))
            fail("bad prefix accepted", text);
    }
    for (size_t i = 0; i < cfg->nrules; i++) {
        const struct cfg_rule *r = &cfg->rules[i];

        if (!valid_name(r->name))
            fail("bad rule name accepted", text);
        for (size_t j = 0; j < i; j++)
            if (strcmp(cfg->rules[j].name, r->name) == 0)
                fail("duplicate rule name accepted", text);
        /* a rule whose rate or burst comes from an arg is bounded by its
         * ceilings (max_rate, max_burst), as rules.c reads them */
        uint64_t n = r->rate_arg ? r->max_rate_n : r->rate_n;
        uint64_t period = r->rate_arg ? r->max_rate_period_ms : r->rate_period_ms;
        uint64_t burst = r->burst_arg || !r->burst ? r->max_burst : r->burst;
        if (n < 1 || n > CFG_MAX_COUNT || period < 1 || period > CFG_MAX_DURATION_MS || burst < 1 ||
            burst > CFG_MAX_COUNT)
            fail("rate or burst out of range", text);
        if (r->algorithm != ALGO_TOKEN_BUCKET && r->algorithm != ALGO_SLIDING_WINDOW &&
            r->algorithm != ALGO_FIXED_WINDOW && r->algorithm != ALGO_CONCURRENCY)
            fail("bad algorithm", text);
        /* a concurrency rule: its limit, release and max_hold, no rate keys */
        if (r->algorithm == ALGO_CONCURRENCY &&
            (r->cc_limit < 1 || r->cc_limit > CFG_MAX_CC_LIMIT || !r->release || !*r->release ||
             r->max_hold_ms < 1 || r->rate_arg || r->burst_arg || r->cost_arg || r->lease ||
             r->rate_n != r->cc_limit || r->rate_period_ms != r->max_hold_ms))
            fail("a concurrency rule without its limit, release or max_hold", text);
        if (r->algorithm != ALGO_CONCURRENCY && (r->cc_limit || r->release))
            fail("concurrency keys in a rate rule", text);
        if (r->on_redis_down != DOWN_OPEN && r->on_redis_down != DOWN_CLOSED)
            fail("bad on_redis_down", text);
        if (r->nkeys > CFG_MAX_KEY_ARGS || r->nmatches > CFG_MAX_MATCHES)
            fail("too many keys or matches", text);
        for (size_t k = 0; k < r->nkeys; k++)
            if (!r->keys[k] || !*r->keys[k])
                fail("empty key arg", text);
        if (config_ack_max_size(r) > cfg->max_frame_size)
            fail("an ACK of this rule does not fit max_frame_size", text);
    }
}

static void check_backstop(const struct ruleset *rs, const char *text)
{
    for (size_t i = 0; i < rs->cfg->nrules; i++) {
        const struct bucket_params *b = &rs->backstop[i], *p = &rs->params[i];

        if (b->period_us < 1 || b->period_us > BUCKET_MAX_PERIOD_US || b->burst < 1 || b->limit < 1)
            fail("unusable backstop", text);
        const struct cfg_rule *r = &rs->cfg->rules[i];
        uint64_t period_ms = r->rate_arg ? r->max_rate_period_ms : r->rate_period_ms;
        if (p->period_us != period_ms * 1000 || p->burst < 1)
            fail("rule parameters differ from the config", text);
        if (b->period_us < p->period_us)
            fail("the backstop allows more than the rule", text);
    }
}

/* ---- requests against an accepted rule set ---------------------------- */

#define MAX_VALUES 64  /* values taken from the input */
#define MAX_ARGS 32    /* args of one message */
#define MAX_MESSAGES 3 /* messages of one NOTIFY */
#define REQUESTS 4     /* NOTIFYs per accepted input */
#define ACK_BUF 16384

struct values {
    const char *v[MAX_VALUES];
    size_t len[MAX_VALUES];
    size_t n;
};

/* The arg names the rules read, each once: keys, matches, rate and burst. */
static size_t rule_args(const struct config *cfg, const char **names, size_t cap)
{
    size_t n = 0;

    for (size_t i = 0; i < cfg->nrules; i++) {
        const struct cfg_rule *r = &cfg->rules[i];
        const char *cand[CFG_MAX_KEY_ARGS + CFG_MAX_MATCHES + 3];
        size_t nc = 0;

        for (size_t k = 0; k < r->nkeys; k++)
            cand[nc++] = r->keys[k];
        for (size_t m = 0; m < r->nmatches; m++)
            cand[nc++] = r->matches[m].arg;
        if (r->rate_arg)
            cand[nc++] = r->rate_arg;
        if (r->burst_arg)
            cand[nc++] = r->burst_arg;
        if (r->cost_arg)
            cand[nc++] = r->cost_arg;
        for (size_t c = 0; c < nc; c++) {
            size_t j = 0;
            while (j < n && strcmp(names[j], cand[c]) != 0)
                j++;
            if (j == n && n < cap)
                names[n++] = cand[c];
        }
    }
    return n;
}

/* Value k of vals for an arg: typed by its first byte. */
static int put_value(struct spop_writer *w, const struct values *vals, size_t k)
{
    static const char *const fallback[] = {"/api/v1", "GET", "free", "100/1m", "5", "k1"};
    const char *v;
    size_t len;
    struct spop_data d;

    if (vals->n) {
        v = vals->v[k % vals->n];
        len = vals->len[k % vals->n];
    } else {
        v = fallback[k % 6];
        len = strlen(v);
    }
    if (len > 0 && v[0] == 1) {
        d.type = SPOP_DATA_NULL;
    } else if (len > 0 && v[0] == 2) {
        char num[24];
        size_t n = len - 1 < sizeof(num) - 1 ? len - 1 : sizeof(num) - 1;
        memcpy(num, v + 1, n);
        num[n] = '\0';
        d = spop_int(strtoll(num, NULL, 10));
    } else if (len >= 5 && v[0] == 3) {
        d.type = SPOP_DATA_IPV4;
        memcpy(d.u.ip, v + 1, 4);
    } else {
        d.type = SPOP_DATA_STR;
        d.u.buf.ptr = v;
        d.u.buf.len = len;
    }
    return spop_put_data(w, &d);
}

/* NOTIFY payload number req: messages named as the rules say (or not), each
 * with every arg the rules read, values rotating through vals. */
static size_t build_notify(const struct config *cfg, const struct values *vals, unsigned req,
                           uint8_t *buf, size_t cap)
{
    const char *names[MAX_ARGS];
    size_t nargs = rule_args(cfg, names, MAX_ARGS);
    struct spop_writer w = {buf, buf + cap};
    unsigned nmsg = 1 + req % MAX_MESSAGES;

    for (unsigned m = 0; m < nmsg; m++) {
        const char *msg = "check-rate";
        if (cfg->nrules > 0 && cfg->rules[(req + m) % cfg->nrules].message)
            msg = cfg->rules[(req + m) % cfg->nrules].message;
        if (m == 2)
            msg = "other";
        if (spop_put_str(&w, msg, strlen(msg)) < 0 || w.p == w.end)
            return 0;
        *w.p++ = (uint8_t)nargs;
        for (size_t a = 0; a < nargs; a++)
            if (spop_put_str(&w, names[a], strlen(names[a])) < 0 ||
                put_value(&w, vals, req * 7 + m * 3 + a) < 0)
                return 0;
    }
    return (size_t)(w.p - buf);
}

static void check_hit(const struct ruleset *rs, const struct rule_eval *ev,
                      const struct rule_hit *h, const char *text)
{
    const struct cfg_rule *r = &rs->cfg->rules[h->rule];
    const struct bucket_params *top = &rs->params[h->rule];

    if (h->params.limit < 1 || h->params.burst < 1 || h->params.period_us < 1 ||
        h->params.period_us > BUCKET_MAX_PERIOD_US || h->backstop.limit < 1 ||
        h->backstop.burst < 1 || h->backstop.period_us < 1 ||
        h->backstop.period_us > BUCKET_MAX_PERIOD_US)
        fail("a hit with unusable limits", text);
    if (config_rule_per_request(r) &&
        (rules_rate_above(h->params.limit, h->params.period_us, top->limit, top->period_us) ||
         h->params.burst > top->burst))
        fail("a hit's limits above its rule's ceilings", text);
    if (!config_rule_per_request(r) &&
        (h->params.algorithm != top->algorithm || h->params.limit != top->limit ||
         h->params.period_us != top->period_us || h->params.burst != top->burst))
        fail("a hit's limits differ from its rule's", text);
    if (h->key_len > rs->cfg->max_key && h->key_len != RULES_HASHED_KEY_LEN)
        fail("a client key longer than max_key and not hashed", text);
    if (h->key_off + h->key_len > ev->keys_len)
        fail("a client key out of its buffer", text);
}

/* Decide and answer a few NOTIFYs against rs. */
static void run_requests(const struct ruleset *rs, const struct values *vals, const char *text)
{
    static uint8_t payload[65536], ack[ACK_BUF + 4];
    struct bucket_table *buckets = bucket_table_new(1), *backstop = bucket_table_new(1);
    struct rule_eval ev = {0};
    uint64_t now = 1000000000;

    if (!buckets || !backstop)
        abort();
    for (unsigned req = 0; req < REQUESTS; req++) {
        size_t len = build_notify(rs->cfg, vals, req, payload, sizeof(payload));
        if (len == 0)
            break;
        if (rules_match(rs, payload, len, &ev) != 0)
            fail("a well-formed NOTIFY refused", text);
        n_requests++;
        now += 250000;
        for (size_t i = 0; i < ev.nhits; i++) {
            struct rule_hit *h = &ev.hits[i];
            int degraded = (req + i) % 3 == 2;
            check_hit(rs, &ev, h, text);
            bucket_table_take(degraded ? backstop : buckets, rs->cfg->rules[h->rule].name,
                              rules_hit_key(&ev, h), h->key_len,
                              degraded ? &h->backstop : &h->params, now, 1, &h->out.res);
            h->out.degraded = degraded;
            n_hits++;
            if (!h->out.res.allowed) {
                n_blocked++;
                if (h->out.res.retry_us == 0 || h->out.res.retry_us > BUCKET_MAX_PERIOD_US)
                    fail("denied without a sane retry time", text);
            }
        }
        rules_account(rs, &ev, now);

        /* the ACK, in a frame with the longest ids, within max_frame_size */
        size_t frame = rs->cfg->max_frame_size < ACK_BUF ? rs->cfg->max_frame_size : ACK_BUF;
        struct spop_writer w = {ack, ack + 4 + frame};
        uint8_t *start;
        uint64_t truncated = atomic_load(&metrics.acks_truncated);
        if (spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, UINT64_MAX, UINT64_MAX, &start) <
                0 ||
            rules_encode_actions(&w, rs, &ev) < 0 || spop_frame_end(&w, start) < 0)
            fail("the ACK does not fit max_frame_size", text);
        if (atomic_load(&metrics.acks_truncated) != truncated)
            fail("the ACK was cut to its minimal form within max_frame_size", text);
        struct spop_frame f;
        size_t used;
        if (spop_frame_decode(ack, (size_t)(w.p - ack), frame, &f, &used) != SPOP_OK)
            fail("the ACK frame does not decode", text);
        struct spop_reader rd = {f.payload, f.payload + f.payload_len};
        struct spop_str name;
        struct spop_data val;
        uint8_t action, scope;
        if (spop_action_next(&rd, &action, &scope, &name, &val) != 1 ||
            val.type != SPOP_DATA_BOOL || (val.u.sint != 0) != (rules_blocked(rs, &ev) != 0))
            fail("the ACK's blocked differs from the decisions", text);
        int ret;
        while ((ret = spop_action_next(&rd, &action, &scope, &name, &val)) == 1)
            ;
        if (ret < 0)
            fail("the ACK's actions do not decode", text);
    }
    rules_eval_free(&ev);
    bucket_table_free(buckets);
    bucket_table_free(backstop);
}

/* Every error line names its source: name, or else (when not NULL) other. */
static void check_refused_as(const char *err, const char *text, const char *name, const char *other)
{
    if (!*err)
        fail("refused without a message", text);
    for (const char *line = err; *line;) {
        const char *nl = strchr(line, '\n');
        if (!nl)
            fail("error text not ended by a newline", text);
        if (strncmp(line, name, strlen(name)) != 0 &&
            (!other || strncmp(line, other, strlen(other)) != 0))
            fail("error line without FILE:", text);
        line = nl + 1;
    }
}

static void check_refused(const char *err, const char *text)
{
    check_refused_as(err, text, "fuzz.ini:", NULL);
}

/* The agent's own file for the rule text from Redis: every non-rule
 * section, and a rule of its own that must never be in force beside it. */
static const char agent_file[] = "[agent]\nmax_frame_size = 16380\n[redis]\nurl = "
                                 "redis://127.0.0.1:6379\n[rules]\nsource = redis\ncache =\n"
                                 "[rule:own-file-rule]\nrate = 1/s\n";
static char agent_path[64];

static void unlink_agent_file(void)
{
    unlink(agent_path);
}

/* The same text as a version's rule text from Redis, through the check
 * every agent, --push and --rollback make (rules_redis_check_version with
 * its right sha256, over config_load_with_rules with the agent's file).
 * Accepted: within range, at least one rule, and only the text's rules are
 * in force; refused: every error names the text ("redis:v1") or the file. */
static void as_rules_from_redis(const char *text)
{
    char err[4096], sha[65];
    struct config *cfg = (struct config *)1;

    if (!agent_path[0]) {
        snprintf(agent_path, sizeof(agent_path), "/tmp/fuzz_config_agent_XXXXXX");
        int fd = mkstemp(agent_path);
        if (fd == -1 || write(fd, agent_file, strlen(agent_file)) != (ssize_t)strlen(agent_file))
            fail("cannot write the agent's file", agent_path);
        close(fd);
        atexit(unlink_agent_file);
    }
    rules_redis_sha256(text, strlen(text), sha);
    if (rules_redis_check_version(agent_path, text, strlen(text), sha, "redis:v1", &cfg, err,
                                  sizeof(err)) == 0) {
        if (!cfg)
            fail("rules accepted without a config", text);
        if (cfg->nrules == 0)
            fail("a rule set without rules accepted", text);
        check_accepted(cfg, text);
        for (size_t i = 0; i < cfg->nrules; i++)
            if (strcmp(cfg->rules[i].name, "own-file-rule") == 0 && !strstr(text, "own-file-rule"))
                fail("the file's own rule in force beside rules from Redis", text);
        if (cfg->rules_source != RULES_SOURCE_REDIS || cfg->max_frame_size != 16380)
            fail("rule text changed a non-rule setting", text);
        config_free(cfg);
    } else {
        if (cfg)
            fail("rules refused but a config came back", text);
        check_refused_as(err, text, "redis:v1", agent_path);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    char err[4096];
    struct config *cfg = (struct config *)1;

    if (!text)
        return 0;
    /* A rule set's budget scaled to inputs of a few KB (CFG_BUDGET_* are
     * 256 KiB of text and 6 MiB compiled): the refusals are reached, and
     * what loads stays within it. */
    static const struct cfg_budget small = {512, 64 * 1024, 2000};
    config_budget_set(&small);
    memcpy(text, data, size);
    text[size] = '\0'; /* a NUL inside ends the file early: fine */
    if (config_load_string(text, "fuzz.ini", &cfg, err, sizeof(err)) == 0) {
        if (!cfg)
            fail("accepted without a config", text);
        check_accepted(cfg, text);
        struct ruleset *rs = ruleset_new(cfg); /* owns cfg, even when it fails */
        if (rs) {
            struct values vals = {.n = 0};
            size_t at = strlen(text) + 1; /* the values follow the first NUL */
            while (at < size && vals.n < MAX_VALUES) {
                const char *v = (const char *)data + at;
                const char *nul = memchr(v, '\0', size - at);
                size_t len = nul ? (size_t)(nul - v) : size - at;
                vals.v[vals.n] = v;
                vals.len[vals.n++] = len;
                at += len + 1;
            }
            check_backstop(rs, text);
            run_requests(rs, &vals, text);
            ruleset_unref(rs);
        }
        n_accepted++;
    } else {
        if (cfg)
            fail("refused but a config came back", text);
        check_refused(err, text);
        n_refused++;
        if (strstr(err, "over its budget"))
            n_budget++;
    }
    as_rules_from_redis(text);
    free(text);
    return 0;
}

#ifdef FUZZ_STANDALONE

#ifndef SRCDIR
#define SRCDIR "."
#endif

#define FUZZ_NAME "fuzz_config_smoke"
#define FUZZ_ITERATIONS 30000
#define FUZZ_MAX_INPUT 8192

/* Seeds: files, some with values for the requests after a NUL. */
#define SEED(text)                                                                                 \
    {                                                                                              \
        text, sizeof(text) - 1                                                                     \
    }
static const struct {
    const char *text;
    size_t len;
} seeds[] = {
    SEED("[agent]\nlisten = 127.0.0.1:12345\nworkers = 2\nmax_frame_size = 16380\n"
         "stats = 127.0.0.1:9145\nlog_level = info\nshadow = no\nallow = 127.0.0.0/8, ::1/128\n"
         "max_key = 512\nmax_entries = 1000000\n"
         "[redis]\nurl = redis://:pw@127.0.0.1:6379/0\ntimeout = 100ms\nprefix = rl:\n"
         "[lease]\ninterval = 100ms\nttl = 1s\nmax_fraction = 0.1\n"
         "[fallback]\nmode = open\nshare = 0.05\n"
         "[rule:api-key]\nmessage = check-rate\nkey = key\nmatch = path ^/api/\nrate = 100/1m\n"
         "burst = 20\nalgorithm = token-bucket\nlease = on\non_redis_down = open\nshadow = no\n"
         "\0tenant-1\0/api/v1\0/web\0\x01\0"),
    SEED("[redis]\ncluster = 127.0.0.1:7000,\n  127.0.0.1:7001\nprefix = {rl}:\n"
         "[rule:login]\nkey = ip, ua\nmatch = path ^/login\n  method ^POST$\nrate = 5/1m\n"
         "algorithm = sliding-window\non_redis_down = closed\n"
         "\0\x03\xc0\x00\x02\x01\0curl/8\0/login\0POST\0/login\0POST\0"),
    SEED("[redis]\nsentinel = 127.0.0.1:26379\nmaster = mymaster\n"
         "[fallback]\nshare = 1e-300\n[rule:r]\nrate = 1/365d\nburst = 1000000000000000\n"),
    SEED("[rule:quota]\nkey = key\nrate = 5/1w\nalgorithm = fixed-window\nwindow_offset = 4d\n"),
    SEED("[agent]\nmax_frame_size = 256\n[rule:rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr]\n"
         "rate = 1/1h\n"),
    SEED("; comment\n# another\n[rule:a]\nrate = 10/s ; inline\n[rule:b]\nrate = 1/20000000d\n"),
    /* limits from args, clamped to their ceilings; a shadow rule; a small max_key */
    SEED("[agent]\nmax_key = 16\n[rule:plan]\nkey = key\nmatch = plan ^(free|paid)$\n"
         "rate = arg:rate\nmax_rate = 100/1s\nburst = arg:burst\nmax_burst = 50\n"
         "[rule:g]\nrate = 2/1s\nshadow = yes\n[rule:sw]\nmessage = check-rate\nkey = key, plan\n"
         "rate = arg:rate\nmax_rate = 1000/1m\nalgorithm = sliding-window\n"
         "\0a-key-longer-than-sixteen\0free\0"
         "10/1s\0"
         "7\0\x02"
         "42\0"
         "9999999/1ms\0"
         "paid\0\x01\0"),
    /* concurrency: slots in flight, released by their own message */
    SEED("[rule:in-flight]\nmessage = check-rate\nkey = key\nalgorithm = concurrency\n"
         "limit = 2\nrelease = release-slot\nmax_hold = 30s\n[rule:r]\nrate = 5/1s\n"
         "\0tenant\0/slow\0"),
    /* [rules], and a rule set as it comes from Redis */
    SEED("[rules]\nsource = file\npoll = 250ms\ncache = /tmp/x\nhistory = 3\n"
         "[rule:c]\nkey = key\nrate = 3/1s\ncost = 2\n[rule:d]\nmatch = path ^/x\nrate = 1/1m\n"
         "\0k\0/x\0"),
    /* rule sets over the (scaled) budget: the regexes' text; their code */
    SEED(
        "[rule:a]\nkey = key\nmatch = path ^/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/\n"
        "  method ^(GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS|CONNECT|TRACE|PROPFIND)$\n"
        "  key ^[a-z0-9]{8}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{12}$\n"
        "rate = 1/s\n[rule:b]\nkey = key\nmatch = path "
        "^/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb/\n"
        "  method ^(GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS|CONNECT|TRACE|PROPFIND)$\n"
        "  key ^[a-z0-9]{8}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{12}$\n"
        "rate = 1/s\n[rule:c]\nkey = key\nmatch = path "
        "^/ccccccccccccccccccccccccccccccccccccccccc/\n"
        "  method ^(GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS|CONNECT|TRACE|PROPFIND)$\n"
        "  key ^[a-z0-9]{8}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{12}$\n"
        "  ua ^(curl|wget|python-requests|go-http-client|java|okhttp|axios|node-fetch)/\n"
        "  plan ^(free|trial|basic|standard|premium|enterprise|internal|partner)$\n"
        "rate = 1/s\n[rule:d]\nkey = key\nmatch = path "
        "^/ddddddddddddddddddddddddddddddddddddddddddd/\n"
        "  method ^(GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS|CONNECT|TRACE|PROPFIND)$\n"
        "  key ^[a-z0-9]{8}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{12}$\n"
        "  ua ^(curl|wget|python-requests|go-http-client|java|okhttp|axios|node-fetch)/\n"
        "rate = 1/s\n"),
    SEED("[rule:a]\nmatch = path (?:ab?){0,200}z\n  ua (?:cd?){0,200}y\n  key (?:ef?){0,200}x\n"
         "rate = 1/s\n[rule:b]\nmatch = path (?:gh?){0,200}w\n  ua (?:ij?){0,200}v\n"
         "  key (?:kl?){0,200}u\nrate = 1/s\n[rule:c]\nmatch = path (?:mn?){0,200}t\n"
         "  ua (?:op?){0,200}s\nrate = 1/s\n"),
    SEED("[agent]\nmax_frame_size = 512\n[rule:big]\nkey = k\nrate = arg:r\n"
         "max_rate = 1000000000000000/1ms\nmax_burst = 1000000000000000\n"
         "\0"
         "1000000000000000/1ms\0k\0"
         "1/365d\0"),
};
#define NSEEDS_BUILTIN (sizeof(seeds) / sizeof(seeds[0]))

static const char *const fuzz_dict[] = {
    "[agent]\n",
    "[redis]\n",
    "[lease]\n",
    "[fallback]\n",
    "[rule:",
    "]\n",
    " = ",
    "\n",
    "\n  ",
    " ; ",
    ",",
    "rate = ",
    "burst = ",
    "key = ",
    "match = ",
    "message = ",
    "algorithm = sliding-window\n",
    "shadow = yes\n",
    "lease = off\n",
    "on_redis_down = ",
    "allow = ",
    "max_frame_size = ",
    "max_entries = ",
    "max_key = ",
    "prefix = ",
    "ttl = ",
    "interval = ",
    "share = ",
    "url = ",
    "cluster = ",
    "sentinel = ",
    "master = ",
    "timeout = ",
    "1/365d",
    "1/366d",
    "18446744073709551616",
    "0",
    "1e-300",
    "256",
    "{",
    "}",
    "[",
    "]",
    "=",
    "(",
    "\\",
    "ms",
    "s",
    "m",
    "h",
    "d",
    "/",
    "::1",
    "unix:/x",
    "arg:",
    "max_rate = ",
    "max_burst = ",
    "algorithm = concurrency\n",
    "limit = ",
    "release = ",
    "max_hold = ",
    "[rules]\n",
    "source = redis\n",
    "poll = ",
    "cache = ",
    "history = ",
    "[rule:own-file-rule]\n",
};
#define FUZZ_NDICT (sizeof(fuzz_dict) / sizeof(fuzz_dict[0]))

/* haproxy/ratelimit.ini, the shipped sample, as one more seed (when found). */
static char sample[FUZZ_MAX_INPUT];
static size_t sample_len;

static size_t fuzz_nseeds(void)
{
    static int loaded;
    if (!loaded) {
        FILE *f = fopen(SRCDIR "/haproxy/ratelimit.ini", "rb");
        loaded = 1;
        if (f) {
            sample_len = fread(sample, 1, sizeof(sample), f);
            fclose(f);
        }
    }
    return NSEEDS_BUILTIN + (sample_len > 0);
}

static size_t fuzz_seed(size_t k, uint8_t *buf)
{
    if (k < NSEEDS_BUILTIN) {
        memcpy(buf, seeds[k].text, seeds[k].len);
        return seeds[k].len;
    }
    memcpy(buf, sample, sample_len);
    return sample_len;
}

static void fuzz_summary(void)
{
    printf(FUZZ_NAME ": %llu accepted, %llu refused (%llu over the rule set's budget); %llu "
                     "requests, %llu rule hits, %llu blocked\n",
           n_accepted, n_refused, n_budget, n_requests, n_hits, n_blocked);
}

#include "fuzz_main.h"

#endif /* FUZZ_STANDALONE */
