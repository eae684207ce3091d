/* SPDX-License-Identifier: Apache-2.0 */
/* haproxy_rules.c - the checks of haproxy_check.h on what was found
 * (haproxy_check.c): the engine's send-spoe-group lines and their
 * conditions, the deny line and the lines reading the agent's variables,
 * the agents' addresses, and each rule's messages and args.
 */
#include "haproxy_int.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config/config.h"

/* The variables the agent sets (rules_ack.c), under txn.PREFIX. */
static const char *const agent_vars[] = {
    "blocked",     "would_block", "rule",      "limit",    "remaining", "reset",
    "retry_after", "policy",      "ratelimit", "degraded", "slot",
};

static int is_proxy(const struct hc_sect *s)
{
    return s->kind == HC_FRONTEND || s->kind == HC_BACKEND || s->kind == HC_LISTEN ||
           s->kind == HC_DEFAULTS;
}

/* The first word of l's condition (after "if" or "unless"), or l->n. */
static size_t cond_start(const struct hc_line *l, size_t from)
{
    for (size_t i = from; i < l->n; i++)
        if (!strcmp(l->w[i], "if") || !strcmp(l->w[i], "unless"))
            return i + 1;
    return l->n;
}

/* The next "var(NAME" read in s from *pos (not set-var( nor unset-var():
 * the name in *name (*len bytes), *dflt 1 when a default follows it. */
static int next_read(const char *s, size_t *pos, const char **name, size_t *len, int *dflt)
{
    const char *p = s + *pos;

    while ((p = strstr(p, "var(")) != NULL) {
        int read = p == s || !hc_name_char(p[-1]);
        p += 4;
        if (!read)
            continue;
        *name = p;
        *len = strcspn(p, ",)");
        *dflt = p[*len] == ',';
        *pos = (size_t)(p - s) + *len;
        return 1;
    }
    return 0;
}

/* The ACL named word in section s: its line, or NULL. */
static const struct hc_line *find_acl(const struct hc_sect *s, const char *word)
{
    for (size_t i = 0; s && i < s->nlines; i++)
        if (hc_word_is(&s->lines[i], 0, "acl") && hc_word_is(&s->lines[i], 1, word))
            return &s->lines[i];
    return NULL;
}

/* ---- addresses ----------------------------------------------------------- */

/* The numeric host as 16 bytes (IPv4 as v4-mapped); -1 when not numeric. */
static int host_bytes(const char *host, unsigned char out[16])
{
    struct in_addr a4;

    if (!strcasecmp(host, "localhost"))
        host = "127.0.0.1";
    if (inet_pton(AF_INET6, host, out) == 1)
        return 0;
    if (inet_pton(AF_INET, host, &a4) != 1)
        return -1;
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &a4, 4);
    return 0;
}

static int any_host(const char *host)
{
    return !*host || !strcmp(host, "*") || !strcmp(host, "0.0.0.0") || !strcmp(host, "::");
}

