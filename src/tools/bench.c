/* SPDX-License-Identifier: Apache-2.0 */
/* bench.c - spoa-bench: an SPOP load generator that talks to the agent the way
 * HAProxy does (HELLO, then pipelined NOTIFYs on many connections) and prints
 * decisions/s, latency percentiles and the allowed/blocked counts. */
#include "spop/spop.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/net.h"
#include "core/util.h"

#define BENCH_MAX_CONNS 1024
#define BENCH_MAX_PIPELINE 256
#define BENCH_BUF 65536

/* The largest NOTIFY send_notify() builds: the message name and path are
 * limited to BENCH_MAX_NAME bytes each (see parse_opts). */
#define BENCH_MAX_NAME 256
#define BENCH_FRAME_MAX 1024

struct bconn {
    int fd;
    uint32_t max_frame;
    uint64_t next_stream;
    unsigned inflight;
    uint64_t sent_at[BENCH_MAX_PIPELINE]; /* by stream id % pipeline */
    uint8_t in[BENCH_BUF];
    size_t in_len;
    /* NOTIFYs built and not written yet: a pipeline refill goes out in one
     * write(), as HAProxy batches the frames of one connection, rather than
     * one system call per frame, which cost the load generator more CPU
     * than the agent spent deciding. */
    uint8_t *out; /* pipeline * BENCH_FRAME_MAX bytes */
    size_t out_len;
    unsigned out_frames; /* their streams: the last out_frames before next_stream */
};

struct opts {
    const char *addr;
    struct net_addr target; /* addr, parsed */
    unsigned conns, pipeline, keys;
    uint64_t total;
    double duration;
    const char *message;
    const char *path;
    size_t message_len, path_len;
    double rate; /* decisions per second, paced; 0: as fast as the pipelines allow */
};

static uint64_t *lat;
static size_t nlat, caplat;
static uint64_t allowed, blocked, acks, errors;

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w == -1) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Read one whole frame (blocking socket) into c->in. */
static int read_frame(struct bconn *c, struct spop_frame *f)
{
    size_t used;
    for (;;) {
        int r = spop_frame_decode(c->in, c->in_len, BENCH_BUF - 4, f, &used);
        if (r == 0) {
            return (int)used;
        }
        if (r != SPOP_EAGAIN)
            return -1;
        ssize_t n = read(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len);
        if (n <= 0)
            return -1;
        c->in_len += (size_t)n;
    }
}

