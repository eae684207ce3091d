/* SPDX-License-Identifier: Apache-2.0 */
/* scripts_harness.h - shared by the tests of the Redis Lua scripts
 * (test_scripts_*.c): see scripts_harness.c. */
#ifndef SCRIPTS_HARNESS_H
#define SCRIPTS_HARNESS_H

#include <check.h>
#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/script.h"

#define MAX_ARGS 16
_Static_assert((int)CLAIM_ARGC_FIXED <= MAX_ARGS && (int)RETURN_ARGC_FIXED <= MAX_ARGS &&
                   (int)EXACT_ARGC_FIXED <= MAX_ARGS && (int)RESET_ARGC_FIXED <= MAX_ARGS,
               "every script's arguments fit");

/* Short names for the scripts and their reply positions of src/store/script.h. */
enum script {
    TB_CLAIM = SCRIPT_TB_CLAIM,
    TB_RETURN = SCRIPT_TB_RETURN,
    TB_EXACT = SCRIPT_TB_EXACT,
    SW_CLAIM = SCRIPT_SW_CLAIM,
    SW_RETURN = SCRIPT_SW_RETURN,
    SW_EXACT = SCRIPT_SW_EXACT,
    TB_RESET = SCRIPT_TB_RESET,
    SW_RESET = SCRIPT_SW_RESET,
    TB_REFUND = SCRIPT_TB_REFUND,
    SW_REFUND = SCRIPT_SW_REFUND,
    CC_ACQUIRE = SCRIPT_CC_ACQUIRE,
    CC_RELEASE = SCRIPT_CC_RELEASE,
    CC_RESET = SCRIPT_CC_RESET,
    TB_POOL = SCRIPT_TB_POOL,
    G_LOCK = SCRIPT_G_LOCK,
    NSCRIPTS = SCRIPT_COUNT,
};
extern const char *const script_name[NSCRIPTS];
extern char *script_text[NSCRIPTS];
extern size_t script_len[NSCRIPTS];
extern char script_sha[NSCRIPTS][41];
extern int scripts_fcall; /* calls go as FCALL of the library (SCRIPTS_CALL=fcall) */

/* Reply of the claim and return scripts, and of the exact ones. */
enum {
    R_GRANTED = CLAIM_R_GRANTED,
    R_REMAINING = CLAIM_R_REMAINING,
    R_HELD = CLAIM_R_HELD,
    R_HOLDERS = CLAIM_R_HOLDERS,
    R_RETRY = CLAIM_R_RETRY_MS,
    R_RESET = CLAIM_R_RESET_MS,
    R_LEASE = CLAIM_R_LEASE_MS,
    R_MINE = CLAIM_R_MINE,
    R_N = CLAIM_R_COUNT,
};
enum {
    X_ALLOWED = EXACT_R_ALLOWED,
    X_REMAINING = EXACT_R_REMAINING,
    X_RETRY = EXACT_R_RETRY_MS,
    X_RESET = EXACT_R_RESET_MS,
    X_TIME = EXACT_R_TIME_MS,
    X_N = EXACT_R_COUNT,
};
enum {
    Z_REMAINING = RESET_R_REMAINING,
    Z_HELD = RESET_R_HELD,
    Z_HOLDERS = RESET_R_HOLDERS,
    Z_BEFORE = RESET_R_BEFORE,
    Z_N = RESET_R_COUNT,
};

/* What a rule passes to the scripts. */
struct rule {
    long long limit, period_ms, burst, ttl_ms;
};

/* 10 per 10 s: 0.001 token/ms, so refill is negligible within a test. */
extern const struct rule slow;

extern int redis_port;
extern redisContext *rc;

double mono_ms(void);
void sleep_ms(double ms);
redisReply *cmd(const char *fmt, ...);
long long cmd_int(const char *fmt, ...);
/* Redis server time, microseconds. */
long long redis_now_us(void);
/* Milliseconds left in the current window of Redis time. */
double window_left_ms(long long period_ms);
/* Integer value of a hash field, or -1 when the field is missing. */
long long hget_ll(const char *key, const char *field);
/* HGET of a hash only (hget_ll reads a string bucket too). */
long long hash_get_ll(const char *key, const char *field);
/* HGETALL of a bucket, or a string bucket's fields in the same form. */
redisReply *bucket_fields(const char *key);
void mkkey(char *buf, size_t len, const char *name);
int read_scripts(void);
void load_script(enum script s);
/* EVALSHA sha 1 key args..., without any retry. */
redisReply *evalsha_raw(enum script s, const char *key, int nargs, const char *const *args);
/* EVALSHA; on NOSCRIPT load the script again and retry once (as the agent does). */
redisReply *evalsha(enum script s, const char *key, int nargs, const char *const *args);
/* Call script s with [agent,] nums as ARGV; expect nout integers into out. */
/* Call script s with the string ARGV args (n of them); expect nout integers into out. */
void call_strs(enum script s, const char *key, int n, const char *const *args, long long *out,
               size_t nout);
void call_ints(enum script s, const char *key, const char *agent, const long long *nums, int nnums,
               long long *out, size_t nout);
void claim(enum script s, const char *key, const char *agent, const struct rule *ru, long long want,
           long long used, long long ret, long long *out);
void give_back(enum script s, const char *key, const char *agent, const struct rule *ru,
               long long used, long long *out);
void exact(enum script s, const char *key, const struct rule *ru, long long n, long long *out);
void reset(enum script s, const char *key, const struct rule *ru, long long *out);

/* ---- reading a bucket independently ----------------------------------------- */

struct state {
    int exists;
    int has_t;
    double t;          /* token bucket */
    long long held;    /* sum of h:<agent> (sliding window: of the current window) */
    int holders;       /* number of h:<agent> (idem) */
    int orphans;       /* h: without e: (tb) or w: (sw), and e:/w: without h: */
    long long w, c, p; /* sliding window */
};

const redisReply *hash_field(const redisReply *r, const char *name);
/* HGETALL key. sw: holdings count only when w:<agent> equals w. */
void read_state(const char *key, int sw, struct state *st);
/* The token bucket invariant, read back from Redis: t + H <= b. */
void assert_tb_invariant(const char *key, long long burst, struct state *st);

int start_server(void);
void stop_server(void);
/* Check fixture: connect, load every script. */
void setup(void);
void teardown(void);
/* A test case named name with that fixture, and time for a slow machine. */
TCase *scripts_tcase(const char *name);

extern uint64_t rng;
long long rnd_below(long long n);

/* Run suite against $REDIS_PORT or a server of its own; the exit status
 * (77: skipped, no redis-server). */
int scripts_main(Suite *suite);

#endif
