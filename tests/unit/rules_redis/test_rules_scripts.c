/* SPDX-License-Identifier: Apache-2.0 */
/* test_rules_scripts.c - the rule store's scripts (lua/rules_push.lua,
 * rules_history.lua, rules_fleet.lua) on a real redis-server, called
 * through the positions of src/rules_redis/rules_script.h as the agent and
 * its commands call them: a push, the compare-and-set, a rollback, the
 * history trimmed with the hashes, "N SHA256" in current, the fleet's
 * reports and their expiry, a version's text fetched only within the cap
 * (lua/rules_fetch.lua, as EVAL_RO as the agent sends it). The server and connection are
 * scripts_harness.c's; each test has a prefix of its own. */
#include <check.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules_scripts.h"
#include "rules_redis/rules_script.h"
#include "lua/scripts_harness.h"

struct keys {
    char prefix[96], current[128], versions[128], agents[128], seen[128];
};

static void keys_for(struct keys *k, const char *name)
{
    mkkey(k->prefix, sizeof(k->prefix), name);
    strcat(k->prefix, ":");
    snprintf(k->current, sizeof(k->current), "%s{rules}:current", k->prefix);
    snprintf(k->versions, sizeof(k->versions), "%s{rules}:versions", k->prefix);
    snprintf(k->agents, sizeof(k->agents), "%s{rules}:agents", k->prefix);
    snprintf(k->seen, sizeof(k->seen), "%s{rules}:seen", k->prefix);
}

/* EVAL script with keys k1, k2 and argc args; the reply (freeReplyObject). */
static redisReply *eval2(const char *script, const char *k1, const char *k2, int argc,
                         const char *const *args)
{
    const char *argv[16] = {"EVAL", script, "2", k1, k2};
    size_t len[16];

    for (int i = 0; i < argc; i++)
        argv[5 + i] = args[i];
    for (int i = 0; i < 5 + argc; i++)
        len[i] = strlen(argv[i]);
    redisReply *r = redisCommandArgv(rc, 5 + argc, argv, len);
    ck_assert_ptr_nonnull(r);
    return r;
}

/* rules_push with its four keys; the reply (freeReplyObject). */
static redisReply *eval_push(const struct keys *k, const char *const *args)
{
    const char *argv[7 + RULES_PUSH_ARGC] = {"EVAL",      rules_script_push, "4",    k->current,
                                             k->versions, k->agents,         k->seen};
    size_t len[7 + RULES_PUSH_ARGC];

    for (int i = 0; i < RULES_PUSH_ARGC; i++)
        argv[7 + i] = args[i];
    for (int i = 0; i < 7 + RULES_PUSH_ARGC; i++)
        len[i] = strlen(argv[i]);
    redisReply *r = redisCommandArgv(rc, 7 + RULES_PUSH_ARGC, argv, len);
    ck_assert_ptr_nonnull(r);
    return r;
}

/* rules_push: {status, version, fleet}; force "" or "1" */
static void push_f(const struct keys *k, const char *op, const char *if_version, const char *keep,
                   const char *message, const char *text, const char *sha, const char *force,
                   long long *status, long long *version, long long *fleet)
{
    const char *args[RULES_PUSH_ARGC];

    args[RULES_PUSH_ARG_OP] = op;
    args[RULES_PUSH_ARG_IF_VERSION] = if_version;
    args[RULES_PUSH_ARG_HISTORY] = keep;
    args[RULES_PUSH_ARG_HOST] = "host-1";
    args[RULES_PUSH_ARG_MESSAGE] = message;
    args[RULES_PUSH_ARG_TEXT] = text;
    args[RULES_PUSH_ARG_SHA256] = sha;
    args[RULES_PUSH_ARG_FORCE] = force;
    args[RULES_PUSH_ARG_LIVE_MS] = "60000";
    redisReply *r = eval_push(k, args);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY && r->elements == RULES_PUSH_R_N, "reply %d %s",
                  r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
    *status = r->element[RULES_PUSH_R_STATUS]->integer;
    *version = r->element[RULES_PUSH_R_VERSION]->integer;
    if (fleet)
        *fleet = r->element[RULES_PUSH_R_FLEET]->integer;
    freeReplyObject(r);
}

static void push(const struct keys *k, const char *op, const char *if_version, const char *keep,
                 const char *message, const char *text, const char *sha, long long *status,
                 long long *version)
{
    push_f(k, op, if_version, keep, message, text, sha, "", status, version, NULL);
}

