/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - spoa-ratelimit: argv, and what runs before the agent does
 * (--check, the rule store's commands, --reset); then agent_run. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "autoconfig.h"
#include "config/config.h"
#include "config/config_access.h"
#include "config/haproxy_check.h"
#include "core/strbuf.h"
#include "http/reset_cli.h"
#include "rules_redis/rules_cli.h"

#define ERRBUF 8192

static void usage(FILE *f)
{
    fprintf(f, "usage: spoa-ratelimit -c FILE [--check [--print] [--haproxy HAPROXY.CFG]]\n"
               "       spoa-ratelimit -c FILE --push RULES [--message TEXT] [--if-version N]\n"
               "                      [--force]\n"
               "       spoa-ratelimit -c FILE --rules-history | --rollback N | --fleet\n"
               "       spoa-ratelimit -c FILE --rules-show N | --rules-diff A B\n"
               "       spoa-ratelimit -c FILE --reset RULE KEY\n"
               "       spoa-ratelimit --version | --help\n"
               "\n"
               "  -c, --config FILE   configuration file (INI)\n"
               "  -t, --check         validate FILE and exit: 0 valid, 1 invalid\n"
               "  -p, --print         with --check: print the effective configuration\n"
               "      --haproxy CFG   with --check: also check HAProxy's config CFG (and the\n"
               "                      SPOE file it names) against FILE: FILE:LINE messages,\n"
               "                      exit 1 when HAProxy would never ask the agent or never\n"
               "                      use its answer\n"
               "      --push RULES    check RULES ([rule:*] only) as --check does, make it the\n"
               "                      current rule set in FILE's Redis; prints its version\n"
               "      --message TEXT  with --push or --rollback: a note kept with the version\n"
               "      --if-version N  with --push or --rollback: only if N is still current\n"
               "      --force         with --push or --rollback: write even though agents run\n"
               "                      a higher version (the store lost it), numbered above it\n"
               "      --rules-history list the versions kept in Redis (* the current one)\n"
               "      --rollback N    make version N current again, as a new version\n"
               "      --fleet         list the live agents and the version each applied;\n"
               "                      exit 1 when one is off the current version\n"
               "      --rules-show N  print version N's rule text as stored (who, when and\n"
               "                      why on stderr)\n"
               "      --rules-diff A B  a unified diff of version A's text to version B's\n"
               "      --reset RULE KEY clear client KEY of RULE on every agent of the fleet\n"
               "                      (asks the agent on FILE's stats listener); prints how\n"
               "                      many agents confirmed\n"
               "  -v, --version       print the version and exit\n"
               "  -h, --help          print this help and exit\n");
}

static void print_errors(const char *err)
{
    fputs(err, stderr);
    if (*err && err[strlen(err) - 1] != '\n')
        fputc('\n', stderr);
}

/* --check --print: the effective configuration on stdout. */
static int print_config(const struct config *cfg)
{
    size_t len;
    char *text = config_render(cfg, &len);

    if (!text) {
        fprintf(stderr, "spoa-ratelimit: out of memory\n");
        return 1;
    }
    fwrite(text, 1, len, stdout);
    free(text);
    return 0;
}

/* haproxy_check's files: the whole file, NUL-terminated. */
static char *read_text(void *ctx, const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = NULL;
    size_t len = 0, got;
    char buf[8192];

    if (!f)
        return NULL;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
        char *p = realloc(text, len + got + 1);
        if (!p) {
            free(text);
            fclose(f);
            errno = ENOMEM;
            return NULL;
        }
        text = p;
        memcpy(text + len, buf, got);
        len += got;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed || !(text = text ? text : calloc(1, 1))) {
        free(text);
        errno = failed ? EIO : ENOMEM;
        return NULL;
    }
    text[len] = '\0';
    return text;
}

static const char *env_value(void *ctx, const char *name)
{
    return getenv(name);
}

