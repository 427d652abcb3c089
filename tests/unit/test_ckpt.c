/* Unit tests of checkpoints (src/ckpt): layout plan, sync and async saves
 * (the staging buffer holds the state of the moment of the save, saves do
 * not overlap, failures are reported), the manifest's scalar state, loading
 * with checks, resharding (written by 4 simulated ranks, read by 2 and 1;
 * pieces that are arbitrary boxes), corruption and truncation named by file
 * and tensor, interrupted saves ignored and cleaned up, retention, and the
 * fallback to the previous valid checkpoint. The async tests also run under
 * ThreadSanitizer (make SANITIZE=thread). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"
#include "harness.h"
#include "weft/ckpt.h"
#include "weft/fileio.h"
#include "weft/safetensors.h"

/* A small state: a matrix (rows x 5), a vector (7) and a (3, 2, 4) tensor,
 * filled with values that depend on `seed`. */
typedef struct {
    float a[10 * 5], b[7], c[3 * 2 * 4];
    wf_ckpt_tensor t[3];
} state3;

static void state_init(state3 *s, float seed) {
    for (size_t i = 0; i < sizeof s->a / sizeof *s->a; i++) s->a[i] = seed + (float)i;
    for (size_t i = 0; i < sizeof s->b / sizeof *s->b; i++) s->b[i] = -seed - (float)i * 0.5f;
    for (size_t i = 0; i < sizeof s->c / sizeof *s->c; i++) s->c[i] = seed * 2 + (float)i * 0.25f;
    s->t[0] = (wf_ckpt_tensor){"w.a", 2, {10, 5}, s->a, 0, 0, NULL};
    s->t[1] = (wf_ckpt_tensor){"w.b", 1, {7}, s->b, 0, 0, NULL};
    s->t[2] = (wf_ckpt_tensor){"w.c", 3, {3, 2, 4}, s->c, 0, 0, NULL};
}

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", wf_test_tmpdir(), name); }

static wf_ckpt_meta *meta_with(uint64_t step) {
    wf_ckpt_meta *m = wf_ckpt_meta_create();
    WF_CHECK_TRUE(m != NULL);
    WF_CHECK_OK(wf_ckpt_meta_set_u64(m, "loader.sample", step * 10));
    WF_CHECK_OK(wf_ckpt_meta_set_f64(m, "x.third", 1.0 / 3.0));
    WF_CHECK_OK(wf_ckpt_meta_set_str(m, "config", "a = 1\n"));
    return m;
}

static void check_equal(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) wf_test_fail(__FILE__, __LINE__, "element %zu: %g != %g", i, a[i], b[i]);
}

/* Loads a checkpoint into a fresh state and compares it with `want`. */
static void check_ckpt_holds(const char *dir, const state3 *want, uint64_t step) {
    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    WF_CHECK_EQ(wf_ckpt_step(c), step);
    WF_CHECK_OK(wf_ckpt_verify(c, NULL, NULL));
    state3 got;
    state_init(&got, 999);
    WF_CHECK_OK(wf_ckpt_load(c, got.t, 3));
    check_equal(got.a, want->a, 50);
    check_equal(got.b, want->b, 7);
    check_equal(got.c, want->c, 24);
    uint64_t v;
    WF_CHECK_OK(wf_ckpt_get_u64(c, "loader.sample", &v));
    WF_CHECK_EQ(v, step * 10);
    wf_ckpt_close(c);
}

WF_TEST(rows_split_near_equally_and_cover) {
    int64_t b, e, prev = 0;
    int64_t sizes[4];
    for (int r = 0; r < 4; r++) {
        wf__ckpt_rows_of(10, r, 4, &b, &e);
        WF_CHECK_EQ(b, prev);
        sizes[r] = e - b;
        prev = e;
    }
    WF_CHECK_EQ(prev, 10);
    WF_CHECK_EQ(sizes[0] + sizes[1] + sizes[2] + sizes[3], 10);
    for (int r = 0; r < 4; r++) WF_CHECK_TRUE(sizes[r] == 2 || sizes[r] == 3);
    wf__ckpt_rows_of(3, 0, 4, &b, &e); /* fewer rows than ranks: some get none */
    WF_CHECK_EQ(e - b, 0);
}

WF_TEST(plan_places_pieces_aligned_and_disjoint) {
    state3 s;
    state_init(&s, 1);
    wf_ckpt_plan p;
    WF_CHECK_OK(wf__ckpt_plan_make(&p, s.t, 3, 4));
    /* w.c has 3 rows: one of the 4 ranks has no piece of it */
    WF_CHECK_EQ(p.n_pieces, 4 + 4 + 3);
    for (int r = 0; r < 4; r++) {
        uint64_t end = WF_CKPT_HEADER_BYTES;
        for (size_t k = p.rank_first[r]; k < p.rank_first[r + 1]; k++) {
            WF_CHECK_EQ(p.pieces[k].rank, r);
            WF_CHECK_EQ(p.pieces[k].offset % WF_CKPT_ALIGN, 0);
            WF_CHECK_TRUE(p.pieces[k].offset >= end);
            end = p.pieces[k].offset + p.pieces[k].length;
        }
        WF_CHECK_TRUE(p.rank_bytes[r] >= end);
    }
    wf__ckpt_plan_free(&p);
    wf_ckpt_tensor dup[2] = {s.t[0], s.t[0]};
    WF_CHECK_ERR(wf__ckpt_plan_make(&p, dup, 2, 1), WF_ERR_INVALID, "appears twice");
}

