/* Internals of the trainer, shared by its files (not part of the API):
 *
 *   trainer.c       the loop: next batch, forward/backward, judge, update,
 *                   then the once-in-a-while blocks; wf_train_execute
 *   train_setup.c   planning: model, optimizer, DDP/ZeRO-1, loaders
 *   strategy.c      dist.shard as strategies: what each mode keeps,
 *                   gathers, reduces and updates, and its step stages
 *   train_shard.c   ZeRO-2 and FSDP: the model's units, their gathers,
 *                   reduce-scatters and shards
 *   train_step.c    one optimizer step (one path: norm, judge, update or
 *                   skip) and the validation loss
 *   train_control.c run control: signals, SAVE/STOP files, the memory
 *                   watchdog, trace requests, agreement across ranks
 *   train_ckpt.c    what a checkpoint holds and saving it
 *   train_resume.c  resume, restore and the spike rollback
 *   train_observe.c MFU peak, run.json, metrics sinks, tracer, the step's
 *                   record and console line
 *   train_mix.c     a dataset mixture (data.sources): its config, the
 *                   sources' tokenizer check, loaders, weight schedule,
 *                   per-source accounting, validation and checkpoint keys
 *   nonfinite.c     the non-finite guard: its report, skip or stop
 *   replica.c       the replicas' hash check (several ranks)
 *   spike.c, mem_watchdog.c, train_config.c: the judges and the config
 *                   (public: weft/runctl.h, weft/train.h)
 */
#ifndef WEFT_TRAIN_IMPL_H
#define WEFT_TRAIN_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "weft/arena.h"
#include "weft/batch_ramp.h"
#include "weft/ckpt.h"
#include "weft/dirlock.h"
#include "weft/comm.h"
#include "weft/eval_tasks.h"
#include "weft/loader.h"
#include "weft/metrics.h"
#include "weft/mfu.h"
#include "weft/mixture.h"
#include "weft/optim.h"
#include "weft/progress.h"
#include "weft/runctl.h"
#include "weft/rundir.h"
#include "weft/safetensors.h"
#include "weft/train.h"

/* A dataset mixture (data.sources; train_mix.c). n is 0 for one dataset. */
typedef struct {
    int n;                      /* sources */
    wf_mix_spec spec;           /* data.sources and data.weight_schedule, read */
    wf_mix_weights cur;         /* the weights the loader draws with now */
    wf_mix_state step_start;    /* the cursor of the current step's first micro-batch */
    int64_t seg_step;           /* the 1-based step whose batch first used `cur` (0: the run's first, or unknown) */
    wf_loader **val;            /* (n) each source's validation loader, NULL without a val split */
    int n_val;                  /* sources with one */
    double *val_loss;           /* (n) each source's last validation loss, NaN before the first */
    int loss_act;               /* the model activation holding the per-token losses */
    wf_metrics_source *rec;     /* (n) the step's per-source record */
} train_mix;

/* dist.shard as a strategy (strategy.c; the table is in docs/architecture.md,
 * "Sharding strategies"). What a rank keeps of a kind of state: */
typedef enum {
    WF__KEEP_WHOLE = 0, /* all of it, the same on every rank */
    WF__KEEP_FLAT,      /* its slice of the flat buffer (wf_zero1_slice_of over every parameter: ZeRO-1's shard) */
    WF__KEEP_PIECES,    /* its slice of every unit (wf_zero1_slice_of over each unit: FSDP's pieces) */
} wf__keep;

/* How a step's gradient is summed over the ranks. */
typedef enum {
    WF__REDUCE_ALL_REDUCE = 0, /* the whole gradient, in buckets during the last backward (one rank: nothing) */
    WF__REDUCE_SCATTER,        /* the same buckets reduce-scattered into this rank's flat slice */
    WF__REDUCE_UNITS,          /* each unit's gradient reduce-scattered as its backward ends, every micro-batch */
} wf__reduce;

/* How the parameters a forward needs reach every rank. */
typedef enum {
    WF__GATHER_NONE = 0,       /* every rank has them (and updated them all) */
    WF__GATHER_AFTER_UPDATE,   /* each rank updates its flat slice; the whole buffer all-gathered after */
    WF__GATHER_UNITS,          /* each unit all-gathered just before its forward and its backward */
} wf__gather;

