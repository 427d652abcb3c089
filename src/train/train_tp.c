/* Tensor parallelism in the trainer (dist.tp; docs/distributed.md,
 * "Tensor parallelism in weft train"): the job's ranks as a {dp, tp} mesh
 * (tp inner: a TP group is consecutive ranks), the model's collectives over
 * the tp axis, and what the step needs beyond DDP over dp: the global
 * gradient norm of split tensors. The trainer's comm, rank and world become
 * the dp axis's, so that the loader, the reducer, the loss average and the
 * replica audit work on the data-parallel replicas unchanged. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/kernels.h"
#include "weft/log.h"

static wf_status tp_all_reduce(void *ctx, float *buf, size_t n, wf_model_tp_op op, const char *tag) {
    return wf_comm_all_reduce((wf_comm *)ctx, buf, n, op == WF_MODEL_TP_MAX ? WF_COMM_MAX : WF_COMM_SUM, tag);
}

/* Sequence parallelism's: every rank's part is n floats (counts of the tp
 * ranks, at most WF__TP_MAX of them). */
#define WF__TP_MAX 4096
static size_t g_counts[WF__TP_MAX];

static const size_t *even_counts(wf_comm *c, size_t n) {
    for (int r = 0; r < wf_comm_size(c); r++) g_counts[r] = n;
    return g_counts;
}

static wf_status tp_all_gather(void *ctx, float *buf, size_t n, const char *tag) {
    return wf_comm_all_gather((wf_comm *)ctx, buf, even_counts(ctx, n), tag);
}

static wf_status tp_reduce_scatter(void *ctx, const float *send, float *recv, size_t n, const char *tag) {
    return wf_comm_reduce_scatter((wf_comm *)ctx, send, recv, even_counts(ctx, n), WF_COMM_SUM, tag);
}

wf_status wf__train_tp_mesh(trainer *t, wf_comm *job) {
    const wf_train_config *tc = t->tc;
    t->job = job;
    t->job_rank = wf_comm_rank(job);
    t->job_world = wf_comm_size(job);
    t->comm = job, t->rank = t->job_rank, t->world = t->job_world;
    t->tp = (wf_model_tp){.size = 1, .rank = 0};
    int tp = (int)tc->dist_tp;
    if (tp <= 1) return WF_OK;
    if (t->job_world % tp != 0)
        return wf_error(WF_ERR_CONFIG,
                        "dist.tp = %d does not divide the %d ranks of the job: the ranks form a dp x tp mesh, so the "
                        "world size must be a multiple of dist.tp (%d %% %d = %d)",
                        tp, t->job_world, t->job_world, tp, t->job_world % tp);
    const char *shard = tc->dist_zero1 ? "zero1" : tc->dist_shard ? tc->dist_shard : "ddp";
    if (strcmp(shard, "ddp") != 0)
        return wf_error(WF_ERR_CONFIG,
                        "dist.tp = %d with dist.shard = %s: tensor parallelism composes with DDP over the dp axis "
                        "only for now (ZeRO and FSDP of tensor-parallel slices are not implemented); use "
                        "dist.shard = ddp",
                        tp, shard);
    if (tc->optim_name && strcmp(tc->optim_name, "muon") == 0)
        return wf_error(WF_ERR_CONFIG, "dist.tp = %d with optim.name = muon: Muon orthogonalises whole matrices, "
                                       "which tensor parallelism splits; use optim.name = adamw",
                        tp);
    if (tc->eval_tasks && *tc->eval_tasks)
        return wf_error(WF_ERR_CONFIG, "dist.tp = %d with train.eval_tasks: the task scorer does not run "
                                       "tensor-parallel models yet; leave train.eval_tasks out",
                        tp);
    int dp = t->job_world / tp;
    const char *names[2] = {"dp", "tp"};
    int sizes[2] = {dp, tp};
    WF_TRY(wf_mesh_create(job, 2, names, sizes, &t->mesh));
    wf_comm *tpc = wf_mesh_comm(t->mesh, "tp");
    t->comm = wf_mesh_comm(t->mesh, "dp");
    t->rank = wf_mesh_coord(t->mesh, "dp");
    t->world = dp;
    t->tp = (wf_model_tp){.size = tp,
                          .rank = wf_mesh_coord(t->mesh, "tp"),
                          .ops = {.all_reduce = tp_all_reduce,
                                  .ctx = tpc,
                                  .all_gather = tp_all_gather,
                                  .reduce_scatter = tp_reduce_scatter},
                          .sequence_parallel = tc->dist_sequence_parallel != 0};
    return WF_OK;
}

wf_status wf__train_tp_check(trainer *t) {
    if (t->tp.size <= 1) return WF_OK;
    WF_TRY(wf_model_tp_check(&t->mc, t->tp.size));
    int tp = t->tp.size;
    /* Sequence parallelism splits every forward's B*T rows: training's
     * (Bl sequences) and validation's (any number of them), so T must. */
    if (t->tp.sequence_parallel && t->T % tp != 0)
        return wf_error(WF_ERR_CONFIG,
                        "dist.sequence_parallel with dist.tp = %d: data.seq_len = %d rows per sequence do not split "
                        "over the %d tensor parallel ranks (%d %% %d = %d); use a multiple of %d or "
                        "dist.sequence_parallel = false",
                        tp, t->T, tp, t->T, tp, t->T % tp, tp);
    if (t->job_rank == 0)
        WF_INFO("mesh: %d ranks as dp %d x tp %d (a tp group is %d consecutive ranks), sequence parallel %s",
                t->job_world, t->world, tp, tp, t->tp.sequence_parallel ? "on" : "off");
    return WF_OK;
}

