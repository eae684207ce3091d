/* SPDX-License-Identifier: Apache-2.0 */
/* config.h - the agent's INI configuration: parse, validate, free.
 *
 * Parsing uses inih's ini_parse_stream() with our own line-counting reader,
 * so every error names FILE:LINE. Pure: no printing; errors are written into
 * a caller-supplied buffer, one "FILE:LINE: message\n" per error.
 */
#ifndef CONFIG_H_SPOA
#define CONFIG_H_SPOA

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "limits/bucket.h"
#include "core/log.h"
#include "core/net.h"
#include "core/rx.h"

#define CFG_MAX_RULES 1024
#define CFG_MAX_KEY_ARGS 16
#define CFG_MAX_MATCHES 16
#define CFG_MAX_ALLOW 64
#define CFG_MAX_ENTRIES 1000000000000ULL /* [agent] max_entries */
#define CFG_MAX_NAME 40                  /* rule names appear in ACK vars and metrics labels */
/* One year: longer durations are mistakes (1/20000000d), and bounding them
 * keeps every product of durations (microseconds, 2 x window, the backstop's
 * period / share) far from overflow. */
#define CFG_MAX_DURATION_MS (365ULL * 86400000ULL)
#define CFG_MAX_HELLO_TIMEOUT_MS 60000ULL /* [agent] hello_timeout */
#define CFG_MAX_IDLE_GRACE_MS 3600000ULL  /* [agent] idle_grace */
#define CFG_MAX_DURATION_TEXT "365d"
#define CFG_MAX_COUNT 1000000000000000ULL /* rate N and burst: exact in a double */
#define CFG_MAX_CC_LIMIT 1000000ULL       /* concurrency limit: slots are held one by one */
#define CFG_DEFAULT_MAX_HOLD_MS 60000
/* The longest slot token of an ACK (rules.h: RULES_SLOT_TOKEN_MAX). */
#define CFG_SLOT_TOKEN_MAX (CFG_MAX_NAME + 1 + 17 + 1 + 2 * 33)
/* [fallback] share = auto: 1/N, N the agents seen live in the fleet (fleet.h). */
#define CFG_SHARE_AUTO 0.0

/* The largest reset or retry_after an ACK carries, in seconds (10 digits). */
#define CFG_ACK_MAX_SECONDS 9999999999ULL

/* log_level is an enum log_level (log.h); a rule's algorithm an enum
 * bucket_algorithm (bucket.h), also known here by the config's names: */
#define ALGO_TOKEN_BUCKET BUCKET_TOKEN_BUCKET
#define ALGO_SLIDING_WINDOW BUCKET_SLIDING_WINDOW
#define ALGO_FIXED_WINDOW BUCKET_FIXED_WINDOW
#define ALGO_CONCURRENCY BUCKET_CONCURRENCY
enum cfg_down_mode { DOWN_OPEN = 0, DOWN_CLOSED = 1 };
/* [rules] source: where the [rule:*] sections come from */
enum cfg_rules_source { RULES_SOURCE_FILE = 0, RULES_SOURCE_REDIS = 1 };
/* [rules] cache when unset and source = redis; with source = file no cache
 * is written, so that a plain run writes nowhere outside what it is told */
/* [rules] cache with source = redis: CFG_RULES_CACHE_NAME in $STATE_DIRECTORY
 * (systemd's StateDirectory=, per instance) when set, else this path. */
#define CFG_RULES_DEFAULT_CACHE "/var/lib/spoa-ratelimit/rules.ini"
#define CFG_RULES_CACHE_NAME "rules.ini"
/* Rule text from Redis (or --push) is bounded before it is parsed: bytes
 * (the rule count is bounded by CFG_MAX_RULES like a file's) */
#define CFG_MAX_RULES_TEXT (1024 * 1024)

/* [agent] charge: what a request that a non-shadow rule blocks costs the
 * other rules. all-or-nothing (the default): nothing, their tokens go back
 * (limiter_settle); each: every allowing rule keeps its charge. */
enum cfg_charge { CHARGE_ALL_OR_NOTHING = 0, CHARGE_EACH = 1 };

/* A rule's scope (doc/design.md, "Regions"): where its bucket lives.
 * region (the default): in [redis], this region's own limit; global: the
 * regional bucket is a lease on a bucket in [global]'s Redis shared by every
 * region (token buckets only). */