/* --check --haproxy CFG: its findings on stderr; 0 when it has no error. */
static int check_haproxy(const struct config *cfg, const char *haproxy)
{
    struct haproxy_check_io io = {read_text, env_value, NULL};
    struct strbuf out = STRBUF_INIT;
    int warnings = 0, errors = haproxy_check(cfg, haproxy, &io, &out, &warnings);
    size_t len;
    char *text = strbuf_finish(&out, &len);

    if (errors < 0 || !text) {
        free(text);
        fprintf(stderr, "spoa-ratelimit: out of memory\n");
        return 1;
    }
    fputs(text, stderr);
    free(text);
    if (errors)
        fprintf(stderr,
                "%s: %d error%s: HAProxy would not ask this agent, or not use its "
                "answer\n",
                haproxy, errors, errors > 1 ? "s" : "");
    else
        printf("%s: OK (the agent is asked and its answer used%s)\n", haproxy,
               warnings ? "; see the warnings" : "");
    return errors ? 1 : 0;
}

/* A decimal version number (>= 0 for --if-version, >= 1 for --rollback). */
static int parse_version(const char *s, long long min, long long *out)
{
    char *end;

    errno = 0;
    *out = strtoll(s, &end, 10);
    return errno || end == s || *end || *out < min ? -1 : 0;
}

/* Read argv: the config path into *path, --check into *check (2 with
 * --print), --haproxy's file into *haproxy, a rule store command into *cli
 * (cli->op, or -1 for none). 0 to
 * go on; -1 when main is done and exits with *status (0 after --version or
 * --help, 2 after a usage error, which has been printed). */
static int parse_args(int argc, char **argv, const char **path, int *check, const char **haproxy,
                      struct rules_cli_args *cli, int *status)
{
    enum {
        OPT_PUSH = 256,
        OPT_MESSAGE,
        OPT_IF_VERSION,
        OPT_HISTORY,
        OPT_ROLLBACK,
        OPT_FLEET,
        OPT_HAPROXY,
        OPT_FORCE,
        OPT_SHOW,
        OPT_DIFF,
        OPT_RESET
    };
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check", no_argument, NULL, 't'},
        {"print", no_argument, NULL, 'p'},
        {"dump", no_argument, NULL, 'p'},
        {"version", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"push", required_argument, NULL, OPT_PUSH},
        {"message", required_argument, NULL, OPT_MESSAGE},
        {"if-version", required_argument, NULL, OPT_IF_VERSION},
        {"rules-history", no_argument, NULL, OPT_HISTORY},
        {"rollback", required_argument, NULL, OPT_ROLLBACK},
        {"fleet", no_argument, NULL, OPT_FLEET},
        {"haproxy", required_argument, NULL, OPT_HAPROXY},
        {"force", no_argument, NULL, OPT_FORCE},
        {"rules-show", required_argument, NULL, OPT_SHOW},
        {"rules-diff", required_argument, NULL, OPT_DIFF}, /* A; B follows it */
        {"reset", required_argument, NULL, OPT_RESET},
        {NULL, 0, NULL, 0},
    };
    int c, print = 0, ops = 0, bad = 0;

    cli->op = -1;
    cli->if_version = -1;
    while ((c = getopt_long(argc, argv, "c:tpvh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            *path = optarg;
            break;
        case 't':
            *check = 1;
            break;
        case 'p':
            print = 1;
            break;
        case 'v':
            printf("spoa-ratelimit %s\n", PACKAGE_VERSION);
            *status = 0;
            return -1;
        case 'h':
            usage(stdout);
            *status = 0;
            return -1;
        case OPT_PUSH:
            cli->op = RULES_CLI_PUSH;
            cli->rules = optarg;
            ops++;
            break;
        case OPT_MESSAGE:
            cli->message = optarg;
            break;
        case OPT_IF_VERSION:
            bad |= parse_version(optarg, 0, &cli->if_version) < 0;
            break;
        case OPT_HISTORY:
            cli->op = RULES_CLI_HISTORY;
            ops++;
            break;
        case OPT_FLEET:
            cli->op = RULES_CLI_FLEET;
            ops++;
            break;
        case OPT_HAPROXY:
            *haproxy = optarg;
            break;
        case OPT_FORCE:
            cli->force = 1;
            break;
        case OPT_RESET: /* --reset RULE KEY: KEY is the one operand */
            cli->op = RULES_CLI_RESET;
            cli->rules = optarg;
            ops++;
            break;
        case OPT_ROLLBACK:
            cli->op = RULES_CLI_ROLLBACK;
            bad |= parse_version(optarg, 1, &cli->rollback) < 0;
            ops++;
            break;
        case OPT_SHOW:
        case OPT_DIFF:
            cli->op = c == OPT_SHOW ? RULES_CLI_SHOW : RULES_CLI_DIFF;
            bad |= parse_version(optarg, 1, &cli->show[0]) < 0;
            ops++;
            break;
        default:
            usage(stderr);
            *status = 2;
            return -1;
        }
    }
    /* one command at a time; --message, --if-version and --force go with a write */
    bad |= ops > 1 || (ops && *check) ||
           ((cli->message || cli->if_version >= 0 || cli->force) && cli->op != RULES_CLI_PUSH &&
            cli->op != RULES_CLI_ROLLBACK);
    /* --rules-diff's B: the one operand (getopt moves operands last) */
    if (cli->op == RULES_CLI_DIFF && optind < argc)
        bad |= parse_version(argv[optind++], 1, &cli->show[1]) < 0;
    else if (cli->op == RULES_CLI_DIFF)
        bad = 1;
    if (cli->op == RULES_CLI_RESET && optind == argc - 1)
        cli->message = argv[optind++]; /* the KEY */
    else if (cli->op == RULES_CLI_RESET)
        bad = 1;
    if (!*path || optind != argc || ((print || *haproxy) && !*check) || bad) {
        usage(stderr);
        *status = 2;
        return -1;
    }
    cli->config = *path;
    if (print)
        *check = 2;
    return 0;
}

