/* SPDX-License-Identifier: Apache-2.0 */
/* rules_fleet.c - the fleet's view of the rule set, from lua/rules_fleet.lua's
 * reply to JSON and text (see rules_fleet.h). */
#include "rules_redis/rules_fleet.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/strbuf.h"
#include "rules_redis/rules_script.h"

/* A decimal integer of exactly len bytes (at most 19 digits). */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;

    if (len == 0 || len > 19)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 0;
}

/* The value of "name=" in the member's space-separated fields, malloc'd
 * ("" when absent); NULL out of memory. */
static char *field(const char *s, size_t len, const char *name)
{
    size_t nl = strlen(name);

    for (size_t i = 0; i + nl < len; i++) {
        if ((i == 0 || s[i - 1] == ' ') && memcmp(s + i, name, nl) == 0 && s[i + nl] == '=') {
            const char *v = s + i + nl + 1;
            const char *end = memchr(v, ' ', len - (size_t)(v - s));
            return strndup(v, end ? (size_t)(end - v) : len - (size_t)(v - s));
        }
    }
    return strdup("");
}

int rules_fleet_parse(size_t n, const char *const *str, const size_t *len, struct rules_fleet *out)
{
    uint64_t now, seen;

    memset(out, 0, sizeof(*out));
    const size_t head = RULES_FLEET_R_HEAD, each = RULES_FLEET_E_N;

    if (n < head || (n - head) % each != 0 || (n - head) / each > RULES_FLEET_MAX ||
        parse_u64(str[RULES_FLEET_R_CURRENT], len[RULES_FLEET_R_CURRENT], &out->current) < 0 ||
        parse_u64(str[RULES_FLEET_R_NOW_MS], len[RULES_FLEET_R_NOW_MS], &now) < 0)
        return -1;
    if (n > head && !(out->agents = calloc((n - head) / each, sizeof(*out->agents))))
        return -1;
    for (size_t i = head; i < n; i += each, out->n++) {
        struct rules_fleet_agent *a = &out->agents[out->n];
        const char *const *e = str + i;
        const size_t *el = len + i;
        char *pid;

        if (parse_u64(e[RULES_FLEET_E_SEEN_MS], el[RULES_FLEET_E_SEEN_MS], &seen) < 0 ||
            (el[RULES_FLEET_E_VERSION] &&
             parse_u64(e[RULES_FLEET_E_VERSION], el[RULES_FLEET_E_VERSION], &a->version) < 0) ||
            !(a->host = field(e[RULES_FLEET_E_AGENT], el[RULES_FLEET_E_AGENT], "host")) ||
            !(a->listen = field(e[RULES_FLEET_E_AGENT], el[RULES_FLEET_E_AGENT], "listen")) ||
            !(a->error = strndup(e[RULES_FLEET_E_ERROR], el[RULES_FLEET_E_ERROR]))) {
            out->n++;
            rules_fleet_clear(out);
            return -1;
        }
        if ((pid = field(e[RULES_FLEET_E_AGENT], el[RULES_FLEET_E_AGENT], "pid")))
            a->pid = strtol(pid, NULL, 10);
        free(pid);
        a->age_ms = now > seen ? now - seen : 0;
    }
    return 0;
}

void rules_fleet_clear(struct rules_fleet *f)
{
    for (size_t i = 0; i < f->n; i++) {
        free(f->agents[i].host);
        free(f->agents[i].listen);
        free(f->agents[i].error);
    }
    free(f->agents);
    memset(f, 0, sizeof(*f));
}

int rules_fleet_agent_off(const struct rules_fleet *f, size_t i)
{
    return f->agents[i].version != f->current || f->agents[i].error[0] != '\0';
}

static size_t off_current(const struct rules_fleet *f)
{
    size_t k = 0;

    for (size_t i = 0; i < f->n; i++)
        k += f->agents[i].version != f->current;
    return k;
}

