/* `weft plan`: the memory each rank of a training run needs, for every
 * sharding and recomputation mode, the largest micro-batch that fits a
 * budget, and the bytes each rank sends per step (weft/plan.h; the
 * formulas are in docs/distributed.md, "Planning memory: weft plan"). It
 * reads the same config and overrides as `weft train` (one option table:
 * train's, plus --world-size, --budget and --json) and starts nothing. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "weft/pipeline.h"
#include "weft/plan.h"
#include "weft/train.h"
#include "weft/weft.h"

/* The training config must be the first member: train's option table
 * (offsets into wf_train_config) is used as it is. */
typedef struct {
    wf_train_config tc;
    int64_t world;
    char *budget;
    int json;
    int64_t pp, pp_virtual;
    char *pp_schedule;
    int print_schedule;
    unsigned char given[WF_TRAIN_N_KEYS + 7]; /* train's keys after plan's own 7 */
} plan_opts;

static const char *const pp_schedules[] = {"gpipe", "1f1b", "interleaved", NULL};

static const wf_opt plan_own_opts[] = {
    {"world_size", "world-size", WF_OPT_INT, offsetof(plan_opts, world), "1", 1, 1 << 24,
     "ranks W the run would have (mpirun -np W): the per-rank figures, shards and micro-batch (data.batch_size / W)"},
    {"budget", NULL, WF_OPT_STR, offsetof(plan_opts, budget), NULL, WF_NO_RANGE,
     "memory per rank (8GiB, 512MiB, 1.5GB, bytes): print the largest micro-batch whose arena fits it in each mode"},
    {"json", NULL, WF_OPT_BOOL, offsetof(plan_opts, json), "false", WF_NO_RANGE,
     "print one JSON object instead of the tables"},
    {"pp", NULL, WF_OPT_INT, offsetof(plan_opts, pp), "1", 1, 4096,
     "pipeline stages' ranks: the schedule's bubble and the activations each rank holds, over the step's "
     "micro-batches (docs/distributed.md, \"Pipeline schedules\"; the trainer has no pipeline executor yet)"},
    {"pp_schedule", "pp-schedule", WF_OPT_STR, offsetof(plan_opts, pp_schedule), "1f1b", WF_CHOICES(pp_schedules),
     .help = "the pipeline schedule planned with --pp"},
    {"pp_virtual", "pp-virtual", WF_OPT_INT, offsetof(plan_opts, pp_virtual), "1", 1, 256,
     "stages a rank with --pp-schedule interleaved (2 or more)"},
    {"print_schedule", "print-schedule", WF_OPT_BOOL, offsetof(plan_opts, print_schedule), "false", WF_NO_RANGE,
     "with --pp: print every rank's actions (F/B stage.micro-batch, </> receive/send of an Activation or a Gradient)"},
};

static wf_opt plan_table[WF_TRAIN_N_KEYS + sizeof plan_own_opts / sizeof *plan_own_opts];
static wf_cmd_spec plan_spec;

static const wf_cmd_spec *make_spec(void) {
    const wf_cmd_spec *ts = wf_train_spec();
    size_t n = ts->n_opts, k = sizeof plan_own_opts / sizeof *plan_own_opts;
    if (n > WF_TRAIN_N_KEYS) n = WF_TRAIN_N_KEYS; /* the two come from one list */
    memcpy(plan_table, plan_own_opts, sizeof plan_own_opts);
    memcpy(plan_table + k, ts->opts, n * sizeof *plan_table);
    plan_spec = (wf_cmd_spec){
        "plan",
        "weft plan --config run.toml --world-size N [--budget 8GiB] [--json] [--section.key=value ...]",
        "Plans a training run's memory without running it: per rank (the one with the largest shard), the bytes "
        "of the training arena for parameters, gradients, optimizer state, gather buffers, activations, logits "
        "and the batch's tokens, for each dist.shard (ddp, zero1, zero2, fsdp) and each train.recompute (none, "
        "block, selective); with --budget, the largest micro-batch per rank (and data.batch_size) that fits; and "
        "the bytes each rank sends per optimizer step in each mode. The model, batch, sequence length, "
        "accumulation, threads and buckets are the config's, resolved as `weft train` resolves them (the "
        "vocabulary from data.dir when model.vocab_size is 0). The config's own mode (dist.shard, "
        "train.recompute) is marked with *. The figures equal the arena `weft train` measures (run.json's "
        "arena, metrics.jsonl's arena_peak) to the alignment padding; the loader, MPI and checkpoint staging "
        "live outside the arena. The formulas are in docs/distributed.md, \"Planning memory: weft plan\".",
        plan_table,
        k + n,
        0,
        0,
        offsetof(plan_opts, given),
    };
    return &plan_spec;
}

