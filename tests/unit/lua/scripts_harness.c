/* SPDX-License-Identifier: Apache-2.0 */
/* scripts_harness.c - what the script tests share: a redis-server of their
 * own (or $REDIS_PORT), the scripts of lua/ loaded as the agent loads them,
 * calls by name, and an independent reading of a bucket. */
#include "scripts_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_util.h"
#include "store/store_reply.h"
#include "store/store_reply_check.h"

#ifndef BUILDDIR
#define BUILDDIR "."
#endif

#define SERVER_START_TRIES 10
#define SERVER_START_WAIT_MS 5000

const struct rule slow = {10, 10000, 10, 5000};

#define SCRIPT_NAME(NAME, name) [SCRIPT_##NAME] = #name,
const char *const script_name[NSCRIPTS] = {STORE_SCRIPTS(SCRIPT_NAME)};
#undef SCRIPT_NAME
char *script_text[NSCRIPTS];
size_t script_len[NSCRIPTS];
char script_sha[NSCRIPTS][41];

/* SCRIPTS_CALL=fcall (tests/unit/lua/scripts_fcall.sh): every call goes as FCALL
 * of the scripts' function library (lua/library.lua, as the agent loads it
 * with functions = on), not EVALSHA: the same tests, through the library's
 * wrappers. */
int scripts_fcall;
#define TEST_LIB "spoa_ratelimit_test"
static char *library_src;
static size_t library_len;

