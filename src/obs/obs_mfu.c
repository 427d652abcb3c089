/* Model FLOPs utilisation: the model's training FLOPs per token (the count
 * docs/train.md "FLOPs per token" defines) and the peak they are measured
 * against: a configured number, or this machine's own sgemm rate, measured
 * by a short benchmark and cached per machine in a small JSON file.
 *
 * The measured peak is what OpenBLAS's sgemm achieves on the threads the
 * kernels use, not the CPU's theoretical vector peak: MFU against it says
 * how much of the achievable matrix throughput a step used. A configured
 * peak (metrics.peak_tflops) replaces it, e.g. with the data sheet's. */
#include "weft/metrics.h"

#include <cblas.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obs/obs_impl.h"
#include "weft/fileio.h"
#include "weft/backend.h"
#include "weft/log.h"
#include "weft/thread.h"

double wf_model_flops_per_token(const wf_model_config *cfg, int T) {
    double L = cfg->n_layers, C = cfg->dim, V = cfg->vocab_size;
    double H = wf_model_config_hidden_dim(cfg);
    double KV = (double)cfg->n_kv_heads * (cfg->dim / cfg->n_heads);
    /* q, o: C*C each; k, v: C*KV each; gate, up, down: C*H each. */
    double n_mm = L * (2 * C * C + 2 * C * KV + 3 * C * H) + V * C;
    /* Causal attention: scores and weighted sum, 2*T*C each per token and
     * layer for full attention, half of that causal: 2*L*T*C forward, times
     * 3 with the backward. */
    return 6 * n_mm + 6 * L * (double)T * C;
}

const char *wf_peak_source_name(wf_peak_source s) {
    switch (s) {
    case WF_PEAK_CONFIG: return "config";
    case WF_PEAK_MEASURED: return "measured";
    case WF_PEAK_CACHED: return "cached";
    }
    return "unknown";
}

void wf_peak_describe(const wf_peak *p, char *buf, size_t size) {
    switch (p->source) {
    case WF_PEAK_CONFIG:
        snprintf(buf, size, "peak %.4g TFLOP/s (from the config, metrics.peak_tflops)", p->tflops);
        break;
    case WF_PEAK_MEASURED:
        snprintf(buf, size, "peak %.4g TFLOP/s (measured now: best sgemm of %s%s%s)", p->tflops, p->key,
                 p->cache_path[0] ? "; cached in " : "", p->cache_path);
        break;
    case WF_PEAK_CACHED:
        snprintf(buf, size, "peak %.4g TFLOP/s (sgemm of %s, measured earlier, cached in %s)", p->tflops, p->key,
                 p->cache_path);
        break;
    }
}

/* Best sgemm rate in TFLOP/s: out (n, n) = a (n, n) @ b (n, n)^T, the
 * product the model's linear layers do, for n = 256, 512, ... up to max_n
 * while the time budget lasts. The first call of each size is a warm-up
 * (thread start, page faults) and counts only if nothing faster follows. */
static double sgemm_peak(double budget_s, int max_n) {
    double t_start = wf_time_now(), best = 0;
    for (int n = 256; n <= max_n; n *= 2) {
        size_t nn = (size_t)n * (size_t)n;
        float *a = aligned_alloc(64, nn * sizeof(float));
        float *b = aligned_alloc(64, nn * sizeof(float));
        float *c = aligned_alloc(64, nn * sizeof(float));
        if (!a || !b || !c) {
            free(a);
            free(b);
            free(c);
            break;
        }
        for (size_t i = 0; i < nn; i++) {
            a[i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
            b[i] = (float)((i * 5) % 11) * 0.01f - 0.05f;
        }
        double flops = 2.0 * n * n * n, t_call = 0;
        for (int rep = 0; rep < 4; rep++) {
            double t0 = wf_time_now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            t_call = wf_time_now() - t0;
            if (t_call > 0 && flops / t_call / 1e12 > best) best = flops / t_call / 1e12;
            if (wf_time_now() - t_start > budget_s) break;
        }
        free(a);
        free(b);
        free(c);
        /* The next size takes about 8 times as long per call. */
        if (wf_time_now() - t_start + 8 * t_call > budget_s) break;
    }
    return best;
}

static void default_cache_path(char *buf, size_t size) {
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (xdg && xdg[0]) snprintf(buf, size, "%s/weft/peak.json", xdg);
    else if (home && home[0]) snprintf(buf, size, "%s/.cache/weft/peak.json", home);
    else buf[0] = '\0';
}

/* Looks `key` up in the cache file; 1 and *tflops, *at when found. */
static int cache_lookup(const char *path, const char *key, double *tflops, double *at) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) return 0;
    json_t *e = json_object_get(json_object_get(root, "entries"), key);
    double t = json_number_value(json_object_get(e, "tflops"));
    int found = json_is_object(e) && t > 0;
    if (found) {
        *tflops = t;
        *at = json_number_value(json_object_get(e, "measured_at"));
    }
    json_decref(root);
    return found;
}