/* Bytes in binary units, e.g. "12.3 MiB". */
static const char *fmt_bytes(char *buf, size_t n, double v) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    if (u == 0) snprintf(buf, n, "%.0f B", v);
    else snprintf(buf, n, "%.1f %s", v, units[u]);
    return buf;
}

typedef struct {
    wf_plan_memory mem[WF_PLAN_N_SHARDS][WF_PLAN_N_RECOMPUTES];
    int max_micro[WF_PLAN_N_SHARDS][WF_PLAN_N_RECOMPUTES];
    wf_plan_comm comm[WF_PLAN_N_SHARDS];
} plan_result;

static void print_json(const plan_opts *o, const wf_plan_input *in, int own_shard, int own_rec, int has_budget,
                       size_t budget, const plan_result *r) {
    const wf_model_config *mc = &in->model;
    printf("{\"world_size\": %d, \"model\": {\"n_params\": %zu, \"dim\": %d, \"n_layers\": %d, \"n_heads\": %d, "
           "\"n_kv_heads\": %d, \"vocab_size\": %d, \"ffn_hidden_dim\": %d, \"tied\": %s}, ",
           in->world, wf_model_config_num_params(mc), mc->dim, mc->n_layers, mc->n_heads, mc->n_kv_heads,
           mc->vocab_size, wf_model_config_hidden_dim(mc), mc->tied_embeddings ? "true" : "false");
    printf("\"micro_batch_per_rank\": %d, \"batch_size\": %" PRId64 ", \"seq_len\": %d, \"accum\": %d, "
           "\"threads\": %d, \"bucket_bytes\": %zu, ",
           in->micro_batch, o->tc.batch_size, in->seq_len, in->accum, in->threads, in->bucket_bytes);
    printf("\"config\": {\"shard\": \"%s\", \"recompute\": \"%s\"}, \"optimizer\": \"%s\", ",
           wf_plan_shard_name((wf_plan_shard)own_shard), wf_plan_recompute_name((wf_plan_recompute)own_rec),
           in->muon ? "muon" : "adamw");
    if (has_budget) printf("\"budget_bytes\": %zu, ", budget);
    else printf("\"budget_bytes\": null, ");
    printf("\"tp\": %d, \"sequence_parallel\": %s, ", in->tp > 1 ? in->tp : 1,
           in->tp > 1 && in->sequence_parallel ? "true" : "false");
    printf("\"memory\": [");
    for (int s = 0; s < WF_PLAN_N_SHARDS; s++)
        for (int c = 0; c < WF_PLAN_N_RECOMPUTES; c++) {
            if (in->tp > 1 && s != WF_PLAN_DDP) continue; /* ddp (the first) only */
            const wf_plan_memory *m = &r->mem[s][c];
            printf("%s{\"shard\": \"%s\", \"recompute\": \"%s\", \"params\": %zu, \"grads\": %zu, "
                   "\"optimizer\": %zu, \"buckets\": %zu, \"gather\": %zu, \"activations\": %zu, \"logits\": %zu, \"batch\": %zu, "
                   "\"total\": %zu",
                   s || c ? ", " : "", wf_plan_shard_name((wf_plan_shard)s),
                   wf_plan_recompute_name((wf_plan_recompute)c), m->params, m->grads, m->optimizer, m->buckets, m->gather,
                   m->activations, m->logits, m->batch, m->total);
            if (has_budget)
                printf(", \"max_micro_batch_per_rank\": %d, \"max_batch_size\": %lld", r->max_micro[s][c],
                       (long long)r->max_micro[s][c] * in->world);
            printf("}");
        }
    printf("], \"comm\": [");
    for (int s = 0; s < WF_PLAN_N_SHARDS; s++) {
        if (in->tp > 1 && s != WF_PLAN_DDP) continue;
        const wf_plan_comm *c = &r->comm[s];
        printf("%s{\"shard\": \"%s\", \"all_reduce_bytes\": %.0f, \"reduce_scatter_bytes\": %.0f, "
               "\"all_gather_bytes\": %.0f, \"total_bytes\": %.0f, \"collectives\": %d}",
               s ? ", " : "", wf_plan_shard_name((wf_plan_shard)s), c->all_reduce, c->reduce_scatter, c->all_gather,
               c->total, c->collectives_per_step);
    }
    printf("]");
    if (in->tp > 1) {
        const wf_plan_comm *c = &r->comm[WF_PLAN_DDP];
        printf(", \"comm_tp\": {\"all_reduce_bytes\": %.0f, \"reduce_scatter_bytes\": %.0f, \"all_gather_bytes\": %.0f, "
               "\"total_bytes\": %.0f, \"collectives\": %d}",
               c->tp_all_reduce, c->tp_reduce_scatter, c->tp_all_gather, c->tp_total, c->tp_collectives_per_step);
    }
    printf("}\n");
}