static void load_library(void)
{
    redisReply *r = cmd("FUNCTION LOAD REPLACE %b", library_src, library_len);
    ck_assert_msg(r->type == REDIS_REPLY_STRING, "FUNCTION LOAD: %s",
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
}

/* The file at path, after room bytes left for the caller (not NUL-terminated);
 * its length in *len. NULL, said on stderr, when it cannot be read. */
static char *read_whole(const char *path, size_t room, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        fprintf(stderr, "test_scripts: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = room + 4096, n;
    char *buf = malloc(cap);
    *len = room;
    while (buf != NULL && (n = fread(buf + *len, 1, cap - *len, fp)) > 0) {
        *len += n;
        if (*len == cap) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL)
                free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    fclose(fp);
    if (buf == NULL)
        fprintf(stderr, "test_scripts: out of memory reading %s\n", path);
    *len -= room;
    return buf;
}

/* lua/library.lua of the build, with the two lines the agent puts first. */
static int read_library(void)
{
    static const char head[] = "#!lua name=" TEST_LIB "\nlocal LIB = '" TEST_LIB "'\n";
    size_t n;

    library_src = read_whole(BUILDDIR "/lua/library.lua", sizeof(head) - 1, &n);
    if (!library_src)
        return -1;
    memcpy(library_src, head, sizeof(head) - 1);
    library_len = sizeof(head) - 1 + n;
    return 0;
}

int redis_port;
static pid_t server_pid = -1;
static pid_t owner_pid = -1; /* only this process stops the server (Check forks) */
redisContext *rc;

/* ---- time ------------------------------------------------------------------ */

double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void sleep_ms(double ms)
{
    if (ms <= 0)
        return;
    long long ns = (long long)(ms * 1e6);
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* ---- redis helpers ---------------------------------------------------------- */

redisReply *cmd(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "redis: %s", rc->errstr);
    return r;
}

long long cmd_int(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    ck_assert_msg(r != NULL, "redis: %s", rc->errstr);
    ck_assert_msg(r->type == REDIS_REPLY_INTEGER, "expected an integer reply, got type %d",
                  r->type);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* Redis server time, microseconds. */
long long redis_now_us(void)
{
    redisReply *r = cmd("TIME");
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_uint_eq(r->elements, 2);
    long long us =
        strtoll(r->element[0]->str, NULL, 10) * 1000000LL + strtoll(r->element[1]->str, NULL, 10);
    freeReplyObject(r);
    return us;
}

/* Integer value of a hash field, or -1 when the field is missing. */
double window_left_ms(long long period_ms)
{
    long long us = redis_now_us();
    return (double)(period_ms * 1000 - us % (period_ms * 1000)) / 1000.0;
}

/* The fields of a bucket, as HGETALL answers for a hash: a token bucket
 * no lease was claimed on is a string "1 t ts [bu]" (tb_exact.lua), read
 * here as the fields t, ts and bu; "2 t px" (the agent's plain SET of a new
 * key) as t and its creation time, PEXPIRETIME - px (lua/README.md). */
redisReply *bucket_fields(const char *key)
{
    return cmd("EVAL %s 1 %s",
               "if redis.call('TYPE', KEYS[1]).ok ~= 'string' then "
               "return redis.call('HGETALL', KEYS[1]) end "
               "local s = redis.call('GET', KEYS[1]) "
               "local t, ts, bu = string.match(s, '^1 (%S+) (%S+) ?(%S*)$') "
               "if t == nil then local px; t, px = string.match(s, '^2 (%S+) (%d+)$') "
               "ts, bu = string.format('%d', (redis.call('PEXPIRETIME', KEYS[1]) - px) * 1000), '' "
               "end "
               "if bu == '' then return {'t', t, 'ts', ts} end "
               "return {'t', t, 'ts', ts, 'bu', bu}",
               key);
}

long long hget_ll(const char *key, const char *field)
{
    redisReply *all = bucket_fields(key);
    const redisReply *f = all->type == REDIS_REPLY_ARRAY ? hash_field(all, field) : NULL;
    long long v = f ? strtoll(f->str, NULL, 10) : -1;
    freeReplyObject(all);
    return v;
}

/* HGET key field, of a hash only. */
long long hash_get_ll(const char *key, const char *field)
{
    redisReply *r = cmd("HGET %s %s", key, field);
    long long v = -1;
    if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

void mkkey(char *buf, size_t len, const char *name)
{
    static unsigned seq;
    snprintf(buf, len, "test_scripts:%ld:%u:%s", (long)getpid(), seq++, name);
}

/* ---- scripts ---------------------------------------------------------------- */

int read_scripts(void)
{
    const char *mode = getenv("SCRIPTS_CALL");
    scripts_fcall = mode && strcmp(mode, "fcall") == 0;
    if (scripts_fcall && read_library() < 0)
        return -1;
    const char *dir = getenv("LUA_DIR");
    if (dir == NULL || *dir == '\0')
        dir = BUILDDIR "/lua"; /* assembled there from lua/src/ (lua/assemble.sh) */
    for (int s = 0; s < NSCRIPTS; s++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s.lua", dir, script_name[s]);
        size_t len;
        char *buf = read_whole(path, 0, &len);
        if (buf == NULL)
            return -1;
        script_text[s] = buf;
        script_len[s] = len;
    }
    return 0;
}

void load_script(enum script s)
{
    redisReply *r = cmd("SCRIPT LOAD %b", script_text[s], script_len[s]);
    ck_assert_msg(r->type == REDIS_REPLY_STRING, "SCRIPT LOAD %s: %s", script_name[s],
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    ck_assert_uint_eq(r->len, 40);
    memcpy(script_sha[s], r->str, 41);
    freeReplyObject(r);
}

_Static_assert((int)CLAIM_ARGC <= MAX_ARGS && (int)RETURN_ARGC <= MAX_ARGS &&
                   (int)EXACT_ARGC_MAX <= MAX_ARGS,
               "every script's arguments fit");

/* EVALSHA sha 1 key args... (or FCALL), without any retry. */
redisReply *evalsha_raw(enum script s, const char *key, int nargs, const char *const *args)
{
    const char *argv[4 + MAX_ARGS];
    char fn[64];
    ck_assert_int_le(nargs, MAX_ARGS);
    snprintf(fn, sizeof(fn), "%s_%s", TEST_LIB, script_name[s]);
    argv[0] = scripts_fcall ? "FCALL" : "EVALSHA";
    argv[1] = scripts_fcall ? fn : script_sha[s];
    argv[2] = "1";
    argv[3] = key;
    for (int i = 0; i < nargs; i++)
        argv[4 + i] = args[i];
    redisReply *r = redisCommandArgv(rc, 4 + nargs, argv, NULL);
    ck_assert_msg(r != NULL, "redis: %s", rc->errstr);
    return r;
}

/* EVALSHA; on NOSCRIPT load the script again and retry once (as the agent does). */
redisReply *evalsha(enum script s, const char *key, int nargs, const char *const *args)
{
    redisReply *r = evalsha_raw(s, key, nargs, args);
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(r);
        load_script(s);
        r = evalsha_raw(s, key, nargs, args);
    } else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ERR Function not found", 22) == 0) {
        freeReplyObject(r);
        load_library();
        r = evalsha_raw(s, key, nargs, args);
    }
    if (r->type == REDIS_REPLY_ARRAY) {
        /* every reply a script gives passes the agent's check of it
         * (store_reply_check.h): none would take a real Redis down */
        struct store_result res = {0};
        store_reply_values(r, &res);
        const char *why = res.status != STORE_OK ? res.err
                                                 : store_reply_check((int)s, &res, r->elements,
                                                                     nargs, (char *const *)args);
        ck_assert_msg(why == NULL, "%s: a reply the agent rejects: %s", script_name[s], why);
    }
    return r;
}

void call_strs(enum script s, const char *key, int n, const char *const *args, long long *out,
               size_t nout)
{
    redisReply *r = evalsha(s, key, n, args);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "%s: %s", script_name[s],
                  r->type == REDIS_REPLY_ERROR ? r->str : "not an array");
    ck_assert_uint_eq(r->elements, nout);
    for (size_t i = 0; i < nout; i++)
        out[i] = r->element[i]->integer;
    freeReplyObject(r);
}

/* Call script s with [agent,] nums as ARGV; expect nout integers into out. */
void call_ints(enum script s, const char *key, const char *agent, const long long *nums, int nnums,
               long long *out, size_t nout)
{
    char buf[MAX_ARGS][24];
    const char *args[MAX_ARGS];
    int n = 0;
    if (agent != NULL)
        args[n++] = agent;
    for (int i = 0; i < nnums; i++) {
        snprintf(buf[i], sizeof(buf[i]), "%lld", nums[i]);
        args[n++] = buf[i];
    }
    redisReply *r = evalsha(s, key, n, args);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "%s: %s", script_name[s],
                  r->type == REDIS_REPLY_ERROR ? r->str : "not an array");
    ck_assert_uint_eq(r->elements, nout);
    for (size_t i = 0; i < nout; i++) {
        ck_assert_int_eq(r->element[i]->type, REDIS_REPLY_INTEGER);
        out[i] = r->element[i]->integer;
    }
    freeReplyObject(r);
}

void claim(enum script s, const char *key, const char *agent, const struct rule *ru, long long want,
           long long used, long long ret, long long *out)
{
    long long nums[] = {ru->limit, ru->period_ms, ru->burst, want, used, ret, ru->ttl_ms};
    call_ints(s, key, agent, nums, 7, out, R_N);
    ck_assert_int_ge(out[R_GRANTED], 0);
    ck_assert_int_le(out[R_GRANTED], want);
    ck_assert_int_ge(out[R_REMAINING], 0);
    ck_assert_int_ge(out[R_RETRY], 0);
    ck_assert_int_ge(out[R_RESET], 0);
    if (out[R_LEASE] > 0) /* sw: a lease may be 0 ms long in a window's last ms */
        ck_assert_int_gt(out[R_MINE], 0);
    else /* ...but then nothing is granted: it could not be spent */
        ck_assert_int_eq(out[R_GRANTED], 0);
    if (s == TB_CLAIM)
        ck_assert_int_eq(out[R_LEASE], out[R_MINE] > 0 ? ru->ttl_ms : 0);
}

void give_back(enum script s, const char *key, const char *agent, const struct rule *ru,
               long long used, long long *out)
{
    long long nums[] = {ru->limit, ru->period_ms, ru->burst, used};
    call_ints(s, key, agent, nums, 4, out, R_N);
    ck_assert_int_eq(out[R_GRANTED], 0);
    ck_assert_int_eq(out[R_LEASE], 0);
    ck_assert_int_eq(out[R_MINE], 0);
}

void exact(enum script s, const char *key, const struct rule *ru, long long n, long long *out)
{
    long long nums[] = {ru->limit, ru->period_ms, ru->burst, n};
    call_ints(s, key, NULL, nums, 4, out, X_N);
    ck_assert_int_ge(out[X_ALLOWED], 0);
    ck_assert_int_le(out[X_ALLOWED], 1);
    ck_assert_int_ge(out[X_RETRY], 0);
}

void reset(enum script s, const char *key, const struct rule *ru, long long *out)
{
    long long nums[] = {ru->limit, ru->period_ms, ru->burst};
    call_ints(s, key, NULL, nums, 3, out, Z_N);
    ck_assert_int_ge(out[Z_REMAINING], 0);
    ck_assert_int_ge(out[Z_HELD], 0);
    ck_assert_int_ge(out[Z_BEFORE], 0);
    ck_assert_int_le(out[Z_BEFORE], out[Z_REMAINING]); /* a reset never takes tokens */
}

/* ---- reading a bucket independently ----------------------------------------- */

const redisReply *hash_field(const redisReply *r, const char *name)
{
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, name) == 0)
            return r->element[i + 1];
    return NULL;
}