/* Adds or replaces the entry for `key`, keeping the others. */
static wf_status cache_store(const char *path, const char *key, double tflops, double at, int threads,
                             double seconds) {
    json_error_t err;
    json_t *root = wf_path_exists(path) ? json_load_file(path, 0, &err) : NULL;
    if (root && !json_is_object(json_object_get(root, "entries"))) {
        json_decref(root);
        root = NULL;
    }
    if (!root) root = json_pack("{s:s, s:i, s:{}}", "format", "weft-peak", "version", 1, "entries");
    json_t *e = json_pack("{s:f, s:f, s:i, s:f, s:s}", "tflops", tflops, "measured_at", at, "threads", threads,
                          "benchmark_s", seconds, "method", "best cblas_sgemm NT, square 256..2048");
    if (!root || !e) {
        json_decref(root);
        json_decref(e);
        return wf_error(WF_ERR_NOMEM, "out of memory");
    }
    json_object_set_new(json_object_get(root, "entries"), key, e);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
    json_decref(root);
    if (!text) return wf_error(WF_ERR_NOMEM, "out of memory");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    wf_status s = WF_OK;
    if (slash && slash != dir) {
        *slash = '\0';
        s = wf_mkdirs(dir);
    }
    if (s == WF_OK) s = wf_file_write_atomic(path, text, strlen(text));
    free(text);
    return s;
}

wf_status wf_peak_get(wf_peak *out, const wf_peak_options *opt) {
    memset(out, 0, sizeof *out);
    if (opt->configured_tflops > 0) {
        out->tflops = opt->configured_tflops;
        out->source = WF_PEAK_CONFIG;
        snprintf(out->key, sizeof out->key, "configured");
        return WF_OK;
    }
    char cpu[160];
    wf__obs_cpu_model(cpu, sizeof cpu);
    int threads = wf_kern_threads();
    snprintf(out->key, sizeof out->key, "%s, %d thread%s, OpenBLAS %s", cpu, threads, threads == 1 ? "" : "s",
             wf_kern_blas_core());
    if (opt->cache_path) snprintf(out->cache_path, sizeof out->cache_path, "%s", opt->cache_path);
    else default_cache_path(out->cache_path, sizeof out->cache_path);
    double cached = 0, cached_at = 0;
    int have = out->cache_path[0] && cache_lookup(out->cache_path, out->key, &cached, &cached_at);
    if (have && opt->refresh == WF_PEAK_USE_CACHE) {
        out->tflops = cached;
        out->measured_at = cached_at;
        out->source = WF_PEAK_CACHED;
        return WF_OK;
    }
    double budget = opt->budget_s > 0 ? opt->budget_s : 0.3;
    int max_n = opt->max_n > 0 ? opt->max_n : 2048;
    if (max_n < 256) max_n = 256;
    double t0 = wf_time_now();
    out->tflops = sgemm_peak(budget, max_n);
    double took = wf_time_now() - t0;
    out->measured_at = wf__obs_unix_now();
    out->source = WF_PEAK_MEASURED;
    if (!(out->tflops > 0))
        return wf_error(WF_ERR_INTERNAL, "the sgemm benchmark measured no rate (out of memory?); set metrics.peak_tflops");
    if (opt->refresh == WF_PEAK_RECHECK && have && cached > out->tflops) {
        /* Other load on the machine only lowers the rate: the best one
         * seen for this key stays the peak. */
        out->tflops = cached;
        out->measured_at = cached_at;
        out->source = WF_PEAK_CACHED;
        return WF_OK;
    }
    if (out->cache_path[0] &&
        cache_store(out->cache_path, out->key, out->tflops, out->measured_at, threads, took) != WF_OK) {
        WF_WARN("cannot cache the measured peak: %s", wf_error_msg());
        wf_error_clear();
        out->cache_path[0] = '\0';
    }
    return WF_OK;
}
