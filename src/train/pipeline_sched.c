/* Pipeline schedules as data (include/weft/pipeline.h): building GPipe,
 * 1F1B and interleaved 1F1B action lists, checking them by simulation,
 * printing them, and cutting the layer stack into stages.
 *
 * The builders emit, around each compute action, the receive it needs
 * right before it and the send it makes right after it; the overlap of
 * those messages with compute is the executor's business, not the
 * schedule's. The simulation is exact for the model it states (sends
 * asynchronous and free, receives blocking, stages of equal time): each
 * rank runs its list in order, a compute advances its clock, a receive
 * waits for the message's time. It does not model bandwidth.
 */
#include <stdlib.h>
#include <string.h>

#include "weft/pipeline.h"

static const char *const kind_names[] = {"gpipe", "1f1b", "interleaved"};

const char *wf_pp_kind_name(wf_pp_kind k) {
    return (unsigned)k < 3 ? kind_names[k] : "?";
}

wf_status wf_pp_kind_parse(const char *name, wf_pp_kind *out) {
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, kind_names[i]) == 0) {
            *out = (wf_pp_kind)i;
            return WF_OK;
        }
    return wf_error(WF_ERR_CONFIG, "dist.pp_schedule = \"%s\": expected gpipe, 1f1b or interleaved",
                    name ? name : "");
}

double wf_pp_bubble_formula(wf_pp_kind kind, int pp, int virt, int micro) {
    double p = pp, m = micro, v = kind == WF_PP_INTERLEAVED ? virt : 1;
    return (p - 1) / (v * m + p - 1);
}

/* ---- building ---- */

typedef struct {
    wf_pp_schedule *s;
    int cap;
} builder;

static wf_status push(builder *b, int r, wf_pp_op op, int stage, int micro, int peer) {
    wf_pp_schedule *s = b->s;
    if (s->n_actions[r] == b->cap) return wf_error(WF_ERR_INTERNAL, "pipeline schedule: action list overflow");
    s->actions[r][s->n_actions[r]++] = (wf_pp_action){(uint8_t)op, stage, micro, peer};
    return WF_OK;
}

/* The forward of (stage, micro) on its rank r, with its receive and send. */
static wf_status emit_fwd(builder *b, int r, int stage, int micro) {
    int pp = b->s->pp, n_st = pp * b->s->virt;
    wf_status st = WF_OK;
    if (stage > 0) st = push(b, r, WF_PP_RECV_ACT, stage, micro, (stage - 1) % pp);
    if (!st) st = push(b, r, WF_PP_FWD, stage, micro, -1);
    if (!st && stage < n_st - 1) st = push(b, r, WF_PP_SEND_ACT, stage + 1, micro, (stage + 1) % pp);
    return st;
}

static wf_status emit_bwd(builder *b, int r, int stage, int micro) {
    int pp = b->s->pp, n_st = pp * b->s->virt;
    wf_status st = WF_OK;
    if (stage < n_st - 1) st = push(b, r, WF_PP_RECV_GRAD, stage, micro, (stage + 1) % pp);
    if (!st) st = push(b, r, WF_PP_BWD, stage, micro, -1);
    if (!st && stage > 0) st = push(b, r, WF_PP_SEND_GRAD, stage - 1, micro, (stage - 1) % pp);
    return st;
}

/* Interleaved: the k-th forward (backward) of rank r, as Megatron orders
 * them: micro-batches go in groups of pp through every chunk before the
 * next group starts; backwards run the chunks in reverse. */
static void interleaved_unit(const wf_pp_schedule *s, int r, int k, int backward, int *stage, int *micro) {
    int pp = s->pp, V = s->virt;
    int group = k / (pp * V), within = k % (pp * V);
    int chunk = within / pp;
    if (backward) chunk = V - 1 - chunk;
    *micro = group * pp + within % pp;
    *stage = chunk * pp + r;
}