/* What arena bytes hold, for `weft plan` (wf_plan_memory's fields). */
enum {
    WF__PART_PARAMS = 0,
    WF__PART_GRADS,
    WF__PART_OPTIMIZER,
    WF__PART_BUCKETS,
    WF__PART_GATHER,
    WF__PART_ACTIVATIONS,      /* with the logits */
    WF__PART_BATCH,
    WF__PART_N
};

typedef struct trainer trainer;
typedef struct step_outcome step_outcome;

/* One dist.shard mode. The trainer asks this table, never the mode's name:
 * the step (reduce, norm, update, the parameters' check), setup (what the
 * model, the optimizer and the reducer hold), checkpoint staging, the
 * replica audit, the non-finite report, the final model file. */
typedef struct {
    const char *name;          /* dist.shard's value */
    const char *label;         /* in messages: DDP, ZeRO-1, ZeRO-2, FSDP */
    wf__keep params;           /* the parameters */
    wf__keep grads;            /* the summed gradient the optimizer reads */
    int full_grad;             /* the model keeps a whole gradient buffer (the backward accumulates there) */
    wf__keep optim;            /* the AdamW moments, and so the slice the optimizer updates */
    wf__reduce reduce;
    wf__gather gather;
    const char *one_rank;      /* the strategy one process runs instead (zero1: ddp), NULL: this one */
    /* The optimizer and the gradient's reduction (the model exists),
     * marking their arena blocks. */
    wf_status (*setup)(trainer *t, const wf_adamw_config *ac);
    /* After the backward: the gradient summed over ranks into what
     * `grads` says, the logged loss averaged. */
    wf_status (*reduce_grads)(trainer *t, int64_t step, step_outcome *o);
    /* AdamW on this rank's slice with the global norm; afterwards every
     * rank can run the next forward. */
    wf_status (*update)(trainer *t, int64_t step, step_outcome *o);
} train_strategy;

/* The strategy of dist.shard = name, NULL for an unknown name. */
const train_strategy *wf__train_strategy(const char *name);

/* ZeRO-2 and FSDP over the model's units (train_shard.c). */
typedef struct {
    int n;                     /* units */
    int fsdp;                  /* parameters sharded too (else zero2) */
    int tied;                  /* unit 0 is also the output projection: own buffers, held for the step */
    size_t *off, *len;         /* (n) each unit's range of the flat layout */
    size_t *piece;             /* fsdp: (n) each rank's piece of the unit (ceil(len / W) rounded up to 16) */
    size_t *loc;               /* fsdp: (n) where this rank's piece of unit u is in the local shard */
    size_t *counts;            /* (n x W) rank q's part of unit u: counts[u * W + q] */
    size_t *rcount;            /* (n) this rank's part */
    size_t *dst;               /* (n) where this rank's part goes in gshard */
    size_t local_n;            /* fsdp: the local shard's floats (sum of the pieces) */
    size_t max_len;            /* the largest unit in the rotating buffers */
    size_t buffer_bytes;       /* the arena bytes this engine allocated */
    float *pshard;             /* fsdp: (local_n) this rank's parameters */
    float *gshard;             /* this rank's gradient shard (zero2: the trainer's gshard) */
    size_t gshard_n;
    wf_adamw **opt;            /* fsdp: (n) the optimizer of each unit's piece */
    float *pbuf[2];            /* fsdp: rotating gather buffers */
    int pholds[2];             /* the unit each holds (-1: none) */
    wf_comm_request preq[2];
    float *pE;                 /* fsdp, tied: the embedding's gather buffer */
    int e_valid;
    wf_comm_request ereq;
    float *gbuf[3], *rtmp[3];  /* gradient buffers (2 rotating, the tied embedding's) and receive buffers */
    int gholds[3];
    wf_comm_request greq[3];
    int gnext;
    float **gcur;              /* (n) where unit u's gradient is bound now */
    int *gchan;                /* (n) its channel */
    int in_use;                /* the rotating slot of the unit between BEGIN and END, or -1 */
    char **ag_tag, **rs_tag;   /* (n) collective tags */
    uint64_t gathers, prefetched, scatters;
    int no_prefetch;           /* WEFT_TEST_NO_PREFETCH (benchmarks) */
    wf_status status;
} train_units;