static void save_and_check(int async) {
    state3 s;
    state_init(&s, 1);
    char root[4096], dir[4096];
    path_in(root, sizeof root, "ckpts");
    WF_CHECK_OK(wf_mkdirs(root));
    wf_ckpt_writer *w;
    wf_ckpt_writer_opts o = {0, 1, async, 0, 0};
    WF_CHECK_OK(wf_ckpt_writer_create(&w, s.t, 3, &o));
    WF_CHECK_EQ(wf_ckpt_writer_staging_bytes(w) > 0, async);
    wf_ckpt_meta *m = meta_with(5);
    wf_ckpt_step_dir(dir, sizeof dir, root, 5);
    wf_ckpt_save_stats st;
    WF_CHECK_OK(wf_ckpt_save(w, dir, 5, m, &st));
    WF_CHECK_EQ(st.step, 5);
    WF_CHECK_TRUE(st.bytes > 4 * (50 + 7 + 24));
    WF_CHECK_OK(wf_ckpt_writer_wait(w, &st));
    WF_CHECK_EQ(st.status, WF_OK);
    WF_CHECK_TRUE(wf_ckpt_writer_poll(w, &st));
    WF_CHECK_TRUE(!wf_ckpt_writer_poll(w, &st));
    wf_ckpt_meta_destroy(m);
    wf_ckpt_writer_destroy(w);
    check_ckpt_holds(dir, &s, 5);

    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    double third;
    const char *cfg;
    WF_CHECK_OK(wf_ckpt_get_f64(c, "x.third", &third));
    WF_CHECK_TRUE(third == 1.0 / 3.0); /* round-trip exact */
    WF_CHECK_OK(wf_ckpt_get_str(c, "config", &cfg));
    WF_CHECK_STREQ(cfg, "a = 1\n");
    uint64_t v;
    WF_CHECK_ERR(wf_ckpt_get_u64(c, "loader.epoch", &v), WF_ERR_FORMAT, "loader.epoch is missing");
    WF_CHECK_ERR(wf_ckpt_get_u64(c, "config", &v), WF_ERR_FORMAT, "config is missing or not");
    WF_CHECK_EQ(wf_ckpt_num_tensors(c), 3);
    wf_ckpt_tensor_desc d;
    wf_ckpt_tensor_at(c, (size_t)wf_ckpt_find(c, "w.c"), &d);
    WF_CHECK_EQ(d.ndim, 3);
    WF_CHECK_EQ(d.shape[2], 4);
    WF_CHECK_EQ(wf_ckpt_find(c, "nope"), -1);
    wf_ckpt_close(c);
    /* No temporary directory is left behind. */
    uint64_t *steps;
    size_t n;
    WF_CHECK_OK(wf_ckpt_list(root, &steps, &n));
    WF_CHECK_EQ(n, 1);
    free(steps);
    int removed;
    WF_CHECK_OK(wf_ckpt_cleanup(root, &removed));
    WF_CHECK_EQ(removed, 0);
}

WF_TEST(sync_save_round_trips) { save_and_check(0); }
WF_TEST(async_save_round_trips) { save_and_check(1); }

WF_TEST(async_save_holds_the_state_of_its_moment) {
    /* Each save is followed at once by a change of the state; each
     * checkpoint must hold the state as it was when its save was called,
     * which fails if the writer read the live tensors or if a save
     * overwrote the staging buffer while the previous one was written. */
    state3 s;
    state_init(&s, 0);
    char root[4096], dir[4096];
    path_in(root, sizeof root, "ckpts");
    WF_CHECK_OK(wf_mkdirs(root));
    wf_ckpt_writer *w;
    wf_ckpt_writer_opts o = {0, 1, 1, 0, 0};
    WF_CHECK_OK(wf_ckpt_writer_create(&w, s.t, 3, &o));
    const int n = 12;
    int polled = 0;
    for (int k = 1; k <= n; k++) {
        state_init(&s, (float)k);
        wf_ckpt_meta *m = meta_with((uint64_t)k);
        wf_ckpt_step_dir(dir, sizeof dir, root, (uint64_t)k);
        WF_CHECK_OK(wf_ckpt_save(w, dir, (uint64_t)k, m, NULL));
        wf_ckpt_meta_destroy(m);
        state_init(&s, -1000.0f * (float)k); /* scribble over the live state */
        wf_ckpt_save_stats st;
        while (wf_ckpt_writer_poll(w, &st)) {
            WF_CHECK_EQ(st.status, WF_OK);
            polled++;
        }
    }
    WF_CHECK_OK(wf_ckpt_writer_wait(w, NULL));
    wf_ckpt_save_stats st;
    while (wf_ckpt_writer_poll(w, &st)) polled++;
    WF_CHECK_TRUE(polled >= 1 && polled <= n);
    wf_ckpt_writer_destroy(w);
    for (int k = 1; k <= n; k++) {
        state3 want;
        state_init(&want, (float)k);
        wf_ckpt_step_dir(dir, sizeof dir, root, (uint64_t)k);
        check_ckpt_holds(dir, &want, (uint64_t)k);
    }
}

