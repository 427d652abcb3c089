/* weft: the memory and communication planner behind `weft plan`.
 *
 * Given a model, a per-rank micro-batch and a world size, computes per rank
 * (the rank holding the largest shard) the bytes the training arena holds
 * for each sharding mode (dist.shard = ddp, zero1, zero2, fsdp) and each
 * activation-recomputation mode (train.recompute = none, block, selective),
 * the largest micro-batch that fits a memory budget, and the bytes each rank
 * sends per optimizer step. The memory is measured: the trainer's own
 * allocation code runs for the largest rank on a plan-only arena
 * (wf_arena_create_plan in weft/arena.h), which counts every block and
 * allocates none, so it equals the arena a real run measures
 * (tests/py/test_plan.py: to the byte). The communication is the ring
 * formulas of docs/distributed.md ("Planning memory: weft plan").
 *
 * Nothing is allocated but the model's tables and what
 * wf_plan_from_train_config reads (the dataset's vocabulary), and no MPI
 * is needed.
 */
#ifndef WEFT_PLAN_H
#define WEFT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "weft/model.h"
#include "weft/status.h"
#include "weft/train.h"

/* The sharding modes, in dist.shard's spelling. */
#define WF_PLAN_SHARDS(X)         \
    X(WF_PLAN_DDP, "ddp")         \
    X(WF_PLAN_ZERO1, "zero1")     \
    X(WF_PLAN_ZERO2, "zero2")     \
    X(WF_PLAN_FSDP, "fsdp")
typedef enum {
#define WF_PLAN_ENUM_(name, str) name,
    WF_PLAN_SHARDS(WF_PLAN_ENUM_)
    WF_PLAN_N_SHARDS
} wf_plan_shard;

/* The recomputation modes, in train.recompute's spelling. */
#define WF_PLAN_RECOMPUTES(X)                  \
    X(WF_PLAN_RECOMPUTE_NONE, "none")          \
    X(WF_PLAN_RECOMPUTE_BLOCK, "block")        \
    X(WF_PLAN_RECOMPUTE_SELECTIVE, "selective")
typedef enum {
    WF_PLAN_RECOMPUTES(WF_PLAN_ENUM_)
    WF_PLAN_N_RECOMPUTES
} wf_plan_recompute;
#undef WF_PLAN_ENUM_

const char *wf_plan_shard_name(wf_plan_shard s);          /* "ddp", ...; NULL when out of range */
const char *wf_plan_recompute_name(wf_plan_recompute r);  /* "none", ... */
int wf_plan_shard_parse(const char *name);                /* the enum value, or -1 */
int wf_plan_recompute_parse(const char *name);            /* the enum value, or -1 */

/* What a plan depends on. */
typedef struct {
    wf_model_config model; /* a valid config (wf_model_config_validate) */
    int world;             /* W, ranks, >= 1 */
    int micro_batch;       /* sequences per rank in one micro-batch (data.batch_size / W), >= 1 */
    int seq_len;           /* T, 1..model.max_seq_len */
    int accum;             /* micro-batches per optimizer step, >= 1 */
    int threads;           /* compute threads per rank: the attention kernel's scratch grows with them */
    size_t bucket_bytes;   /* dist.bucket_mb in bytes: DDP's buckets, ZeRO-2's bucket buffers */
    int muon;              /* optim.name = muon: its scratch, (sharded) its exchange buffers and collectives */
    int tp;                /* dist.tp (0 or 1: none): world = dp x tp ranks, micro_batch per dp rank;
                              only ddp is planned (the trainer's only mode with it) */
    int sequence_parallel; /* dist.sequence_parallel, with tp > 1 */
} wf_plan_input;

/* Bytes per rank, by what they hold. Each field is a sum of arena blocks,
 * each rounded up to 64 bytes; total is their sum. */
typedef struct {
    size_t params;      /* parameters: all of them, or fsdp's shard of every unit */
    size_t grads;       /* gradients: the full buffer and/or the rank's shard (zero1's shard counts here) */
    size_t optimizer;   /* AdamW's two moments (8 bytes a parameter held); with muon, the same slots
                         * (the momentum in m's) and Muon's Newton-Schulz scratch and, sharded, its
                         * exchange buffers (every Muon matrix; the busiest owner's) */
    size_t buckets;     /* zero2: the gradient buckets the backward fills before their reduce-scatter */
    size_t gather;      /* fsdp: the gathered units in flight and the gradient buffer of one */
    size_t activations; /* the model's planned activations and backward scratch, without the logits */
    size_t logits;      /* the logits (B, T, V), reused for their gradient */
    size_t batch;       /* the trainer's input and target token buffers */
    size_t total;
} wf_plan_memory;

/* Bytes one rank sends per optimizer step, by collective, with ring
 * algorithms (an all-reduce of n bytes sends 2 (W-1)/W n, a reduce-scatter
 * or all-gather (W-1)/W n: per rank, (W - 1) times its largest shard).
 * The few scalars (loss, norm, agreement) are left out. All 0 at W = 1. */
typedef struct {
    double all_reduce, reduce_scatter, all_gather, total;
    int collectives_per_step; /* calls that move the model's bytes (buckets, units) */
    /* dist.tp > 1: the fields above are the dp axis's; these the tp
     * axis's (the model's activations, docs/model.md's table, recompute
     * none): per step, bytes each rank sends and the calls */
    double tp_all_reduce, tp_reduce_scatter, tp_all_gather, tp_total;
    int tp_collectives_per_step;
} wf_plan_comm;

/* Computes the memory of one (shard, recompute) pair. W = 1 plans every
 * mode as ddp (nothing to shard; the trainer does the same). Errors
 * (WF_ERR_INVALID, WF_ERR_RANGE) name the field. */
wf_status wf_plan_memory_of(const wf_plan_input *in, wf_plan_shard s, wf_plan_recompute r, wf_plan_memory *out);

/* The communication of a sharding mode (recomputation does not change it). */
wf_status wf_plan_comm_of(const wf_plan_input *in, wf_plan_shard s, wf_plan_comm *out);

/* The largest per-rank micro-batch (sequences, in [0, max_micro]) whose
 * total fits `budget` bytes with in->seq_len, the other inputs as given
 * (in->micro_batch is ignored). 0 when not even one sequence fits. */
wf_status wf_plan_max_micro_batch(const wf_plan_input *in, wf_plan_shard s, wf_plan_recompute r, size_t budget,
                                  int max_micro, int *out);

/* A training config as `weft train` would resolve it at `world` ranks:
 * the model config (the dataset's vocabulary when model.vocab_size is 0
 * and data.dir is set; a model.vocab_size of 0 with no dataset is an
 * error that says to give one), B / W sequences per rank (B must divide),
 * T, the accumulation of data.global_batch_tokens, train.threads (0:
 * WEFT_THREADS or every CPU; set as the kernels' thread count, as the
 * trainer does; 1 without OpenMP) and
 * dist.bucket_mb. `shard`/`recompute` get the config's own modes
 * (dist.shard, or zero1 for dist.zero1, ddp for zero1 at one rank;
 * train.recompute; ddp and none where `weft train` lacks those keys) and
 * may be NULL. */
wf_status wf_plan_from_train_config(const wf_train_config *tc, int world, wf_plan_input *out, int *shard,
                                    int *recompute);

/* Parses "8GiB", "512MiB", "1.5GB", "3e9", "100000" (bytes; K/M/G/T with B
 * are powers of 1000, with iB of 1024) into *bytes. WF_ERR_CONFIG with the
 * text otherwise. */
wf_status wf_plan_parse_bytes(const char *text, size_t *bytes);

#endif
