/* SPDX-License-Identifier: Apache-2.0 */
/* test_haproxy_check.c - --check --haproxy's module (config/haproxy_check.h)
 * on the shipped kit (haproxy/: it passes) and on the kit with one mistake
 * each (the line that feeds send-spoe-group's condition, the filter, the
 * release line, the var prefix, an arg, the agents' addresses, the deny,
 * default-path), every finding named by FILE:LINE; and HAProxy's word
 * rules (quotes, escapes, comments, environment variables). */
#include "config/haproxy_check.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "config/config.h"

#ifndef SRCDIR
#define SRCDIR "."
#endif

#define MAX_FILES 4

/* The files and the environment HAProxy would see, in memory. */
struct world {
    const char *path[MAX_FILES];
    char *text[MAX_FILES];
    const char *env[8]; /* NAME, VALUE pairs, NULL-terminated */
};

static char *world_read(void *ctx, const char *path)
{
    struct world *w = ctx;
    for (int i = 0; i < MAX_FILES; i++)
        if (w->path[i] && !strcmp(w->path[i], path))
            return strdup(w->text[i]);
    errno = ENOENT;
    return NULL;
}

static const char *world_env(void *ctx, const char *name)
{
    struct world *w = ctx;
    for (int i = 0; w->env[i]; i += 2)
        if (!strcmp(w->env[i], name))
            return w->env[i + 1];
    return NULL;
}

static char *slurp(const char *rel)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", SRCDIR, rel);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char *text = calloc(1, 1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    ck_assert_uint_lt(n, (1 << 16) - 1);
    fclose(f);
    return text;
}

/* text without its lines holding drop (each), with from replaced by to. */
static char *edit(const char *text, const char *drop, const char *from, const char *to)
{
    size_t cap = strlen(text) + 4096;
    char *out = calloc(1, cap), *o = out;
    const char *p = text;

    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) + 1 : strlen(p);
        char line[2048];
        snprintf(line, sizeof(line), "%.*s", (int)len, p);
        p += len;
        if (drop && strstr(line, drop))
            continue;
        char *at = from ? strstr(line, from) : NULL;
        if (at)
            o += sprintf(o, "%.*s%s%s", (int)(at - line), line, to, at + strlen(from));
        else
            o += sprintf(o, "%s", line);
    }
    return out;
}

/* The number of the first line of text holding s (0: none). */
static unsigned line_of(const char *text, const char *s)
{
    const char *at = strstr(text, s);
    unsigned n = 1;
    if (!at)
        return 0;
    for (const char *p = text; p < at; p++)
        n += *p == '\n';
    return n;
}

/* Runs the check: its result, the messages in out (malloc'd). */
static int run(const char *ini, const char *hap, const char *spoe, const char *const *env,
               const char *cfg_path, char **out, int *warnings)
{
    struct world w = {{cfg_path, "kit/spoe-ratelimit.conf"}, {(char *)hap, (char *)spoe}, {0}};
    struct haproxy_check_io io = {world_read, world_env, &w};
    struct strbuf b = STRBUF_INIT;
    struct config *cfg = check_config_ok(ini);
    size_t len;

    for (int i = 0; env && env[i]; i++)
        w.env[i] = env[i];
    int rc = haproxy_check(cfg, cfg_path, &io, &b, warnings);
    *out = strbuf_finish(&b, &len);
    ck_assert_ptr_nonnull(*out);
    config_free(cfg);
    return rc;
}

/* ---- the kit
 * ------------------------------------------------------------------ */

static char *kit_ini, *kit_cfg, *kit_spoe;

static void kit_setup(void)
{
    kit_ini = slurp("haproxy/ratelimit.ini");
    kit_cfg = slurp("haproxy/haproxy.cfg");
    kit_spoe = slurp("haproxy/spoe-ratelimit.conf");
}

static void kit_teardown(void)
{
    free(kit_ini);
    free(kit_cfg);
    free(kit_spoe);
}

/* The kit's concurrency rule (the last lines of the file, commented out),
 * uncommented. */
static char *cc_ini(void)
{
    const char *at = strstr(kit_ini, ";[rule:reports-in-flight]");
    char *out = calloc(1, strlen(kit_ini) + 1), *o = out;

    ck_assert_ptr_nonnull(at);
    memcpy(o, kit_ini, (size_t)(at - kit_ini));
    o += at - kit_ini;
    for (const char *p = at; *p; p++)
        if (*p != ';' || (p != at && p[-1] != '\n'))
            *o++ = *p;
    ck_assert_ptr_nonnull(strstr(out, "\nrelease = release-slot\n"));
    return out;
}

