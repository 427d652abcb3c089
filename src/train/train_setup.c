/* Planning a training run once (train_impl.h): the model and its
 * activations, the optimizer (or ZeRO-1's shard of it), DDP's or ZeRO-1's
 * gradient buckets, the batch buffers and the loaders. Nothing is
 * allocated after this but what a checkpoint save stages. */
#include <inttypes.h>
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
    wf_model_destroy(t->model);
    wf_arena_destroy(t->arena);
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

/* Records what the arena's in_use grew by since the last mark, as block
 * `name` of run.json's "arena" (`weft plan` predicts these). */
static void arena_mark(trainer *t, const char *name) {
    wf_run_arena *a = &t->arena_use;
    wf_arena_stats st = wf_arena_get_stats(t->arena);
    if (a->n < WF_RUN_ARENA_MAX) {
        a->names[a->n] = name;
        a->bytes[a->n++] = (int64_t)st.in_use - a->in_use;
    }
    a->in_use = (int64_t)st.in_use, a->peak = (int64_t)st.peak, a->reserved = (int64_t)st.reserved;
}

/* The gradient buckets over the model's tensors (in buffer order): DDP
 * all-reduces them; ZeRO-1 (make_zero1 first) reduce-scatters each into
 * this rank's gradient shard. */
static wf_status make_reducer(trainer *t) {
    int nt = wf_model_num_tensors(t->model);
    wf_comm_span *spans = calloc((size_t)nt, sizeof *spans);
    if (!spans) return wf_error(WF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nt; i++) {
        const wf_tensor_info *ti = wf_model_tensor(t->model, i);
        spans[i] = (wf_comm_span){.offset = ti->offset, .numel = ti->numel};
    }
    size_t bucket = (size_t)(t->tc->dist_bucket_mb * 1e6);
    wf_status s = wf_reducer_create(&t->reducer, t->comm, wf_model_grads(t->model), spans, nt, bucket ? bucket : 1);
    free(spans);
    /* The backward scales by 1 / world (wf__train_step): the buckets sum. */
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

/* dist.shard, with dist.zero1 as an alias of zero1 (a conflicting pair is
 * an error). ZeRO-1 with one process is DDP's optimizer (nothing to shard);
 * zero2 and fsdp run their unit engine with any number of ranks. */
static wf_status parse_shard(trainer *t) {
    const wf_train_config *tc = t->tc;
    const char *name = tc->dist_shard ? tc->dist_shard : "ddp";
    int shard = -1;
    for (int k = WF__SHARD_DDP; k <= WF__SHARD_FSDP; k++)
        if (strcmp(name, wf__train_shard_name(k)) == 0) shard = k;
    if (tc->dist_zero1) {
        if (wf_opts_given(wf_train_spec(), tc, "dist.shard") && shard != WF__SHARD_ZERO1)
            return wf_error(WF_ERR_CONFIG,
                            "dist.zero1 = true and dist.shard = %s contradict each other: dist.zero1 is the old "
                            "name of dist.shard = zero1; give one of them",
                            name);
        shard = WF__SHARD_ZERO1;
    }
    if (shard == WF__SHARD_ZERO1 && t->world == 1) {
        WF_INFO("%s with one process: nothing to shard, the optimizer is the usual one",
                tc->dist_zero1 ? "dist.zero1 = true" : "dist.shard = zero1");
        shard = WF__SHARD_DDP;
    }
    t->shard = shard;
    return WF_OK;
}

/* ZeRO-1: the shards (16-float aligned), this rank's optimizer of its
 * shard and the buffer the reduce-scatter writes its gradient shard into. */
static wf_status make_zero1(trainer *t, const wf_adamw_config *ac) {
    size_t np = wf_model_num_params(t->model);
    WF_TRY(wf_zero1_plan_init(&t->zplan, np, t->world, 16));
    size_t lo = t->zplan.offsets[t->rank], count = t->zplan.counts[t->rank];
    WF_TRY(wf_adamw_create_shard(&t->opt, ac, t->model, lo, lo + count, t->arena));
    arena_mark(t, "optimizer");
    t->gshard = wf_arena_alloc(t->arena, (count ? count : 1) * sizeof(float), 64);
    if (!t->gshard) return wf_error(WF_ERR_NOMEM, "ZeRO-1: out of memory for the gradient shard (%zu floats)", count);
    arena_mark(t, "grad_shard");
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
    WF_TRY(wf_path_joinf(path, sizeof path, dir, "rank-%05d.txt", t->rank));
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
    /* The enum keys (optim.schedule, optim.schedule_unit, spike.action,
     * guard.nonfinite, train.recompute, dist.shard, model.preset) were
     * checked against their values by the parser (WF_CHOICES in
     * include/weft/train.h); here they are only mapped. A config filled
     * in by code rather than parsed is checked here the same way. */
    WF_TRY(wf_opts_check_choices(wf_train_spec(), tc));
    if (tc->min_lr > tc->lr)
        return wf_error(WF_ERR_CONFIG, "optim.min_lr = %g is above optim.lr = %g", tc->min_lr, tc->lr);
    t->sched_tokens = strcmp(tc->schedule_unit, "tokens") == 0;
    if (!t->sched_tokens && tc->warmup_tokens)
        return wf_error(WF_ERR_CONFIG,
                        "optim.warmup_tokens = %lld is set but optim.schedule_unit = steps, whose warmup is "
                        "optim.warmup_steps: set optim.schedule_unit = tokens, or leave optim.warmup_tokens out",
                        (long long)tc->warmup_tokens);
    t->spike_action = (wf_spike_action)wf_spike_action_parse(tc->spike_action);
    t->nonfinite_stop = strcmp(tc->guard_nonfinite, "stop") == 0;
    int recompute = wf_model_recompute_parse(tc->recompute);
    wf_spike_config sc = {.window = (int)tc->spike_window,
                          .z = tc->spike_z,
                          .warmup = (int)tc->spike_warmup,
                          .use_grad_norm = tc->spike_grad_norm};
    WF_TRY(wf_spike_init(&t->spike, &sc));
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
    wf_batch_ramp_config rc = {.start = tc->batch_ramp_start,
                               .inc = tc->batch_ramp_step,
                               .tokens = tc->batch_ramp_tokens,
                               .final = (int64_t)t->accum * t->B,
                               .micro = t->B,
                               .world = t->world,
                               .seq_len = t->T};
    WF_TRY(wf_batch_ramp_init(&t->ramp, &rc));

    int threads = tc->threads ? (int)tc->threads : wf_default_threads();
    wf_kern_set_threads(threads);
    char blas_msg[256];
    if (wf_kern_blas_check(blas_msg, sizeof blas_msg)) WF_WARN("%s", blas_msg);

    WF_TRY(parse_shard(t));
    WF_TRY(wf_arena_create(&t->arena, 0));
    /* ZeRO-2 keeps no full gradient, FSDP neither the parameters. */
    int flags = t->shard == WF__SHARD_ZERO2 ? WF_MODEL_NO_GRADS
              : t->shard == WF__SHARD_FSDP ? WF_MODEL_NO_GRADS | WF_MODEL_NO_PARAMS : 0;
    WF_TRY(wf_model_create_ex(&t->model, &t->mc, t->arena, flags));
    arena_mark(t, "model");
    WF_TRY(wf_model_set_recompute(t->model, (wf_model_recompute)recompute));
    WF_TRY(wf_model_plan(t->model, t->Bl, t->T));
    arena_mark(t, "activations");
    WF_TRY(wf__train_tasks_setup(t)); /* train.eval_tasks: this rank's share, read and tokenized */
    WF_TRY(wf__train_flip_setup(t));
    wf_adamw_config ac = {.beta1 = tc->beta1,
                          .beta2 = tc->beta2,
                          .eps = tc->eps,
                          .weight_decay = tc->weight_decay,
                          .decay_embeddings = tc->decay_embeddings,
                          .grad_clip = tc->grad_clip};
    t->zero1 = t->shard == WF__SHARD_ZERO1 || t->shard == WF__SHARD_ZERO2;
    if (t->shard == WF__SHARD_ZERO2) {
        WF_TRY(make_zero1(t, &ac));
        WF_TRY(wf__train_units_setup(t, &ac));
        arena_mark(t, "units");
    } else if (t->shard == WF__SHARD_FSDP) {
        WF_TRY(wf__train_units_setup(t, &ac));
        arena_mark(t, "units");
    } else if (t->zero1) {
        WF_TRY(make_zero1(t, &ac));
        WF_TRY(make_reducer(t));
    } else {
        WF_TRY(wf_adamw_create(&t->opt, &ac, t->model, t->arena));
        arena_mark(t, "optimizer");
        if (t->world > 1) WF_TRY(make_reducer(t));
    }
    if (t->units) WF_TRY(wf__train_units_init(t, (uint64_t)tc->seed));
    else wf_model_init(t->model, (uint64_t)tc->seed);
    size_t local = (size_t)t->Bl * (size_t)t->T;
    t->inputs = wf_arena_alloc(t->arena, local * sizeof(int32_t), 64);
    t->targets = wf_arena_alloc(t->arena, local * sizeof(int32_t), 64);
    if (!t->inputs || !t->targets) return WF_ERR_NOMEM;
    arena_mark(t, "batch");

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
