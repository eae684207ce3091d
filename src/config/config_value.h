/* SPDX-License-Identifier: Apache-2.0 */
/* config_value.h - value syntax shared by config_load.c, config_check.c and config_set.c.
 * Private to src/config/: the public value parsers (config_parse_duration,
 * ...) and config_peer_allowed are in config.h; addresses are parsed by
 * net.h.
 *
 * All of them are pure and return 0 (valid) or -1 (config_duration and
 * config_rate also CONFIG_ETOOLONG); none prints.
 */
#ifndef CONFIG_VALUE_H
#define CONFIG_VALUE_H

#include <stddef.h>
#include <stdint.h>

struct net_addr;

#define CONFIG_MAX_ITEM 300 /* one item of a comma-separated list, NUL included */

/* A duration or rate that is well formed but longer than CFG_MAX_DURATION_MS. */
#define CONFIG_ETOOLONG (-2)

/* config_parse_duration and config_parse_rate (config.h), telling a value
 * that is too long (CONFIG_ETOOLONG) from one that is not a duration (-1). */
int config_duration(const char *s, uint64_t *ms);
int config_rate(const char *s, uint64_t *n, uint64_t *period_ms);

/* As config_duration, and also "0", with or without a unit: 0 (off). */
int config_duration_or_off(const char *s, uint64_t *ms);

/* Exactly len decimal digits (len > 0), no sign, no overflow. */
int config_parse_digits(const char *s, size_t len, uint64_t *v);

/* A number in (0, 1], nothing around it. */
int config_parse_share(const char *s, double *d);

/* redis://[[user]:password@]host:port[/db] or unix:/path, taken apart: the
 * address into *addr, the db (0 when absent) into *db, the password as a view
 * into s (*password NULL when absent). */
int config_parse_redis_url(const char *s, struct net_addr *addr, int *db, const char **user,
                           size_t *user_len, const char **password, size_t *password_len);

/* A rule name: 1..CFG_MAX_NAME bytes of [A-Za-z0-9_.-]. */
int config_valid_rule_name(const char *s, size_t len);

/* Next comma-separated item of *p, trimmed, copied into item
 * (CONFIG_MAX_ITEM bytes). Returns 1 for an item, 0 at the end, -1 when the
 * item is too long (item then holds its start). Empty items are skipped. */
int config_next_item(const char **p, char *item);

#endif
