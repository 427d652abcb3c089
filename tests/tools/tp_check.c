/* tp_check: tensor parallelism inside the model (wf_model_create_tp)
 * under a launcher, for tests/py/test_tp_mpi.py. Links only libweft (the
 * MPI backend is loaded at run time); the model's collectives come from
 * the "tp" axis of a one-axis mesh over the whole job.
 *
 *   tp_check grads [tied=0|1] [heads=8] [kv=4] [recompute=none|block|selective] [sp=0|1]
 *       every rank builds the whole model (one process's, tp = 1) and its
 *       tensor-parallel slice at tp = world size, both initialised from
 *       the same seed, and checks:
 *         - each slice's initial values equal the whole model's at the
 *           global indices the slice names (wf_tensor_info), bit for bit;
 *         - the loss of each of two micro-batches equals the whole
 *           model's (relative difference <= TOL_LOSS);
 *         - every parameter's gradient, accumulated over both, equals the
 *           whole model's over the slice (normalised error
 *           sum((g - r)^2) / sum(r^2) <= TOL_GRAD, max over ranks), and
 *           the slices of each split tensor cover it exactly once;
 *         - the replicated tensors' (RMSNorm weights') gradients are
 *           bitwise the same on every rank.
 *       With sp=1 the model runs sequence parallel (B*T = 32 rows split
 *       over the ranks) and the same checks hold.
 *       Prints "rank R tp P ok loss X ref Y grad_err E act_bytes A" (A: the
 *       tp model's planned activations) or what failed.
 *   tp_check refuse [dim=] [heads=] [kv=] [vocab=] [hidden=] [tp=]
 *       prints "rank R refused before allocating: <message>" from wf_model_create_tp for that
 *       config at that tensor parallel size (default: the world size),
 *       or "accepted"; exit status 0 either way.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/tool_args.h"
#include "weft/comm.h"
#include "weft/model.h"
#include "weft/rng.h"

/* fp32 tolerances: the slices sum the same products in another order (a
 * matmul's reduction split over ranks, then an all-reduce), so results
 * differ by rounding only: a few fp32 ulps of the largest terms, ~1e-7
 * relative. The bounds leave two orders of magnitude for that and still
 * catch any missing term (a lost partial sum or a wrong slice gives errors
 * of order 1). */
#define TOL_LOSS 1e-5
#define TOL_GRAD 1e-9 /* on the squared normalised error: 3e-5 relative */

static int rank_, size_;

static int fail(const char *what) {
    printf("rank %d tp %d FAILED: %s: %s\n", rank_, size_, what, wf_error_msg());
    return 1;
}

static wf_status tp_all_reduce(void *ctx, float *buf, size_t n, wf_model_tp_op op, const char *tag) {
    return wf_comm_all_reduce((wf_comm *)ctx, buf, n, op == WF_MODEL_TP_MAX ? WF_COMM_MAX : WF_COMM_SUM, tag);
}

/* Sequence parallelism's: every rank's part is n floats. */
static wf_status tp_all_gather(void *ctx, float *buf, size_t n, const char *tag) {
    wf_comm *c = ctx;
    size_t counts[64];
    for (int r = 0; r < wf_comm_size(c); r++) counts[r] = n;
    return wf_comm_all_gather(c, buf, counts, tag);
}

static wf_status tp_reduce_scatter(void *ctx, const float *send, float *recv, size_t n, const char *tag) {
    wf_comm *c = ctx;
    size_t counts[64];
    for (int r = 0; r < wf_comm_size(c); r++) counts[r] = n;
    return wf_comm_reduce_scatter(c, send, recv, counts, WF_COMM_SUM, tag);
}

static wf_model_tp tp_of(wf_comm *tp_comm, int size, int argc, char **argv) {
    wf_model_tp tp = {.size = size,
                      .rank = wf_comm_rank(tp_comm) % (size > 0 ? size : 1),
                      .ops = {.all_reduce = tp_all_reduce, .ctx = tp_comm, .all_gather = tp_all_gather,
                              .reduce_scatter = tp_reduce_scatter},
                      .sequence_parallel = (int)tool_arg_num(argc, argv, "sp", 0)};
    return tp;
}

static wf_model_config test_config(int argc, char **argv) {
    wf_model_config c;
    wf_model_config_preset(&c, "tiny");
    c.dim = (int)tool_arg_num(argc, argv, "dim", 64);
    c.n_layers = 2;
    c.n_heads = (int)tool_arg_num(argc, argv, "heads", 8);
    c.n_kv_heads = (int)tool_arg_num(argc, argv, "kv", 4);
    c.vocab_size = (int)tool_arg_num(argc, argv, "vocab", 512);
    c.ffn_hidden_dim = (int)tool_arg_num(argc, argv, "hidden", 0);
    c.tied_embeddings = (int)tool_arg_num(argc, argv, "tied", 1);
    c.max_seq_len = 32;
    return c;
}