START_TEST(test_kit)
{
    char *out, *ini = cc_ini();
    int warnings = -1;

    ck_assert_int_eq(run(kit_ini, kit_cfg, kit_spoe, NULL, "kit/haproxy.cfg", &out, &warnings), 0);
    ck_assert_msg(!*out && warnings == 0, "the kit: %s", out);
    free(out);
    /* with its concurrency rule enabled too */
    ck_assert_int_eq(run(ini, kit_cfg, kit_spoe, NULL, "kit/haproxy.cfg", &out, &warnings), 0);
    ck_assert_msg(!*out, "the kit with its concurrency rule: %s", out);
    free(out);
    free(ini);
}
END_TEST

/* One mistake in the kit: what is dropped, replaced, and the message. */
static const struct {
    const char *what;
    const char *file; /* which file the edit is in: "cfg", "spoe" or "ini" */
    const char *drop, *from, *to;
    int cc;              /* with the concurrency rule */
    const char *at_line; /* the message's line: the first line of the edited cfg
                            holding this */
    const char *msg;     /* in the message on that line */
} mistakes[] = {
    {"no set-var(txn.rl_agents)", "cfg", "set-var(txn.rl_agents)", NULL, NULL, 0,
     "send-spoe-group ratelimit check if",
     "send-spoe-group ratelimit check: its condition reads var(txn.rl_agents), "
     "which nothing "
     "sets"},
    {"set-var(txn.rl_agents) after its reader", "cfg", "set-var(txn.rl_agents) nbsrv",
     "default_backend app",
     "http-request set-var(txn.rl_agents) nbsrv(spoe-ratelimit)\n    "
     "default_backend app",
     0, "send-spoe-group ratelimit check if",
     "send-spoe-group ratelimit check: its condition reads var(txn.rl_agents), "
     "set only by a "
     "later line"},
    {"no filter spoe", "cfg", "filter spoe", NULL, NULL, 0, "frontend www",
     "frontend 'www' has no 'filter spoe' line"},
    {"no send-spoe-group", "cfg", "send-spoe-group ratelimit check", NULL, NULL, 0, "filter spoe",
     "no 'http-request send-spoe-group ratelimit GROUP' in frontend 'www'"},
    {"no release line", "cfg", "http-response send-spoe-group", NULL, NULL, 1, NULL,
     "concurrency rule 'reports-in-flight': no 'http-response send-spoe-group' "
     "sends its "
     "release message 'release-slot'"},
    {"release sent with the request", "cfg", NULL, "http-response send-spoe-group",
     "http-request send-spoe-group", 1, NULL, "is sent with the request"},
    {"release message without slot", "spoe", NULL, "args slot=var(txn.rl.slot)",
     "args token=var(txn.rl.slot)", 1, NULL, "release message 'release-slot' has no arg 'slot'"},
    {"wrong var-prefix", "spoe", NULL, "option var-prefix rl", "option var-prefix ratelimit", 0,
     "filter spoe", "no 'http-request deny' reads var(txn.ratelimit.blocked)"},
    {"deny on another prefix", "cfg", NULL, "if { var(txn.rl.blocked) -m bool }",
     "if { var(txn.limiter.blocked) -m bool }", 0, "deny deny_status 429",
     "reads var(txn.limiter.blocked), but the agent sets txn.rl.*"},
    {"deny before the agent is asked", "cfg", "http-request deny deny_status 429",
     "http-request set-var(txn.plan)",
     "http-request deny if { var(txn.rl.blocked) -m bool }\n"
     "    http-request set-var(txn.plan)",
     0, "http-request deny if", "this line reads var(txn.rl.blocked) before the agent is asked"},
    {"arg not sent", "spoe", NULL, " plan=var(txn.plan)", "", 0, NULL,
     "rule 'api-key' reads arg 'plan', which message 'check-rate' does not "
     "send"},
    {"message renamed", "spoe", NULL, "spoe-message check-rate", "spoe-message check", 0, NULL,
     "rule 'api-key' reads message 'check-rate', which the SPOE file does not "
     "define"},
    {"agents elsewhere", "cfg", NULL, "presetenv RL_AGENT1_ADDR 127.0.0.1:12345",
     "presetenv RL_AGENT1_ADDR 127.0.0.1:12399", 0, "server agent1",
     "no server of backend 'spoe-ratelimit' is at this agent's address (t.ini: "
     "listen = "
     "127.0.0.1:12345)"},
    {"no default-path", "cfg", "default-path config", NULL, NULL, 0, "filter spoe",
     "cannot read the SPOE file spoe-ratelimit.conf"},
    {"no engine scope", "spoe", "[ratelimit]", NULL, NULL, 0, "filter spoe",
     "kit/spoe-ratelimit.conf has no [ratelimit] section"},
};