/* HGETALL key. sw: holdings count only when w:<agent> equals w. */
void read_state(const char *key, int sw, struct state *st)
{
    memset(st, 0, sizeof(*st));
    st->w = st->c = st->p = -1;
    redisReply *r = bucket_fields(key);
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    st->exists = r->elements > 0;
    const redisReply *v;
    if ((v = hash_field(r, "t")) != NULL) {
        st->has_t = 1;
        st->t = strtod(v->str, NULL);
    }
    if ((v = hash_field(r, "w")) != NULL)
        st->w = strtoll(v->str, NULL, 10);
    if ((v = hash_field(r, "c")) != NULL)
        st->c = strtoll(v->str, NULL, 10);
    if ((v = hash_field(r, "p")) != NULL)
        st->p = strtoll(v->str, NULL, 10);
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const char *name = r->element[i]->str;
        char other[256];
        if (strncmp(name, "h:", 2) == 0) {
            snprintf(other, sizeof(other), "%s:%s", sw ? "w" : "e", name + 2);
            const redisReply *o = hash_field(r, other);
            if (o == NULL) {
                st->orphans++;
                continue;
            }
            if (sw && strtoll(o->str, NULL, 10) != st->w)
                continue;
            st->held += strtoll(r->element[i + 1]->str, NULL, 10);
            st->holders++;
        } else if (strncmp(name, sw ? "w:" : "e:", 2) == 0) {
            snprintf(other, sizeof(other), "h:%s", name + 2);
            if (hash_field(r, other) == NULL)
                st->orphans++;
        }
    }
    freeReplyObject(r);
}