WF_TEST(destroy_waits_for_the_save_in_flight) {
    state3 s;
    state_init(&s, 3);
    char root[4096], dir[4096];
    path_in(root, sizeof root, "ckpts");
    WF_CHECK_OK(wf_mkdirs(root));
    wf_ckpt_writer *w;
    wf_ckpt_writer_opts o = {0, 1, 1, 0, 0};
    WF_CHECK_OK(wf_ckpt_writer_create(&w, s.t, 3, &o));
    wf_ckpt_meta *m = meta_with(7);
    wf_ckpt_step_dir(dir, sizeof dir, root, 7);
    WF_CHECK_OK(wf_ckpt_save(w, dir, 7, m, NULL));
    wf_ckpt_meta_destroy(m);
    wf_ckpt_writer_destroy(w); /* no wait: destroy must finish the save */
    check_ckpt_holds(dir, &s, 7);
}

WF_TEST(async_failure_is_reported_with_its_message) {
    state3 s;
    state_init(&s, 1);
    wf_ckpt_writer *w;
    wf_ckpt_writer_opts o = {0, 1, 1, 0, 0};
    WF_CHECK_OK(wf_ckpt_writer_create(&w, s.t, 3, &o));
    char file[4096], dir[8192];
    path_in(file, sizeof file, "a-file");
    wf_test_write_file(file, "x", 1);
    snprintf(dir, sizeof dir, "%s/step-0000001", file); /* its parent is a file: cannot be made */
    WF_CHECK_OK(wf_ckpt_save(w, dir, 1, NULL, NULL)); /* queued; fails in the thread */
    /* the next save reports it, once */
    WF_CHECK_ERR(wf_ckpt_save(w, dir, 2, NULL, NULL), WF_ERR_IO, "step 1 failed");
    WF_CHECK_OK(wf_ckpt_save(w, dir, 3, NULL, NULL));
    /* and so does waiting, with the thread's message */
    WF_CHECK_ERR(wf_ckpt_writer_wait(w, NULL), WF_ERR_IO, "a-file/.tmp-step-0000001");
    wf_ckpt_save_stats st;
    WF_CHECK_TRUE(wf_ckpt_writer_poll(w, &st));
    WF_CHECK_EQ(st.status, WF_ERR_IO);
    WF_CHECK_EQ(st.step, 3);
    wf_ckpt_writer_destroy(w);
    /* sync: at once */
    o.async = 0;
    WF_CHECK_OK(wf_ckpt_writer_create(&w, s.t, 3, &o));
    WF_CHECK_ERR(wf_ckpt_save(w, dir, 1, NULL, NULL), WF_ERR_IO, "a-file");
    wf_ckpt_writer_destroy(w);
    o.world_size = 2;
    WF_CHECK_ERR(wf_ckpt_writer_create(&w, s.t, 3, &o), WF_ERR_UNSUPPORTED, "communicator");
}

/* Writes `s` as world_size simulated ranks, each writing its own file. */
static void write_multi_rank(const state3 *s, int world, const char *dir) {
    wf_ckpt_plan p;
    WF_CHECK_OK(wf__ckpt_plan_make(&p, s->t, 3, world));
    char *tmp = wf__ckpt_tmp_path(dir);
    WF_CHECK_OK(wf_mkdirs(tmp));
    uint64_t *sums = calloc(p.n_pieces, sizeof *sums);
    for (int r = 0; r < world; r++) {
        /* odd ranks through a staged image, even ranks from the tensors */
        unsigned char *image = NULL;
        if (r % 2) {
            image = calloc(1, p.rank_bytes[r]);
            wf__ckpt_stage(&p, r, 9, image);
        }
        WF_CHECK_OK(wf__ckpt_write_data(&p, r, tmp, 9, image, sums));
        free(image);
    }
    wf_ckpt_meta *m = meta_with(9);
    WF_CHECK_OK(wf__ckpt_write_manifest(&p, tmp, 9, wf__ckpt_meta_json(m), sums));
    wf_ckpt_meta_destroy(m);
    WF_CHECK_OK(wf__ckpt_commit(tmp, dir));
    free(sums);
    free(tmp);
    wf__ckpt_plan_free(&p);
}

