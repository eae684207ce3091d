/* SPDX-License-Identifier: Apache-2.0 */
/* sim.c - spoa-sim: simulate a fleet of agents leasing tokens from one
 * Redis, in virtual time, and say what it costs (Redis calls) and what it
 * gives (utilisation against an exact limiter, the bound kept). The rule and
 * [lease] settings go through the agent's own config parser and rule code,
 * so they mean exactly what they mean in an agent's INI file. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "rules/rules.h"
#include "tools/sim.h"
#include "tools/sim_svg.h"
#include "tools/sim_traffic.h"

#define MAX_SWEEP 64
#define ERRLEN 1024

/* The command line as given: the settings the agent's config parses stay
 * text until config_load_string() reads them. */
struct cli {
    unsigned agents;
    int agents_set, seconds_set;
    uint64_t keys;
    double zipf, skew, rps, seconds;
    char rate[64], burst[32], algorithm[32], interval[32], ttl[32], max_fraction[32];
    char rtt[32], redis_op[32], spike[96], tail[32], rate_leases[8], rate_ttl[32];
    char stall[96], timeout[32], share[32];
    unsigned regions;
    char global_rtt[32], global_down[96], global_restart[32], claimer_kill[96];
    char global_reserve[32];
    char cost[48], block_for[32], lease[8], cc[16], service[32]; /* sim_cost.c, sim_cc.c */
    uint64_t seed;
    const char *trace_path, *svg;
    int json;
    enum sim_policy policy;
    char sweep_name[32];
    char *sweep_vals[MAX_SWEEP];
    size_t nsweep;
};

static void usage(FILE *f)
{
    fputs("usage: spoa-sim [--agents N] [--keys K] [--zipf S | --uniform] [--skew F] [--rps R]\n"
          "                [--seconds T] [--rate N/DUR] [--burst B]\n"
          "                [--algorithm token-bucket|sliding-window|fixed-window] [--interval D] "
          "[--ttl D]\n"
          "                [--max-fraction F] [--rtt D] [--redis-op D] [--spike X,LEN,EVERY]\n"
          "                [--tail D] [--seed N] [--trace FILE] [--sweep NAME=V1,V2,...]\n"
          "                [--svg FILE] [--policy token|rate] [--rate-leases on|off]\n"
          "                [--rate-ttl D] [--stall START,LEN] [--timeout D] [--share F]\n"
          "                [--regions R] [--global-rtt D] [--global-down START:LEN] [--json]\n"
          "                [--cost N|MIN:MAX] [--block-for D] [--lease on|off]\n"
          "                [--concurrency N] [--service D]\n"
          "Simulates --agents agents running the real lease code against the real Lua\n"
          "scripts in virtual time, beside one exact bucket per key, and prints what the\n"
          "fleet cost in Redis calls and how close it came to the exact limiter.\n"
          "  --skew F            share of each key's traffic sent to one agent\n"
          "  --spike X,LEN,EVERY every EVERY, for LEN, the request rate is X times --rps\n"
          "  --redis-op D        Redis CPU per script operation (default 0: instant)\n"
          "  --stall START,LEN   at START, for LEN, Redis answers nothing (the connection\n"
          "                      stays open): calls fail after --timeout ([redis] timeout,\n"
          "                      default 100ms), decisions fall back to a backstop of\n"
          "                      --share ([fallback] share) per agent and key\n"
          "  --tail D            agents keep ticking for D after the last request\n"
          "  --policy P          token: the agent's token leases (default); rate: a model of\n"
          "                      rate leases written in the simulator only (see sim_rate.c)\n"
          "  --rate-leases on|off the agent's rate leases for warm keys ([lease] rate_leases;\n"
          "                      default off); --rate-ttl D: their [lease] rate_ttl (30s,\n"
          "                      at least 4 x ttl)\n"
          "  --regions R         one scope = global rule over R regions (--agents per\n"
          "                      region, each region its own Redis and one claimer),\n"
          "                      fed from a global Redis --global-rtt away (40ms); it\n"
          "                      refuses calls from START for LEN (--global-down),\n"
          "                      restarts empty at AT (--global-restart); --claimer-kill\n"
          "                      R:AT[:LEN]: region R's claimer dies at AT (sim_region_fail.c);\n"
          "                      --global-reserve F: [global] reserve (0)\n"
          "  --cost N|MIN:MAX    each request takes N tokens (uniform in MIN..MAX); the\n"
          "                      bound is checked in tokens\n"
          "  --block-for D       the rule's block_for: a denial blocks the key for D\n"
          "  --lease off         every decision one exact call (the rule's lease = off)\n"
          "  --concurrency N     the rule is algorithm = concurrency, limit N; each admitted\n"
          "                      request holds its slot for --service D (100ms)\n"
          "  --trace FILE        replay 'SECONDS KEY [AGENT]' lines instead\n"
          "  --sweep NAME=...    NAME: interval, ttl, max_fraction, agents, rps, rtt, skew, keys,\n"
          "                      rate_ttl, regions, global_rtt\n"
          "Durations: 250us, 0.3ms, 100ms, 1s, 1m (interval and ttl: whole ms).\n",
          f);
}