enum cfg_scope { SCOPE_REGION = 0, SCOPE_GLOBAL = 1 };

/* [global] region: this region's name, at most this many bytes (a derived
 * name, "unix:/path/DB" at its longest, fits) */
#define CFG_MAX_REGION 128

/* The old name of a CIDR of [agent] allow (struct net_cidr, net.h), kept for
 * config_parse_cidr and the tests that use it. */
#define cfg_cidr net_cidr

/* [redis] url, taken apart when the file is read. */
struct cfg_redis_url {
    struct net_addr addr; /* TCP host:port or unix path; NET_ADDR_NONE: no url */
    char *user;           /* redis://USER:PASSWORD@... (a Redis 6+ ACL user), percent-decoded;
                             NULL: default */
    char *password;       /* redis://:PASSWORD@..., percent-decoded; NULL: none in the url */
    int db;               /* redis://.../DB; 0 by default */
};

/* A host:port list ([redis] cluster, sentinel), parsed. */
struct cfg_hosts {
    struct net_hostport *list;
    size_t n; /* 0: unset */
};

/* match = ARG REGEX */
struct cfg_match {
    char *arg;
    char *pattern;
    struct rx *re; /* PCRE2, within the bounds of core/rx.h */
    unsigned line; /* of the match line: its regex is compiled after the whole set is read */
};

/* The budget of a whole rule set (doc/configuration.md, "The budget of a
 * rule set"). Each regex is bounded alone (core/rx.h), but 1,024 rules of
 * 16 such regexes are not: compiled by every agent of a fleet at once, they
 * took seconds and hundreds of MB. Checked wherever a rule set is loaded
 * (--check, --push, an agent applying a version or its file): a set over
 * any of these is refused, and the regexes after the one that went over
 * are not compiled. Each is many times what a large real set takes (200
 * rules of 3 regexes: 33 KB of patterns, 1 MB compiled, 20 ms). */
#define CFG_BUDGET_PATTERN_BYTES (256 * 1024)       /* the regexes' text, summed */
#define CFG_BUDGET_COMPILED_BYTES (6 * 1024 * 1024) /* their code and JIT code (rx_size) */
#define CFG_BUDGET_COMPILE_MS 2000 /* CPU time compiling them (the loading thread's) */

/* The budget in force, CFG_BUDGET_* unless config_budget_set() made it
 * smaller: the fuzz target does, so that inputs of a few KB reach the
 * refusals. Process-wide, set before any load (not while one runs). */
struct cfg_budget {
    size_t pattern_bytes;
    size_t compiled_bytes;
    unsigned compile_ms;
};
void config_budget_set(const struct cfg_budget *b); /* NULL: CFG_BUDGET_* again */

/* What a rule set's regexes take, against that budget. */
struct cfg_regex_use {
    size_t regexes;        /* match lines */
    size_t pattern_bytes;  /* their regexes' text */
    size_t compiled_bytes; /* rx_size() summed */
    uint64_t compile_us;   /* CPU time compiling them */
};