WF_TEST(written_by_4_ranks_read_by_2_and_1) {
    state3 s;
    state_init(&s, 2);
    char dir[4096];
    path_in(dir, sizeof dir, "step-0000009");
    write_multi_rank(&s, 4, dir);
    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    WF_CHECK_EQ(wf_ckpt_world_size(c), 4);
    for (int r = 0; r < 4; r++) {
        char f[8192], name[64];
        wf__ckpt_data_name(name, sizeof name, r, 4);
        snprintf(f, sizeof f, "%s/%s", dir, name);
        WF_CHECK_TRUE(wf_path_exists(f));
    }
    /* 2 ranks: each reads its half of every tensor, across the 4 pieces */
    for (int w = 1; w <= 3; w++) {
        for (int r = 0; r < w; r++) {
            for (int ti = 0; ti < 3; ti++) {
                const wf_ckpt_tensor *t = &s.t[ti];
                int64_t b, e, row = 1;
                for (int d = 1; d < t->ndim; d++) row *= t->shape[d];
                wf__ckpt_rows_of(t->shape[0], r, w, &b, &e);
                float out[64];
                memset(out, 0xff, sizeof out);
                WF_CHECK_OK(wf_ckpt_read_rows(c, t->name, b, e, out));
                check_equal(out, t->data + b * row, (size_t)((e - b) * row));
            }
        }
    }
    float out[64];
    WF_CHECK_ERR(wf_ckpt_read_rows(c, "w.a", 4, 11, out), WF_ERR_RANGE, "outside its 10 rows");
    wf_ckpt_close(c);
    check_ckpt_holds(dir, &s, 9);
}

/* A checkpoint whose tensor (6, 4) is stored as two column blocks (a layout
 * weft's writer does not make but the format allows) in two files. */
WF_TEST(pieces_that_are_column_blocks_read_back) {
    float full[24];
    for (int i = 0; i < 24; i++) full[i] = (float)i;
    char dir[4096];
    path_in(dir, sizeof dir, "step-0000003");
    WF_CHECK_OK(wf_mkdirs(dir));
    json_t *files = json_array(), *pieces = json_array();
    for (int r = 0; r < 2; r++) {
        unsigned char buf[64 + 12 * 4] = {0};
        memcpy(buf, WF_CKPT_DATA_MAGIC, 8);
        buf[8] = 1;
        buf[12] = (unsigned char)r;
        buf[16] = 2;
        buf[20] = 64;
        buf[24] = 3;
        buf[32] = (unsigned char)sizeof buf;
        float blk[12];
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 2; j++) blk[i * 2 + j] = full[i * 4 + r * 2 + j];
        memcpy(buf + 64, blk, sizeof blk);
        char name[64], path[8192], hex[17];
        wf__ckpt_data_name(name, sizeof name, r, 2);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        wf_test_write_file(path, buf, sizeof buf);
        json_array_append_new(files, json_pack("{s:s,s:i,s:i}", "name", name, "rank", r, "bytes", (int)sizeof buf));
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)wf_hash64(buf + 64, 48));
        json_array_append_new(pieces, json_pack("{s:i,s:[i,i],s:[i,i],s:i,s:i,s:s}", "file", r, "offsets", 0, 2 * r,
                                                "sizes", 6, 2, "offset", 64, "length", 48, "xxh3", hex));
    }
    json_t *m = json_pack("{s:s,s:i,s:i,s:i,s:s,s:o,s:{},s:[{s:s,s:s,s:[i,i],s:o}]}", "format", "weft-checkpoint",
                          "version", 1, "step", 3, "world_size", 2, "byte_order", "little", "files", files, "state",
                          "tensors", "name", "t", "dtype", "F32", "shape", 6, 4, "pieces", pieces);
    WF_CHECK_TRUE(m != NULL);
    char mpath[8192];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    WF_CHECK_TRUE(json_dump_file(m, mpath, 0) == 0);
    json_decref(m);
    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    float out[24];
    WF_CHECK_OK(wf_ckpt_read_rows(c, "t", 0, 6, out));
    check_equal(out, full, 24);
    WF_CHECK_OK(wf_ckpt_read_rows(c, "t", 2, 5, out));
    check_equal(out, full + 8, 12);
    wf_ckpt_close(c);
}

static void flip_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    WF_CHECK_TRUE(f != NULL);
    fseek(f, off, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(ch ^ 0x10, f);
    fclose(f);
}