static char *get(const char *key)
{
    redisReply *r = cmd("GET %s", key);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

START_TEST(push_cas_rollback_history)
{
    struct keys k;
    long long st, v;
    char key[160];

    keys_for(&k, "push");
    push(&k, "push", "", "2", "one", "[rule:a]\nrate = 1/s\n", "aa", &st, &v);
    ck_assert_int_eq(st, RULES_PUSH_WRITTEN);
    ck_assert_int_eq(v, 1);
    char *cur = get(k.current);
    ck_assert_str_eq(cur, "1 aa"); /* the number and the sha256 */
    free(cur);
    /* compare-and-set: from 0 refused (1 is current), from 1 written */
    push(&k, "push", "0", "2", "", "[rule:b]\nrate = 2/s\n", "bb", &st, &v);
    ck_assert_int_eq(st, RULES_PUSH_MOVED);
    ck_assert_int_eq(v, 1);
    push(&k, "push", "1", "2", "", "[rule:b]\nrate = 2/s\n", "bb", &st, &v);
    ck_assert_int_eq(st, RULES_PUSH_WRITTEN);
    ck_assert_int_eq(v, 2);
    /* rollback to 1 only with the sha256 the caller checked */
    push(&k, "rollback", "", "2", "", "1", "", &st, &v);
    ck_assert_int_eq(st, RULES_PUSH_NOT_KEPT);
    push(&k, "rollback", "", "2", "", "1", "bb", &st, &v);
    ck_assert_int_eq(st, RULES_PUSH_NOT_KEPT);
    ck_assert_int_eq(v, 2);
    /* rollback to 1: version 3 with 1's text and sha; history 2 drops 1 */
    push(&k, "rollback", "", "2", "", "1", "aa", &st, &v);
    ck_assert_int_eq(st, RULES_PUSH_WRITTEN);
    ck_assert_int_eq(v, 3);
    snprintf(key, sizeof(key), "%s{rules}:v:3", k.prefix);
    redisReply *r = cmd("HMGET %s text sha256 message host", key);
    ck_assert_str_eq(r->element[0]->str, "[rule:a]\nrate = 1/s\n");
    ck_assert_str_eq(r->element[1]->str, "aa");
    ck_assert_str_eq(r->element[2]->str, "rollback to 1");
    ck_assert_str_eq(r->element[3]->str, "host-1");
    freeReplyObject(r);
    snprintf(key, sizeof(key), "%s{rules}:v:1", k.prefix);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);
    ck_assert_int_eq(cmd_int("ZCARD %s", k.versions), 2);
    /* version 1 is gone: a rollback to it writes nothing */
    push(&k, "rollback", "", "2", "", "1", "aa", &st, &v);
    ck_assert_int_eq(st, RULES_PUSH_NOT_KEPT);
    ck_assert_int_eq(v, 3);
    /* bad arguments: an error, nothing written */
    const char *bad[RULES_PUSH_ARGC] = {"frobnicate", "", "2", "h", "", "x", "y", "", "1"};
    r = eval_push(&k, bad);
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    const char *nolive[RULES_PUSH_ARGC] = {"push", "", "2", "h", "", "x", "y", "", "0"};
    r = eval_push(&k, nolive);
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    cur = get(k.current);
    ck_assert_str_eq(cur, "3 aa");
    free(cur);

    /* the history, newest first, by position */
    r = eval2(rules_script_history, k.current, k.versions, 0, NULL);
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_uint_eq(r->elements, RULES_HISTORY_R_HEAD + 2 * RULES_HISTORY_E_N);
    ck_assert_int_eq(r->element[RULES_HISTORY_R_CURRENT]->integer, 3);
    redisReply **e = r->element + RULES_HISTORY_R_HEAD;
    ck_assert_str_eq(e[RULES_HISTORY_E_VERSION]->str, "3");
    ck_assert_str_eq(e[RULES_HISTORY_E_HOST]->str, "host-1");
    ck_assert_str_eq(e[RULES_HISTORY_E_SHA256]->str, "aa");
    ck_assert_str_eq(e[RULES_HISTORY_E_MESSAGE]->str, "rollback to 1");
    ck_assert_int_gt(atoll(e[RULES_HISTORY_E_TIME]->str), 1600000000);
    e += RULES_HISTORY_E_N;
    ck_assert_str_eq(e[RULES_HISTORY_E_VERSION]->str, "2");
    freeReplyObject(r);
}
END_TEST

