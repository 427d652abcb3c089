/* Host memory from /proc (this process's resident set and its peak, the
 * machine's total and available memory). The arena's own counters come
 * from wf_arena_get_stats; the watchdog that judges these figures is the
 * trainer's (src/train/mem_watchdog.c). */
#include "weft/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obs/obs_impl.h"

/* The value of "Key:   123 kB" in /proc-style text, in bytes; -1 if the
 * key is absent or malformed. */
static int64_t proc_kb(const char *text, const char *key) {
    if (!text) return -1;
    size_t kl = strlen(key);
    for (const char *line = text; *line;) {
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            char *end;
            long long v = strtoll(line + kl + 1, &end, 10);
            if (end == line + kl + 1 || v < 0) return -1;
            while (*end == ' ' || *end == '\t') end++;
            /* The kernel always writes kB (KiB); a bare number is bytes. */
            if (strncmp(end, "kB", 2) == 0) return (int64_t)v * 1024;
            return (int64_t)v;
        }
        const char *nl = strchr(line, '\n');
        if (!nl) break;
        line = nl + 1;
    }
    return -1;
}

void wf_host_mem_parse(const char *status_text, const char *meminfo_text, wf_host_mem *out) {
    out->rss = proc_kb(status_text, "VmRSS");
    out->rss_peak = proc_kb(status_text, "VmHWM");
    out->mem_total = proc_kb(meminfo_text, "MemTotal");
    out->mem_available = proc_kb(meminfo_text, "MemAvailable");
}

wf_status wf_host_mem_read(wf_host_mem *out) {
    char *st = wf__obs_read_text("/proc/self/status");
    char *mi = wf__obs_read_text("/proc/meminfo");
    wf_host_mem_parse(st, mi, out);
    free(st);
    free(mi);
    if (out->rss < 0 && out->mem_total < 0)
        return wf_error(WF_ERR_UNSUPPORTED, "/proc/self/status and /proc/meminfo cannot be read: no host memory figures");
    return WF_OK;
}