struct trainer {
    const wf_train_config *tc;
    wf_model_config mc;
    int B, T, accum;           /* B: sequences per micro-batch over all ranks; accum: micro-batches of a step
                                  at the final global batch (the largest) */
    int Bl;                    /* this rank's part of them: B / world */
    wf_batch_ramp ramp;        /* each step's global batch from the tokens trained (data.batch_ramp_*); without
                                  a ramp always accum x B sequences */
    uint64_t tokens_done;      /* tokens trained by the steps so far, all ranks (a checkpoint's data.tokens) */
    uint64_t tokens_start;     /* tokens_done when this job's loop started */
    wf_lr_schedule sched;      /* the learning rate, in steps or tokens (optim.schedule_unit) */
    int sched_tokens;          /* 1: sched counts tokens trained */
    FILE *data_dump;           /* WEFT_TEST_DATA_DUMP: this rank's token ids, a line per micro-batch */
    /* data parallelism: comm, rank and world are the dp axis (the whole
       job without tensor parallelism) */
    wf_comm *comm;
    int rank, world;
    /* tensor parallelism (dist.tp): the job's communicator, this process's
       rank in it, the {dp, tp} mesh and the model's collectives over tp */
    wf_comm *job;
    int job_rank, job_world;
    wf_mesh *mesh;             /* NULL without tensor parallelism */
    wf_model_tp tp;            /* tp.size 1 without */
    wf_reducer *reducer;       /* world > 1: DDP's buckets, or ZeRO-1's (reduce-scattered into gshard) */
    const train_strategy *strat; /* dist.shard (zero1 with one process: ddp) */
    train_units *units;        /* reduce by units (zero2, fsdp): the unit engine; NULL otherwise */
    wf_zero1_plan zplan;       /* a flat slice kept (zero1, zero2): every rank's slice of the parameter buffer */
    float *gshard;             /* the summed gradient's slice (grads not whole): flat, or fsdp's pieces */
    size_t gshard_n;           /* its floats */
    wf_status hook_status;     /* the first error of the gradient hook this step */
    wf_dirlock *lock;          /* rank 0: RUN_DIR/.weft.lock for the job's life */
    char *tokenizer_path;
    char model_source[4200];   /* where the architecture came from (run.json's model_source) */
    wf_backend *be;            /* the compute backend (train.device): the arena's memory is its blocks; NULL in `weft plan` */
    wf_arena *arena;
    wf_run_arena arena_use;    /* the arena's blocks after setup, measured (run.json's "arena") */
    size_t part[WF__PART_N];   /* the same bytes by what they hold (WF__PART_*: `weft plan`'s categories) */
    size_t part_at;            /* in_use at the last part mark */
    int plan_only;             /* `weft plan`: allocation only, on a plan-only arena, no communicator */
    wf_model *model;
    wf_adamw *opt;
    wf_muon *muon;             /* optim.name = muon: the block matrices' optimizer (train_muon.c); NULL otherwise */
    struct train_muon_split *muon_split; /* muon under zero1/zero2/fsdp: who owns which matrix (train_muon.c) */
    double adamw_lr_ratio;     /* the AdamW group's lr over the schedule's (optim.adamw_lr / optim.lr; 1 for adamw) */
    wf_loader *train, *val;
    train_mix mix;             /* data.sources: the mixture (mix.n 0: data.dir alone) */
    int32_t *inputs, *targets; /* (Bl, T) each, host memory (the model uploads them) */
    int32_t *host_batch;       /* a device backend's run: inputs and targets, malloc'ed (the arena is the device's) */
    /* checkpoints */
    char root[WF_PATH_MAX];    /* RUN_DIR/checkpoints, or ckpt.dir */
    char save_path[WF_PATH_MAX], stop_path[WF_PATH_MAX];
    char *config_text;         /* the effective config as TOML, saved in every checkpoint */
    wf_ckpt_tensor *state;     /* parameters, then AdamW m, then v */
    char **state_names;        /* owned names of the m and v entries */
    size_t n_state;
    wf_ckpt_writer *writer;
    int64_t last_saved;        /* step of the last save started, -1 if none */
    int64_t tried_step;        /* step of the last save tried (started, failed or not started) */
    char rollback_dir[4096];   /* the last good checkpoint: the last one this job committed or
                                  resumed from ("" if none); a rollback goes back to it */
    int64_t good_step;         /* its step, -1 if none */
    int save_failures;         /* saves that failed or were not started for want of space */
    char save_error[5120];     /* why the last of them failed */
    int64_t rb_step;           /* the checkpoint step of the last rollback, -1 if none */
    int rb_count;              /* rollbacks to rb_step so far */
    /* observability */
    wf_peak peak;
    int peak_rechecked;        /* the peak was measured again after an MFU above 100% */
    double flops_per_token;
    wf_metrics *metrics;
    wf_spike_detector spike;
    wf_spike_action spike_action;
    int nonfinite_stop;        /* guard.nonfinite = stop (else skip) */
    int nf_streak;             /* non-finite steps in a row */
    char nf_first[600];        /* the last non-finite step: which tensors went first ... */
    char nf_report[4400];      /* ... and this rank's report */
    int agreed_error;          /* the run failed on every rank at the same point: no job abort */
    wf_mem_limits mem_limits;
    int tracing;               /* wf_trace_init succeeded */
    wf_progress bar;           /* rank 0's progress bar */
    double t_run;              /* when the loop started */
    double val_loss;           /* the last validation loss, NaN before the first */
    /* train.eval_tasks (train_tasks.c): the tasks, their last results
       (summed over ranks), and as metrics records */
    wf_tasks *tasks;
    wf_task_result *task_res;
    wf_metrics_task *task_rec;
    size_t n_tasks;
    double task_score;         /* the mean centred accuracy of the last scoring */
    const char *task_label;
    /* WEFT_TEST_FLIP_BIT (replica.c), read once at setup: after step
       flip.step this rank flips bit flip.bit of parameter element
       flip.elem (flip.what names it for the warning); -1: never */
    struct {
        int64_t step;
        size_t elem;
        int bit;
        char what[300];
    } flip;
};

