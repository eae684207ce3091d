/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_spop.h - the input layout of the SPOP fuzz target (fuzz_spop.c: a
 * mode byte, then CFG_BYTES that choose the config, then what HAProxy sends)
 * and what its standalone driver (fuzz_spop_smoke.c) and it call of each
 * other. */
#ifndef FUZZ_SPOP_H
#define FUZZ_SPOP_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Mode byte (the first byte of an input). */
#define MODE_CHUNK_MASK 0x07u    /* how the rest is cut into reads: see chunk_len() */
#define MODE_SMALL_FRAME 0x08u   /* offer max-frame-size 256 instead of 16380 */
#define MODE_CLOCK_FROM_ID 0x10u /* the clock moves by frame-id ms, else a fixed step */
#define MODE_DRAIN_HALF 0x20u    /* write half of the pending output at a time */
#define MODE_DEFER_ACK 0x40u     /* ACK after spop_conn_in_commit returns, not inside */
#define MODE_PREPEND_HELLO 0x80u /* a valid HAPROXY-HELLO comes before the rest */

/* Config bytes, after the mode byte: one global, then one per rule. */
#define CFG_BYTES (1 + CFG_RULES)
#define CFG_RULES 4
#define G_NRULES_MASK 0x03u /* rules: 1 + this */
#define G_REDIS 0x04u       /* decide as with Redis: leases and exact calls */
#define G_SHADOW 0x08u      /* [agent] shadow = yes */
#define G_SMALL_KEY 0x10u   /* [agent] max_key = 16: most keys are hashed */
#define G_SHARE 0x20u       /* [fallback] share = 0.25, mode = closed */
#define G_FRACTION 0x40u    /* [lease] max_fraction = 1 */
#define G_EXACT_COLD 0x80u  /* a cold key's claim goes as an exact call */
#define R_RATE_ARG 0x01u    /* rate = arg:rate, max_rate */
#define R_BURST_ARG 0x02u   /* burst = arg:burst, max_burst */
#define R_KEYS_SHIFT 2      /* 2 bits: no key (global), key, ip, five args */
#define R_MATCH 0x10u       /* a match line or two */
#define R_SHADOW 0x20u
#define R_SLIDING 0x40u
#define R_LEASE_OFF 0x80u

#ifdef FUZZ_STANDALONE
/* fuzz_spop.c: how deep the inputs went, printed as name: ...; frees the
 * cached rulesets. */
void fuzz_spop_summary(const char *name);
/* fuzz_spop_smoke.c: the failing input reported, before an invariant aborts. */
void fuzz_spop_report_input(void);
#endif

#endif
