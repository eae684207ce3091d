/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_main.h - the standalone driver of a fuzz target (built with
 * -DFUZZ_STANDALONE, without libFuzzer): runs the target's seeds and
 * pseudo-random mutations of them as a regression test in "make check",
 * writes the seed corpus (-d DIR), replays saved inputs (FILE...). A failing
 * input is printed in hex and saved to FUZZ_NAME-crash.bin.
 *
 * Include it once, at the end of the target, after defining:
 *   FUZZ_NAME          "fuzz_xxx_smoke", for messages and the crash file
 *   FUZZ_ITERATIONS    mutations run by default
 *   FUZZ_MAX_INPUT     largest input the mutations build
 *   static size_t fuzz_nseeds(void);
 *   static size_t fuzz_seed(size_t k, uint8_t *buf);  seed k into FUZZ_MAX_INPUT bytes
 *   static const char *const fuzz_dict[]; FUZZ_NDICT   tokens the mutations insert
 *   static void fuzz_summary(void);                    printed at the end
 * A target whose inputs have a structure the byte edits below should keep
 * (fuzz_spop.c: a mode and config head, captured frames to insert) defines
 * FUZZ_OWN_MUTATE and, after including this file, its own
 *   static size_t fuzz_mutate(uint64_t *s, uint8_t *buf, size_t len);
 * drawing from fuzz_rnd(s), with the edits fuzz_delete_range() and
 * fuzz_copy_range() as it likes; it needs no fuzz_dict then. fuzz_report_input() may be called by
 * the target before it aborts (ASan's death callback does not run on abort()).
 */
#ifndef FUZZ_MAIN_H
#define FUZZ_MAIN_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_CRASH_FILE FUZZ_NAME "-crash.bin"
#ifndef FUZZ_MAX_MUTATIONS
#define FUZZ_MAX_MUTATIONS 8 /* edits of one round at the most */
#endif
#define FUZZ_DEFAULT_SEED 0x5eed0f5b0a11ULL

static const uint8_t *fuzz_cur_data;
static size_t fuzz_cur_len;

extern void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

/* Async-signal-safe: write(2) only. */
static void fuzz_report_input(void)
{
    static const char hexd[] = "0123456789abcdef";
    static const char head[] = FUZZ_NAME ": failing input (also in " FUZZ_CRASH_FILE "), hex:\n";
    char line[80];
    int fd;

    if (!fuzz_cur_data)
        return;
    (void)!write(2, head, sizeof(head) - 1);
    for (size_t i = 0; i < fuzz_cur_len; i += 32) {
        size_t n = 0;
        for (size_t j = i; j < fuzz_cur_len && j < i + 32; j++) {
            line[n++] = hexd[fuzz_cur_data[j] >> 4];
            line[n++] = hexd[fuzz_cur_data[j] & 15];
        }
        line[n++] = '\n';
        (void)!write(2, line, n);
    }
    fd = open(FUZZ_CRASH_FILE, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd != -1) {
        (void)!write(fd, fuzz_cur_data, fuzz_cur_len);
        close(fd);
    }
    fuzz_cur_data = NULL; /* once */
}

static void fuzz_on_signal(int sig)
{
    fuzz_report_input();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void fuzz_install_reporter(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

    if (__sanitizer_set_death_callback) {
        __sanitizer_set_death_callback(fuzz_report_input);
        return;
    }
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        signal(sigs[i], fuzz_on_signal);
}

/* From an exact-size heap copy, so that ASan sees a read past the end. */
static void fuzz_run_one(const uint8_t *data, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);

    if (!copy) {
        perror(FUZZ_NAME);
        exit(2);
    }
    memcpy(copy, data, len);
    fuzz_cur_data = copy;
    fuzz_cur_len = len;
    LLVMFuzzerTestOneInput(copy, len);
    fuzz_cur_data = NULL;
    free(copy);
}

static uint64_t fuzz_rnd(uint64_t *s)
{
    /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* Delete 1 to 16 bytes at pos; returns the new length. */
static size_t fuzz_delete_range(uint64_t *s, uint8_t *buf, size_t len, size_t pos)
{
    size_t d = len ? 1 + (size_t)(fuzz_rnd(s) % (len - pos < 16 ? len - pos : 16)) : 0;

    memmove(buf + pos, buf + pos + d, len - pos - d);
    return len - d;
}

/* Copy 1 to 64 bytes from elsewhere in buf over pos (the length stays). */
static void fuzz_copy_range(uint64_t *s, uint8_t *buf, size_t len, size_t pos)
{
    size_t from = len ? (size_t)(fuzz_rnd(s) % len) : 0;
    size_t d = 1 + (size_t)(fuzz_rnd(s) % 64);

    if (d > len - from)
        d = len - from;
    if (d > len - pos)
        d = len - pos;
    memmove(buf + pos, buf + from, d);
}

#ifdef FUZZ_OWN_MUTATE
static size_t fuzz_mutate(uint64_t *s, uint8_t *buf, size_t len);
#else
static size_t fuzz_insert(uint8_t *buf, size_t len, size_t pos, const void *p, size_t n)
{
    if (len + n > FUZZ_MAX_INPUT)
        return len;
    memmove(buf + pos + n, buf + pos, len - pos);
    memcpy(buf + pos, p, n);
    return len + n;
}

/* One to FUZZ_MAX_MUTATIONS random edits; returns the new length. */
static size_t fuzz_mutate(uint64_t *s, uint8_t *buf, size_t len)
{
    static const uint8_t interesting[] = {0x00, 0x01, 0x09, 0x0a, 0x0d, 0x20, 0x22,
                                          0x2d, 0x30, 0x39, 0x3a, 0x3b, 0x3d, 0x5b,
                                          0x5d, 0x7b, 0x7d, 0x7f, 0x80, 0xff};
    unsigned n = 1 + (unsigned)(fuzz_rnd(s) % FUZZ_MAX_MUTATIONS);

    for (unsigned m = 0; m < n; m++) {
        size_t pos = len ? (size_t)(fuzz_rnd(s) % len) : 0;

        switch (fuzz_rnd(s) % 7) {
        case 0:
            if (len)
                buf[pos] ^= (uint8_t)(1u << (fuzz_rnd(s) % 8));
            break;
        case 1:
            if (len)
                buf[pos] = interesting[fuzz_rnd(s) % sizeof(interesting)];
            break;
        case 2: {
            uint8_t b = (uint8_t)fuzz_rnd(s);
            len = fuzz_insert(buf, len, pos, &b, 1);
            break;
        }
        case 3:
            len = fuzz_delete_range(s, buf, len, pos);
            break;
        case 4:
            fuzz_copy_range(s, buf, len, pos);
            break;
        default: { /* a token of the input's language */
            const char *tok = fuzz_dict[fuzz_rnd(s) % FUZZ_NDICT];
            len = fuzz_insert(buf, len, pos, tok, strlen(tok));
            break;
        }
        }
    }
    return len;
}
#endif /* FUZZ_OWN_MUTATE */

static int fuzz_dump_seeds(const char *dir)
{
    static uint8_t buf[FUZZ_MAX_INPUT];
    char path[4096];

    if (mkdir(dir, 0755) == -1 && errno != EEXIST) {
        fprintf(stderr, FUZZ_NAME ": %s: %s\n", dir, strerror(errno));
        return 1;
    }
    for (size_t k = 0; k < fuzz_nseeds(); k++) {
        size_t len = fuzz_seed(k, buf);
        FILE *f;

        snprintf(path, sizeof(path), "%s/seed-%03zu", dir, k);
        if (!(f = fopen(path, "wb")) || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, FUZZ_NAME ": %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    printf(FUZZ_NAME ": %zu seeds written to %s\n", fuzz_nseeds(), dir);
    return 0;
}

static int fuzz_replay_file(const char *path)
{
    static uint8_t buf[1 << 20];
    FILE *f = fopen(path, "rb");
    size_t len;

    if (!f) {
        fprintf(stderr, FUZZ_NAME ": %s: %s\n", path, strerror(errno));
        return 1;
    }
    len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    fuzz_run_one(buf, len);
    printf(FUZZ_NAME ": %s: %zu bytes, ok\n", path, len);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned long long iterations = FUZZ_ITERATIONS, seed = FUZZ_DEFAULT_SEED;
    static uint8_t buf[FUZZ_MAX_INPUT];
    const char *dir = NULL;
    uint64_t s;
    int opt, rc = 0;

    while ((opt = getopt(argc, argv, "n:s:d:h")) != -1) {
        switch (opt) {
        case 'n':
            iterations = strtoull(optarg, NULL, 0);
            break;
        case 's':
            seed = strtoull(optarg, NULL, 0);
            break;
        case 'd':
            dir = optarg;
            break;
        default:
            fprintf(stderr,
                    "usage: " FUZZ_NAME " [-n ITERATIONS] [-s SEED] [-d CORPUS_DIR] [FILE...]\n"
                    "  runs the seeds and ITERATIONS mutations of them (default %d);\n"
                    "  -d writes the seed corpus into CORPUS_DIR and exits;\n"
                    "  FILE... runs each file as one input (to replay a crash)\n",
                    FUZZ_ITERATIONS);
            return 2;
        }
    }
    if (dir)
        return fuzz_dump_seeds(dir);
    fuzz_install_reporter();
    if (optind < argc) {
        for (int i = optind; i < argc; i++)
            rc |= fuzz_replay_file(argv[i]);
        return rc;
    }
    for (size_t k = 0; k < fuzz_nseeds(); k++)
        fuzz_run_one(buf, fuzz_seed(k, buf));
    s = seed ? seed : 1;
    for (unsigned long long i = 0; i < iterations; i++) {
        size_t len = fuzz_seed((size_t)(fuzz_rnd(&s) % fuzz_nseeds()), buf);

        len = fuzz_mutate(&s, buf, len);
        if (fuzz_rnd(&s) % 4 == 0)
            len = fuzz_mutate(&s, buf, len);
        fuzz_run_one(buf, len);
    }
    fuzz_summary();
    printf(FUZZ_NAME ": %llu inputs (%zu seeds + %llu mutations, seed %#llx), 0 crashes\n",
           (unsigned long long)fuzz_nseeds() + iterations, fuzz_nseeds(), iterations, seed);
    return 0;
}

#endif
