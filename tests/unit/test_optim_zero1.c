/* Unit tests of the sharded AdamW of ZeRO-1 (wf_adamw_create_shard,
 * wf_adamw_step_shard, wf_kern_sumsq): shards of any split, including ZeRO-1
 * plans and random cuts in the middle of a matrix row, stepped with the
 * global norm, give the bits of the whole-buffer update (parameters and
 * moments); ZeRO-1 at one rank (the shard [0, n) with the norm of its own
 * sum of squares) is wf_adamw_step bit for bit; each element of a shard
 * that cuts tensors gets its own tensor's weight decay; a non-finite
 * gradient or a bad range is refused with nothing changed. The collectives
 * around it are tested in tests/py/test_dist_mpi.py and, in the trainer,
 * tests/py/test_train_zero1.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "weft/comm.h"
#include "weft/kernels.h"
#include "weft/optim.h"
#include "weft/rng.h"

/* dim 8, 2 layers, 2 heads (1 kv), vocab 13, hidden 12, untied: 1208
 * parameters, matrix rows of 8 and 12 floats, norms of 8. */
static wf_model_config small(void) {
    wf_model_config c;
    WF_CHECK_OK(wf_model_config_preset(&c, "tiny"));
    c.dim = 8, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.vocab_size = 13;
    c.ffn_hidden_dim = 12, c.max_seq_len = 4, c.tied_embeddings = 0;
    return c;
}