/* --check as another user than the unit's (root, typically): warn about
 * the files the agent reads at start that the service user could not, by
 * their mode bits (config_access.h). Said, not refused: the start itself
 * fails on such a file with "cannot read password_file". */
static void check_service_access(const char *path, const struct config *cfg)
{
    const struct {
        const char *what, *file;
    } files[] = {
        {"the configuration file", path},
        {"[redis] password_file", cfg->redis_password_file},
        {"[agent] stats_auth_file", cfg->stats_auth_file},
    };
    struct passwd *pw = getpwnam(CONFIG_SERVICE_USER);
    char why[PATH_MAX + 200];

    if (!pw || pw->pw_uid == geteuid())
        return; /* no such user: no unit to run as it; as it: the load read them */
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (!files[i].file ||
            config_user_can_read(files[i].file, CONFIG_SERVICE_USER, why, sizeof(why)) != 0)
            continue;
        int file = strncmp(why, "file ", 5) == 0; /* else a directory above it */
        fprintf(stderr, "%s: warning: %s %s: the unit (User=%s) cannot read it: %s%s%s%s%s%s\n",
                path, files[i].what, files[i].file, CONFIG_SERVICE_USER, why,
                file ? " (e.g. chgrp " CONFIG_SERVICE_USER " " : "", file ? files[i].file : "",
                file ? " && chmod 640 " : "", file ? files[i].file : "", file ? ")" : "");
    }
}

int main(int argc, char **argv)
{
    struct config *cfg;
    char err[ERRBUF];
    int check = 0, status;
    const char *path = NULL, *haproxy = NULL;
    struct rules_cli_args cli = {0};

    if (parse_args(argc, argv, &path, &check, &haproxy, &cli, &status) < 0)
        return status;
    if (cli.op == RULES_CLI_RESET)
        return reset_cli_run(cli.config, cli.rules, cli.message);
    if ((int)cli.op != -1)
        return rules_cli_run(&cli);

    if (config_load_file(path, &cfg, err, sizeof(err)) < 0) {
        print_errors(err);
        return 1;
    }
    if (check) {
        for (size_t i = 0; i < cfg->nrules; i++)
            if (!cfg->rules[i].nkeys)
                fprintf(stderr,
                        "%s:%u: warning: rule '%s' has no key: one bucket shared by every "
                        "client (a global limit)\n",
                        path, cfg->rules[i].line, cfg->rules[i].name);
        check_service_access(path, cfg);
        status = check == 2 ? print_config(cfg) : 0;
        if (check != 2)
            printf("%s: OK (%zu rule%s%s)\n", path, cfg->nrules, cfg->nrules == 1 ? "" : "s",
                   cfg->rules_source == RULES_SOURCE_REDIS
                       ? " in the file; [rules] source = redis: the fleet's version from Redis "
                         "is put in force over them"
                       : "");
        if (haproxy && check_haproxy(cfg, haproxy) != 0)
            status = 1;
        config_free(cfg);
        return status;
    }
    return agent_run(path, cfg);
}
