/* The training loop of `weft train`: plan everything once (model,
 * optimizer state, batch buffers, loaders, the checkpoint writer), resume
 * from the run's latest valid checkpoint (or initialise, optionally from a
 * safetensors model), then for each step accumulate gradients over the
 * micro-batches of one global batch, clip, update with the scheduled
 * learning rate, report, and save when it is time or when asked (SAVE and
 * STOP files, SIGTERM/SIGUSR1, the memory watchdog). Nothing is allocated
 * inside the step. The same config and seeds give bit-identical losses,
 * across a stop and resume too: the checkpoint holds every bit the next
 * step depends on (parameters, AdamW moments and step count, the loader's
 * cursor, the spike detector's window; the schedule is a function of the
 * step, initialisation and data order of the seeds).
 *
 * With several ranks (docs/distributed.md): DDP all-reduces the gradient
 * in buckets during the backward; with dist.zero1, ZeRO-1 reduce-scatters
 * the same buckets during the backward, each rank updates its shard of the parameters with
 * its shard of the AdamW moments, and the parameters are all-gathered.
 *
 * Observability (src/obs): every step becomes one wf_metrics_step record
 * (metrics.jsonl, TensorBoard, the console line with MFU), is judged by the
 * loss-spike detector (warn, skip the update, or roll back to the last
 * checkpoint and skip the data that led to the spike), and host memory is
 * checked against the watchdog's limits. The tracer gets a step marker per
 * step and region spans (forward, backward, optimizer, eval, checkpoint);
 * the model records its own ops, the loader and checkpoint writer threads
 * theirs. */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft/arena.h"
#include "weft/ckpt.h"
#include "weft/dist.h"
#include "weft/fileio.h"
#include "weft/kernels.h"
#include "weft/loader.h"
#include "weft/log.h"
#include "weft/metrics.h"
#include "weft/mfu.h"
#include "weft/optim.h"
#include "weft/progress.h"
#include "weft/runctl.h"
#include "weft/safetensors.h"
#include "weft/shard.h"
#include "weft/thread.h"
#include "weft/tokenizer.h"
#include "weft/trace.h"
#include "weft/train.h"

typedef struct {
    const wf_train_config *tc;
    wf_model_config mc;
    int B, T, accum;           /* B: sequences per micro-batch over all ranks */
    int Bl;                    /* this rank's part of them: B / world */
    /* data parallelism */
    wf_comm *comm;
    int rank, world;
    wf_reducer *reducer;       /* world > 1: DDP's buckets, or ZeRO-1's (reduce-scattered into gshard) */
    int zero1;                 /* world > 1 and dist.zero1: ZeRO-1 instead of DDP */
    wf_zero1_plan zplan;       /* zero1: the shards of the parameter buffer */
    float *gshard;             /* zero1: (zplan.counts[rank]) this rank's shard of the mean gradient */
    wf_status hook_status;     /* the first error of grad_ready this step */
    char *tokenizer_path;
    wf_arena *arena;
    wf_model *model;
    wf_adamw *opt;
    wf_loader *train, *val;
    int32_t *inputs, *targets; /* (B, T) each */
    /* checkpoints */
    char root[4096];           /* RUN_DIR/checkpoints */
    char save_path[4096], stop_path[4096];
    char *config_text;         /* the effective config as TOML, saved in every checkpoint */
    wf_ckpt_tensor *state;     /* parameters, then AdamW m, then v */
    char **state_names;        /* owned names of the m and v entries */
    size_t n_state;
    wf_ckpt_writer *writer;
    int64_t last_saved;        /* step of the last save started, -1 if none */
    char rollback_dir[4096];   /* the checkpoint a rollback goes back to: the last one this job
                                  saved or resumed from ("" if none) */
    /* observability */
    wf_peak peak;
    int peak_rechecked;        /* the peak was measured again after an MFU above 100% */
    double flops_per_token;
    wf_metrics *metrics;
    wf_spike_detector spike;
    wf_spike_action spike_action;
    wf_mem_limits mem_limits;
    int tracing;               /* wf_trace_init succeeded */
} trainer;

static void trainer_free(trainer *t) {
    wf_metrics_close(t->metrics); /* writes what is buffered; its errors were reported on success paths */
    wf_spike_deinit(&t->spike);
    wf_reducer_destroy(t->reducer);
    wf_zero1_plan_deinit(&t->zplan);
    wf_ckpt_writer_destroy(t->writer); /* waits for a save in flight */
    for (size_t i = 0; t->state_names && i < t->n_state; i++) free(t->state_names[i]);
    free(t->state_names);
    free(t->state);
    free(t->config_text);
    wf_loader_destroy(t->val);
    wf_loader_destroy(t->train);
    wf_adamw_destroy(t->opt);
    wf_model_destroy(t->model);
    wf_arena_destroy(t->arena);
    free(t->tokenizer_path);
}

/* Splits a loader batch (B, T+1) into inputs (B, T) and targets (B, T). */
static void split_batch(const wf_batch *b, int32_t *inputs, int32_t *targets) {
    size_t row = (size_t)b->seq_len + 1;
    for (int i = 0; i < b->batch; i++) {
        const int32_t *src = b->tokens + (size_t)i * row;
        memcpy(inputs + (size_t)i * b->seq_len, src, (size_t)b->seq_len * sizeof *src);
        memcpy(targets + (size_t)i * b->seq_len, src + 1, (size_t)b->seq_len * sizeof *src);
    }
}

/* Resolves the tokenizer: the config's, else the dataset's if it exists. */
static wf_status resolve_tokenizer(trainer *t, const wf_dataset_info *info) {
    const char *path = t->tc->tokenizer ? t->tc->tokenizer : info->tokenizer;
    if (!path) return WF_OK;
    if (!wf_path_exists(path)) {
        if (t->tc->tokenizer) return wf_error(WF_ERR_NOTFOUND, "data.tokenizer: %s does not exist", path);
        WF_WARN("the dataset's tokenizer %s does not exist; the model will not record one", path);
        return WF_OK;
    }
    wf_tokenizer *tok;
    WF_TRY(wf_tokenizer_load(&tok, path));
    size_t tv = wf_tokenizer_vocab_size(tok);
    wf_tokenizer_destroy(tok);
    if (tv > (size_t)t->mc.vocab_size)
        return wf_error(WF_ERR_CONFIG,
                        "model.vocab_size = %d is smaller than the tokenizer's vocabulary (%zu ids in %s): "
                        "raise it or leave it 0 to use the dataset's",
                        t->mc.vocab_size, tv, path);
    t->tokenizer_path = strdup(path);
    return t->tokenizer_path ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory");
}

/* The model's backward hook (last micro-batch of a step): the tensors in
 * floats [offset, offset + numel) have their final gradient, so their
 * buckets may start their all-reduce while backward goes on. */
static void grad_ready(void *ctx, size_t offset, size_t numel) {
    trainer *t = ctx;
    int nt = wf_model_num_tensors(t->model);
    /* The first tensor at or after offset (tensors are in buffer order). */
    int lo = 0, hi = nt;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (wf_model_tensor(t->model, mid)->offset < offset) lo = mid + 1;
        else hi = mid;
    }
    for (int i = lo; i < nt && t->hook_status == WF_OK; i++) {
        if (wf_model_tensor(t->model, i)->offset >= offset + numel) break;
        t->hook_status = wf_reducer_ready(t->reducer, i);
    }
}

/* The gradient buckets over the model's tensors (in buffer order): DDP
 * all-reduces them; ZeRO-1 (make_zero1 first) reduce-scatters each into
 * this rank's gradient shard. */
static wf_status make_reducer(trainer *t) {
    int nt = wf_model_num_tensors(t->model);
    wf_dist_span *spans = calloc((size_t)nt, sizeof *spans);
    if (!spans) return wf_error(WF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nt; i++) {
        const wf_tensor_info *ti = wf_model_tensor(t->model, i);
        spans[i] = (wf_dist_span){ti->offset, ti->numel};
    }
    size_t bucket = (size_t)(t->tc->dist_bucket_mb * 1e6);
    wf_status s = wf_reducer_create(&t->reducer, t->comm, wf_model_grads(t->model), spans, nt, bucket ? bucket : 1);
    free(spans);
    /* The backward scales by 1 / world (run_step): the buckets sum. */
    if (s == WF_OK) s = wf_reducer_set_op(t->reducer, WF_COMM_SUM);
    if (s == WF_OK && t->zero1) s = wf_reducer_set_shards(t->reducer, &t->zplan, t->rank, t->gshard);
    if (s == WF_OK && t->zero1 && t->rank == 0)
        WF_INFO("ZeRO-1: %d reduce-scatter bucket%s of up to %.1f MB of the gradient, each started during the "
                "backward as soon as its tensors are ready",
                wf_reducer_num_buckets(t->reducer), wf_reducer_num_buckets(t->reducer) == 1 ? "" : "s",
                t->tc->dist_bucket_mb);
    else if (s == WF_OK && !t->zero1)
        WF_INFO("DDP: %d ranks (%s), %d gradient bucket%s of up to %.1f MB", t->world, wf_comm_backend(t->comm),
                wf_reducer_num_buckets(t->reducer), wf_reducer_num_buckets(t->reducer) == 1 ? "" : "s",
                t->tc->dist_bucket_mb);
    return s;
}

