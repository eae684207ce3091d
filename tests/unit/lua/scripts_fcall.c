/* SPDX-License-Identifier: Apache-2.0 */
/* scripts_fcall.c - the script tests again, every call going as FCALL of the
 * scripts' function library (SCRIPTS_CALL=fcall, scripts_harness.c) rather
 * than EVALSHA: what the agent runs with [redis] functions = on, the default.
 * Runs each test program of the list in turn; fails when one does, skips
 * (77, as they do: no redis-server, or one before 7.0) when all do. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef BUILDDIR
#define BUILDDIR "."
#endif

static const char *const programs[] = {
    "test_scripts_exact",    "test_scripts_claim", "test_scripts_window", "test_scripts_fixed",
    "test_scripts_contract", "test_scripts_rate",  "test_scripts_cc",     "test_scripts_fed",
};

int main(void)
{
    int failed = 0, skipped = 0;

    if (setenv("SCRIPTS_CALL", "fcall", 1) != 0)
        return 1;
    for (size_t i = 0; i < sizeof(programs) / sizeof(programs[0]); i++) {
        char path[4096];
        int status;
        pid_t pid;

        snprintf(path, sizeof(path), "%s/tests/unit/lua/%s", BUILDDIR, programs[i]);
        printf("scripts_fcall: %s\n", programs[i]);
        fflush(stdout);
        pid = fork();
        if (pid == 0) {
            execl(path, path, (char *)NULL);
            perror(path);
            _exit(127);
        }
        int code = -1;
        if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status))
            code = WEXITSTATUS(status);
        if (code == 77) {
            printf("scripts_fcall: %s skipped\n", programs[i]);
            skipped++;
        } else if (code != 0) {
            printf("scripts_fcall: %s FAILED\n", programs[i]);
            failed = 1;
        }
    }
    if (!failed && skipped == (int)(sizeof(programs) / sizeof(programs[0])))
        return 77;
    return failed;
}