struct cfg_rule {
    char *name;
    size_t name_len;                   /* strlen(name), at most CFG_MAX_NAME */
    char *message;                     /* NULL: every message */
    char *keys[CFG_MAX_KEY_ARGS];      /* arg names joined into the client key; with none,
                                         every matching request shares one key (a global limit) */
    size_t key_lens[CFG_MAX_KEY_ARGS]; /* strlen of each: a request's key looks its args up */
    size_t nkeys;
    struct cfg_match matches[CFG_MAX_MATCHES];
    size_t nmatches;
    uint64_t rate_n;         /* N of N/DURATION; 0 with rate_arg */
    uint64_t rate_period_ms; /* DURATION of N/DURATION; 0 with rate_arg */
    uint64_t burst;          /* default: rate_n; with rate_arg and no burst: 0,
                                meaning N of each request's rate (capped by max_burst) */
    /* Limits taken per request from an arg (rate = arg:NAME, burst = arg:NAME),
     * bounded by ceilings that are required with them. */
    char *rate_arg;              /* NULL: the rate is rate_n/rate_period_ms */
    char *burst_arg;             /* NULL: the burst is burst */
    uint64_t max_rate_n;         /* max_rate: the highest rate an arg may ask for */
    uint64_t max_rate_period_ms; /*   (0 without rate_arg) */
    uint64_t max_burst;          /* the highest burst from an arg or derived from an arg's
                                    rate (default then: max_rate_n); 0 when unused */
    /* Tokens one request takes (cost = N, default 1; 0: a check that takes
     * nothing), or per request from an arg (cost = arg:NAME) clamped to
     * max_cost. A cost never changes the limits, so it never keys a bucket. */
    uint64_t cost;             /* with cost_arg: unused */
    char *cost_arg;            /* NULL: every request costs cost */
    uint64_t max_cost;         /* the highest cost an arg may ask for; 0 without cost_arg */
    int algorithm;             /* enum bucket_algorithm */
    uint64_t window_offset_ms; /* fixed-window: windows start this long after each
                                  multiple of the period since the epoch (< period) */
    /* algorithm = concurrency: at most cc_limit requests in flight per key;
     * the message named release (arg slot) gives a slot back, and a slot not
     * given back within max_hold_ms frees itself (default 60 s). */
    uint64_t cc_limit; /* limit; 0 for other algorithms */
    char *release;     /* NULL for other algorithms */
    uint64_t max_hold_ms;
    int lease; /* bool, default on */
    /* block_for: once the rule denies a key, the key stays denied this long
     * (fleet-wide with Redis: the denying script records it); 0 = off */
    uint64_t block_for_ms;
    int on_redis_down; /* enum cfg_down_mode, default [fallback] mode */
    int shadow;        /* bool; [agent] shadow = yes forces it */
    int scope;         /* enum cfg_scope, default SCOPE_REGION; SCOPE_GLOBAL needs [global]
                          and algorithm = token-bucket */
    unsigned line;     /* line of the [rule:NAME] header */
};

struct config {
    char *path;

    /* [agent] */
    char *listen; /* as written, for logs; default "127.0.0.1:12345" */
    struct net_addr listen_addr;
    int workers;                /* default: number of CPUs */
    uint32_t max_frame_size;    /* default SPOP_DEFAULT_FRAME_SIZE (16380) */
    char *stats;                /* as written, for logs; NULL = off */
    struct net_addr stats_addr; /* NET_ADDR_NONE = off */
    int log_level;              /* default LOG_LVL_INFO */
    int shadow;
    struct net_cidr allow[CFG_MAX_ALLOW];
    size_t nallow;             /* 0 = any peer */
    size_t max_key;            /* default 512 */
    unsigned max_connections;  /* SPOP connections at once; default 1024 */
    unsigned max_handshakes;   /* of those, still before their HELLO; default 128 */
    uint64_t hello_timeout_ms; /* a connection's HELLO must be in by then; default 5000 */
    /* at max_connections, a connection with no whole frame for this long is
     * closed to admit a new one; default 35000 */
    uint64_t idle_grace_ms;
    /* peers HELLO but no NOTIFY for this long: the warning haproxy_never_asks
     * (watch.h); default 60000, 0 = off */
    uint64_t notify_silence_ms;
    struct net_cidr stats_allow[CFG_MAX_ALLOW]; /* who may use the stats listener */
    size_t nstats_allow;                        /* default 2: 127.0.0.0/8, ::1/128; 0 = any peer */
    char *stats_auth;                           /* USER:PASSWORD as written; NULL = no auth */
    char *stats_auth_file;                      /* a file holding USER:PASSWORD */
    char *stats_credentials; /* USER:PASSWORD in force (either source); NULL = none */
    int stats_reset;         /* POST /reset (and the page's reset button); default on */
    char *stats_hosts;  /* Host names answered besides the listener's own, "a,b:1"; NULL: none */
    size_t max_entries; /* buckets + lease entries in memory; default 1000000 */
    int charge;         /* enum cfg_charge; default CHARGE_ALL_OR_NOTHING */
    double alert_share; /* warn when a rule blocks more than this share; default 0.05 */

