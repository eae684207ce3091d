/* SPDX-License-Identifier: Apache-2.0 */
/* config_internal.h - what the files of the config module share: the key
 * definitions and the parse state. Private to src/config/; the public API is
 * config.h.
 *
 * config_load.c holds sections and rules and the public API (config.h); it
 * runs config_reader.c (lines in, sections and pairs out, through hooks),
 * calls config_set.c, which turns one key's value into its field, and
 * config_check.c, which checks a rule and then the whole file. They report
 * to config_errors.c. Nothing calls back up into config_load.c.
 */
#ifndef CONFIG_INTERNAL_H
#define CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "config_errors.h"

#define CONFIG_NKEYS 84 /* entries of config_keys.c's key table, checked there */

struct config;

enum section_kind {
    SEC_NONE,
    SEC_SKIP,
    SEC_AGENT,
    SEC_REDIS,
    SEC_LEASE,
    SEC_FALLBACK,
    SEC_RULES,  /* [rules]: where the rules come from */
    SEC_GLOBAL, /* [global]: the Redis shared by every region (v1.2) */
    SEC_RULE,
};

enum value_type {
    T_STR,        /* char *; F_NONEMPTY: "" is an error */
    T_UINT,       /* unsigned integer of the field's size, in [min, max] */
    T_DUR,        /* uint64_t milliseconds, at least min (when not 0); F_ZERO: 0 allowed (off) */
    T_BOOL,       /* int */
    T_SHARE,      /* double in (0, 1] */
    T_SHARE_AUTO, /* the same, or "auto": CFG_SHARE_AUTO */
    T_ENUM,       /* int: index in names */
    T_ADDR,       /* char * and struct net_addr: listen address; F_OPT: "" means unset */
    T_URL,        /* char * and struct cfg_redis_url: redis url, "" means unset */
    T_HOSTS,      /* char *, normalised to "a:1,b:2", and struct cfg_hosts; "" means unset */
    T_ALLOW,    /* a CIDR list: struct net_cidr[CFG_MAX_ALLOW] at off, its size_t count at parsed */
    T_NAMES,    /* char *: host names with an optional :port, normalised to "a,b:1"; "" unsets */
    T_KEYS,     /* rule keys */
    T_MATCH,    /* rule matches */
    T_RATE,     /* rule rate, into rate_n and rate_period_ms */
    T_MAX_RATE, /* rule max_rate, into max_rate_n and max_rate_period_ms */
};

#define F_NONEMPTY 1u
#define F_OPT 2u
#define F_LIST 4u  /* continuation lines append to the value */
#define F_MULTI 8u /* the key may be repeated; each line adds */
#define F_ARG                                                                                      \
    16u            /* "arg:NAME" takes the value per request from an arg: NAME goes                \
                      into the char * of struct cfg_rule at offset `parsed` */
#define F_ZERO 32u /* T_DUR, T_SHARE: "0" (with or without a unit) is allowed, for off */

struct key_def {
    int section;
    const char *name;
    int type;
    size_t off, size; /* the field, in struct config or struct cfg_rule */
    uint64_t min, max;
    unsigned flags;
    const char *const *names; /* T_ENUM */
    size_t parsed;            /* T_ADDR, T_URL, T_HOSTS: the parsed form, in struct config;
                                 T_ALLOW: the count; F_ARG: the arg name's field, in
                                 struct cfg_rule */
};

struct parse_state {
    struct config *cfg;
    const char *name; /* FILE in messages */

    /* the line being handled, as the reader reported it */
    unsigned line;
    int cont; /* the line continues the previous key (indented) */

    int kind;                    /* enum section_kind */
    size_t rule;                 /* index of the current rule when kind == SEC_RULE */
    unsigned seen[CONFIG_NKEYS]; /* line where each key was first set; rule keys per rule */

    struct config_errors errors;

    /* config_load_with_rules: 1 while the file is read (its [rule:*]
     * sections are skipped), 2 while the rule text is (only [rule:*]) */
    int rules_pass;
    /* config_load_with_rules: the rules came from rule text, whose own
     * checks (and errors) were made as each rule ended */
    int rules_text;
    unsigned global_line; /* of the first [global] header; 0: none */
};

#define MAX_WORKERS 256 /* [agent] workers */

/* The key table (config_keys.c): the definition of key name in section,
 * NULL when there is none; the i-th of the CONFIG_NKEYS definitions, and a
 * definition's index (its slot in parse_state.seen). */
const struct key_def *config_find_key(int section, const char *name);
const struct key_def *config_key_at(size_t i);
size_t config_key_index(const struct key_def *d);

/* The line where key name of section was first set (0: never), for
 * FILE:LINE errors about a whole section (config_keys.c). */
unsigned config_seen_line(const struct parse_state *st, int section, const char *name);

/* Compile the regexes of every rule's match lines (config_budget.c),
 * within the budget of a whole rule set (config.h: CFG_BUDGET_*): a bad
 * regex is an error at its line, a set over budget one error naming the
 * budget and the figures. Filled: st->cfg->regex_use. */
void config_compile_matches(struct parse_state *st);

/* The credentials in force, checked and read from their files
 * (config_auth.c); standalone: no [redis] server configured (config_standalone). */
void config_resolve_credentials(struct parse_state *st, int standalone);

/* [global]'s credentials, the same way as [redis]'s (config_auth.c); unset: no
 * [global] Redis configured (config_global). */
void config_resolve_global_credentials(struct parse_state *st, int unset);

/* The checks of config_check.c: a rule's keys against each other, as its
 * section ends; the whole file's, and the defaults that follow other keys,
 * at its end. */
struct cfg_rule;
void config_check_rule(struct parse_state *st, struct cfg_rule *r);
void config_finish(struct parse_state *st);

#endif