static void print_tables(const wf_plan_input *in, int64_t batch_size, int own_shard, int own_rec, int has_budget,
                         size_t budget, const plan_result *r) {
    const wf_model_config *mc = &in->model;
    char b[9][32];
    printf("model: %zu parameters (dim %d, %d layers, %d heads, %d kv heads, vocab %d, ffn %d%s)\n",
           wf_model_config_num_params(mc), mc->dim, mc->n_layers, mc->n_heads, mc->n_kv_heads, mc->vocab_size,
           wf_model_config_hidden_dim(mc), mc->tied_embeddings ? ", tied" : "");
    printf("run: %d rank%s, micro-batch %d x %d tokens per rank (data.batch_size %" PRId64 "), %d micro-batch%s a "
           "step, %d thread%s a rank, %s\n",
           in->world, in->world == 1 ? "" : "s", in->micro_batch, in->seq_len, batch_size, in->accum,
           in->accum == 1 ? "" : "es", in->threads, in->threads == 1 ? "" : "s",
           in->muon ? "Muon (optim.name = muon: its scratch, and sharded its exchange buffer, in the optimizer column)"
                    : "AdamW");
    if (in->world == 1) printf("one rank: nothing to shard, every mode is planned as ddp\n");
    if (in->tp > 1)
        printf("mesh: dp %d x tp %d (sequence parallel %s): each rank holds 1/%d of every layer, ddp over dp only; "
               "communication: the dp axis's (ddp) and the tp axis's\n",
               in->world / in->tp, in->tp, in->sequence_parallel ? "on" : "off", in->tp);
    printf("\nmemory per rank (the training arena)%s%s:\n", has_budget ? ", budget " : "",
           has_budget ? fmt_bytes(b[0], sizeof b[0], (double)budget) : "");
    printf("  %-6s %-9s %10s %10s %10s %10s %10s %11s %10s %10s %10s", "shard", "recompute", "params", "grads",
           "optimizer", "buckets", "gather", "activations", "logits", "batch", "total");
    if (has_budget) printf(" %12s %12s", "max B/rank", "max batch");
    printf("\n");
    for (int s = 0; s < WF_PLAN_N_SHARDS; s++)
        for (int c = 0; c < WF_PLAN_N_RECOMPUTES; c++) {
            if (in->tp > 1 && s != WF_PLAN_DDP) continue;
            const wf_plan_memory *m = &r->mem[s][c];
            printf("%c %-6s %-9s %10s %10s %10s %10s %10s %11s %10s %10s %10s",
                   s == own_shard && c == own_rec ? '*' : ' ', wf_plan_shard_name((wf_plan_shard)s),
                   wf_plan_recompute_name((wf_plan_recompute)c), fmt_bytes(b[0], 32, (double)m->params),
                   fmt_bytes(b[1], 32, (double)m->grads), fmt_bytes(b[2], 32, (double)m->optimizer),
                   fmt_bytes(b[8], 32, (double)m->buckets), fmt_bytes(b[3], 32, (double)m->gather),
                   fmt_bytes(b[4], 32, (double)m->activations), fmt_bytes(b[5], 32, (double)m->logits),
                   fmt_bytes(b[6], 32, (double)m->batch), fmt_bytes(b[7], 32, (double)m->total));
            if (has_budget) {
                if (r->max_micro[s][c]) printf(" %12d %12lld", r->max_micro[s][c], (long long)r->max_micro[s][c] * in->world);
                else printf(" %12s %12s", "none fits", "-");
            }
            printf("\n");
        }
    printf("\ncommunication per rank and optimizer step (bytes sent, ring algorithms):\n");
    printf("  %-6s %12s %14s %12s %12s %12s\n", "shard", "all-reduce", "reduce-scatter", "all-gather", "total",
           "collectives");
    for (int s = 0; s < WF_PLAN_N_SHARDS; s++) {
        if (in->tp > 1 && s != WF_PLAN_DDP) continue;
        const wf_plan_comm *c = &r->comm[s];
        printf("%c %-6s %12s %14s %12s %12s %12d\n", s == own_shard ? '*' : ' ', wf_plan_shard_name((wf_plan_shard)s),
               fmt_bytes(b[0], 32, c->all_reduce), fmt_bytes(b[1], 32, c->reduce_scatter),
               fmt_bytes(b[2], 32, c->all_gather), fmt_bytes(b[3], 32, c->total), c->collectives_per_step);
    }
    if (in->tp > 1) {
        const wf_plan_comm *c = &r->comm[WF_PLAN_DDP];
        printf("  %-6s %12s %14s %12s %12s %12d   (the tp axis: the model's activations, recompute none)\n", "tp",
               fmt_bytes(b[0], 32, c->tp_all_reduce), fmt_bytes(b[1], 32, c->tp_reduce_scatter),
               fmt_bytes(b[2], 32, c->tp_all_gather), fmt_bytes(b[3], 32, c->tp_total), c->tp_collectives_per_step);
    }
}