/* What one step measured and decided. */
struct step_outcome {
    double loss, lr, grad_norm;
    int64_t batch_seqs;        /* the step's global batch in sequences (the ramp's size) */
    int accum;                 /* its micro-batches: batch_seqs / B */
    int64_t tokens;            /* its tokens: batch_seqs x T */
    uint64_t tokens_before;    /* tokens trained before it */
    int64_t data_pos;          /* the step's first micro-batch in the data order */
    double data_s, fwd_bwd_s, optim_s;
    double lr_adamw;           /* muon: the AdamW group's learning rate (lr is Muon's); else lr */
    double muon_update_rms;    /* muon: the RMS of the Muon matrices' change this step; NaN otherwise */
    double comm_s;             /* several ranks: blocked in the gradient's collectives; NaN with one */
    wf_spike_result spike;
    int64_t src_seqs[WF_MIX_MAX_SOURCES];  /* a mixture: the step's sequences from each source (all ranks) */
    double src_loss[WF_MIX_MAX_SOURCES];   /* ... the sum of their per-token losses, then (after the step) the mean */
    int skipped;               /* the update was not applied */
    int nonfinite;             /* WF__NONFINITE_* bits: what went NaN or Inf */
};

enum {
    WF__NONFINITE_LOSS = 1 << 0,
    WF__NONFINITE_GRADS = 1 << 1,  /* the global gradient norm */
    WF__NONFINITE_PARAMS = 1 << 2, /* after the update */
};

/* What run control decided between two steps (the same on every rank). */
typedef struct {
    int save_file;             /* RUN_DIR/SAVE: save now */
    int stop_file;             /* RUN_DIR/STOP: save and stop, exit 0 */
    int sig;                   /* SIGTERM or SIGUSR1 arrived: save and stop, requeue */
    int stop_at;               /* ckpt.stop_at reached: save and stop, requeue */
    int mem_trip;              /* the memory watchdog tripped: save and stop, requeue */
    int dump_file;             /* RUN_DIR/DUMP: every rank writes its threads' stacks, training goes on */
    char mem_msg[512];         /* why it tripped */
} run_control;

/* The trainer's words in wf_comm_agree's flag word (dist.h leaves the bits
 * to the caller). */
enum {
    WF__TRAIN_AGREE_STOP = 1u << 0,
    WF__TRAIN_AGREE_SAVE = 1u << 1,
    WF__TRAIN_AGREE_ERROR = 1u << 2,     /* a rank failed to set up */
    WF__TRAIN_AGREE_SIGNAL = 1u << 3,
    WF__TRAIN_AGREE_CKPT_BUSY = 1u << 4, /* this rank's asynchronous write still runs: nobody commits */
    WF__TRAIN_AGREE_MEMORY = 1u << 8,
    WF__TRAIN_AGREE_USR1 = 1u << 9,
    WF__TRAIN_AGREE_TRACE = 1u << 10,    /* rank 0 claimed a `weft trace request` */
    WF__TRAIN_AGREE_DUMP = 1u << 11,     /* RUN_DIR/DUMP: every rank dumps its stacks */
};