/* ZeRO-1: the shards (16-float aligned), this rank's optimizer of its
 * shard and the buffer the reduce-scatter writes its gradient shard into. */
static wf_status make_zero1(trainer *t, const wf_adamw_config *ac) {
    size_t np = wf_model_num_params(t->model);
    WF_TRY(wf_zero1_plan_init(&t->zplan, np, t->world, 16));
    size_t lo = t->zplan.offsets[t->rank], count = t->zplan.counts[t->rank];
    WF_TRY(wf_adamw_create_shard(&t->opt, ac, t->model, lo, lo + count, t->arena));
    t->gshard = wf_arena_alloc(t->arena, (count ? count : 1) * sizeof(float), 64);
    if (!t->gshard) return wf_error(WF_ERR_NOMEM, "ZeRO-1: out of memory for the gradient shard (%zu floats)", count);
    wf_zero1_memory zm = wf_zero1_plan_memory(&t->zplan, 0, 2);
    if (t->rank == 0) {
        WF_INFO("ZeRO-1: %d ranks (%s), shards of %zu of the %zu parameters: gradients reduce-scattered in buckets "
                "during the backward, each rank updates its shard, parameters all-gathered",
                t->world, wf_comm_backend(t->comm), t->zplan.shard_size, np);
        /* Rank 0's shard is a full one, the largest: the per-rank figure.
         * It counts the moments' shard and the gradient shard. */
        WF_INFO("ZeRO-1: optimizer state %.3f MB per rank instead of %.3f MB (saves %.3f MB, %.0f%%)",
                (double)zm.sharded_bytes / 1e6, (double)zm.unsharded_bytes / 1e6, (double)zm.saved_bytes / 1e6,
                zm.unsharded_bytes ? 100.0 * (double)zm.saved_bytes / (double)zm.unsharded_bytes : 0.0);
    }
    WF_INFO("ZeRO-1: this rank updates parameters [%zu, %zu)", lo, lo + count);
    return WF_OK;
}

static wf_status trainer_setup(trainer *t, const wf_train_config *tc) {
    t->tc = tc;
    if (!tc->data_dir) return wf_error(WF_ERR_CONFIG, "data.dir is not set: give the dataset directory (--data DIR)");
    if (wf_lr_parse_kind(tc->schedule) < 0)
        return wf_error(WF_ERR_CONFIG, "optim.schedule = '%s': use cosine, wsd or constant", tc->schedule);
    if (tc->min_lr > tc->lr)
        return wf_error(WF_ERR_CONFIG, "optim.min_lr = %g is above optim.lr = %g", tc->min_lr, tc->lr);
    int action = wf_spike_action_parse(tc->spike_action);
    if (action < 0)
        return wf_error(WF_ERR_CONFIG, "spike.action = '%s': use warn, skip or rollback",
                        tc->spike_action ? tc->spike_action : "");
    t->spike_action = (wf_spike_action)action;
    wf_spike_config sc = {(int)tc->spike_window, tc->spike_z, (int)tc->spike_warmup, tc->spike_grad_norm, 0};
    WF_TRY(wf_spike_init(&t->spike, &sc));
    t->mem_limits = (wf_mem_limits){tc->memory_max_used_frac, tc->memory_max_rss_frac,
                                    (int64_t)(tc->memory_max_rss_gib * 1073741824.0)};
    wf_dataset_info info;
    WF_TRY(wf_dataset_info_load(&info, tc->data_dir));
    wf_status s = wf_train_model_config(tc, info.vocab_size, &t->mc);
    if (s == WF_OK) s = resolve_tokenizer(t, &info);
    uint64_t val_tokens = 0;
    for (size_t i = 0; i < info.n_splits; i++)
        if (strcmp(info.splits[i].name, "val") == 0) val_tokens = info.splits[i].n_tokens;
    wf_dataset_info_free(&info);
    WF_TRY(s);

    t->B = (int)tc->batch_size;
    if (t->B % t->world != 0)
        return wf_error(WF_ERR_CONFIG,
                        "data.batch_size = %d sequences is not divisible by the %d ranks: every rank gets an "
                        "equal part of each micro-batch; use a multiple of %d (or another rank count)",
                        t->B, t->world, t->world);
    t->Bl = t->B / t->world;
    t->T = tc->seq_len ? (int)tc->seq_len : t->mc.max_seq_len;
    int64_t micro = (int64_t)t->B * t->T;
    int64_t global = tc->global_batch_tokens ? tc->global_batch_tokens : micro;
    if (global % micro != 0)
        return wf_error(WF_ERR_CONFIG,
                        "data.global_batch_tokens = %lld is not a multiple of batch_size * seq_len = %d * %d = %lld: "
                        "each step accumulates whole micro-batches",
                        (long long)global, t->B, t->T, (long long)micro);
    t->accum = (int)(global / micro);

    int threads = tc->threads ? (int)tc->threads : wf_default_threads();
    wf_kern_set_threads(threads);
    char blas_msg[256];
    if (wf_kern_blas_check(blas_msg, sizeof blas_msg)) WF_WARN("%s", blas_msg);

    WF_TRY(wf_arena_create(&t->arena, 0));
    WF_TRY(wf_model_create(&t->model, &t->mc, t->arena));
    WF_TRY(wf_model_plan(t->model, t->Bl, t->T));
    wf_model_init(t->model, (uint64_t)tc->seed);
    wf_adamw_config ac = {tc->beta1, tc->beta2, tc->eps, tc->weight_decay, tc->decay_embeddings, tc->grad_clip};
    t->zero1 = tc->dist_zero1 && t->world > 1;
    if (tc->dist_zero1 && t->world == 1)
        WF_INFO("dist.zero1 = true with one process: nothing to shard, the optimizer is the usual one");
    if (t->zero1) {
        WF_TRY(make_zero1(t, &ac));
        WF_TRY(make_reducer(t));
    } else {
        WF_TRY(wf_adamw_create(&t->opt, &ac, t->model, t->arena));
        if (t->world > 1) WF_TRY(make_reducer(t));
    }
    size_t local = (size_t)t->Bl * (size_t)t->T;
    t->inputs = wf_arena_alloc(t->arena, local * sizeof(int32_t), 64);
    t->targets = wf_arena_alloc(t->arena, local * sizeof(int32_t), 64);
    if (!t->inputs || !t->targets) return WF_ERR_NOMEM;

    /* Every rank reads the same global order; rank r gets its part of each
     * micro-batch, so any rank count sees the same global batches. */
    wf_loader_opts lo = {tc->data_dir, "train", (uint64_t)tc->data_seed, t->T, t->B, t->rank, t->world, 1,
                         WF_LOADER_DEFAULT_PREFETCH, 1};
    WF_TRY(wf_loader_create(&t->train, &lo));
    if (tc->eval_every > 0) {
        if (val_tokens > (uint64_t)t->T) {
            wf_loader_opts vo = lo;
            vo.split = "val";
            vo.shuffle = 0;
            vo.prefetch = 0;
            vo.global_batch = 1;
            while (vo.global_batch * 2 <= t->B && (uint64_t)(vo.global_batch * 2) * (uint64_t)t->T < val_tokens)
                vo.global_batch *= 2;
            /* Split over the ranks like training batches: a multiple of
             * the world size (B is one, so this never passes B). */
            if (vo.global_batch % t->world) vo.global_batch = t->world;
            s = wf_loader_create(&t->val, &vo);
            if (s != WF_OK) return wf_error_wrap(s, "validation split: ");
        } else {
            WF_WARN("the dataset has no validation split longer than one sequence (%" PRIu64
                    " tokens); no validation loss will be computed",
                    val_tokens);
        }
    }
    return WF_OK;
}

/* Mean loss over the first eval_batches batches of the validation split
 * (always the same ones, so evaluations are comparable). */
static wf_status evaluate(trainer *t, double *loss) {
    wf_trace_span span = wf_trace_begin(WF_TRACE_REGION, "eval");
    double sum = 0;
    int n = 0;
    uint64_t per_epoch = wf_loader_batches_per_epoch(t->val);
    wf_status s = wf_loader_set_state(t->val, (wf_loader_state){0, 0});
    for (int64_t i = 0; s == WF_OK && i < t->tc->eval_batches && (uint64_t)i < per_epoch; i++) {
        const wf_batch *b;
        s = wf_loader_next(t->val, &b);
        if (s != WF_OK) break;
        split_batch(b, t->inputs, t->targets);
        float l;
        s = wf_model_forward(t->model, t->inputs, t->targets, b->batch, b->seq_len, &l);
        sum += l;
        n++;
    }
    wf_trace_end(span);
    *loss = n ? sum / n : NAN;
    /* Each rank's mean over equal parts: their average is the global mean. */
    if (s == WF_OK && t->world > 1) s = wf_comm_all_reduce_f64(t->comm, loss, 1, WF_COMM_AVG, "val loss");
    return s;
}

