/* Unit tests of the planner (weft/plan.h). The ddp and zero1 figures are
 * checked against a real arena's in_use counter after the allocations the
 * trainer makes (src/train/train_setup.c: the model, its activations, the
 * optimizer or ZeRO-1's shard of it and the gradient shard, the token
 * buffers), byte for byte, on models of several shapes, batches and thread
 * counts; the other modes against the properties their formulas must have
 * (docs/distributed.md, "Planning memory: weft plan"); the budget search
 * against the memory of the batch it returns and of the next one; the
 * communication against the ring formulas; the size parser. The end-to-end
 * check against `weft train` is tests/py/test_plan.py. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "weft/arena.h"
#include "weft/comm.h"
#include "weft/kernels.h"
#include "weft/model.h"
#include "weft/optim.h"
#include "weft/plan.h"

static wf_model_config shape(int dim, int layers, int heads, int kv, int vocab, int hidden, int seq, int tied) {
    wf_model_config c;
    WF_CHECK_OK(wf_model_config_preset(&c, "tiny"));
    c.dim = dim, c.n_layers = layers, c.n_heads = heads, c.n_kv_heads = kv, c.vocab_size = vocab;
    c.ffn_hidden_dim = hidden, c.max_seq_len = seq, c.tied_embeddings = tied;
    WF_CHECK_OK(wf_model_config_validate(&c));
    return c;
}

static wf_plan_input input(wf_model_config c, int world, int B, int T) {
    wf_plan_input in = {.model = c, .world = world, .micro_batch = B, .seq_len = T, .accum = 1,
                        .threads = wf_kern_threads(), .bucket_bytes = 25000000};
    return in;
}

/* What the trainer allocates for rank `rank` of `world` in `mode` (ddp or
 * zero1), in its order; returns the arena's in_use and fills the deltas. */
static size_t measure(const wf_plan_input *in, wf_plan_shard mode, int rank, size_t *model_bytes, size_t *acts,
                      size_t *optim) {
    wf_arena *a;
    WF_CHECK_OK(wf_arena_create(&a, (size_t)1 << 30)); /* one chunk: blocks back to back */
    wf_model *m;
    WF_CHECK_OK(wf_model_create(&m, &in->model, a));
    size_t u0 = wf_arena_get_stats(a).in_use;
    WF_CHECK_OK(wf_model_plan(m, in->micro_batch, in->seq_len));
    size_t u1 = wf_arena_get_stats(a).in_use;
    wf_adamw_config ac = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1};
    wf_adamw *o;
    size_t np = wf_model_num_params(m);
    if (mode == WF_PLAN_ZERO1 && in->world > 1) {
        wf_zero1_plan zp;
        WF_CHECK_OK(wf_zero1_plan_init(&zp, np, in->world, 16));
        size_t lo = zp.offsets[rank], count = zp.counts[rank];
        WF_CHECK_OK(wf_adamw_create_shard(&o, &ac, m, lo, lo + count, a));
        WF_CHECK_TRUE(wf_arena_alloc(a, (count ? count : 1) * sizeof(float), 64) != NULL);
        wf_zero1_plan_deinit(&zp);
    } else {
        WF_CHECK_OK(wf_adamw_create(&o, &ac, m, a));
    }
    size_t u2 = wf_arena_get_stats(a).in_use;
    size_t local = (size_t)in->micro_batch * (size_t)in->seq_len;
    WF_CHECK_TRUE(wf_arena_alloc(a, local * sizeof(int32_t), 64) != NULL);
    WF_CHECK_TRUE(wf_arena_alloc(a, local * sizeof(int32_t), 64) != NULL);
    wf_arena_stats st = wf_arena_get_stats(a);
    WF_CHECK_EQ(st.peak, st.in_use);
    *model_bytes = u0, *acts = u1 - u0, *optim = u2 - u1;
    wf_adamw_destroy(o);
    wf_model_destroy(m);
    wf_arena_destroy(a);
    return st.in_use;
}

static int near64(size_t a, size_t b) { return a > b ? a - b < 64 : b - a < 64; }