/* A run's batch shape. */
typedef struct {
    int B;                     /* sequences per micro-batch over all ranks (data.batch_size) */
    int Bl;                    /* this rank's part: B / world */
    int T;                     /* tokens per sequence */
    int accum;                 /* micro-batches of a step at the final global batch */
    wf_batch_ramp ramp;        /* each step's global batch from the tokens trained */
} train_batch;

/* train_setup.c */
/* What setup checks and `weft plan` checks the same way, with the same
 * words (src/train/plan.c calls these too): */
/* The keys checked before any data is read: the enum keys' values, the
 * optimizer's schedule, the spike detector's config (spike: initialised
 * there; NULL: only checked). */
wf_status wf__train_check_keys(const wf_train_config *tc, wf_spike_detector *spike);
/* dist.shard (and dist.zero1, its old name) at `world` ranks: its
 * strategy (zero1 with one process: ddp, said when log is set). */
wf_status wf__train_strategy_of(const wf_train_config *tc, int world, int log, const train_strategy **out);
/* The batch: global, per rank, micro-batches, accumulation and the ramp, at
 * `world` ranks for a model of max_seq_len (data.seq_len 0 takes it). */
wf_status wf__train_batch_shape(const wf_train_config *tc, int world, int max_seq_len, train_batch *out);
/* Everything setup allocates in t->arena, in its order, each block marked
 * for run.json and by category (t->part): the model without what the
 * strategy slices, its activations for Bl x T with `recompute`, the
 * strategy's optimizer, gradient slice and unit buffers, the token
 * buffers. Needs t->mc, t->strat, world, rank, Bl, T (and with several
 * ranks and not t->plan_only, t->comm). Writes nothing into the arena's
 * memory, so `weft plan` runs it on a plan-only arena. */
wf_status wf__train_allocate(trainer *t, const wf_adamw_config *ac, int recompute);
void wf__train_arena_part(trainer *t, int cat);
wf_status wf__train_setup(trainer *t, const wf_train_config *tc);
void wf__train_free(trainer *t);
/* A validation loader of split "val" of `dir` (val_tokens long): lo's
 * options, in order, in batches that fit B and split over the ranks. */
wf_status wf__train_val_loader(trainer *t, const wf_loader_opts *lo, const char *dir, uint64_t val_tokens,
                               wf_loader **out);
/* Splits a loader batch (B, T+1) into inputs (B, T) and targets (B, T). */
void wf__train_split_batch(const wf_batch *b, int32_t *inputs, int32_t *targets);
/* The learning-rate schedule of a run that continues after step `start`
 * with t->tokens_done tokens trained: in steps, or in tokens (warmup
 * optim.warmup_tokens, total the tokens after train.steps steps). */
wf_status wf__train_schedule(trainer *t, int64_t start);

/* train_step.c */
/* One optimizer step of the ramp's global batch for t->tokens_done (its
 * micro-batches' forward and backward, gradients scaled by 1 / (micro-batches
 * x world)), the gradient summed over ranks, then one path for every mode:
 * the global norm, the judgement (a non-finite loss with spike.action = warn
 * is an error; the spike detector), and the update with t->sched's rate, or
 * none for a spike that is skipped or rolled back. Adds the step's tokens to
 * t->tokens_done. */
wf_status wf__train_step(trainer *t, int64_t step, step_outcome *o);
/* Mean loss over the first eval_batches batches of the validation split
 * (a mixture: the mean of its sources' validation losses). */
wf_status wf__train_evaluate(trainer *t, double *loss);
/* The same over one validation loader (collective with several ranks). */
wf_status wf__train_eval_loader(trainer *t, wf_loader *l, double *loss);

/* strategy.c */
/* Records what the arena's in_use grew by since the last mark, as block
 * `name` of run.json's "arena" (`weft plan` predicts these). */
void wf__train_arena_mark(trainer *t, const char *name);
/* The global L2 norm of the summed gradient (collective when it is sliced). */
wf_status wf__train_grad_norm(trainer *t, double *norm);