static void fmt_rate(char *buf, size_t n, double v) {
    if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(buf, n, "%.1fk", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

static wf_status write_run_config(const wf_train_config *tc) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.toml", tc->run_dir);
    wf_afile f;
    WF_TRY(wf_afile_open(&f, path));
    fprintf(f.fp, "# effective configuration of this run (weft train --config %s reproduces it)\n", path);
    wf_opts_write_toml(wf_train_spec(), tc, f.fp);
    return wf_afile_commit(&f);
}

/* ---- signals ---- */

/* The signal that asked the run to stop (SIGTERM, SIGUSR1), or 0. A signal
 * handler can only reach global state; this is the one global of the
 * trainer, set by the handler and read between steps. */
static volatile sig_atomic_t g_stop_signal;

/* The trainer's own bits in wf_comm_agree's flag word, next to WF_AGREE_*. */
enum { AGREE_MEMORY = 1u << 8, AGREE_USR1 = 1u << 9, AGREE_TRACE = 1u << 10 };

static void on_stop_signal(int sig) { g_stop_signal = sig; }

typedef struct {
    struct sigaction term, usr1;
} saved_signals;

static void install_signals(saved_signals *old) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads and writes carry on; the flag is checked after the step */
    g_stop_signal = 0;
    sigaction(SIGTERM, &sa, &old->term);
    sigaction(SIGUSR1, &sa, &old->usr1);
}

static void restore_signals(const saved_signals *old) {
    sigaction(SIGTERM, &old->term, NULL);
    sigaction(SIGUSR1, &old->usr1, NULL);
}

/* ---- checkpoints ---- */

static char *config_toml(const wf_train_config *tc) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    wf_opts_write_toml(wf_train_spec(), tc, f);
    fclose(f);
    return buf;
}

static int is_set(const char *s) { return s && *s; }

/* The state a checkpoint holds: every parameter, then the AdamW moments
 * under "optim.m.<name>" and "optim.v.<name>". */
static wf_status build_state(trainer *t) {
    int nt = wf_model_num_tensors(t->model);
    t->n_state = 3 * (size_t)nt;
    t->state = calloc(t->n_state, sizeof *t->state);
    t->state_names = calloc(t->n_state, sizeof *t->state_names);
    if (!t->state || !t->state_names) return wf_error(WF_ERR_NOMEM, "out of memory");
    float *bufs[3] = {wf_model_params(t->model), wf_adamw_m(t->opt), wf_adamw_v(t->opt)};
    const char *prefix[3] = {"", "optim.m.", "optim.v."};
    size_t shard_lo, shard_hi;
    wf_adamw_range(t->opt, &shard_lo, &shard_hi);
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < nt; i++) {
            const wf_tensor_info *ti = wf_model_tensor(t->model, i);
            size_t j = (size_t)k * (size_t)nt + (size_t)i;
            size_t n = strlen(prefix[k]) + strlen(ti->name) + 1;
            t->state_names[j] = malloc(n);
            if (!t->state_names[j]) return wf_error(WF_ERR_NOMEM, "out of memory");
            snprintf(t->state_names[j], n, "%s%s", prefix[k], ti->name);
            wf_ckpt_tensor *e = &t->state[j];
            e->name = t->state_names[j];
            e->ndim = ti->ndim;
            e->shape[0] = ti->shape[0];
            e->shape[1] = ti->shape[1];
            e->data = bufs[k] + ti->offset;
            if (k > 0 && t->zero1) {
                /* This rank holds the moments of its shard only: it saves
                 * and loads that part of each tensor (the global names and
                 * shapes are DDP's, so the checkpoints are the same). */
                e->shard_size = (int64_t)t->zplan.shard_size;
                e->shard_base = (int64_t)ti->offset;
                int64_t b, end;
                wf_ckpt_tensor_range(e, t->rank, &b, &end);
                e->data = b < end ? bufs[k] + (ti->offset + (size_t)b - shard_lo) : bufs[k];
            }
        }
    }
    return WF_OK;
}

/* The spike detector's window goes into every checkpoint, so that a
 * resumed run (and a rollback) judges the next steps exactly as the run
 * that saved it would have: `spike.n` values, oldest first, as text of
 * doubles that read back to the same bits ("%.17g", one space apart) in
 * `spike.loss` and, when the norm is judged too, `spike.grad_norm`. */
static wf_status spike_state_put(const trainer *t, wf_ckpt_meta *m) {
    int n = t->spike.n;
    double *v = malloc(2 * (size_t)(n ? n : 1) * sizeof *v);
    char *text = malloc(25 * (size_t)n + 1);
    wf_status s = v && text ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory for the spike window (%d steps)", n);
    if (s == WF_OK) {
        wf_spike_get_window(&t->spike, v, v + n);
        s = wf_ckpt_meta_set_u64(m, "spike.n", (uint64_t)n);
        for (int k = 0; k < 1 + t->spike.cfg.use_grad_norm && s == WF_OK; k++) {
            size_t len = 0;
            text[0] = '\0';
            for (int i = 0; i < n; i++)
                len += (size_t)snprintf(text + len, 26, "%s%.17g", i ? " " : "", v[(size_t)k * (size_t)n + (size_t)i]);
            s = wf_ckpt_meta_set_str(m, k ? "spike.grad_norm" : "spike.loss", text);
        }
    }
    free(text);
    free(v);
    return s;
}

/* Reads n finite doubles separated by spaces; 0 if the text is not that. */
static int parse_doubles(const char *text, double *out, int n) {
    const char *p = text;
    for (int i = 0; i < n; i++) {
        char *end;
        out[i] = strtod(p, &end);
        if (end == p || !isfinite(out[i])) return 0;
        p = end;
    }
    while (*p == ' ') p++;
    return *p == '\0';
}

/* Puts the checkpoint's spike window into the detector. Returns 1 when it
 * did; 0 when `c` holds none (saved by an older weft, or without the
 * gradient norms this run judges) or an unreadable one, with the reason in
 * `why`: the detector is then left as it is. */
static int spike_state_get(trainer *t, const wf_ckpt *c, char *why, size_t why_size) {
    uint64_t n = 0;
    const char *loss = NULL, *gn = NULL;
    int use_gn = t->spike.cfg.use_grad_norm;
    int found = wf_ckpt_get_u64(c, "spike.n", &n) == WF_OK && wf_ckpt_get_str(c, "spike.loss", &loss) == WF_OK;
    int found_gn = found && wf_ckpt_get_str(c, "spike.grad_norm", &gn) == WF_OK;
    wf_error_clear();
    if (!found) {
        snprintf(why, why_size, "holds no spike detector window (saved by an older weft)");
        return 0;
    }
    if (use_gn && !found_gn) {
        snprintf(why, why_size, "holds a spike detector window without gradient norms (saved with spike.grad_norm "
                 "= false)");
        return 0;
    }
    if (n > (1u << 20)) {
        snprintf(why, why_size, "has spike.n = %" PRIu64 ", more than any spike.window", n);
        return 0;
    }
    double *v = calloc(2 * (size_t)(n ? n : 1), sizeof *v);
    if (!v) {
        snprintf(why, why_size, "has a spike detector window of %" PRIu64 " steps, too large for memory", n);
        return 0;
    }
    int ok = parse_doubles(loss, v, (int)n) && (!use_gn || parse_doubles(gn, v + n, (int)n));
    if (ok) wf_spike_set_window(&t->spike, v, v + n, (int)n);
    else snprintf(why, why_size, "has a spike detector window that is not %" PRIu64 " numbers (spike.loss or "
                  "spike.grad_norm of its manifest)", n);
    free(v);
    return ok;
}

static wf_status make_meta(trainer *t, wf_ckpt_meta **out) {
    const wf_train_config *tc = t->tc;
    wf_ckpt_meta *m = wf_ckpt_meta_create();
    if (!m) return wf_error(WF_ERR_NOMEM, "out of memory");
    wf_loader_state ls = wf_loader_get_state(t->train);
    wf_status s = wf_ckpt_meta_set_str(m, "config", t->config_text);
    if (s == WF_OK) s = wf_ckpt_meta_set_model_config(m, &t->mc);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "optimizer.steps", wf_adamw_steps(t->opt));
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "loader.epoch", ls.epoch);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "loader.sample", ls.sample);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "rng.init_seed", (uint64_t)tc->seed);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "rng.data_seed", (uint64_t)tc->data_seed);
    if (s == WF_OK) s = wf_ckpt_meta_set_str(m, "data.dir", tc->data_dir);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "data.seq_len", (uint64_t)t->T);
    if (s == WF_OK) s = wf_ckpt_meta_set_u64(m, "data.global_batch", (uint64_t)t->B * (uint64_t)t->accum);
    /* Absolute, so that `weft export` finds it from anywhere. */
    char tok[PATH_MAX] = "";
    if (t->tokenizer_path && !realpath(t->tokenizer_path, tok)) snprintf(tok, sizeof tok, "%s", t->tokenizer_path);
    if (s == WF_OK) s = wf_ckpt_meta_set_str(m, "data.tokenizer", tok);
    if (s == WF_OK) s = spike_state_put(t, m);
    if (s != WF_OK) {
        wf_ckpt_meta_destroy(m);
        return s;
    }
    *out = m;
    return WF_OK;
}