/* The plan of ddp / zero1 equals the arena, in total and by category. */
static void check_against_arena(const wf_plan_input *in) {
    for (int mode = WF_PLAN_DDP; mode <= WF_PLAN_ZERO1; mode++) {
        wf_plan_memory p;
        WF_CHECK_OK(wf_plan_memory_of(in, (wf_plan_shard)mode, WF_PLAN_RECOMPUTE_NONE, &p));
        size_t model_bytes, acts, optim;
        size_t total = measure(in, (wf_plan_shard)mode, 0, &model_bytes, &acts, &optim);
        size_t gshard = mode == WF_PLAN_ZERO1 && in->world > 1 ? p.grads - p.params : 0;
        /* in_use ends at the last block's last byte; the plan rounds it up to 64 */
        /* a category's delta holds the previous block's padding to 64 bytes */
        if (total > p.total || p.total - total >= 64 || !near64(model_bytes, p.params + p.params) ||
            !near64(acts, p.activations + p.logits) || !near64(optim, p.optimizer + gshard))
            wf_test_fail(__FILE__, __LINE__,
                         "%s W=%d B=%d T=%d: arena %zu (model %zu, activations %zu, optimizer %zu) but plan %zu "
                         "(params %zu, grads %zu, activations %zu + logits %zu, optimizer %zu)",
                         wf_plan_shard_name((wf_plan_shard)mode), in->world, in->micro_batch, in->seq_len, total,
                         model_bytes, acts, optim, p.total, p.params, p.grads, p.activations, p.logits, p.optimizer);
        WF_CHECK_EQ(p.params + p.grads + p.optimizer + p.buckets + p.gather + p.activations + p.logits + p.batch, p.total);
    }
}

WF_TEST(ddp_and_zero1_match_the_arena) {
    wf_kern_set_threads(1);
    wf_plan_input in = input(shape(64, 2, 4, 2, 512, 0, 64, 1), 1, 4, 64);
    check_against_arena(&in);
    in.world = 2;
    check_against_arena(&in);
    in.world = 4, in.micro_batch = 3, in.seq_len = 37; /* odd sizes: carves rounded to 16 floats */
    check_against_arena(&in);
    in = input(shape(8, 2, 2, 1, 13, 12, 4, 0), 3, 1, 3); /* untied, tiny shards (1208 parameters) */
    check_against_arena(&in);
    in.world = 100; /* most ranks' shards empty: rank 0's is one of 16 floats */
    check_against_arena(&in);
    in = input(shape(48, 3, 6, 3, 301, 100, 96, 0), 2, 2, 96);
    check_against_arena(&in);
}

WF_TEST(attention_scratch_follows_the_threads) {
    wf_kern_set_threads(4);
    wf_plan_input in = input(shape(64, 2, 4, 2, 512, 0, 128, 1), 2, 2, 128);
    if (in.threads == 4) { /* OpenMP builds; the TSan build has one thread */
        check_against_arena(&in);
        wf_plan_memory four, one;
        WF_CHECK_OK(wf_plan_memory_of(&in, WF_PLAN_DDP, WF_PLAN_RECOMPUTE_NONE, &four));
        in.threads = 1;
        WF_CHECK_OK(wf_plan_memory_of(&in, WF_PLAN_DDP, WF_PLAN_RECOMPUTE_NONE, &one));
        WF_CHECK_EQ(four.activations - one.activations, 4 * 3 * wf_kern_attention_scratch(128, 1));
    }
    wf_kern_set_threads(1);
}