    /* [redis]: standalone when url, cluster and sentinel are all empty. The
     * strings are the values as written (lists normalised to "a:1,b:2"), to
     * compare and show; the store uses the parsed forms. */
    char *redis_url;
    struct cfg_redis_url redis_server;
    char *redis_cluster;
    struct cfg_hosts redis_cluster_hosts;
    char *redis_sentinel;
    struct cfg_hosts redis_sentinel_hosts;
    char *redis_master;
    uint64_t redis_timeout_ms;   /* default 100 */
    uint64_t redis_keepalive_ms; /* PING after this long without traffic; default 1000, 0 = off */
    uint64_t redis_sentinel_window_ms; /* no sentinel this long: master unconfirmed; default 5000 */
    uint64_t redis_errors_quiet_ms;    /* redis_errors clears this long after the last; 30000 */
    uint64_t redis_epoch_check_ms;     /* the keyspace's epoch checked this often (store_epoch.h);
                                        * default 1000, 0 = off */
    int redis_functions; /* FUNCTION LOAD, then FCALL where Redis allows; default on */
    /* Credentials: the keys as written (password_file: its path), and the
     * ones in force for the data nodes (url, every Cluster node, the master
     * Sentinel names), from the keys, the file (read when the config is
     * loaded: at start, --check and SIGHUP; one trailing newline dropped) or
     * the url's userinfo. NULL: none (no AUTH; the user "default"). */
    char *redis_username;
    char *redis_password;
    char *redis_password_file;
    char *redis_auth_user;
    char *redis_auth_password;
    /* for the sentinels themselves (their requirepass or ACL user) */
    char *redis_sentinel_username;
    char *redis_sentinel_password;
    char *redis_prefix;           /* default "rl:" */
    int redis_require_noeviction; /* a Redis that can evict our keys counts as down */

    /* [global] (v1.2, doc/design.md "Regions"): the Redis holding the
     * buckets of scope = global rules for every region, never on a
     * request's path (a region's claimer tops up its pool from it).
     * Configured when url, cluster or sentinel is set (config_global);
     * the keys mirror [redis]'s, their values kept the same way. */
    char *global_url;
    struct cfg_redis_url global_server;
    char *global_cluster;
    struct cfg_hosts global_cluster_hosts;
    char *global_sentinel;
    struct cfg_hosts global_sentinel_hosts;
    char *global_master;
    uint64_t global_timeout_ms;   /* default 1000: the global Redis is far */
    uint64_t global_keepalive_ms; /* default 1000, 0 = off */
    char *global_username;
    char *global_password;
    char *global_password_file;
    char *global_auth_user; /* credentials in force, as redis_auth_* */
    char *global_auth_password;
    char *global_sentinel_username;
    char *global_sentinel_password;
    char *global_prefix;         /* default "rl:" */
    uint64_t global_interval_ms; /* a region's pool topped up this often; default 1000 */
    double global_max_fraction;  /* a claim takes at most this share of the burst; 0.25 */
    double global_reserve;       /* this share of a key's burst is split among the regions'
                                    reserves; 0.2; 0: none */
    /* this region's name: the holder of the global buckets, the same on
     * every agent of a region, unique per region. Unset: derived from the
     * [redis] topology (config_region_default); NULL without [global]. */
    char *global_region;
    int global_region_derived; /* 1: global_region was not set, but derived */

    /* [lease] */
    uint64_t lease_interval_ms; /* default 100 */
    uint64_t lease_ttl_ms;      /* default 1000 */
    double lease_max_fraction;  /* default 0.1, in (0, 1] */
    int lease_rate;             /* rate leases for warm keys: default off */
    uint64_t lease_rate_ttl_ms; /* their lifetime: default 30000 */

    /* [fallback] */
    int fallback_mode;     /* enum cfg_down_mode, default DOWN_OPEN */
    double fallback_share; /* in (0, 1], or CFG_SHARE_AUTO (the default): 1/N, N
                              the agents of the fleet (fleet.h) */

    /* [rules] */
    int rules_source;       /* enum cfg_rules_source, default RULES_SOURCE_FILE */
    uint64_t rules_poll_ms; /* source = redis: how often the current version is read;
                               default 1000 */
    char *rules_cache;      /* the last applied version on disk; NULL: none (default
                               with source = redis: rules.ini in $STATE_DIRECTORY,
                               else CFG_RULES_DEFAULT_CACHE) */
    unsigned rules_history; /* versions kept in Redis by --push; default 10 */

    struct cfg_rule *rules;
    size_t nrules;
    struct cfg_regex_use regex_use; /* the rules' regexes against the budget */
};

