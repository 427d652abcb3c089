/* Fuzz target: the checkpoint manifest's round trip (src/ckpt/ckpt_writer.c
 * and ckpt_reader.c): parse(write(x)) == x. The input describes a state:
 * up to four tensors (names, 1 to 4 dimensions, sizes) with values taken
 * from the input's bytes, and scalar state (unsigned integers, doubles of
 * any bit pattern, strings of any bytes). It is saved, opened, and every
 * tensor's shape and values and every scalar must come back as written;
 * what the writer refuses must be a status. */
#include <math.h>

#include "fuzz.h"
#include "weft/ckpt.h"

typedef struct {
    const uint8_t *p;
    size_t n;
} rd;

static unsigned take(rd *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

static uint64_t take64(rd *r) {
    uint64_t v = 0;
    for (int k = 0; k < 8; k++) v |= (uint64_t)take(r) << (8 * k);
    return v;
}

/* A short string (may hold any byte but NUL). */
static void take_str(rd *r, char *out, size_t cap) {
    size_t len = take(r) % 16, i = 0;
    for (; i < len && i + 1 < cap; i++) {
        unsigned ch = take(r);
        out[i] = (char)(ch ? ch : 'x');
    }
    out[i] = '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rd r = {data, size};
    char names[4][20];
    float *vals[4] = {0};
    wf_ckpt_tensor t[4];
    memset(t, 0, sizeof t);
    size_t n = 1 + take(&r) % 4;
    for (size_t i = 0; i < n; i++) {
        take_str(&r, names[i], sizeof names[i]);
        t[i].name = names[i];
        t[i].ndim = 1 + (int)(take(&r) % WF_CKPT_MAX_DIMS);
        int64_t numel = 1;
        for (int k = 0; k < t[i].ndim; k++) numel *= t[i].shape[k] = 1 + take(&r) % 5;
        vals[i] = malloc((size_t)numel * sizeof(float));
        if (!vals[i]) abort();
        for (int64_t e = 0; e < numel; e++) {
            uint32_t bits = (uint32_t)take64(&r);
            memcpy(&vals[i][e], &bits, 4);
        }
        t[i].data = vals[i];
    }
    wf_ckpt_meta *m = wf_ckpt_meta_create();
    if (!m) abort();
    char keys[6][20], svals[6][20];
    int kinds[6];
    uint64_t u[6];
    double f[6];
    size_t n_meta = take(&r) % 7;
    int meta_ok = 1;
    for (size_t i = 0; i < n_meta; i++) {
        take_str(&r, keys[i], sizeof keys[i]);
        kinds[i] = (int)(take(&r) % 3);
        wf_status s;
        if (kinds[i] == 0) s = wf_ckpt_meta_set_u64(m, keys[i], u[i] = take64(&r) >> (take(&r) % 64));
        else if (kinds[i] == 1) {
            uint64_t bits = take64(&r);
            memcpy(&f[i], &bits, 8);
            s = wf_ckpt_meta_set_f64(m, keys[i], f[i]);
        } else {
            take_str(&r, svals[i], sizeof svals[i]);
            s = wf_ckpt_meta_set_str(m, keys[i], svals[i]);
        }
        if (s != WF_OK) meta_ok = 0;
    }
    uint64_t step = take64(&r) >> 1;

    char dir[4200];
    fz_path(dir, sizeof dir, "step-roundtrip");
    wf_ckpt_writer *w = NULL;
    wf_ckpt_writer_opts o = {.rank = 0, .world_size = 1};
    if (meta_ok && wf_ckpt_writer_create(&w, t, n, &o) == WF_OK && wf_ckpt_save(w, dir, step, m, NULL) == WF_OK) {
        wf_ckpt *c = NULL;
        FZ_CHECK(wf_ckpt_open(&c, dir) == WF_OK, "a checkpoint weft wrote does not open: %s", wf_error_msg());
        FZ_CHECK(wf_ckpt_step(c) == step, "step");
        FZ_CHECK(wf_ckpt_num_tensors(c) == n, "%zu tensors written, %zu read", n, wf_ckpt_num_tensors(c));
        FZ_CHECK(wf_ckpt_verify(c, NULL, NULL) == WF_OK, "verify: %s", wf_error_msg());
        for (size_t i = 0; i < n; i++) {
            long at = wf_ckpt_find(c, names[i]);
            FZ_CHECK(at >= 0, "tensor \"%s\" is not found", names[i]);
            wf_ckpt_tensor_desc d;
            wf_ckpt_tensor_at(c, (size_t)at, &d);
            FZ_CHECK(d.ndim == t[i].ndim && strcmp(d.name, names[i]) == 0, "tensor \"%s\": ndim", names[i]);
            int64_t numel = 1;
            for (int k = 0; k < d.ndim; k++) {
                FZ_CHECK(d.shape[k] == t[i].shape[k], "tensor \"%s\": shape", names[i]);
                numel *= d.shape[k];
            }
            float *back = malloc((size_t)numel * sizeof *back);
            if (!back) abort();
            FZ_CHECK(wf_ckpt_read_range(c, names[i], 0, numel, back) == WF_OK, "read: %s", wf_error_msg());
            FZ_CHECK(memcmp(back, vals[i], (size_t)numel * sizeof *back) == 0, "tensor \"%s\": values differ", names[i]);
            free(back);
        }
        /* Scalars: the last value set for a key wins. */
        for (size_t i = 0; i < n_meta; i++) {
            int later = 0;
            for (size_t j = i + 1; j < n_meta; j++) later |= strcmp(keys[j], keys[i]) == 0;
            if (later) continue;
            if (kinds[i] == 0) {
                uint64_t v = 0;
                FZ_CHECK(wf_ckpt_get_u64(c, keys[i], &v) == WF_OK && v == u[i], "u64 \"%s\": %s", keys[i],
                         wf_error_msg());
            } else if (kinds[i] == 1) {
                double v = 0;
                FZ_CHECK(wf_ckpt_get_f64(c, keys[i], &v) == WF_OK && (v == f[i] || (isnan(v) && isnan(f[i]))),
                         "f64 \"%s\": %.17g written, %.17g read (%s)", keys[i], f[i], v, wf_error_msg());
            } else {
                const char *v = NULL;
                FZ_CHECK(wf_ckpt_get_str(c, keys[i], &v) == WF_OK && strcmp(v, svals[i]) == 0, "str \"%s\": %s",
                         keys[i], wf_error_msg());
            }
        }
        wf_ckpt_close(c);
    }
    wf_ckpt_writer_destroy(w);
    wf_ckpt_meta_destroy(m);
    for (size_t i = 0; i < n; i++) free(vals[i]);
    wf_error_clear();
    return 0;
}