WF_TEST(sharded_modes_shrink_with_the_world) {
    wf_model_config c = shape(96, 4, 4, 4, 2000, 0, 64, 0);
    size_t P = wf_model_config_num_params(&c);
    wf_plan_input in = input(c, 1, 2, 64);
    wf_plan_memory one[WF_PLAN_N_SHARDS], four[WF_PLAN_N_SHARDS];
    for (int s = 0; s < WF_PLAN_N_SHARDS; s++)
        WF_CHECK_OK(wf_plan_memory_of(&in, (wf_plan_shard)s, WF_PLAN_RECOMPUTE_NONE, &one[s]));
    /* one rank: zero1 is ddp (the trainer's choice); zero2 and fsdp run
     * their unit engine all the same, with the whole model as the shard */
    WF_CHECK_TRUE(memcmp(&one[WF_PLAN_ZERO1], &one[WF_PLAN_DDP], sizeof one[0]) == 0);
    WF_CHECK_EQ(one[WF_PLAN_ZERO2].grads, one[WF_PLAN_DDP].grads);
    WF_CHECK_EQ(one[WF_PLAN_FSDP].params, one[WF_PLAN_DDP].params);
    WF_CHECK_TRUE(one[WF_PLAN_FSDP].gather > 0);
    in.world = 4;
    for (int s = 0; s < WF_PLAN_N_SHARDS; s++)
        WF_CHECK_OK(wf_plan_memory_of(&in, (wf_plan_shard)s, WF_PLAN_RECOMPUTE_NONE, &four[s]));
    WF_CHECK_TRUE(memcmp(&four[WF_PLAN_DDP], &one[WF_PLAN_DDP], sizeof four[0]) == 0);
    /* zero1: moments of a quarter, plus a quarter gradient shard */
    WF_CHECK_TRUE(four[WF_PLAN_ZERO1].optimizer <= 2 * (4 * (P / 4 + 16) + 64));
    WF_CHECK_TRUE(four[WF_PLAN_ZERO1].total < four[WF_PLAN_DDP].total);
    /* zero2: the gradient is a shard too */
    WF_CHECK_TRUE(four[WF_PLAN_ZERO2].grads < four[WF_PLAN_ZERO1].grads / 4);
    WF_CHECK_EQ(four[WF_PLAN_ZERO2].params, four[WF_PLAN_DDP].params);
    /* fsdp: params, grads and moments near 1/W of ddp's (units padded to
     * 16 floats), plus two rotating gather buffers of the largest unit
     * (here the final norm with the untied head, 96 + 2000 x 96 floats),
     * and two gradient buffers of it with their receive buffers (a
     * quarter of it each) */
    double ratio = (double)four[WF_PLAN_FSDP].params / (double)four[WF_PLAN_DDP].params;
    WF_CHECK_TRUE(ratio > 0.25 && ratio < 0.26);
    WF_CHECK_EQ(four[WF_PLAN_FSDP].grads, four[WF_PLAN_FSDP].params);
    WF_CHECK_EQ(four[WF_PLAN_FSDP].optimizer, 2 * four[WF_PLAN_FSDP].params);
    WF_CHECK_EQ(four[WF_PLAN_FSDP].gather, 2 * 4 * (96 + 2000 * 96));
    WF_CHECK_EQ(four[WF_PLAN_FSDP].buckets, 2 * 4 * ((96 + 2000 * 96) + (96 + 2000 * 96) / 4 + 8));
    /* a tied embedding has its own gather and gradient buffers */
    in.model.tied_embeddings = 1;
    wf_plan_memory tied;
    WF_CHECK_OK(wf_plan_memory_of(&in, WF_PLAN_FSDP, WF_PLAN_RECOMPUTE_NONE, &tied));
    WF_CHECK_EQ(tied.gather, 2 * 4 * 110784 + 4 * 2000 * 96); /* blocks are now the largest rotating unit */
    for (int s = 0; s < WF_PLAN_N_SHARDS; s++) {
        WF_CHECK_EQ(four[s].activations, one[s].activations);
        WF_CHECK_EQ(four[s].logits, one[s].logits);
    }
}

WF_TEST(recompute_keeps_less) {
    wf_model_config c = shape(64, 6, 4, 2, 512, 0, 64, 1);
    wf_plan_input in = input(c, 2, 4, 64);
    wf_plan_memory m[WF_PLAN_N_RECOMPUTES];
    for (int r = 0; r < WF_PLAN_N_RECOMPUTES; r++)
        WF_CHECK_OK(wf_plan_memory_of(&in, WF_PLAN_FSDP, (wf_plan_recompute)r, &m[r]));
    WF_CHECK_TRUE(m[WF_PLAN_RECOMPUTE_BLOCK].activations < m[WF_PLAN_RECOMPUTE_SELECTIVE].activations);
    WF_CHECK_TRUE(m[WF_PLAN_RECOMPUTE_SELECTIVE].activations < m[WF_PLAN_RECOMPUTE_NONE].activations);
    /* block: L - 1 blocks' intermediates fewer; one block's are, in floats
     * with N = 256 rows, C = 64, QKV = (4 + 2 x 2) x 16, 4 heads:
     * xn1 rstd1 qkv att lse mid xn2 rstd2 h13 g (all multiples of 16) */
    size_t N = 256, H = (size_t)wf_model_config_hidden_dim(&c);
    WF_CHECK_EQ(H % 16, 0);
    size_t per_block = 4 * (N * 64 + N + N * 128 + N * 64 + 4 * 4 * 64 + N * 64 + N * 64 + N + N * 2 * H + N * H);
    WF_CHECK_EQ(m[WF_PLAN_RECOMPUTE_NONE].activations - m[WF_PLAN_RECOMPUTE_BLOCK].activations, 5 * per_block);
    /* selective: the element-wise outputs (xn1 rstd1 xn2 rstd2 g) once */
    size_t elementwise = 4 * (N * 64 + N + N * 64 + N + N * H);
    WF_CHECK_EQ(m[WF_PLAN_RECOMPUTE_NONE].activations - m[WF_PLAN_RECOMPUTE_SELECTIVE].activations,
                5 * elementwise);
    for (int r = 1; r < WF_PLAN_N_RECOMPUTES; r++) {
        WF_CHECK_EQ(m[r].logits, m[0].logits);
        WF_CHECK_EQ(m[r].params, m[0].params);
    }
}