static int parse_spike(const char *s, struct sim_opts *o)
{
    char buf[96], *len, *every;
    snprintf(buf, sizeof(buf), "%s", s);
    if (!(len = strchr(buf, ',')))
        return -1;
    *len++ = '\0';
    if (!(every = strchr(len, ',')))
        return -1;
    *every++ = '\0';
    o->spike_factor = strtod(buf, NULL);
    if (!(o->spike_factor >= 1) || sim_parse_us(len, &o->spike_len_us) < 0 ||
        sim_parse_us(every, &o->spike_every_us) < 0 || o->spike_every_us == 0)
        return -1;
    return 0;
}

/* --global-down START:LEN (or START,LEN) */
static int parse_down(const char *s, struct sim_opts *o)
{
    char buf[96], *len;
    snprintf(buf, sizeof(buf), "%s", s);
    if (!(len = strpbrk(buf, ":,")))
        return -1;
    *len++ = '\0';
    if (sim_parse_us(buf, &o->global_down_start_us) < 0 ||
        sim_parse_us(len, &o->global_down_len_us) < 0 || o->global_down_len_us == 0)
        return -1;
    return 0;
}

static int parse_stall(const char *s, struct sim_opts *o)
{
    char buf[96], *len;
    snprintf(buf, sizeof(buf), "%s", s);
    if (!(len = strchr(buf, ',')))
        return -1;
    *len++ = '\0';
    if (sim_parse_us(buf, &o->stall_start_us) < 0 || sim_parse_us(len, &o->stall_len_us) < 0 ||
        o->stall_len_us == 0)
        return -1;
    return 0;
}

/* The options of one run: the rule and [lease] read by the agent's config
 * parser from an INI text made of them (every check the agent makes on its
 * file applies), the rule's parameters built by the agent's rule code. */
