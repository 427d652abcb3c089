/* weft: pipeline-parallel schedules as data (issue 28; docs/distributed.md,
 * "Pipeline schedules").
 *
 * A pipeline cuts the layer stack into S = pp * virt stages; virtual stage
 * s lives on rank s % pp as that rank's chunk s / pp (Megatron's layout:
 * with virt > 1 a rank holds every pp-th stage). The embedding goes with
 * stage 0, the final norm, head and loss with stage S - 1. A schedule is a
 * list of actions per rank (compute a stage's forward or backward for one
 * micro-batch, send or receive an activation or its gradient), built here
 * for GPipe, 1F1B and interleaved 1F1B, and checked before a run by
 * simulating it: sends are asynchronous (posted, completed by the end of
 * the step), receives block, so a schedule deadlocks exactly when every
 * rank left is waiting for a message no one will send. The simulation also
 * gives the makespan and each rank's idle time (the bubble) for given
 * forward and backward times, and each rank's peak number of micro-batches
 * whose activations it holds.
 *
 * This module only plans: it allocates the action lists and nothing else,
 * and knows nothing of the model or of communicators.
 */
#ifndef WEFT_PIPELINE_H
#define WEFT_PIPELINE_H

#include <stdint.h>
#include <stdio.h>

#include "weft/status.h"

typedef enum { WF_PP_GPIPE = 0, WF_PP_1F1B = 1, WF_PP_INTERLEAVED = 2 } wf_pp_kind;

/* "gpipe", "1f1b", "interleaved": the values of dist.pp_schedule. */
const char *wf_pp_kind_name(wf_pp_kind k);
/* WF_ERR_CONFIG naming the values for anything else. */
wf_status wf_pp_kind_parse(const char *name, wf_pp_kind *out);

typedef enum {
    WF_PP_FWD = 0,       /* forward of (stage, micro) */
    WF_PP_BWD = 1,       /* backward of (stage, micro) */
    WF_PP_RECV_ACT = 2,  /* receive the input activation of (stage, micro) from `peer` */
    WF_PP_SEND_ACT = 3,  /* send the input activation of (stage, micro) to `peer` */
    WF_PP_RECV_GRAD = 4, /* receive the gradient of (stage, micro)'s output from `peer` */
    WF_PP_SEND_GRAD = 5  /* send the gradient of (stage, micro)'s output to `peer` */
} wf_pp_op;

/* One action. For the sends, `stage` is the receiving stage's (the
 * activation goes to stage + 1, whose input it is; the gradient to
 * stage - 1, whose output it belongs to), so a send and the receive it
 * matches carry the same (op pair, stage, micro). */
typedef struct {
    uint8_t op;   /* wf_pp_op */
    int32_t stage; /* virtual stage, 0 .. pp * virt - 1 */
    int32_t micro; /* micro-batch, 0 .. micro - 1 */
    int32_t peer;  /* the other rank of a send or receive; -1 for compute */
} wf_pp_action;

typedef struct {
    wf_pp_kind kind;
    int pp;    /* ranks of the pipeline */
    int virt;  /* stages per rank (1 but for interleaved) */
    int micro; /* micro-batches per step */
    int *n_actions;         /* [pp] */
    wf_pp_action **actions; /* [pp][n_actions[r]] */
} wf_pp_schedule;

/* Builds the schedule. Refused (WF_ERR_CONFIG, with the numbers): pp < 1,
 * micro < 1, virt < 1, virt > 1 for a kind other than interleaved,
 * interleaved with virt < 2 or with micro not a multiple of pp. 1F1B's
 * warm-up on rank r is min(micro, pp - r - 1) forwards; interleaved's is
 * Megatron's min(micro * virt, 2 (pp - r - 1) + (virt - 1) pp). */
wf_status wf_pp_schedule_build(wf_pp_schedule *s, wf_pp_kind kind, int pp, int virt, int micro);
void wf_pp_schedule_free(wf_pp_schedule *s); /* accepts a zeroed one */

/* What a simulation of the schedule found. */
typedef struct {
    double makespan;       /* time of the last action */
    double bubble;         /* mean over ranks of idle / makespan */
    double bubble_formula; /* wf_pp_bubble_formula of the schedule */
    int peak_inflight_max; /* the largest of the ranks' peaks */
} wf_pp_sim;

/* Checks the schedule: every (stage, micro) has one forward and one
 * backward, on the stage's rank, the backward after the forward; each
 * stage but the first receives its activation before its forward, each
 * but the last its gradient before its backward; every send is matched
 * by one receive on its peer; and the simulation (forward t_fwd, backward
 * t_bwd per stage, messages free) finishes. WF_ERR_INVALID naming the
 * rank, its position and the action otherwise (for a deadlock, every
 * blocked rank's waiting receive). `peak_inflight`, if not NULL, gets pp
 * values: each rank's most micro-batch stages forwarded and not yet
 * backwarded at once (the activations it holds). */
wf_status wf_pp_schedule_check(const wf_pp_schedule *s, double t_fwd, double t_bwd, wf_pp_sim *out,
                               int *peak_inflight);

/* The bubble fraction of the textbook analysis with equal stages:
 * (pp - 1) / (micro + pp - 1) for GPipe and 1F1B, and
 * (pp - 1) / (virt * micro + pp - 1) for interleaved. */
double wf_pp_bubble_formula(wf_pp_kind kind, int pp, int virt, int micro);

/* Prints the schedule, one line per rank: "rank 0: F0.0 >A1.0 F0.1 ..."
 * (F/B stage.micro for compute, <A/>A receive/send of an activation,
 * <G/>G of a gradient, each followed by stage.micro). */
void wf_pp_schedule_print(const wf_pp_schedule *s, FILE *f);

/* The first layer of each of `n_stages` stages, in first[0 .. n_stages]
 * (first[n_stages] = n_layers). `spec` NULL or "": equal counts, the first
 * n_layers % n_stages stages one layer more; else dist.pp_layers's
 * comma-separated counts ("8,8,7,7"), one per stage, each at least 1,
 * summing to n_layers (WF_ERR_CONFIG naming the key and the numbers). */
wf_status wf_pp_split_layers(int n_layers, int n_stages, const char *spec, int *first);

#endif