WF_TEST(corruption_and_truncation_name_file_and_tensor) {
    state3 s;
    state_init(&s, 4);
    char root[4096], dir[4096], data[8192];
    path_in(root, sizeof root, "ckpts");
    WF_CHECK_OK(wf_mkdirs(root));
    wf_ckpt_writer *w;
    wf_ckpt_writer_opts o = {0, 1, 0, 0, 0};
    WF_CHECK_OK(wf_ckpt_writer_create(&w, s.t, 3, &o));
    for (uint64_t step = 1; step <= 3; step++) {
        wf_ckpt_step_dir(dir, sizeof dir, root, step);
        WF_CHECK_OK(wf_ckpt_save(w, dir, step, NULL, NULL));
    }
    wf_ckpt_writer_destroy(w);

    /* step 3: a flipped bit inside w.b (second piece of the file) */
    wf_ckpt_step_dir(dir, sizeof dir, root, 3);
    snprintf(data, sizeof data, "%s/data-00000-of-00001.bin", dir);
    wf_ckpt_plan p;
    WF_CHECK_OK(wf__ckpt_plan_make(&p, s.t, 3, 1));
    flip_byte(data, (long)p.pieces[1].offset + 5);
    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    state3 got;
    state_init(&got, 0);
    WF_CHECK_ERR(wf_ckpt_load(c, got.t, 3), WF_ERR_CHECKSUM, "data-00000-of-00001.bin: tensor w.b");
    WF_CHECK_ERR(wf_ckpt_verify(c, NULL, NULL), WF_ERR_CHECKSUM, "checksum mismatch");
    wf_ckpt_close(c);

    /* step 2: truncated inside w.c */
    wf_ckpt_step_dir(dir, sizeof dir, root, 2);
    snprintf(data, sizeof data, "%s/data-00000-of-00001.bin", dir);
    WF_CHECK_TRUE(truncate(data, (off_t)p.pieces[2].offset + 8) == 0);
    WF_CHECK_ERR(wf_ckpt_open(&c, dir), WF_ERR_FORMAT, "truncated");
    WF_CHECK_ERR(wf_ckpt_open(&c, dir), WF_ERR_FORMAT, "tensor w.c");
    wf__ckpt_plan_free(&p);

    /* the newest valid one is step 1 */
    WF_CHECK_OK(wf_ckpt_open_latest(root, &c));
    WF_CHECK_TRUE(c != NULL);
    WF_CHECK_EQ(wf_ckpt_step(c), 1);
    wf_ckpt_close(c);

    /* manifest problems */
    char mpath[8192];
    wf_ckpt_step_dir(dir, sizeof dir, root, 1);
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    char *text;
    size_t len;
    WF_CHECK_OK(wf_file_read(mpath, &text, &len));
    wf_test_write_file(mpath, text, len / 2);
    WF_CHECK_ERR(wf_ckpt_open(&c, dir), WF_ERR_FORMAT, "malformed manifest");
    unlink(mpath);
    WF_CHECK_ERR(wf_ckpt_open(&c, dir), WF_ERR_NOTFOUND, "manifest.json is missing");
    free(text);
    WF_CHECK_OK(wf_ckpt_open_latest(root, &c));
    WF_CHECK_TRUE(c == NULL);
}

/* Edits the manifest of a fresh single-rank checkpoint and expects `needle`. */
static void manifest_edit2_fails(const char *field, json_t *value, const char *field2, json_t *value2,
                                 const char *needle) {
    state3 s;
    state_init(&s, 5);
    char dir[4096], mpath[8192];
    path_in(dir, sizeof dir, "step-0000001");
    wf_remove_tree(dir);
    write_multi_rank(&s, 1, dir);
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    json_t *m = json_load_file(mpath, 0, NULL);
    json_t *piece = json_array_get(json_object_get(json_array_get(json_object_get(m, "tensors"), 0), "pieces"), 0);
    json_object_set_new(piece, field, value);
    if (field2) json_object_set_new(piece, field2, value2);
    WF_CHECK_TRUE(json_dump_file(m, mpath, 0) == 0);
    json_decref(m);
    wf_ckpt *c = NULL;
    wf_status st = wf_ckpt_open(&c, dir);
    if (st == WF_OK) {
        float out[64];
        st = wf_ckpt_read_rows(c, "w.a", 0, 10, out);
        wf_ckpt_close(c);
    }
    WF_CHECK_TRUE(st != WF_OK);
    if (!strstr(wf_error_msg(), needle)) wf_test_fail(__FILE__, __LINE__, "'%s' lacks '%s'", wf_error_msg(), needle);
}

static void manifest_edit_fails(const char *field, json_t *value, const char *needle) {
    manifest_edit2_fails(field, value, NULL, NULL, needle);
}

/* wf_ckpt_view: a tensor in one piece is seen in place (a pointer into the
 * data file's mapping, its checksum checked first); a tensor cut into
 * pieces by several ranks is not (NULL, WF_OK), and reading it still works. */
