/* SPDX-License-Identifier: Apache-2.0 */
/* store_conn_setup.c - what a connection sends before it is ready (AUTH,
 * SELECT, ROLE, SCRIPT LOAD of every script, and after a refusal a probe),
 * the replies to them, and what a refusal marks (store_errors.h): the
 * connection is given up and made again after the backoff, ready only once
 * the probe passes. The connection itself is store_conn.c's, which acts on
 * what these functions answer (store_conn_setup.h); both share
 * store_conn_int.h.
 */
#include "store_conn_setup.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/sha256.h"
#include "core/util.h"
#include "metrics/metrics.h"
#include "scripts.h"
#include "store_cmd.h"
#include "store_errors.h"
#include "store_reply.h"
#include "store_reply_check.h"

#define PROBE_KEY_MAX 128

/* The scripts by enum store_script, then the batch script (script.h). */
#define SCRIPT_SRC(NAME, name) [SCRIPT_##NAME] = script_##name,
#define SCRIPT_NAME(NAME, name) [SCRIPT_##NAME] = #name,
const char *const store_conn_script_src[SCRIPT_COUNT + 1] = {
    STORE_SCRIPTS(SCRIPT_SRC)[SCRIPT_BATCH] = script_batch,
};
const char *const store_conn_script_names[SCRIPT_COUNT + 1] = {
    STORE_SCRIPTS(SCRIPT_NAME)[SCRIPT_BATCH] = "batch",
};
#undef SCRIPT_SRC
#undef SCRIPT_NAME

static enum store_conn_setup_next setup_step_done(struct store_conn *conn);

static struct store_library library;
static pthread_once_t library_once = PTHREAD_ONCE_INIT;

/* "#!lua name=LIB\nlocal LIB = 'LIB'\n" then lua/library.lua (its header
 * comment says so). Out of memory: no source, and no FUNCTION LOAD. */
static void library_make(void)
{
    static const char hex[] = "0123456789abcdef";
    size_t body = strlen(script_library);
    uint8_t d[SHA256_LEN];
    struct sha256 h;
    char *src;
    int n;

    sha256_init(&h);
    sha256_update(&h, script_library, body);
    sha256_final(&h, d);
    memcpy(library.name, "spoa_ratelimit_", 15);
    for (int i = 0; i < 8; i++) {
        library.name[15 + 2 * i] = hex[d[i] >> 4];
        library.name[16 + 2 * i] = hex[d[i] & 15];
    }
    library.name[31] = '\0';
    for (int i = 0; i <= SCRIPT_BATCH; i++)
        snprintf(library.fn[i], sizeof(library.fn[i]), "%s_%s", library.name,
                 store_conn_script_names[i]);
    src = malloc(body + 2 * sizeof(library.name) + 32);
    if (!src)
        return;
    n = sprintf(src, "#!lua name=%s\nlocal LIB = '%s'\n", library.name, library.name);
    memcpy(src + n, script_library, body + 1);
    library.src = src; /* kept for the life of the process */
    library.len = (size_t)n + body;
}

const struct store_library *store_conn_library(void)
{
    pthread_once(&library_once, library_make);
    return &library;
}

void store_conn_set_fcall(struct store_conn *conn, int on)
{
    if (conn->fcall == on)
        return;
    conn->fcall = on;
    atomic_fetch_add(&metrics.redis_function_connections, on ? 1 : -1);
}

int store_conn_load_library(struct store_conn *conn, redisCallbackFn *on_reply)
{
    const struct store_library *lib = store_conn_library();

    if (!lib->src || redisAsyncCommand(conn->ac, on_reply, (void *)(intptr_t)SETUP_FUNCTION,
                                       "FUNCTION LOAD %b", lib->src, lib->len) != REDIS_OK)
        return -1;
    METRIC_INC(redis_commands);
    conn->loading++;
    conn->fcall_loading = 1;
    return 0;
}

/* The reply to FUNCTION LOAD: the library's name, or "already exists" (an
 * agent of this build loaded it): FCALL from now on. Any other error (a
 * service that disables FUNCTION, an ACL without FUNCTION LOAD, a full or
 * read-only Redis) is no failure: the scripts are loaded, and EVALSHA does
 * what FCALL would, at a little more Redis CPU per call. Said once per
 * connection. */
