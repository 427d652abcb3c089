/* Planning a training run once (train_impl.h): the config's checks (shared
 * with `weft plan`, src/train/plan.c: the keys, the strategy, the batch
 * shape), the model and its activations, the strategy's optimizer and
 * gradient reduction (strategy.c), the batch buffers and the loaders.
 * Nothing is allocated after this but what a checkpoint save stages. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/fileio.h"
#include "weft/backend.h"
#include "weft/log.h"
#include "weft/store.h"
#include "weft/shard.h"
#include "weft/thread.h"
#include "weft/tokenizer.h"

void wf__train_free(trainer *t) {
    if (t->data_dump) fclose(t->data_dump); /* a test hook's file: nothing to report */
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
    wf__train_mix_free(t);
    wf__train_tasks_free(t);
    if (t->units) wf__train_units_free(t); /* fsdp: its optimizers, t->opt among them */
    wf_adamw_destroy(t->opt);
    wf_muon_destroy(t->muon);
    wf__train_muon_free(t);
    wf_model_destroy(t->model);
    wf_arena_destroy(t->arena); /* its chunks are the backend's blocks: before the backend closes */
    free(t->host_batch);
    wf_backend_close(t->be);    /* a no-op for the cpu */
    free(t->tokenizer_path);
    wf_dirlock_release(t->lock); /* last: the job's files are closed by now */
}

void wf__train_split_batch(const wf_batch *b, int32_t *inputs, int32_t *targets) {
    size_t row = (size_t)b->seq_len + 1;
    for (int i = 0; i < b->batch; i++) {
        const int32_t *src = b->tokens + (size_t)i * row;
        memcpy(inputs + (size_t)i * b->seq_len, src, (size_t)b->seq_len * sizeof *src);
        memcpy(targets + (size_t)i * b->seq_len, src + 1, (size_t)b->seq_len * sizeof *src);
    }
}

