/* SPDX-License-Identifier: Apache-2.0 */
/* sim_report.c - what spoa-sim prints of a run: the table's head and row,
 * the run as one JSON line, and the --stall figures under them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/json.h"
#include "core/strbuf.h"
#include "limits/bucket.h"
#include "tools/sim.h"

static double peak_rss_mb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0;
}

/* One JSON object a line. The numbers keep the table's printf formats
 * (jansson would write every double as %.17g); the strings are jansson's. */
void sim_report_json(const struct sim_opts *o, const struct sim_result *r, const char *sweep,
                     const char *val)
{
    struct strbuf b = STRBUF_INIT;

    strbuf_printf(&b, "{");
    if (sweep) {
        strbuf_printf(&b, "\"sweep\":");
        json_put_str(&b, sweep, strlen(sweep));
        strbuf_printf(&b, ",\"value\":");
        json_put_str(&b, val, strlen(val));
        strbuf_printf(&b, ",");
    }
    /* policy and algorithm: fixed words, nothing to escape */
    strbuf_printf(&b, "\"policy\":\"%s\",", o->policy == SIM_POLICY_RATE ? "rate" : "token");
    strbuf_printf(&b,
                  "\"agents\":%u,\"keys\":%llu,\"rps\":%g,\"seconds\":%g,\"zipf\":%g,\"skew\":%g,"
                  "\"limit\":%llu,\"period_ms\":%llu,\"burst\":%llu,\"algorithm\":\"%s\","
                  "\"interval_ms\":%llu,\"ttl_ms\":%llu,\"max_fraction\":%g,\"rtt_ms\":%g,",
                  o->agents, (unsigned long long)o->keys, o->rps, o->seconds, o->zipf, o->skew,
                  (unsigned long long)o->limit, (unsigned long long)o->period_ms,
                  (unsigned long long)o->burst, bucket_algorithm_names[o->algorithm],
                  (unsigned long long)o->interval_ms, (unsigned long long)o->ttl_ms,
                  o->max_fraction, (double)o->rtt_us / 1000);
    strbuf_printf(
        &b,
        "\"decisions\":%llu,\"admitted\":%llu,\"reference_admitted\":%llu,"
        "\"redis_calls\":%llu,\"script_ops\":%llu,\"claims\":%llu,\"returns\":%llu,"
        "\"calls_per_decision\":%.6f,\"ops_per_decision\":%.6f,\"redis_calls_per_s\":%.1f,"
        "\"worst_window_excess\":%.6f,\"reference_worst_window_excess\":%.6f,"
        "\"utilisation\":%.6f,\"false_denials\":%llu,\"extra_admits\":%llu,"
        "\"stranded_p99\":%g,\"stranded_max\":%g,\"wait_p99_ms\":%.3f,\"wait_max_ms\":%.3f,"
        "\"waited\":%llu,\"fallbacks\":%llu,\"redis_errors\":%llu,\"redis_keys_peak\":%llu,"
        "\"wall_s\":%.3f,\"peak_rss_mb\":%.1f",
        (unsigned long long)r->decisions, (unsigned long long)r->admitted,
        (unsigned long long)r->ref_admitted, (unsigned long long)r->redis_calls,
        (unsigned long long)r->script_ops, (unsigned long long)r->claims,
        (unsigned long long)r->returns, r->calls_per_decision, r->ops_per_decision, r->calls_per_s,
        r->worst_window_excess, r->ref_worst_window_excess, r->utilisation,
        (unsigned long long)r->false_denials, (unsigned long long)r->extra_admits, r->stranded_p99,
        r->stranded_max, r->wait_p99_ms, r->wait_max_ms, (unsigned long long)r->waited,
        (unsigned long long)r->fallbacks, (unsigned long long)r->redis_errors,
        (unsigned long long)r->redis_keys_peak, r->wall_s, peak_rss_mb());
    if (o->stall_len_us)
        sim_stall_json(&b, o, r);
    if (o->regions)
        sim_region_json(&b, o, r);
    sim_models_json(&b, o, r);
    strbuf_printf(&b, "}\n");
    size_t len;
    char *text = strbuf_finish(&b, &len);
    if (text)
        fwrite(text, 1, len, stdout);
    else
        fprintf(stderr, "spoa-sim: out of memory\n");
    free(text);
    fflush(stdout);
}

void sim_report_head(const char *sweep)
{
    printf("%-10s %7s %12s %11s %7s %9s %9s %9s %9s %8s %9s %9s %7s %7s\n", sweep ? sweep : "run",
           "agents", "decisions", "admitted", "util", "false_den", "calls/dec", "ops/dec",
           "calls/s", "worst_ex", "strand99", "wait99ms", "wall_s", "rss_mb");
}

void sim_report_row(const struct sim_opts *o, const struct sim_result *r, const char *val)
{
    printf("%-10s %7u %12llu %11llu %6.2f%% %9llu %9.4f %9.4f %9.0f %8.2f %9.0f %9.3f %7.1f "
           "%7.0f\n",
           val, o->agents, (unsigned long long)r->decisions, (unsigned long long)r->admitted,
           100 * r->utilisation, (unsigned long long)r->false_denials, r->calls_per_decision,
           r->ops_per_decision, r->calls_per_s, r->worst_window_excess, r->stranded_p99,
           r->wait_p99_ms, r->wall_s, peak_rss_mb());
    fflush(stdout);
}

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