WF_TEST(max_micro_batch_is_the_largest_that_fits) {
    wf_plan_input in = input(shape(64, 2, 4, 2, 512, 0, 64, 1), 2, 1, 64);
    for (int s = 0; s < WF_PLAN_N_SHARDS; s++)
        for (int r = 0; r < WF_PLAN_N_RECOMPUTES; r++) {
            size_t budgets[] = {1000, 3u << 20, 5u << 20, 50u << 20, 1u << 30};
            for (size_t k = 0; k < sizeof budgets / sizeof *budgets; k++) {
                int best;
                WF_CHECK_OK(wf_plan_max_micro_batch(&in, (wf_plan_shard)s, (wf_plan_recompute)r, budgets[k], 100000,
                                                    &best));
                wf_plan_input x = in;
                wf_plan_memory m;
                if (best > 0) {
                    x.micro_batch = best;
                    WF_CHECK_OK(wf_plan_memory_of(&x, (wf_plan_shard)s, (wf_plan_recompute)r, &m));
                    WF_CHECK_TRUE(m.total <= budgets[k]);
                }
                if (best < 100000) {
                    x.micro_batch = best + 1;
                    WF_CHECK_OK(wf_plan_memory_of(&x, (wf_plan_shard)s, (wf_plan_recompute)r, &m));
                    WF_CHECK_TRUE(m.total > budgets[k]);
                }
                if (k == 0) WF_CHECK_EQ(best, 0);
                if (k == 4) WF_CHECK_TRUE(best > 100);
            }
        }
    int capped;
    WF_CHECK_OK(wf_plan_max_micro_batch(&in, WF_PLAN_DDP, WF_PLAN_RECOMPUTE_NONE, (size_t)1 << 40, 7, &capped));
    WF_CHECK_EQ(capped, 7);
}

WF_TEST(communication_volumes) {
    wf_model_config c = shape(64, 2, 4, 2, 512, 0, 64, 1);
    double P = (double)wf_model_config_num_params(&c);
    wf_plan_input in = input(c, 1, 2, 64);
    wf_plan_comm k;
    for (int s = 0; s < WF_PLAN_N_SHARDS; s++) {
        WF_CHECK_OK(wf_plan_comm_of(&in, (wf_plan_shard)s, &k));
        WF_CHECK_TRUE(k.total == 0);
    }
    in.world = 2;
    WF_CHECK_OK(wf_plan_comm_of(&in, WF_PLAN_DDP, &k));
    WF_CHECK_TRUE(k.all_reduce == 4 * P && k.total == 4 * P); /* 2 (W-1)/W x 4P */
    WF_CHECK_EQ(k.collectives_per_step, 1);                     /* one 25 MB bucket */
    in.bucket_bytes = 4 * 64 * 64; /* one C x C matrix a bucket at least */
    WF_CHECK_OK(wf_plan_comm_of(&in, WF_PLAN_DDP, &k));
    WF_CHECK_TRUE(k.collectives_per_step > 4);
    in.world = 4, in.accum = 3;
    size_t shard = ((size_t)P + 3) / 4;
    shard = (shard + 15) / 16 * 16;
    WF_CHECK_OK(wf_plan_comm_of(&in, WF_PLAN_ZERO1, &k));
    WF_CHECK_TRUE(k.reduce_scatter == 3.0 * 4 * (double)shard && k.all_gather == k.reduce_scatter);
    WF_CHECK_TRUE(k.all_reduce == 0);
    wf_plan_comm z2;
    WF_CHECK_OK(wf_plan_comm_of(&in, WF_PLAN_ZERO2, &z2)); /* a reduce-scatter per micro-batch */
    WF_CHECK_TRUE(z2.reduce_scatter == 3 * k.reduce_scatter && z2.all_gather == k.all_gather);
    wf_plan_comm f;
    WF_CHECK_OK(wf_plan_comm_of(&in, WF_PLAN_FSDP, &f)); /* each unit's gradient reduce-scattered a micro-batch */
    WF_CHECK_TRUE(f.reduce_scatter >= 3 * 3 * P && f.reduce_scatter < 3 * 3 * (P + 16 * 4 * 4));
    /* tied, 3 micro-batches: 5 gathers, then 2 a micro-batch (units 1 and 2
     * are still held from the backward before; the embedding all step) */
    WF_CHECK_EQ(f.collectives_per_step, 3 * 4 + 5 + 2 + 2);
    WF_CHECK_TRUE(f.all_gather > 0 && f.all_gather < f.reduce_scatter);
    /* The gathers of the trainer's two rotating buffers, 4 units (2
     * blocks), one micro-batch. Tied: forward 4 (the embedding into its
     * own buffer), backward 1 (the last two units are still held, block
     * 1's is prefetched, the embedding is held for the step): 4
     * reduce-scatters + 5 gathers. */
    in.world = 2, in.accum = 1;
    WF_CHECK_OK(wf_plan_comm_of(&in, WF_PLAN_FSDP, &f));
    WF_CHECK_EQ(f.collectives_per_step, 9);
    /* Untied: forward 4, backward 2; a second micro-batch finds units 0
     * and 1 held: 2 more each way. */
    in.model.tied_embeddings = 0;
    WF_CHECK_OK(wf_plan_comm_of(&in, WF_PLAN_FSDP, &f));
    WF_CHECK_EQ(f.collectives_per_step, 4 + 6);
    in.accum = 2;
    WF_CHECK_OK(wf_plan_comm_of(&in, WF_PLAN_FSDP, &f));
    WF_CHECK_EQ(f.collectives_per_step, 8 + 10);
    WF_CHECK_OK(wf_plan_comm_of(&in, WF_PLAN_ZERO2, &f)); /* every unit a micro-batch, one all-gather a step */
    WF_CHECK_EQ(f.collectives_per_step, 8 + 1);
}