WF_TEST(view_is_in_place_for_one_piece_only) {
    state3 s;
    state_init(&s, 6);
    char root[4096], dir[4096], data[8192];
    path_in(root, sizeof root, "ckpts");
    WF_CHECK_OK(wf_mkdirs(root));
    wf_ckpt_writer *w;
    wf_ckpt_writer_opts o = {0, 1, 0, 0, 0};
    WF_CHECK_OK(wf_ckpt_writer_create(&w, s.t, 3, &o));
    wf_ckpt_step_dir(dir, sizeof dir, root, 1);
    WF_CHECK_OK(wf_ckpt_save(w, dir, 1, NULL, NULL));
    wf_ckpt_writer_destroy(w);
    snprintf(data, sizeof data, "%s/data-00000-of-00001.bin", dir);
    wf_mmap file;
    WF_CHECK_OK(wf_mmap_open(&file, data));

    wf_ckpt_plan p;
    WF_CHECK_OK(wf__ckpt_plan_make(&p, s.t, 3, 1));
    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    const float *v = NULL, *again = NULL;
    for (int ti = 0; ti < 3; ti++) {
        const wf_ckpt_tensor *t = &s.t[ti];
        int64_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
        WF_CHECK_OK(wf_ckpt_view(c, t->name, &v));
        WF_CHECK_TRUE(v != NULL);
        check_equal(v, t->data, (size_t)n);
        /* the file's own bytes at the piece's offset, and the same memory
         * every time (not a copy) */
        WF_CHECK_TRUE(memcmp(v, file.data + p.pieces[ti].offset, (size_t)n * 4) == 0);
        WF_CHECK_OK(wf_ckpt_view(c, t->name, &again));
        WF_CHECK_TRUE(again == v);
    }
    WF_CHECK_ERR(wf_ckpt_view(c, "nope", &v), WF_ERR_NOTFOUND, "no tensor nope");
    WF_CHECK_TRUE(v == NULL);
    wf_ckpt_close(c);

    /* a flipped bit in w.b: its view is refused, naming the file and tensor */
    flip_byte(data, (long)p.pieces[1].offset + 5);
    wf__ckpt_plan_free(&p);
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    WF_CHECK_OK(wf_ckpt_view(c, "w.a", &v));
    WF_CHECK_ERR(wf_ckpt_view(c, "w.b", &v), WF_ERR_CHECKSUM, "data-00000-of-00001.bin: tensor w.b");
    WF_CHECK_TRUE(v == NULL);
    wf_ckpt_close(c);
    wf_mmap_close(&file);

    /* written by 4 ranks: every tensor is in several pieces */
    path_in(dir, sizeof dir, "step-0000009");
    write_multi_rank(&s, 4, dir);
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    for (int ti = 0; ti < 3; ti++) {
        v = (const float *)1;
        WF_CHECK_OK(wf_ckpt_view(c, s.t[ti].name, &v));
        WF_CHECK_TRUE(v == NULL);
    }
    wf_ckpt_close(c);
}

WF_TEST(manifest_inconsistencies_are_rejected) {
    manifest_edit2_fails("sizes", json_pack("[i,i]", 9, 5), "length", json_integer(180), "cover 45 of 50");
    manifest_edit_fails("sizes", json_pack("[i,i]", 9, 5), "do not hold");
    manifest_edit_fails("offsets", json_pack("[i,i]", 2, 0), "outside the shape");
    manifest_edit_fails("length", json_integer(12), "do not hold");
    manifest_edit_fails("offset", json_integer(1 << 30), "do not hold");
    manifest_edit_fails("xxh3", json_string("zz"), "16-digit hex");
    manifest_edit_fails("xxh3", json_string("0123456789abcdef"), "checksum mismatch");
    manifest_edit_fails("file", json_integer(1), "needs file");
}

WF_TEST(interrupted_saves_are_not_checkpoints_and_are_cleaned) {
    char root[4096], tmp[8192], trash[8192], dir[4096];
    path_in(root, sizeof root, "ckpts");
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-0000005.123", root);
    snprintf(trash, sizeof trash, "%s/.trash-step-0000002.123", root);
    WF_CHECK_OK(wf_mkdirs(tmp));
    WF_CHECK_OK(wf_mkdirs(trash));
    char f[16384];
    snprintf(f, sizeof f, "%s/data-00000-of-00001.bin", tmp);
    wf_test_write_file(f, "x", 1);
    wf_ckpt_step_dir(dir, sizeof dir, root, 4); /* step dir without a manifest: a stray directory */
    WF_CHECK_OK(wf_mkdirs(dir));
    uint64_t *steps;
    size_t n;
    WF_CHECK_OK(wf_ckpt_list(root, &steps, &n));
    WF_CHECK_EQ(n, 1);
    WF_CHECK_EQ(steps[0], 4);
    free(steps);
    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open_latest(root, &c)); /* not valid: skipped */
    WF_CHECK_TRUE(c == NULL);
    int removed;
    WF_CHECK_OK(wf_ckpt_cleanup(root, &removed));
    WF_CHECK_EQ(removed, 2);
    WF_CHECK_TRUE(!wf_path_exists(tmp) && !wf_path_exists(trash));
}

WF_TEST(a_save_replaces_a_checkpoint_of_the_same_step) {
    state3 s;
    state_init(&s, 6);
    char root[4096], dir[4096];
    path_in(root, sizeof root, "ckpts");
    WF_CHECK_OK(wf_mkdirs(root));
    wf_ckpt_writer *w;
    wf_ckpt_writer_opts o = {0, 1, 0, 0, 0};
    WF_CHECK_OK(wf_ckpt_writer_create(&w, s.t, 3, &o));
    wf_ckpt_step_dir(dir, sizeof dir, root, 8);
    wf_ckpt_meta *m = meta_with(8);
    WF_CHECK_OK(wf_ckpt_save(w, dir, 8, m, NULL));
    state_init(&s, 7);
    WF_CHECK_OK(wf_ckpt_save(w, dir, 8, m, NULL));
    wf_ckpt_meta_destroy(m);
    wf_ckpt_writer_destroy(w);
    check_ckpt_holds(dir, &s, 8);
    int removed;
    WF_CHECK_OK(wf_ckpt_cleanup(root, &removed));
    WF_CHECK_EQ(removed, 0);
}

