/* check_util.c - the runner every unit test program's main() ends in (one
 * place for how a suite is run and what its exit status says), and test
 * cases filled from a list. */
#include "check_util.h"

#include <stdlib.h>

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
    for (size_t i = 0; i < n; i++)
        tcase_add_test(tc, tests[i]);
}
