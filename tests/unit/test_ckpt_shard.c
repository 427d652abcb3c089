/* Unit tests of sharded tensors in checkpoints (ZeRO-1's optimizer state:
 * each rank holds a different element range of a flat buffer): the
 * decomposition of an element range into contiguous boxes (every range of
 * small 1-, 2- and 3-D shapes), a state of replicated and sharded tensors
 * written by 3 simulated ranks whose shards cut rows in the middle, read
 * back whole, by element ranges and as the shards of 1, 2, 4 and 5 ranks;
 * the manifest's pieces (partial rows as boxes) pass the reader's tiling
 * checks, and a corrupt piece, a missing one and overlapping ones are
 * errors naming the tensor. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_impl.h"
#include "harness.h"
#include "weft/ckpt.h"
#include "weft/fileio.h"

WF_TEST(element_ranges_become_contiguous_boxes) {
    const int64_t shapes[3][WF_CKPT_MAX_DIMS] = {{13}, {7, 5}, {3, 4, 5}};
    const int ndims[3] = {1, 2, 3};
    for (int s = 0; s < 3; s++) {
        const int64_t *shape = shapes[s];
        int nd = ndims[s];
        int64_t n = 1;
        for (int d = 0; d < nd; d++) n *= shape[d];
        for (int64_t b = 0; b < n; b++) {
            for (int64_t e = b + 1; e <= n; e++) {
                int64_t off[2 * WF_CKPT_MAX_DIMS][WF_CKPT_MAX_DIMS], size[2 * WF_CKPT_MAX_DIMS][WF_CKPT_MAX_DIMS];
                int k = wf__ckpt_range_boxes(shape, nd, b, e, off, size);
                WF_CHECK_EQ(k, wf__ckpt_range_boxes(shape, nd, b, e, NULL, NULL));
                WF_CHECK_TRUE(k >= 1 && k <= 2 * nd - 1);
                /* In order, each contiguous (size 1 before its first dim
                 * above 1, whole after it), together exactly [b, e). */
                int64_t at = b;
                for (int i = 0; i < k; i++) {
                    int64_t first = 0, vol = 1;
                    int seen = 0;
                    for (int d = 0; d < nd; d++) {
                        WF_CHECK_TRUE(size[i][d] >= 1 && off[i][d] + size[i][d] <= shape[d]);
                        if (seen) WF_CHECK_EQ(size[i][d], shape[d]);
                        if (size[i][d] > 1) seen = 1;
                        first = first * shape[d] + off[i][d];
                        vol *= size[i][d];
                    }
                    WF_CHECK_EQ(first, at);
                    at += vol;
                }
                WF_CHECK_EQ(at, e);
            }
        }
    }
    WF_CHECK_EQ(wf__ckpt_range_boxes(shapes[1], 2, 4, 4, NULL, NULL), 0);
}

/* The state of a tiny "model": parameters a (10, 5), b (7), c (3, 2, 4)
 * in one flat buffer (81 floats) replicated on every rank, and one moment
 * buffer of the same layout, sharded: tensors "m.a", "m.b", "m.c". */
enum { NA = 50, NB = 7, NC = 24, NTOT = 81 };
static const char *const m_names[3] = {"m.a", "m.b", "m.c"};
static const int m_ndim[3] = {2, 1, 3};
static const int64_t m_shape[3][WF_CKPT_MAX_DIMS] = {{10, 5}, {7}, {3, 2, 4}};
static const int64_t m_base[3] = {0, NA, NA + NB};

typedef struct {
    float params[NTOT];
    float *shard;         /* this rank's part of the moments */
    wf_ckpt_tensor t[6];  /* p.a, p.b, p.c replicated; m.a, m.b, m.c sharded */
} rank_state;

static float moment(int64_t i) { return 0.5f + (float)i * 0.125f; }
static float param(int64_t i) { return -1.0f - (float)i; }

