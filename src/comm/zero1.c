/* ZeRO-1 (contract: include/weft/comm.h; design: docs/distributed.md):
 * the partition of the flat parameter buffer into per-rank shards, the
 * memory it saves, and the global gradient norm of a sharded gradient.
 *
 * Shards are contiguous and in rank order, every one shard_size floats
 * (ceil(n / world) rounded up to `align`) except the tail ones, which are
 * shorter or empty. The reduce-scatter and all-gather take per-rank counts,
 * so neither the gradient nor the parameter buffer needs padding to
 * world * shard_size.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft/comm.h"
#include "weft/backend.h"

wf_zero1_slice wf_zero1_slice_of(size_t n, int world, int rank, size_t align) {
    size_t w = (size_t)world, size = (n + w - 1) / w;
    size = (size + align - 1) / align * align;
    size_t off = (size_t)rank * size < n ? (size_t)rank * size : n;
    return (wf_zero1_slice){.offset = off, .count = n - off < size ? n - off : size, .size = size};
}

wf_status wf_zero1_plan_init(wf_zero1_plan *p, size_t n, int world, size_t align) {
    memset(p, 0, sizeof *p);
    if (world < 1)
        return wf_error(WF_ERR_INVALID, "dist: zero1: world size %d, need at least 1", world);
    if (align < 1) return wf_error(WF_ERR_INVALID, "dist: zero1: alignment 0, need at least 1 float");
    size_t w = (size_t)world;
    p->counts = calloc(w, sizeof *p->counts);
    p->offsets = calloc(w, sizeof *p->offsets);
    if (!p->counts || !p->offsets) {
        free(p->counts);
        free(p->offsets);
        memset(p, 0, sizeof *p);
        return wf_error(WF_ERR_NOMEM, "dist: zero1: out of memory for %d shards", world);
    }
    p->n = n;
    p->world = world;
    p->align = align;
    for (int r = 0; r < world; r++) {
        wf_zero1_slice sl = wf_zero1_slice_of(n, world, r, align);
        p->shard_size = sl.size;
        p->offsets[r] = sl.offset;
        p->counts[r] = sl.count;
    }
    return WF_OK;
}

void wf_zero1_plan_deinit(wf_zero1_plan *p) {
    if (!p) return;
    free(p->counts);
    free(p->offsets);
    memset(p, 0, sizeof *p);
}

wf_zero1_memory wf_zero1_plan_memory(const wf_zero1_plan *p, int rank, int state_floats_per_param) {
    wf_zero1_memory m = {0, 0, 0};
    if (rank < 0 || rank >= p->world || state_floats_per_param < 0) return m;
    size_t per = (size_t)state_floats_per_param * sizeof(float);
    m.unsharded_bytes = p->n * per;
    /* The shard of the optimizer state, plus the gradient shard that the
     * reduce-scatter writes (unsharded DDP reduces in place). */
    m.sharded_bytes = p->counts[rank] * per + p->counts[rank] * sizeof(float);
    m.saved_bytes = m.unsharded_bytes > m.sharded_bytes ? m.unsharded_bytes - m.sharded_bytes : 0;
    return m;
}

wf_status wf_zero1_grad_norm(wf_comm *c, const float *shard, size_t count, double *norm) {
    /* The sumsq op's fixed blocks: with one rank (the shard is the whole
     * gradient) this is wf_grad_norm's sum, bit for bit. The shard is host
     * memory: the cpu backend's. */
    double ss = 0;
    WF_TRY(wf_backend_sumsq(wf_backend_cpu(), wf_f32(shard), count, &ss));
    WF_TRY(wf_comm_all_reduce_f64(c, &ss, 1, WF_COMM_SUM, "zero1 grad norm"));
    *norm = sqrt(ss);
    return WF_OK;
}
