/* config_internal.h - what the files of the config module share: the key
 * definitions and the parse state. Private to src/config*.c; the public API
 * is config.h.
 *
 * config.c holds the key table, sections and rules, the whole-file checks and
 * the public API; config_reader.c the line reader fed to inih and the error
 * list; config_set.c turns one key's value into its field.
 */
#ifndef CONFIG_INTERNAL_H
#define CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ERR_MSG_MAX 256 /* one message, without the "FILE:LINE: " part */
#define ERR_KEEP 64     /* errors kept; more are only counted */
#define CONFIG_NKEYS 29 /* entries of config.c's key table, checked there */

struct config;

enum section_kind { SEC_NONE, SEC_SKIP, SEC_AGENT, SEC_REDIS, SEC_LEASE, SEC_FALLBACK, SEC_RULE };

enum value_type {
    T_STR,   /* char *; F_NONEMPTY: "" is an error */
    T_UINT,  /* unsigned integer of the field's size, in [min, max] */
    T_DUR,   /* uint64_t milliseconds */
    T_BOOL,  /* int */
    T_SHARE, /* double in (0, 1] */
    T_ENUM,  /* int: index in names */
    T_ADDR,  /* char *: listen address; F_OPT: "" means unset (NULL) */
    T_URL,   /* char *: redis url, "" means unset */
    T_HOSTS, /* char *: host:port list, normalised to "a:1,b:2", "" means unset */
    T_ALLOW, /* [agent] allow */
    T_KEYS,  /* rule keys */
    T_MATCH, /* rule matches */
    T_RATE,  /* rule rate */
};

#define F_NONEMPTY 1u
#define F_OPT 2u
#define F_LIST 4u  /* continuation lines append to the value */
#define F_MULTI 8u /* the key may be repeated; each line adds */

struct key_def {
    int section;
    const char *name;
    int type;
    size_t off, size; /* the field, in struct config or struct cfg_rule */
    uint64_t min, max;
    unsigned flags;
    const char *const *names; /* T_ENUM */
};

struct parse_error {
    unsigned line; /* 0: about the whole file */
    unsigned seq;  /* keeps the order of errors on one line */
    char msg[ERR_MSG_MAX];
};

struct parse_state {
    struct config *cfg;
    const char *name; /* FILE in messages */

    /* input: a FILE (read with getline into buf) or a string cursor */
    FILE *fp;
    const char *text;
    char *buf;
    size_t bufcap;
    int read_errno;

    /* the reader's view of the current line, shared with the handler */
    unsigned line;
    int cont;               /* the line continues the previous key (indented) */
    int prev_name;          /* mirror of inih's prev_name: a key was seen in this section */
    unsigned first_flagged; /* first line where inih also records an error */

    int kind;                    /* enum section_kind */
    size_t rule;                 /* index of the current rule when kind == SEC_RULE */
    unsigned seen[CONFIG_NKEYS]; /* line where each key was first set; rule keys per rule */

    struct parse_error errors[ERR_KEEP];
    size_t nerrors, ndropped;
};

/* Section handling, in config.c; the reader calls them on "[name]" lines. */

/* A "[name]" line, name not NUL-terminated. Ends the current section first. */
void config_begin_section(struct parse_state *st, const char *name, size_t len);

/* Closes the current section (a rule without a rate is an error there). */
void config_end_section(struct parse_state *st);

#endif
