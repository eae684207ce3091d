/* SPDX-License-Identifier: Apache-2.0 */
/* store_reply_pool.h - hiredis reply objects from a per-thread pool.
 *
 * hiredis 0.14 makes every element of a reply with calloc and frees them all
 * after the callback; a batch reply has a few elements per call, thousands
 * per second, and glibc's per-thread cache (7 blocks per size) overflowed
 * into its slower bins, a visible part of the agent's profile. These object
 * functions make the same redisReply objects (same fields, same rules:
 * strings NUL-terminated, elements linked into their parent) but recycle the
 * reply structs through a free list of the calling thread. Installed on the
 * store's connections (store_conn.c), whose replies are all parsed and freed
 * on the store's loop thread.
 */
#ifndef STORE_REPLY_POOL_H
#define STORE_REPLY_POOL_H

#include <hiredis/read.h>

/* For redisReader.fn (hiredis keeps a non-const pointer). */
extern redisReplyObjectFunctions store_reply_pool_fns;

/* Free the reply structs this thread keeps for reuse (store_free). */
void store_reply_pool_drain(void);

#endif