WF_TEST(retention_keeps_the_last_k_and_every_m) {
    state3 s;
    state_init(&s, 1);
    char root[4096], dir[4096];
    path_in(root, sizeof root, "ckpts");
    WF_CHECK_OK(wf_mkdirs(root));
    wf_ckpt_writer *w;
    wf_ckpt_writer_opts o = {0, 1, 1, 2, 4};
    WF_CHECK_OK(wf_ckpt_writer_create(&w, s.t, 3, &o));
    for (uint64_t step = 1; step <= 9; step++) {
        wf_ckpt_step_dir(dir, sizeof dir, root, step);
        WF_CHECK_OK(wf_ckpt_save(w, dir, step, NULL, NULL));
    }
    WF_CHECK_OK(wf_ckpt_writer_wait(w, NULL));
    wf_ckpt_writer_destroy(w);
    uint64_t *steps;
    size_t n;
    WF_CHECK_OK(wf_ckpt_list(root, &steps, &n));
    WF_CHECK_EQ(n, 3);
    WF_CHECK_EQ(steps[0], 4);
    WF_CHECK_EQ(steps[1], 8);
    WF_CHECK_EQ(steps[2], 9);
    free(steps);
    int removed;
    WF_CHECK_OK(wf_ckpt_prune(root, 1, 0, &removed));
    WF_CHECK_EQ(removed, 2);
}

WF_TEST(load_checks_names_and_shapes) {
    state3 s;
    state_init(&s, 1);
    char dir[4096];
    path_in(dir, sizeof dir, "step-0000009");
    write_multi_rank(&s, 1, dir);
    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    state3 t;
    state_init(&t, 0);
    t.t[0].shape[1] = 4; /* a model of another width */
    WF_CHECK_ERR(wf_ckpt_load(c, t.t, 3), WF_ERR_CONFIG, "tensor w.a has shape [10, 5], this run needs [10, 4]");
    state_init(&t, 0);
    WF_CHECK_ERR(wf_ckpt_load(c, t.t, 2), WF_ERR_CONFIG, "holds tensor w.c, which this run does not have");
    t.t[1].name = "w.other";
    WF_CHECK_ERR(wf_ckpt_load(c, t.t, 3), WF_ERR_CONFIG, "has no tensor w.other");
    wf_ckpt_close(c);
}

WF_TEST(model_config_round_trips) {
    wf_model_config mc, got;
    WF_CHECK_OK(wf_model_config_preset(&mc, "tiny"));
    mc.norm_eps = 1e-6;
    mc.rope_theta = 500000.0;
    wf_ckpt_meta *m = wf_ckpt_meta_create();
    WF_CHECK_OK(wf_ckpt_meta_set_model_config(m, &mc));
    WF_CHECK_ERR(wf_ckpt_meta_set_u64(m, "big", UINT64_MAX), WF_ERR_RANGE, "above 2^63");
    WF_CHECK_ERR(wf_ckpt_meta_set_u64(m, "model.", 1), WF_ERR_INVALID, "section.name");
    state3 s;
    state_init(&s, 1);
    wf_ckpt_plan p;
    WF_CHECK_OK(wf__ckpt_plan_make(&p, s.t, 3, 1));
    char dir[4096];
    path_in(dir, sizeof dir, "step-0000001");
    char *tmp = wf__ckpt_tmp_path(dir);
    WF_CHECK_OK(wf_mkdirs(tmp));
    uint64_t sums[8];
    WF_CHECK_OK(wf__ckpt_write_data(&p, 0, tmp, 1, NULL, sums));
    WF_CHECK_OK(wf__ckpt_write_manifest(&p, tmp, 1, wf__ckpt_meta_json(m), sums));
    WF_CHECK_OK(wf__ckpt_commit(tmp, dir));
    free(tmp);
    wf__ckpt_plan_free(&p);
    wf_ckpt_meta_destroy(m);
    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    WF_CHECK_OK(wf_ckpt_get_model_config(c, &got));
    WF_CHECK_EQ(got.dim, mc.dim);
    WF_CHECK_EQ(got.n_kv_heads, mc.n_kv_heads);
    WF_CHECK_EQ(got.ffn_hidden_dim, wf_model_config_hidden_dim(&mc));
    WF_CHECK_EQ(got.tied_embeddings, mc.tied_embeddings);
    WF_CHECK_TRUE(got.norm_eps == mc.norm_eps && got.rope_theta == mc.rope_theta);
    wf_ckpt_close(c);
}

/* A key is a value or a section, never both: setting "a" after "a.b", or
 * "a.b" after "a", is refused instead of silently dropping the first
 * (found by the ckpt_roundtrip fuzz target). */
WF_TEST(meta_key_is_a_value_or_a_section) {
    wf_ckpt_meta *m = wf_ckpt_meta_create();
    WF_CHECK_TRUE(m != NULL);
    WF_CHECK_OK(wf_ckpt_meta_set_u64(m, "a.b", 1));
    WF_CHECK_ERR(wf_ckpt_meta_set_u64(m, "a", 2), WF_ERR_INVALID, "already a section");
    WF_CHECK_OK(wf_ckpt_meta_set_u64(m, "c", 3));
    WF_CHECK_ERR(wf_ckpt_meta_set_str(m, "c.d", "x"), WF_ERR_INVALID, "already a value");
    WF_CHECK_OK(wf_ckpt_meta_set_u64(m, "a.b", 4)); /* a value replaced: fine */
    wf_ckpt_meta_destroy(m);
}