static void log_save(const trainer *t, const wf_ckpt_save_stats *st) {
    char dir[4096];
    wf_ckpt_step_dir(dir, sizeof dir, t->root, st->step);
    double gbs = st->write_seconds > 0 ? (double)st->bytes / st->write_seconds / 1e9 : 0;
    char pruned[48] = "";
    if (st->pruned) snprintf(pruned, sizeof pruned, "; removed %d old", st->pruned);
    if (wf_ckpt_writer_staging_bytes(t->writer))
        WF_INFO("saved %s: %.1f MB written in %.1f ms (%.2f GB/s) by the writer thread; training blocked %.1f ms "
                "(copy %.1f ms)%s",
                dir, (double)st->bytes / 1e6, st->write_seconds * 1e3, gbs, st->blocked_seconds * 1e3,
                st->copy_seconds * 1e3, pruned);
    else
        WF_INFO("saved %s: %.1f MB written in %.1f ms (%.2f GB/s); training blocked %.1f ms%s", dir,
                (double)st->bytes / 1e6, st->write_seconds * 1e3, gbs, st->blocked_seconds * 1e3, pruned);
}

/* Logs the saves that completed; a failed one stops the run (the previous
 * checkpoints are intact, so a rerun resumes from the last good one). */
static wf_status report_saves(trainer *t) {
    wf_ckpt_save_stats st;
    while (wf_ckpt_writer_poll(t->writer, &st)) {
        if (st.status != WF_OK) return wf_ckpt_writer_wait(t->writer, NULL);
        log_save(t, &st);
    }
    return WF_OK;
}

static wf_status save_checkpoint(trainer *t, int64_t step) {
    if (t->last_saved == step) return WF_OK;
    wf_ckpt_meta *meta = NULL;
    WF_TRY(make_meta(t, &meta));
    char dir[4096];
    wf_ckpt_step_dir(dir, sizeof dir, t->root, (uint64_t)step);
    wf_status s = wf_ckpt_save(t->writer, dir, (uint64_t)step, meta, NULL);
    wf_ckpt_meta_destroy(meta);
    WF_TRY(s);
    t->last_saved = step;
    snprintf(t->rollback_dir, sizeof t->rollback_dir, "%s", dir);
    return report_saves(t);
}

/* Waits for the save in flight; with several ranks (collective: an
 * asynchronous save still pending is committed) also a barrier, so that
 * all ranks leave together. */
static wf_status finish_saves(trainer *t) {
    wf_status s = wf_ckpt_writer_wait(t->writer, NULL);
    if (s == WF_OK) s = report_saves(t);
    if (t->world > 1) {
        /* Collective on every path, so that a failed save does not leave the
         * other ranks waiting (main aborts the job on the error). */
        wf_status b = wf_comm_barrier(t->comm, "checkpoint done");
        if (s == WF_OK) s = b;
    }
    return s;
}

/* Why a checkpoint does not fit this run's model, or WF_OK. */
static wf_status check_model_config(const char *dir, const wf_model_config *saved, const wf_model_config *now) {
    struct {
        const char *key;
        double a, b;
    } f[] = {
        {"model.dim", saved->dim, now->dim},
        {"model.n_layers", saved->n_layers, now->n_layers},
        {"model.n_heads", saved->n_heads, now->n_heads},
        {"model.n_kv_heads", saved->n_kv_heads, now->n_kv_heads},
        {"model.vocab_size", saved->vocab_size, now->vocab_size},
        {"model.ffn_hidden_dim", wf_model_config_hidden_dim(saved), wf_model_config_hidden_dim(now)},
        {"model.max_seq_len", saved->max_seq_len, now->max_seq_len},
        {"model.norm_eps", saved->norm_eps, now->norm_eps},
        {"model.rope_theta", saved->rope_theta, now->rope_theta},
        {"model.tied", saved->tied_embeddings, now->tied_embeddings},
    };
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (f[i].a != f[i].b)
            return wf_error(WF_ERR_CONFIG,
                            "%s was saved with %s = %.10g but this run's config has %.10g: resume with the run's "
                            "config (its config.toml), or start over with --no-resume or another train.run_dir",
                            dir, f[i].key, f[i].a, f[i].b);
    return WF_OK;
}

/* Restores everything a step depends on from `c`; *start gets its step. */
static wf_status restore(trainer *t, wf_ckpt *c, int64_t *start) {
    const wf_train_config *tc = t->tc;
    const char *dir = wf_ckpt_path(c);
    wf_model_config saved;
    WF_TRY(wf_ckpt_get_model_config(c, &saved));
    WF_TRY(check_model_config(dir, &saved, &t->mc));
    uint64_t opt_steps, epoch, sample, seq_len = 0, gb = 0, data_seed = 0, init_seed = 0;
    WF_TRY(wf_ckpt_get_u64(c, "optimizer.steps", &opt_steps));
    WF_TRY(wf_ckpt_get_u64(c, "loader.epoch", &epoch));
    WF_TRY(wf_ckpt_get_u64(c, "loader.sample", &sample));
    WF_TRY(wf_ckpt_load_rank(c, t->state, t->n_state, t->rank));
    wf_adamw_set_steps(t->opt, opt_steps);
    wf_status s = wf_loader_set_state(t->train, (wf_loader_state){epoch, sample});
    if (s != WF_OK) return wf_error_wrap(s, "%s: ", dir);
    /* What changes the data the resumed run reads: warn, it is allowed. */
    if (wf_ckpt_get_u64(c, "data.seq_len", &seq_len) == WF_OK && seq_len != (uint64_t)t->T)
        WF_WARN("%s was saved with data.seq_len = %" PRIu64 ", this run uses %d: the data order changes", dir,
                seq_len, t->T);
    if (wf_ckpt_get_u64(c, "data.global_batch", &gb) == WF_OK && gb != (uint64_t)t->B * (uint64_t)t->accum)
        WF_WARN("%s was saved with a global batch of %" PRIu64 " sequences, this run uses %lld", dir, gb,
                (long long)t->B * t->accum);
    if (wf_ckpt_get_u64(c, "rng.data_seed", &data_seed) == WF_OK && data_seed != (uint64_t)tc->data_seed)
        WF_WARN("%s was saved with data.seed = %" PRIu64 ", this run uses %lld: the data order changes", dir,
                data_seed, (long long)tc->data_seed);
    if (wf_ckpt_get_u64(c, "rng.init_seed", &init_seed) == WF_OK && init_seed != (uint64_t)tc->seed)
        WF_INFO("%s was saved with train.seed = %" PRIu64 " (this run's %lld does not matter when resuming)", dir,
                init_seed, (long long)tc->seed);
    wf_error_clear();
    *start = (int64_t)wf_ckpt_step(c);
    return WF_OK;
}

/* Resumes from ckpt.resume_from or the run's latest valid checkpoint, or
 * initialises from ckpt.init_from; *start is the step to continue after. */
static wf_status resume_or_init(trainer *t, int64_t *start) {
    const wf_train_config *tc = t->tc;
    *start = 0;
    wf_ckpt *c = NULL;
    if (is_set(tc->ckpt_resume_from)) {
        WF_TRY(wf_ckpt_open(&c, tc->ckpt_resume_from));
        wf_status s = wf_ckpt_verify(c, NULL, NULL);
        if (s != WF_OK) {
            wf_ckpt_close(c);
            return wf_error_wrap(s, "ckpt.resume_from: ");
        }
    } else if (tc->ckpt_resume) {
        WF_TRY(wf_ckpt_open_latest(t->root, &c));
    } else {
        uint64_t *steps;
        size_t n;
        WF_TRY(wf_ckpt_list(t->root, &steps, &n));
        free(steps);
        if (n)
            WF_WARN("--no-resume: starting over; the %zu checkpoint%s in %s will be replaced as new ones are saved", n,
                    n == 1 ? "" : "s", t->root);
    }
    if (c) {
        if (is_set(tc->ckpt_init_from)) WF_INFO("resuming, so ckpt.init_from = %s is not used", tc->ckpt_init_from);
        wf_status s = restore(t, c, start);
        if (s == WF_OK) {
            WF_INFO("resumed from %s (step %" PRId64 ")", wf_ckpt_path(c), *start);
            snprintf(t->rollback_dir, sizeof t->rollback_dir, "%s", wf_ckpt_path(c));
            char why[256];
            if (spike_state_get(t, c, why, sizeof why))
                WF_INFO("spike detector: the window of the last %d steps restored from the checkpoint", t->spike.n);
            else
                WF_INFO("%s %s: the spike detector starts empty, and its first %d steps (spike.warmup) only fill "
                        "the window", wf_ckpt_path(c), why, t->spike.cfg.warmup);
        }
        wf_ckpt_close(c);
        return s;
    }
    if (is_set(tc->ckpt_init_from)) {
        WF_TRY(wf_hf_import(t->model, tc->ckpt_init_from));
        WF_INFO("initialised the weights from %s", tc->ckpt_init_from);
    }
    return WF_OK;
}

