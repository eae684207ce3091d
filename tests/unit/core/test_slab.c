/* SPDX-License-Identifier: Apache-2.0 */
/* test_slab.c - the slab of the lease cache's entries: zeroed slots, the
 * given size, reuse of freed slots, growth past a chunk, release. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "core/slab.h"

/* Slot sizes: tiny (rounded up to hold a link), odd, and the lease entry's. */
static const size_t sizes[] = {1, 100, 400};

START_TEST(alloc_free_reuse)
{
    struct slab s;
    size_t n = 3 * SLAB_MAX_CHUNK / 400 + 7; /* several chunks, past the largest */
    unsigned char **p = calloc(n, sizeof(*p));

    ck_assert_ptr_nonnull(p);
    slab_init(&s, sizes[_i]);
    ck_assert_uint_ge(s.slot, sizes[_i]);
    ck_assert_uint_eq(s.slot % 16, 0);
    for (int round = 0; round < 2; round++) { /* the second from freed slots */
        for (size_t i = 0; i < n; i++) {
            p[i] = slab_alloc(&s);
            ck_assert_ptr_nonnull(p[i]);
            ck_assert_uint_eq((uintptr_t)p[i] % 16, 0);
            /* one assertion per slot: Check marks a point per assertion,
             * which per byte took minutes under sanitizers on a busy machine */
            unsigned char any = 0;
            for (size_t b = 0; b < s.slot; b++)
                any |= p[i][b];
            ck_assert_uint_eq(any, 0);
            memset(p[i], 0xa5, s.slot); /* ASan builds: a slot is exactly that big */
        }
        for (size_t i = 1; i < n; i++) /* no two slots overlap */
            ck_assert(p[i] != p[i - 1]);
        for (size_t i = 0; i < n; i++)
            slab_free(&s, p[i]);
    }
    slab_free(&s, NULL);
    slab_release(&s);
    ck_assert_ptr_null(s.chunks);
    ck_assert_ptr_null(s.free);
    /* usable again after a release */
    p[0] = slab_alloc(&s);
    ck_assert_ptr_nonnull(p[0]);
    slab_free(&s, p[0]);
    slab_release(&s);
    free(p);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    tcase_add_loop_test(tc, alloc_free_reuse, 0, sizeof(sizes) / sizeof(sizes[0]));
    return check_run_case("slab", tc);
}