static int handshake(struct bconn *c)
{
    uint8_t buf[512], *start;
    struct spop_writer w = {buf, buf + sizeof(buf)};
    struct spop_data d;
    struct spop_frame f;
    struct spop_reader r;
    struct spop_str k;
    int used;

    spop_frame_begin(&w, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0, &start);
    d = spop_string("2.0", 3);
    spop_put_kv(&w, "supported-versions", &d);
    d = spop_uint(SPOP_DEFAULT_FRAME_SIZE);
    spop_put_kv(&w, "max-frame-size", &d);
    d = spop_string("pipelining", 10);
    spop_put_kv(&w, "capabilities", &d);
    d = spop_string("spoa-bench", 10);
    spop_put_kv(&w, "engine-id", &d);
    if (spop_frame_end(&w, start) < 0 || write_all(c->fd, buf, (size_t)(w.p - buf)) < 0)
        return -1;
    if ((used = read_frame(c, &f)) < 0 || f.type != SPOP_FRAME_AGENT_HELLO)
        return -1;
    c->max_frame = SPOP_DEFAULT_FRAME_SIZE;
    r.p = f.payload;
    r.end = f.payload + f.payload_len;
    while (spop_kv_next(&r, &k, &d) == 1)
        if (k.len == 14 && memcmp(k.ptr, "max-frame-size", 14) == 0)
            c->max_frame = (uint32_t)d.u.uint;
    memmove(c->in, c->in + used, c->in_len - (size_t)used);
    c->in_len -= (size_t)used;
    return 0;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
/* xorshift must not start at 0: it would stay there. */
static void rng_seed(uint64_t seed)
{
    rng_state = (seed + 1) * 0x9e3779b97f4a7c15ULL;
    if (!rng_state)
        rng_state = 1;
}

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* "key-" and k in decimal into key (at least 24 bytes); its length. snprintf
 * per frame was a visible part of the generator's CPU. */
static size_t format_key(char *key, uint64_t k)
{
    memcpy(key, "key-", 4);
    return 4 + util_u64_dec(key + 4, k);
}

/* Build one NOTIFY at the end of c->out; flush_notifies() writes it. */
static int send_notify(struct bconn *c, const struct opts *o)
{
    uint8_t *buf = c->out + c->out_len, *start;
    struct spop_writer w = {buf, buf + BENCH_FRAME_MAX};
    char key[32];
    uint64_t k = rng() % o->keys;
    uint64_t stream = c->next_stream++;
    struct spop_data d;
    size_t n = format_key(key, k);

    spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, stream, 1, &start);
    spop_put_str(&w, o->message, o->message_len);
    *w.p++ = 3; /* nb-args */
    spop_put_str(&w, "key", 3);
    d = spop_string(key, n);
    spop_put_data(&w, &d);
    spop_put_str(&w, "ip", 2);
    d.type = SPOP_DATA_IPV4;
    d.u.ip[0] = 10;
    d.u.ip[1] = (uint8_t)(k >> 16);
    d.u.ip[2] = (uint8_t)(k >> 8);
    d.u.ip[3] = (uint8_t)k;
    spop_put_data(&w, &d);
    spop_put_str(&w, "path", 4);
    d = spop_string(o->path, o->path_len);
    spop_put_data(&w, &d);
    if (spop_frame_end(&w, start) < 0)
        return -1;
    c->out_len += (size_t)(w.p - buf);
    c->out_frames++;
    c->inflight++;
    return 0;
}

/* Write the NOTIFYs built since the last call, stamping each with the time
 * it is sent (the latency runs from here to its ACK). */
static int flush_notifies(struct bconn *c, const struct opts *o)
{
    uint64_t now = util_now_us();

    if (c->out_len == 0)
        return 0;
    for (uint64_t s = c->next_stream - c->out_frames; s != c->next_stream; s++)
        c->sent_at[s % o->pipeline] = now;
    c->out_frames = 0;
    size_t len = c->out_len;
    c->out_len = 0;
    return write_all(c->fd, c->out, len);
}

static void record_ack(struct bconn *c, const struct spop_frame *f, const struct opts *o)
{
    struct spop_reader r = {f->payload, f->payload + f->payload_len};
    uint8_t act, scope;
    struct spop_str name;
    struct spop_data v;
    uint64_t now = util_now_us();

    if (nlat == caplat) {
        caplat = caplat ? caplat * 2 : 65536;
        lat = realloc(lat, caplat * sizeof(*lat));
        if (!lat) {
            fprintf(stderr, "spoa-bench: out of memory\n");
            exit(1);
        }
    }
    lat[nlat++] = now - c->sent_at[f->stream_id % o->pipeline];
    acks++;
    c->inflight--;
    /* The agent sets "blocked" first: the rest of the ACK is not read (the
     * load generator should cost the machine as little as it can). */
    while (spop_action_next(&r, &act, &scope, &name, &v) == 1) {
        if (name.len == 7 && memcmp(name.ptr, "blocked", 7) == 0) {
            if (v.u.sint)
                blocked++;
            else
                allowed++;
            break;
        }
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: spoa-bench [-a ADDR] [-c CONNS] [-p PIPELINE] [-n TOTAL | -d SECONDS]\n"
               "                  [-k KEYS] [-m MESSAGE] [-P PATH] [-r RATE] [-s SEED]\n"
               "  -a ADDR      agent address, host:port or unix:/path (127.0.0.1:12345)\n"
               "  -c CONNS     connections (8)\n"
               "  -p PIPELINE  NOTIFYs in flight per connection (20, as HAProxy)\n"
               "  -n TOTAL     decisions to make (100000)\n"
               "  -d SECONDS   run for this long instead of -n\n"
               "  -k KEYS      distinct client keys, chosen at random (1000)\n"
               "  -m MESSAGE   SPOE message name (check-rate)\n"
               "  -P PATH      value of the path arg (/api/bench)\n"
               "  -r RATE      send RATE decisions per second, paced over the connections\n"
               "               (light load: latency); at most PIPELINE in flight on each:\n"
               "               the ones due meanwhile go out as ACKs make room\n"
               "  -s SEED      seed of the key choice (a different set of keys)\n"
               "  -h, --help   print this help and exit\n");
}

