/* Fuzz target: the checkpoint manifest (src/ckpt/ckpt_reader.c), as resume,
 * `weft ckpt verify` and export read it. The data file it describes is real:
 * once per process a small checkpoint (three tensors, 1 to 3 dimensions,
 * and scalar state) is written with weft's writer; each input replaces its
 * manifest.json. A checkpoint that opens is used: described, verified, its
 * state read and every tensor read back as far as the manifest allows
 * (and seen in place, when one piece holds it, equal to what is read).
 * With WEFT_FUZZ_SEED_OUT=FILE the untouched manifest is also copied to
 * FILE (tests/fuzz/make_seeds.sh takes its seed from there). */
#include "fuzz.h"
#include "weft/ckpt.h"

static char dir_[4200];

static float a_[12], b_[5], c_[24];

static const char *ckpt_dir(void) {
    if (dir_[0]) return dir_;
    for (int i = 0; i < 24; i++) {
        if (i < 12) a_[i] = 0.5f * (float)i;
        if (i < 5) b_[i] = -1.0f - (float)i;
        c_[i] = 1.0f / (1.0f + (float)i);
    }
    wf_ckpt_tensor t[3] = {
        {.name = "model.a", .ndim = 2, .shape = {4, 3}, .data = a_},
        {.name = "model.b", .ndim = 1, .shape = {5}, .data = b_},
        {.name = "optim.m.c", .ndim = 3, .shape = {2, 3, 4}, .data = c_},
    };
    wf_ckpt_writer_opts o = {.rank = 0, .world_size = 1};
    wf_ckpt_writer *w = NULL;
    FZ_CHECK(wf_ckpt_writer_create(&w, t, 3, &o) == WF_OK, "%s", wf_error_msg());
    wf_ckpt_meta *m = wf_ckpt_meta_create();
    FZ_CHECK(m && wf_ckpt_meta_set_u64(m, "train.step", 7) == WF_OK && wf_ckpt_meta_set_f64(m, "train.lr", 3e-4) == WF_OK &&
                 wf_ckpt_meta_set_str(m, "data.order", "seed 5") == WF_OK,
             "%s", wf_error_msg());
    fz_path(dir_, sizeof dir_, "step-0000007");
    FZ_CHECK(wf_ckpt_save(w, dir_, 7, m, NULL) == WF_OK, "%s", wf_error_msg());
    wf_ckpt_meta_destroy(m);
    wf_ckpt_writer_destroy(w);
    fz_seed_out(dir_, WF_CKPT_MANIFEST);
    return dir_;
}

static void report(void *ctx, const char *problem) {
    (void)ctx;
    (void)problem;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = ckpt_dir();
    fz_write_in(dir, WF_CKPT_MANIFEST, data, size);
    wf_ckpt *c = NULL;
    if (wf_ckpt_open(&c, dir) == WF_OK) {
        (void)wf_ckpt_step(c);
        (void)wf_ckpt_world_size(c);
        (void)wf_ckpt_data_bytes(c);
        uint64_t u;
        double f;
        const char *s;
        (void)wf_ckpt_get_u64(c, "train.step", &u);
        (void)wf_ckpt_get_f64(c, "train.lr", &f);
        (void)wf_ckpt_get_str(c, "data.order", &s);
        (void)wf_ckpt_verify(c, report, NULL);
        for (size_t i = 0; i < wf_ckpt_num_tensors(c); i++) {
            wf_ckpt_tensor_desc d;
            wf_ckpt_tensor_at(c, i, &d);
            int64_t numel = 1;
            for (int k = 0; k < d.ndim && numel <= 4096; k++) numel *= d.shape[k] > 0 ? d.shape[k] : 0;
            if (numel <= 0 || numel > 4096 || d.ndim < 1) continue;
            float *buf = malloc((size_t)numel * sizeof *buf);
            if (!buf) continue;
            (void)wf_ckpt_read_range(c, d.name, 0, numel, buf);
            (void)wf_ckpt_read_rows(c, d.name, 0, d.shape[0], buf);
            /* A tensor seen in place holds what the reader assembles. */
            const float *view = NULL;
            if (wf_ckpt_view(c, d.name, &view) == WF_OK && view &&
                wf_ckpt_read_range(c, d.name, 0, numel, buf) == WF_OK)
                FZ_CHECK(memcmp(view, buf, (size_t)numel * sizeof *buf) == 0, "tensor %s: its view differs from "
                         "what wf_ckpt_read_range reads", d.name);
            free(buf);
        }
    }
    wf_ckpt_close(c);
    wf_error_clear();
    return 0;
}