/* Resolves the tokenizer: the config's, else the dataset's if it exists. */
static wf_status resolve_tokenizer(trainer *t, const char *dataset_tokenizer) {
    const char *path = t->tc->tokenizer ? t->tc->tokenizer : dataset_tokenizer;
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

wf_status wf__train_strategy_of(const wf_train_config *tc, int world, int log, const train_strategy **out) {
    *out = NULL;
    const char *name = tc->dist_shard ? tc->dist_shard : "ddp";
    if (tc->dist_zero1) {
        if (wf_opts_given(wf_train_spec(), tc, "dist.shard") && strcmp(name, "zero1") != 0)
            return wf_error(WF_ERR_CONFIG,
                            "dist.zero1 = true and dist.shard = %s contradict each other: dist.zero1 is the old "
                            "name of dist.shard = zero1; give one of them",
                            name);
        name = "zero1";
    }
    const train_strategy *st = wf__train_strategy(name);
    if (!st) return wf_error(WF_ERR_CONFIG, "dist.shard = '%s': use ddp, zero1, zero2 or fsdp", name);
    /* zero1 with one process is DDP's optimizer (nothing to shard); zero2
     * and fsdp run their unit engine with any number of ranks */
    if (st->one_rank && world == 1) {
        if (log)
            WF_INFO("%s with one process: nothing to shard, the optimizer is the usual one",
                    tc->dist_zero1 ? "dist.zero1 = true" : "dist.shard = zero1");
        st = wf__train_strategy(st->one_rank);
    }
    *out = st;
    return WF_OK;
}

wf_status wf__train_check_keys(const wf_train_config *tc, wf_spike_detector *spike) {
    /* The enum keys (optim.schedule, optim.schedule_unit, spike.action,
     * guard.nonfinite, train.recompute, dist.shard, model.preset) were
     * checked against their values by the parser (WF_CHOICES in
     * include/weft/train.h); here they are only mapped. A config filled
     * in by code rather than parsed is checked here the same way. */
    WF_TRY(wf_opts_check_choices(wf_train_spec(), tc));
    if (tc->min_lr > tc->lr)
        return wf_error(WF_ERR_CONFIG, "optim.min_lr = %g is above optim.lr = %g", tc->min_lr, tc->lr);
    if (strcmp(tc->schedule_unit, "tokens") != 0 && tc->warmup_tokens)
        return wf_error(WF_ERR_CONFIG,
                        "optim.warmup_tokens = %lld is set but optim.schedule_unit = steps, whose warmup is "
                        "optim.warmup_steps: set optim.schedule_unit = tokens, or leave optim.warmup_tokens out",
                        (long long)tc->warmup_tokens);
    wf_spike_config sc = {.window = (int)tc->spike_window,
                          .z = tc->spike_z,
                          .warmup = (int)tc->spike_warmup,
                          .use_grad_norm = tc->spike_grad_norm};
    wf_spike_detector tmp = {0};
    wf_status s = wf_spike_init(spike ? spike : &tmp, &sc);
    wf_spike_deinit(&tmp);
    return s;
}

wf_status wf__train_batch_shape(const wf_train_config *tc, int world, int max_seq_len, train_batch *out) {
    memset(out, 0, sizeof *out);
    out->B = (int)tc->batch_size;
    if (out->B % world != 0)
        return wf_error(WF_ERR_CONFIG,
                        "data.batch_size = %d sequences is not divisible by the %d ranks: every rank gets an "
                        "equal part of each micro-batch; use a multiple of %d (or another rank count)",
                        out->B, world, world);
    out->Bl = out->B / world;
    out->T = tc->seq_len ? (int)tc->seq_len : max_seq_len;
    int64_t micro = (int64_t)out->B * out->T;
    int64_t global = tc->global_batch_tokens ? tc->global_batch_tokens : micro;
    if (global % micro != 0)
        return wf_error(WF_ERR_CONFIG,
                        "data.global_batch_tokens = %lld is not a multiple of batch_size * seq_len = %d * %d = %lld: "
                        "each step accumulates whole micro-batches",
                        (long long)global, out->B, out->T, (long long)micro);
    out->accum = (int)(global / micro);
    wf_batch_ramp_config rc = {.start = tc->batch_ramp_start,
                               .inc = tc->batch_ramp_step,
                               .tokens = tc->batch_ramp_tokens,
                               .final = (int64_t)out->accum * out->B,
                               .micro = out->B,
                               .world = world,
                               .seq_len = out->T};
    return wf_batch_ramp_init(&out->ramp, &rc);
}

/* WEFT_TEST_DATA_DUMP=DIR, a test hook: every rank appends to
 * DIR/rank-NNNNN.txt one line per micro-batch it trains on, "STEP MICRO
 * EPOCH SAMPLE" (1-based step, 0-based micro-batch of the step, the loader's
 * cursor) and then this rank's token ids of it, row after row, so that a
 * test can compare the tokens runs at other rank counts read (docs/train.md,
 * "Test hooks"). Opened here, so that the step allocates nothing. */
static wf_status open_data_dump(trainer *t) {
    const char *dir = getenv("WEFT_TEST_DATA_DUMP");
    if (!dir || !*dir) return WF_OK;
    WF_TRY(wf_mkdirs(dir));
    char path[WF_PATH_MAX];
    WF_TRY(wf_path_joinf(path, sizeof path, dir, "rank-%05d.txt", t->job_rank)); /* the job's: tp ranks too */
    t->data_dump = fopen(path, "a");
    if (!t->data_dump) return wf_error(WF_ERR_IO, "WEFT_TEST_DATA_DUMP: cannot open %s", path);
    WF_WARN("WEFT_TEST_DATA_DUMP: writing the token ids of every micro-batch to %s", path);
    return WF_OK;
}

wf_status wf__train_schedule(trainer *t, int64_t start) {
    const wf_train_config *tc = t->tc;
    t->sched = (wf_lr_schedule){.kind = (wf_lr_kind)wf_lr_parse_kind(tc->schedule),
                                .lr = tc->lr,
                                .min_lr = tc->min_lr,
                                .warmup = (uint64_t)tc->warmup_steps,
                                .total = (uint64_t)tc->steps,
                                .decay_frac = tc->decay_frac};
    if (!t->sched_tokens) return WF_OK;
    /* The run's tokens: those trained before `start`, then the ramp's sizes
     * on to train.steps (from the start of the run, the same sum). */
    uint64_t left = start < tc->steps ? (uint64_t)(tc->steps - start) : 0;
    uint64_t rest = wf_batch_ramp_tokens_in(&t->ramp, t->tokens_done, left);
    if (rest > INT64_MAX - t->tokens_done)
        return wf_error(WF_ERR_CONFIG, "train.steps = %lld steps of up to %lld tokens make more than 2^63 tokens: "
                                       "optim.schedule_unit = tokens cannot count them",
                        (long long)tc->steps, (long long)t->ramp.final * t->T);
    t->sched.total = t->tokens_done + rest;
    t->sched.warmup = tc->warmup_tokens ? (uint64_t)tc->warmup_tokens
                                        : wf_batch_ramp_tokens_in(&t->ramp, 0, (uint64_t)tc->warmup_steps);
    return WF_OK;
}

wf_status wf__train_val_loader(trainer *t, const wf_loader_opts *lo, const char *dir, uint64_t val_tokens,
                               wf_loader **out) {
    wf_loader_opts vo = *lo;
    vo.dir = dir;
    vo.source_dirs = NULL;
    vo.n_sources = 0;
    vo.weights = NULL;
    vo.split = "val";
    vo.shuffle = 0;
    vo.prefetch = 0;
    vo.global_batch = 1;
    while (vo.global_batch * 2 <= t->B && (uint64_t)(vo.global_batch * 2) * (uint64_t)t->T < val_tokens)
        vo.global_batch *= 2;
    /* Split over the ranks like training batches: a multiple of the world
     * size (B is one, so this never passes B). */
    if (vo.global_batch % t->world) vo.global_batch = t->world;
    return wf_loader_create(out, &vo);
}

/* Adds what the arena's in_use grew by since the last part mark to part
 * `cat` (the planner's categories, finer than the run.json blocks). */
void wf__train_arena_part(trainer *t, int cat) {
    size_t now = wf_arena_get_stats(t->arena).in_use;
    t->part[cat] += now - t->part_at;
    t->part_at = now;
}

wf_status wf__train_allocate(trainer *t, const wf_adamw_config *ac, int recompute) {
    /* What the strategy keeps whole is the model's; the rest is its slices. */
    int has_p = t->strat->params == WF__KEEP_WHOLE, has_g = t->strat->full_grad;
    WF_TRY(wf_model_create_tp(&t->model, &t->mc, t->arena,
                              (has_g ? 0 : WF_MODEL_NO_GRADS) | (has_p ? 0 : WF_MODEL_NO_PARAMS),
                              t->tp.size > 1 ? &t->tp : NULL)); /* plan.c leaves tp zero: none */
    /* The arena's chunks are the backend's blocks (wf__train_setup), so the
     * model's memory is already that backend's: every op goes through it
     * from here (attention's scratch is sized by it in wf_model_plan). */
    if (t->be) wf_model_set_backend(t->model, t->be);
    wf__train_arena_mark(t, "model");
    /* two blocks of one size, the parameters first */
    size_t model = wf_arena_get_stats(t->arena).in_use - t->part_at;
    t->part[WF__PART_PARAMS] += has_p ? model / (size_t)(has_p + has_g) : 0;
    t->part[WF__PART_GRADS] += model - (has_p ? model / (size_t)(has_p + has_g) : 0);
    t->part_at += model;
    WF_TRY(wf_model_set_recompute(t->model, (wf_model_recompute)recompute));
    WF_TRY(wf_model_plan(t->model, t->Bl, t->T));
    wf__train_arena_mark(t, "activations");
    wf__train_arena_part(t, WF__PART_ACTIVATIONS);
    WF_TRY(t->strat->setup(t, ac));
    size_t local = (size_t)t->Bl * (size_t)t->T;
    if (t->be && t->be != wf_backend_cpu()) {
        /* The batch is written and checked on the host and uploaded by
         * wf_model_forward: host memory, not the device arena's. */
        t->host_batch = calloc(2 * local, sizeof(int32_t));
        if (!t->host_batch) return wf_error(WF_ERR_NOMEM, "out of memory for the batch (2 x %zu token ids)", local);
        t->inputs = t->host_batch, t->targets = t->host_batch + local;
    } else {
        t->inputs = wf_arena_alloc(t->arena, local * sizeof(int32_t), 64);
        t->targets = wf_arena_alloc(t->arena, local * sizeof(int32_t), 64);
    }
    if (!t->inputs || !t->targets) return WF_ERR_NOMEM;
    wf__train_arena_mark(t, "batch");
    wf__train_arena_part(t, WF__PART_BATCH);
    return WF_OK;
}

const char *const wf_train_dtype_names[] = {"fp32", "bf16", NULL};

/* train.device, train.dtype and train.tf32 (docs/gpu.md, "Running on GPUs:
 * options, NCCL"): the compute backend opened by name through the seam,
 * kept in *out. The cpu trains, and cudaemu (the CUDA kernels under the
 * emulator: docs/gpu.md, "The engine on cudaemu"); cuda opens the same
 * engine but is refused until a GPU run has proven it. fp32 only. */
static wf_status check_device(const wf_train_config *tc, wf_backend **out) {
    wf_backend *be = NULL;
    char note[768];
    *out = NULL;
    if (wf_backend_open_device(&be, tc->device, note, sizeof note) != WF_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", wf_error_msg());
        return wf_error(WF_ERR_UNSUPPORTED, "train.device = %s: %s", tc->device, why);
    }
    if (note[0]) WF_INFO("train.%s", note);
    const char *name = wf_backend_name(be);
    if (be != wf_backend_cpu() && strcmp(name, "cudaemu") != 0) {
        wf_backend_close(be);
        return wf_error(WF_ERR_UNSUPPORTED, "train.device = %s: the %s backend opened, but the trainer cannot place "
                                            "the model on it yet",
                        tc->device, name);
    }
    if (strcmp(tc->dtype, "bf16") == 0 && be == wf_backend_cpu())
        return wf_error(WF_ERR_CONFIG, "train.dtype = bf16: the cpu backend computes in fp32 only; use train.dtype = "
                                       "fp32 on the cpu (bf16 is for train.device = cuda)");
    if (strcmp(tc->dtype, "bf16") == 0) {
        wf_backend_close(be);
        return wf_error(WF_ERR_CONFIG, "train.dtype = bf16: the trainer computes in fp32 only on the %s backend (no "
                                       "bf16 weight copies yet); use train.dtype = fp32",
                        name);
    }
    if (tc->tf32) WF_INFO("train.tf32 = true has no effect on the %s backend, whose fp32 is exact fp32", name);
    if (be != wf_backend_cpu()) WF_WARN("train.device = %s: the CUDA kernels under the emulator, a test instrument "
                                        "(slow; docs/gpu.md)", name);
    *out = be;
    return WF_OK;
}

/* What the engine on a device backend covers so far (docs/gpu.md, "The
 * engine on cudaemu"): DDP with AdamW. */
static wf_status check_device_engine(const trainer *t) {
    const wf_train_config *tc = t->tc;
    if (t->be == wf_backend_cpu()) return WF_OK;
    const char *name = wf_backend_name(t->be);
    if (strcmp(t->strat->name, "ddp") != 0)
        return wf_error(WF_ERR_UNSUPPORTED, "train.device = %s with dist.shard = %s: on a device backend the trainer "
                                            "runs dist.shard = ddp only so far (docs/gpu.md)",
                        tc->device, t->strat->name);
    if (tc->optim_name && strcmp(tc->optim_name, "adamw") != 0)
        return wf_error(WF_ERR_UNSUPPORTED, "train.device = %s with optim.name = %s: on the %s backend the trainer "
                                            "runs AdamW only so far (docs/gpu.md)",
                        tc->device, tc->optim_name, name);
    if (tc->dist_tp > 1)
        return wf_error(WF_ERR_UNSUPPORTED, "train.device = %s with dist.tp = %lld: on the %s backend the trainer "
                                            "runs without tensor parallelism so far (docs/gpu.md)",
                        tc->device, (long long)tc->dist_tp, name);
    return WF_OK;
}

wf_status wf__train_setup(trainer *t, const wf_train_config *tc) {
    t->tc = tc;
    wf_store_options so = {tc->store_endpoint, tc->store_region, tc->store_retries ? (int)tc->store_retries : -1,
                           tc->store_timeout_s, (int)tc->store_part_mb, (int)tc->store_threads, tc->store_cache_dir,
                           tc->store_read_ahead};
    WF_TRY(wf_store_configure(&so));
    WF_TRY(wf__train_mix_config(t));
    if ((!tc->data_dir || !tc->data_dir[0]) && !t->mix.n)
        return wf_error(WF_ERR_CONFIG, "data.dir is not set: give the dataset directory (--data DIR), or a mixture "
                                       "of datasets in data.sources");
    WF_TRY(wf__train_check_keys(tc, &t->spike));
    WF_TRY(check_device(tc, &t->be));
    t->sched_tokens = strcmp(tc->schedule_unit, "tokens") == 0;
    t->spike_action = (wf_spike_action)wf_spike_action_parse(tc->spike_action);
    t->nonfinite_stop = strcmp(tc->guard_nonfinite, "stop") == 0;
    int recompute = wf_model_recompute_parse(tc->recompute);
    t->mem_limits = (wf_mem_limits){.max_used_frac = tc->memory_max_used_frac,
                                    .max_rss_frac = tc->memory_max_rss_frac,
                                    .max_rss_bytes = (int64_t)(tc->memory_max_rss_gib * 1073741824.0)};
    uint32_t vocab = 0;
    uint64_t val_tokens = 0;
    char *data_tok = NULL;
    if (t->mix.n) {
        WF_TRY(wf__train_mix_check_data(t, &vocab, &data_tok));
    } else {
        wf_dataset_info info;
        WF_TRY(wf_dataset_info_load(&info, tc->data_dir));
        vocab = info.vocab_size;
        for (size_t i = 0; i < info.n_splits; i++)
            if (strcmp(info.splits[i].name, "val") == 0) val_tokens = info.splits[i].n_tokens;
        data_tok = info.tokenizer;
        info.tokenizer = NULL;
        wf_dataset_info_free(&info);
    }
    wf_status s = wf_train_model_config(tc, vocab, &t->mc, t->model_source, sizeof t->model_source);
    if (s == WF_OK && tc->ckpt_init_from && *tc->ckpt_init_from)
        WF_INFO("model: the architecture of %s (ckpt.init_from); [model] sizes given here are checked against it",
                t->model_source);
    if (s == WF_OK) s = resolve_tokenizer(t, data_tok);
    free(data_tok);
    WF_TRY(s);

    train_batch tb;
    WF_TRY(wf__train_batch_shape(tc, t->world, t->mc.max_seq_len, &tb));
    t->B = tb.B, t->Bl = tb.Bl, t->T = tb.T, t->accum = tb.accum, t->ramp = tb.ramp;
    WF_TRY(wf__train_tp_check(t)); /* dist.tp: the model splits, before anything is allocated */

    int threads = tc->threads ? (int)tc->threads : wf_default_threads();
    wf_kern_set_threads(threads);
    char blas_msg[256];
    if (wf_kern_blas_check(blas_msg, sizeof blas_msg)) WF_WARN("%s", blas_msg);

    WF_TRY(wf__train_strategy_of(tc, t->world, 1, &t->strat));
    WF_TRY(check_device_engine(t));
    if (t->be != wf_backend_cpu()) {
        /* every block of the run's memory is the backend's */
        wf_arena_mem mem = wf_backend_arena_mem(t->be);
        WF_TRY(wf_arena_create_mem(&t->arena, 0, &mem));
    } else {
        WF_TRY(wf_arena_create(&t->arena, 0));
    }
    wf_adamw_config ac = {.beta1 = tc->beta1,
                          .beta2 = tc->beta2,
                          .eps = tc->eps,
                          .weight_decay = tc->weight_decay,
                          .decay_embeddings = tc->decay_embeddings,
                          .grad_clip = tc->grad_clip};
    WF_TRY(wf__train_muon_config(t, &ac)); /* optim.name = muon: AdamW leaves the block matrices to Muon */
    WF_TRY(wf__train_allocate(t, &ac, recompute));
    WF_TRY(wf__train_tasks_setup(t)); /* train.eval_tasks: this rank's share, read and tokenized */
    WF_TRY(wf__train_flip_setup(t));
    if (t->units) WF_TRY(wf__train_units_init(t, (uint64_t)tc->seed));
    else wf_model_init(t->model, (uint64_t)tc->seed);

    /* Every rank reads the same global order; rank r gets its part of each
     * micro-batch, so any rank count sees the same global batches. */
    wf_loader_opts lo = {.dir = tc->data_dir,
                         .split = "train",
                         .seed = (uint64_t)tc->data_seed,
                         .seq_len = t->T,
                         .global_batch = t->B,
                         .rank = t->rank,
                         .world_size = t->world,
                         .shuffle = 1,
                         .prefetch = WF_LOADER_DEFAULT_PREFETCH,
                         .verify = 1};
    if (t->mix.n) {
        WF_TRY(wf__train_mix_loaders(t, &lo, tc->eval_every > 0 ? &lo : NULL));
        WF_TRY(open_data_dump(t));
        return WF_OK;
    }
    WF_TRY(wf_loader_create(&t->train, &lo));
    WF_TRY(open_data_dump(t));
    if (tc->eval_every > 0) {
        if (val_tokens > (uint64_t)t->T) {
            s = wf__train_val_loader(t, &lo, tc->data_dir, val_tokens, &t->val);
            if (s != WF_OK) return wf_error_wrap(s, "validation split: ");
        } else {
            WF_WARN("the dataset has no validation split longer than one sequence (%" PRIu64
                    " tokens); no validation loss will be computed",
                    val_tokens);
        }
    }
    return WF_OK;
}