START_TEST(test_mistake)
{
    char *cfg = kit_cfg, *spoe = kit_spoe, *ini = mistakes[_i].cc ? cc_ini() : strdup(kit_ini);
    char *edited, *out, want[1024];
    int warnings;

    if (!strcmp(mistakes[_i].file, "cfg"))
        cfg = edited = edit(kit_cfg, mistakes[_i].drop, mistakes[_i].from, mistakes[_i].to);
    else
        spoe = edited = edit(kit_spoe, mistakes[_i].drop, mistakes[_i].from, mistakes[_i].to);
    ck_assert_msg(strcmp(edited, !strcmp(mistakes[_i].file, "cfg") ? kit_cfg : kit_spoe),
                  "%s: the edit changed nothing: the kit changed, edit this test",
                  mistakes[_i].what);
    int rc = run(ini, cfg, spoe, NULL, "kit/haproxy.cfg", &out, &warnings);
    ck_assert_msg(rc >= 1, "%s: %d errors:\n%s", mistakes[_i].what, rc, out);
    if (mistakes[_i].at_line) {
        unsigned no = line_of(cfg, mistakes[_i].at_line);
        ck_assert_uint_gt(no, 0);
        snprintf(want, sizeof(want), "kit/haproxy.cfg:%u: %s", no, mistakes[_i].msg);
    } else {
        snprintf(want, sizeof(want), "%s", mistakes[_i].msg);
    }
    ck_assert_msg(strstr(out, want), "%s: want '%s' in:\n%s", mistakes[_i].what, want, out);
    free(out);
    free(edited);
    free(ini);
}
END_TEST

/* The environment: presetenv gives way to the real one; the servers' addresses
 * come from it. */
START_TEST(test_environment)
{
    const char *env[] = {"RL_AGENT1_ADDR", "10.0.0.1:12345", "RL_AGENT2_ADDR", "127.0.0.1:12345",
                         NULL};
    const char *elsewhere[] = {"RL_AGENT1_ADDR", "10.0.0.1:12345", NULL};
    char *out;
    int warnings;

    ck_assert_int_eq(run(kit_ini, kit_cfg, kit_spoe, env, "kit/haproxy.cfg", &out, &warnings), 0);
    free(out);
    ck_assert_int_eq(run(kit_ini, kit_cfg, kit_spoe, elsewhere, "kit/haproxy.cfg", &out, &warnings),
                     1);
    ck_assert_ptr_nonnull(strstr(out, "no server of backend 'spoe-ratelimit'"));
    free(out);
}
END_TEST

/* A relative SPOE path without default-path: a warning even where it is found.
 */
START_TEST(test_relative_path)
{
    char *cfg = edit(kit_cfg, "default-path config", NULL, NULL);
    char *out;
    int warnings;
    struct world w = {{"haproxy.cfg", "spoe-ratelimit.conf"}, {cfg, kit_spoe}, {0}};
    struct haproxy_check_io io = {world_read, world_env, &w};
    struct strbuf b = STRBUF_INIT;
    struct config *c = check_config_ok(kit_ini);
    size_t len;

    ck_assert_int_eq(haproxy_check(c, "haproxy.cfg", &io, &b, &warnings), 0);
    out = strbuf_finish(&b, &len);
    ck_assert_int_eq(warnings, 1);
    ck_assert_ptr_nonnull(strstr(out, "warning: 'spoe-ratelimit.conf' is relative to the "
                                      "directory HAProxy starts in (/ under systemd)"));
    free(out);
    free(cfg);
    config_free(c);
}
END_TEST

/* ---- HAProxy's words
 * --------------------------------------------------------------- */

static const char *const small_spoe = "[e]\n"
                                      "spoe-agent a\n"
                                      "    messages m\n"
                                      "    option var-prefix p\n"
                                      "    use-backend agents\n"
                                      "spoe-message m\n"
                                      "    args key=req.hdr(x) ip=src\n"
                                      "    event on-frontend-http-request\n";

static const char *const small_ini = "[agent]\nlisten = 127.0.0.1:12345\n"
                                     "[rule:r]\nmessage = m\nkey = key\nrate = 1/1s\n";

/* Lines of a frontend around the kit's filter and deny: each row a config and
 * the errors it has. */
