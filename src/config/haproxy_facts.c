/* SPDX-License-Identifier: Apache-2.0 */
/* haproxy_facts.c - what the checks of an HAProxy config ask of it once
 * parsed (haproxy_int.h): messages said with FILE:LINE, section lookups,
 * the phase a rule line runs in, which lines set a variable and whether it
 * is set before a given line. haproxy_check.c (the engines and the run) and
 * haproxy_rules.c (the rules' reads, deny and header lines) both ask; this
 * file asks neither.
 */
#include "haproxy_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hc_say(struct hc_ctx *c, int warn, const char *file, unsigned no, const char *fmt, ...)
{
    va_list ap;
    char msg[1024];

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (no)
        strbuf_printf(c->out, "%s:%u: %s%s\n", file, no, warn ? "warning: " : "", msg);
    else
        strbuf_printf(c->out, "%s: %s%s\n", file, warn ? "warning: " : "", msg);
    if (warn)
        c->warnings++;
    else
        c->errors++;
}

const char *hc_kind_name(int kind)
{
    return kind == HC_FRONTEND ? "frontend" : kind == HC_LISTEN ? "listen" : "backend";
}

const struct hc_sect *hc_find_sect(const struct hc_file *f, int kind, const char *name)
{
    for (size_t i = 0; i < f->ns; i++) {
        const struct hc_sect *s = &f->s[i];
        int k = kind == HC_BACKEND && s->kind == HC_LISTEN ? HC_BACKEND : s->kind;
        if (k == kind && s->name && strcmp(s->name, name) == 0)
            return s;
    }
    return NULL;
}

/* The phase of a rule line, its action's word in *act; -1 for other lines. */
int hc_line_phase(const struct hc_line *l, size_t *act)
{
    *act = 1;
    if (hc_word_is(l, 0, "http-request"))
        return 3;
    if (hc_word_is(l, 0, "http-response"))
        return 5;
    if (hc_word_is(l, 0, "http-after-response"))
        return 6;
    *act = 2;
    if (hc_word_is(l, 0, "tcp-request"))
        return hc_word_is(l, 1, "connection") ? 0
               : hc_word_is(l, 1, "session")  ? 1
               : hc_word_is(l, 1, "content")  ? 2
                                              : -1;
    if (hc_word_is(l, 0, "tcp-response") && hc_word_is(l, 1, "content"))
        return 4;
    return -1;
}

int hc_name_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '.' || ch == '-';
}

/* ---- setters ------------------------------------------------------------- */

static void add_setter(struct hc_ctx *c, const char *name, size_t len, const struct hc_sect *s,
                       int phase, unsigned no)
{
    if (c->nset < HC_MAX_VARS)
        c->set[c->nset++] = (struct hc_setter){name, len, s, phase, no};
}

/* set-var(NAME), set-var-fmt(NAME) and the set-var(NAME) converter in w. */
static void word_setters(struct hc_ctx *c, const char *w, const struct hc_sect *s, int phase,
                         unsigned no)
{
    static const char *const keys[] = {"set-var(", "set-var-fmt("};
    for (size_t k = 0; k < 2; k++) {
        for (const char *p = w; (p = strstr(p, keys[k])) != NULL;) {
            int ok = p == w || !hc_name_char(p[-1]);
            p += strlen(keys[k]);
            if (ok)
                add_setter(c, p, strcspn(p, ",)"), s, phase, no);
        }
    }
}

/* Every line that sets a variable (set-var, set-var-fmt, the set-var()
 * converter, global set-var), and whether a Lua file is loaded. */
void hc_collect_setters(struct hc_ctx *c)
{
    for (size_t i = 0; i < c->hap.ns; i++) {
        const struct hc_sect *s = &c->hap.s[i];
        for (size_t j = 0; j < s->nlines; j++) {
            const struct hc_line *l = &s->lines[j];
            size_t act;
            int phase = hc_line_phase(l, &act);
            if (hc_word_is(l, 0, "lua-load") || hc_word_is(l, 0, "lua-load-per-thread"))
                c->lua = 1;
            if (s->kind == HC_GLOBAL &&
                (hc_word_is(l, 0, "set-var") || hc_word_is(l, 0, "set-var-fmt")) && l->n > 1)
                add_setter(c, l->w[1], strlen(l->w[1]), s, -1, l->no);
            for (size_t k = 0; k < l->n; k++)
                word_setters(c, l->w[k], s, phase < 0 ? -1 : phase, l->no);
        }
    }
}

/* The earliest (phase, line) at which engine e answers: its variables are
 * set from then on. */
void hc_engine_first(const struct hc_engine *e, int *phase, unsigned *no)
{
    *phase = HC_NO_PHASE;
    *no = 0;
    for (size_t i = 0; i < e->nsent; i++)
        if (e->sent[i].phase >= 4)
            continue; /* a response's message: its answer decides nothing */
        else if (e->sent[i].phase < *phase || (e->sent[i].phase == *phase && e->sent[i].no < *no)) {
            *phase = e->sent[i].phase;
            *no = e->sent[i].no;
        }
}

/* Whether the variable name (len bytes) is set before line no (in phase) of
 * section s: HC_VAR_BEFORE, HC_VAR_AFTER (a later line of s sets it: *later),
 * or HC_VAR_NEVER. */
int hc_var_set(const struct hc_ctx *c, const char *name, size_t len, const struct hc_sect *s,
               int phase, unsigned no, unsigned *later)
{
    int after = 0;
    int strict = (len > 4 && !memcmp(name, "txn.", 4)) || (len > 4 && !memcmp(name, "req.", 4)) ||
                 (len > 4 && !memcmp(name, "res.", 4));

    for (size_t i = 0; i < c->nset; i++) {
        const struct hc_setter *v = &c->set[i];
        if (v->len != len || memcmp(v->name, name, len))
            continue;
        if (!strict || v->phase < 0 || v->s != s || v->phase < phase ||
            (v->phase == phase && v->no < no))
            return HC_VAR_BEFORE;
        after = 1;
        *later = v->no;
    }
    for (size_t i = 0; i < c->neng; i++) {
        const struct hc_engine *e = &c->eng[i];
        size_t pl = e->prefix ? strlen(e->prefix) : 0;
        int ph;
        unsigned first;
        if (!pl || len <= 5 + pl || memcmp(name, "txn.", 4) || memcmp(name + 4, e->prefix, pl) ||
            name[4 + pl] != '.')
            continue;
        hc_engine_first(e, &ph, &first);
        if (ph == HC_NO_PHASE)
            continue;
        if (e->px != s || ph < phase || (ph == phase && first < no))
            return HC_VAR_BEFORE;
        after = 1;
        *later = first;
    }
    return after ? HC_VAR_AFTER : HC_VAR_NEVER;
}