/* The global flat index of element j of tensor t (a slice of the whole
 * tensor r). */
static size_t global_index(const wf_tensor_info *t, const wf_tensor_info *r, size_t j) {
    if (t->split_dim < 0) return j;
    size_t cols = (size_t)t->shape[1], gcols = (size_t)r->shape[1];
    size_t row = j / cols, col = j % cols;
    if (t->split_dim == 0) row += (size_t)t->split_offset;
    else col += (size_t)t->split_offset;
    return row * gcols + col;
}

static int cmd_grads(wf_comm *tp_comm, int argc, char **argv) {
    wf_model_config cfg = test_config(argc, argv);
    const char *rec = tool_arg_str(argc, argv, "recompute", "none");
    int mode = wf_model_recompute_parse(rec);
    if (mode < 0) {
        printf("rank %d: unknown recompute %s\n", rank_, rec);
        return 2;
    }
    enum { B = 2, T = 16, N = B * T, MICRO = 2 };
    int32_t tokens[MICRO][N], targets[MICRO][N];
    wf_rng r = {1234, 99, 0};
    for (int k = 0; k < MICRO; k++)
        for (int i = 0; i < N; i++) {
            tokens[k][i] = (int32_t)(wf_rng_u64(&r) % (uint64_t)cfg.vocab_size);
            targets[k][i] = (int32_t)(wf_rng_u64(&r) % (uint64_t)cfg.vocab_size);
        }
    targets[0][3] = targets[0][N - 2] = targets[1][0] = -1; /* ignored rows */

    wf_arena *arena;
    if (wf_arena_create(&arena, 1 << 20) != WF_OK) return fail("arena");
    wf_model *ref, *m;
    wf_model_tp tp = tp_of(tp_comm, size_, argc, argv);
    if (wf_model_create(&ref, &cfg, arena) != WF_OK) return fail("create the whole model");
    if (wf_model_create_tp(&m, &cfg, arena, 0, &tp) != WF_OK) return fail("create the tp model");
    if (wf_model_set_recompute(ref, (wf_model_recompute)mode) != WF_OK ||
        wf_model_set_recompute(m, (wf_model_recompute)mode) != WF_OK)
        return fail("recompute");
    wf_model_init(ref, 7);
    wf_model_init(m, 7);
    if (wf_model_plan(ref, B, T) != WF_OK || wf_model_plan(m, B, T) != WF_OK) return fail("plan");

    /* init: each slice holds exactly the whole model's values */
    const float *rp = wf_model_params(ref), *mp = wf_model_params(m);
    int bad = 0;
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i), *rt = wf_model_find_tensor(ref, t->name);
        if (!rt || rt->shape[0] != t->global_shape[0] || rt->shape[1] != t->global_shape[1]) {
            printf("rank %d: %s has no whole tensor of its global shape\n", rank_, t->name);
            bad = 1;
            continue;
        }
        for (size_t j = 0; j < t->numel; j++)
            if (memcmp(&mp[t->offset + j], &rp[rt->offset + global_index(t, rt, j)], sizeof(float)) != 0) {
                printf("rank %d: init of %s differs at local element %zu\n", rank_, t->name, j);
                bad = 1;
                break;
            }
    }

    /* two micro-batches, their gradients accumulated (loss scale 1/2) */
    float lref = 0, ltp = 0;
    for (int k = 0; k < MICRO; k++) {
        if (wf_model_forward(ref, tokens[k], targets[k], B, T, &lref) != WF_OK) return fail("forward (whole)");
        if (wf_model_backward(ref, 1.0f / MICRO) != WF_OK) return fail("backward (whole)");
        if (wf_model_forward(m, tokens[k], targets[k], B, T, &ltp) != WF_OK) return fail("forward (tp)");
        if (wf_model_backward(m, 1.0f / MICRO) != WF_OK) return fail("backward (tp)");
        if (!(fabs((double)ltp - (double)lref) <= TOL_LOSS * fabs((double)lref))) {
            printf("rank %d: loss %.9g of micro-batch %d differs from the whole model's %.9g\n", rank_, ltp, k,
                   lref);
            bad = 1;
        }
    }

    const float *rg = wf_model_grads(ref), *mg = wf_model_grads(m);
    double worst = 0;
    for (int i = 0; i < wf_model_num_tensors(m); i++) {
        const wf_tensor_info *t = wf_model_tensor(m, i), *rt = wf_model_find_tensor(ref, t->name);
        if (!rt) continue;
        double err = 0, norm = 0;
        for (size_t j = 0; j < t->numel; j++) {
            double a = mg[t->offset + j], b = rg[rt->offset + global_index(t, rt, j)];
            err += (a - b) * (a - b);
            norm += b * b;
        }
        /* the whole tensor's norm: the slices' sums over the ranks */
        double sums[2] = {err, t->split_dim >= 0 ? norm : norm / size_};
        double covered = (double)t->numel;
        if (t->split_dim < 0) covered /= size_;
        if (wf_comm_all_reduce_f64(tp_comm, sums, 2, WF_COMM_SUM, "grad err") != WF_OK ||
            wf_comm_all_reduce_f64(tp_comm, &covered, 1, WF_COMM_SUM, "coverage") != WF_OK)
            return fail("reduce the errors");
        if (covered != (double)rt->numel) {
            printf("rank %d: the slices of %s cover %.0f of its %zu elements\n", rank_, t->name, covered,
                   rt->numel);
            bad = 1;
        }
        double e = sums[1] > 0 ? sums[0] / sums[1] : sums[0];
        if (e > worst) worst = e;
        if (!(e <= TOL_GRAD)) {
            printf("rank %d: gradient of %s: normalised error %.3g > %.3g\n", rank_, t->name, e, TOL_GRAD);
            bad = 1;
        }
        if (t->split_dim < 0) {
            char what[96];
            snprintf(what, sizeof what, "the gradient of replicated %s", t->name);
            if (wf_comm_check_replicas(tp_comm, mg + t->offset, t->numel * sizeof(float), what) != WF_OK) {
                printf("rank %d: %s\n", rank_, wf_error_msg());
                bad = 1;
            }
        }
    }
    /* sequence parallelism refuses rows that do not split */
    if (tp.sequence_parallel && size_ > 2) {
        if (wf_model_forward(m, tokens[0], targets[0], 1, 5, &ltp) == WF_OK) {
            printf("rank %d: B x T = 1 x 5 accepted at sp over %d ranks\n", rank_, size_);
            bad = 1;
        } else {
            printf("rank %d rows refused: %s\n", rank_, wf_error_msg());
        }
    }
    if (!bad)
        printf("rank %d tp %d ok loss %.9g ref %.9g grad_err %.3g act_bytes %zu\n", rank_, size_, ltp, lref,
               worst, wf_model_get_memory(m).activation_bytes);
    wf_model_destroy(m);
    wf_model_destroy(ref);
    wf_arena_destroy(arena);
    return bad;
}