/* The streaming safetensors writer (fsdp's export): the model's floats
 * put in uneven pieces give wf_safetensors_save_as's bytes, in F32 and
 * BF16; a writer short of values, or given too many, keeps no file. */
WF_TEST(safetensors_writer_streams_the_bytes_of_save) {
    wf_model_config mc;
    WF_CHECK_OK(wf_model_config_preset(&mc, "tiny"));
    wf_arena *a;
    wf_model *m;
    WF_CHECK_OK(wf_arena_create(&a, 0));
    WF_CHECK_OK(wf_model_create(&m, &mc, a));
    wf_model_init(m, 7);
    const float *p = wf_model_params(m);
    size_t n = wf_model_num_params(m);
    wf_kv meta[1] = {{.key = "weft.step", .value = "12"}};
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        char whole[4096], streamed[4096];
        path_in(whole, sizeof whole, bf16 ? "whole16.safetensors" : "whole.safetensors");
        path_in(streamed, sizeof streamed, bf16 ? "stream16.safetensors" : "stream.safetensors");
        WF_CHECK_OK(wf_safetensors_save_as(m, whole, meta, 1, bf16));
        wf_safetensors_writer *w;
        WF_CHECK_OK(wf_safetensors_writer_open(&w, m, streamed, meta, 1, bf16));
        size_t done = 0, step = 1;
        while (done < n) { /* pieces of 1, 3, 9, ... floats: never a tensor's bounds */
            size_t c = n - done < step ? n - done : step;
            WF_CHECK_OK(wf_safetensors_writer_put(w, p + done, c));
            done += c, step = step * 3 + 1;
        }
        WF_CHECK_OK(wf_safetensors_writer_commit(w));
        size_t n1 = 0, n2 = 0;
        char *b1 = NULL, *b2 = NULL;
        WF_CHECK_OK(wf_file_read(whole, &b1, &n1));
        WF_CHECK_OK(wf_file_read(streamed, &b2, &n2));
        WF_CHECK_TRUE(n1 == n2 && n1 > n * (bf16 ? 2 : 4) && memcmp(b1, b2, n1) == 0);
        free(b1), free(b2);
    }
    char bad[4096];
    path_in(bad, sizeof bad, "short.safetensors");
    wf_safetensors_writer *w;
    WF_CHECK_OK(wf_safetensors_writer_open(&w, m, bad, meta, 1, 0));
    WF_CHECK_OK(wf_safetensors_writer_put(w, p, n - 1));
    WF_CHECK_ERR(wf_safetensors_writer_put(w, p, 2), WF_ERR_INTERNAL, "more values than the model's");
    WF_CHECK_ERR(wf_safetensors_writer_commit(w), WF_ERR_INTERNAL, "is not kept");
    WF_CHECK_TRUE(access(bad, F_OK) != 0);
    WF_CHECK_OK(wf_safetensors_writer_open(&w, m, bad, meta, 1, 0));
    wf_safetensors_writer_abort(w);
    WF_CHECK_TRUE(access(bad, F_OK) != 0);
    wf_model_destroy(m);
    wf_arena_destroy(a);
}

/* wf_safetensors_load_range: any range of the flat parameter order, across
 * tensor bounds, gives the saved values (F32 exactly, BF16 as the whole
 * load widens them); a range past the model is refused. */
WF_TEST(safetensors_load_range_reads_any_slice) {
    wf_model_config mc;
    WF_CHECK_OK(wf_model_config_preset(&mc, "tiny"));
    wf_arena *a;
    wf_model *m, *back;
    WF_CHECK_OK(wf_arena_create(&a, 0));
    WF_CHECK_OK(wf_model_create(&m, &mc, a));
    WF_CHECK_OK(wf_model_create(&back, &mc, a));
    wf_model_init(m, 3);
    size_t n = wf_model_num_params(m);
    float *buf = malloc(n * sizeof *buf);
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        char path[4096];
        path_in(path, sizeof path, bf16 ? "r16.safetensors" : "r.safetensors");
        WF_CHECK_OK(wf_safetensors_save_as(m, path, NULL, 0, bf16));
        WF_CHECK_OK(wf_safetensors_load(back, path));
        const float *want = wf_model_params(back);
        for (size_t first = 0, len = 5; first < n; first += len, len = len * 2 + 3) {
            size_t c = n - first < len ? n - first : len;
            memset(buf, 0xff, c * sizeof *buf);
            WF_CHECK_OK(wf_safetensors_load_range(m, path, first, c, buf));
            WF_CHECK_TRUE(memcmp(buf, want + first, c * sizeof *buf) == 0);
        }
        WF_CHECK_ERR(wf_safetensors_load_range(m, path, n - 1, 2, buf), WF_ERR_RANGE, "outside the model");
    }
    free(buf);
    wf_model_destroy(back);
    wf_model_destroy(m);
    wf_arena_destroy(a);
}
