/* SPDX-License-Identifier: Apache-2.0 */
/* store_cmd.h - one script call or read as the store holds it until its
 * callback has run (struct store_cmd): its copy of the arguments, a batch of
 * many (the group commit of store_conn.h), its request written as RESP, and
 * its reply read. No I/O: store_conn.c sends them. Internal to the store
 * module.
 */
#ifndef STORE_CMD_H
#define STORE_CMD_H

#include <stddef.h>
#include <stdint.h>

#include "script.h"
#include "store_env.h"
#include "store_result.h"

struct redisReply;
struct store_conn;
struct store_resp;

/* One store_eval() call: EVALSHA sha 1 key args... Owned by the store until
 * its callback has run (store_cmd_fail or a reply). */
struct store_cmd {
    store_cb *cb;
    void *arg;
    uint64_t sent_us;  /* last sent; the watchdog looks at the oldest */
    uint64_t first_us; /* first sent: the latency reported to the caller */
    int script;
    unsigned noscript_retried : 1; /* NOSCRIPT: the script reloaded and c sent again once */
    unsigned fn_retried : 1;       /* no such function: the library reloaded, c sent again once */
    unsigned fcall : 1;            /* last sent as FCALL */
    unsigned moved : 1;            /* followed a -MOVED already */
    unsigned asked : 1;            /* followed an -ASK already */
    unsigned asking : 1;           /* send ASKING first (the last redirect was -ASK) */
    unsigned batch : 1;            /* carries members (below) */
    unsigned read : 1;             /* store_read(): the command as is, no sha, in raw
                                    * (no argv); never batched; key in rkey */
    unsigned write : 1;            /* a read made by store_write(): refusals take the
                                    * store down as a script call's do */
    unsigned pooled : 1;           /* a CMD_BLOCK block, recycled (store_cmd.c) */
    unsigned tries : 3;            /* TRYAGAIN: sent again this many times (store_errors.h) */
    int argc;                      /* a batch: 0 (its request is written from its members) */
    char **argv;                   /* argv[0] and [1] are NULL: the verb and the sha or
                                    * function are written when sent (store_call) */
    size_t *argvlen;
    struct store_conn *conn; /* where it is in flight; NULL when not */
    struct store_cmd *prev, *next;
    /* A batch: the calls it carries, in reply order (linked by mnext); its
     * argv borrows their keys and arguments. NULL for a single call. */
    struct store_cmd *members, *mnext;
    unsigned nmembers;
    const char *rkey; /* a read's routing key (in the same block) */
    size_t rkeylen;
    const char *raw; /* a read's request, written as RESP when made (in
                      * the same block): sent as is, and again after a
                      * redirect */
    size_t rawlen;
};

/* A copy of the call; NULL when out of memory. */
struct store_cmd *store_cmd_new(enum store_script script, const char *key, size_t keylen, int argc,
                                const char *const *argv, const size_t *argvlen, store_cb *cb,
                                void *arg);

/* A read command (store_read, store_write): argv as given, written as RESP
 * at once (raw), routed by key. NULL when out of memory. */
struct store_cmd *store_cmd_new_read(const char *key, size_t keylen, int argc,
                                     const char *const *argv, const size_t *argvlen, store_cb *cb,
                                     void *arg);

/* Free a command (a batch: not its members). NULL no-op. */
void store_cmd_free(struct store_cmd *c);

/* Free the blocks this thread keeps for new commands (store_cmd_free
 * recycles them). For the end of a store, on its thread. */
void store_cmd_pool_drain(void);

/* One EVALSHA of the batch script carrying the n calls of list (linked by
 * mnext, each a store_cmd_new() of one script): "EVALSHA sha n key... then
 * per call script argc args...". Its callback fails every member; a reply
 * goes to store_batch_reply(). NULL when out of memory (list untouched). */
struct store_cmd *store_batch_new(struct store_cmd *list, unsigned n);

/* How a script is called: EVALSHA of its SHA1 (the default), or FCALL of
 * its function in the library (store_conn_setup.h). */
struct store_call {
    const char *verb; /* "EVALSHA" or "FCALL" */
    const char *id;   /* the SHA1 or the function's name (NUL-terminated) */
};

/* The request of c (a call, a read, or a batch) into w, reset first: call
 * (unused for a read) in place of argv[0] and argv[1], and a batch is
 * written from its members. 0, or -1 when out of memory. */
int store_cmd_format(const struct store_cmd *c, const struct store_call *call,
                     struct store_resp *w);

/* Hand each member of batch b its part of reply ("n v1 .. vn" per call, in
 * order: lua/batch.sh), running and freeing each; members the reply does not
 * cover, or whose part store_reply_check() rejects, fail. now: for the
 * latency reported. The first thing wrong (NULL: nothing; *bad must be NULL
 * on entry) into *bad, with the script whose part it was in *bad_script.
 * Returns Redis' time of the batch (ms, as store_reply_time_ms reads it from
 * a member; 0: none). */
int64_t store_batch_reply(struct store_cmd *b, const struct redisReply *reply, uint64_t now,
                          const char **bad, int *bad_script);

/* Redis' time (Unix ms) that the reply res of a call of script carries: the
 * exact decisions' and cc_acquire's time_ms (EXACT_R_TIME_MS); 0 for the
 * other scripts, a failed call or a short reply. */
int64_t store_reply_time_ms(int script, const struct store_result *res);

/* Hand a read command its reply (strings of an array, or an integer), run
 * its callback and free it. now: for the latency reported. */
void store_cmd_read_reply(struct store_cmd *c, const struct redisReply *reply, uint64_t now);

/* The key of the command (argv[3]; a read's routing key; a batch's first
 * member's). */
const char *store_cmd_key(const struct store_cmd *c, size_t *len);

/* Run the callback with status (STORE_DOWN or STORE_ERR) and err, then free
 * the command. It must not be in flight. */
void store_cmd_fail(struct store_cmd *c, int status, const char *err);

#endif