static int build(const struct cli *c, const struct sim_trace *trace, struct sim_opts *o, char *err,
                 size_t errlen)
{
    char ini[1280], cerr[ERRLEN];
    struct config *cfg;

    memset(o, 0, sizeof(*o));
    snprintf(ini, sizeof(ini),
             "[redis]\nurl = redis://127.0.0.1:6379\ntimeout = %s\n"
             "[fallback]\nmode = open\n%s%s%s"
             "[lease]\ninterval = %s\nttl = %s\nmax_fraction = %s\nrate_leases = %s\n"
             "%s%s%s"
             "[rule:sim]\nkey = key\nrate = %s\nalgorithm = %s\n%s%s%s%s%s%s",
             c->timeout, c->share[0] ? "share = " : "", c->share, c->share[0] ? "\n" : "",
             c->interval, c->ttl, c->max_fraction, c->rate_leases,
             c->rate_ttl[0] ? "rate_ttl = " : "", c->rate_ttl, c->rate_ttl[0] ? "\n" : "", c->rate,
             c->algorithm, c->burst[0] ? "burst = " : "", c->burst, c->burst[0] ? "\n" : "",
             c->block_for[0] ? "block_for = " : "", c->block_for, c->block_for[0] ? "\n" : "");
    if (config_load_string(ini, "options", &cfg, cerr, sizeof(cerr)) < 0) {
        /* "options:LINE: message\n...": the first message is enough */
        char *m = strstr(cerr, ": ");
        m = m ? m + 2 : cerr;
        m[strcspn(m, "\n")] = '\0';
        snprintf(err, errlen, "%s", m);
        return -1;
    }
    struct ruleset *rs = ruleset_new(cfg);
    if (!rs) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    o->algorithm = rs->params[0].algorithm;
    o->limit = rs->params[0].limit;
    o->period_ms = rs->params[0].period_us / 1000;
    o->burst = rs->params[0].burst;
    o->interval_ms = cfg->lease_interval_ms;
    o->ttl_ms = cfg->lease_ttl_ms;
    o->rate_ttl_ms = cfg->lease_rate ? cfg->lease_rate_ttl_ms : 0;
    o->max_fraction = cfg->lease_max_fraction;
    o->timeout_us = cfg->redis_timeout_ms * 1000;
    o->share = cfg->fallback_share;
    o->backstop = rs->backstop[0];
    o->block_ms = rs->params[0].block_ms;
    ruleset_unref(rs);
    if (sim_parse_us(c->service, &o->service_us) < 0)
        o->service_us = 0; /* refused with --concurrency */
    if (sim_models_opts(c->cost, c->lease, c->cc, o, err, errlen) < 0)
        return -1;

    o->agents = c->agents;
    o->keys = c->keys;
    o->zipf = c->zipf;
    o->skew = c->skew;
    o->rps = c->rps;
    o->seconds = c->seconds;
    o->seed = c->seed;
    o->trace = trace;
    o->policy = c->policy;
    if (sim_parse_us(c->rtt, &o->rtt_us) < 0 || sim_parse_us(c->redis_op, &o->redis_op_us) < 0 ||
        sim_parse_us(c->tail, &o->tail_us) < 0) {
        snprintf(err, errlen, "bad --rtt, --redis-op or --tail duration (e.g. 0.3ms, 250us)");
        return -1;
    }
    if (c->spike[0] && parse_spike(c->spike, o) < 0) {
        snprintf(err, errlen, "bad --spike: want FACTOR,LEN,EVERY (e.g. 5,2s,10s)");
        return -1;
    }
    if (c->stall[0] && (parse_stall(c->stall, o) < 0 || o->timeout_us == 0)) {
        snprintf(err, errlen, "bad --stall: want START,LEN (e.g. 2s,3s), with a --timeout");
        return -1;
    }
    o->regions = c->regions;
    if (o->regions && (sim_parse_us(c->global_rtt, &o->global_rtt_us) < 0 ||
                       (c->global_down[0] && parse_down(c->global_down, o) < 0))) {
        snprintf(err, errlen, "bad --global-rtt or --global-down (START:LEN, e.g. 5s:5s)");
        return -1;
    }
    if (c->global_reserve[0]) {
        char *end;
        o->global_reserve = strtod(c->global_reserve, &end);
        if (*end || !(o->global_reserve >= 0 && o->global_reserve <= 0.5) || !o->regions) {
            snprintf(err, errlen, "bad --global-reserve: a share in [0, 0.5], with --regions");
            return -1;
        }
    }
    if (o->regions && sim_region_fail_opts(c->global_restart, c->claimer_kill, o, err, errlen) < 0)
        return -1;
    if (o->regions && sim_region_check(o, trace != NULL, err, errlen) < 0)
        return -1;
    if (sim_models_check(o, err, errlen) < 0)
        return -1;
    if (o->stall_len_us && o->policy == SIM_POLICY_RATE) {
        snprintf(err, errlen, "--stall runs the agent's token leases: not with --policy rate");
        return -1;
    }
    if (trace) {
        o->keys = sim_trace_keys(trace);
        if (!c->agents_set && sim_trace_agents(trace) > 0)
            o->agents = sim_trace_agents(trace);
        if (!c->seconds_set)
            o->seconds = sim_trace_seconds(trace) + 0.001;
        o->rps = (double)sim_trace_requests(trace) / o->seconds; /* as reported */
    }
    if (o->agents < 1 || o->agents > 100000 || o->keys < 1 || o->keys > UINT32_MAX ||
        !(o->rps > 0) || !(o->seconds > 0) || o->seconds > 1e6 || !(o->skew >= 0) || o->skew > 1 ||
        !(o->zipf >= 0)) {
        snprintf(err, errlen,
                 "need --agents 1..100000, --keys >= 1, --rps > 0, --seconds > 0, "
                 "--skew in [0, 1], --zipf >= 0");
        return -1;
    }
    return 0;
}

/* Set the swept setting NAME to text v; its numeric value for the chart in
 * *x (durations in ms). */