/* Rank r's state of W with shards of S floats (W * S >= 81). */
static void rank_init(rank_state *s, int r, int64_t S) {
    for (int i = 0; i < NTOT; i++) s->params[i] = param(i);
    int64_t lo = r * S, hi = lo + S < NTOT ? lo + S : NTOT;
    if (lo > NTOT) lo = NTOT;
    s->shard = calloc((size_t)S + 1, sizeof *s->shard);
    for (int64_t i = lo; i < hi; i++) s->shard[i - lo] = moment(i);
    static const char *const p_names[3] = {"p.a", "p.b", "p.c"};
    for (int k = 0; k < 3; k++) {
        wf_ckpt_tensor *p = &s->t[k], *m = &s->t[3 + k];
        memset(p, 0, sizeof *p);
        p->name = p_names[k];
        p->ndim = m_ndim[k];
        memcpy(p->shape, m_shape[k], sizeof p->shape);
        p->data = s->params + m_base[k];
        *m = *p;
        m->name = m_names[k];
        m->shard_size = S;
        m->shard_base = m_base[k];
        /* data: the first element of the tensor this rank holds */
        int64_t b, e;
        wf_ckpt_tensor_range(m, r, &b, &e);
        m->data = S > 0 && b < e ? s->shard + (m_base[k] + b - lo) : s->shard;
    }
}

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", wf_test_tmpdir(), name); }

/* Writes the state as W simulated ranks, each with its own tensors (their
 * shards differ) and data file; odd ranks through a staged image. */
static void write_ranks(int W, int64_t S, const char *dir) {
    rank_state *st = calloc((size_t)W, sizeof *st);
    wf_ckpt_plan *plans = calloc((size_t)W, sizeof *plans);
    for (int r = 0; r < W; r++) {
        rank_init(&st[r], r, S);
        WF_CHECK_OK(wf__ckpt_plan_make(&plans[r], st[r].t, 6, W));
    }
    /* Every rank plans the same layout (rank 0 writes the manifest). */
    for (int r = 1; r < W; r++) {
        WF_CHECK_EQ(plans[r].n_pieces, plans[0].n_pieces);
        for (size_t k = 0; k < plans[0].n_pieces; k++) {
            WF_CHECK_EQ(plans[r].pieces[k].offset, plans[0].pieces[k].offset);
            WF_CHECK_EQ(plans[r].pieces[k].elem_begin, plans[0].pieces[k].elem_begin);
        }
    }
    char *tmp = wf__ckpt_tmp_path(dir);
    WF_CHECK_OK(wf_mkdirs(tmp));
    uint64_t *sums = calloc(plans[0].n_pieces + 1, sizeof *sums);
    for (int r = 0; r < W; r++) {
        unsigned char *image = NULL;
        if (r % 2) {
            image = calloc(1, plans[r].rank_bytes[r]);
            wf__ckpt_stage(&plans[r], r, 4, image);
        }
        WF_CHECK_OK(wf__ckpt_write_data(&plans[r], r, tmp, 4, image, sums));
        free(image);
    }
    WF_CHECK_OK(wf__ckpt_write_manifest(&plans[0], tmp, 4, NULL, sums));
    WF_CHECK_OK(wf__ckpt_commit(tmp, dir));
    free(sums);
    free(tmp);
    for (int r = 0; r < W; r++) {
        wf__ckpt_plan_free(&plans[r]);
        free(st[r].shard);
    }
    free(plans);
    free(st);
}

static void check_floats(const float *got, float (*want)(int64_t), int64_t first, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++) {
        float w = want(first + i);
        if (memcmp(&got[i], &w, 4) != 0)
            wf_test_fail(__FILE__, __LINE__, "%s element %lld: %g, want %g", what, (long long)i, (double)got[i],
                         (double)w);
    }
}