/* dist.tp (train_tp.c): the {dp, tp} mesh over the job (comm, rank and
 * world become the dp axis's; refusals: world not a multiple of tp, a
 * sharding mode other than ddp, Muon, eval tasks), the model's split
 * checked, the global gradient norm and the parameters' check over tp. */
wf_status wf__train_tp_mesh(trainer *t, wf_comm *job);
wf_status wf__train_tp_check(trainer *t);
wf_status wf__train_tp_grad_norm(trainer *t, double *norm);
wf_status wf__train_tp_param_sumsq(trainer *t, double *ss);
void wf__train_tp_free(trainer *t);
/* The final model file of a tensor-parallel run: collective over the tp
 * ranks of dp rank 0, the job's rank 0 writes (a no-op on other dp ranks). */
wf_status wf__train_tp_write_model(trainer *t, const char *path, const wf_kv *meta, size_t n_meta);
/* The sum of squares of every parameter (collective when they are in pieces). */
wf_status wf__train_param_sumsq(trainer *t, double *ss);
/* What this rank holds of the parameters (grads 0) or of the summed
 * gradient (grads 1) where the model's own buffer is not whole: n ranges of
 * the flat parameter order, [lo[i], lo[i] + cnt[i]) at ptr[i]; n is 0 when
 * the model's buffer is whole. lo, cnt and ptr have room for a range per
 * unit (wf_model_num_units). */
int wf__train_held(const trainer *t, int grads, size_t *lo, size_t *cnt, float **ptr);

/* train_shard.c */
wf_status wf__train_units_setup(trainer *t, const wf_adamw_config *ac);
void wf__train_units_free(trainer *t);
/* The model's initial parameters from the seed (fsdp: this rank's pieces). */
wf_status wf__train_units_init(trainer *t, uint64_t seed);
/* Before a step's micro-batches: the gradient shard zeroed, gathers invalid. */
void wf__train_units_begin_step(trainer *t);
/* The parameters changed (an update, a restore): gather again. */
void wf__train_units_invalidate(trainer *t);
/* After the backward: every reduce-scatter complete and added into the shard. */
wf_status wf__train_units_finish(trainer *t);
/* fsdp: AdamW on every unit's piece. */
wf_status wf__train_units_update(trainer *t, double lr, double norm);
void wf__train_units_set_steps(trainer *t, uint64_t steps);
/* fsdp: every unit all-gathered in turn into a gather buffer and, on the
 * rank that passes a writer (rank 0), appended to it (collective; the
 * other ranks pass NULL). Every rank runs every gather even after a failed
 * write. */
wf_status wf__train_units_export(trainer *t, wf_safetensors_writer *w);
/* fsdp: ckpt.init_from's weights, only this rank's pieces read. */
wf_status wf__train_units_import(trainer *t, const char *path);
/* fsdp: the sum of squares of this rank's parameters. */
wf_status wf__train_units_local_sumsq(const trainer *t, double *out);

/* train_muon.c: optim.name = muon (docs/optim.md) */
/* Reads optim.name. Sets adamw_lr_ratio and ac->skip_muon. Before any
 * optimizer is made. */
wf_status wf__train_muon_config(trainer *t, wf_adamw_config *ac);
/* After the strategy's AdamW (t->opt, or fsdp's units): Muon over the block
 * matrices, its momentum in AdamW's first-moment slots of those matrices
 * (unused by AdamW under skip_muon), wherever the strategy keeps them;
 * sharded, each matrix's owner and the exchange buffer too. */
wf_status wf__train_muon_setup(trainer *t);
void wf__train_muon_free(trainer *t);
/* Sharded Muon's owners: n matrices (rows x cols, in buffer order) over
 * `world` ranks by Newton-Schulz flops, largest first, each to the least
 * loaded rank (ties: the earlier matrix, the lower rank). *busiest (may
 * be NULL): the busiest rank's flops over the even share. The trainer's
 * and weft plan's. */
wf_status wf__train_muon_assign(int n, const int *rows, const int *cols, int world, int *owner, double *busiest);
/* The step's update of the Muon matrices (nothing without muon), from the
 * summed gradient as the strategy keeps it (`grad`: the whole one, or
 * ignored when sharded: the strategy's slices). */
wf_status wf__train_muon_step(trainer *t, step_outcome *o, const float *grad);
/* The optimizer's name as checkpoints record it ("optimizer.name"). */
const char *wf__train_optim_name(const trainer *t);

/* train_mix.c */
/* data.sources and data.weight_schedule read and checked (names, weights,
 * steps), naming the key; nothing opened yet. */