static int set_swept(struct cli *c, const char *name, const char *v, double *x)
{
    uint64_t us;
    char *end;
    if (strcmp(name, "interval") == 0 || strcmp(name, "ttl") == 0 || strcmp(name, "rtt") == 0 ||
        strcmp(name, "rate_ttl") == 0 || strcmp(name, "global_rtt") == 0) {
        char *dst = name[0] == 'g'   ? c->global_rtt
                    : name[0] == 'i' ? c->interval
                    : name[0] == 't' ? c->ttl
                    : name[1] == 'a' ? c->rate_ttl
                                     : c->rtt;
        snprintf(dst, 32, "%s", v);
        if (sim_parse_us(v, &us) < 0)
            return -1;
        *x = (double)us / 1000;
        return 0;
    }
    errno = 0;
    *x = strtod(v, &end);
    if (end == v || *end || errno)
        return -1;
    if (strcmp(name, "max_fraction") == 0 || strcmp(name, "max-fraction") == 0)
        snprintf(c->max_fraction, sizeof(c->max_fraction), "%s", v);
    else if (strcmp(name, "agents") == 0)
        c->agents = (unsigned)*x, c->agents_set = 1;
    else if (strcmp(name, "rps") == 0)
        c->rps = *x;
    else if (strcmp(name, "skew") == 0)
        c->skew = *x;
    else if (strcmp(name, "keys") == 0)
        c->keys = (uint64_t)*x;
    else if (strcmp(name, "regions") == 0)
        c->regions = (unsigned)*x;
    else
        return -1;
    return 0;
}

static const char *x_label(const char *name)
{
    if (strcmp(name, "interval") == 0 || strcmp(name, "ttl") == 0 || strcmp(name, "rtt") == 0 ||
        strcmp(name, "global_rtt") == 0) {
        static char b[48];
        snprintf(b, sizeof(b), "%s (ms)", name);
        return b;
    }
    return name;
}

static int parse_sweep(struct cli *c, char *arg)
{
    char *eq = strchr(arg, '=');
    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof(c->sweep_name))
        return -1;
    *eq = '\0';
    snprintf(c->sweep_name, sizeof(c->sweep_name), "%s", arg);
    for (char *v = strtok(eq + 1, ","); v; v = strtok(NULL, ",")) {
        if (c->nsweep == MAX_SWEEP)
            return -1;
        c->sweep_vals[c->nsweep++] = v;
    }
    return c->nsweep ? 0 : -1;
}

