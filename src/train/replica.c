/* The replicas' check (train_impl.h; docs/robustness.md): with several
 * ranks, every guard.replica_every steps each rank hashes, tensor by
 * tensor, its copy of the state every rank should hold bit for bit (the
 * parameters; AdamW's moments too under DDP, where they are replicated;
 * ZeRO-1 shards them), the hashes are gathered, and each tensor's
 * majority is found. A rank that holds other bits (silent data corruption:
 * a flipped bit in memory, a faulty core) stops the run: the message names
 * the ranks and the tensors, the majority's state is copied to every rank
 * and saved, and the run ends with an error on every rank. With no
 * majority (two ranks that differ) nothing is saved: the last good
 * checkpoint is the one to resume from. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"
#include "weft/backend.h"
#include "weft/fileio.h"
#include "weft/log.h"

/* WEFT_TEST_FLIP_BIT=RANK:STEP:TENSOR:INDEX:BIT flips one bit of element
 * INDEX of parameter TENSOR on rank RANK after step STEP: the test hook
 * behind the flip-a-bit tests (as a cosmic ray or a bad DIMM would). Read
 * once here; every rank checks it, so that a wrong value fails them all. */
wf_status wf__train_flip_setup(trainer *t) {
    t->flip.step = -1;
    const char *env = getenv("WEFT_TEST_FLIP_BIT");
    if (!env) return WF_OK;
    int rank, bit, end = 0;
    long long step;
    size_t index;
    char name[256];
    if (sscanf(env, "%d:%lld:%255[^:]:%zu:%d%n", &rank, &step, name, &index, &bit, &end) != 5 || env[end] ||
        rank < 0 || step < 0 || bit < 0 || bit > 31)
        return wf_error(WF_ERR_CONFIG,
                        "WEFT_TEST_FLIP_BIT=%s: expected RANK:STEP:TENSOR:INDEX:BIT, BIT 0 to 31 (a test hook)", env);
    const wf_tensor_info *ti = wf_model_find_tensor(t->model, name);
    if (!ti) return wf_error(WF_ERR_CONFIG, "WEFT_TEST_FLIP_BIT=%s: the model has no tensor %s", env, name);
    if (index >= ti->numel)
        return wf_error(WF_ERR_CONFIG, "WEFT_TEST_FLIP_BIT=%s: %s has %zu elements", env, name, (size_t)ti->numel);
    if (rank != t->rank) return WF_OK;
    if (t->strat->params != WF__KEEP_WHOLE)
        return wf_error(WF_ERR_CONFIG,
                        "WEFT_TEST_FLIP_BIT=%s: dist.shard = %s keeps no whole parameter buffer to flip a bit in", env,
                        t->strat->name);
    t->flip.step = step;
    t->flip.elem = ti->offset + index;
    t->flip.bit = bit;
    snprintf(t->flip.what, sizeof t->flip.what, "%s[%zu]", name, index);
    return WF_OK;
}

/* Through wf_model_read / wf_model_write: the parameters are the model's
 * backend's memory. */
static wf_status maybe_flip(trainer *t, int64_t done) {
    if (done != t->flip.step) return WF_OK;
    float x;
    uint32_t w;
    WF_TRY(wf_model_read(t->model, WF_MODEL_PARAMS, -1, t->flip.elem, 1, &x));
    memcpy(&w, &x, sizeof w);
    w ^= 1u << t->flip.bit;
    memcpy(&x, &w, sizeof x);
    WF_TRY(wf_model_write(t->model, WF_MODEL_PARAMS, -1, t->flip.elem, 1, &x));
    WF_WARN("WEFT_TEST_FLIP_BIT: flipped bit %d of %s on rank %d after step %lld", t->flip.bit, t->flip.what, t->rank,
            (long long)done);
    return WF_OK;
}

/* The replicated entries of the checkpoint state (the parameters first,
 * then the moments): those the strategy keeps whole. */
static size_t replicated(const trainer *t) {
    size_t nt = (size_t)wf_model_num_tensors(t->model);
    if (t->strat->params != WF__KEEP_WHOLE) return 0;
    return t->strat->optim == WF__KEEP_WHOLE ? t->n_state : nt;
}

/* Copies the replicated state of rank `root` to every rank. */
static wf_status copy_from(trainer *t, int root) {
    size_t n = (size_t)wf_model_num_params(t->model) * sizeof(float);
    WF_TRY(wf_comm_broadcast(t->comm, wf_model_params(t->model), n, root, "replica repair"));
    if (t->strat->optim == WF__KEEP_WHOLE) {
        WF_TRY(wf_comm_broadcast(t->comm, wf_adamw_m(t->opt), n, root, "replica repair"));
        WF_TRY(wf_comm_broadcast(t->comm, wf_adamw_v(t->opt), n, root, "replica repair"));
    }
    return WF_OK;
}

