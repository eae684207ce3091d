/* SPDX-License-Identifier: Apache-2.0 */
/* sha256.h - SHA-256 (FIPS 180-4), for names no client can aim at.
 *
 * A client key too long to keep is stored as a hash of it: the hash must be
 * collision-resistant, or a client could craft a key that lands in another
 * client's bucket (FNV-1a, which the tables use for speed, is not). Pure:
 * no allocation, no I/O; tests/unit/core/test_util.c checks it against the FIPS 180-4
 * examples. Not for secrets: nothing here is constant-time.
 */
#ifndef SHA256_H
#define SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

struct sha256 {
    uint32_t h[8];
    uint64_t len;      /* bytes hashed so far */
    uint8_t block[64]; /* the block being filled */
    size_t fill;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
/* Writes the digest; s must be initialised again before further use. */
void sha256_final(struct sha256 *s, uint8_t out[SHA256_LEN]);

#endif
