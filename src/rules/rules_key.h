/* SPDX-License-Identifier: Apache-2.0 */
/* rules_key.h - the keys of an evaluation (rules_key.c): what the files of
 * src/rules share and nothing outside them uses. */
#ifndef RULES_KEY_H
#define RULES_KEY_H

#include <stddef.h>

#include "rules.h"

#define HASHED_KEY_MARK '#' /* the first byte of a hashed key, and of no other */

/* rules_keys_reserve when the room is short: grow ev->keys. */
int rules_keys_grow(struct rule_eval *ev, size_t extra);

/* Make room for extra bytes after ev->keys_len: 0, or -ENOMEM. Inline: a
 * client key reserves twice per hit, and the room is nearly always there. */
static inline int rules_keys_reserve(struct rule_eval *ev, size_t extra)
{
    return ev->keys_len + extra <= ev->keys_cap ? 0 : rules_keys_grow(ev, extra);
}
/* A hashed key of a, then b, into out (RULES_HASHED_KEY_LEN + 1 bytes). */
void rules_hash_key(char *out, const void *a, size_t alen, const void *b, size_t blen);

#endif
