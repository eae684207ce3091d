/* SPDX-License-Identifier: Apache-2.0 */
/* reset_cli.c - --reset RULE KEY through the agent's POST /reset (see
 * reset_cli.h). Through the agent rather than on Redis directly: the key's
 * Redis name depends on the rules in force (a rule's limits from args, a
 * hashed long key, [rules] source = redis), which the agent knows, and the
 * fleet's confirmations are counted by the agent that resets. */
#include "http/reset_cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "config/config.h"
#include "core/log.h"
#include "core/net.h"
#include "core/util.h"

#define RESET_CLI_TIMEOUT_S 10 /* the agent waits at most 2 s for the fleet */
#define REPLY_MAX 65536

/* s, percent-encoded for a query (unreserved bytes as they are). */
static char *urlencode(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *o = out;

    if (!out)
        return NULL;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            strchr("-._~", c)) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o = '\0';
    return out;
}

/* The stats listener's address, to connect to: a wildcard one by loopback. */
static void target(const struct config *cfg, struct net_addr *a)
{
    *a = cfg->stats_addr;
    if (a->kind != NET_ADDR_TCP)
        return;
    if (!a->tcp.host[0] || !strcmp(a->tcp.host, "*") || !strcmp(a->tcp.host, "0.0.0.0"))
        snprintf(a->tcp.host, sizeof(a->tcp.host), "127.0.0.1");
    else if (!strcmp(a->tcp.host, "::"))
        snprintf(a->tcp.host, sizeof(a->tcp.host), "::1");
}

/* The request, sent; the whole answer (the agent closes after it) into
 * buf. Its length, or -1 with why in err. */
static long ask(const struct config *cfg, const char *rule, const char *key, char *buf, size_t cap,
                char *err, size_t errlen)
{
    struct net_addr a;
    char *r = urlencode(rule), *k = urlencode(key), auth[512] = "";
    long n = -1;

    target(cfg, &a);
    if (cfg->stats_credentials) {
        size_t cl = strlen(cfg->stats_credentials);
        char *b = malloc(4 * ((cl + 2) / 3) + 1);
        if (b) {
            util_base64(cfg->stats_credentials, cl, b);
            snprintf(auth, sizeof(auth), "Authorization: Basic %s\r\n", b);
            explicit_bzero(b, strlen(b));
            free(b);
        }
    }
    int fd = r && k ? net_connect(&a, err, errlen) : -1;
    if (!r || !k)
        snprintf(err, errlen, "out of memory");
    if (fd >= 0) {
        struct timeval tv = {RESET_CLI_TIMEOUT_S, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        int len = snprintf(buf, cap,
                           "POST /reset?rule=%s&key=%s HTTP/1.1\r\nHost: localhost\r\n"
                           "Content-Length: 0\r\n%sConnection: close\r\n\r\n",
                           r, k, auth);
        if (len < 0 || (size_t)len >= cap) {
            snprintf(err, errlen, "key too long");
        } else if (write(fd, buf, (size_t)len) != len) {
            snprintf(err, errlen, "cannot send to the agent's stats listener");
        } else {
            size_t got = 0;
            ssize_t m;
            while (got + 1 < cap && (m = read(fd, buf + got, cap - 1 - got)) > 0)
                got += (size_t)m;
            buf[got] = '\0';
            n = (long)got;
            if (!got)
                snprintf(err, errlen, "no answer from the agent's stats listener");
        }
        close(fd);
    }
    explicit_bzero(auth, sizeof(auth));
    free(r);
    free(k);
    return n > 0 ? n : -1;
}

static long long num(json_t *o, const char *path1, const char *path2)
{
    json_t *v = json_object_get(o, path1);
    if (v && path2)
        v = json_object_get(v, path2);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

int reset_cli_run(const char *config, const char *rule, const char *key)
{
    struct config *cfg = NULL;
    char err[8192];
    char *buf = NULL;
    int rc = 1;

    if (config_load_file(config, &cfg, err, sizeof(err)) < 0) {
        fputs(err, stderr);
        return 1;
    }
    if (cfg->stats_addr.kind == NET_ADDR_NONE) {
        fprintf(stderr,
                "%s: no [agent] stats listener: --reset asks the agent that runs this file "
                "on it\n",
                config);
        goto out;
    }
    if (!(buf = malloc(REPLY_MAX))) {
        fprintf(stderr, "spoa-ratelimit: out of memory\n");
        goto out;
    }
    if (ask(cfg, rule, key, buf, REPLY_MAX, err, sizeof(err)) < 0) {
        fprintf(stderr, "spoa-ratelimit: --reset: %s (is the agent running?)\n", err);
        goto out;
    }
    int status = 0;
    char *body = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1 || !body) {
        fprintf(stderr, "spoa-ratelimit: --reset: not an HTTP answer\n");
        goto out;
    }
    body += 4;
    json_t *j = status == 200 ? json_loads(body, 0, NULL) : NULL;
    if (!j) {
        fprintf(stderr, "spoa-ratelimit: --reset: the agent answered %d: %s", status, body);
        if (*body && body[strlen(body) - 1] != '\n')
            fputc('\n', stderr);
        goto out;
    }
    long long agents = num(j, "fleet", "agents"), confirmed = num(j, "fleet", "confirmed");
    if (json_object_get(j, "slots_freed"))
        printf("reset rule=%s: its concurrency slots freed\n", rule);
    else if (num(j, "redis", "remaining") >= 0)
        printf("reset rule=%s: Redis bucket reset (remaining %lld)\n", rule,
               num(j, "redis", "remaining"));
    else
        printf("reset rule=%s: standalone agent cleared\n", rule);
    if (agents >= 0)
        printf("confirmed by %lld of %lld agents\n", confirmed, agents);
    json_decref(j);
    rc = 0;
out:
    free(buf);
    config_free(cfg);
    return rc;
}
