/* SPDX-License-Identifier: Apache-2.0 */
/* check_util.c - the runner every unit test program's main() ends in (one
 * place for how a suite is run and what its exit status says), test cases
 * filled from a list, and the checks of addresses that the config and net
 * tests share. */
#include "check_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

int check_run_case(const char *name, TCase *tc)
{
    Suite *s = suite_create(name);

    suite_add_tcase(s, tc);
    return check_run(s);
}

void check_add_tests(TCase *tc, const TTest *const *tests, size_t n)
{
    /* CK_RUN_TEST=name: that test alone (Check itself selects only by
     * suite and case: CK_RUN_SUITE, CK_RUN_CASE) */
    const char *only = getenv("CK_RUN_TEST");

    for (size_t i = 0; i < n; i++)
        if (!only || !*only || strcmp(tests[i]->name, only) == 0)
            tcase_add_test(tc, tests[i]);
}

void check_cidr_parsed(const struct check_cidr *want, int rc, int family, unsigned prefix,
                       const void *addr)
{
    char text[INET6_ADDRSTRLEN];

    if (!want->family) {
        ck_assert_msg(rc == -1, "'%s' accepted", want->s);
        return;
    }
    ck_assert_msg(rc == 0, "'%s' rejected", want->s);
    ck_assert_int_eq(family, want->family);
    ck_assert_uint_eq(prefix, want->prefix);
    ck_assert_ptr_nonnull(inet_ntop(family, addr, text, sizeof(text)));
    ck_assert_str_eq(text, want->net);
}

void check_peer_addr(const char *text, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (strchr(text, ':')) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
        sin6->sin6_family = AF_INET6;
        ck_assert_int_eq(inet_pton(AF_INET6, text, &sin6->sin6_addr), 1);
    } else {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;
        sin->sin_family = AF_INET;
        ck_assert_int_eq(inet_pton(AF_INET, text, &sin->sin_addr), 1);
    }
}
