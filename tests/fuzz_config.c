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
 * Built two ways, as tests/fuzz_spop.c: tests/fuzz_config (libFuzzer, "make
 * fuzz") and tests/fuzz_config_smoke (-DFUZZ_STANDALONE, in "make check":
 * seeds below and haproxy/ratelimit.ini, plus mutations; see fuzz_main.h).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "config/config.h"
#include "rules.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned long long n_accepted, n_refused;

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
        if (n < 1 || n > CFG_MAX_COUNT || period < 1 || period > CFG_MAX_DURATION_MS ||
            burst < 1 || burst > CFG_MAX_COUNT)
            fail("rate or burst out of range", text);
        if (r->algorithm != ALGO_TOKEN_BUCKET && r->algorithm != ALGO_SLIDING_WINDOW)
            fail("bad algorithm", text);
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

        if (b->period_us < 1 || b->period_us > BUCKET_MAX_PERIOD_US || b->burst < 1 ||
            b->limit < 1)
            fail("unusable backstop", text);
        const struct cfg_rule *r = &rs->cfg->rules[i];
        uint64_t period_ms = r->rate_arg ? r->max_rate_period_ms : r->rate_period_ms;
        if (p->period_us != period_ms * 1000 || p->burst < 1)
            fail("rule parameters differ from the config", text);
        if (b->period_us < p->period_us)
            fail("the backstop allows more than the rule", text);
    }
}

static void check_refused(const char *err, const char *text)
{
    static const char name[] = "fuzz.ini:";

    if (!*err)
        fail("refused without a message", text);
    for (const char *line = err; *line; ) {
        const char *nl = strchr(line, '\n');
        if (!nl)
            fail("error text not ended by a newline", text);
        if (strncmp(line, name, sizeof(name) - 1) != 0)
            fail("error line without FILE:", text);
        line = nl + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    char err[4096];
    struct config *cfg = (struct config *)1;

    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0'; /* a NUL inside ends the file early: fine */
    if (config_load_string(text, "fuzz.ini", &cfg, err, sizeof(err)) == 0) {
        if (!cfg)
            fail("accepted without a config", text);
        check_accepted(cfg, text);
        struct ruleset *rs = ruleset_new(cfg); /* owns cfg, even when it fails */
        if (rs) {
            check_backstop(rs, text);
            ruleset_unref(rs);
        }
        n_accepted++;
    } else {
        if (cfg)
            fail("refused but a config came back", text);
        check_refused(err, text);
        n_refused++;
    }
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

static const char *const seeds[] = {
    "[agent]\nlisten = 127.0.0.1:12345\nworkers = 2\nmax_frame_size = 16380\n"
    "stats = 127.0.0.1:9145\nlog_level = info\nshadow = no\nallow = 127.0.0.0/8, ::1/128\n"
    "max_key = 512\nmax_entries = 1000000\n"
    "[redis]\nurl = redis://:pw@127.0.0.1:6379/0\ntimeout = 100ms\nprefix = rl:\n"
    "[lease]\ninterval = 100ms\nttl = 1s\nmax_fraction = 0.1\n"
    "[fallback]\nmode = open\nshare = 0.05\n"
    "[rule:api-key]\nmessage = check-rate\nkey = key\nmatch = path ^/api/\nrate = 100/1m\n"
    "burst = 20\nalgorithm = token-bucket\nlease = on\non_redis_down = open\nshadow = no\n",
    "[redis]\ncluster = 127.0.0.1:7000,\n  127.0.0.1:7001\nprefix = {rl}:\n"
    "[rule:login]\nkey = ip, ua\nmatch = path ^/login\n  method ^POST$\nrate = 5/1m\n"
    "algorithm = sliding-window\non_redis_down = closed\n",
    "[redis]\nsentinel = 127.0.0.1:26379\nmaster = mymaster\n"
    "[fallback]\nshare = 1e-300\n[rule:r]\nrate = 1/365d\nburst = 1000000000000000\n",
    "[agent]\nmax_frame_size = 256\n[rule:rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr]\n"
    "rate = 1/1h\n",
    "; comment\n# another\n[rule:a]\nrate = 10/s ; inline\n[rule:b]\nrate = 1/20000000d\n",
};
#define NSEEDS_BUILTIN (sizeof(seeds) / sizeof(seeds[0]))

static const char *const fuzz_dict[] = {
    "[agent]\n", "[redis]\n", "[lease]\n", "[fallback]\n", "[rule:", "]\n", " = ", "\n",
    "\n  ", " ; ", ",", "rate = ", "burst = ", "key = ", "match = ", "message = ",
    "algorithm = sliding-window\n", "shadow = yes\n", "lease = off\n", "on_redis_down = ",
    "allow = ", "max_frame_size = ", "max_entries = ", "max_key = ", "prefix = ", "ttl = ",
    "interval = ", "share = ", "url = ", "cluster = ", "sentinel = ", "master = ",
    "timeout = ", "1/365d", "1/366d", "18446744073709551616", "0", "1e-300", "256",
    "{", "}", "[", "]", "=", "(", "\\", "ms", "s", "m", "h", "d", "/", "::1", "unix:/x",
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
        size_t n = strlen(seeds[k]);
        memcpy(buf, seeds[k], n);
        return n;
    }
    memcpy(buf, sample, sample_len);
    return sample_len;
}

static void fuzz_summary(void)
{
    printf(FUZZ_NAME ": %llu accepted, %llu refused\n", n_accepted, n_refused);
}

#include "fuzz_main.h"

#endif /* FUZZ_STANDALONE */
