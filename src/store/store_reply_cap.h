/* SPDX-License-Identifier: Apache-2.0 */
/* store_reply_cap.h - the largest reply the agent reads from Redis, and
 * hiredis reply object functions that refuse anything larger.
 *
 * hiredis 0.14 believes a reply's headers: an array header of 100 million
 * elements is allocated at once (8 bytes a pointer), then every element as
 * it comes (a reply struct each: about 12 bytes of memory per byte on the
 * wire); a bulk string of 512 MB is buffered whole before it is made. Its
 * reader has no element limit. These functions wrap the connection's own
 * (store_reply_pool.h) and refuse, by returning NULL (the reader then fails,
 * and hiredis closes the connection), a reply past what the agent's commands
 * can legitimately get. The caps, all in this one place, from the largest
 * of those replies:
 *
 *   STORE_REPLY_MAX_STRING    one string (bulk, status, error): the rule
 *                             text, at most CFG_MAX_RULES_TEXT (1 MiB), which
 *                             lua/rules_fetch.lua returns only within it
 *   STORE_REPLY_MAX_ELEMENTS  one array: the fleet view (lua/rules_fleet.lua,
 *                             2 + 4 per agent, RULES_FLEET_MAX 10,000 agents:
 *                             40,002); a batch is 256 calls of a count and 10
 *                             values; --rules-history 1 + 5 per kept
 *                             version, at most 1,000; HGETALL of a key's
 *                             leases, one field pair per agent
 *   STORE_REPLY_MAX_DEPTH     arrays within arrays: CLUSTER SLOTS' is 4
 *                             (range, node, the node's metadata), ROLE's 3,
 *                             the scripts' 1
 *   STORE_REPLY_MAX_OBJECTS   elements of one reply in all, nested ones too:
 *                             CLUSTER SLOTS of 16,384 one-slot ranges, each
 *                             with a master and two replicas named by
 *                             hostname, is about 27 per range (442,000)
 *   STORE_REPLY_MAX_BYTES     the bytes of one reply's strings in all: the
 *                             fleet view of 10,000 agents is at most 6.8 MB
 *                             (a report is under 700 bytes), that CLUSTER
 *                             SLOTS ~15 MB with 255-byte hostnames
 *   STORE_REPLY_MAX_BUFFER    bytes received and not parsed yet: the reader
 *                             makes a string only once all of it is in, so
 *                             its buffer is bounded apart, by the caller
 *                             (store_reply_cap_buffer): one string, its
 *                             header, and a read's worth past them
 *
 * So one connection holds at most ~16 MiB of strings, ~38 MB of reply
 * structs (72 bytes an element with its pointer and malloc's header) and
 * 1 MiB of buffer for a reply, whatever it is sent. Pure: no sockets; a
 * reader of its own runs it in tests/unit/store/test_reply_cap.c.
 */
#ifndef STORE_REPLY_CAP_H
#define STORE_REPLY_CAP_H

#include <hiredis/read.h>
#include <stddef.h>

#define STORE_REPLY_MAX_STRING (1024u * 1024u)
#define STORE_REPLY_MAX_ELEMENTS 65536u
#define STORE_REPLY_MAX_DEPTH 4u
#define STORE_REPLY_MAX_OBJECTS (512u * 1024u)
#define STORE_REPLY_MAX_BYTES (16u * 1024u * 1024u)
#define STORE_REPLY_MAX_BUFFER (STORE_REPLY_MAX_STRING + 64u * 1024u)

/* The caps' state of one reader (one per connection: its reader's
 * privdata, which hiredis gives every read task). */
struct redisCallbackList;
struct store_reply_cap {
    redisReplyObjectFunctions fns;          /* the reader's: these, freeing as inner */
    const redisReplyObjectFunctions *inner; /* makes the objects */
    size_t objects; /* of the reply being read: 1 + the elements announced */
    size_t bytes;   /* of its strings */
    char why[128];  /* what was refused; "" while nothing was */
    /* the commands waiting for a reply (the async context's list), NULL: not
     * checked. A reply with none waiting is refused: hiredis 0.14 asserts
     * (aborts the process) on one that is not an error */
    const struct redisCallbackList *waiting;
    int unasked; /* what was refused is a reply no command waited for */
};

/* Install the caps on r: its objects made by inner (NULL: by the functions
 * r has now, hiredis' own for a new reader), cap its state (cleared; r's fn
 * and privdata point into it: it must outlive r's use). */
void store_reply_cap_install(redisReader *r, struct store_reply_cap *cap,
                             const redisReplyObjectFunctions *inner);

/* Refuse, from now on, a reply that comes while nothing waits on list:
 * one Redis sent unasked (a broken or hostile server). */
void store_reply_cap_expect(struct store_reply_cap *cap, const struct redisCallbackList *list);

/* After bytes were fed to r: -1 (and cap->why says so) when more than
 * STORE_REPLY_MAX_BUFFER of them wait unparsed, the connection to be
 * closed (that frees them); 0 otherwise. */
int store_reply_cap_buffer(const redisReader *r, struct store_reply_cap *cap);

/* What was refused (the reader failed because of it), or NULL. */
const char *store_reply_cap_refused(const struct store_reply_cap *cap);

#endif