/* Options into o. 0 to run, 1 to exit 0 (help printed), 2 on a usage error
 * (reported). */
static int parse_opts(int argc, char **argv, struct opts *o)
{
    int c;

    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};

    while ((c = getopt_long(argc, argv, "a:c:p:n:d:k:m:P:r:s:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'a':
            o->addr = optarg;
            break;
        case 'c':
            o->conns = (unsigned)atoi(optarg);
            break;
        case 'p':
            o->pipeline = (unsigned)atoi(optarg);
            break;
        case 'n':
            o->total = strtoull(optarg, NULL, 10);
            break;
        case 'd':
            o->duration = atof(optarg);
            break;
        case 'k':
            o->keys = (unsigned)atoi(optarg);
            break;
        case 'm':
            o->message = optarg;
            break;
        case 'P':
            o->path = optarg;
            break;
        case 'r':
            o->rate = atof(optarg);
            break;
        case 's':
            rng_seed(strtoull(optarg, NULL, 0));
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return 2;
        }
    }
    o->message_len = strlen(o->message);
    o->path_len = strlen(o->path);
    if (o->conns < 1 || o->conns > BENCH_MAX_CONNS || o->pipeline < 1 ||
        o->pipeline > BENCH_MAX_PIPELINE || o->keys < 1 || o->message_len > BENCH_MAX_NAME ||
        o->path_len > BENCH_MAX_NAME) {
        usage(stderr);
        return 2;
    }
    if (net_parse_addr(o->addr, 0, &o->target) == -1) {
        fprintf(stderr,
                "spoa-bench: bad address '%s' (expected host:port, [v6]:port or unix:/path)\n",
                o->addr);
        return 2;
    }
    return 0;
}

/* Connect and say HELLO on every connection. 0, or -1 (reported). */
static int open_conns(const struct opts *o, struct bconn *conns, struct pollfd *pfd)
{
    char err[512];

    for (unsigned i = 0; i < o->conns; i++) {
        conns[i].fd = net_connect(&o->target, err, sizeof(err));
        conns[i].next_stream = (uint64_t)i << 32;
        conns[i].out = malloc((size_t)o->pipeline * BENCH_FRAME_MAX);
        if (!conns[i].out) {
            fprintf(stderr, "spoa-bench: out of memory\n");
            return -1;
        }
        if (conns[i].fd < 0) {
            fprintf(stderr, "spoa-bench: cannot connect to %s\n", err);
            return -1;
        }
        if (handshake(&conns[i]) < 0) {
            fprintf(stderr, "spoa-bench: cannot connect to %s: %s\n", o->addr, strerror(errno));
            return -1;
        }
        pfd[i].fd = conns[i].fd;
        pfd[i].events = POLLIN;
    }
    return 0;
}

/* Read what bc has, record its ACKs, and (refill) keep its pipeline full
 * until the deadline (0: none). -1 when the connection is lost. */