WF_TEST(sharded_state_written_by_3_ranks_reads_back_in_any_split) {
    char dir[4096];
    path_in(dir, sizeof dir, "step-0000004");
    /* 28 floats a shard: rank 0 holds m.a's rows 0..4 and 3 floats of row
     * 5, rank 1 the rest of m.a, all of m.b and c's first 3 floats (a
     * partial row of the last dim), rank 2 the rest. */
    write_ranks(3, 28, dir);
    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    WF_CHECK_OK(wf_ckpt_verify(c, NULL, NULL));
    WF_CHECK_EQ(wf_ckpt_world_size(c), 3);
    /* The manifest: m.a in 4 pieces, one a partial row. */
    long ia = wf_ckpt_find(c, "m.a");
    wf_ckpt_tensor_desc d;
    wf_ckpt_tensor_at(c, (size_t)ia, &d);
    WF_CHECK_EQ(d.n_pieces, 4); /* rows 0..5 + 3 floats (rank 0); 2 floats + rows 6..10 (rank 1) */
    json_error_t je;
    json_t *man = json_loads(wf_ckpt_manifest_text(c), 0, &je);
    json_t *pa = json_object_get(json_array_get(json_object_get(man, "tensors"), (size_t)ia), "pieces");
    int partial_rows = 0;
    for (size_t k = 0; k < json_array_size(pa); k++) {
        json_t *sz = json_object_get(json_array_get(pa, k), "sizes");
        if (json_integer_value(json_array_get(sz, 0)) == 1 && json_integer_value(json_array_get(sz, 1)) < 5)
            partial_rows++;
    }
    WF_CHECK_EQ(partial_rows, 2); /* row 5 cut between ranks 0 and 1 */
    json_decref(man);
    /* Whole tensors, by rows. */
    float out[NTOT + 8];
    for (int k = 0; k < 3; k++) {
        int64_t rows = m_shape[k][0], n = 1;
        for (int dd = 0; dd < m_ndim[k]; dd++) n *= m_shape[k][dd];
        WF_CHECK_OK(wf_ckpt_read_rows(c, m_names[k], 0, rows, out));
        check_floats(out, moment, m_base[k], n, m_names[k]);
        static const char *const p_names[3] = {"p.a", "p.b", "p.c"};
        WF_CHECK_OK(wf_ckpt_read_rows(c, p_names[k], 0, rows, out));
        check_floats(out, param, m_base[k], n, p_names[k]);
    }
    /* Every element range of m.a and m.c. */
    for (int k = 0; k < 3; k += 2) {
        int64_t n = k == 0 ? NA : NC;
        for (int64_t b = 0; b < n; b += 3)
            for (int64_t e = b; e <= n; e += 5) {
                memset(out, 0xff, sizeof out);
                WF_CHECK_OK(wf_ckpt_read_range(c, m_names[k], b, e, out));
                check_floats(out, moment, m_base[k] + b, e - b, m_names[k]);
                WF_CHECK_TRUE(out[e - b] != out[e - b]); /* nothing written past the end (NaN pattern) */
            }
    }
    WF_CHECK_ERR(wf_ckpt_read_range(c, "m.b", 3, 8, out), WF_ERR_RANGE, "outside its 7 elements");
    /* Loaded as the shards of 1, 2, 4 and 5 ranks (ZeRO-1 at another W),
     * and as a replicated state (DDP). */
    for (int W = 1; W <= 5; W++) {
        if (W == 3) continue;
        int64_t S = (NTOT + W - 1) / W;
        for (int r = 0; r < W; r++) {
            rank_state s;
            rank_init(&s, r, S);
            float *want = malloc(sizeof(float) * ((size_t)S + 1));
            memcpy(want, s.shard, sizeof(float) * (size_t)S);
            memset(s.shard, 0, sizeof(float) * (size_t)S);
            memset(s.params, 0, sizeof s.params);
            WF_CHECK_OK(wf_ckpt_load_rank(c, s.t, 6, r));
            WF_CHECK_TRUE(memcmp(s.shard, want, sizeof(float) * (size_t)S) == 0);
            check_floats(s.params, param, 0, NTOT, "parameters");
            free(want);
            free(s.shard);
        }
    }
    rank_state whole;
    rank_init(&whole, 0, 0); /* shard_size 0: replicated */
    for (int k = 3; k < 6; k++) whole.t[k].data = whole.params + m_base[k - 3];
    WF_CHECK_OK(wf_ckpt_load(c, whole.t, 6));
    check_floats(whole.params, moment, 0, NTOT, "moments loaded whole");
    free(whole.shard);
    wf_ckpt_close(c);
}

WF_TEST(sharded_state_through_the_writer_of_one_process) {
    /* One rank holds the whole buffer (shard_size >= 81): the writer's own
     * save path, synchronous and asynchronous. */
    for (int async = 0; async <= 1; async++) {
        rank_state s;
        rank_init(&s, 0, NTOT);
        char root[4096], dir[4096];
        path_in(root, sizeof root, async ? "one-async" : "one-sync");
        WF_CHECK_OK(wf_mkdirs(root));
        wf_ckpt_step_dir(dir, sizeof dir, root, 2);
        wf_ckpt_writer *w;
        wf_ckpt_writer_opts o = {0, 1, async, 0, 0};
        WF_CHECK_OK(wf_ckpt_writer_create(&w, s.t, 6, &o));
        WF_CHECK_OK(wf_ckpt_save(w, dir, 2, NULL, NULL));
        WF_CHECK_OK(wf_ckpt_writer_wait(w, NULL));
        wf_ckpt_writer_destroy(w);
        wf_ckpt *c;
        WF_CHECK_OK(wf_ckpt_open(&c, dir));
        float out[NTOT];
        WF_CHECK_OK(wf_ckpt_read_range(c, "m.a", 0, NA, out));
        check_floats(out, moment, 0, NA, "m.a");
        WF_CHECK_OK(wf_ckpt_read_range(c, "m.c", 5, 19, out));
        check_floats(out, moment, NA + NB + 5, 14, "m.c");
        wf_ckpt_close(c);
        free(s.shard);
    }
}

