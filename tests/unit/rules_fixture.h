/* SPDX-License-Identifier: Apache-2.0 */
/* rules_fixture.h - what the rule tests (test_rules_*.c) share: a ruleset
 * from INI text, a NOTIFY payload of string args, and the ACK's variables
 * decoded into a table. rt_: rules tests. */
#ifndef RULES_FIXTURE_H
#define RULES_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "spop/spop.h"

struct ruleset;

/* The ruleset of text (as "t.ini"); fails the test when it is refused. */
struct ruleset *rt_load(const char *text);

/* A NOTIFY payload with one message of string args (NULL value = NULL type):
 * kv holds n name, value pairs. */
size_t rt_payload(uint8_t *buf, size_t cap, const char *msg, const char *const *kv, int n);

/* The actions of an encoded ACK body, decoded into a small table. */
struct rt_vars {
    char name[16][32];
    struct spop_data val[16];
    char str[16][128];
    int n;
};

void rt_decode(const uint8_t *p, size_t len, struct rt_vars *v);
/* The value of variable name, or NULL; rt_var_str: its text (strings only). */
const struct spop_data *rt_var(const struct rt_vars *v, const char *name);
const char *rt_var_str(const struct rt_vars *v, const char *name);

#endif