/* Whether a server line's address is the agent's listen address. */
static int addr_match(const struct net_addr *listen, const char *addr)
{
    static const char *const tcp[] = {"ipv4@", "ipv6@", "tcp@", "tcp4@", "tcp6@"};
    struct net_hostport hp;
    unsigned char a[16], b[16];
    const char *colon;

    if (!strncmp(addr, "unix@", 5) || addr[0] == '/') {
        const char *path = addr[0] == '/' ? addr : addr + 5;
        return listen->kind == NET_ADDR_UNIX && !strcmp(listen->path, path) ? HC_ADDR_YES
                                                                            : HC_ADDR_NO;
    }
    for (size_t i = 0; i < sizeof(tcp) / sizeof(tcp[0]); i++)
        if (!strncmp(addr, tcp[i], strlen(tcp[i])))
            addr += strlen(tcp[i]);
    if (strchr(addr, '@'))
        return HC_ADDR_NO; /* abns@, sockpair@, ... */
    if (listen->kind != NET_ADDR_TCP)
        return HC_ADDR_NO;
    /* HAProxy also writes IPv6 without brackets: the port after the last ':' */
    colon = strrchr(addr, ':');
    if (addr[0] != '[' && colon && strchr(addr, ':') != colon) {
        char buf[NET_HOST_MAX + 16];
        if (snprintf(buf, sizeof(buf), "[%.*s]%s", (int)(colon - addr), addr, colon) >=
            (int)sizeof(buf))
            return HC_ADDR_UNSURE;
        if (net_parse_hostport(buf, strlen(buf), 0, &hp) < 0)
            return HC_ADDR_UNSURE;
    } else if (net_parse_hostport(addr, strlen(addr), 0, &hp) < 0) {
        return HC_ADDR_UNSURE; /* no port, a port range or offset */
    }
    if (hp.port != listen->tcp.port)
        return HC_ADDR_NO;
    if (any_host(listen->tcp.host))
        return HC_ADDR_YES;
    if (host_bytes(hp.host, a) == 0 && host_bytes(listen->tcp.host, b) == 0)
        return memcmp(a, b, 16) ? HC_ADDR_NO : HC_ADDR_YES;
    return strcasecmp(hp.host, listen->tcp.host) ? HC_ADDR_UNSURE : HC_ADDR_YES;
}

/* The servers of the engine's backend against the agent's listen address:
 * HC_ADDR_YES when one of them is the agent. Reports nothing when report is 0.
 */
int hc_check_servers(struct hc_ctx *c, const struct hc_engine *e, int report)
{
    const struct hc_line *ub = NULL, *first = NULL, *unsure = NULL;
    const char *unsure_addr = NULL;
    const struct hc_sect *be;

    for (size_t i = 0; i < e->agent->nlines; i++)
        if (hc_word_is(&e->agent->lines[i], 0, "use-backend") && e->agent->lines[i].n > 1)
            ub = &e->agent->lines[i];
    if (!ub) {
        if (report)
            hc_say(c, 0, e->spoe.path, e->agent->no, "spoe-agent '%s' has no 'use-backend'",
                   e->agent->name ? e->agent->name : "");
        return HC_ADDR_NO;
    }
    be = hc_find_sect(&c->hap, HC_BACKEND, ub->w[1]);
    if (!be) {
        if (report)
            hc_say(c, 0, e->spoe.path, ub->no, "no backend '%s' in %s", ub->w[1], c->cfg_path);
        return HC_ADDR_NO;
    }
    for (size_t i = 0; i < be->nlines; i++) {
        const struct hc_line *l = &be->lines[i];
        /* server NAME ADDR, server-template PREFIX NUM ADDR */
        size_t a = hc_word_is(l, 0, "server") ? 2 : hc_word_is(l, 0, "server-template") ? 3 : 0;
        if (!a || l->n <= a)
            continue;
        int m = addr_match(&c->cfg->listen_addr, l->w[a]);
        if (m == HC_ADDR_YES)
            return HC_ADDR_YES;
        if (!first)
            first = l;
        if (m == HC_ADDR_UNSURE && !unsure) {
            unsure = l;
            unsure_addr = l->w[a];
        }
    }
    if (!report)
        return unsure ? HC_ADDR_UNSURE : HC_ADDR_NO;
    if (unsure)
        hc_say(c, 1, c->cfg_path, unsure->no,
               "cannot tell whether server '%s' (%s) is this agent (%s: listen = %s)", unsure->w[1],
               unsure_addr, c->cfg->path, c->cfg->listen);
    else if (first)
        hc_say(c, 0, c->cfg_path, first->no,
               "no server of backend '%s' is at this agent's address (%s: listen = %s): "
               "HAProxy asks other agents, or none",
               be->name, c->cfg->path, c->cfg->listen);
    else
        hc_say(c, 0, c->cfg_path, be->no, "backend '%s' has no server: no agent is ever asked",
               be->name);
    return unsure ? HC_ADDR_UNSURE : HC_ADDR_NO;
}

