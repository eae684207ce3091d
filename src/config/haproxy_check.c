/* SPDX-License-Identifier: Apache-2.0 */
/* haproxy_check.c - an HAProxy config and its SPOE file checked against
 * the agent's config (haproxy_check.h): the SPOE engines found, what each
 * sends and when, the variables each line reads and which lines set them.
 *
 * Rule phases are ordered as HAProxy runs them (tcp-request connection,
 * session, content, http-request, tcp-response, http-response,
 * http-after-response), and lines in one phase by their order in the
 * section: a variable set by a later line is unset when an earlier one reads
 * it. A variable set in another section counts as set (the check does not
 * follow the frontend-to-backend path).
 */
#include "haproxy_check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "haproxy_int.h"

/* ---- engines ------------------------------------------------------------- */

/* The SPOE file's path as HAProxy opens it under the default-path policy in
 * force (its words: "config", "parent", "origin DIR"; NULL: "current"). */
static char *spoe_path(const char *cfg_path, const struct hc_line *dp, const char *file)
{
    const char *slash = strrchr(cfg_path, '/');
    int dirlen = slash ? (int)(slash - cfg_path) : 0;
    char *out = NULL;
    int n = -1;

    if (file[0] == '/' || !dp || hc_word_is(dp, 1, "current"))
        n = asprintf(&out, "%s", file);
    else if (hc_word_is(dp, 1, "config"))
        n = slash ? asprintf(&out, "%.*s/%s", dirlen ? dirlen : 1, dirlen ? cfg_path : "/", file)
                  : asprintf(&out, "%s", file);
    else if (hc_word_is(dp, 1, "parent"))
        n = slash ? asprintf(&out, "%.*s/../%s", dirlen, cfg_path, file)
                  : asprintf(&out, "../%s", file);
    else if (hc_word_is(dp, 1, "origin") && dp->n > 2)
        n = asprintf(&out, "%s/%s", dp->w[2], file);
    else
        n = asprintf(&out, "%s", file);
    return n < 0 ? NULL : out;
}

/* The agent's settings: its var prefix. */
static void engine_agent(struct hc_engine *e)
{
    for (size_t i = 0; i < e->spoe.ns && !e->agent; i++)
        if (e->spoe.s[i].kind == HC_AGENT)
            e->agent = &e->spoe.s[i];
    if (!e->agent)
        return;
    e->prefix = e->agent->name;
    e->prefix_no = e->agent->no;
    for (size_t i = 0; i < e->agent->nlines; i++) {
        const struct hc_line *l = &e->agent->lines[i];
        if (hc_word_is(l, 0, "option") && hc_word_is(l, 1, "var-prefix") && l->n > 2) {
            e->prefix = l->w[2];
            e->prefix_no = l->no;
        }
    }
}

/* Whether the agent section lists name on a line starting with key. */
static int agent_lists(const struct hc_sect *a, const char *key, const char *name)
{
    for (size_t i = 0; i < a->nlines; i++)
        if (hc_word_is(&a->lines[i], 0, key))
            for (size_t k = 1; k < a->lines[i].n; k++)
                if (!strcmp(a->lines[i].w[k], name))
                    return 1;
    return 0;
}

static int event_phase(const char *ev)
{
    if (!strcmp(ev, "on-client-session"))
        return 1;
    if (!strcmp(ev, "on-frontend-tcp-request") || !strcmp(ev, "on-backend-tcp-request"))
        return 2;
    if (!strcmp(ev, "on-frontend-http-request") || !strcmp(ev, "on-backend-http-request"))
        return 3;
    if (!strcmp(ev, "on-tcp-response"))
        return 4;
    return 5; /* on-http-response, on-server-session */
}

static void add_sent(struct hc_engine *e, const struct hc_sect *msg, int phase, unsigned no,
                     const struct hc_line *how)
{
    if (e->nsent < HC_MAX_SENT)
        e->sent[e->nsent++] = (struct hc_sent){msg, phase, no, how};
}

/* What engine e sends and when: messages of its agent with an event, and
 * the messages of each group a rule line of its proxy sends. */