static void fill_grads(float *g, size_t n, uint64_t seed) {
    wf_rng r = wf_rng_make(seed, 5);
    for (size_t i = 0; i < n; i++) g[i] = 0.5f * (float)(2 * wf_rng_uniform_double(&r) - 1);
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

#define STEPS 3
#define MAX_SHARDS 16

/* The whole-buffer run: parameters, m and v (3n floats) after STEPS steps
 * from init seed 3, and the norm of each step. */
static float *reference(const wf_adamw_config *oc, double lr, double norms[STEPS], size_t *n_out) {
    wf_model_config mc = small();
    wf_arena *a;
    wf_model *m;
    wf_adamw *o;
    WF_CHECK_OK(wf_arena_create(&a, 1 << 20));
    WF_CHECK_OK(wf_model_create(&m, &mc, a));
    wf_model_init(m, 3);
    WF_CHECK_OK(wf_adamw_create(&o, oc, m, a));
    size_t n = wf_model_num_params(m);
    for (int s = 0; s < STEPS; s++) {
        fill_grads(wf_model_grads(m), n, 40 + (uint64_t)s);
        WF_CHECK_OK(wf_adamw_step(o, lr, &norms[s]));
    }
    float *out = malloc(3 * n * sizeof *out);
    memcpy(out, wf_model_params(m), n * sizeof *out);
    memcpy(out + n, wf_adamw_m(o), n * sizeof *out);
    memcpy(out + 2 * n, wf_adamw_v(o), n * sizeof *out);
    wf_adamw_destroy(o);
    wf_model_destroy(m);
    wf_arena_destroy(a);
    *n_out = n;
    return out;
}

/* The same run with the buffer cut at cuts[0..k) (ascending, inside
 * [0, n]) into k + 1 shards, each with its own optimizer, stepped with the
 * global norm made from the shards' sums of squares (checked against the
 * reference's) and then with the reference's norm; compares every bit. */
static void check_split(const wf_adamw_config *oc, double lr, const size_t *cuts, int k, const float *ref,
                        const double ref_norms[STEPS]) {
    wf_model_config mc = small();
    wf_arena *a;
    wf_model *m;
    WF_CHECK_OK(wf_arena_create(&a, 1 << 20));
    WF_CHECK_OK(wf_model_create(&m, &mc, a));
    wf_model_init(m, 3);
    size_t n = wf_model_num_params(m);
    size_t lo[MAX_SHARDS + 1], hi[MAX_SHARDS + 1];
    wf_adamw *o[MAX_SHARDS + 1];
    WF_CHECK_TRUE(k <= MAX_SHARDS);
    for (int i = 0; i <= k; i++) {
        lo[i] = i == 0 ? 0 : cuts[i - 1];
        hi[i] = i == k ? n : cuts[i];
        WF_CHECK_OK(wf_adamw_create_shard(&o[i], oc, m, lo[i], hi[i], a));
        size_t b, e;
        wf_adamw_range(o[i], &b, &e);
        WF_CHECK_EQ(b, lo[i]);
        WF_CHECK_EQ(e, hi[i]);
    }
    float *g = wf_model_grads(m);
    for (int s = 0; s < STEPS; s++) {
        fill_grads(g, n, 40 + (uint64_t)s);
        double ss = 0;
        for (int i = 0; i <= k; i++) ss += wf_kern_sumsq(g + lo[i], hi[i] - lo[i]);
        /* Another order of the same sum: equal to rounding in double. */
        WF_CHECK_NEAR(sqrt(ss), ref_norms[s], 1e-12 * ref_norms[s]);
        /* Each shard sees only its part of the gradient (what the
         * reduce-scatter leaves on its rank). */
        for (int i = 0; i <= k; i++) WF_CHECK_OK(wf_adamw_step_shard(o[i], lr, g + lo[i], ref_norms[s]));
    }
    WF_CHECK_TRUE(same_bits(wf_model_params(m), ref, n));
    for (int i = 0; i <= k; i++) {
        WF_CHECK_EQ(wf_adamw_steps(o[i]), STEPS);
        if (!same_bits(wf_adamw_m(o[i]), ref + n + lo[i], hi[i] - lo[i]) ||
            !same_bits(wf_adamw_v(o[i]), ref + 2 * n + lo[i], hi[i] - lo[i]))
            wf_test_fail(__FILE__, __LINE__, "shard %d [%zu, %zu): moments differ from the whole update", i, lo[i],
                         hi[i]);
        wf_adamw_destroy(o[i]);
    }
    wf_model_destroy(m);
    wf_arena_destroy(a);
}

WF_TEST(any_split_gives_the_bits_of_the_whole_update) {
    wf_adamw_config oc = wf_adamw_config_default(); /* clip 1.0: active, the norm is ~10 */
    oc.weight_decay = 0.1;
    double norms[STEPS];
    size_t n;
    float *ref = reference(&oc, 1e-2, norms, &n);
    WF_CHECK_TRUE(norms[0] > 2);
    /* ZeRO-1's own plans, 16-float aligned and not aligned */
    for (int w = 1; w <= 7; w++) {
        for (size_t align = 1; align <= 16; align += 15) {
            wf_zero1_plan p;
            WF_CHECK_OK(wf_zero1_plan_init(&p, n, w, align));
            size_t cuts[MAX_SHARDS];
            for (int r = 1; r < w; r++) cuts[r - 1] = p.offsets[r];
            check_split(&oc, 1e-2, cuts, w - 1, ref, norms);
            wf_zero1_plan_deinit(&p);
        }
    }
    /* Cuts in the middle of matrix rows, of a norm, an empty shard, and a
     * shard of one element. */
    wf_model_config mc = small();
    wf_arena *a;
    wf_model *m;
    WF_CHECK_OK(wf_arena_create(&a, 1 << 20));
    WF_CHECK_OK(wf_model_create(&m, &mc, a));
    const wf_tensor_info *q = wf_model_find_tensor(m, "model.layers.0.self_attn.q_proj.weight");
    const wf_tensor_info *nw = wf_model_find_tensor(m, "model.layers.1.input_layernorm.weight");
    const wf_tensor_info *up = wf_model_find_tensor(m, "model.layers.1.mlp.up_proj.weight");
    WF_CHECK_TRUE(q && nw && up && q->ndim == 2 && up->ndim == 2);
    size_t cuts[] = {q->offset + 3, q->offset + q->shape[1] * 2 + 5, nw->offset + 4, nw->offset + 4,
                     up->offset + 13, up->offset + 14};
    WF_CHECK_TRUE((cuts[0] - q->offset) % (size_t)q->shape[1] != 0); /* mid-row */
    check_split(&oc, 1e-2, cuts, 6, ref, norms);
    /* Pseudo-random cuts. */
    wf_rng r = wf_rng_make(9, 1);
    for (int trial = 0; trial < 20; trial++) {
        size_t rc[8];
        int k = 1 + (int)(wf_rng_uniform_double(&r) * 8);
        if (k > 8) k = 8;
        for (int i = 0; i < k; i++) rc[i] = (size_t)(wf_rng_uniform_double(&r) * (double)n);
        for (int i = 1; i < k; i++) /* sort */
            for (int j = i; j > 0 && rc[j - 1] > rc[j]; j--) {
                size_t t = rc[j];
                rc[j] = rc[j - 1];
                rc[j - 1] = t;
            }
        check_split(&oc, 1e-2, rc, k, ref, norms);
    }
    wf_model_destroy(m);
    wf_arena_destroy(a);
    free(ref);
}

WF_TEST(zero1_at_one_rank_is_the_unsharded_step_bit_for_bit) {
    /* What the trainer does at W = 1: the reduce-scatter copies the whole
     * gradient, the norm is sqrt of its wf_kern_sumsq (the all-reduce of one
     * rank is the identity), and the shard is [0, n). */
    wf_adamw_config oc = wf_adamw_config_default();
    double norms[STEPS];
    size_t n;
    float *ref = reference(&oc, 3e-3, norms, &n);
    wf_model_config mc = small();
    wf_arena *a;
    wf_model *m;
    wf_adamw *o;
    WF_CHECK_OK(wf_arena_create(&a, 1 << 20));
    WF_CHECK_OK(wf_model_create(&m, &mc, a));
    wf_model_init(m, 3);
    WF_CHECK_OK(wf_adamw_create_shard(&o, &oc, m, 0, n, a));
    float *shard = malloc(n * sizeof *shard);
    for (int s = 0; s < STEPS; s++) {
        fill_grads(wf_model_grads(m), n, 40 + (uint64_t)s);
        memcpy(shard, wf_model_grads(m), n * sizeof *shard);
        double norm = sqrt(wf_kern_sumsq(shard, n));
        WF_CHECK_TRUE(memcmp(&norm, &norms[s], sizeof norm) == 0);
        WF_CHECK_TRUE(memcmp(&norm, &(double){wf_grad_norm(m)}, sizeof norm) == 0);
        WF_CHECK_OK(wf_adamw_step_shard(o, 3e-3, shard, norm));
    }
    WF_CHECK_TRUE(same_bits(wf_model_params(m), ref, n));
    WF_CHECK_TRUE(same_bits(wf_adamw_m(o), ref + n, n));
    WF_CHECK_TRUE(same_bits(wf_adamw_v(o), ref + 2 * n, n));
    /* The whole range may also step through wf_adamw_step. */
    WF_CHECK_OK(wf_adamw_step(o, 3e-3, NULL));
    free(shard);
    free(ref);
    wf_adamw_destroy(o);
    wf_model_destroy(m);
    wf_arena_destroy(a);
}

WF_TEST(each_element_of_a_shard_gets_its_tensors_decay) {
    /* Zero gradients: Adam's part is 0 / (0 + eps) = 0, so one step leaves
     * decayed elements at p * (1 - lr wd) and the others as they were. The
     * shard runs from the middle of a norm through a matrix row's middle. */
    wf_model_config mc = small();
    wf_adamw_config oc = wf_adamw_config_default();
    oc.weight_decay = 0.1;
    wf_arena *a;
    wf_model *m;
    wf_adamw *o;
    WF_CHECK_OK(wf_arena_create(&a, 1 << 20));
    WF_CHECK_OK(wf_model_create(&m, &mc, a));
    wf_model_init(m, 5);
    size_t n = wf_model_num_params(m);
    const wf_tensor_info *nw = wf_model_find_tensor(m, "model.layers.0.input_layernorm.weight");
    const wf_tensor_info *kp = wf_model_find_tensor(m, "model.layers.0.self_attn.k_proj.weight");
    size_t lo = nw->offset + 3, hi = kp->offset + 11;
    WF_CHECK_OK(wf_adamw_create_shard(&o, &oc, m, lo, hi, a));
    float *before = malloc(n * sizeof *before), *zeros = calloc(hi - lo, sizeof *zeros);
    float *p = wf_model_params(m);
    memcpy(before, p, n * sizeof *p);
    WF_CHECK_OK(wf_adamw_step_shard(o, 0.1, zeros, 0.0));
    int decayed = 0, kept = 0;
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i);
        for (size_t j = t->offset; j < t->offset + t->numel; j++) {
            int inside = j >= lo && j < hi;
            float want = inside && wf_adamw_decays(&oc, t) ? before[j] * (float)(1.0 - 0.1 * 0.1) : before[j];
            if (memcmp(&p[j], &want, sizeof want) != 0)
                wf_test_fail(__FILE__, __LINE__, "%s element %zu: %g, want %g", t->name, j - t->offset,
                             (double)p[j], (double)want);
            if (inside) *(wf_adamw_decays(&oc, t) ? &decayed : &kept) += 1;
        }
    }
    WF_CHECK_TRUE(decayed > 8 && kept == 5); /* the norm's last 5 elements are kept */
    free(before);
    free(zeros);
    wf_adamw_destroy(o);
    wf_model_destroy(m);
    wf_arena_destroy(a);
}