static int serve_conn(const struct opts *o, struct bconn *bc, uint64_t *sent, int refill,
                      uint64_t deadline)
{
    size_t off = 0, used;
    struct spop_frame f;
    ssize_t n = read(bc->fd, bc->in + bc->in_len, sizeof(bc->in) - bc->in_len);

    if (n <= 0)
        return -1;
    bc->in_len += (size_t)n;
    while (spop_frame_decode(bc->in + off, bc->in_len - off, BENCH_BUF - 4, &f, &used) == 0) {
        if (f.type == SPOP_FRAME_ACK)
            record_ack(bc, &f, o);
        else if (f.type == SPOP_FRAME_AGENT_DISCONNECT) {
            /* the agent closes on purpose: say why (the tests read it) */
            struct spop_disconnect d;

            if (spop_disconnect_decode(&f, &d) == 0)
                fprintf(stderr, "spoa-bench: agent disconnected: status %" PRIu64 " \"%.*s\"\n",
                        d.status_code, (int)d.message.len, d.message.ptr);
            errno = 0;
            return -1;
        }
        off += used;
    }
    memmove(bc->in, bc->in + off, bc->in_len - off);
    bc->in_len -= off;
    int more = refill && (deadline ? util_now_us() < deadline : 1);
    while (more && bc->inflight < o->pipeline && *sent < o->total) {
        if (send_notify(bc, o) < 0)
            return -1;
        (*sent)++;
    }
    return flush_notifies(bc, o);
}

/* Milliseconds for poll() until t (rounded up: poll() never returns before
 * the decision due at t); 0 when t has passed. */
static int ms_until(uint64_t t, uint64_t now)
{
    return t > now ? (int)((t - now + 999) / 1000) : 0;
}

/* Paced (open loop): decision i is due at t0 + i / rate. Whatever is due goes
 * out at once, spread over the connections in turn, each taking what its
 * pipeline has room for, one write() per connection. With every pipeline
 * full the due decisions wait for ACKs and go out as soon as there is room,
 * so the run keeps the rate on average whenever the agent keeps up. Until the
 * total (or the deadline) is sent and every ACK is in. */