/* The token bucket invariant, read back from Redis: t + H <= b. */
void assert_tb_invariant(const char *key, long long burst, struct state *st)
{
    read_state(key, 0, st);
    ck_assert_msg(st->has_t, "bucket %s has no t", key);
    ck_assert_int_eq(st->orphans, 0);
    ck_assert_msg(st->t + (double)st->held <= (double)burst, "t %.17g + H %lld > b %lld", st->t,
                  st->held, burst);
}

/* ---- redis-server ----------------------------------------------------------- */

static redisContext *connect_port(int port)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c != NULL && c->err) {
        redisFree(c);
        c = NULL;
    }
    return c;
}

/* Whether the server on port answers and is process pid (not someone else's). */
static int server_is(int port, pid_t pid)
{
    redisContext *c = connect_port(port);
    if (c == NULL)
        return 0;
    int ok = 0;
    redisReply *r = redisCommand(c, "INFO server");
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "process_id:");
        ok = p != NULL && strtol(p + strlen("process_id:"), NULL, 10) == (long)pid;
    }
    if (r != NULL)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

void stop_server(void)
{
    if (server_pid > 0 && getpid() == owner_pid) {
        kill(server_pid, SIGTERM);
        waitpid(server_pid, NULL, 0);
        server_pid = -1;
    }
}