/* A current version written by hand ("7", no sha) reads as 7. */
START_TEST(current_by_hand)
{
    struct keys k;
    long long st, v;

    keys_for(&k, "hand");
    freeReplyObject(cmd("SET %s 7", k.current));
    push(&k, "push", "7", "10", "", "x", "s", &st, &v);
    ck_assert_int_eq(st, RULES_PUSH_WRITTEN);
    ck_assert_int_eq(v, 8);
}
END_TEST

static redisReply *fleet(const struct keys *k, const char *agent, const char *version,
                         const char *error, const char *live)
{
    const char *args[RULES_FLEET_ARGC];

    args[RULES_FLEET_ARG_AGENT] = agent;
    args[RULES_FLEET_ARG_VERSION] = version;
    args[RULES_FLEET_ARG_ERROR] = error;
    args[RULES_FLEET_ARG_LIVE_MS] = live;
    redisReply *r = eval2(rules_script_fleet, k->agents, k->seen, RULES_FLEET_ARGC, args);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "reply %d %s", r->type,
                  r->type == REDIS_REPLY_ERROR ? r->str : "");
    return r;
}

START_TEST(fleet_reports)
{
    struct keys k;
    long long st, v;

    keys_for(&k, "fleet");
    push(&k, "push", "", "10", "", "t", "s", &st, &v);
    freeReplyObject(fleet(&k, "host=a pid=1 listen=x:1", "1", "", "60000"));
    redisReply *r = fleet(&k, "host=b pid=2 listen=x:2", "0", "version 1: bad", "60000");
    ck_assert_uint_eq(r->elements, RULES_FLEET_R_HEAD + 2 * RULES_FLEET_E_N);
    ck_assert_int_eq(r->element[RULES_FLEET_R_CURRENT]->integer, 1);
    ck_assert_int_gt(r->element[RULES_FLEET_R_NOW_MS]->integer, 1600000000000LL);
    redisReply **e = r->element + RULES_FLEET_R_HEAD;
    ck_assert_str_eq(e[RULES_FLEET_E_AGENT]->str, "host=a pid=1 listen=x:1");
    ck_assert_str_eq(e[RULES_FLEET_E_VERSION]->str, "1");
    ck_assert_str_eq(e[RULES_FLEET_E_ERROR]->str, "");
    e += RULES_FLEET_E_N;
    ck_assert_str_eq(e[RULES_FLEET_E_VERSION]->str, "0");
    ck_assert_str_eq(e[RULES_FLEET_E_ERROR]->str, "version 1: bad");
    freeReplyObject(r);
    /* a reader ("") writes nothing; a window of 1 ms: both are gone once
     * a writer prunes, and its own report is all that is left */
    r = fleet(&k, "", "0", "", "60000");
    ck_assert_uint_eq(r->elements, RULES_FLEET_R_HEAD + 2 * RULES_FLEET_E_N);
    freeReplyObject(r);
    sleep_ms(5);
    r = fleet(&k, "host=c pid=3 listen=x:3", "1", "", "1");
    ck_assert_uint_eq(r->elements, RULES_FLEET_R_HEAD + RULES_FLEET_E_N);
    /* its own report lives 1 ms too: on a busy machine it may be gone by now */
    ck_assert_int_le(cmd_int("HLEN %s", k.agents), 1);
    ck_assert_int_le(cmd_int("PTTL %s", k.seen), 1);
    freeReplyObject(r);
}
END_TEST

/* The store lost versions the agents run (a Redis restarted empty): a
 * push numbered at or below the highest version a live agent reports is
 * refused; forced, it is numbered above it, so that the agents (which apply
 * no lower number) take it. Agents that stopped reporting do not count. */
