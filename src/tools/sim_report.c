/* SPDX-License-Identifier: Apache-2.0 */
/* sim_report.c - spoa-sim's --stall figures: the lines under the table's
 * row and the JSON fields (moved out of sim.c, which keeps the table). */
#include <stdio.h>

#include "core/strbuf.h"
#include "tools/sim.h"

void sim_stall_json(struct strbuf *b, const struct sim_opts *o, const struct sim_result *r)
{
    const struct sim_stall *st = &r->stall;
    strbuf_printf(b,
                  ",\"stall_start_s\":%g,\"stall_s\":%g,\"timeout_ms\":%g,\"share\":%g,"
                  "\"backstop_limit\":%llu,\"backstop_period_ms\":%g,\"backstop_burst\":%llu,"
                  "\"stall_decisions\":%llu,\"stall_admitted\":%llu,"
                  "\"stall_reference_admitted\":%llu,\"stall_false_denials\":%llu,"
                  "\"stall_timeouts\":%llu,\"stall_fallbacks\":%llu,"
                  "\"stall_fallback_admitted\":%llu,\"stall_backstop_allowed\":%.3f,"
                  "\"stall_backstop_worst_excess\":%.6f,"
                  "\"stall_outside_worst_window_excess\":%.6f,\"stall_settle_ms\":%.3f,"
                  "\"stall_wait_p50_ms\":%.3f,\"stall_wait_p99_ms\":%.3f,"
                  "\"stall_wait_max_ms\":%.3f,\"stall_recovery_ms\":%.3f",
                  (double)o->stall_start_us / 1e6, (double)o->stall_len_us / 1e6,
                  (double)o->timeout_us / 1e3, o->share, (unsigned long long)o->backstop.limit,
                  (double)o->backstop.period_us / 1e3, (unsigned long long)o->backstop.burst,
                  (unsigned long long)st->decisions, (unsigned long long)st->admitted,
                  (unsigned long long)st->ref_admitted, (unsigned long long)st->false_denials,
                  (unsigned long long)st->timeouts, (unsigned long long)st->fallbacks,
                  (unsigned long long)st->fallback_admitted, st->backstop_allowed,
                  st->backstop_worst_excess, st->outside_worst_window_excess, st->settle_ms,
                  st->wait_p50_ms, st->wait_p99_ms, st->wait_max_ms, st->recovery_ms);
}

/* The stall's figures under the table's row. */
void sim_stall_print(const struct sim_opts *o, const struct sim_result *r)
{
    const struct sim_stall *st = &r->stall;
    printf("  stall %gs at %gs (timeout %gms, share %g: backstop %llu per %gms, burst %llu)\n"
           "    during: %llu decisions, %llu admitted (exact: %llu), %llu false denials, "
           "waits p50 %.1fms p99 %.1fms max %.1fms, %llu calls timed out\n"
           "    fallback: %llu decisions, %llu admitted, backstop allowed %.1f, "
           "worst excess over b'+r'T %.3f (must be <= 0)\n"
           "    outside the stall (+%.0fms): worst excess over b+rT %.3f (must be <= 0); "
           "last fallback %.1fms after the end\n",
           (double)o->stall_len_us / 1e6, (double)o->stall_start_us / 1e6,
           (double)o->timeout_us / 1e3, o->share, (unsigned long long)o->backstop.limit,
           (double)o->backstop.period_us / 1e3, (unsigned long long)o->backstop.burst,
           (unsigned long long)st->decisions, (unsigned long long)st->admitted,
           (unsigned long long)st->ref_admitted, (unsigned long long)st->false_denials,
           st->wait_p50_ms, st->wait_p99_ms, st->wait_max_ms, (unsigned long long)st->timeouts,
           (unsigned long long)st->fallbacks, (unsigned long long)st->fallback_admitted,
           st->backstop_allowed, st->backstop_worst_excess, st->settle_ms,
           st->outside_worst_window_excess, st->recovery_ms);
    fflush(stdout);
}
