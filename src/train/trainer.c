/* The training loop of `weft train`: plan everything once (model,
 * optimizer state, batch buffers, loaders), then for each step accumulate
 * gradients over the micro-batches of one global batch, clip, update with
 * the scheduled learning rate, and report. Nothing is allocated inside the
 * loop. The same config and seeds give bit-identical losses. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft/arena.h"
#include "weft/fileio.h"
#include "weft/kernels.h"
#include "weft/loader.h"
#include "weft/log.h"
#include "weft/optim.h"
#include "weft/progress.h"
#include "weft/safetensors.h"
#include "weft/shard.h"
#include "weft/thread.h"
#include "weft/tokenizer.h"
#include "weft/train.h"

typedef struct {
    const wf_train_config *tc;
    wf_model_config mc;
    int B, T, accum;
    char *tokenizer_path;
    wf_arena *arena;
    wf_model *model;
    wf_adamw *opt;
    wf_loader *train, *val;
    int32_t *inputs, *targets; /* (B, T) each */
} trainer;

static void trainer_free(trainer *t) {
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

static wf_status trainer_setup(trainer *t, const wf_train_config *tc) {
    memset(t, 0, sizeof *t);
    t->tc = tc;
    if (!tc->data_dir) return wf_error(WF_ERR_CONFIG, "data.dir is not set: give the dataset directory (--data DIR)");
    if (wf_lr_parse_kind(tc->schedule) < 0)
        return wf_error(WF_ERR_CONFIG, "optim.schedule = '%s': use cosine, wsd or constant", tc->schedule);
    if (tc->min_lr > tc->lr)
        return wf_error(WF_ERR_CONFIG, "optim.min_lr = %g is above optim.lr = %g", tc->min_lr, tc->lr);
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
    WF_TRY(wf_model_plan(t->model, t->B, t->T));
    wf_model_init(t->model, (uint64_t)tc->seed);
    wf_adamw_config ac = {tc->beta1, tc->beta2, tc->eps, tc->weight_decay, tc->decay_embeddings, tc->grad_clip};
    WF_TRY(wf_adamw_create(&t->opt, &ac, t->model, t->arena));
    t->inputs = wf_arena_alloc(t->arena, (size_t)micro * sizeof(int32_t), 64);
    t->targets = wf_arena_alloc(t->arena, (size_t)micro * sizeof(int32_t), 64);
    if (!t->inputs || !t->targets) return WF_ERR_NOMEM;

    wf_loader_opts lo = {tc->data_dir, "train", (uint64_t)tc->data_seed, t->T, t->B, 0, 1, 1,
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
    WF_TRY(wf_loader_set_state(t->val, (wf_loader_state){0, 0}));
    double sum = 0;
    int n = 0;
    uint64_t per_epoch = wf_loader_batches_per_epoch(t->val);
    for (int64_t i = 0; i < t->tc->eval_batches && (uint64_t)i < per_epoch; i++) {
        const wf_batch *b;
        WF_TRY(wf_loader_next(t->val, &b));
        split_batch(b, t->inputs, t->targets);
        float l;
        WF_TRY(wf_model_forward(t->model, t->inputs, t->targets, b->batch, b->seq_len, &l));
        sum += l;
        n++;
    }
    *loss = n ? sum / n : NAN;
    return WF_OK;
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

static wf_status train_loop(trainer *t) {
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
    WF_INFO("memory: parameters %.1f MB, gradients %.1f MB, optimizer %.1f MB, activations %.1f MB",
            mem.param_bytes / 1e6, mem.grad_bytes / 1e6, 2.0 * mem.param_bytes / 1e6, mem.activation_bytes / 1e6);

    wf_progress bar;
    wf_progress_init(&bar, "train", "steps", (uint64_t)tc->steps);
    double t_run = wf_time_now();
    double val_loss = NAN;
    for (int64_t step = 0; step < tc->steps; step++) {
        double t0 = wf_time_now(), wait = 0;
        wf_model_zero_grad(t->model);
        double loss = 0;
        for (int k = 0; k < t->accum; k++) {
            const wf_batch *b;
            WF_TRY(wf_loader_next(t->train, &b));
            wait += b->wait_seconds;
            split_batch(b, t->inputs, t->targets);
            float l;
            WF_TRY(wf_model_forward(t->model, t->inputs, t->targets, t->B, t->T, &l));
            WF_TRY(wf_model_backward(t->model, 1.0f / (float)t->accum));
            loss += (double)l / t->accum;
        }
        if (!isfinite(loss))
            return wf_error(WF_ERR_RANGE, "step %lld: the loss is %g; lower optim.lr or check the data",
                            (long long)step + 1, loss);
        double lr = wf_lr_at(&sched, (uint64_t)step), gnorm = 0;
        wf_status s = wf_adamw_step(t->opt, lr, &gnorm);
        if (s != WF_OK) return wf_error_wrap(s, "step %lld: ", (long long)step + 1);
        double dt = wf_time_now() - t0;
        int last = step + 1 == tc->steps;
        int eval = t->val && tc->eval_every > 0 && ((step + 1) % tc->eval_every == 0 || last);
        if (eval) WF_TRY(evaluate(t, &val_loss));
        if ((step + 1) % tc->log_every == 0 || last || eval) {
            char rate[32], vbuf[48] = "";
            fmt_rate(rate, sizeof rate, (double)t->accum * t->B * t->T / dt);
            if (eval) snprintf(vbuf, sizeof vbuf, " | val loss %.4f", val_loss);
            wf_progress_clear(&bar);
            printf("step %*lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %s tok/s | %.0f ms (data %.1f ms)%s\n",
                   (int)snprintf(NULL, 0, "%lld", (long long)tc->steps), (long long)step + 1, (long long)tc->steps,
                   loss, lr, gnorm, rate, dt * 1e3, wait * 1e3, vbuf);
            fflush(stdout);
        }
        wf_progress_update(&bar, (uint64_t)step + 1);
    }
    wf_progress_done(&bar);
    double el = wf_time_now() - t_run;
    WF_INFO("trained %lld steps in %.1f s (%.0f tokens/s)", (long long)tc->steps, el,
            (double)tc->steps * t->accum * t->B * t->T / el);
    if (!isnan(val_loss)) WF_INFO("final validation loss %.4f", val_loss);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", tc->run_dir);
    char steps_s[32];
    snprintf(steps_s, sizeof steps_s, "%lld", (long long)tc->steps);
    wf_kv meta[2] = {{"weft.step", steps_s}, {"weft.tokenizer", t->tokenizer_path ? t->tokenizer_path : ""}};
    WF_TRY(wf_safetensors_save(t->model, path, meta, t->tokenizer_path ? 2 : 1));
    WF_INFO("wrote %s", path);
    return WF_OK;
}

wf_status wf_train_run(const wf_train_config *tc) {
    trainer t;
    wf_status s = trainer_setup(&t, tc);
    if (s == WF_OK) s = wf_mkdirs(tc->run_dir);
    if (s == WF_OK) s = write_run_config(tc);
    if (s == WF_OK) s = train_loop(&t);
    trainer_free(&t);
    return s;
}
