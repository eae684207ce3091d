/* SPDX-License-Identifier: Apache-2.0 */
/* check_config.c - configs from INI text for the unit tests (check_util.h);
 * apart from check_util.c so that the programs that do not link the config
 * module (the scripts' tests) can use the runner. */
#include "check_util.h"

#include <string.h>

#include "config/config.h"

struct config *check_config_ok(const char *text)
{
    char err[CHECK_ERRLEN];
    struct config *cfg = NULL;
    int rc = config_load_string(text, "t.ini", &cfg, err, sizeof(err));

    ck_assert_msg(rc == 0, "unexpected errors:\n%s", err);
    ck_assert_ptr_nonnull(cfg);
    return cfg;
}

void check_config_bad(const char *text, char *err, size_t errlen)
{
    struct config *cfg = (struct config *)1;

    ck_assert_int_eq(config_load_string(text, "t.ini", &cfg, err, errlen), -1);
    ck_assert_ptr_null(cfg);
}

int check_re(const struct rx *re, const char *s)
{
    struct rx_scratch scr = {0};
    int rc = rx_match(re, s, strlen(s), &scr);

    rx_scratch_free(&scr);
    return rc;
}