/* ---- rules against what is sent ------------------------------------------ */

/* The line and word of the arg name in message m, or NULL. An arg without
 * "name=" has an empty name. */
static const struct hc_line *msg_arg(const struct hc_sect *m, const char *name, size_t *word)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < m->nlines; i++) {
        const struct hc_line *l = &m->lines[i];
        if (!hc_word_is(l, 0, "args"))
            continue;
        for (size_t k = 1; k < l->n; k++) {
            const char *w = l->w[k], *eq = strchr(w, '=');
            size_t n = 0;
            if (eq) {
                n = (size_t)(eq - w);
                for (size_t j = 0; j < n; j++)
                    if (!hc_name_char(w[j]))
                        n = 0;
            }
            if (n == nl && !memcmp(w, name, nl)) {
                *word = k;
                return l;
            }
        }
    }
    return NULL;
}

/* The sent entry of message name in our engines, in a request phase (resp
 * 0) or a response phase (resp 1); NULL if none. *defined: some engine's
 * scope has the message. */
static const struct hc_sent *find_sent(const struct hc_ctx *c, const char *name, int resp,
                                       int *defined, const struct hc_engine **eng)
{
    *defined = 0;
    for (size_t i = 0; i < c->neng; i++) {
        const struct hc_engine *e = &c->eng[i];
        if (!e->ours)
            continue;
        *defined |= hc_find_sect(&e->spoe, HC_MESSAGE, name) != NULL;
        for (size_t j = 0; j < e->nsent; j++)
            if (!strcmp(e->sent[j].msg->name, name) && (e->sent[j].phase >= 4) == resp) {
                *eng = e;
                return &e->sent[j];
            }
    }
    return NULL;
}

/* The args rule r reads, into names (at most n); their count. */
static size_t rule_args(const struct cfg_rule *r, const char **names, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < r->nkeys && k < n; i++)
        names[k++] = r->keys[i];
    for (size_t i = 0; i < r->nmatches && k < n; i++)
        names[k++] = r->matches[i].arg;
    if (r->rate_arg && k < n)
        names[k++] = r->rate_arg;
    if (r->burst_arg && k < n)
        names[k++] = r->burst_arg;
    if (r->cost_arg && k < n)
        names[k++] = r->cost_arg;
    return k;
}

static void check_rule_args(struct hc_ctx *c, const struct cfg_rule *r, const struct hc_sent *s,
                            const struct hc_engine *e)
{
    const char *names[CFG_MAX_KEY_ARGS + CFG_MAX_MATCHES + 3];
    size_t n = rule_args(r, names, sizeof(names) / sizeof(names[0])), w;

    for (size_t i = 0; i < n; i++) {
        int found = 0;
        if (s) {
            found = msg_arg(s->msg, names[i], &w) != NULL;
        } else {
            /* a rule of every message: some request message must carry it */
            for (size_t k = 0; k < c->neng && !found; k++)
                for (size_t j = 0; c->eng[k].ours && j < c->eng[k].nsent && !found; j++)
                    found = c->eng[k].sent[j].phase < 4 &&
                            msg_arg(c->eng[k].sent[j].msg, names[i], &w) != NULL;
        }
        if (found)
            continue;
        if (s)
            hc_say(c, 0, c->cfg->path, r->line,
                   "rule '%s' reads arg '%s', which message '%s' does not send (its "
                   "args at "
                   "%s:%u): the rule never applies",
                   r->name, names[i], s->msg->name, e->spoe.path, s->msg->no);
        else
            hc_say(c, 0, c->cfg->path, r->line,
                   "rule '%s' reads arg '%s', which no message HAProxy sends "
                   "carries: the rule "
                   "never applies",
                   r->name, names[i]);
    }
}