static wf_status setup_checkpoints(trainer *t) {
    const wf_train_config *tc = t->tc;
    snprintf(t->root, sizeof t->root, "%s/checkpoints", tc->run_dir);
    snprintf(t->save_path, sizeof t->save_path, "%s/SAVE", tc->run_dir);
    snprintf(t->stop_path, sizeof t->stop_path, "%s/STOP", tc->run_dir);
    t->last_saved = -1;
    t->config_text = config_toml(tc);
    if (!t->config_text) return wf_error(WF_ERR_NOMEM, "out of memory");
    WF_TRY(build_state(t));
    if (t->rank == 0) {
        /* Rank 0 alone tidies the folder; the caller's barrier follows. */
        WF_TRY(wf_mkdirs(t->root));
        int removed = 0;
        WF_TRY(wf_ckpt_cleanup(t->root, &removed));
        if (removed)
            WF_INFO("removed %d unfinished checkpoint save%s from %s", removed, removed == 1 ? "" : "s", t->root);
    }
    /* Several ranks: each writes its part of every tensor; an asynchronous
     * save is committed later, collectively, on this thread (train_loop:
     * when the step's agreement says no rank's write is busy). */
    int async = tc->ckpt_async;
    wf_ckpt_writer_opts wo = {t->rank, t->world, async, (int)tc->ckpt_keep_last, (uint64_t)tc->ckpt_keep_every};
    WF_TRY(wf_ckpt_writer_create_ranks(&t->writer, t->state, t->n_state, &wo, t->comm));
    if (async)
        WF_INFO("checkpoints: %s, asynchronous (staging buffer %.1f MB)", t->root,
                (double)wf_ckpt_writer_staging_bytes(t->writer) / 1e6);
    return WF_OK;
}

static wf_status write_final_model(trainer *t, int64_t steps) {
    if (t->rank != 0) return WF_OK;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", t->tc->run_dir);
    char steps_s[32];
    snprintf(steps_s, sizeof steps_s, "%lld", (long long)steps);
    wf_kv meta[2] = {{"weft.step", steps_s}, {"weft.tokenizer", t->tokenizer_path ? t->tokenizer_path : ""}};
    WF_TRY(wf_safetensors_save(t->model, path, meta, t->tokenizer_path ? 2 : 1));
    WF_INFO("wrote %s", path);
    return WF_OK;
}

/* ---- observability ---- */

/* Where a loader cursor lies in the data order, in micro-batches from the
 * start of the run's first epoch (the loader's global batch is one
 * micro-batch, B samples). */
static int64_t data_position(const trainer *t, wf_loader_state s) {
    return (int64_t)(s.epoch * wf_loader_batches_per_epoch(t->train) + s.sample / (uint64_t)t->B);
}

static wf_loader_state data_cursor(const trainer *t, int64_t pos) {
    uint64_t per_epoch = wf_loader_batches_per_epoch(t->train);
    return (wf_loader_state){(uint64_t)pos / per_epoch, (uint64_t)pos % per_epoch * (uint64_t)t->B};
}

/* The peak MFU is measured against, the FLOP count, run.json, the metrics
 * sinks and the tracer. Runs after resume_or_init: `start` > 0 marks the
 * restart in the event files. */
static wf_status setup_obs(trainer *t, int64_t start) {
    const wf_train_config *tc = t->tc;
    wf_peak_options po = {.configured_tflops = tc->metrics_peak_tflops,
                          .refresh = tc->metrics_remeasure_peak ? WF_PEAK_REMEASURE : WF_PEAK_USE_CACHE};
    char line[1536];
    if (wf_peak_get(&t->peak, &po) == WF_OK) {
        wf_peak_describe(&t->peak, line, sizeof line);
        WF_INFO("MFU: %s", line);
    } else {
        WF_WARN("MFU: no peak (%s); set metrics.peak_tflops to get MFU", wf_error_msg());
        wf_error_clear();
        memset(&t->peak, 0, sizeof t->peak);
    }
    t->flops_per_token = wf_model_flops_per_token(&t->mc, t->T);
    size_t np = wf_model_num_params(t->model);
    wf_run_dist dist = {t->world, t->comm ? wf_comm_backend(t->comm) : "single",
                        t->zero1 ? "zero1" : t->world > 1 ? "ddp" : "single", (int64_t)(8 * np), (int64_t)(8 * np), 0};
    if (t->zero1) {
        wf_zero1_memory zm = wf_zero1_plan_memory(&t->zplan, 0, 2);
        dist.optim_bytes = (int64_t)zm.sharded_bytes;
        dist.optim_unsharded_bytes = (int64_t)zm.unsharded_bytes;
        dist.zero1_shard_floats = (int64_t)t->zplan.shard_size;
    }
    wf_run_record rec = {t->config_text, tc->argc, tc->argv, t->peak.tflops > 0 ? &t->peak : NULL,
                         t->flops_per_token, (int64_t)np, NULL, &dist};
    if (t->rank == 0) WF_TRY(wf_run_record_write(tc->run_dir, &rec));

    /* Rank 0 records into the run directory; with metrics.all_ranks every
     * other rank too, into RUN_DIR/ranks/rank-NNNNN (its own times and
     * memory, the global loss and norm). */
    char rank_dir[4096];
    wf_metrics_options mo = {tc->run_dir, tc->metrics_jsonl, tc->metrics_tensorboard, tc->metrics_flush_every_s};
    if (t->rank > 0) {
        snprintf(rank_dir, sizeof rank_dir, "%s/ranks/rank-%05d", tc->run_dir, t->rank);
        mo.dir = rank_dir;
    }
    if ((t->rank == 0 || tc->metrics_all_ranks) && (mo.jsonl || mo.tensorboard)) {
        if (t->rank > 0) WF_TRY(wf_mkdirs(rank_dir));
        WF_TRY(wf_metrics_open(&t->metrics, &mo));
        if (start > 0) WF_TRY(wf_metrics_restart(t->metrics, start + 1));
        const char *tb = wf_metrics_tb_path(t->metrics);
        if (mo.jsonl) WF_INFO("metrics: %s/metrics.jsonl", mo.dir);
        if (tb) WF_INFO("metrics: TensorBoard events %s", tb);
    }

    if (tc->trace_active > 0 || tc->trace_requests) {
        char dir[4096];
        if (is_set(tc->trace_dir)) snprintf(dir, sizeof dir, "%s", tc->trace_dir);
        else snprintf(dir, sizeof dir, "%s/traces", tc->run_dir);
        wf_trace_config cfg = {dir,
                               tc->trace_requests ? tc->run_dir : NULL,
                               /* With several ranks rank 0 polls in train_loop and every rank
                                * captures the same steps. */
                               tc->trace_requests && t->world == 1,
                               t->rank,
                               t->world,
                               t->comm ? wf_comm_backend(t->comm) : "single",
                               {tc->trace_skip_first, tc->trace_wait, tc->trace_warmup, tc->trace_active,
                                tc->trace_repeat},
                               tc->trace_buffer_events,
                               0};
        if (t->world > 1) {
            /* One time base for every rank's trace (cross-rank analyses):
             * rank 0's, rounded down to a second. */
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            cfg.base_unix_ns = (uint64_t)now.tv_sec * 1000000000u;
            WF_TRY(wf_comm_broadcast(t->comm, &cfg.base_unix_ns, sizeof cfg.base_unix_ns, 0, "trace time base"));
        }
        WF_TRY(wf_trace_init(&cfg));
        t->tracing = 1;
        if (tc->trace_active > 0)
            WF_INFO("trace: %lld step%s per capture into %s (after %lld steps, then wait %lld, warmup %lld; %s)",
                    (long long)tc->trace_active, tc->trace_active == 1 ? "" : "s", dir, (long long)tc->trace_skip_first,
                    (long long)tc->trace_wait, (long long)tc->trace_warmup,
                    tc->trace_repeat ? "repeated" : "for ever");
    }
    return WF_OK;
}

/* What one step measured and decided. */
typedef struct {
    double loss, lr, grad_norm;
    int64_t data_pos;
    double data_s, fwd_bwd_s, optim_s;
    double comm_s; /* several ranks: blocked in the gradient's collectives; NaN with one process */
    wf_spike_result spike;
    int skipped; /* the update was not applied */
} step_outcome;

/* Forward and backward over the step's micro-batches (gradients summed
 * with scale 1 / (accum x world)), the gradients summed over ranks, then
 * the spike check and the update (or not). */