WF_TEST(shard_refuses_nonfinite_gradients_and_bad_ranges) {
    wf_model_config mc = small();
    wf_adamw_config oc = wf_adamw_config_default();
    wf_arena *a;
    wf_model *m;
    wf_adamw *o;
    WF_CHECK_OK(wf_arena_create(&a, 1 << 20));
    WF_CHECK_OK(wf_model_create(&m, &mc, a));
    wf_model_init(m, 5);
    size_t n = wf_model_num_params(m);
    const wf_tensor_info *up = wf_model_find_tensor(m, "model.layers.1.mlp.up_proj.weight");
    size_t lo = up->offset + 7, hi = up->offset + 50;
    WF_CHECK_OK(wf_adamw_create_shard(&o, &oc, m, lo, hi, a));
    float *g = calloc(hi - lo, sizeof *g), *before = malloc(n * sizeof *before);
    memcpy(before, wf_model_params(m), n * sizeof *before);
    g[10] = NAN; /* element 17 of up_proj */
    WF_CHECK_ERR(wf_adamw_step_shard(o, 1e-3, g, NAN), WF_ERR_RANGE,
                 "model.layers.1.mlp.up_proj.weight has gradient nan at element 17");
    g[10] = 0;
    /* The NaN was on another rank's shard: the global norm says so. */
    WF_CHECK_ERR(wf_adamw_step_shard(o, 1e-3, g, INFINITY), WF_ERR_RANGE, "gradient norm is inf");
    WF_CHECK_ERR(wf_adamw_step_shard(o, NAN, g, 1.0), WF_ERR_RANGE, "learning rate");
    WF_CHECK_TRUE(same_bits(wf_model_params(m), before, n));
    WF_CHECK_EQ(wf_adamw_steps(o), 0);
    WF_CHECK_ERR(wf_adamw_step(o, 1e-3, NULL), WF_ERR_INVALID, "wf_adamw_step_shard");
    wf_adamw_destroy(o);
    wf_adamw *bad = NULL;
    WF_CHECK_ERR(wf_adamw_create_shard(&bad, &oc, m, 9, 3, a), WF_ERR_INVALID, "not a range");
    WF_CHECK_ERR(wf_adamw_create_shard(&bad, &oc, m, 0, n + 1, a), WF_ERR_INVALID, "not a range");
    WF_CHECK_TRUE(bad == NULL);
    /* An empty shard (a rank past the end of a small buffer) steps. */
    WF_CHECK_OK(wf_adamw_create_shard(&o, &oc, m, n, n, a));
    WF_CHECK_OK(wf_adamw_step_shard(o, 1e-3, g, 1.0));
    WF_CHECK_EQ(wf_adamw_steps(o), 1);
    WF_CHECK_TRUE(same_bits(wf_model_params(m), before, n));
    wf_adamw_destroy(o);
    free(g);
    free(before);
    wf_model_destroy(m);
    wf_arena_destroy(a);
}
