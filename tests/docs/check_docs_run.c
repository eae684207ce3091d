/* SPDX-License-Identifier: Apache-2.0 */
/* check_docs_run.c - runs tests/docs/check_docs.py under `make check`:
 * TESTS are built as programs here (check_PROGRAMS = $(TESTS)), so the
 * Python check gets this small one in front of it. It passes the source tree
 * and the agent just built (whose --help is checked too); the exit status is
 * the script's: 0 when the manual agrees with the code, 1 with one line per
 * problem on stderr, 99 (a hard error) when python3 cannot be started. */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    execlp(PYTHON3, PYTHON3, SRCDIR "/tests/docs/check_docs.py", SRCDIR, "src/spoa-ratelimit",
           (char *)NULL);
    perror("check_docs_run: cannot run " PYTHON3);
    return 99;
}