static void run_paced(struct opts *o, struct bconn *conns, struct pollfd *pfd)
{
    uint64_t sent = 0, t0 = util_now_us(), deadline = 0, progress = t0;
    unsigned next_conn = 0;

    if (o->duration > 0) {
        deadline = t0 + (uint64_t)(o->duration * 1e6);
        o->total = UINT64_MAX;
    }
    for (;;) {
        uint64_t now = util_now_us();
        int sending = sent < o->total && (!deadline || now < deadline);
        int wait_ms = 1000;

        if (acks == sent) {
            if (!sending)
                return;
            progress = now; /* nothing outstanding: nothing is late */
        } else if (now - progress > 5000000) {
            fprintf(stderr, "spoa-bench: no answer for 5 s (%" PRIu64 " of %" PRIu64 ")\n", acks,
                    sent);
            errors++;
            return;
        }
        if (sending) {
            double due_f = (double)(now - t0) * o->rate / 1e6 + 1;
            uint64_t due = due_f >= (double)o->total ? o->total : (uint64_t)due_f;
            unsigned full = 0; /* pipelines found full in a row */

            while (sent < due && full < o->conns) {
                struct bconn *bc = &conns[next_conn];
                next_conn = (next_conn + 1) % o->conns;
                if (bc->inflight >= o->pipeline) {
                    full++;
                    continue;
                }
                if (send_notify(bc, o) < 0)
                    goto io_error;
                sent++;
                full = 0;
            }
            for (unsigned i = 0; i < o->conns; i++)
                if (flush_notifies(&conns[i], o) < 0)
                    goto io_error;
            /* behind (every pipeline full): wake on an ACK; else at the next due */
            if (sent == due && sent < o->total)
                wait_ms = ms_until(t0 + (uint64_t)((double)sent * 1e6 / o->rate), now);
            if (deadline && ms_until(deadline, now) < wait_ms)
                wait_ms = ms_until(deadline, now);
        }
        uint64_t before = acks;
        if (poll(pfd, o->conns, wait_ms) < 0)
            goto io_error;
        for (unsigned i = 0; i < o->conns; i++) {
            if ((pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                serve_conn(o, &conns[i], &sent, 0, 0) < 0)
                goto io_error;
        }
        if (acks != before)
            progress = util_now_us();
    }
io_error:
    fprintf(stderr, "spoa-bench: connection lost: %s\n", strerror(errno));
    errors++;
}

/* Fill every pipeline, then answer ACKs with NOTIFYs until the total (or the
 * deadline) is reached and every ACK is in. The errors are counted. */
static void run(struct opts *o, struct bconn *conns, struct pollfd *pfd)
{
    uint64_t sent = 0, deadline = 0;

    if (o->rate > 0) {
        run_paced(o, conns, pfd);
        return;
    }
    if (o->duration > 0) {
        deadline = util_now_us() + (uint64_t)(o->duration * 1e6);
        o->total = UINT64_MAX;
    }
    for (unsigned i = 0; i < o->conns; i++) {
        for (unsigned j = 0; j < o->pipeline && sent < o->total; j++, sent++)
            if (send_notify(&conns[i], o) < 0)
                goto io_error;
        if (flush_notifies(&conns[i], o) < 0)
            goto io_error;
    }

    while (acks < sent) {
        if (poll(pfd, o->conns, 5000) <= 0) {
            fprintf(stderr, "spoa-bench: no answer for 5 s (%" PRIu64 " of %" PRIu64 ")\n", acks,
                    sent);
            errors++;
            return;
        }
        for (unsigned i = 0; i < o->conns; i++) {
            if ((pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                serve_conn(o, &conns[i], &sent, 1, deadline) < 0)
                goto io_error;
        }
    }
    return;
io_error:
    fprintf(stderr, "spoa-bench: connection lost: %s\n", strerror(errno));
    errors++;
}

static void report(const struct opts *o, uint64_t t0, uint64_t t1)
{
    double secs = (double)(t1 - t0) / 1e6;

    qsort(lat, nlat, sizeof(*lat), cmp_u64);
#define PCT(p) (nlat ? lat[(size_t)((double)(nlat - 1) * (p))] : 0)
    printf("decisions %" PRIu64 " in %.3f s: %.0f decisions/s (%u conns x %u pipelined, %u keys)\n",
           acks, secs, secs > 0 ? (double)acks / secs : 0, o->conns, o->pipeline, o->keys);
    printf("latency_us p50 %" PRIu64 " p99 %" PRIu64 " p99.9 %" PRIu64 " max %" PRIu64 "\n",
           PCT(0.50), PCT(0.99), PCT(0.999), nlat ? lat[nlat - 1] : 0);
#undef PCT
    printf("allowed %" PRIu64 " blocked %" PRIu64 " errors %" PRIu64 "\n", allowed, blocked,
           errors);
}

int main(int argc, char **argv)
{
    struct opts o = {.addr = "127.0.0.1:12345",
                     .conns = 8,
                     .pipeline = 20,
                     .keys = 1000,
                     .total = 100000,
                     .message = "check-rate",
                     .path = "/api/bench"};
    struct bconn *conns;
    struct pollfd *pfd;
    uint64_t t0, t1;
    int ret;

    if ((ret = parse_opts(argc, argv, &o)) != 0)
        return ret == 1 ? 0 : 2;
    conns = calloc(o.conns, sizeof(*conns));
    pfd = calloc(o.conns, sizeof(*pfd));
    if (!conns || !pfd)
        return 1;
    if (open_conns(&o, conns, pfd) < 0)
        return 1;
    t0 = util_now_us();
    run(&o, conns, pfd);
    t1 = util_now_us();
    report(&o, t0, t1);
    for (unsigned i = 0; i < o.conns; i++) {
        close(conns[i].fd);
        free(conns[i].out);
    }
    free(conns);
    free(pfd);
    free(lat);
    return errors ? 1 : 0;
}