static int parse_cli(int argc, char **argv, struct cli *c)
{
    enum {
        O_UNIFORM = 256,
        O_MAXF,
        O_REDIS_OP,
        O_SPIKE,
        O_JSON,
        O_SWEEP,
        O_SVG,
        O_TRACE,
        O_TAIL,
        O_POLICY,
        O_RATE_LEASES,
        O_RATE_TTL,
        O_STALL,
        O_TIMEOUT,
        O_SHARE,
        O_REGIONS,
        O_GLOBAL_RTT,
        O_GLOBAL_DOWN,
        O_GLOBAL_RESTART,
        O_CLAIMER_KILL,
        O_GLOBAL_RESERVE,
        O_COST,
        O_BLOCK_FOR,
        O_LEASE,
        O_CC,
        O_SERVICE
    };
    static const struct option opts[] = {{"agents", 1, 0, 'a'},
                                         {"keys", 1, 0, 'k'},
                                         {"zipf", 1, 0, 'z'},
                                         {"uniform", 0, 0, O_UNIFORM},
                                         {"skew", 1, 0, 'S'},
                                         {"rps", 1, 0, 'r'},
                                         {"seconds", 1, 0, 't'},
                                         {"rate", 1, 0, 'R'},
                                         {"burst", 1, 0, 'b'},
                                         {"algorithm", 1, 0, 'A'},
                                         {"interval", 1, 0, 'i'},
                                         {"ttl", 1, 0, 'T'},
                                         {"max-fraction", 1, 0, O_MAXF},
                                         {"rtt", 1, 0, 'L'},
                                         {"redis-op", 1, 0, O_REDIS_OP},
                                         {"spike", 1, 0, O_SPIKE},
                                         {"seed", 1, 0, 's'},
                                         {"trace", 1, 0, O_TRACE},
                                         {"sweep", 1, 0, O_SWEEP},
                                         {"svg", 1, 0, O_SVG},
                                         {"json", 0, 0, O_JSON},
                                         {"tail", 1, 0, O_TAIL},
                                         {"policy", 1, 0, O_POLICY},
                                         {"help", 0, 0, 'h'},
                                         {"rate-leases", 1, 0, O_RATE_LEASES},
                                         {"rate-ttl", 1, 0, O_RATE_TTL},
                                         {"stall", 1, 0, O_STALL},
                                         {"timeout", 1, 0, O_TIMEOUT},
                                         {"share", 1, 0, O_SHARE},
                                         {"regions", 1, 0, O_REGIONS},
                                         {"global-rtt", 1, 0, O_GLOBAL_RTT},
                                         {"global-down", 1, 0, O_GLOBAL_DOWN},
                                         {"global-restart", 1, 0, O_GLOBAL_RESTART},
                                         {"claimer-kill", 1, 0, O_CLAIMER_KILL},
                                         {"global-reserve", 1, 0, O_GLOBAL_RESERVE},
                                         {"cost", 1, 0, O_COST},
                                         {"block-for", 1, 0, O_BLOCK_FOR},
                                         {"lease", 1, 0, O_LEASE},
                                         {"concurrency", 1, 0, O_CC},
                                         {"service", 1, 0, O_SERVICE},
                                         {0, 0, 0, 0}};
    int ch;

#define COPY(dst) snprintf(dst, sizeof(dst), "%s", optarg)
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'a':
            c->agents = (unsigned)strtoul(optarg, NULL, 10), c->agents_set = 1;
            break;
        case 'k':
            c->keys = strtoull(optarg, NULL, 10);
            break;
        case 'z':
            c->zipf = strtod(optarg, NULL);
            break;
        case O_UNIFORM:
            c->zipf = 0;
            break;
        case 'S':
            c->skew = strtod(optarg, NULL);
            break;
        case 'r':
            c->rps = strtod(optarg, NULL);
            break;
        case 't':
            c->seconds = strtod(optarg, NULL), c->seconds_set = 1;
            break;
        case 'R':
            COPY(c->rate);
            break;
        case 'b':
            COPY(c->burst);
            break;
        case 'A':
            COPY(c->algorithm);
            break;
        case 'i':
            COPY(c->interval);
            break;
        case 'T':
            COPY(c->ttl);
            break;
        case O_MAXF:
            COPY(c->max_fraction);
            break;
        case 'L':
            COPY(c->rtt);
            break;
        case O_REDIS_OP:
            COPY(c->redis_op);
            break;
        case O_SPIKE:
            COPY(c->spike);
            break;
        case O_TAIL:
            COPY(c->tail);
            break;
        case O_RATE_LEASES:
            COPY(c->rate_leases);
            break;
        case O_RATE_TTL:
            COPY(c->rate_ttl);
            break;
        case O_STALL:
            COPY(c->stall);
            break;
        case O_TIMEOUT:
            COPY(c->timeout);
            break;
        case O_SHARE:
            COPY(c->share);
            break;
        case O_REGIONS:
            c->regions = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case O_GLOBAL_RTT:
            COPY(c->global_rtt);
            break;
        case O_GLOBAL_DOWN:
            COPY(c->global_down);
            break;
        case O_GLOBAL_RESTART:
            COPY(c->global_restart);
            break;
        case O_CLAIMER_KILL:
            COPY(c->claimer_kill);
            break;
        case O_GLOBAL_RESERVE:
            COPY(c->global_reserve);
            break;
        case O_COST:
            COPY(c->cost);
            break;
        case O_BLOCK_FOR:
            COPY(c->block_for);
            break;
        case O_LEASE:
            COPY(c->lease);
            break;
        case O_CC:
            COPY(c->cc);
            break;
        case O_SERVICE:
            COPY(c->service);
            break;
        case O_POLICY:
            if (strcmp(optarg, "token") != 0 && strcmp(optarg, "rate") != 0) {
                fprintf(stderr, "spoa-sim: --policy: token or rate\n");
                return -1;
            }
            c->policy = optarg[0] == 'r' ? SIM_POLICY_RATE : SIM_POLICY_TOKEN;
            break;
        case 's':
            c->seed = strtoull(optarg, NULL, 10);
            break;
        case O_TRACE:
            c->trace_path = optarg;
            break;
        case O_SWEEP:
            if (parse_sweep(c, optarg) < 0) {
                fprintf(stderr, "spoa-sim: bad --sweep: want NAME=V1,V2,... (at most %d)\n",
                        MAX_SWEEP);
                return -1;
            }
            break;
        case O_SVG:
            c->svg = optarg;
            break;
        case O_JSON:
            c->json = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
#undef COPY
    if (optind < argc) {
        fprintf(stderr, "spoa-sim: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* --svg FILE is opened relative to the current directory (as any path):
 * the commands of doc/sizing.md that redraw doc/'s charts name doc/NAME.svg
 * and work from the source tree only. Said before the sweep runs (minutes),
 * not after it: 0 when FILE's directory exists and is writable, else -1 with
 * a message naming the directory and where it was looked for. */
static int svg_dir_check(const char *svg)
{
    char dir[PATH_MAX], cwd[PATH_MAX];
    const char *slash = strrchr(svg, '/');
    struct stat st;

    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == svg)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - svg), svg);
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(dir, W_OK | X_OK) == 0)
        return 0;
    int missing = stat(dir, &st) == -1 || !S_ISDIR(st.st_mode);
    if (!getcwd(cwd, sizeof(cwd)))
        snprintf(cwd, sizeof(cwd), "?");
    int rel = svg[0] != '/';
    fprintf(stderr,
            "spoa-sim: --svg %s: %s %s%s%s%s; give a directory that exists (e.g. --svg %s)\n", svg,
            missing ? "no directory" : "cannot write to directory", dir, rel ? " in " : "",
            rel ? cwd : "", rel ? " (the path is relative to the current directory)" : "",
            slash ? slash + 1 : svg);
    return -1;
}