static enum store_conn_setup_next library_loaded(struct store_conn *conn, const redisReply *reply)
{
    conn->fcall_loading = 0;
    if (reply->type != REDIS_REPLY_ERROR || strstr(reply->str, "already exists")) {
        if (!conn->fcall)
            LOG_DEBUG("\"redis functions loaded\" addr=%s library=%s", log_val(conn->name),
                      store_conn_library()->name);
        store_conn_set_fcall(conn, 1);
    } else {
        if (conn->fcall || !conn->fcall_said)
            LOG_INFO("\"redis functions unavailable: calling the scripts with EVALSHA\" "
                     "addr=%s err=\"%s\"",
                     log_val(conn->name), log_esc(reply->str, strnlen(reply->str, 200)));
        store_conn_set_fcall(conn, 0);
        conn->fcall_said = 1;
    }
    return setup_step_done(conn);
}

static const char *setup_name(long what)
{
    switch (what) {
    case SETUP_AUTH:
        return "AUTH";
    case SETUP_SELECT:
        return "SELECT";
    case SETUP_ROLE:
        return "ROLE";
    case SETUP_PROBE:
        return "EVALSHA tb_exact (probe)";
    default:
        return "SCRIPT LOAD";
    }
}

void store_conn_note_error(struct store_conn *conn, enum metrics_redis_error kind, const char *err,
                           const char *command)
{
    const struct store_error_where w = {"redis", conn->name, command, conn->env->user,
                                        conn->env->prefix};

    if (conn->trial) { /* counted; its owner says the rest */
        METRIC_INC(
            redis_error_replies[kind < METRICS_REDIS_ERROR_KINDS ? kind : METRICS_REDIS_OTHER]);
        return;
    }
    store_error_note(kind, err, &w);
}

void store_conn_too_large(struct store_conn *conn, char *why, size_t len)
{
    const struct store_cmd *c = conn->head; /* the oldest call: its reply was being read */
    char command[64];

    if (c && !c->read)
        snprintf(command, sizeof(command), "%s %s", c->fcall ? "FCALL" : "EVALSHA",
                 c->batch ? "batch" : store_conn_script_names[c->script]);
    else
        snprintf(command, sizeof(command), "%s", c ? "a read" : "a setup command or PING");
    snprintf(why, len, "reply too large: %s", conn->cap.why);
    store_conn_note_error(conn, METRICS_REDIS_REPLY_TOO_LARGE, why, command);
}

/* Redis refused a call with a reply that every call will get (kind: a
 * refusal, store_errors.h): the connection is given up and tried again after
 * the backoff, a probe first. Not master: find it again (ROLE, Sentinel, the
 * Cluster map through the owner's hooks). slot: of the refused call's key
 * (the probe's must match on a Cluster node), or -1. */
void store_conn_refused(struct store_conn *conn, enum metrics_redis_error kind, const char *err,
                        int slot)
{
    conn->refused = 1;
    conn->probe_slot = conn->slots ? slot : -1;
    /* url mode: say what the server is (Sentinel checks ROLE anyway; a
     * Cluster node leaves the map at the refresh its loss asks for) */
    if ((kind == METRICS_REDIS_READONLY || kind == METRICS_REDIS_MASTERDOWN) && !conn->slots)
        conn->check_role = 1;
    /* said by note_error: the loss does not say it again */
    snprintf(conn->last_err, sizeof(conn->last_err), "%.200s", err);
}

void store_conn_bad(struct store_conn *conn, enum metrics_redis_error kind, const char *what,
                    const char *why, int slot)
{
    store_error_bad(kind, conn->name, what, why);
    conn->refused = 1;
    conn->probe_slot = conn->slots ? slot : -1;
    /* said by store_error_bad, rate-limited: the loss does not say it again */
    snprintf(conn->last_err, sizeof(conn->last_err), "%s",
             kind == METRICS_REDIS_NOSCRIPT ? "scripts do not stay loaded" : "malformed replies");
}

