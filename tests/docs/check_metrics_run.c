/* SPDX-License-Identifier: Apache-2.0 */
/* check_metrics_run.c - runs tests/docs/check_metrics_used.py under `make
 * check` (TESTS are programs here, as for check_docs_run.c): every metric
 * family is on the dashboard, in an alert, or listed as deliberately neither.
 * The exit status is the script's; 99 (a hard error) when python3 cannot be
 * started. */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    execlp(PYTHON3, PYTHON3, SRCDIR "/tests/docs/check_metrics_used.py", SRCDIR, (char *)NULL);
    perror("check_metrics_run: cannot run " PYTHON3);
    return 99;
}