int main(int argc, char **argv)
{
    /* The seed scenario: 20 agents, 10,000 API keys, Zipf 1.1, 100/1m burst
     * 20, [lease] defaults, 100k requests/s, a 0.3 ms round trip. */
    struct cli c = {.agents = 20,
                    .keys = 10000,
                    .zipf = 1.1,
                    .rps = 100000,
                    .seconds = 10,
                    .rate = "100/1m",
                    .burst = "20",
                    .algorithm = "token-bucket",
                    .interval = "100ms",
                    .ttl = "1s",
                    .max_fraction = "0.1",
                    .rtt = "0.3ms",
                    .redis_op = "0us",
                    .tail = "0us",
                    .rate_leases = "off",
                    .timeout = "100ms",
                    .global_rtt = "40ms",
                    .service = "100ms",
                    .seed = 1};
    struct sim_trace *trace = NULL;
    char err[ERRLEN];
    struct sim_opts o[MAX_SWEEP];
    struct sim_result r[MAX_SWEEP];
    double x[MAX_SWEEP];
    size_t n = 0;
    int rc = 0;

    if (parse_cli(argc, argv, &c) < 0)
        return 2;
    if (c.svg && !c.nsweep) {
        fprintf(stderr, "spoa-sim: --svg draws a sweep: give --sweep too\n");
        return 2;
    }
    if (c.svg && svg_dir_check(c.svg) < 0)
        return 2;
    if (c.trace_path && !(trace = sim_trace_load(c.trace_path, err, sizeof(err)))) {
        fprintf(stderr, "spoa-sim: %s\n", err);
        return 1;
    }
    static const char *const sweepable[] = {"interval", "ttl",      "max_fraction", "max-fraction",
                                            "agents",   "rps",      "rtt",          "skew",
                                            "keys",     "rate_ttl", "regions",      "global_rtt"};
    int known = !c.nsweep;
    for (size_t i = 0; i < sizeof(sweepable) / sizeof(sweepable[0]); i++)
        known |= strcmp(c.sweep_name, sweepable[i]) == 0;
    if (!known) {
        fprintf(stderr,
                "spoa-sim: --sweep: unknown setting '%s' (interval, ttl, max_fraction, "
                "agents, rps, rtt, skew, keys, rate_ttl, regions, global_rtt)\n",
                c.sweep_name);
        sim_trace_free(trace);
        return 2;
    }
    size_t runs = c.nsweep ? c.nsweep : 1;
    for (n = 0; n < runs; n++) {
        const char *val = c.nsweep ? c.sweep_vals[n] : "-";
        if (c.nsweep && set_swept(&c, c.sweep_name, val, &x[n]) < 0) {
            fprintf(stderr, "spoa-sim: bad --sweep %s value '%s'\n", c.sweep_name, val);
            rc = 2;
            break;
        }
        if (build(&c, trace, &o[n], err, sizeof(err)) < 0 ||
            sim_run(&o[n], &r[n], err, sizeof(err)) < 0) {
            fprintf(stderr, "spoa-sim: %s\n", err);
            rc = 1;
            break;
        }
        /* with a stall, fallbacks are what it measures (checked below) */
        if (r[n].redis_errors || (r[n].fallbacks && !o[n].stall_len_us)) {
            fprintf(stderr,
                    "spoa-sim: %llu script calls failed (the first: %s), %llu "
                    "decisions fell back\n",
                    (unsigned long long)r[n].redis_errors,
                    r[n].redis_errors ? r[n].redis_error : "-", (unsigned long long)r[n].fallbacks);
            rc = 3;
        }
        if (c.json) {
            sim_report_json(&o[n], &r[n], c.nsweep ? c.sweep_name : NULL, val);
        } else {
            if (n == 0)
                sim_report_head(c.nsweep ? c.sweep_name : NULL);
            sim_report_row(&o[n], &r[n], val);
            if (o[n].stall_len_us)
                sim_stall_print(&o[n], &r[n]);
            if (o[n].regions)
                sim_region_print(&o[n], &r[n]);
            sim_models_print(&o[n], &r[n]);
        }
        const struct sim_stall *st = &r[n].stall;
        if (o[n].stall_len_us && !(st->backstop_worst_excess <= 1e-9)) {
            fprintf(stderr,
                    "spoa-sim: during the stall the fallback admitted %.3f requests "
                    "more than its backstop b' + r'*T\n",
                    st->backstop_worst_excess);
            rc = 3;
        }
        if ((o[n].regions && sim_region_verdict(&o[n], &r[n]) < 0) ||
            sim_models_verdict(&o[n], &r[n]) < 0)
            rc = 3;
        /* asserted for token buckets (b + r*T) and fixed windows (2N + r*T: N
         * per window); a sliding window's estimate is not exact */
        int bounded = o[n].algorithm != BUCKET_SLIDING_WINDOW;
        if (o[n].stall_len_us && bounded && !(st->outside_worst_window_excess <= 1e-9)) {
            fprintf(stderr,
                    "spoa-sim: outside the stall the bound b + r*T was exceeded by "
                    "%.3f requests\n",
                    st->outside_worst_window_excess);
            rc = 3;
        } else if (r[n].worst_window_excess > 1e-9 && bounded && !o[n].stall_len_us &&
                   !o[n].global_down_len_us && !o[n].global_restart) { /* (their allowance) */
            fprintf(stderr, "spoa-sim: the bound b + r*T was exceeded by %.3f requests\n",
                    r[n].worst_window_excess);
            rc = 3;
        }
    }
    if (rc == 0 && c.svg) {
        char title[256], agents[64] = "", keys[48] = "", rps[48] = "";
        const char *sw = c.sweep_name;
        if (o[0].regions) /* (agents per region) */
            snprintf(agents, sizeof(agents), "%u agents/region, global RTT %gms, ", o[0].agents,
                     (double)o[0].global_rtt_us / 1e3);
        else if (strcmp(sw, "agents") != 0)
            snprintf(agents, sizeof(agents), "%u agents, ", o[0].agents);
        if (strcmp(sw, "keys") != 0 && o[0].zipf > 0)
            snprintf(keys, sizeof(keys), "%llu keys (Zipf %g), ", (unsigned long long)o[0].keys,
                     o[0].zipf);
        else if (strcmp(sw, "keys") != 0)
            snprintf(keys, sizeof(keys), "%llu keys (uniform), ", (unsigned long long)o[0].keys);
        if (strcmp(sw, "rps") != 0)
            snprintf(rps, sizeof(rps), "%g req/s, ", o[0].rps);
        snprintf(title, sizeof(title), "spoa-sim%s: %s%s%srate %s burst %s",
                 c.policy == SIM_POLICY_RATE ? " (rate-lease model)" : "", agents, keys, rps,
                 c.rate, c.burst[0] ? c.burst : "N");
        if (sim_svg_write(c.svg, title, x_label(c.sweep_name), x, r, n) < 0) {
            fprintf(stderr, "spoa-sim: %s: %s\n", c.svg, strerror(errno));
            rc = 1;
        }
    }
    sim_trace_free(trace);
    return rc;
}
