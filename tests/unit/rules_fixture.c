/* SPDX-License-Identifier: Apache-2.0 */
/* rules_fixture.c - the rule tests' shared fixtures (rules_fixture.h). */
#include "rules_fixture.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "check_util.h"
#include "rules/rules.h"

struct ruleset *rt_load(const char *text)
{
    struct ruleset *rs = ruleset_new(check_config_ok(text));

    ck_assert_ptr_nonnull(rs);
    return rs;
}

size_t rt_payload(uint8_t *buf, size_t cap, const char *msg, const char *const *kv, int n)
{
    struct spop_writer w = {buf, buf + cap};
    ck_assert_int_eq(spop_put_str(&w, msg, strlen(msg)), 0);
    *w.p++ = (uint8_t)n;
    for (int i = 0; i < n; i++) {
        struct spop_data d;
        ck_assert_int_eq(spop_put_str(&w, kv[2 * i], strlen(kv[2 * i])), 0);
        if (kv[2 * i + 1])
            d = spop_string(kv[2 * i + 1], strlen(kv[2 * i + 1]));
        else
            d.type = SPOP_DATA_NULL;
        ck_assert_int_eq(spop_put_data(&w, &d), 0);
    }
    return (size_t)(w.p - buf);
}

void rt_decode(const uint8_t *p, size_t len, struct rt_vars *v)
{
    struct spop_reader r = {p, p + len};
    uint8_t act, scope;
    struct spop_str name;
    struct spop_data d;
    v->n = 0;
    while (spop_action_next(&r, &act, &scope, &name, &d) == 1) {
        ck_assert_int_eq(act, SPOP_ACT_SET_VAR);
        ck_assert_int_eq(scope, SPOP_SCOPE_TXN);
        snprintf(v->name[v->n], 32, "%.*s", (int)name.len, name.ptr);
        v->val[v->n] = d;
        if (d.type == SPOP_DATA_STR)
            snprintf(v->str[v->n], 128, "%.*s", (int)d.u.buf.len, d.u.buf.ptr);
        v->n++;
    }
}

const struct spop_data *rt_var(const struct rt_vars *v, const char *name)
{
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->name[i], name) == 0)
            return &v->val[i];
    return NULL;
}

const char *rt_var_str(const struct rt_vars *v, const char *name)
{
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->name[i], name) == 0)
            return v->str[i];
    return NULL;
}

/* The scenario through buckets and encoding: 10/1m burst 10. */