/* The global L2 norm: the squares of the split tensors' slices summed over
 * the tp ranks (each element once), the replicated ones (the RMSNorm
 * weights: the same bits on every tp rank) counted once. The gradient is
 * already summed over dp. Every rank gets the same bits. */
wf_status wf__train_tp_grad_norm(trainer *t, double *norm) {
    const float *g = wf_model_grads(t->model);
    double ss[2] = {0, 0}; /* split, replicated */
    for (int i = 0; i < wf_model_num_tensors(t->model); i++) {
        const wf_tensor_info *ti = wf_model_tensor(t->model, i);
        ss[ti->split_dim < 0] += wf_kern_sumsq(g + ti->offset, ti->numel);
    }
    WF_TRY(wf_comm_all_reduce_f64(t->tp.ops.ctx, ss, 1, WF_COMM_SUM, "tp grad norm"));
    *norm = sqrt(ss[0] + ss[1]);
    return WF_OK;
}

/* The parameters' sum of squares for the non-finite check: summed over tp,
 * so that every rank takes the same verdict (replicated tensors counted tp
 * times: a verdict, not a norm). */
wf_status wf__train_tp_param_sumsq(trainer *t, double *ss) {
    WF_TRY(wf_model_sumsq(t->model, WF_MODEL_PARAMS, ss));
    return wf_comm_all_reduce_f64(t->tp.ops.ctx, ss, 1, WF_COMM_SUM, "tp param check");
}

void wf__train_tp_free(trainer *t) {
    wf_mesh_destroy(t->mesh);
    t->mesh = NULL;
}

/* Tensor i of the whole model from the tp ranks' slices: every rank's
 * slice all-gathered (equal sizes: every split divides) into `buf`, then
 * laid out row-major into `dst` (rank order is row order for a row split;
 * a column split's slices are (rows, cols / tp) blocks side by side). */
static wf_status gather_tensor(trainer *t, const wf_tensor_info *ti, float *buf, float *dst) {
    wf_comm *tpc = t->tp.ops.ctx;
    size_t n = ti->numel;
    if (ti->split_dim < 0) {
        memcpy(dst, wf_model_params(t->model) + ti->offset, n * sizeof *dst);
        return WF_OK;
    }
    memcpy(buf + (size_t)t->tp.rank * n, wf_model_params(t->model) + ti->offset, n * sizeof *buf);
    WF_TRY(wf_comm_all_gather(tpc, buf, even_counts(tpc, n), "tp gather model"));
    size_t P = (size_t)t->tp.size;
    if (ti->split_dim == 0) {
        memcpy(dst, buf, P * n * sizeof *dst);
        return WF_OK;
    }
    size_t rows = (size_t)ti->shape[0], cols = (size_t)ti->shape[1];
    for (size_t r = 0; r < P; r++)
        for (size_t i = 0; i < rows; i++)
            memcpy(dst + i * P * cols + r * cols, buf + r * n + i * cols, cols * sizeof *dst);
    return WF_OK;
}

/* The final model file: the tp ranks of dp rank 0 gather every tensor in
 * turn into a whole model on the job's rank 0 (a temporary of the whole
 * model's size there, one tensor's gather buffer on the others), which
 * writes it as one process would. */
wf_status wf__train_tp_write_model(trainer *t, const char *path, const wf_kv *meta, size_t n_meta) {
    if (t->rank != 0) return WF_OK; /* another dp replica: the same values */
    int lead = t->tp.rank == 0;
    wf_arena *arena = NULL;
    wf_model *whole = NULL;
    float *buf = NULL;
    size_t max_n = 0;
    for (int i = 0; i < wf_model_num_tensors(t->model); i++)
        if (wf_model_tensor(t->model, i)->numel > max_n) max_n = wf_model_tensor(t->model, i)->numel;
    /* Every tp rank runs every gather, whatever the lead's allocations
     * did, so that the collectives stay matched; the lead reports after. */
    wf_status s = WF_OK;
    if (lead) {
        s = wf_arena_create(&arena, 0);
        if (s == WF_OK) s = wf_model_create(&whole, &t->mc, arena);
    }
    size_t cap = max_n * (size_t)t->tp.size;
    buf = malloc(cap * sizeof *buf);
    /* where a rank that keeps nothing puts each tensor */
    float *scratch = lead && s == WF_OK ? NULL : malloc(cap * sizeof *scratch);
    wf_status g = buf && (scratch || (lead && s == WF_OK)) ? WF_OK
                                                           : wf_error(WF_ERR_NOMEM, "out of memory gathering the model");
    for (int i = 0; g == WF_OK && i < wf_model_num_tensors(t->model); i++) {
        const wf_tensor_info *ti = wf_model_tensor(t->model, i);
        float *dst = scratch;
        if (!scratch) {
            const wf_tensor_info *wi = wf_model_tensor(whole, i);
            if (strcmp(wi->name, ti->name) != 0 || wi->numel != ti->numel * (ti->split_dim < 0 ? 1 : (size_t)t->tp.size))
                g = wf_error(WF_ERR_INTERNAL, "gathering the model: tensor %d is %s here and %s in the whole model", i,
                             ti->name, wi->name);
            dst = wf_model_params(whole) + wi->offset;
        }
        if (g == WF_OK) g = gather_tensor(t, ti, buf, dst);
    }
    if (lead && s == WF_OK && g == WF_OK) s = wf_safetensors_save(whole, path, meta, n_meta);
    if (s == WF_OK) s = g;
    if (lead && s == WF_OK) WF_INFO("wrote %s (gathered from the %d tensor parallel ranks)", path, t->tp.size);
    free(scratch);
    free(buf);
    wf_model_destroy(whole);
    wf_arena_destroy(arena);
    return s;
}