static void engine_sent(struct hc_engine *e)
{
    for (size_t i = 0; i < e->spoe.ns; i++) {
        const struct hc_sect *m = &e->spoe.s[i];
        if (m->kind != HC_MESSAGE || !m->name || !agent_lists(e->agent, "messages", m->name))
            continue;
        for (size_t j = 0; j < m->nlines; j++)
            if (hc_word_is(&m->lines[j], 0, "event") && m->lines[j].n > 1)
                add_sent(e, m, event_phase(m->lines[j].w[1]), 0, &m->lines[j]);
    }
    for (size_t i = 0; i < e->px->nlines; i++) {
        const struct hc_line *l = &e->px->lines[i];
        size_t act;
        int phase = hc_line_phase(l, &act);
        if (phase < 0 || !hc_word_is(l, act, "send-spoe-group") || l->n < act + 3 ||
            (e->id && strcmp(l->w[act + 1], e->id)))
            continue;
        const struct hc_sect *g = hc_find_sect(&e->spoe, HC_GROUP, l->w[act + 2]);
        if (!g || !agent_lists(e->agent, "groups", g->name))
            continue;
        for (size_t j = 0; j < g->nlines; j++)
            if (hc_word_is(&g->lines[j], 0, "messages"))
                for (size_t k = 1; k < g->lines[j].n; k++) {
                    const struct hc_sect *m = hc_find_sect(&e->spoe, HC_MESSAGE, g->lines[j].w[k]);
                    if (m)
                        add_sent(e, m, phase, l->no, l);
                }
    }
}

/* Read every "filter spoe" line's engine; 0, or -1 out of memory. */
static int find_engines(struct hc_ctx *c)
{
    const struct hc_line *dp = NULL; /* the default-path line in force */

    for (size_t i = 0; i < c->hap.ns; i++) {
        const struct hc_sect *s = &c->hap.s[i];
        for (size_t j = 0; j < s->nlines; j++) {
            const struct hc_line *l = &s->lines[j];
            if (s->kind == HC_GLOBAL && hc_word_is(l, 0, "default-path"))
                dp = l;
            if (!hc_word_is(l, 0, "filter") || !hc_word_is(l, 1, "spoe") ||
                c->neng == HC_MAX_ENGINES)
                continue;
            struct hc_engine *e = &c->eng[c->neng++];
            const char *conf = NULL;
            e->px = s;
            e->filter = l;
            for (size_t k = 2; k + 1 < l->n; k++) {
                if (!strcmp(l->w[k], "engine"))
                    e->id = l->w[k + 1];
                else if (!strcmp(l->w[k], "config"))
                    conf = l->w[k + 1];
            }
            if (!conf) {
                hc_say(c, 0, c->cfg_path, l->no, "'filter spoe' without 'config FILE'");
                continue;
            }
            char *path = spoe_path(c->cfg_path, dp, conf);
            if (!path)
                return -1;
            e->spoe.path = path;
            e->spoe.io = c->io;
            if (conf[0] != '/' && (!dp || hc_word_is(dp, 1, "current")))
                hc_say(c, 1, c->cfg_path, l->no,
                       "'%s' is relative to the directory HAProxy starts in (/ under "
                       "systemd): "
                       "add 'default-path config' to the global section, or write its "
                       "absolute "
                       "path",
                       conf);
            char *text = c->io->read_file(c->io->ctx, path);
            if (!text) {
                hc_say(c, 0, c->cfg_path, l->no, "cannot read the SPOE file %s: %s%s", path,
                       strerror(errno),
                       conf[0] != '/' && !dp ? " (a relative path: see 'default-path')" : "");
                continue;
            }
            int rc = hc_parse(&e->spoe, text, 1, e->id, &c->hap);
            free(text);
            if (rc < 0)
                return -1;
            if (e->id && !e->spoe.found_scope) {
                hc_say(c, 0, c->cfg_path, l->no, "%s has no [%s] section (the engine's scope)",
                       path, e->id);
                continue;
            }
            engine_agent(e);
            if (!e->agent) {
                hc_say(c, 0, c->cfg_path, l->no, "%s: no 'spoe-agent' in %s%s%s", path,
                       e->id ? "[" : "the file", e->id ? e->id : "", e->id ? "]" : "");
                continue;
            }
            engine_sent(e);
        }
    }
    return 0;
}

