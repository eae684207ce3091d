/* SPDX-License-Identifier: Apache-2.0 */
/* store_reply.h - what a script's reply says: its integers, taken out of
 * hiredis' reply objects (one call, or one call's part of a batch), and an
 * exact script's reply as a decision.
 *
 * Pure: no I/O and no hiredis call, only its reply type, so that tests and
 * fuzzers feed replies as bytes through hiredis' own parser (redisReader).
 */
#ifndef STORE_REPLY_H
#define STORE_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "limits/bucket.h"
#include "store_result.h"

struct redisReply;

/* The integers of a script's array reply into res->v (at most
 * STORE_MAX_VALUES, n counting them all): STORE_OK, or STORE_ERR ("unexpected
 * reply element") when an element is neither an integer nor a string. */
void store_reply_values(const struct redisReply *reply, struct store_result *res);

/* One call's part of a batch reply, "n v1 .. vn" per call in order
 * (lua/batch.sh), starting at element *at: its values into res (STORE_OK),
 * *at moved past them. When the reply does not cover the call, res is
 * STORE_ERR ("short batch reply") and *at goes to the end: the calls after it
 * fail too. */
void store_reply_batch_next(const struct redisReply *reply, size_t *at, struct store_result *res);

/* The decision of an exact script's reply v[0..n) (enum script_exact_reply):
 * 0, or -1 when the reply is too short (out untouched). retry_us is > 0
 * when denied; negative values read as 0; times are capped so that they
 * stay far from overflow. */
int store_reply_exact(const int64_t *v, int n, struct bucket_result *out);

/* A refund script's reply v[0..n) (enum script_refund_reply): *given and
 * *remaining, negative values read as 0. 0, or -1 when too short (both
 * untouched). */
int store_reply_refund(const int64_t *v, int n, uint64_t *given, uint64_t *remaining);

/* cc_acquire's reply v[0..n) (enum script_cc_acquire_reply): the decision as
 * store_reply_exact reads it, reset 0, and the slots it found expired in
 * *expired (negative: 0). 0, or -1 when too short (out untouched). */
int store_reply_cc(const int64_t *v, int n, struct bucket_result *out, uint64_t *expired);

/* cc_release's reply: 1 the slot was held and is freed, 0 unknown, -1 too
 * short. */
int store_reply_cc_release(const int64_t *v, int n);

/* A read's array reply as text (store_read: res->str, res->str_len), its
 * reply->elements into str, len and num, which have room for them:
 * strings and status replies as they are (valid while reply is), integers
 * in decimal written into num[i], anything else (nil, a nested array) "". */
void store_reply_strings(const struct redisReply *reply, const char **str, size_t *len,
                         char (*num)[24]);

/* A Redis Cluster redirect, the text of an error reply: "MOVED 3999
 * 127.0.0.1:6381" (ask 0) or "ASK ..." (ask 1). 0 with the slot and the
 * address (host: at most hostcap bytes with its NUL; a [v6] without its
 * brackets; an empty host means self, the server asked, which may be NULL),
 * or -1 when err is no redirect or does not fit (outputs then undefined). */
int store_reply_redirect(const char *err, const char *self, int *ask, int *slot, char *host,
                         size_t hostcap, int *port);

#endif