static const struct {
    const char *cfg;
    int errors;
    const char *msg;
} words[] = {
    /* an event sends the message: no send-spoe-group needed */
    {"frontend f\n filter spoe engine e config /kit/spoe-ratelimit.conf\n"
     " http-request deny if { var(txn.p.blocked) -m bool }\n"
     "backend agents\n server s1 127.0.0.1:12345\n",
     0, NULL},
    /* quotes, an escaped blank, a comment */
    {"frontend f # the front\n \"filter\" 'spoe' engine e config "
     "/kit/spoe\\-ratelimit.conf\n"
     " http-request deny if { var(txn.p.blocked) -m bool } # "
     "var(txn.x.blocked)\n"
     "backend agents\n server s1 \"127.0.0.1:12345\"\n",
     0, NULL},
    /* a '#' in quotes is no comment */
    {"frontend f\n filter spoe engine e config \"/kit/spoe-ratelimit.conf\"\n"
     " http-request set-header x \"#\" if { var(txn.q.blocked) -m bool }\n"
     " http-request deny if { var(txn.p.blocked) -m bool }\n"
     "backend agents\n server s1 127.0.0.1:12345\n",
     1, "test.cfg:3: reads var(txn.q.blocked), but the agent sets txn.p.*"},
    /* the environment in double quotes only; setenv and unsetenv in order */
    {"global\n setenv A 127.0.0.1:12345\n setenv B 127.0.0.1:1\n unsetenv B\n"
     "frontend f\n filter spoe engine e config /kit/spoe-ratelimit.conf\n"
     " http-request deny if { var(txn.p.blocked) -m bool }\n"
     "backend agents\n server s1 \"${A}\"\n server s2 '${A}'\n",
     0, NULL},
    {"global\n setenv A 127.0.0.1:1\n"
     "frontend f\n filter spoe engine e config /kit/spoe-ratelimit.conf\n"
     " http-request deny if { var(txn.p.blocked) -m bool }\n"
     "backend agents\n server s1 \"$A\"\n",
     1, "test.cfg:7: no server of backend 'agents' is at this agent's address"},
    /* a named ACL's variable; an agent at any address, or at a name */
    {"frontend f\n filter spoe engine e config /kit/spoe-ratelimit.conf\n"
     " acl blocked var(txn.p.blocked) -m bool\n http-request deny if blocked\n"
     "backend agents\n server s1 agent.example:12345\n",
     0,
     "test.cfg:6: warning: cannot tell whether server 's1' "
     "(agent.example:12345)"},
    /* a listen section holds both; IPv6 without brackets */
    {"listen agents\n bind :80\n filter spoe engine e config "
     "/kit/spoe-ratelimit.conf\n"
     " http-request deny if { var(txn.p.blocked) -m bool }\n server s1 "
     "ipv4@127.0.0.1:12345\n",
     0, NULL},
    {"frontend f\n filter spoe engine e config /kit/spoe-ratelimit.conf\n"
     " http-request deny if { var(txn.p.blocked) -m bool }\n"
     "backend agents\n server s1 ::1:12345\n",
     1, "no server of backend 'agents'"},
    /* a server-template: a DNS name, the check cannot resolve it */
    {"frontend f\n filter spoe engine e config /kit/spoe-ratelimit.conf\n"
     " http-request deny if { var(txn.p.blocked) -m bool }\n"
     "backend agents\n server-template agent 3 agents.internal:12345 check\n",
     0, "test.cfg:5: warning: cannot tell whether server 'agent' (agents.internal:12345)"},
    /* no frontend at all */
    {"backend agents\n server s1 127.0.0.1:12345\n", 1, "test.cfg: no frontend, no listen section"},
};

START_TEST(test_words)
{
    struct world w = {
        {"test.cfg", "/kit/spoe-ratelimit.conf"}, {(char *)words[_i].cfg, (char *)small_spoe}, {0}};
    struct haproxy_check_io io = {world_read, world_env, &w};
    struct strbuf b = STRBUF_INIT;
    struct config *c = check_config_ok(small_ini);
    size_t len;
    int warnings;
    int rc = haproxy_check(c, "test.cfg", &io, &b, &warnings);
    char *out = strbuf_finish(&b, &len);

    ck_assert_msg(rc == words[_i].errors, "row %d: %d errors, want %d:\n%s", _i, rc,
                  words[_i].errors, out);
    if (words[_i].msg)
        ck_assert_msg(strstr(out, words[_i].msg), "row %d: want '%s' in:\n%s", _i, words[_i].msg,
                      out);
    else
        ck_assert_msg(!*out, "row %d: %s", _i, out);
    free(out);
    config_free(c);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("haproxy_check");

    tcase_add_checked_fixture(tc, kit_setup, kit_teardown);
    CHECK_ADD(tc, test_kit, test_environment, test_relative_path);
    CHECK_LOOP(tc, test_mistake, mistakes);
    CHECK_LOOP(tc, test_words, words);
    return check_run_case("haproxy_check", tc);
}