static wf_status build_rank(builder *b, int r) {
    wf_pp_schedule *s = b->s;
    int pp = s->pp, m = s->micro;
    wf_status st = WF_OK;
    switch (s->kind) {
    case WF_PP_GPIPE:
        for (int j = 0; j < m && !st; j++) st = emit_fwd(b, r, r, j);
        for (int j = 0; j < m && !st; j++) st = emit_bwd(b, r, r, j);
        return st;
    case WF_PP_1F1B: {
        int warm = pp - r - 1 < m ? pp - r - 1 : m;
        int f = 0, bk = 0;
        for (; f < warm && !st; f++) st = emit_fwd(b, r, r, f);
        while (f < m && !st) {
            st = emit_fwd(b, r, r, f++);
            if (!st) st = emit_bwd(b, r, r, bk++);
        }
        while (bk < m && !st) st = emit_bwd(b, r, r, bk++);
        return st;
    }
    case WF_PP_INTERLEAVED: {
        int total = m * s->virt;
        int warm = 2 * (pp - r - 1) + (s->virt - 1) * pp;
        if (warm > total) warm = total;
        int f = 0, bk = 0, stage, micro;
        for (; f < warm && !st; f++) {
            interleaved_unit(s, r, f, 0, &stage, &micro);
            st = emit_fwd(b, r, stage, micro);
        }
        while (f < total && !st) {
            interleaved_unit(s, r, f++, 0, &stage, &micro);
            st = emit_fwd(b, r, stage, micro);
            interleaved_unit(s, r, bk++, 1, &stage, &micro);
            if (!st) st = emit_bwd(b, r, stage, micro);
        }
        while (bk < total && !st) {
            interleaved_unit(s, r, bk++, 1, &stage, &micro);
            st = emit_bwd(b, r, stage, micro);
        }
        return st;
    }
    }
    return wf_error(WF_ERR_INVALID, "pipeline schedule: unknown kind %d", (int)s->kind);
}

wf_status wf_pp_schedule_build(wf_pp_schedule *s, wf_pp_kind kind, int pp, int virt, int micro) {
    memset(s, 0, sizeof *s);
    if (pp < 1 || pp > 4096) return wf_error(WF_ERR_CONFIG, "dist.pp = %d: expected 1 .. 4096", pp);
    if (micro < 1 || micro > (1 << 20))
        return wf_error(WF_ERR_CONFIG, "pipeline: %d micro-batches: expected 1 .. %d", micro, 1 << 20);
    if ((unsigned)kind > WF_PP_INTERLEAVED) return wf_error(WF_ERR_CONFIG, "pipeline: unknown schedule %d", kind);
    if (kind != WF_PP_INTERLEAVED && virt != 1)
        return wf_error(WF_ERR_CONFIG, "dist.pp_virtual = %d needs dist.pp_schedule = \"interleaved\" (it is \"%s\")",
                        virt, wf_pp_kind_name(kind));
    if (kind == WF_PP_INTERLEAVED) {
        if (virt < 2 || virt > 256)
            return wf_error(WF_ERR_CONFIG,
                            "dist.pp_schedule = \"interleaved\" needs dist.pp_virtual of 2 .. 256 stages a rank (it is %d)",
                            virt);
        if (micro % pp)
            return wf_error(WF_ERR_CONFIG,
                            "the interleaved schedule needs the micro-batches (%d) to be a multiple of dist.pp (%d)",
                            micro, pp);
    }
    s->kind = kind;
    s->pp = pp;
    s->virt = virt;
    s->micro = micro;
    /* per rank: virt * micro forwards and backwards, each with at most a
     * receive and a send */
    builder b = {s, 6 * virt * micro};
    s->n_actions = calloc((size_t)pp, sizeof *s->n_actions);
    s->actions = calloc((size_t)pp, sizeof *s->actions);
    if (!s->n_actions || !s->actions) goto nomem;
    for (int r = 0; r < pp; r++) {
        s->actions[r] = malloc((size_t)b.cap * sizeof **s->actions);
        if (!s->actions[r]) goto nomem;
        wf_status st = build_rank(&b, r);
        if (st) {
            wf_pp_schedule_free(s);
            return st;
        }
    }
    return WF_OK;
nomem:
    wf_pp_schedule_free(s);
    return wf_error(WF_ERR_NOMEM, "pipeline schedule: out of memory for %d ranks x %d micro-batches", pp, micro);
}

void wf_pp_schedule_free(wf_pp_schedule *s) {
    if (!s) return;
    if (s->actions)
        for (int r = 0; r < s->pp; r++) free(s->actions[r]);
    free(s->actions);
    free(s->n_actions);
    memset(s, 0, sizeof *s);
}