/* Parse the file at path. On success returns 0 and sets *out (free with
 * config_free). On failure returns -1, *out is NULL, and err holds one
 * "FILE:LINE: message" line per error (as many as fit in errlen). An
 * unreadable file is "FILE: cannot open: <strerror>". */
int config_load_file(const char *path, struct config **out, char *err, size_t errlen);

/* Same from a NUL-terminated string; name stands for FILE in errors. */
int config_load_string(const char *text, const char *name, struct config **out, char *err,
                       size_t errlen);

/* The non-rule sections of the file at path (its own [rule:*] sections
 * skipped) with the [rule:*] sections of rules (rules_len bytes, NUL-
 * terminated; name stands for its FILE in errors): how a rule set from
 * Redis, its cache or --push is checked and applied, with exactly the
 * checks of config_load_file. rules holding any other section, a NUL byte,
 * or more than CFG_MAX_RULES_TEXT bytes is refused. Errors are
 * "FILE:LINE: message" for the file, "NAME:LINE: message" for rules. */
int config_load_with_rules(const char *path, const char *rules, size_t rules_len, const char *name,
                           struct config **out, char *err, size_t errlen);

/* Free a config and everything it owns. NULL is a no-op. */
void config_free(struct config *cfg);

/* The effective configuration as INI text (every default resolved, passwords
 * masked): malloc'd, NUL-terminated, its length in *len; NULL out of memory. */
/* A duration as the file would say it, in its largest whole unit ("1m",
 * "1500ms", "1d") into out (cap bytes; 32 is always enough). */
void config_duration_text(uint64_t ms, char *out, size_t cap);
char *config_render(const struct config *cfg, size_t *len);

/* A hash of what the configuration means (its rendering, file name aside):
 * equal for two files that say the same thing. */
uint64_t config_hash(const struct config *cfg);

/* Whether rule r takes its limits per request from args (rate or burst). */
static inline int config_rule_per_request(const struct cfg_rule *r)
{
    return r->rate_arg || r->burst_arg;
}

/* Whether the config runs without Redis. */
int config_standalone(const struct config *cfg);

/* Whether [global] names a Redis (url, cluster or sentinel). */
int config_global(const struct config *cfg);

/* The default [global] region of cfg: a name for its [redis] topology as
 * configured: "HOST:PORT/DB" (or "unix:/PATH/DB") for a url, "MASTER@HOST:PORT"
 * (the master's name at the first sentinel) for sentinel, "cluster@HOST:PORT"
 * (the first seed) for cluster; "" standalone. Into out (cap bytes,
 * CFG_MAX_REGION + 1 is always enough); 0, or -1 when it did not fit. */
int config_region_default(const struct config *cfg, char *out, size_t cap);

/* The most bytes an ACK deciding by rule r can take in a frame (header with
 * the longest ids included, not the 4-byte length): every variable, with
 * remaining at the rule's capacity and waits at CFG_ACK_MAX_SECONDS. The
 * end-of-file check refuses a max_frame_size below this for any rule
 * (config_ack.c). */
size_t config_ack_max_size(const struct cfg_rule *r);

/* Value parsers, exposed for tests. Each returns 0 or -1. */
/* "250ms", "1s", "1m", "1h", "1d"; at most CFG_MAX_DURATION_MS */
int config_parse_duration(const char *s, uint64_t *ms);
/* "100/1m"; a bare unit counts one: "100/m" is "100/1m" */
int config_parse_rate(const char *s, uint64_t *n, uint64_t *period_ms);
int config_parse_bool(const char *s, int *b); /* yes|no|on|off|true|false|1|0 */
/* "127.0.0.0/8", "::1/128", "10.0.0.1": net_cidr_parse */
int config_parse_cidr(const char *s, struct cfg_cidr *c);
/* %XX escapes (a url's userinfo): out has room for len + 1 bytes and gets a
 * NUL; -1 on a '%' without two hex digits after it, or on %00 */
int config_percent_decode(const char *s, size_t len, char *out, size_t *out_len);

/* Whether the peer address (AF_INET or AF_INET6 sockaddr) is allowed by cfg
 * (always true when allow is empty or the peer is a unix socket):
 * net_peer_allowed on cfg's allow list. */
int config_peer_allowed(const struct config *cfg, const struct sockaddr *sa);

#endif