static void check_release(struct hc_ctx *c, const struct cfg_rule *r)
{
    int defined, d2;
    const struct hc_engine *e = NULL;
    const struct hc_sent *s = find_sent(c, r->release, 1, &defined, &e), *early;
    char hold[32];
    size_t w;

    config_duration_text(r->max_hold_ms, hold, sizeof(hold));
    if (!s) {
        early = find_sent(c, r->release, 0, &d2, &e);
        if (!defined)
            hc_say(c, 0, c->cfg->path, r->line,
                   "concurrency rule '%s': its release message '%s' is not in the "
                   "SPOE file: "
                   "each slot is held for max_hold (%s)",
                   r->name, r->release, hold);
        else if (early)
            hc_say(c, 0, c->cfg->path, r->line,
                   "concurrency rule '%s': its release message '%s' is sent with the "
                   "request "
                   "(%s:%u), not the response: slots go back before the work is done",
                   r->name, r->release, c->cfg_path, early->no);
        else
            hc_say(c, 0, c->cfg->path, r->line,
                   "concurrency rule '%s': no 'http-response send-spoe-group' sends "
                   "its release "
                   "message '%s': each slot is held for max_hold (%s)",
                   r->name, r->release, hold);
        return;
    }
    const struct hc_line *l = msg_arg(s->msg, "slot", &w);
    if (!l) {
        hc_say(c, 0, c->cfg->path, r->line,
               "concurrency rule '%s': release message '%s' has no arg 'slot' "
               "(args slot=var(txn.%s.slot)): each slot is held for max_hold (%s)",
               r->name, r->release, e->prefix, hold);
        return;
    }
    char want[128];
    snprintf(want, sizeof(want), "var(txn.%s.slot)", e->prefix);
    if (!strstr(l->w[w], want))
        hc_say(c, 0, e->spoe.path, l->no,
               "arg '%s' of release message '%s' does not read %s, where the agent "
               "puts the slot",
               l->w[w], r->release, want);
}

void hc_check_rules(struct hc_ctx *c)
{
    for (size_t i = 0; i < c->cfg->nrules; i++) {
        const struct cfg_rule *r = &c->cfg->rules[i];
        const struct hc_engine *e = NULL;
        const struct hc_sent *s = NULL;
        int defined = 1, d2;

        if (r->algorithm == ALGO_CONCURRENCY && r->release)
            check_release(c, r);
        if (r->message) {
            s = find_sent(c, r->message, 0, &defined, &e);
            if (!s) {
                if (!defined)
                    hc_say(c, 0, c->cfg->path, r->line,
                           "rule '%s' reads message '%s', which the SPOE file does not "
                           "define "
                           "(spoe-message %s): the rule never applies",
                           r->name, r->message, r->message);
                else if (find_sent(c, r->message, 1, &d2, &e))
                    hc_say(c, 0, c->cfg->path, r->line,
                           "rule '%s' reads message '%s', which HAProxy sends only with the "
                           "response: too late to deny",
                           r->name, r->message);
                else
                    hc_say(c, 0, c->cfg->path, r->line,
                           "rule '%s' reads message '%s', which HAProxy never sends: no "
                           "'http-request send-spoe-group' sends a group holding it",
                           r->name, r->message);
                continue;
            }
        }
        check_rule_args(c, r, s, e);
    }
}

/* ---- the proxy's lines --------------------------------------------------- */

static int agent_var(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(agent_vars) / sizeof(agent_vars[0]); i++)
        if (strlen(agent_vars[i]) == len && !memcmp(agent_vars[i], name, len))
            return 1;
    return 0;
}

/* Whether p (len bytes) is the var prefix of one of the engines. */
static int engine_prefix(const struct hc_ctx *c, const char *p, size_t len)
{
    for (size_t i = 0; i < c->neng; i++)
        if (c->eng[i].prefix && strlen(c->eng[i].prefix) == len &&
            !memcmp(c->eng[i].prefix, p, len))
            return 1;
    return 0;
}

/* Whether name (len bytes) is txn.X.NAME for a variable NAME of the agent
 * under a prefix X that no engine uses. */