/* Start redis-server on a random free port in 20000-60000. Returns 0 or -1. */
int start_server(void)
{
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    owner_pid = getpid();
    for (int attempt = 0; attempt < SERVER_START_TRIES; attempt++) {
        int port = 20000 + rand() % 40001;
        char portbuf[16];
        snprintf(portbuf, sizeof(portbuf), "%d", port);
        pid_t pid = fork();
        if (pid == -1)
            return -1;
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the test */
            int fd = open("/dev/null", O_RDWR);
            if (fd != -1) {
                dup2(fd, STDIN_FILENO);
                dup2(fd, STDOUT_FILENO);
                dup2(fd, STDERR_FILENO);
            }
            execlp("redis-server", "redis-server", "--port", portbuf, "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--daemonize", "no", (char *)NULL);
            _exit(127);
        }
        for (int waited = 0; waited < SERVER_START_WAIT_MS; waited += 20) {
            if (server_is(port, pid)) {
                server_pid = pid;
                redis_port = port;
                return 0;
            }
            if (waitpid(pid, NULL, WNOHANG) == pid) {
                pid = -1; /* exited: port taken, or no redis-server */
                break;
            }
            sleep_ms(20);
        }
        if (pid > 0) {
            kill(pid, SIGTERM);
            waitpid(pid, NULL, 0);
        }
    }
    return -1;
}

/* ---- fixture ---------------------------------------------------------------- */

void setup(void)
{
    struct timeval tv = {5, 0};
    rc = redisConnectWithTimeout("127.0.0.1", redis_port, tv);
    ck_assert_msg(rc != NULL && !rc->err, "cannot connect to redis on port %d", redis_port);
    for (int s = 0; s < NSCRIPTS; s++)
        load_script((enum script)s);
    if (scripts_fcall)
        load_library();
}

void teardown(void)
{
    redisFree(rc);
    rc = NULL;
}

/* ---- randomness ------------------------------------------------------------- */

uint64_t rng = 0x9e3779b97f4a7c15ULL;

long long rnd_below(long long n)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    uint64_t v = rng * 0x2545f4914f6cdd1dULL;
    return n <= 0 ? 0 : (long long)((v >> 11) % (uint64_t)n);
}

/* ---- runner ----------------------------------------------------------------- */

TCase *scripts_tcase(const char *name)
{
    TCase *tc = tcase_create(name);

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    return tc;
}

/* Whether the server knows FUNCTION (Redis 7.0 and later). */
static int functions_supported(void)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis_port, tv);
    redisReply *r = c && !c->err ? redisCommand(c, "FUNCTION LIST LIBRARYNAME none") : NULL;
    int ok = r && r->type == REDIS_REPLY_ARRAY;

    if (r)
        freeReplyObject(r);
    if (c)
        redisFree(c);
    return ok;
}

int scripts_main(Suite *suite)
{
    if (read_scripts() != 0)
        return 1;
    const char *env = getenv("REDIS_PORT");
    if (env != NULL && *env != '\0') {
        redis_port = atoi(env);
    } else if (start_server() != 0) {
        fprintf(stderr, "test_scripts: cannot start redis-server; skipped\n");
        return 77; /* automake: skipped */
    }
    atexit(stop_server);
    if (scripts_fcall && !functions_supported()) {
        fprintf(stderr, "test_scripts: this redis-server has no FUNCTION (before 7.0); "
                        "skipped\n");
        return 77;
    }

    int status = check_run(suite);
    for (int s = 0; s < NSCRIPTS; s++)
        free(script_text[s]);
    stop_server();
    return status;
}