static wf_status run_step(trainer *t, const wf_lr_schedule *sched, int64_t step, step_outcome *o) {
    memset(o, 0, sizeof *o);
    o->data_pos = -1;
    o->comm_s = t->world > 1 ? 0 : NAN;
    wf_model_zero_grad(t->model);
    /* The mean over the global batch is the sum over ranks of each rank's
     * gradient scaled by 1 / world: the scale goes into the backward's (it
     * costs nothing there) and the ranks' gradients are summed, as PyTorch
     * DDP divides before its all-reduce. No pass over the gradient follows
     * the transfer, as AVG's division would. For a world size that is a
     * power of two the bits are those of summing and then dividing (scaling
     * by 2^-k commutes with every rounding, barring underflow); for others
     * 1 / (accum x world) is rounded once, so the result may differ from
     * that mean in the last bit (docs/distributed.md). */
    const float grad_scale = 1.0f / (float)(t->accum * t->world);
    for (int k = 0; k < t->accum; k++) {
        double ta = wf_time_now();
        const wf_batch *b;
        wf_trace_span span = wf_trace_begin(WF_TRACE_DATA_WAIT, "data wait");
        wf_status s = wf_loader_next(t->train, &b);
        wf_trace_end(span);
        WF_TRY(s);
        split_batch(b, t->inputs, t->targets);
        if (k == 0) o->data_pos = data_position(t, b->state);
        double tb = wf_time_now();
        o->data_s += tb - ta;
        float l = 0;
        span = wf_trace_begin(WF_TRACE_REGION, "forward");
        s = wf_model_forward(t->model, t->inputs, t->targets, t->Bl, t->T, &l);
        wf_trace_end(span);
        WF_TRY(s);
        span = wf_trace_begin(WF_TRACE_REGION, "backward");
        /* The last micro-batch's backward finishes the gradients: buckets
         * start reducing as it goes (DDP's overlap). */
        int hook = t->reducer && k == t->accum - 1;
        if (hook) {
            t->hook_status = WF_OK;
            wf_model_set_grad_hook(t->model, grad_ready, t);
        }
        s = wf_model_backward(t->model, grad_scale);
        if (hook) {
            wf_model_set_grad_hook(t->model, NULL, NULL);
            if (s == WF_OK) s = t->hook_status;
        }
        wf_trace_end(span);
        WF_TRY(s);
        o->loss += (double)l / t->accum;
        o->fwd_bwd_s += wf_time_now() - tb;
    }
    if (t->world > 1) {
        /* Every rank's gradients become the sum over ranks of each rank's
         * mean over its equal part of the batch scaled by 1 / world: the
         * mean over the global batch. The logged loss becomes the average.
         * DDP: the whole gradient, on every rank, by the buckets'
         * all-reduces; ZeRO-1: this rank's shard of it, by the same buckets'
         * reduce-scatters. Both started during the backward. Every rank then
         * applies the same update to the same parameters (ZeRO-1: each to
         * its shard, then the all-gather). */
        double tr = wf_time_now();
        wf_trace_span span = wf_trace_begin(WF_TRACE_REGION, t->zero1 ? "grad reduce-scatter" : "grad all-reduce");
        wf_status s = wf_reducer_finish(t->reducer);
        /* What the buckets did not hide behind the backward, waiting for
         * the slowest rank included. */
        o->comm_s += wf_time_now() - tr;
        if (s == WF_OK) s = wf_comm_all_reduce_f64(t->comm, &o->loss, 1, WF_COMM_AVG, "loss");
        if (s == WF_OK && step == 0 && t->rank == 0)
            WF_INFO("%s: %d of %d %s buckets started during the backward", t->zero1 ? "ZeRO-1" : "DDP",
                    wf_reducer_overlapped(t->reducer), wf_reducer_num_buckets(t->reducer),
                    t->zero1 ? "reduce-scatter" : "gradient");
        wf_trace_end(span);
        WF_TRY(s);
        o->fwd_bwd_s += wf_time_now() - tr;
    }

    double t0 = wf_time_now();
    o->lr = wf_lr_at(sched, (uint64_t)step);
    wf_trace_span region = wf_trace_begin(WF_TRACE_REGION, "optimizer");
    wf_status s = WF_OK;
    if (t->zero1) {
        /* The global norm first (a collective over the shards), in every
         * spike mode: the update needs it for clipping. */
        wf_trace_span span = wf_trace_begin(WF_TRACE_COMPUTE, "grad norm");
        s = wf_zero1_grad_norm(t->comm, t->gshard, t->zplan.counts[t->rank], &o->grad_norm);
        wf_trace_end(span);
        if (s == WF_OK && t->spike_action != WF_SPIKE_WARN) {
            /* Judged before: a spike's update must not be applied. */
            o->spike = wf_spike_check(&t->spike, o->loss, o->grad_norm);
            o->skipped = o->spike.spike;
        } else if (s == WF_OK && !isfinite(o->loss)) {
            s = wf_error(WF_ERR_RANGE,
                         "step %lld: the loss is %g; lower optim.lr or check the data (spike.action = skip or "
                         "rollback would drop the step instead)",
                         (long long)step + 1, o->loss);
        }
        if (s == WF_OK && !o->skipped) {
            /* Same norm, loss and lr on every rank: all update (or all
             * refuse a non-finite norm) and all join the all-gather. */
            span = wf_trace_begin(WF_TRACE_COMPUTE, "adamw");
            s = wf_adamw_step_shard(t->opt, o->lr, t->gshard, o->grad_norm);
            wf_trace_end(span);
            if (s != WF_OK) s = wf_error_wrap(s, "step %lld: ", (long long)step + 1);
            if (s == WF_OK) {
                double tg = wf_time_now();
                span = wf_trace_begin(WF_TRACE_REGION, "param all-gather");
                s = wf_comm_all_gather(t->comm, wf_model_params(t->model), t->zplan.counts, "param all-gather");
                wf_trace_end(span);
                o->comm_s += wf_time_now() - tg;
            }
        }
        if (s == WF_OK && t->spike_action == WF_SPIKE_WARN) o->spike = wf_spike_check(&t->spike, o->loss, o->grad_norm);
    } else if (t->spike_action == WF_SPIKE_WARN) {
        /* Judged after the update, which computes the norm anyway. */
        if (!isfinite(o->loss))
            s = wf_error(WF_ERR_RANGE,
                         "step %lld: the loss is %g; lower optim.lr or check the data (spike.action = skip or "
                         "rollback would drop the step instead)",
                         (long long)step + 1, o->loss);
        if (s == WF_OK) {
            wf_trace_span span = wf_trace_begin(WF_TRACE_COMPUTE, "adamw");
            s = wf_adamw_step(t->opt, o->lr, &o->grad_norm);
            wf_trace_end(span);
            if (s != WF_OK) s = wf_error_wrap(s, "step %lld: ", (long long)step + 1);
        }
        if (s == WF_OK) o->spike = wf_spike_check(&t->spike, o->loss, o->grad_norm);
    } else {
        /* Judged before: a spike's update must not be applied. */
        wf_trace_span span = wf_trace_begin(WF_TRACE_COMPUTE, "grad norm");
        o->grad_norm = wf_grad_norm(t->model);
        wf_trace_end(span);
        o->spike = wf_spike_check(&t->spike, o->loss, o->grad_norm);
        if (o->spike.spike) {
            o->skipped = 1;
        } else {
            span = wf_trace_begin(WF_TRACE_COMPUTE, "adamw");
            s = wf_adamw_step(t->opt, o->lr, NULL);
            wf_trace_end(span);
            if (s != WF_OK) s = wf_error_wrap(s, "step %lld: ", (long long)step + 1);
        }
    }
    wf_trace_end(region);
    o->optim_s = wf_time_now() - t0;
    return s;
}

/* PaLM's recipe for a spike at `step` whose first micro-batch is at
 * `spike_pos` of the data order: reload the last checkpoint this job saved
 * (or resumed from) and continue the data past the spike's batches plus
 * spike.skip_batches, so the steps after the checkpoint see other data.
 * *back gets the checkpoint's step, or -1 when there is none to go back to
 * (or it was used spike.max_rollbacks times already): the caller skips the
 * update instead. */
static wf_status rollback(trainer *t, int64_t step, int64_t spike_pos, int64_t *rb_step, int *rb_count,
                          int64_t *back) {
    *back = -1;
    WF_TRY(finish_saves(t)); /* the save in flight may be the one to go back to */
    if (!t->rollback_dir[0]) {
        WF_WARN("spike at step %lld: no checkpoint of this run to roll back to yet; its update is skipped instead",
                (long long)step);
        return WF_OK;
    }
    wf_ckpt *c;
    WF_TRY(wf_ckpt_open(&c, t->rollback_dir));
    int64_t to = (int64_t)wf_ckpt_step(c);
    if (to == *rb_step && *rb_count >= t->tc->spike_max_rollbacks) {
        wf_ckpt_close(c);
        WF_WARN("spike at step %lld: already rolled back to %s %d time%s (spike.max_rollbacks); its update is "
                "skipped instead",
                (long long)step, t->rollback_dir, *rb_count, *rb_count == 1 ? "" : "s");
        return WF_OK;
    }
    wf_status s = wf_ckpt_verify(c, NULL, NULL);
    int64_t got = 0;
    if (s == WF_OK) s = restore(t, c, &got);
    /* The detector goes back with the model: the steps run again are
     * judged against the window the checkpoint's step left, as they were
     * the first time; the abandoned steps leave it. */
    char why[256];
    if (s == WF_OK && !spike_state_get(t, c, why, sizeof why))
        WF_INFO("%s %s: the spike detector keeps its current window", t->rollback_dir, why);
    wf_ckpt_close(c);
    if (s != WF_OK) return wf_error_wrap(s, "rolling back for the spike at step %lld: ", (long long)step);
    int64_t from = data_position(t, wf_loader_get_state(t->train));
    int64_t resume_at = spike_pos + t->accum + t->tc->spike_skip_batches;
    WF_TRY(wf_loader_set_state(t->train, data_cursor(t, resume_at)));
    *rb_count = to == *rb_step ? *rb_count + 1 : 1;
    *rb_step = to;
    t->last_saved = to;
    WF_WARN("rolled back to %s (step %lld) for the spike at step %lld; the data continues at micro-batch %lld, "
            "skipping micro-batches %lld to %lld (spike.skip_batches = %lld after the spike's)",
            t->rollback_dir, (long long)to, (long long)step, (long long)resume_at, (long long)from,
            (long long)resume_at - 1, (long long)t->tc->spike_skip_batches);
    *back = to;
    return WF_OK;
}

/* A step ran faster than the peak MFU is measured against: that peak was
 * measured (or cached) while other work loaded the machine. Measures it
 * once more (the cache keeps the higher of the two) and says so. */