/* ---- the whole check ----------------------------------------------------- */

/* Whether engine e is the agent's: it sends a message a rule reads, or one
 * of its servers is at the agent's address. */
static int engine_is_ours(struct hc_ctx *c, const struct hc_engine *e)
{
    for (size_t i = 0; i < c->cfg->nrules; i++) {
        const struct cfg_rule *r = &c->cfg->rules[i];
        if (!r->message || hc_find_sect(&e->spoe, HC_MESSAGE, r->message) ||
            (r->release && hc_find_sect(&e->spoe, HC_MESSAGE, r->release)))
            return 1;
    }
    return hc_check_servers(c, e, 0) != HC_ADDR_NO;
}

static int run(struct hc_ctx *c, const char *text)
{
    size_t ours = 0;

    if (hc_parse(&c->hap, text, 0, NULL, NULL) < 0 || find_engines(c) < 0)
        return -1;
    hc_collect_setters(c);
    if (!c->neng) {
        const struct hc_sect *fe = NULL;
        for (size_t i = 0; i < c->hap.ns && !fe; i++)
            if (c->hap.s[i].kind == HC_FRONTEND || c->hap.s[i].kind == HC_LISTEN)
                fe = &c->hap.s[i];
        if (fe)
            hc_say(c, 0, c->cfg_path, fe->no,
                   "%s '%s' has no 'filter spoe' line (nor has any other section): "
                   "HAProxy "
                   "never asks the agent (add 'filter spoe engine NAME config "
                   "spoe-ratelimit.conf')",
                   hc_kind_name(fe->kind), fe->name ? fe->name : "");
        else
            hc_say(c, 0, c->cfg_path, 0,
                   "no frontend, no listen section, no 'filter spoe': HAProxy never "
                   "asks the "
                   "agent");
        return 0;
    }
    for (size_t i = 0; i < c->neng; i++)
        if (c->eng[i].agent && engine_is_ours(c, &c->eng[i])) {
            c->eng[i].ours = 1;
            ours++;
        }
    if (!ours) {
        if (c->eng[0].agent)
            hc_say(c, 0, c->cfg_path, c->eng[0].filter->no,
                   "no SPOE engine sends the messages the rules read, nor points at "
                   "this agent "
                   "(%s: listen = %s)",
                   c->cfg->path, c->cfg->listen);
        return 0;
    }
    for (size_t i = 0; i < c->neng; i++) {
        struct hc_engine *e = &c->eng[i];
        if (!e->ours)
            continue;
        hc_check_triggers(c, e);
        hc_check_deny(c, e);
        hc_check_prefix_reads(c, e);
        hc_check_servers(c, e, 1);
    }
    hc_check_rules(c);
    return 0;
}

int haproxy_check(const struct config *cfg, const char *cfg_path, const struct haproxy_check_io *io,
                  struct strbuf *out, int *warnings)
{
    struct hc_ctx *c = calloc(1, sizeof(*c));
    char *text;
    int rc;

    if (!c)
        return -1;
    c->cfg = cfg;
    c->cfg_path = cfg_path;
    c->io = io;
    c->out = out;
    c->hap.io = io;
    text = io->read_file(io->ctx, cfg_path);
    if (!text) {
        hc_say(c, 0, cfg_path, 0, "cannot read: %s", strerror(errno));
        rc = 0;
    } else {
        rc = run(c, text);
        free(text);
    }
    if (warnings)
        *warnings = c->warnings;
    if (rc == 0)
        rc = c->errors;
    for (size_t i = 0; i < c->neng; i++)
        hc_file_release(&c->eng[i].spoe);
    hc_file_release(&c->hap);
    free(c);
    return out->failed ? -1 : rc;
}
