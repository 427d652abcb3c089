/* Unit tests for src/obs: CRC-32C known answers and the TFRecord framing,
 * the FLOP count against a hand computation and the model's parameter
 * count, the spike detector on synthetic series, /proc parsing and the
 * watchdog, the metrics.jsonl writer (buffering, fields, append), the
 * measured and cached peak, run.json, and the report's reading and
 * stitching. TensorBoard's own reader checks the event files in
 * tests/py/test_tensorboard.py; Chromium checks the report's drawing in
 * tests/py/test_report.py. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "weft/fileio.h"
#include "weft/metrics.h"
#include "weft/mfu.h"
#include "weft/report.h"
#include "weft/runctl.h"
#include "weft/model.h"

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* ------------------------------------------------------------- CRC-32C */

WF_TEST(crc32c_known_answers) {
    /* The check value of the CRC catalogue and RFC 3720's iSCSI vectors. */
    WF_CHECK_EQ(wf_crc32c(0, "123456789", 9), 0xE3069283u);
    unsigned char buf[32];
    memset(buf, 0, sizeof buf);
    WF_CHECK_EQ(wf_crc32c(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xFF, sizeof buf);
    WF_CHECK_EQ(wf_crc32c(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
    WF_CHECK_EQ(wf_crc32c(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
    WF_CHECK_EQ(wf_crc32c(0, buf, 32), 0x113FDB5Cu);
    WF_CHECK_EQ(wf_crc32c(0, "", 0), 0);
    /* Continuing from a previous result equals one pass. */
    WF_CHECK_EQ(wf_crc32c(wf_crc32c(0, "12345", 5), "6789", 4), 0xE3069283u);
    /* TFRecord's mask: rotate right by 15, add 0xa282ead8. */
    WF_CHECK_EQ(wf_crc32c_mask(0), 0xa282ead8u);
    WF_CHECK_EQ(wf_crc32c_mask(0xE3069283u), (((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u) & 0xFFFFFFFFu);
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Walks the TFRecord framing of an event file, checking both CRCs of every
 * record; returns the number of records (the content is checked by the
 * tensorboard package in tests/py/test_tensorboard.py). */
static int check_records(const char *path, int corrupt_ok) {
    char *data;
    size_t len;
    WF_CHECK_OK(wf_file_read(path, &data, &len));
    const unsigned char *p = (const unsigned char *)data;
    size_t off = 0;
    int n = 0, bad = 0;
    while (off < len) {
        WF_CHECK_TRUE(off + 12 <= len);
        uint64_t rl = le64(p + off);
        if (wf_crc32c_mask(wf_crc32c(0, p + off, 8)) != le32(p + off + 8)) bad = 1;
        WF_CHECK_TRUE(off + 12 + rl + 4 <= len);
        if (wf_crc32c_mask(wf_crc32c(0, p + off + 12, rl)) != le32(p + off + 12 + rl)) bad = 1;
        if (n == 0) /* the first record is the file_version event */
            WF_CHECK_TRUE(memmem(p + off + 12, rl, "brain.Event:2", 13) != NULL);
        off += 12 + rl + 4;
        n++;
    }
    free(data);
    if (!corrupt_ok) WF_CHECK_TRUE(!bad);
    return bad ? -1 : n;
}

WF_TEST(tb_framing_and_crc) {
    const char *dir = wf_test_path("tb");
    wf_tb_writer *w;
    WF_CHECK_OK(wf_tb_open(&w, dir, 3600));
    char path[800];
    snprintf(path, sizeof path, "%s", wf_tb_path(w));
    WF_CHECK_TRUE(strstr(path, "/events.out.tfevents.") != NULL);
    WF_CHECK_EQ(check_records(path, 0), 1); /* the version record is written at once */
    for (int s = 1; s <= 5; s++) {
        WF_CHECK_OK(wf_tb_begin(w, s, 0));
        WF_CHECK_OK(wf_tb_add(w, "train/loss", 1.0f / (float)s));
        WF_CHECK_OK(wf_tb_add(w, "train/lr", 0.1f));
    }
    WF_CHECK_OK(wf_tb_add_scalar(w, "eval/x", 3.0, -7)); /* negative steps take 10 varint bytes */
    WF_CHECK_EQ(check_records(path, 0), 1);               /* buffered: flush interval not reached */
    WF_CHECK_OK(wf_tb_close(w));
    WF_CHECK_EQ(check_records(path, 0), 7);
    /* A flipped bit in the data is caught by the record's CRC. */
    char *data;
    size_t len;
    WF_CHECK_OK(wf_file_read(path, &data, &len));
    data[len - 10] ^= 0x10;
    wf_test_write_file(path, data, len);
    free(data);
    WF_CHECK_EQ(check_records(path, 1), -1);
    /* Two writers in one second get two files. */
    wf_tb_writer *a, *b;
    WF_CHECK_OK(wf_tb_open(&a, dir, 0));
    WF_CHECK_OK(wf_tb_open(&b, dir, 0));
    WF_CHECK_TRUE(strcmp(wf_tb_path(a), wf_tb_path(b)) != 0);
    WF_CHECK_OK(wf_tb_close(a));
    WF_CHECK_OK(wf_tb_close(b));
    wf_tb_writer *c;
    WF_CHECK_OK(wf_tb_open(&c, dir, 0));
    WF_CHECK_ERR(wf_tb_add(c, "x", 1), WF_ERR_INVALID, "before wf_tb_begin");
    WF_CHECK_OK(wf_tb_close(c));
    WF_CHECK_OK(wf_tb_close(NULL));
}

/* ------------------------------------------------------------- FLOPs */

WF_TEST(flops_per_token_by_hand) {
    wf_model_config c;
    WF_CHECK_OK(wf_model_config_preset(&c, "tiny"));
    c.dim = 64;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.vocab_size = 512;
    c.ffn_hidden_dim = 192;
    c.tied_embeddings = 1;
    /* head_dim 16, KV = 2*16 = 32. Per layer: q 64*64 + k,v 2*64*32 + o
     * 64*64 + gate,up,down 3*64*192 = 4096+4096+4096+36864 = 49152; two
     * layers 98304; output projection 512*64 = 32768: N_mm = 131072.
     * 6*N_mm = 786432; attention 6*L*T*C = 6*2*64*64 = 49152. */
    WF_CHECK_NEAR(wf_model_flops_per_token(&c, 64), 835584.0, 0);
    WF_CHECK_NEAR(wf_model_flops_per_token(&c, 128), 786432.0 + 98304.0, 0);
    /* Cross-check with the model's own parameter count: matmul parameters
     * are all but the norms (2 per layer + the final one), and for an
     * untied model also all but the embedding. */
    WF_CHECK_OK(wf_model_config_validate(&c));
    double norms = (2.0 * c.n_layers + 1) * c.dim;
    double n_mm = (wf_model_flops_per_token(&c, 0)) / 6;
    WF_CHECK_NEAR(n_mm, (double)wf_model_config_num_params(&c) - norms, 0);
    c.tied_embeddings = 0;
    WF_CHECK_NEAR(n_mm, (double)wf_model_config_num_params(&c) - norms - (double)c.vocab_size * c.dim, 0);
    /* And a preset with derived hidden width and GQA: stories15M. */
    WF_CHECK_OK(wf_model_config_preset(&c, "stories15M"));
    double L = c.n_layers, C = c.dim, H = wf_model_config_hidden_dim(&c), V = c.vocab_size;
    double KV = (double)c.n_kv_heads * (c.dim / c.n_heads);
    double expect = 6 * (L * (2 * C * C + 2 * C * KV + 3 * C * H) + V * C) + 6 * L * 256 * C;
    WF_CHECK_NEAR(wf_model_flops_per_token(&c, 256), expect, 0);
}

WF_TEST(derive_rates_and_mfu) {
    wf_metrics_step r;
    wf_metrics_step_init(&r);
    WF_CHECK_TRUE(isnan(r.loss) && isnan(r.val_loss) && isnan(r.mfu_pct));
    WF_CHECK_EQ(r.tokens, -1);
    WF_CHECK_EQ(r.data_pos, -1);
    WF_CHECK_EQ(r.spike, 0);
    WF_CHECK_TRUE(r.time == 0);
    r.tokens = 2048;
    r.step_s = 0.5;
    wf_metrics_step_derive(&r, 1e6, 1, 0);
    WF_CHECK_NEAR(r.tokens_per_s, 4096, 1e-9);
    WF_CHECK_NEAR(r.tflops, 2048 * 1e6 / 0.5 / 1e12, 1e-15);
    WF_CHECK_TRUE(isnan(r.mfu_pct)); /* no peak, no MFU */
    wf_metrics_step_derive(&r, 1e6, 1, 0.01);
    WF_CHECK_NEAR(r.mfu_pct, 100 * 0.004096 / 0.01, 1e-9);
    /* Four data-parallel processes shared the tokens: the rate is the
     * total's, TFLOP/s and MFU are each process's. */
    wf_metrics_step_derive(&r, 1e6, 4, 0.01);
    WF_CHECK_NEAR(r.tokens_per_s, 4096, 1e-9);
    WF_CHECK_NEAR(r.tflops, 0.004096 / 4, 1e-15);
    WF_CHECK_NEAR(r.mfu_pct, 100 * 0.001024 / 0.01, 1e-9);
    wf_arena *a;
    WF_CHECK_OK(wf_arena_create(&a, 1 << 20));
    WF_CHECK_TRUE(wf_arena_alloc(a, 1000, 64) != NULL);
    wf_metrics_step_memory(&r, a);
    WF_CHECK_EQ(r.arena_in_use, (int64_t)wf_arena_get_stats(a).in_use);
    WF_CHECK_EQ(r.arena_reserved, (int64_t)wf_arena_get_stats(a).reserved);
    WF_CHECK_EQ(r.arena_peak, (int64_t)wf_arena_get_stats(a).peak);
    WF_CHECK_TRUE(r.host_rss > 0 && r.host_available > 0 && r.host_rss_peak >= r.host_rss);
    wf_arena_destroy(a);
}

/* ------------------------------------------------------------- spikes */

static double noisy(int i) {
    /* a slowly falling loss with deterministic wiggle, std about 0.02 */
    return 3.0 - 0.002 * i + 0.02 * sin(1.7 * i) + 0.01 * cos(0.3 * i * i);
}

WF_TEST(spike_detector_finds_the_spike) {
    wf_spike_config cfg = {50, 6.0, 20, 1, 0};
    wf_spike_detector d;
    WF_CHECK_OK(wf_spike_init(&d, &cfg));
    int found = 0, where = -1;
    for (int i = 0; i < 200; i++) {
        double loss = noisy(i), gn = 1.0 + 0.01 * sin(i);
        if (i == 120) loss += 1.0; /* ~40 sigma */
        wf_spike_result r = wf_spike_check(&d, loss, gn);
        if (i < 20) WF_CHECK_TRUE(isnan(r.loss_z)); /* warmup: no statistics yet */
        if (i >= 20) WF_CHECK_TRUE(isfinite(r.loss_z));
        if (r.spike) {
            found++;
            where = i;
            WF_CHECK_TRUE(r.by_loss && !r.by_grad_norm && !r.nonfinite);
            WF_CHECK_TRUE(r.loss_z > 6);
            WF_CHECK_EQ(r.n, 50);
            char line[512];
            wf_spike_describe(&r, i + 1, 4321, loss, gn, WF_SPIKE_SKIP, line, sizeof line);
            WF_CHECK_TRUE(strstr(line, "step 121") && strstr(line, "micro-batch 4321") &&
                          strstr(line, "skipped") && strstr(line, "by loss"));
        }
    }
    WF_CHECK_EQ(found, 1);
    WF_CHECK_EQ(where, 120);
    wf_spike_deinit(&d);
}

WF_TEST(spike_detector_rules) {
    wf_spike_config cfg = {10, 4.0, 5, 1, 0};
    wf_spike_detector d;
    WF_CHECK_OK(wf_spike_init(&d, &cfg));
    /* During warmup even a huge value is only recorded... */
    for (int i = 0; i < 4; i++) WF_CHECK_EQ(wf_spike_check(&d, 2.0 + 0.01 * i, 1.0).spike, 0);
    /* ...but a non-finite one is a spike at once. */
    wf_spike_result r = wf_spike_check(&d, NAN, 1.0);
    WF_CHECK_TRUE(r.spike && r.nonfinite && r.by_loss);
    r = wf_spike_check(&d, 2.0, INFINITY);
    WF_CHECK_TRUE(r.spike && r.nonfinite && r.by_grad_norm);
    WF_CHECK_EQ(d.n, 4); /* neither entered the window */
    WF_CHECK_EQ(wf_spike_check(&d, 2.02, 1.0).spike, 0);
    WF_CHECK_EQ(d.n, 5);
    for (int i = 0; i < 10; i++) wf_spike_check(&d, 2.0 + 0.01 * (i % 3), 1.0 + 0.01 * (i % 2));
    WF_CHECK_EQ(d.n, 10); /* the window holds at most `window` values */
    /* Two spikes in a row: the first did not enter the window, so the
     * second is judged against the same, clean statistics. */
    WF_CHECK_EQ(wf_spike_check(&d, 5.0, 1.0).spike, 1);
    WF_CHECK_EQ(wf_spike_check(&d, 5.0, 1.0).spike, 1);
    /* A fall is never a spike. */
    WF_CHECK_EQ(wf_spike_check(&d, 0.5, 1.0).spike, 0);
    wf_spike_reset(&d);
    for (int i = 0; i < 10; i++) wf_spike_check(&d, 2.0 + 0.01 * (i % 3), 1.0 + 0.01 * (i % 2));
    /* The gradient norm alone makes a spike... */
    r = wf_spike_check(&d, 2.01, 3.0);
    WF_CHECK_TRUE(r.spike && r.by_grad_norm && !r.by_loss);
    wf_spike_deinit(&d);
    /* ...unless it is turned off. */
    cfg.use_grad_norm = 0;
    WF_CHECK_OK(wf_spike_init(&d, &cfg));
    for (int i = 0; i < 10; i++) wf_spike_check(&d, 2.0 + 0.01 * (i % 3), 1.0);
    r = wf_spike_check(&d, 2.01, 3.0);
    WF_CHECK_EQ(r.spike, 0);
    WF_CHECK_TRUE(isnan(r.grad_norm_z));
    WF_CHECK_EQ(wf_spike_check(&d, 2.01, NAN).spike, 0);
    wf_spike_deinit(&d);
    /* A flat series: the std floor (1e-3 of the mean) keeps a tiny
     * wobble from being a spike, but not a real jump. */
    WF_CHECK_OK(wf_spike_init(&d, &cfg));
    for (int i = 0; i < 10; i++) wf_spike_check(&d, 2.0, 1.0);
    WF_CHECK_EQ(wf_spike_check(&d, 2.0 + 1e-6, 1.0).spike, 0);
    WF_CHECK_EQ(wf_spike_check(&d, 2.1, 1.0).spike, 1);
    wf_spike_deinit(&d);

    wf_spike_config bad = {1, 4.0, 0, 1, 0};
    WF_CHECK_ERR(wf_spike_init(&d, &bad), WF_ERR_CONFIG, "spike.window");
    bad = (wf_spike_config){10, 0, 0, 1, 0};
    WF_CHECK_ERR(wf_spike_init(&d, &bad), WF_ERR_CONFIG, "spike.z");
    bad = (wf_spike_config){10, 3, 11, 1, 0};
    WF_CHECK_ERR(wf_spike_init(&d, &bad), WF_ERR_CONFIG, "spike.warmup");
    WF_CHECK_EQ(wf_spike_action_parse("warn"), WF_SPIKE_WARN);
    WF_CHECK_EQ(wf_spike_action_parse("skip"), WF_SPIKE_SKIP);
    WF_CHECK_EQ(wf_spike_action_parse("rollback"), WF_SPIKE_ROLLBACK);
    WF_CHECK_EQ(wf_spike_action_parse("panic"), -1);
    WF_CHECK_STREQ(wf_spike_action_name(WF_SPIKE_ROLLBACK), "rollback");
}

/* A detector given another's window (as a checkpoint carries it) judges
 * every later step with the same bits, wherever the source's ring started;
 * a smaller window keeps the newest values. */
WF_TEST(spike_window_save_and_restore) {
    wf_spike_config cfg = {30, 6.0, 20, 1, 0};
    wf_spike_detector a, b;
    WF_CHECK_OK(wf_spike_init(&a, &cfg));
    WF_CHECK_OK(wf_spike_init(&b, &cfg));
    double loss[40], gn[40];
    for (int cut = 5; cut < 120; cut += 23) { /* before, at and after the warmup; the ring wrapped or not */
        wf_spike_reset(&a);
        for (int i = 0; i < cut; i++) wf_spike_check(&a, noisy(i) + (i == 3 * cut / 4 ? 1.0 : 0), 1.0 + 0.01 * sin(i));
        wf_spike_get_window(&a, loss, gn);
        WF_CHECK_EQ(a.n, cut < 30 ? cut - (3 * cut / 4 >= 20) : 30);
        wf_spike_reset(&b);
        wf_spike_set_window(&b, loss, gn, a.n);
        WF_CHECK_EQ(b.n, a.n);
        int spikes = 0;
        for (int i = cut; i < cut + 80; i++) {
            double l = noisy(i) + (i % 37 == 0 ? 0.8 : 0), g = 1.0 + 0.01 * sin(i) + (i % 41 == 0 ? 0.5 : 0);
            wf_spike_result ra = wf_spike_check(&a, l, g), rb = wf_spike_check(&b, l, g);
            WF_CHECK_EQ(ra.spike, rb.spike);
            spikes += ra.spike;
            /* bit for bit, NaN in warmup included */
            WF_CHECK_TRUE(memcmp(&ra.loss_z, &rb.loss_z, sizeof ra.loss_z) == 0);
            WF_CHECK_TRUE(memcmp(&ra.grad_norm_z, &rb.grad_norm_z, sizeof ra.grad_norm_z) == 0);
            WF_CHECK_TRUE(memcmp(&ra.loss_std, &rb.loss_std, sizeof ra.loss_std) == 0);
        }
        WF_CHECK_TRUE(spikes >= 2);
    }
    /* Into a window of 10: the newest 10 of the 30 values, judged as a
     * detector of 10 that saw the same steps. */
    wf_spike_get_window(&a, loss, gn);
    wf_spike_config small = {10, 6.0, 5, 1, 0};
    wf_spike_detector c, ref;
    WF_CHECK_OK(wf_spike_init(&c, &small));
    WF_CHECK_OK(wf_spike_init(&ref, &small));
    wf_spike_set_window(&c, loss, gn, a.n);
    WF_CHECK_EQ(c.n, 10);
    for (int i = 20; i < 30; i++) wf_spike_check(&ref, loss[i], gn[i]);
    double v = loss[29] + 0.001;
    wf_spike_result rc = wf_spike_check(&c, v, gn[29]), rr = wf_spike_check(&ref, v, gn[29]);
    WF_CHECK_TRUE(isfinite(rc.loss_z) && rc.loss_z == rr.loss_z && rc.grad_norm_z == rr.grad_norm_z);
    WF_CHECK_EQ(rc.spike, 0);
    double cl[10], cg[10];
    wf_spike_get_window(&c, cl, cg);
    WF_CHECK_TRUE(cl[9] == v && cl[0] == loss[21]); /* oldest first: the first one went out */
    wf_spike_deinit(&ref);
    wf_spike_deinit(&c);
    wf_spike_deinit(&b);
    wf_spike_deinit(&a);
}

/* ------------------------------------------------------------- memory */

WF_TEST(host_memory_parse_and_watchdog) {
    const char *status = "Name:\tweft\nVmPeak:\t  999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nThreads:\t3\n";
    const char *meminfo = "MemTotal:       16384000 kB\nMemFree:  100 kB\nMemAvailable:    4096000 kB\n";
    wf_host_mem m;
    wf_host_mem_parse(status, meminfo, &m);
    WF_CHECK_EQ(m.rss, 1024 * 1024);
    WF_CHECK_EQ(m.rss_peak, 2048 * 1024);
    WF_CHECK_EQ(m.mem_total, 16384000LL * 1024);
    WF_CHECK_EQ(m.mem_available, 4096000LL * 1024);
    wf_host_mem_parse("VmRSSX: 5 kB\n", NULL, &m); /* a longer key is not VmRSS */
    WF_CHECK_EQ(m.rss, -1);
    WF_CHECK_EQ(m.mem_total, -1);
    WF_CHECK_OK(wf_host_mem_read(&m));
    WF_CHECK_TRUE(m.rss > 0 && m.mem_total > m.rss && m.mem_available > 0 && m.rss_peak >= m.rss);

    char msg[512];
    wf_host_mem h = {1LL << 30, 1LL << 30, 16LL << 30, 4LL << 30}; /* 75% used, 1 of 16 GiB */
    wf_mem_limits lim = {0.95, 0, 0};
    WF_CHECK_EQ(wf_mem_watchdog_check(&lim, &h, msg, sizeof msg), 0);
    lim.max_used_frac = 0.7;
    WF_CHECK_EQ(wf_mem_watchdog_check(&lim, &h, msg, sizeof msg), 1);
    WF_CHECK_TRUE(strstr(msg, "75.0% used") && strstr(msg, "memory.max_used_frac"));
    lim = (wf_mem_limits){0, 0.05, 0};
    WF_CHECK_EQ(wf_mem_watchdog_check(&lim, &h, msg, sizeof msg), 1);
    WF_CHECK_TRUE(strstr(msg, "6.2%") && strstr(msg, "memory.max_rss_frac"));
    lim = (wf_mem_limits){0, 0.1, 0};
    WF_CHECK_EQ(wf_mem_watchdog_check(&lim, &h, msg, sizeof msg), 0);
    lim = (wf_mem_limits){0, 0, 512LL << 20};
    WF_CHECK_EQ(wf_mem_watchdog_check(&lim, &h, msg, sizeof msg), 1);
    WF_CHECK_TRUE(strstr(msg, "memory.max_rss_gib") != NULL);
    lim = (wf_mem_limits){0, 0, 0};
    WF_CHECK_EQ(wf_mem_watchdog_check(&lim, &h, msg, sizeof msg), 0);
    /* Unknown figures never trip. */
    wf_host_mem unknown = {-1, -1, -1, -1};
    lim = (wf_mem_limits){0.01, 0.01, 1};
    WF_CHECK_EQ(wf_mem_watchdog_check(&lim, &unknown, msg, sizeof msg), 0);
}

/* ------------------------------------------------------------- jsonl */

static json_t *load_line(const char *text, int k) {
    const char *p = text;
    for (int i = 0; i < k; i++) {
        p = strchr(p, '\n');
        if (!p) return NULL;
        p++;
    }
    json_error_t err;
    return json_loadb(p, strcspn(p, "\n"), 0, &err);
}

WF_TEST(jsonl_buffered_fields_and_append) {
    const char *dir = wf_test_tmpdir();
    const char *path = wf_test_path("metrics.jsonl");
    wf_metrics *m;
    wf_metrics_options o = {dir, 1, 0, 3600};
    WF_CHECK_OK(wf_metrics_open(&m, &o));
    WF_CHECK_TRUE(wf_metrics_tb_path(m) == NULL);
    wf_metrics_step r;
    for (int s = 1; s <= 3; s++) {
        wf_metrics_step_init(&r);
        r.step = s;
        r.loss = 0.1 * s;
        r.lr = 3e-4;
        r.grad_norm = s == 3 ? NAN : 1.5;
        r.tokens = 4096;
        r.step_s = 0.25;
        r.host_rss = 123456789012LL;
        if (s == 2) r.val_loss = 2.5;
        if (s == 3) r.spike = 1;
        r.time = 1700000000.5;
        WF_CHECK_OK(wf_metrics_log(m, &r));
    }
    WF_CHECK_EQ(file_size(path), 0); /* buffered until the interval passes or a flush */
    WF_CHECK_OK(wf_metrics_flush(m));
    WF_CHECK_TRUE(file_size(path) > 0);
    WF_CHECK_OK(wf_metrics_close(m));
    char *text;
    size_t len;
    WF_CHECK_OK(wf_file_read(path, &text, &len));
    json_t *a = load_line(text, 0), *b = load_line(text, 1), *c = load_line(text, 2);
    WF_CHECK_TRUE(a && b && c && !load_line(text, 3));
    WF_CHECK_EQ(json_integer_value(json_object_get(a, "step")), 1);
    WF_CHECK_NEAR(json_number_value(json_object_get(a, "loss")), 0.1, 0); /* exact round trip */
    WF_CHECK_NEAR(json_number_value(json_object_get(a, "lr")), 3e-4, 0);
    WF_CHECK_NEAR(json_number_value(json_object_get(a, "time")), 1700000000.5, 0);
    WF_CHECK_EQ(json_integer_value(json_object_get(a, "host_rss")), 123456789012LL);
    WF_CHECK_EQ(json_integer_value(json_object_get(a, "tokens")), 4096);
    WF_CHECK_TRUE(json_object_get(a, "val_loss") == NULL);  /* not measured: absent */
    WF_CHECK_TRUE(json_object_get(a, "mfu_pct") == NULL);
    WF_CHECK_TRUE(json_object_get(a, "data_pos") == NULL);
    WF_CHECK_EQ(json_integer_value(json_object_get(a, "spike")), 0);
    WF_CHECK_NEAR(json_number_value(json_object_get(b, "val_loss")), 2.5, 0);
    WF_CHECK_TRUE(json_is_null(json_object_get(c, "grad_norm"))); /* not finite: null */
    WF_CHECK_EQ(json_integer_value(json_object_get(c, "spike")), 1);
    /* keys in table order */
    WF_CHECK_TRUE(strncmp(text, "{\"step\":1,\"time\":", 17) == 0);
    json_decref(a), json_decref(b), json_decref(c);
    free(text);

    /* flush_every_s 0 writes every record at once; a reopen appends. */
    o.flush_every_s = 0;
    WF_CHECK_OK(wf_metrics_open(&m, &o));
    r.step = 4;
    WF_CHECK_OK(wf_metrics_log(m, &r));
    long sz = file_size(path);
    WF_CHECK_OK(wf_metrics_close(m));
    WF_CHECK_EQ(file_size(path), sz);
    WF_CHECK_OK(wf_file_read(path, &text, &len));
    json_t *d = load_line(text, 3);
    WF_CHECK_EQ(json_integer_value(json_object_get(d, "step")), 4);
    json_decref(d);
    free(text);

    wf_metrics_options missing = {wf_test_path("nope"), 1, 1, 0};
    WF_CHECK_ERR(wf_metrics_open(&m, &missing), WF_ERR_NOTFOUND, "does not exist");
    WF_CHECK_OK(wf_metrics_close(NULL));
}

/* ------------------------------------------------------------- peak */

WF_TEST(peak_configured_measured_cached) {
    wf_peak p;
    wf_peak_options o = {12.5, NULL, 0, 0, 0};
    WF_CHECK_OK(wf_peak_get(&p, &o));
    WF_CHECK_TRUE(p.source == WF_PEAK_CONFIG && p.tflops == 12.5);
    char line[1400];
    wf_peak_describe(&p, line, sizeof line);
    WF_CHECK_TRUE(strstr(line, "config") != NULL);

    const char *cache = wf_test_path("cache/weft/peak.json");
    o = (wf_peak_options){0, cache, 0.05, 256, 0};
    WF_CHECK_OK(wf_peak_get(&p, &o));
    WF_CHECK_EQ(p.source, WF_PEAK_MEASURED);
    WF_CHECK_TRUE(p.tflops > 0);
    WF_CHECK_STREQ(p.cache_path, cache);
    WF_CHECK_TRUE(strstr(p.key, "OpenBLAS") != NULL);
    double measured = p.tflops;
    wf_peak q;
    WF_CHECK_OK(wf_peak_get(&q, &o));
    WF_CHECK_EQ(q.source, WF_PEAK_CACHED);
    WF_CHECK_NEAR(q.tflops, measured, measured * 1e-12);
    WF_CHECK_STREQ(q.key, p.key);
    wf_peak_describe(&q, line, sizeof line);
    WF_CHECK_TRUE(strstr(line, "cached in") && strstr(line, cache));
    /* The cache is JSON keyed by machine. */
    json_error_t err;
    json_t *root = json_load_file(cache, 0, &err);
    WF_CHECK_TRUE(root != NULL);
    WF_CHECK_TRUE(json_number_value(json_object_get(json_object_get(json_object_get(root, "entries"), p.key),
                                                    "tflops")) > 0);
    json_decref(root);
    /* refresh measures again; a broken cache is replaced; "" uses none. */
    o.refresh = WF_PEAK_REMEASURE;
    WF_CHECK_OK(wf_peak_get(&q, &o));
    WF_CHECK_EQ(q.source, WF_PEAK_MEASURED);
    wf_test_write_file(cache, "{not json", 9);
    o.refresh = WF_PEAK_USE_CACHE;
    WF_CHECK_OK(wf_peak_get(&q, &o));
    WF_CHECK_EQ(q.source, WF_PEAK_MEASURED);
    WF_CHECK_OK(wf_peak_get(&q, &o));
    WF_CHECK_EQ(q.source, WF_PEAK_CACHED);
    o.cache_path = "";
    WF_CHECK_OK(wf_peak_get(&q, &o));
    WF_CHECK_EQ(q.source, WF_PEAK_MEASURED);
    WF_CHECK_STREQ(q.cache_path, "");
}

/* A peak cache holding one entry, `key` at `tflops`. */
static void write_peak_cache(const char *cache, const char *key, double tflops) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"format\": \"weft-peak\", \"version\": 1, \"entries\": {\"%s\": {\"tflops\": %g, "
             "\"measured_at\": 5, \"threads\": 1, \"benchmark_s\": 0.1, \"method\": \"x\"}}}",
             key, tflops);
    wf_test_write_file(cache, text, strlen(text));
}

/* WF_PEAK_RECHECK (the trainer's recheck after an MFU above 100%) keeps a
 * cached peak that is higher than the new measurement and stores a higher
 * measurement; WF_PEAK_REMEASURE (the user's) replaces the entry either way. */
WF_TEST(peak_recheck_keeps_the_higher) {
    const char *cache = wf_test_path("recheck/weft/peak.json");
    wf_peak p, q;
    wf_peak_options o = {0, cache, 0.05, 256, 0};
    WF_CHECK_OK(wf_peak_get(&p, &o));
    write_peak_cache(cache, p.key, 1e6); /* far above any measurement */
    o.refresh = WF_PEAK_RECHECK;
    WF_CHECK_OK(wf_peak_get(&q, &o));
    WF_CHECK_EQ(q.source, WF_PEAK_CACHED);
    WF_CHECK_NEAR(q.tflops, 1e6, 0);
    o.refresh = WF_PEAK_USE_CACHE;
    WF_CHECK_OK(wf_peak_get(&q, &o));
    WF_CHECK_NEAR(q.tflops, 1e6, 0); /* still in the cache */
    write_peak_cache(cache, p.key, 1e-9); /* far below: replaced by the measurement */
    o.refresh = WF_PEAK_RECHECK;
    WF_CHECK_OK(wf_peak_get(&q, &o));
    WF_CHECK_EQ(q.source, WF_PEAK_MEASURED);
    WF_CHECK_TRUE(q.tflops > 1e-6);
    o.refresh = WF_PEAK_USE_CACHE;
    WF_CHECK_OK(wf_peak_get(&p, &o));
    WF_CHECK_NEAR(p.tflops, q.tflops, q.tflops * 1e-12);
    write_peak_cache(cache, p.key, 1e6); /* the user's refresh replaces a higher entry */
    o.refresh = WF_PEAK_REMEASURE;
    WF_CHECK_OK(wf_peak_get(&q, &o));
    WF_CHECK_EQ(q.source, WF_PEAK_MEASURED);
    WF_CHECK_TRUE(q.tflops < 1e6);
}

/* ------------------------------------------------------------- run.json */

WF_TEST(run_record_contents) {
    const char *dir = wf_test_tmpdir();
    setenv("WEFT_TEST_MARKER", "xyz", 1);
    setenv("OMP_PROC_BIND", "close", 1);
    setenv("UNRELATED_SECRET", "no", 1);
    char *argv[] = {(char *)"weft", (char *)"train", (char *)"--config", (char *)"x.toml"};
    wf_peak pk;
    wf_peak_options po = {2.0, NULL, 0, 0, 0};
    WF_CHECK_OK(wf_peak_get(&pk, &po));
    wf_run_arena ar = {2, {"model", "batch"}, {1000, 64}, 1064, 1064, 1 << 20};
    wf_run_record rec = {"[train]\nsteps = 3\n", 4, argv, &pk, 835584.0, 131392, NULL, NULL, NULL, &ar};
    WF_CHECK_OK(wf_run_record_write(dir, &rec));
    json_error_t err;
    json_t *r = json_load_file(wf_test_path("run.json"), 0, &err);
    WF_CHECK_TRUE(r != NULL);
    WF_CHECK_STREQ(json_string_value(json_object_get(r, "format")), "weft-run");
    WF_CHECK_EQ(json_integer_value(json_object_get(r, "version")), 3);
    WF_CHECK_TRUE(json_is_null(json_object_get(r, "model_source"))); /* none given */
    json_t *arena = json_object_get(r, "arena"); /* version 3 */
    WF_CHECK_EQ(json_integer_value(json_object_get(json_object_get(arena, "blocks"), "model")), 1000);
    WF_CHECK_EQ(json_integer_value(json_object_get(json_object_get(arena, "blocks"), "batch")), 64);
    WF_CHECK_EQ(json_integer_value(json_object_get(arena, "in_use")), 1064);
    WF_CHECK_EQ(json_integer_value(json_object_get(arena, "reserved")), 1 << 20);
    WF_CHECK_STREQ(json_string_value(json_object_get(r, "config_toml")), "[train]\nsteps = 3\n");
    WF_CHECK_STREQ(json_string_value(json_array_get(json_object_get(r, "command"), 2)), "--config");
    json_t *env = json_object_get(r, "env");
    WF_CHECK_STREQ(json_string_value(json_object_get(env, "WEFT_TEST_MARKER")), "xyz");
    WF_CHECK_STREQ(json_string_value(json_object_get(env, "OMP_PROC_BIND")), "close");
    WF_CHECK_TRUE(json_object_get(env, "UNRELATED_SECRET") == NULL);
    json_t *build = json_object_get(r, "build");
    WF_CHECK_TRUE(strstr(json_string_value(json_object_get(build, "cflags")), "-std=c11") != NULL);
    WF_CHECK_TRUE(strlen(json_string_value(json_object_get(build, "compiler_version"))) > 0);
    json_t *libs = json_object_get(r, "libraries");
    const char *need[] = {"openblas", "openblas_core", "pcre2", "jansson", "zstd", "zlib", "xxhash", "glibc"};
    for (size_t i = 0; i < sizeof need / sizeof *need; i++)
        WF_CHECK_TRUE(json_string_length(json_object_get(libs, need[i])) > 0);
    json_t *host = json_object_get(r, "host");
    WF_CHECK_TRUE(json_integer_value(json_object_get(host, "logical_cpus")) >= 1);
    WF_CHECK_TRUE(json_integer_value(json_object_get(host, "mem_total")) > 0);
    WF_CHECK_TRUE(json_string_length(json_object_get(host, "cpu")) > 0);
    json_t *mfu = json_object_get(r, "mfu");
    WF_CHECK_STREQ(json_string_value(json_object_get(mfu, "peak_source")), "config");
    WF_CHECK_NEAR(json_number_value(json_object_get(mfu, "peak_tflops")), 2.0, 0);
    WF_CHECK_NEAR(json_number_value(json_object_get(mfu, "flops_per_token")), 835584.0, 0);
    /* The build's source is this checkout: a commit, and a dirty flag. */
    json_t *git = json_object_get(r, "git");
    if (json_is_object(git)) {
        WF_CHECK_EQ(json_string_length(json_object_get(git, "commit")), 40);
        WF_CHECK_TRUE(json_is_boolean(json_object_get(git, "dirty")));
    }
    json_decref(r);
    /* A source directory that is not a checkout gives null, not an error. */
    rec.source_dir = dir;
    WF_CHECK_OK(wf_run_record_write(dir, &rec));
    r = json_load_file(wf_test_path("run.json"), 0, &err);
    WF_CHECK_TRUE(r && json_is_null(json_object_get(r, "git")));
    json_decref(r);
}

WF_TEST(run_record_dirty_checkout) {
    if (system("git --version >/dev/null 2>&1") != 0) return; /* no git: nothing to test */
    const char *repo = wf_test_path("repo");
    char cmd[2400];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cd '%s' && git init -q && echo one > a.txt && git add a.txt && "
             "git -c user.name=t -c user.email=t@t commit -q -m init && echo two >> a.txt",
             repo, repo);
    WF_CHECK_EQ(system(cmd), 0);
    wf_run_record rec = {NULL, 0, NULL, NULL, 0, -1, repo, NULL, NULL, NULL};
    WF_CHECK_OK(wf_run_record_write(wf_test_tmpdir(), &rec));
    json_error_t err;
    json_t *r = json_load_file(wf_test_path("run.json"), 0, &err);
    json_t *git = json_object_get(r, "git");
    WF_CHECK_TRUE(json_is_true(json_object_get(git, "dirty")));
    WF_CHECK_STREQ(json_string_value(json_array_get(json_object_get(git, "changes"), 0)), " M a.txt");
    WF_CHECK_STREQ(json_string_value(json_object_get(git, "diff_file")), "git.diff");
    WF_CHECK_TRUE(json_is_null(json_object_get(r, "config_toml")));
    char *diff;
    size_t len;
    WF_CHECK_OK(wf_file_read(wf_test_path("git.diff"), &diff, &len));
    WF_CHECK_TRUE(strstr(diff, "+two") != NULL);
    WF_CHECK_EQ(json_integer_value(json_object_get(git, "diff_bytes")), (long long)len);
    free(diff);
    json_decref(r);
}

/* ------------------------------------------------------------- report */

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

WF_TEST(report_reads_stitches_and_draws) {
    const char *dir = wf_test_tmpdir();
    /* steps 1..6, a spike at 5, a rollback to 4, steps 4..8, and a torn
     * last line */
    const char *lines =
        "{\"step\":1,\"loss\":5,\"lr\":0.001,\"grad_norm\":1,\"tokens_per_s\":100,\"step_s\":0.2,\"data_s\":0.01,"
        "\"fwd_bwd_s\":0.1,\"optim_s\":0.05,\"ckpt_s\":0,\"mfu_pct\":20,\"host_rss\":1000000,\"spike\":0}\n"
        "{\"step\":2,\"loss\":4,\"lr\":0.001,\"grad_norm\":1,\"spike\":0,\"val_loss\":4.5}\n"
        "\n"
        "{\"step\":3,\"loss\":3.5,\"lr\":0.001,\"grad_norm\":1,\"spike\":0}\n"
        "{\"step\":4,\"loss\":3.2,\"lr\":0.001,\"grad_norm\":1,\"spike\":0}\n"
        "{\"step\":5,\"loss\":9.9,\"lr\":0.001,\"grad_norm\":7,\"spike\":1,\"data_pos\":4,\"loss_z\":12.5}\n"
        "{\"step\":4,\"loss\":3.1,\"lr\":0.001,\"grad_norm\":1,\"spike\":0}\n"
        "{\"step\":5,\"loss\":3.0,\"lr\":0.001,\"grad_norm\":1,\"spike\":0}\n"
        "not json at all\n"
        "{\"step\":6,\"loss\":2.9,\"lr\":0.001,\"grad_norm\":null,\"spike\":0}\n"
        "{\"step\":7,\"loss\":2.8,\"lr\":0.001,\"grad_norm\":1,\"spike\":0}\n"
        "{\"step\":8,\"loss\":2.7,\"lr\":0.001,\"gra";
    wf_test_write_file(wf_test_path("metrics.jsonl"), lines, strlen(lines));
    const char *out = wf_test_path("r.html");
    WF_CHECK_OK(wf_report_write(dir, out));
    char *html;
    size_t len;
    WF_CHECK_OK(wf_file_read(out, &html, &len));
    const char *plots[] = {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "memory", "step_time"};
    for (size_t i = 0; i < sizeof plots / sizeof *plots; i++) {
        char id[64];
        snprintf(id, sizeof id, "data-plot=\"%s\"", plots[i]);
        WF_CHECK_EQ(count(html, id), 1);
    }
    /* stitched: steps 1..7, one each (the torn line and the bad line are
     * skipped): 7 losses + 1 validation loss */
    WF_CHECK_TRUE(strstr(html, "data-plot=\"loss\" data-values=\"8\"") != NULL);
    WF_CHECK_TRUE(strstr(html, "data-plot=\"lr\" data-values=\"7\"") != NULL);
    WF_CHECK_TRUE(strstr(html, "data-plot=\"mfu\" data-values=\"1\"") != NULL);
    WF_CHECK_TRUE(strstr(html, "2 lines of metrics.jsonl could not be read") != NULL);
    WF_CHECK_TRUE(strstr(html, "(the first: line 9)") != NULL);
    /* the spike is kept though its step was replaced: in the table and as
     * marks on the loss and gradient-norm plots */
    WF_CHECK_EQ(count(html, "<g class=\"spike\">"), 2);
    WF_CHECK_TRUE(strstr(html, "<td class=\"num\">12.5</td>") != NULL);
    WF_CHECK_TRUE(strstr(html, "rollbacks / resumes") != NULL);
    WF_CHECK_TRUE(strstr(html, "No run.json") != NULL);
    /* the validation point is drawn as a dot; the train loss as a line */
    WF_CHECK_EQ(count(html, "class=\"dot\" data-series=\"validation\""), 1);
    WF_CHECK_TRUE(count(html, "<polyline class=\"series\" data-series=\"train\"") >= 1);
    /* nothing external */
    WF_CHECK_TRUE(strstr(html, "src=") == NULL && strstr(html, "href=") == NULL);
    free(html);

    WF_CHECK_ERR(wf_report_write(wf_test_path("none"), out), WF_ERR_NOTFOUND, "metrics.jsonl");
    wf_test_write_file(wf_test_path("metrics.jsonl"), "\n\n", 2);
    WF_CHECK_ERR(wf_report_write(dir, out), WF_ERR_EMPTY, "no step records");
}