static void recheck_peak(trainer *t, int64_t step, double achieved) {
    t->peak_rechecked = 1;
    WF_WARN("MFU above 100%% at step %lld: this process ran %.4g TFLOP/s, more than the %s peak of %.4g TFLOP/s, "
            "which was measured while the machine was busy; measuring the peak again",
            (long long)step, achieved, wf_peak_source_name(t->peak.source), t->peak.tflops);
    wf_peak_options po = {.refresh = WF_PEAK_RECHECK}; /* the cache keeps the higher of the two */
    wf_peak np;
    if (wf_peak_get(&np, &po) != WF_OK) {
        WF_WARN("MFU: %s", wf_error_msg());
        wf_error_clear();
        return;
    }
    if (np.tflops > t->peak.tflops) t->peak = np;
    char line[1536];
    wf_peak_describe(&t->peak, line, sizeof line);
    if (t->peak.tflops < achieved)
        WF_WARN("MFU: %s, still below this run's rate: the machine is too busy for a reliable peak; set "
                "metrics.peak_tflops (MFU figures above 100%% follow)", line);
    else
        WF_INFO("MFU: %s", line);
}

static wf_status train_loop(trainer *t, int64_t start, wf_train_result *res) {
    const wf_train_config *tc = t->tc;
    wf_lr_schedule sched = {(wf_lr_kind)wf_lr_parse_kind(tc->schedule), tc->lr, tc->min_lr,
                            (uint64_t)tc->warmup_steps, (uint64_t)tc->steps, tc->decay_frac};
    size_t np = wf_model_num_params(t->model);
    wf_model_memory mem = wf_model_get_memory(t->model);
    WF_INFO("model: %zu parameters (%.2fM), dim %d, %d layers, %d heads (%d kv), ffn %d, vocab %d, %s",
            np, (double)np / 1e6, t->mc.dim, t->mc.n_layers, t->mc.n_heads, t->mc.n_kv_heads,
            wf_model_config_hidden_dim(&t->mc), t->mc.vocab_size, t->mc.tied_embeddings ? "tied" : "untied");
    WF_INFO("batch: %d x %d tokens, %d micro-batch%s per step (%lld tokens); %lld steps on %d threads",
            t->B, t->T, t->accum, t->accum == 1 ? "" : "es", (long long)t->accum * t->B * t->T,
            (long long)tc->steps, wf_kern_threads());
    if (t->world > 1)
        WF_INFO("data parallel: %d ranks, %d of the %d sequences of each micro-batch on this rank (rank %d)",
                t->world, t->Bl, t->B, t->rank);
    size_t opt_lo, opt_hi;
    wf_adamw_range(t->opt, &opt_lo, &opt_hi);
    WF_INFO("memory: parameters %.1f MB, gradients %.1f MB, optimizer %.1f MB%s, activations %.1f MB",
            mem.param_bytes / 1e6, mem.grad_bytes / 1e6, 8.0 * (double)(opt_hi - opt_lo) / 1e6,
            t->zero1 ? " (this rank's shard)" : "", mem.activation_bytes / 1e6);
    WF_INFO("FLOPs: %.4g per token (docs/train.md), %.4g per step", t->flops_per_token,
            t->flops_per_token * (double)t->accum * t->B * t->T);

    res->step = start;
    if (start >= tc->steps) {
        WF_INFO("the checkpoint is at step %lld of train.steps = %lld: nothing left to train", (long long)start,
                (long long)tc->steps);
        res->finished = 1;
        return write_final_model(t, start);
    }
    wf_progress bar;
    wf_progress_init(&bar, "train", "steps", (uint64_t)tc->steps);
    if (t->rank != 0) bar.tty = 0; /* one bar: rank 0's */
    wf_progress_update(&bar, (uint64_t)start);
    double t_run = wf_time_now();
    double val_loss = NAN;
    int64_t tokens = (int64_t)t->accum * t->B * t->T;
    int64_t rb_step = -1;
    int rb_count = 0;
    int step_width = (int)snprintf(NULL, 0, "%lld", (long long)tc->steps);
    int64_t step;
    for (step = start; step < tc->steps; step++) {
        /* The tracer's step marker comes first, outside the step's time. */
        if (wf_trace_step(step + 1) != WF_OK) {
            WF_WARN("trace: %s (training goes on)", wf_error_msg());
            wf_error_clear();
        }
        if (t->comm) wf_comm_set_step(t->comm, step);
        double t0 = wf_time_now();
        step_outcome o;
        WF_TRY(run_step(t, &sched, step, &o));
        int64_t done = step + 1;
        int last = done == tc->steps;
        int roll = o.spike.spike && t->spike_action == WF_SPIKE_ROLLBACK;
        char spike_note[48] = "";
        if (o.spike.spike) {
            res->spikes++;
            char msg[1024];
            wf_spike_describe(&o.spike, done, o.data_pos, o.loss, o.grad_norm, t->spike_action, msg, sizeof msg);
            wf_progress_clear(&bar);
            WF_WARN("%s", msg);
            snprintf(spike_note, sizeof spike_note, " | spike (%s)",
                     t->spike_action == WF_SPIKE_WARN ? "warned" : roll ? "rolled back" : "skipped");
        }

        double eval_s = NAN;
        int eval = !roll && t->val && tc->eval_every > 0 && (done % tc->eval_every == 0 || last);
        if (eval) {
            double te = wf_time_now();
            WF_TRY(evaluate(t, &val_loss));
            eval_s = wf_time_now() - te;
        }

        /* Saves: on schedule, at the end, and when asked (between steps, so
         * that a checkpoint always holds a whole step). Not after a spike
         * that is rolled back: that step's state is thrown away. */
        wf_host_mem hm;
        char mem_msg[512] = "";
        int mem_trip = !roll && wf_host_mem_read(&hm) == WF_OK &&
                       wf_mem_watchdog_check(&t->mem_limits, &hm, mem_msg, sizeof mem_msg);
        wf_error_clear();
        int save_file = !roll && access(t->save_path, F_OK) == 0, stop_file = !roll && access(t->stop_path, F_OK) == 0;
        int sig = roll ? 0 : g_stop_signal, stop_at = !roll && tc->ckpt_stop_at > 0 && done == tc->ckpt_stop_at;
        if (t->world > 1) {
            /* What one rank saw, all do, at this same step. `roll` and
             * stop_at are the same on every rank already (the loss and the
             * gradient norm are). */
            uint32_t flags = (save_file ? WF_AGREE_SAVE : 0u) | (stop_file ? WF_AGREE_STOP : 0u) |
                             (sig ? WF_AGREE_SIGNAL : 0u) | (mem_trip ? AGREE_MEMORY : 0u) |
                             (sig == SIGUSR1 ? AGREE_USR1 : 0u) |
                             (wf_ckpt_writer_busy(t->writer) ? WF_AGREE_CKPT_BUSY : 0u);
            /* `weft trace request`: rank 0 claims the request file and
             * hands it to every rank, so that all capture the same steps. */
            wf_trace_request req;
            memset(&req, 0, sizeof req);
            if (t->rank == 0 && t->tracing && tc->trace_requests) {
                int found = 0;
                if (wf_trace_request_poll(tc->run_dir, &req, &found) != WF_OK) {
                    WF_WARN("trace: %s", wf_error_msg());
                    wf_error_clear();
                } else if (found) {
                    flags |= AGREE_TRACE;
                }
            }
            WF_TRY(wf_comm_agree(t->comm, &flags, "agree"));
            if (flags & AGREE_TRACE) {
                WF_TRY(wf_comm_broadcast(t->comm, &req, sizeof req, 0, "trace request"));
                req.id[sizeof req.id - 1] = '\0';
                WF_TRY(wf_trace_capture_request(&req));
                if (t->rank == 0)
                    WF_INFO("trace: request %s: every rank captures %lld steps from step %lld", req.id,
                            (long long)req.steps, (long long)done + 1);
            }
            /* An asynchronous save whose data files are all written is
             * committed now, by every rank (a no-op when none is pending). */
            if (!(flags & WF_AGREE_CKPT_BUSY)) WF_TRY(wf_ckpt_writer_commit(t->writer, NULL));
            save_file = (flags & WF_AGREE_SAVE) != 0;
            stop_file = (flags & WF_AGREE_STOP) != 0;
            sig = (flags & WF_AGREE_SIGNAL) ? ((flags & AGREE_USR1) ? SIGUSR1 : SIGTERM) : 0;
            if ((flags & AGREE_MEMORY) && !mem_trip) snprintf(mem_msg, sizeof mem_msg, "another rank's memory limit");
            mem_trip = (flags & AGREE_MEMORY) != 0;
        }
        int stopping = !last && (stop_file || sig || stop_at || mem_trip);
        double tc0 = wf_time_now();
        if (!roll && (last || stopping || save_file || (tc->ckpt_every > 0 && done % tc->ckpt_every == 0))) {
            wf_trace_span span = wf_trace_begin(WF_TRACE_REGION, "checkpoint");
            wf_progress_clear(&bar);
            if (save_file && t->rank == 0 && unlink(t->save_path) == 0) WF_INFO("%s: saving at step %lld", t->save_path, (long long)done);
            wf_status s = save_checkpoint(t, done);
            wf_trace_end(span);
            WF_TRY(s);
        } else {
            WF_TRY(report_saves(t));
        }
        double t_end = wf_time_now();

        wf_metrics_step r;
        wf_metrics_step_init(&r);
        r.step = done;
        r.elapsed_s = t_end - t_run;
        r.loss = o.loss;
        r.val_loss = eval ? val_loss : NAN;
        r.lr = o.lr;
        r.grad_norm = o.grad_norm;
        r.tokens = tokens;
        r.step_s = t_end - t0 - (eval ? eval_s : 0);
        r.data_s = o.data_s;
        r.fwd_bwd_s = o.fwd_bwd_s;
        r.optim_s = o.optim_s;
        r.ckpt_s = t_end - tc0;
        r.eval_s = eval_s;
        r.loss_z = o.spike.loss_z;
        r.grad_norm_z = o.spike.grad_norm_z;
        r.spike = o.spike.spike;
        r.data_pos = o.data_pos;
        r.comm_s = o.comm_s;
        wf_metrics_step_derive(&r, t->flops_per_token, t->world, t->peak.tflops);
        if (r.mfu_pct > 100 && t->peak.source != WF_PEAK_CONFIG && !t->peak_rechecked) {
            recheck_peak(t, done, r.tflops);
            wf_metrics_step_derive(&r, t->flops_per_token, t->world, t->peak.tflops);
        }
        wf_metrics_step_memory(&r, t->arena);
        if (t->metrics) WF_TRY(wf_metrics_log(t->metrics, &r));

        if (t->rank == 0 && (done % tc->log_every == 0 || last || eval || o.spike.spike)) {
            char rate[32], vbuf[48] = "", mbuf[32] = "";
            fmt_rate(rate, sizeof rate, r.tokens_per_s);
            if (isfinite(r.mfu_pct)) snprintf(mbuf, sizeof mbuf, " | mfu %.1f%%", r.mfu_pct);
            if (eval) snprintf(vbuf, sizeof vbuf, " | val loss %.4f", val_loss);
            wf_progress_clear(&bar);
            printf("step %*lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %s tok/s | %.0f ms (data %.1f ms)%s%s%s\n",
                   step_width, (long long)done, (long long)tc->steps, o.loss, o.lr, o.grad_norm, rate, r.step_s * 1e3,
                   o.data_s * 1e3, mbuf, vbuf, spike_note);
            fflush(stdout);
        }

        if (o.skipped && !roll) res->skipped++;
        if (roll) {
            int64_t back;
            WF_TRY(rollback(t, done, o.data_pos, &rb_step, &rb_count, &back));
            if (back >= 0) {
                res->rollbacks++;
                if (t->metrics) WF_TRY(wf_metrics_restart(t->metrics, back + 1));
                wf_progress_update(&bar, (uint64_t)back);
                res->step = back;
                step = back - 1; /* the loop's step++ makes it `back`: step back+1 runs next */
                continue;
            }
            res->skipped++; /* nothing to go back to: the update stays skipped, the step counts */
        }
        wf_progress_update(&bar, (uint64_t)done);
        res->step = done;
        if (stopping) {
            wf_progress_clear(&bar);
            if (wf_trace_flush() != WF_OK) {
                WF_WARN("trace: %s", wf_error_msg());
                wf_error_clear();
            }
            WF_TRY(finish_saves(t));
            if (stop_file) {
                res->stop_file = 1;
                WF_INFO("%s exists: stopped after step %lld of %lld (remove it and rerun to continue)", t->stop_path,
                        (long long)done, (long long)tc->steps);
            } else if (!sig && !stop_at) {
                res->requeue = res->memory = 1;
                WF_WARN("memory watchdog: %s; saved and stopped after step %lld of %lld; exiting with status %d "
                        "(rerun the same command to resume once memory is free, or raise the memory.* limits)",
                        mem_msg, (long long)done, (long long)tc->steps, WF_TRAIN_EXIT_REQUEUE);
            } else {
                res->requeue = 1;
                WF_INFO("%s: stopped after step %lld of %lld; exiting with status %d so that the job is requeued "
                        "(rerun the same command to resume)",
                        sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "ckpt.stop_at", (long long)done,
                        (long long)tc->steps, WF_TRAIN_EXIT_REQUEUE);
            }
            return WF_OK;
        }
    }
    wf_progress_done(&bar);
    if (wf_trace_flush() != WF_OK) {
        WF_WARN("trace: %s", wf_error_msg());
        wf_error_clear();
    }
    WF_TRY(finish_saves(t));
    double el = wf_time_now() - t_run;
    WF_INFO("trained %lld steps in %.1f s (%.0f tokens/s)", (long long)(tc->steps - start), el,
            (double)(tc->steps - start) * (double)tokens / el);
    if (!isnan(val_loss)) WF_INFO("final validation loss %.4f", val_loss);
    if (res->spikes)
        WF_INFO("loss spikes: %d (%d update%s skipped, %d rollback%s)", res->spikes, res->skipped,
                res->skipped == 1 ? "" : "s", res->rollbacks, res->rollbacks == 1 ? "" : "s");
    res->finished = 1;
    return write_final_model(t, tc->steps);
}