wf_status wf__train_mix_config(trainer *t);
/* The sources' dataset.json files: one vocabulary and one tokenizer (by
 * fingerprint, and data.tokenizer's if given). *vocab gets it, *tokenizer
 * the tokenizer file the first source records (owned by the caller; NULL
 * after an error). */
wf_status wf__train_mix_check_data(trainer *t, uint32_t *vocab, char **tokenizer);
/* The mixture's training loader (lo without dir) and each source's
 * validation loader (vo: the options of a validation loader but the dir). */
wf_status wf__train_mix_loaders(trainer *t, const wf_loader_opts *lo, const wf_loader_opts *vo);
void wf__train_mix_free(trainer *t);
/* Before step `step` (0-based): the weights data.weight_schedule gives it;
 * when they differ from the loader's, a new segment starts at the step's
 * first micro-batch (the batches read ahead are dropped). */
wf_status wf__train_mix_begin_step(trainer *t, int64_t step);
/* After a micro-batch's forward: its sequences and loss sums per source. */
wf_status wf__train_mix_account(trainer *t, const wf_batch *b, step_outcome *o);
/* After the step's micro-batches: the loss sums summed over ranks and
 * turned into means (collective with several ranks). */
wf_status wf__train_mix_finish_step(trainer *t, step_outcome *o);
/* The validation loss of every source with a val split, and their mean. */
wf_status wf__train_mix_evaluate(trainer *t, double *loss);
/* The mixture's keys of a checkpoint (mix.*). */
wf_status wf__train_mix_put(const trainer *t, wf_ckpt_meta *m);
/* Restores the mixture's cursor from a checkpoint (its mix.* keys, or a
 * fresh mixture for a checkpoint of one dataset) for the run going on
 * after step `start`. */
wf_status wf__train_mix_restore(trainer *t, const wf_ckpt *c, int64_t start);
/* The step's per-source record (t->mix.rec) into r. */
void wf__train_mix_record(trainer *t, const step_outcome *o, int eval, wf_metrics_step *r);
/* The plan's lines: the sources, weights, schedule and bound. */
void wf__train_mix_log_plan(const trainer *t);

/* train_control.c */
/* Catches SIGTERM and SIGUSR1 (and ignores SIGXFSZ) while the run lasts,
 * and starts the stack dumper (weft/stackdump.h) into RUN_DIR/hang/ for
 * SIGQUIT, the DUMP file and train.hang_dump_s; restore undoes both. */
void wf__train_signals_install(const wf_train_config *tc, int rank, int world);
void wf__train_signals_restore(void);
/* Looks at the SAVE, STOP and DUMP files, the signals, ckpt.stop_at and
 * the memory watchdog after step `done` (nothing after a step that is
 * rolled back), and with several ranks makes every rank decide the same
 * (and takes part in a trace request and an asynchronous save's commit).
 * Tells the stack dumper that a step completed, and takes the DUMP
 * file's dump on every rank. */
wf_status wf__train_control(trainer *t, int64_t done, int roll, run_control *rc);
/* Whether run control stops the run after step `done`. */
int wf__train_stopping(const trainer *t, const run_control *rc, int64_t done);
/* Says why the run stopped and sets the result's flags. */
void wf__train_stopped(const trainer *t, const run_control *rc, int64_t done, wf_train_result *res);
/* With several ranks, the ranks agree on whether all of them set up (s is
 * this rank's status); every rank returns the same verdict. *setup_failed
 * is 1 when the run ends here on every rank (no job abort needed). */
wf_status wf__train_agree_setup(trainer *t, wf_status s, int *setup_failed);

/* train_ckpt.c */
wf_status wf__train_setup_checkpoints(trainer *t);
/* Saves the state after step `step` (collective). The save before it is
 * waited for and reported first; a save that would not fit on the
 * checkpoint filesystem (ckpt.disk_check) is not started. A save that
 * fails or is not started is a warning: training goes on, the next save
 * tries again, and the last good checkpoint stays (nothing is pruned
 * before a newer one is committed). Errors are those of the run itself
 * (out of memory, a collective that failed). */
wf_status wf__train_save(trainer *t, int64_t step);
/* Logs the saves that completed: a committed one becomes the last good
 * checkpoint, a failed one is a warning. */
wf_status wf__train_report_saves(trainer *t);
/* Waits for the save in flight and reports it (with several ranks,
 * collective, ending with a barrier). */
