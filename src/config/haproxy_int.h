/* SPDX-License-Identifier: Apache-2.0 */
/* haproxy_int.h - an HAProxy config or SPOE file as words: what
 * haproxy_parse.c makes and haproxy_check.c reads. Private to src/config/
 * (the public API is haproxy_check.h).
 *
 * A file is a list of sections in file order, each a list of lines, each
 * line its words as HAProxy splits them (quotes removed, escapes and the
 * environment variables of double-quoted text expanded). Nothing here knows
 * what a keyword means beyond the ones that open a section and the global
 * keywords that change the environment.
 */
#ifndef HAPROXY_INT_H
#define HAPROXY_INT_H

#include <stddef.h>

#include "core/strbuf.h"
#include "haproxy_check.h"

struct config;

#define HC_MAX_WORDS 64 /* HAProxy's own MAX_LINE_ARGS */

enum hc_kind {
    HC_GLOBAL = 1,
    HC_DEFAULTS,
    HC_FRONTEND,
    HC_BACKEND,
    HC_LISTEN,
    HC_OTHER, /* userlist, peers, resolvers, ...: read, never checked */
    /* the SPOE file's */
    HC_AGENT,
    HC_MESSAGE,
    HC_GROUP,
};

struct hc_line {
    unsigned no; /* line number in the file, from 1 */
    size_t n;
    char **w; /* n words, each malloc'd */
};

struct hc_sect {
    int kind;   /* enum hc_kind */
    char *name; /* NULL for global and a defaults without a name */
    unsigned no;
    struct hc_line *lines; /* the lines after the header */
    size_t nlines, cap;
};

struct hc_env {
    char *name;
    char *value; /* NULL: unset (unsetenv) */
};

struct hc_file {
    char *path;
    struct hc_sect *s;
    size_t ns, cap;
    int found_scope; /* a SPOE file: the scope asked for was found */
    int oom;
    /* the environment as HAProxy builds it while it reads the global
     * section (setenv, presetenv, unsetenv), over io's */
    struct hc_env *env;
    size_t nenv, envcap;
    const struct haproxy_check_io *io;
};

/* Split text (the whole file, NUL-terminated) into f's sections. For the
 * HAProxy config, scope is NULL and spoe 0. For a SPOE file, spoe is 1 and
 * scope the engine's name: only the lines of "[scope]" are kept (NULL: the
 * whole file, as HAProxy reads it for a filter without an engine name). The
 * global section's setenv/presetenv/unsetenv lines change f's environment
 * for the lines after them; a SPOE file uses the config's (env of cfg, or
 * NULL). Lines of .if/.elif/.else blocks are all kept: the check does not
 * know which HAProxy will run the file. -1 out of memory (f->oom set). */
int hc_parse(struct hc_file *f, const char *text, int spoe, const char *scope,
             const struct hc_file *cfg);

/* Frees what f holds (not f). */
void hc_file_release(struct hc_file *f);

/* 1 when line l's word i is s. */
int hc_word_is(const struct hc_line *l, size_t i, const char *s);

/* ---- the check's state (haproxy_check.c, haproxy_rules.c) ---------------- */

#define HC_MAX_ENGINES 16 /* "filter spoe" lines read */
#define HC_MAX_SENT 64    /* messages one engine sends, per sending line */
#define HC_MAX_VARS 512   /* lines setting a variable */
/* Rule phases in the order HAProxy runs them; NO_PHASE: never. */
#define HC_NO_PHASE 99

/* A message an engine sends: on an event, or in a group a rule line sends. */
struct hc_sent {
    const struct hc_sect *msg;
    int phase;
    unsigned no;               /* the rule line (0 for an event) */
    const struct hc_line *how; /* that line, or the message's event line */
};

struct hc_engine {
    const struct hc_sect *px;     /* the proxy with the filter */
    const struct hc_line *filter; /* its "filter spoe" line */
    const char *id;               /* engine NAME, or NULL */
    struct hc_file spoe;
    const struct hc_sect *agent;
    const char *prefix;
    unsigned prefix_no; /* its "option var-prefix" line, or the agent's */
    struct hc_sent sent[HC_MAX_SENT];
    size_t nsent;
    int ours;
};

/* A variable a line sets. */
struct hc_setter {
    const char *name; /* points into a word: may end at ',' or ')' */
    size_t len;
    const struct hc_sect *s;
    int phase;
    unsigned no;
};

struct hc_ctx {
    const struct config *cfg;
    const char *cfg_path;
    const struct haproxy_check_io *io;
    struct strbuf *out;
    int errors, warnings;
    struct hc_file hap;
    int lua; /* lua-load: Lua may set any variable */
    struct hc_engine eng[HC_MAX_ENGINES];
    size_t neng;
    struct hc_setter set[HC_MAX_VARS];
    size_t nset;
};

enum { HC_VAR_NEVER, HC_VAR_BEFORE, HC_VAR_AFTER };
enum { HC_ADDR_NO, HC_ADDR_YES, HC_ADDR_UNSURE };

/* One finding: "FILE:LINE: [warning: ]message" (no 0: "FILE: ...") into
 * c->out, counted as an error or (warn 1) a warning. */
void hc_say(struct hc_ctx *c, int warn, const char *file, unsigned no, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
const char *hc_kind_name(int kind); /* frontend, listen or backend */
/* The section of that kind and name (a listen counts as a backend). */
const struct hc_sect *hc_find_sect(const struct hc_file *f, int kind, const char *name);
/* The phase of a rule line (0 tcp-request connection ... 6
 * http-after-response), its action's word in *act; -1 for other lines. */
int hc_line_phase(const struct hc_line *l, size_t *act);
int hc_name_char(char ch); /* a character of a variable or arg name */
/* The earliest (phase, line) at which engine e answers (HC_NO_PHASE: never). */
void hc_engine_first(const struct hc_engine *e, int *phase, unsigned *no);
/* Whether the variable name (len bytes) is set before line no (in phase) of
 * section s: HC_VAR_BEFORE, HC_VAR_AFTER (only a later line sets it: that
 * line in *later) or HC_VAR_NEVER. */
void hc_collect_setters(struct hc_ctx *c);
int hc_var_set(const struct hc_ctx *c, const char *name, size_t len, const struct hc_sect *s,
               int phase, unsigned no, unsigned *later);

/* The checks (haproxy_rules.c). hc_check_servers returns HC_ADDR_YES when a
 * server of e's backend is at the agent's address, and reports nothing
 * when report is 0. */
int hc_check_servers(struct hc_ctx *c, const struct hc_engine *e, int report);
void hc_check_triggers(struct hc_ctx *c, struct hc_engine *e);
void hc_check_deny(struct hc_ctx *c, const struct hc_engine *e);
void hc_check_prefix_reads(struct hc_ctx *c, const struct hc_engine *e);
void hc_check_rules(struct hc_ctx *c);

#endif
