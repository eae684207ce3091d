/* SPDX-License-Identifier: Apache-2.0 */
/* config_set.h - storing a key's value into the configuration. Private to
 * src/config*.c (see config_internal.h).
 */
#ifndef CONFIG_SET_H
#define CONFIG_SET_H

#include "config_internal.h"

/* Parses v as the value of key d on the current line and stores it: into
 * st->cfg, or into the current rule (st->rule) for a rule key. A continuation
 * line (st->cont) appends to a list value. A bad value adds an error for
 * st->line; the load then fails whatever the field holds. */
void config_set_value(struct parse_state *st, const struct key_def *d, const char *v);

#endif