static int other_prefix(const struct hc_ctx *c, const char *name, size_t len)
{
    const char *dot;

    if (len < 6 || memcmp(name, "txn.", 4))
        return 0;
    dot = memrchr(name, '.', len);
    return dot > name + 4 && agent_var(dot + 1, len - (size_t)(dot + 1 - name)) &&
           !engine_prefix(c, name + 4, (size_t)(dot - name - 4));
}

/* Whether name (len bytes) is a variable of an engine that is never asked. */
static int unasked(const struct hc_ctx *c, const char *name, size_t len)
{
    for (size_t i = 0; i < c->neng; i++) {
        const struct hc_engine *e = &c->eng[i];
        size_t pl = e->prefix ? strlen(e->prefix) : 0;
        int phase;
        unsigned no;
        if (!pl || len <= 5 + pl || memcmp(name, "txn.", 4) || memcmp(name + 4, e->prefix, pl) ||
            name[4 + pl] != '.')
            continue;
        hc_engine_first(e, &phase, &no);
        return phase == HC_NO_PHASE;
    }
    return 0;
}

/* The variables read by the condition of line l (ACLs of section s
 * followed), checked against their setters. */
static void check_condition(struct hc_ctx *c, const struct hc_sect *s, const struct hc_line *l,
                            int phase, const char *what)
{
    size_t from = cond_start(l, 0);

    for (size_t k = from; k < l->n; k++) {
        const struct hc_line *acl = find_acl(s, l->w[k]);
        const struct hc_line *src = acl ? acl : l;
        size_t first = acl ? 2 : k, last = acl ? acl->n : k + 1;
        for (size_t j = first; j < last; j++) {
            size_t pos = 0, len;
            const char *name;
            int dflt;
            unsigned later = 0;
            while (next_read(src->w[j], &pos, &name, &len, &dflt)) {
                if (dflt || other_prefix(c, name, len) || unasked(c, name, len))
                    continue; /* hc_check_prefix_reads, hc_check_triggers say it */
                int st = hc_var_set(c, name, len, s, phase, l->no, &later);
                if (st == HC_VAR_BEFORE)
                    continue;
                if (st == HC_VAR_AFTER)
                    hc_say(c, 0, c->cfg_path, l->no,
                           "%s: its condition reads var(%.*s), set only by a later line "
                           "(%u): "
                           "the condition is false here",
                           what, (int)len, name, later);
                else
                    hc_say(c, c->lua, c->cfg_path, l->no,
                           "%s: its condition reads var(%.*s), which nothing sets%s: the "
                           "condition is false here (set it above this line, as the kit "
                           "does "
                           "with 'http-request set-var(txn.rl_agents) nbsrv(BACKEND)')",
                           what, (int)len, name, c->lua ? " (unless Lua does)" : "");
            }
        }
    }
}

/* The send-spoe-group lines of engine e: each condition's variables. */
void hc_check_triggers(struct hc_ctx *c, struct hc_engine *e)
{
    int request = 0;
    char what[256];

    for (size_t i = 0; i < e->nsent; i++)
        request |= e->sent[i].phase < 4;
    if (!request)
        hc_say(c, 0, c->cfg_path, e->filter->no,
               "no 'http-request send-spoe-group %s GROUP' in %s '%s' (nor an SPOE "
               "message with "
               "an 'event'): HAProxy never asks the agent",
               e->id ? e->id : "ENGINE", hc_kind_name(e->px->kind), e->px->name ? e->px->name : "");
    for (size_t i = 0; i < e->nsent; i++) {
        const struct hc_sent *s = &e->sent[i];
        int seen = 0;
        if (!s->no)
            continue;
        for (size_t j = 0; j < i; j++)
            seen |= e->sent[j].no == s->no;
        if (seen)
            continue;
        size_t act;
        hc_line_phase(s->how, &act);
        snprintf(what, sizeof(what), "%s %s %s", s->how->w[act], s->how->w[act + 1],
                 s->how->w[act + 2]);
        check_condition(c, e->px, s->how, s->phase, what);
    }
}