wf_status wf_train_comm_create(const wf_train_config *tc, wf_comm **out) {
    *out = NULL;
    wf_comm_options co = wf_comm_options_default();
    co.timeout_first_s = tc->dist_timeout_first_s;
    co.timeout_s = tc->dist_timeout_s;
    co.first_steps = tc->dist_first_steps;
    co.report_dir = tc->run_dir;
    if (tc->run_dir) WF_TRY(wf_mkdirs(tc->run_dir));
    return wf_comm_create(out, &co);
}

wf_status wf_train_execute(const wf_train_config *tc, wf_comm *comm, wf_train_result *result) {
    memset(result, 0, sizeof *result);
    if (tc->run_dir) {
        /* The kill switch is polled first, so that a queue of jobs for a
         * stopped run exits at once. */
        char stop[4096];
        snprintf(stop, sizeof stop, "%s/STOP", tc->run_dir);
        if (wf_path_exists(stop)) {
            WF_INFO("%s exists: not training (remove it to continue the run)", stop);
            result->stop_file = 1;
            return WF_OK;
        }
    }
    saved_signals old;
    install_signals(&old);
    trainer t;
    memset(&t, 0, sizeof t);
    int64_t start = 0;
    /* The caller made the communicator first (wf_train_comm_create),
     * before the loader's and the checkpoint writer's threads start. */
    t.comm = comm;
    t.rank = wf_comm_rank(comm);
    t.world = wf_comm_size(comm);
    wf_status s = WF_OK;
    int setup_failed = 0;
    if (s == WF_OK) s = trainer_setup(&t, tc);
    if (s == WF_OK && t.rank == 0) s = write_run_config(tc);
    if (s == WF_OK) s = setup_checkpoints(&t);
    if (t.world > 1) {
        /* Every rank gets here, failed or not: the ranks agree, so that a
         * config error (usually the same on all) ends every rank normally,
         * with its message, and no rank waits for one that left. Also
         * orders rank 0's tidying of the checkpoint folder before the
         * others read it. */
        uint32_t flags = s != WF_OK ? WF_AGREE_ERROR : 0u;
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", s != WF_OK ? wf_error_msg() : "");
        wf_status a = wf_comm_agree(t.comm, &flags, "setup");
        if (s != WF_OK) wf_error(s, "%s", msg);
        else if (a != WF_OK) s = a;
        else if (flags & WF_AGREE_ERROR)
            s = wf_error(WF_ERR_CONFIG, "another rank failed to set up the run (its log says why)");
        setup_failed = s != WF_OK && a == WF_OK;
    }
    if (s == WF_OK) s = resume_or_init(&t, &start);
    /* The replicas must start equal (same seed, or the same checkpoint);
     * from here identical averaged gradients keep them so. */
    if (s == WF_OK && t.world > 1)
        s = wf_comm_check_replicas(t.comm, wf_model_params(t.model), wf_model_num_params(t.model) * sizeof(float),
                                   "the model's parameters after initialisation");
    if (s == WF_OK) s = setup_obs(&t, start);
    if (s == WF_OK) s = train_loop(&t, start, result);
    if (s == WF_OK) {
        s = wf_metrics_close(t.metrics); /* reported: the last records must reach the disk */
        t.metrics = NULL;
    }
    if (s != WF_OK) {
        /* Let a save in flight finish (it is consistent) before exiting, and
         * drop a trace capture of the step that failed; keep this error's
         * message. */
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", wf_error_msg());
        if (t.writer && t.world == 1) wf_ckpt_writer_wait(t.writer, NULL); /* W > 1: collective; destroy waits for this rank's write */
        wf_trace_discard();
        wf_error(s, "%s", msg);
        /* The other ranks may be blocked in a collective this rank will
         * never join: the caller ends the whole job (main(), with
         * wf_comm_abort). */
        result->abort_job = t.world > 1 && !setup_failed;
    }
    trainer_free(&t); /* closes the metrics (writing what is buffered), stops the threads */
    if (t.tracing) {
        /* After the threads that record spans have stopped. */
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", wf_error_msg());
        if (wf_trace_shutdown() != WF_OK) WF_WARN("trace: %s", wf_error_msg());
        if (s != WF_OK) wf_error(s, "%s", msg);
    }
    restore_signals(&old);
    return s;
}