WF_TEST(parse_bytes) {
    size_t b;
    WF_CHECK_OK(wf_plan_parse_bytes("8GiB", &b));
    WF_CHECK_EQ(b, 8ull << 30);
    WF_CHECK_OK(wf_plan_parse_bytes("512MiB", &b));
    WF_CHECK_EQ(b, 512ull << 20);
    WF_CHECK_OK(wf_plan_parse_bytes("1.5GB", &b));
    WF_CHECK_EQ(b, 1500000000ull);
    WF_CHECK_OK(wf_plan_parse_bytes("3e9", &b));
    WF_CHECK_EQ(b, 3000000000ull);
    WF_CHECK_OK(wf_plan_parse_bytes("100000", &b));
    WF_CHECK_EQ(b, 100000);
    WF_CHECK_OK(wf_plan_parse_bytes("2k", &b));
    WF_CHECK_EQ(b, 2048);
    WF_CHECK_OK(wf_plan_parse_bytes("7 B", &b));
    WF_CHECK_EQ(b, 7);
    WF_CHECK_ERR(wf_plan_parse_bytes("8 bananas", &b), WF_ERR_CONFIG, "not a size");
    WF_CHECK_ERR(wf_plan_parse_bytes("GiB", &b), WF_ERR_CONFIG, "not a size");
    WF_CHECK_ERR(wf_plan_parse_bytes("-1GB", &b), WF_ERR_CONFIG, "not a size");
    WF_CHECK_ERR(wf_plan_parse_bytes("", &b), WF_ERR_CONFIG, "empty");
}

WF_TEST(bad_inputs_are_refused) {
    wf_plan_input in = input(shape(64, 2, 4, 2, 512, 0, 64, 1), 0, 1, 64);
    wf_plan_memory m;
    WF_CHECK_ERR(wf_plan_memory_of(&in, WF_PLAN_DDP, WF_PLAN_RECOMPUTE_NONE, &m), WF_ERR_INVALID, "world size 0");
    in.world = 1, in.seq_len = 65;
    WF_CHECK_ERR(wf_plan_memory_of(&in, WF_PLAN_DDP, WF_PLAN_RECOMPUTE_NONE, &m), WF_ERR_INVALID, "max_seq_len");
    in.seq_len = 64, in.micro_batch = 0;
    WF_CHECK_ERR(wf_plan_memory_of(&in, WF_PLAN_DDP, WF_PLAN_RECOMPUTE_NONE, &m), WF_ERR_INVALID, "sequences");
    in.micro_batch = 1;
    WF_CHECK_ERR(wf_plan_memory_of(&in, (wf_plan_shard)7, WF_PLAN_RECOMPUTE_NONE, &m), WF_ERR_INVALID, "mode");
    WF_CHECK_EQ(wf_plan_shard_parse("fsdp"), WF_PLAN_FSDP);
    WF_CHECK_EQ(wf_plan_recompute_parse("selective"), WF_PLAN_RECOMPUTE_SELECTIVE);
    WF_CHECK_EQ(wf_plan_shard_parse("zero3"), -1);
}