wf_status wf__train_finish_saves(trainer *t);
/* "RUN_DIR/checkpoints/step-N (step N)" or "none", for messages. */
const char *wf__train_last_good(const trainer *t, char *buf, size_t size);
wf_status wf__train_write_final_model(trainer *t, int64_t steps);
wf_status wf__train_write_run_config(const wf_train_config *tc);
/* The spike detector's window into a checkpoint's state. */
wf_status wf__train_spike_state_put(const trainer *t, wf_ckpt_meta *m);

/* nonfinite.c */
/* A step with a non-finite loss, gradient or parameters (o->nonfinite):
 * writes this rank's report, logs which tensors went first (rank 0), and
 * sets *stop when the run must stop (guard.nonfinite = stop, too many in a
 * row, or parameters an update broke); `note` gets the console line's
 * " | non-finite (...)". */
wf_status wf__train_nonfinite(trainer *t, int64_t done, const step_outcome *o, int *stop, char *note,
                              size_t note_size);
/* Saves the last good state (unless the parameters are broken) and
 * returns the error that ends the run (the same on every rank). */
wf_status wf__train_nonfinite_stop(trainer *t, int64_t done, const step_outcome *o);

/* replica.c */
/* Reads the test hook WEFT_TEST_FLIP_BIT into t->flip (the model must
 * exist); a value that does not parse or names no element is an error. */
wf_status wf__train_flip_setup(trainer *t);
/* With several ranks, every guard.replica_every steps (collective): the
 * replicated state's hashes compared across ranks; a divergence is an
 * error on every rank, after the majority's state is copied and saved. */
wf_status wf__train_check_replicas(trainer *t, int64_t done);

/* train_resume.c */
wf_status wf__train_resume_or_init(trainer *t, int64_t *start);
/* PaLM's recipe for a spike at `step` (first micro-batch at `spike_pos`,
 * `micro_batches` of them): reload the last checkpoint of this job and skip
 * the data past the spike. *back gets the checkpoint's step, or -1 when the
 * update is skipped instead. */
wf_status wf__train_rollback(trainer *t, int64_t step, int64_t spike_pos, int micro_batches, int64_t *back);
/* A loader cursor as micro-batches from the run's first epoch, and back. */
int64_t wf__train_data_position(const trainer *t, wf_loader_state s);
wf_loader_state wf__train_data_cursor(const trainer *t, int64_t pos);
/* The data back to the first micro-batch of the step just run (at `pos`):
 * one dataset's cursor there, or a mixture's saved at the step's start. */
wf_status wf__train_data_rewind(trainer *t, int64_t pos);

/* train_observe.c */
wf_status wf__train_setup_obs(trainer *t, int64_t start);
/* The plan's lines at the start (the run goes on after step `start`):
 * model, batch and its ramp, the schedule's unit, memory, FLOPs. */
void wf__train_log_plan(const trainer *t, int64_t start);
/* The tracer's step marker and the communicator's step, before a step. */
void wf__train_mark_step(trainer *t, int64_t step);
/* Logs a spike (the caller has counted it); `note` gets " | spike (...)". */
void wf__train_log_spike(trainer *t, const step_outcome *o, int64_t done, int roll, char *note, size_t size);
/* Times of one step for its record. */
typedef struct {
    double t0, t_end;          /* the step's start and end */
    double eval_s;             /* NaN when no evaluation ran */
    double tasks_s;            /* NaN when no downstream tasks were scored */
    double ckpt_s;             /* time in the checkpoint block */
} step_times;
/* train.eval_tasks (train_tasks.c): reads and tokenizes the tasks (this
 * rank's share); nothing without the key. */
wf_status wf__train_tasks_setup(trainer *t);
void wf__train_tasks_free(trainer *t);
/* Are the tasks due after step `done`? */
int wf__train_tasks_due(const trainer *t, int64_t done);
/* Scores them with the current model, sums over ranks, into t->task_res,
 * t->task_rec and t->task_score. */
wf_status wf__train_tasks_run(trainer *t);
/* The step's record into the metrics sinks, and rank 0's console line. */
wf_status wf__train_observe(trainer *t, int64_t done, const step_outcome *o, const step_times *st,
                            const char *spike_note);
/* Flushes a trace capture at the end (a failure is a warning). */
void wf__train_trace_flush(void);

#endif