/* Lines reading txn.X.NAME for an agent variable NAME under a prefix X that
 * no engine uses and nothing sets: they never see the answer. */
void hc_check_prefix_reads(struct hc_ctx *c, const struct hc_engine *e)
{
    for (size_t i = 0; i < c->hap.ns; i++) {
        const struct hc_sect *s = &c->hap.s[i];
        for (size_t j = 0; is_proxy(s) && j < s->nlines; j++) {
            const struct hc_line *l = &s->lines[j];
            int said = 0;
            for (size_t k = 0; k < l->n && !said; k++) {
                size_t pos = 0, len;
                const char *name;
                int dflt;
                unsigned later;
                while (!said && next_read(l->w[k], &pos, &name, &len, &dflt)) {
                    if (!other_prefix(c, name, len) ||
                        hc_var_set(c, name, len, s, HC_NO_PHASE, 0, &later) != HC_VAR_NEVER)
                        continue;
                    hc_say(c, 0, c->cfg_path, l->no,
                           "reads var(%.*s), but the agent sets txn.%s.* (%s:%u): this line "
                           "never sees its answer",
                           (int)len, name, e->prefix, e->spoe.path, e->prefix_no);
                    said = 1;
                }
            }
        }
    }
}

static int is_deny(const struct hc_line *l, size_t act)
{
    static const char *const acts[] = {"deny", "tarpit", "reject", "return", "silent-drop"};
    for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++)
        if (hc_word_is(l, act, acts[i]))
            return 1;
    return 0;
}

/* Whether the condition of l (ACLs of s followed) reads var(want). */
static int cond_reads(const struct hc_sect *s, const struct hc_line *l, const char *want)
{
    size_t wl = strlen(want);
    for (size_t k = cond_start(l, 0); k < l->n; k++) {
        const struct hc_line *acl = find_acl(s, l->w[k]);
        const struct hc_line *src = acl ? acl : l;
        size_t first = acl ? 2 : k, last = acl ? acl->n : k + 1;
        for (size_t j = first; j < last; j++) {
            size_t pos = 0, len;
            const char *name;
            int dflt;
            while (next_read(src->w[j], &pos, &name, &len, &dflt))
                if (len == wl && !memcmp(name, want, wl))
                    return 1;
        }
    }
    return 0;
}

/* A deny on txn.PREFIX.blocked, after the agent is asked. */
void hc_check_deny(struct hc_ctx *c, const struct hc_engine *e)
{
    char want[128];
    int phase, found = 0;
    unsigned first;

    snprintf(want, sizeof(want), "txn.%s.blocked", e->prefix);
    hc_engine_first(e, &phase, &first);
    for (size_t i = 0; i < c->hap.ns; i++) {
        const struct hc_sect *s = &c->hap.s[i];
        for (size_t j = 0; is_proxy(s) && j < s->nlines; j++) {
            const struct hc_line *l = &s->lines[j];
            size_t act;
            int ph = hc_line_phase(l, &act);
            if (ph < 0 || ph > 3 || !is_deny(l, act) || !cond_reads(s, l, want))
                continue;
            found = 1;
            if (s == e->px && phase != HC_NO_PHASE &&
                (ph < phase || (ph == phase && l->no < first)))
                hc_say(c, 0, c->cfg_path, l->no,
                       "this line reads var(%s) before the agent is asked (line %u): "
                       "move it "
                       "below that line",
                       want, first);
        }
    }
    if (!found)
        hc_say(c, 0, c->cfg_path, e->filter->no,
               "no 'http-request deny' reads var(%s) (the agent's prefix: %s:%u): "
               "its verdict "
               "is never applied; add 'http-request deny deny_status 429 if { "
               "var(%s) -m bool }' "
               "after the send-spoe-group line",
               want, e->spoe.path, e->prefix_no, want);
}
