/* The host-memory watchdog of the trainer's run control (weft/runctl.h):
 * compares what wf_host_mem_read saw with the configured limits and says
 * why a limit is passed. The trainer then saves and stops. */
#include "weft/runctl.h"

#include <stdio.h>

int wf_mem_watchdog_check(const wf_mem_limits *lim, const wf_host_mem *mem, char *msg, size_t size) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (lim->max_used_frac > 0 && mem->mem_total > 0 && mem->mem_available >= 0) {
        double used = 1.0 - (double)mem->mem_available / (double)mem->mem_total;
        if (used > lim->max_used_frac) {
            snprintf(msg, size,
                     "host memory is %.1f%% used (%.2f GiB available of %.2f GiB), above the limit of "
                     "%.1f%% (memory.max_used_frac); this process holds %.2f GiB",
                     100 * used, (double)mem->mem_available / gib, (double)mem->mem_total / gib,
                     100 * lim->max_used_frac, mem->rss >= 0 ? (double)mem->rss / gib : 0.0);
            return 1;
        }
    }
    if (lim->max_rss_frac > 0 && mem->mem_total > 0 && mem->rss >= 0 &&
        (double)mem->rss > lim->max_rss_frac * (double)mem->mem_total) {
        snprintf(msg, size,
                 "this process holds %.2f GiB, %.1f%% of the machine's %.2f GiB, above the limit of %.1f%% "
                 "(memory.max_rss_frac)",
                 (double)mem->rss / gib, 100.0 * (double)mem->rss / (double)mem->mem_total,
                 (double)mem->mem_total / gib, 100 * lim->max_rss_frac);
        return 1;
    }
    if (lim->max_rss_bytes > 0 && mem->rss > lim->max_rss_bytes) {
        snprintf(msg, size, "this process holds %.2f GiB, above the limit of %.2f GiB (memory.max_rss_gib)",
                 (double)mem->rss / gib, (double)lim->max_rss_bytes / gib);
        return 1;
    }
    return 0;
}