START_TEST(push_behind_fleet)
{
    struct keys k;
    long long st, v, fl;

    keys_for(&k, "behind");
    freeReplyObject(fleet(&k, "host=a pid=1 listen=x:1", "7", "", "60000"));
    freeReplyObject(fleet(&k, "host=b pid=2 listen=x:2", "5", "", "60000"));
    push_f(&k, "push", "", "10", "", "[rule:a]\nrate = 1/s\n", "aa", "", &st, &v, &fl);
    ck_assert_int_eq(st, RULES_PUSH_BEHIND_FLEET);
    ck_assert_int_eq(v, 0);
    ck_assert_int_eq(fl, 7);
    ck_assert_int_eq(cmd_int("EXISTS %s", k.current), 0); /* nothing written */
    push_f(&k, "push", "", "10", "", "[rule:a]\nrate = 1/s\n", "aa", "1", &st, &v, &fl);
    ck_assert_int_eq(st, RULES_PUSH_WRITTEN);
    ck_assert_int_eq(v, 8);
    char *cur = get(k.current);
    ck_assert_str_eq(cur, "8 aa");
    free(cur);
    /* above the fleet: an ordinary push again, numbered on */
    push_f(&k, "push", "", "10", "", "[rule:b]\nrate = 2/s\n", "bb", "", &st, &v, &fl);
    ck_assert_int_eq(st, RULES_PUSH_WRITTEN);
    ck_assert_int_eq(v, 9);
    /* a rollback is numbered the same way */
    freeReplyObject(fleet(&k, "host=c pid=3 listen=x:3", "12", "", "60000"));
    push_f(&k, "rollback", "", "10", "", "8", "aa", "", &st, &v, &fl);
    ck_assert_int_eq(st, RULES_PUSH_BEHIND_FLEET);
    ck_assert_int_eq(fl, 12);
    push_f(&k, "rollback", "", "10", "", "8", "aa", "1", &st, &v, &fl);
    ck_assert_int_eq(st, RULES_PUSH_WRITTEN);
    ck_assert_int_eq(v, 13);
    /* reports older than the live window are not the fleet's */
    keys_for(&k, "behind-gone");
    freeReplyObject(fleet(&k, "host=a pid=1 listen=x:1", "7", "", "60000"));
    freeReplyObject(cmd("ZADD %s 1000 %s", k.seen, "host=a pid=1 listen=x:1"));
    push_f(&k, "push", "", "10", "", "t", "s", "", &st, &v, &fl);
    ck_assert_int_eq(st, RULES_PUSH_WRITTEN);
    ck_assert_int_eq(v, 1);
    ck_assert_int_eq(fl, 0);
}
END_TEST

/* rules_fetch on key with the cap; the reply (freeReplyObject). */
static redisReply *fetch(const char *key, const char *cap)
{
    const char *argv[4 + RULES_FETCH_ARGC] = {"EVAL_RO", rules_script_fetch, "1", key};
    size_t len[4 + RULES_FETCH_ARGC];

    argv[4 + RULES_FETCH_ARG_CAP] = cap;
    for (int i = 0; i < 4 + RULES_FETCH_ARGC; i++)
        len[i] = strlen(argv[i]);
    redisReply *r = redisCommandArgv(rc, 4 + RULES_FETCH_ARGC, argv, len);
    ck_assert_ptr_nonnull(r);
    return r;
}

START_TEST(fetch_within_cap)
{
    struct keys k;
    long long st, v;
    char key[160];

    keys_for(&k, "fetch");
    push(&k, "push", "", "10", "", "[rule:a]\nrate = 1/s\n", "aa", &st, &v);
    ck_assert_int_eq(st, RULES_PUSH_WRITTEN);
    snprintf(key, sizeof(key), "%s{rules}:v:%lld", k.prefix, v);
    /* within the cap (at it, to the byte): the text and its sha256 */
    redisReply *r = fetch(key, "20");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_uint_eq(r->elements, RULES_FETCH_R_N);
    ck_assert_str_eq(r->element[RULES_FETCH_R_TEXT]->str, "[rule:a]\nrate = 1/s\n");
    ck_assert_str_eq(r->element[RULES_FETCH_R_SHA256]->str, "aa");
    freeReplyObject(r);
    /* one byte over: its size alone, never the text */
    r = fetch(key, "19");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_uint_eq(r->elements, RULES_FETCH_R_OVER);
    ck_assert_int_eq(r->element[RULES_FETCH_R_SIZE]->integer, 20);
    freeReplyObject(r);
    /* a version not kept: two nils */
    snprintf(key, sizeof(key), "%s{rules}:v:99", k.prefix);
    r = fetch(key, "1048576");
    ck_assert_uint_eq(r->elements, RULES_FETCH_R_N);
    ck_assert_int_eq(r->element[RULES_FETCH_R_TEXT]->type, REDIS_REPLY_NIL);
    ck_assert_int_eq(r->element[RULES_FETCH_R_SHA256]->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    r = fetch(key, "x");
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    ck_assert_ptr_nonnull(strstr(r->str, "bad ARGV[1]"));
    freeReplyObject(r);
}
END_TEST

static Suite *rules_scripts_suite(void)
{
    Suite *s = suite_create("rules_scripts");
    TCase *tc = scripts_tcase("rules");

    tcase_add_test(tc, push_cas_rollback_history);
    tcase_add_test(tc, current_by_hand);
    tcase_add_test(tc, fleet_reports);
    tcase_add_test(tc, push_behind_fleet);
    tcase_add_test(tc, fetch_within_cap);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return scripts_main(rules_scripts_suite());
}
