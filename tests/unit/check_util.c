/* check_util.c - the runner every unit test program's main() ends in (one
 * place for how a suite is run and what its exit status says). */
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