wf_status wf__train_check_replicas(trainer *t, int64_t done) {
    int64_t every = t->tc->guard_replica_every;
    if (t->world == 1) return WF_OK;
    WF_TRY(maybe_flip(t, done));
    /* fsdp: every rank holds other pieces, nothing is replicated to
     * compare (train_shard.c says so once). */
    size_t n = replicated(t), W = (size_t)t->world;
    if (n == 0 || every <= 0 || done % every != 0) return WF_OK;
    uint64_t *mine = malloc(n * sizeof *mine), *all = malloc(n * W * sizeof *all);
    int *major = calloc(n, sizeof *major); /* per tensor: a rank that holds the majority's bits, or -1 */
    int *bad_rank = calloc(W, sizeof *bad_rank);
    if (!mine || !all || !major || !bad_rank) {
        free(mine), free(all), free(major), free(bad_rank);
        return wf_error(WF_ERR_NOMEM, "out of memory for the replica check (%zu tensors)", n);
    }
    /* Each tensor comes to the host through its backend (the checkpoint
     * entry names it) into `stage`, room for the largest, and is hashed. */
    size_t largest = 0;
    for (size_t i = 0; i < n; i++) {
        const wf_ckpt_tensor *e = &t->state[i];
        size_t numel = (size_t)e->shape[0] * (size_t)(e->ndim > 1 ? e->shape[1] : 1);
        if (numel > largest) largest = numel;
    }
    float *stage = malloc((largest ? largest : 1) * sizeof *stage);
    wf_status s = stage ? WF_OK : wf_error(WF_ERR_NOMEM, "out of memory for the replica check (%zu floats)", largest);
    for (size_t i = 0; s == WF_OK && i < n; i++) {
        const wf_ckpt_tensor *e = &t->state[i];
        size_t numel = (size_t)e->shape[0] * (size_t)(e->ndim > 1 ? e->shape[1] : 1);
        const float *host = e->data;
        if (e->be) {
            s = wf_backend_download(e->be, stage, e->data, numel * sizeof(float));
            host = stage;
        }
        mine[i] = wf_hash64(host, numel * sizeof(float));
    }
    free(stage);
    if (s == WF_OK) s = wf_comm_all_gather_bytes(t->comm, mine, all, n * sizeof *mine, "replica check");
    size_t bad_tensors = 0;
    int no_majority = 0;
    char tensors[1024] = "";
    size_t tlen = 0;
    for (size_t i = 0; s == WF_OK && i < n; i++) {
        major[i] = -1;
        for (size_t r = 0; r < W && major[i] < 0; r++) {
            size_t same = 0;
            for (size_t q = 0; q < W; q++) same += all[q * n + i] == all[r * n + i];
            if (2 * same > W) major[i] = (int)r;
        }
        int differs = 0;
        for (size_t r = 0; r < W; r++) {
            int off = major[i] < 0 ? all[r * n + i] != all[i] : all[r * n + i] != all[(size_t)major[i] * n + i];
            if (off) bad_rank[r] = differs = 1;
        }
        if (major[i] < 0 && differs) {
            no_majority = 1; /* no copy to trust: every rank is in the disagreement */
            for (size_t r = 0; r < W; r++) bad_rank[r] = 1;
        }
        if (differs && bad_tensors++ < 8 && tlen < sizeof tensors - 200)
            tlen += (size_t)snprintf(tensors + tlen, sizeof tensors - tlen, "%s%s", tlen ? ", " : "",
                                     t->state[i].name);
    }
    if (s != WF_OK || bad_tensors == 0) {
        free(mine), free(all), free(major), free(bad_rank);
        return s;
    }
    /* The ranks that differ, and a rank that holds the majority's bits in
     * every tensor (the source of the repair). */
    char ranks[512] = "";
    size_t rlen = 0;
    int source = -1;
    for (size_t r = 0; r < W; r++) {
        if (bad_rank[r] && rlen < sizeof ranks - 16)
            rlen += (size_t)snprintf(ranks + rlen, sizeof ranks - rlen, "%s%zu", rlen ? ", " : "", r);
        if (!bad_rank[r] && source < 0) source = (int)r;
    }
    if (no_majority) source = -1;
    if (bad_tensors > 8)
        snprintf(tensors + tlen, sizeof tensors - tlen, " and %zu more", bad_tensors - 8);
    free(mine), free(all), free(major), free(bad_rank);
    t->agreed_error = 1; /* every rank computed the same verdict from the same hashes */
    if (source < 0) {
        WF_TRY(wf__train_finish_saves(t));
        char good[4200];
        return wf_error(WF_ERR_INTERNAL,
                        "step %lld: the replicas have diverged: ranks %s hold other bits than the others in %zu "
                        "tensor%s (%s), and no majority of the %d ranks agrees, so no copy can be trusted; nothing "
                        "was saved: resume from the last good checkpoint, %s, and check these ranks' hardware",
                        (long long)done, ranks, bad_tensors, bad_tensors == 1 ? "" : "s", tensors, t->world,
                        wf__train_last_good(t, good, sizeof good));
    }
    if (t->rank == 0)
        WF_ERROR("step %lld: the replicas have diverged: rank%s %s hold%s other bits than the majority in %zu "
                 "tensor%s (%s); copying rank %d's state to every rank and saving it",
                 (long long)done, strchr(ranks, ',') ? "s" : "", ranks, strchr(ranks, ',') ? "" : "s", bad_tensors,
                 bad_tensors == 1 ? "" : "s", tensors, source);
    WF_TRY(copy_from(t, source));
    WF_TRY(wf__train_save(t, done));
    WF_TRY(wf__train_finish_saves(t));
    char good[4200];
    return wf_error(WF_ERR_INTERNAL,
                    "step %lld: the replicas have diverged (rank%s %s, in %s; silent data corruption or a fault on "
                    "that rank's machine); stopped with the majority's state: the last good checkpoint is %s; "
                    "check those ranks' hardware (weft doctor) before resuming",
                    (long long)done, strchr(ranks, ',') ? "s" : "", ranks, tensors,
                    wf__train_last_good(t, good, sizeof good));
}