/* ---- checking ---- */

static const char *const op_tags[] = {"F", "B", "<A", ">A", "<G", ">G"};

static void action_str(const wf_pp_action *a, char *buf, size_t n) {
    if (a->op > WF_PP_SEND_GRAD) {
        snprintf(buf, n, "?%d", a->op);
        return;
    }
    if (a->peer >= 0)
        snprintf(buf, n, "%s%d.%d (peer %d)", op_tags[a->op], a->stage, a->micro, a->peer);
    else
        snprintf(buf, n, "%s%d.%d", op_tags[a->op], a->stage, a->micro);
}

/* Index of (kind of message, stage, micro) among all messages: activations
 * then gradients, stage-major. */
static size_t msg_index(const wf_pp_schedule *s, int grad, int stage, int micro) {
    size_t n_st = (size_t)s->pp * (size_t)s->virt;
    return ((size_t)grad * n_st + (size_t)stage) * (size_t)s->micro + (size_t)micro;
}

static wf_status bad(const wf_pp_schedule *s, int r, int i, const char *why) {
    char a[64];
    action_str(&s->actions[r][i], a, sizeof a);
    return wf_error(WF_ERR_INVALID, "pipeline schedule (%s, pp %d, %d micro-batches): rank %d, action %d (%s): %s",
                    wf_pp_kind_name(s->kind), s->pp, s->micro, r, i, a, why);
}

/* The per-rank, in-order rules of the check. state[(stage, micro)] bits:
 * 1 forward done, 2 backward done, 4 activation received, 8 gradient
 * received. */
static wf_status check_rank(const wf_pp_schedule *s, int r, uint8_t *state, int *sends, int *recvs,
                            int *peak) {
    int n_st = s->pp * s->virt, held = 0;
    *peak = 0;
    for (int i = 0; i < s->n_actions[r]; i++) {
        const wf_pp_action *a = &s->actions[r][i];
        if (a->op > WF_PP_SEND_GRAD) return bad(s, r, i, "unknown action");
        if (a->stage < 0 || a->stage >= n_st || a->micro < 0 || a->micro >= s->micro)
            return bad(s, r, i, "stage or micro-batch out of range");
        int comm = a->op >= WF_PP_RECV_ACT;
        if (comm && (a->peer < 0 || a->peer >= s->pp)) return bad(s, r, i, "peer out of range");
        size_t k = (size_t)a->stage * (size_t)s->micro + (size_t)a->micro;
        int home = a->stage % s->pp;
        switch ((wf_pp_op)a->op) {
        case WF_PP_FWD:
            if (home != r) return bad(s, r, i, "the stage lives on another rank");
            if (state[k] & 1) return bad(s, r, i, "second forward of this stage and micro-batch");
            if (a->stage > 0 && !(state[k] & 4)) return bad(s, r, i, "forward before its activation was received");
            state[k] |= 1;
            if (++held > *peak) *peak = held;
            break;
        case WF_PP_BWD:
            if (home != r) return bad(s, r, i, "the stage lives on another rank");
            if (!(state[k] & 1)) return bad(s, r, i, "backward before its forward");
            if (state[k] & 2) return bad(s, r, i, "second backward of this stage and micro-batch");
            if (a->stage < n_st - 1 && !(state[k] & 8))
                return bad(s, r, i, "backward before its output's gradient was received");
            state[k] |= 2;
            held--;
            break;
        case WF_PP_RECV_ACT:
        case WF_PP_RECV_GRAD: {
            int grad = a->op == WF_PP_RECV_GRAD;
            if (home != r) return bad(s, r, i, "receive for a stage of another rank");
            if (grad ? a->stage == n_st - 1 : a->stage == 0) return bad(s, r, i, "no stage sends this");
            int from = (grad ? a->stage + 1 : a->stage - 1) % s->pp;
            if (a->peer != from) return bad(s, r, i, "receives from the wrong rank");
            if (state[k] & (grad ? 8 : 4)) return bad(s, r, i, "second receive of this message");
            state[k] |= (uint8_t)(grad ? 8 : 4);
            recvs[msg_index(s, grad, a->stage, a->micro)]++;
            break;
        }
        case WF_PP_SEND_ACT:
        case WF_PP_SEND_GRAD: {
            int grad = a->op == WF_PP_SEND_GRAD;
            /* the sender's stage: the one before (activation) or after (gradient) */
            int src = grad ? a->stage + 1 : a->stage - 1;
            if (src < 0 || src >= n_st || src % s->pp != r) return bad(s, r, i, "sent by a rank that lacks its stage");
            if (a->peer != home) return bad(s, r, i, "sent to the wrong rank");
            size_t ks = (size_t)src * (size_t)s->micro + (size_t)a->micro;
            if (!(state[ks] & (grad ? 2 : 1))) return bad(s, r, i, "sent before it was computed");
            sends[msg_index(s, grad, a->stage, a->micro)]++;
            break;
        }
        }
    }
    return WF_OK;
}