WF_TEST(sharded_pieces_corrupt_missing_or_overlapping_are_errors) {
    char dir[4096], data[8192], mpath[8192];
    path_in(dir, sizeof dir, "step-0000005");
    write_ranks(3, 28, dir);
    /* A flipped byte in rank 0's partial row of m.a. */
    rank_state s;
    rank_init(&s, 0, 28);
    wf_ckpt_plan p;
    WF_CHECK_OK(wf__ckpt_plan_make(&p, s.t, 6, 3));
    const wf_ckpt_piece *partial = NULL;
    for (size_t k = 0; k < p.n_pieces; k++)
        if (p.pieces[k].rank == 0 && strcmp(p.tensors[p.pieces[k].tensor].name, "m.a") == 0 && p.pieces[k].size[0] == 1)
            partial = &p.pieces[k];
    WF_CHECK_TRUE(partial != NULL);
    WF_CHECK_EQ(partial->size[1], 3);
    WF_CHECK_EQ(partial->elem_begin, 25);
    snprintf(data, sizeof data, "%s/data-00000-of-00003.bin", dir);
    FILE *f = fopen(data, "r+b");
    WF_CHECK_TRUE(f != NULL);
    fseek(f, (long)partial->offset + 2, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
    wf_ckpt *c;
    WF_CHECK_OK(wf_ckpt_open(&c, dir));
    float out[NTOT];
    WF_CHECK_OK(wf_ckpt_read_range(c, "m.a", 0, 25, out)); /* the whole rows before it are intact */
    WF_CHECK_ERR(wf_ckpt_read_range(c, "m.a", 20, 27, out), WF_ERR_CHECKSUM, "tensor m.a (rows 5..6");
    WF_CHECK_ERR(wf_ckpt_verify(c, NULL, NULL), WF_ERR_CHECKSUM, "data-00000-of-00003.bin");
    wf_ckpt_close(c);
    wf__ckpt_plan_free(&p);
    free(s.shard);

    /* The manifest edited: a piece of m.a dropped, then one made to overlap. */
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    json_error_t je;
    json_t *m = json_load_file(mpath, 0, &je);
    WF_CHECK_TRUE(m != NULL);
    json_t *tensors = json_object_get(m, "tensors"), *ma = NULL;
    for (size_t i = 0; i < json_array_size(tensors); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(tensors, i), "name")), "m.a") == 0)
            ma = json_array_get(tensors, i);
    WF_CHECK_TRUE(ma != NULL);
    json_t *pieces = json_object_get(ma, "pieces");
    json_t *saved = json_deep_copy(json_array_get(pieces, 2)); /* rank 1's part of row 5: [5, 3..5) */
    json_array_remove(pieces, 2);
    WF_CHECK_TRUE(json_dump_file(m, mpath, 0) == 0);
    WF_CHECK_ERR(wf_ckpt_open(&c, dir), WF_ERR_FORMAT, "tensor m.a: the pieces cover 48 of 50 elements");
    /* back, but starting one float earlier (into the rows before it) */
    json_t *off = json_object_get(saved, "offsets");
    json_array_set_new(off, 1, json_integer(json_integer_value(json_array_get(off, 1)) - 1));
    json_array_insert_new(pieces, 2, saved);
    WF_CHECK_TRUE(json_dump_file(m, mpath, 0) == 0);
    WF_CHECK_ERR(wf_ckpt_open(&c, dir), WF_ERR_FORMAT, "tensor m.a: pieces 1 and 2 overlap");
    json_decref(m);
}

WF_TEST(sharded_plans_check_that_the_ranks_cover_the_tensor) {
    rank_state s;
    rank_init(&s, 0, 20);
    wf_ckpt_plan p;
    /* 3 ranks of 20 floats hold 60 of the buffer's 81 */
    WF_CHECK_ERR(wf__ckpt_plan_make(&p, s.t, 6, 3), WF_ERR_INVALID, "m.c: sharded as elements [57, +24)");
    WF_CHECK_OK(wf__ckpt_plan_make(&p, s.t, 6, 5));
    /* rank 4 of 5 holds [80, 81): the last float of m.c, one piece */
    size_t mine = p.rank_first[5] - p.rank_first[4];
    WF_CHECK_EQ(mine, 3 + 1); /* a row range of each parameter, and m.c's last float */
    wf__ckpt_plan_free(&p);
    free(s.shard);
}
