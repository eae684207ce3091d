/* SPDX-License-Identifier: Apache-2.0 */
/* store_result.h - what a store call answers (struct store_result) and the
 * callback that gets it (store_cb): the types of store.h that the pure
 * reading of replies (store_reply.h) fills too, in a header of their own so
 * that it stands below the store instead of above it.
 */
#ifndef STORE_RESULT_H
#define STORE_RESULT_H

#include <stddef.h>
#include <stdint.h>

enum store_status {
    STORE_OK = 0,   /* v[0..n) holds the integers of the reply array */
    STORE_ERR = 1,  /* Redis answered an error (err) or an unexpected type */
    STORE_DOWN = 2, /* no connection, or it was lost before the reply */
};

#define STORE_MAX_VALUES 10

struct store_result {
    int status;
    int n;
    int64_t v[STORE_MAX_VALUES];
    uint64_t latency_us;
    const char *err; /* valid during the callback only */
    /* store_read() only: the elements of an array reply as text (integers
     * in decimal), str[i] of str_len[i] bytes, NUL-terminated; 0 for nil
     * or an empty array. Valid during the callback only. */
    size_t nstr;
    const char *const *str;
    const size_t *str_len;
};

typedef void store_cb(void *arg, const struct store_result *res);

#endif