/* --pp: the schedule of weft/pipeline.h over the step's micro-batches,
 * checked by simulation (equal stages, forward 1, backward 2): its bubble
 * against the formula and the activations each rank holds. */
static int print_pipeline(const plan_opts *o, const wf_plan_input *in) {
    wf_pp_kind kind;
    wf_pp_schedule sc;
    wf_pp_sim sim;
    int pp = (int)o->pp, *held = calloc((size_t)pp, sizeof *held);
    if (!held) return wf_tool_fail(plan_spec.name);
    if (wf_pp_kind_parse(o->pp_schedule, &kind) != WF_OK ||
        wf_pp_schedule_build(&sc, kind, pp, (int)o->pp_virtual, in->accum) != WF_OK) {
        free(held);
        return wf_tool_fail(plan_spec.name);
    }
    wf_status s = wf_pp_schedule_check(&sc, 1.0, 2.0, &sim, held);
    if (s == WF_OK) {
        printf("\npipeline: %s over %d rank%s, %d stage%s a rank, %d micro-batch%s a step\n", wf_pp_kind_name(kind), pp,
               pp == 1 ? "" : "s", (int)o->pp_virtual, o->pp_virtual == 1 ? "" : "s", in->accum,
               in->accum == 1 ? "" : "es");
        printf("  bubble (idle share of each rank, equal stages, backward = 2 forwards): %.1f%%; formula %.1f%%\n",
               100 * sim.bubble, 100 * sim.bubble_formula);
        printf("  micro-batch stages whose activations each rank holds at most:");
        for (int r = 0; r < pp; r++) printf(" %d", held[r]);
        printf("\n  (memory per stage is planned once the trainer runs pipelines: issue 28)\n");
        if (o->print_schedule) wf_pp_schedule_print(&sc, stdout);
    }
    wf_pp_schedule_free(&sc);
    free(held);
    return s == WF_OK ? 0 : wf_tool_fail(plan_spec.name);
}

static int plan_main(void *opts, const wf_strs *pos) {
    (void)pos;
    plan_opts *o = opts;
    /* The train keys' "given" flags, where wf_train_model_config reads them. */
    memcpy(o->tc.given, o->given + sizeof plan_own_opts / sizeof *plan_own_opts, sizeof o->tc.given);
    size_t budget = 0;
    int has_budget = o->budget != NULL;
    if (has_budget && wf_plan_parse_bytes(o->budget, &budget) != WF_OK) return wf_tool_fail(plan_spec.name);
    wf_plan_input in;
    int own_shard, own_rec;
    if (wf_plan_from_train_config(&o->tc, (int)o->world, &in, &own_shard, &own_rec) != WF_OK)
        return wf_tool_fail(plan_spec.name);
    static plan_result r;
    for (int s = 0; s < WF_PLAN_N_SHARDS; s++) {
        if (in.tp > 1 && s != WF_PLAN_DDP) continue; /* dist.tp: ddp only (printed as such) */
        for (int c = 0; c < WF_PLAN_N_RECOMPUTES; c++) {
            if (wf_plan_memory_of(&in, (wf_plan_shard)s, (wf_plan_recompute)c, &r.mem[s][c]) != WF_OK ||
                (has_budget && wf_plan_max_micro_batch(&in, (wf_plan_shard)s, (wf_plan_recompute)c, budget, 1 << 24,
                                                       &r.max_micro[s][c]) != WF_OK))
                return wf_tool_fail(plan_spec.name);
        }
        if (wf_plan_comm_of(&in, (wf_plan_shard)s, &r.comm[s]) != WF_OK) return wf_tool_fail(plan_spec.name);
    }
    if (o->json) print_json(o, &in, own_shard, own_rec, has_budget, budget, &r);
    else print_tables(&in, o->tc.batch_size, own_shard, own_rec, has_budget, budget, &r);
    return o->pp > 1 || o->print_schedule ? print_pipeline(o, &in) : 0;
}

int wf_cmd_plan(int argc, char **argv) {
    plan_opts o;
    return wf_tool_run(make_spec(), &o, sizeof o, argc, argv, plan_main);
}
