/* SPDX-License-Identifier: Apache-2.0 */
/* reset_msg.h - one fleet-wide reset as it travels through Redis: a member
 * of the sorted set PREFIX "resets" (limiter_reset.c, lua/README.md),
 *
 *     ID TAB RULE TAB HEX(CLIENT KEY) TAB HEX(REDIS KEY)
 *
 * scored by Redis' time in ms. ID is the resetting agent's id, ':' and a
 * number of its own (the acks go to PREFIX "resets:" ID); the keys are hex
 * so that any byte of a client key survives. Pure: text in, text out. */
#ifndef RESET_MSG_H
#define RESET_MSG_H

#include <stddef.h>

#define RESET_MSG_ID_MAX 160 /* agent id (host:pid:random) and a counter */

/* A parsed member: id and rule are NUL-terminated; the keys are decoded
 * (not terminated). The pointers go into the buf given to reset_msg_parse. */
struct reset_msg {
    const char *id, *rule;
    const char *client_key, *redis_key;
    size_t client_keylen, redis_keylen;
};

/* Bytes a member needs (with its NUL). */
size_t reset_msg_size(size_t idlen, size_t rulelen, size_t ckeylen, size_t rkeylen);

/* The member into out (cap bytes): its length, or 0 when it does not fit or
 * id or rule would break the layout (a tab, a newline, empty). */
size_t reset_msg_format(char *out, size_t cap, const char *id, const char *rule, const char *ckey,
                        size_t ckeylen, const char *rkey, size_t rkeylen);

/* Parse member s (len bytes) into *m, decoding into buf (at least len + 1
 * bytes). 0, or -1 when s is not a member of this layout (skipped). */
int reset_msg_parse(const char *s, size_t len, char *buf, struct reset_msg *m);

/* 1 when id was made by the agent agent_id (it names the agent: "AGENT:N"). */
int reset_msg_from(const char *id, const char *agent_id);

#endif