/* The probe's ARGV (store_conn_send_setup) and what is wrong with its reply
 * (store_reply_check.h), NULL: nothing. */
static char *const probe_argv[] = {"1000", "1000", "1000"};

static const char *probe_check(const redisReply *reply)
{
    struct store_result res = {0};

    if (reply->type != REDIS_REPLY_ARRAY)
        return "a reply that is no array";
    store_reply_values(reply, &res);
    if (res.status != STORE_OK)
        return res.err;
    return store_reply_check(SCRIPT_TB_EXACT, &res, reply->elements, 3, probe_argv);
}

/* One setup reply in: the last one makes the connection ready. */
static enum store_conn_setup_next setup_step_done(struct store_conn *conn)
{
    if (conn->loading > 0 && --conn->loading == 0) {
        conn->last_err[0] = '\0';
        conn->refused = 0;
        conn->check_role = 0;
        return STORE_CONN_SETUP_READY;
    }
    return STORE_CONN_SETUP_WAIT;
}

/* ROLE answered something else than master. */
static enum store_conn_setup_next not_master(struct store_conn *conn, const char *role)
{
    char why[ERR_LEN];

    snprintf(why, sizeof(why), "ROLE is %.40s, not master", role);
    if (strcmp(conn->last_err, why) != 0) {
        if (conn->must_be_master)
            LOG_WARN("\"redis is not the master\" addr=%s role=%s", log_val(conn->name),
                     log_esc(role, strnlen(role, 40)));
        else /* url mode: only the operator (or REPLICAOF NO ONE) changes it */
            LOG_WARN("\"redis url points at a replica, not the master: waiting for it to be "
                     "promoted (or fix [redis] url)\" addr=%s role=%s",
                     log_val(conn->name), log_esc(role, strnlen(role, 40)));
    }
    snprintf(conn->last_err, sizeof(conn->last_err), "%s", why);
    conn->check_role = 1;
    return STORE_CONN_SETUP_LOST;
}

/* An error reply to a setup command. */
static enum store_conn_setup_next setup_error(struct store_conn *conn, long what, const char *err)
{
    enum metrics_redis_error kind = store_error_kind(err);
    char why[ERR_LEN];

    METRIC_INC(redis_errors);
    if (what == SETUP_ROLE && kind == METRICS_REDIS_NOPERM && !conn->must_be_master) {
        /* url mode asks ROLE after a READONLY only to say so: an ACL user
         * without ROLE goes on (the probe tells whether writes pass) */
        METRIC_INC(redis_error_replies[kind]);
        return STORE_CONN_SETUP_WAIT;
    }
    store_conn_note_error(conn, kind, err, setup_name(what));
    if (what == SETUP_PROBE && kind == METRICS_REDIS_NOSCRIPT) {
        /* the scripts were loaded just before, on this connection */
        store_conn_bad(conn, kind, setup_name(what), "NOSCRIPT right after SCRIPT LOAD",
                       conn->probe_slot);
        return STORE_CONN_SETUP_LOST;
    }
    if (store_error_refusal(kind) && (what == SETUP_PROBE || (kind != METRICS_REDIS_NOAUTH &&
                                                              kind != METRICS_REDIS_WRONGPASS))) {
        store_conn_refused(conn, kind, err, conn->probe_slot);
        return STORE_CONN_SETUP_LOST;
    }
    if (what == SETUP_PROBE) /* not a refusal (a -MOVED, ...): the probe passed */
        return setup_step_done(conn);
    snprintf(why, sizeof(why), "%s: %s", setup_name(what), err);
    if (!store_error_refusal(kind) && strcmp(conn->last_err, why) != 0) /* once per refusal */
        LOG_ERROR("\"redis refused setup\" err=\"%s\" addr=%s", log_esc(why, strlen(why)),
                  log_val(conn->name));
    snprintf(conn->last_err, sizeof(conn->last_err), "%s", why);
    return STORE_CONN_SETUP_LOST;
}