wf_status wf_pp_schedule_check(const wf_pp_schedule *s, double t_fwd, double t_bwd, wf_pp_sim *out,
                               int *peak_inflight) {
    int pp = s->pp, n_st = pp * s->virt;
    size_t n_units = (size_t)n_st * (size_t)s->micro, n_msgs = 2 * n_units;
    uint8_t *state = calloc(n_units, 1);
    int *sends = calloc(n_msgs, sizeof *sends), *recvs = calloc(n_msgs, sizeof *recvs);
    double *arrive = malloc(n_msgs * sizeof *arrive), *clock = calloc((size_t)pp, sizeof *clock);
    double *busy = calloc((size_t)pp, sizeof *busy);
    int *pos = calloc((size_t)pp, sizeof *pos), *peaks = calloc((size_t)pp, sizeof *peaks);
    wf_status st = WF_OK;
    if (!state || !sends || !recvs || !arrive || !clock || !busy || !pos || !peaks) {
        st = wf_error(WF_ERR_NOMEM, "pipeline schedule check: out of memory");
        goto done;
    }
    /* the rules each rank's list must keep on its own */
    for (int r = 0; r < pp && !st; r++) st = check_rank(s, r, state, sends, recvs, &peaks[r]);
    if (st) goto done;
    for (size_t k = 0; k < n_units; k++)
        if (state[k] != (3 | (k >= (size_t)s->micro ? 4 : 0) | (k < n_units - (size_t)s->micro ? 8 : 0))) {
            int stage = (int)(k / (size_t)s->micro), micro = (int)(k % (size_t)s->micro);
            st = wf_error(WF_ERR_INVALID, "pipeline schedule (%s, pp %d): stage %d, micro-batch %d on rank %d: %s",
                          wf_pp_kind_name(s->kind), pp, stage, micro, stage % pp,
                          !(state[k] & 1) ? "never forwarded" : !(state[k] & 2) ? "never backwarded"
                                                                               : "a message it needs is never received");
            goto done;
        }
    for (size_t k = 0; k < n_msgs; k++)
        if (sends[k] != recvs[k]) {
            int grad = k >= n_units;
            size_t u = k % n_units;
            st = wf_error(WF_ERR_INVALID, "pipeline schedule (%s, pp %d): the %s of stage %d, micro-batch %d is %s",
                          wf_pp_kind_name(s->kind), pp, grad ? "gradient" : "activation", (int)(u / (size_t)s->micro),
                          (int)(u % (size_t)s->micro), sends[k] ? "sent but never received" : "received but never sent");
            goto done;
        }
    /* the simulation: ranks run in order until all finish or none can move */
    for (size_t k = 0; k < n_msgs; k++) arrive[k] = -1;
    for (;;) {
        int moved = 0, left = 0;
        for (int r = 0; r < pp; r++) {
            while (pos[r] < s->n_actions[r]) {
                const wf_pp_action *a = &s->actions[r][pos[r]];
                if (a->op == WF_PP_FWD || a->op == WF_PP_BWD) {
                    double t = a->op == WF_PP_FWD ? t_fwd : t_bwd;
                    clock[r] += t;
                    busy[r] += t;
                } else if (a->op == WF_PP_SEND_ACT || a->op == WF_PP_SEND_GRAD) {
                    arrive[msg_index(s, a->op == WF_PP_SEND_GRAD, a->stage, a->micro)] = clock[r];
                } else {
                    double t = arrive[msg_index(s, a->op == WF_PP_RECV_GRAD, a->stage, a->micro)];
                    if (t < 0) break;
                    if (t > clock[r]) clock[r] = t;
                }
                pos[r]++;
                moved = 1;
            }
            if (pos[r] < s->n_actions[r]) left++;
        }
        if (!left) break;
        if (!moved) {
            char msg[1024];
            size_t n = 0;
            for (int r = 0; r < pp && n < sizeof msg - 80; r++) {
                if (pos[r] >= s->n_actions[r]) continue;
                char a[64];
                action_str(&s->actions[r][pos[r]], a, sizeof a);
                n += (size_t)snprintf(msg + n, sizeof msg - n, "%srank %d at action %d waits on %s", n ? "; " : "", r,
                                      pos[r], a);
            }
            st = wf_error(WF_ERR_INVALID, "pipeline schedule (%s, pp %d, %d micro-batches) deadlocks: %s",
                          wf_pp_kind_name(s->kind), pp, s->micro, msg);
            goto done;
        }
    }
    if (out) {
        double span = 0, idle = 0;
        int peak = 0;
        for (int r = 0; r < pp; r++) {
            if (clock[r] > span) span = clock[r];
            if (peaks[r] > peak) peak = peaks[r];
        }
        for (int r = 0; r < pp; r++) idle += span - busy[r];
        out->makespan = span;
        out->bubble = span > 0 ? idle / ((double)pp * span) : 0;
        out->bubble_formula = wf_pp_bubble_formula(s->kind, pp, s->virt, s->micro);
        out->peak_inflight_max = peak;
    }
    if (peak_inflight) memcpy(peak_inflight, peaks, (size_t)pp * sizeof *peaks);
done:
    free(state);
    free(sends);
    free(recvs);
    free(arrive);
    free(clock);
    free(busy);
    free(pos);
    free(peaks);
    return st;
}