char *rules_fleet_json(const struct rules_fleet *f, size_t *len)
{
    json_t *doc = json_object(), *list = json_array();

    if (!doc || !list) {
        json_decref(doc);
        json_decref(list);
        return NULL;
    }
    json_object_set_new(doc, "current", json_integer((json_int_t)f->current));
    json_object_set_new(doc, "off_current", json_integer((json_int_t)off_current(f)));
    for (size_t i = 0; i < f->n; i++) {
        const struct rules_fleet_agent *a = &f->agents[i];
        json_t *o = json_object();
        /* every string came from Redis: any bytes, as json.h writes them */
        json_object_set_new(o, "host", json_latin1(a->host, strlen(a->host)));
        json_object_set_new(o, "pid", json_integer(a->pid));
        json_object_set_new(o, "listen", json_latin1(a->listen, strlen(a->listen)));
        json_object_set_new(o, "version", json_integer((json_int_t)a->version));
        json_object_set_new(o, "current", json_boolean(a->version == f->current));
        json_object_set_new(o, "error", json_latin1(a->error, strlen(a->error)));
        json_object_set_new(o, "last_seen_s", json_real((double)a->age_ms / 1000.0));
        json_array_append_new(list, o);
    }
    json_object_set_new(doc, "agents", list);
    return json_body(doc, len);
}

/* s with control bytes shown as '?': a terminal gets no escape sequence. */
static void put_plain(struct strbuf *b, const char *s, int width)
{
    int n = 0;

    for (; *s; s++, n++)
        strbuf_printf(b, "%c", (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
    for (; n < width; n++)
        strbuf_put(b, " ", 1);
}

char *rules_fleet_text(const struct rules_fleet *f)
{
    struct strbuf b = STRBUF_INIT;
    char num[32];

    strbuf_printf(&b, "current version: %" PRIu64 "; %zu agents, %zu off it\n", f->current, f->n,
                  off_current(f));
    strbuf_printf(&b, "  %-24s %-8s %-22s %-8s %-9s %s\n", "HOST", "PID", "LISTEN", "VERSION",
                  "SEEN", "ERROR");
    for (size_t i = 0; i < f->n; i++) {
        const struct rules_fleet_agent *a = &f->agents[i];
        strbuf_printf(&b, "%c ", rules_fleet_agent_off(f, i) ? '!' : ' ');
        put_plain(&b, a->host, 24);
        strbuf_printf(&b, " %-8ld ", a->pid);
        put_plain(&b, a->listen, 22);
        snprintf(num, sizeof(num), "%" PRIu64, a->version);
        strbuf_printf(&b, " %-8s %-9.1f ", num, (double)a->age_ms / 1000.0);
        put_plain(&b, a->error, 0);
        strbuf_put(&b, "\n", 1);
    }
    return strbuf_finish(&b, NULL);
}

char *rules_fleet_verdict(const struct rules_fleet *f)
{
    struct strbuf b = STRBUF_INIT;
    size_t k = 0;

    for (size_t i = 0; i < f->n; i++)
        k += (size_t)rules_fleet_agent_off(f, i);
    if (k)
        strbuf_printf(&b, "%zu of %zu agents off version %" PRIu64 " or with an apply error:", k,
                      f->n, f->current);
    for (size_t i = 0, said = 0; i < f->n; i++) {
        const struct rules_fleet_agent *a = &f->agents[i];
        if (!rules_fleet_agent_off(f, i))
            continue;
        strbuf_put(&b, said ? ", " : " ", said ? 2 : 1);
        said++;
        put_plain(&b, a->host, 0);
        strbuf_printf(&b, " pid %ld (", a->pid);
        put_plain(&b, a->listen, 0);
        strbuf_printf(&b, ") on %" PRIu64 "%s", a->version, a->error[0] ? " with an error" : "");
    }
    /* an agent above the current version: the store lost what it runs */
    for (size_t i = 0; i < f->n; i++) {
        if (f->agents[i].version > f->current) {
            strbuf_printf(&b, ". Agents run a version above the current one: the rule store "
                              "lost it (warning rules_store_lost); push the rules again with "
                              "--push RULES --force");
            break;
        }
    }
    return strbuf_finish(&b, NULL);
}