enum store_conn_setup_next store_conn_setup_reply(struct store_conn *conn, long what,
                                                  const redisReply *reply)
{
    if (what == SETUP_FUNCTION)
        return library_loaded(conn, reply);
    if (reply->type == REDIS_REPLY_ERROR)
        return setup_error(conn, what, reply->str);
    if (what == SETUP_ROLE) {
        const char *role = "?";
        if (reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
            reply->element[0]->type == REDIS_REPLY_STRING)
            role = reply->element[0]->str;
        return strcmp(role, "master") != 0 ? not_master(conn, role) : STORE_CONN_SETUP_WAIT;
    }
    if (what < 0 && what != SETUP_PROBE)
        return STORE_CONN_SETUP_WAIT;
    if (what == SETUP_PROBE) {
        const char *bad = probe_check(reply);
        if (bad) {
            store_conn_bad(conn, METRICS_REDIS_BAD_REPLY, setup_name(what), bad, conn->probe_slot);
            return STORE_CONN_SETUP_LOST;
        }
    }
    if (what >= 0 && reply->type == REDIS_REPLY_STRING && reply->len == STORE_SHA_LEN)
        memcpy(conn->env->sha[what], reply->str, STORE_SHA_LEN + 1);
    return setup_step_done(conn);
}

/* The probe's key: under the prefix (the ACL key pattern is tested), of the
 * refused call's slot on a Cluster node. */
static void probe_key(const struct store_conn *conn, char *key, size_t cap)
{
    const char *prefix = conn->env->prefix ? conn->env->prefix : "";

    snprintf(key, cap, "%sprobe", prefix);
    if (conn->probe_slot < 0)
        return;
    /* a {tag} that hashes to the slot: found within ~16384 tries on average */
    for (unsigned i = 0; i < (1u << 22); i++) {
        int n = snprintf(key, cap, "%sprobe:{%u}", prefix, i);
        if (n > 0 && (size_t)n < cap &&
            util_redis_slot(key, (size_t)n) == (unsigned)conn->probe_slot)
            return;
    }
}

void store_conn_send_setup(struct store_conn *conn, redisCallbackFn *on_reply)
{
    const struct store_env *env = conn->env;
    redisAsyncContext *ac = conn->ac;

    if (env->password) {
        if (env->user)
            redisAsyncCommand(ac, on_reply, (void *)(intptr_t)SETUP_AUTH, "AUTH %s %s", env->user,
                              env->password);
        else
            redisAsyncCommand(ac, on_reply, (void *)(intptr_t)SETUP_AUTH, "AUTH %s", env->password);
        METRIC_INC(redis_commands);
    }
    if (env->db) {
        redisAsyncCommand(ac, on_reply, (void *)(intptr_t)SETUP_SELECT, "SELECT %d", env->db);
        METRIC_INC(redis_commands);
    }
    if (conn->must_be_master || conn->check_role) {
        redisAsyncCommand(ac, on_reply, (void *)(intptr_t)SETUP_ROLE, "ROLE");
        METRIC_INC(redis_commands);
    }
    conn->loading = SCRIPT_COUNT + 1;
    for (long i = 0; i <= SCRIPT_BATCH; i++) {
        redisAsyncCommand(ac, on_reply, (void *)(intptr_t)i, "SCRIPT LOAD %s",
                          store_conn_script_src[i]);
        METRIC_INC(redis_commands);
    }
    store_conn_set_fcall(conn, 0); /* until FUNCTION LOAD says otherwise */
    if (conn->fcall_off && conn->fcall_off_auth != env->auth_gen) /* other credentials */
        conn->fcall_off = 0;
    if (env->functions && !conn->fcall_off)
        store_conn_load_library(conn, on_reply);
    if (conn->refused && env->sha[SCRIPT_TB_EXACT][0]) {
        /* one decision on a key of its own (a bucket that never runs dry,
         * gone a second later): it must pass before calls go out again */
        char key[PROBE_KEY_MAX];
        probe_key(conn, key, sizeof(key));
        redisAsyncCommand(ac, on_reply, (void *)(intptr_t)SETUP_PROBE, "EVALSHA %s 1 %s %s %s %s",
                          env->sha[SCRIPT_TB_EXACT], key, probe_argv[0], probe_argv[1],
                          probe_argv[2]);
        METRIC_INC(redis_commands);
        conn->loading++;
    }
}