void wf_pp_schedule_print(const wf_pp_schedule *s, FILE *f) {
    fprintf(f, "schedule %s: pp %d, %d stage%s a rank, %d micro-batch%s\n", wf_pp_kind_name(s->kind), s->pp, s->virt,
            s->virt == 1 ? "" : "s", s->micro, s->micro == 1 ? "" : "es");
    for (int r = 0; r < s->pp; r++) {
        fprintf(f, "rank %d:", r);
        for (int i = 0; i < s->n_actions[r]; i++) {
            const wf_pp_action *a = &s->actions[r][i];
            fprintf(f, " %s%d.%d", a->op <= WF_PP_SEND_GRAD ? op_tags[a->op] : "?", a->stage, a->micro);
        }
        fputc('\n', f);
    }
}

/* ---- layers ---- */

wf_status wf_pp_split_layers(int n_layers, int n_stages, const char *spec, int *first) {
    if (n_stages < 1) return wf_error(WF_ERR_CONFIG, "pipeline: %d stages", n_stages);
    if (n_layers < n_stages)
        return wf_error(WF_ERR_CONFIG, "pipeline: %d stages (dist.pp x dist.pp_virtual) for %d layers: each needs one",
                        n_stages, n_layers);
    first[0] = 0;
    if (!spec || !*spec) {
        int base = n_layers / n_stages, extra = n_layers % n_stages;
        for (int i = 0; i < n_stages; i++) first[i + 1] = first[i] + base + (i < extra);
        return WF_OK;
    }
    const char *p = spec;
    for (int i = 0; i < n_stages; i++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > n_layers)
            return wf_error(WF_ERR_CONFIG, "dist.pp_layers = \"%s\": stage %d's count is not a number from 1 to %d",
                            spec, i, n_layers);
        first[i + 1] = first[i] + (int)v;
        p = end;
        if (i < n_stages - 1) {
            if (*p != ',')
                return wf_error(WF_ERR_CONFIG, "dist.pp_layers = \"%s\": %d counts, the pipeline has %d stages", spec,
                                i + 1, n_stages);
            p++;
        }
    }
    if (*p)
        return wf_error(WF_ERR_CONFIG, "dist.pp_layers = \"%s\": more counts than the pipeline's %d stages", spec,
                        n_stages);
    if (first[n_stages] != n_layers)
        return wf_error(WF_ERR_CONFIG, "dist.pp_layers = \"%s\" sums to %d layers, the model has %d", spec,
                        first[n_stages], n_layers);
    return WF_OK;
}