static int cmd_refuse(wf_comm *tp_comm, int argc, char **argv) {
    wf_model_config cfg = test_config(argc, argv);
    int tps = (int)tool_arg_num(argc, argv, "tp", size_);
    wf_model_tp tp = tp_of(tp_comm, tps, argc, argv);
    wf_arena *arena;
    if (wf_arena_create(&arena, 1 << 20) != WF_OK) return fail("arena");
    wf_model *m = NULL;
    wf_arena_mark mark = wf_arena_get_mark(arena);
    if (wf_model_create_tp(&m, &cfg, arena, 0, &tp) != WF_OK) {
        wf_arena_mark after = wf_arena_get_mark(arena);
        printf("rank %d refused%s: %s\n", rank_,
               memcmp(&mark, &after, sizeof mark) == 0 ? " before allocating" : " after allocating",
               wf_error_msg());
    } else {
        printf("rank %d accepted\n", rank_);
    }
    wf_model_destroy(m);
    wf_arena_destroy(arena);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: tp_check grads|refuse [key=value ...]\n");
        return 2;
    }
    wf_comm_options o = wf_comm_options_default();
    wf_comm *world;
    if (wf_comm_create(&world, &o) != WF_OK) {
        fprintf(stderr, "tp_check: %s\n", wf_error_msg());
        return 1;
    }
    rank_ = wf_comm_rank(world);
    size_ = wf_comm_size(world);
    const char *names[1] = {"tp"};
    int sizes[1] = {size_};
    wf_mesh *mesh;
    int rc = 2;
    if (wf_mesh_create(world, 1, names, sizes, &mesh) != WF_OK) {
        rc = fail("mesh");
    } else {
        wf_comm *tp_comm = wf_mesh_comm(mesh, "tp");
        if (strcmp(argv[1], "grads") == 0) rc = cmd_grads(tp_comm, argc - 2, argv + 2);
        else if (strcmp(argv[1], "refuse") == 0) rc = cmd_refuse(tp_comm, argc - 2, argv + 2);
        else fprintf(stderr, "tp_check: unknown command %s\n", argv[1]);
        wf_mesh_destroy(mesh);
    }
    fflush(stdout);
    wf_comm_destroy(world);
    return rc;
}
