/* The ABI between the seam (src/kernels/backend.c, include/weft/backend.h)
 * and its backends: a table of memory calls and ops, shaped like the MPI
 * backends' (src/comm/comm_backend.h). The cpu and ref backends are compiled
 * into libweft (backend_cpu.c, backend_ref.c); a device backend will be a
 * shared object that exports WF_BACKEND_SYMBOL, a function returning its
 * table, and links nothing of libweft: everything crosses this table (it
 * may include weft/backend.h for the argument types, which are plain data).
 *
 * Calls return 0 on success; on failure -1, with a message saying which
 * call failed and why in last_error(state). The seam checks dtypes before
 * calling (each tensor argument's dtype is one the backend lists in
 * float_dtypes, index arguments are WF_DTYPE_I32), so an op receives only
 * dtypes it declared; shapes are the caller's to check.
 *
 * Bump WF_BACKEND_ABI whenever this table changes: a backend built against
 * another version is refused with a message saying to rebuild it.
 */
#ifndef WEFT_BACKEND_IMPL_H
#define WEFT_BACKEND_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/backend.h"

#define WF_BACKEND_ABI 2 /* 2: axpby (Muon) */
#define WF_BACKEND_SYMBOL "wf_backend_ops_v1"

typedef struct wf_backend_ops {
    int abi;          /* WF_BACKEND_ABI */
    const char *name; /* "cpu", "ref" */
    unsigned float_dtypes; /* bit (1u << dt) for each dtype its float arguments may have */

    int (*init)(void **state);
    void (*fini)(void *state);
    const char *(*last_error)(void *state);

    /* memory: one block per arena chunk */
    int (*alloc)(void *state, size_t bytes, void **out); /* zeroed, 4096-aligned */
    void (*free)(void *state, void *p);
    int (*upload)(void *state, void *dst, const void *src, size_t bytes);
    int (*download)(void *state, void *dst, const void *src, size_t bytes);
    int (*copy)(void *state, void *dst, const void *src, size_t bytes);
    int (*fill)(void *state, void *dst, int byte, size_t bytes);
    int (*sync)(void *state);
    int (*mem_info)(void *state, size_t *free_bytes, size_t *total_bytes);

    /* timing marks */
    wf_backend_mark (*mark)(void *state);
    double (*mark_seconds)(void *state, wf_backend_mark a, wf_backend_mark b);

    /* ops (include/weft/backend.h, include/weft/kernels.h) */
    int (*matmul)(void *state, const wf_matmul_desc *d);
    int (*rmsnorm_fwd)(void *state, wf_dptr out, wf_dptr rstd, wf_dptr inp, wf_dptr weight, int N, int C,
                       float eps);
    int (*rmsnorm_bwd)(void *state, wf_dptr dinp, wf_dptr dweight, wf_dptr dout, wf_dptr inp, wf_dptr weight,
                       wf_dptr rstd, int N, int C);
    int (*rope_table)(void *state, wf_dptr cos_tab, wf_dptr sin_tab, int T, int HD, double theta);
    int (*rope_fwd)(void *state, wf_dptr x, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T, int n_heads, int HD,
                    int stride);
    int (*rope_bwd)(void *state, wf_dptr dx, wf_dptr cos_tab, wf_dptr sin_tab, int B, int T, int n_heads,
                    int HD, int stride);
    size_t (*attention_scratch)(void *state, int T, int n_threads);
    int (*attention_fwd)(void *state, wf_dptr out, wf_dptr lse, wf_dptr qkv, int B, int T, int NH, int NKV,
                         int HD, wf_dptr scratch, int n_threads);
    int (*attention_bwd)(void *state, wf_dptr dqkv, wf_dptr dout, wf_dptr qkv, wf_dptr out, wf_dptr lse, int B,
                         int T, int NH, int NKV, int HD, wf_dptr scratch, int n_threads);
    int (*swiglu_fwd)(void *state, wf_dptr out, wf_dptr h13, int N, int H);
    int (*swiglu_bwd)(void *state, wf_dptr dh13, wf_dptr dout, wf_dptr h13, int N, int H);
    int (*embedding_fwd)(void *state, wf_dptr out, wf_dptr tokens, wf_dptr wte, int N, int C);
    int (*embedding_bwd)(void *state, wf_dptr dwte, wf_dptr dout, wf_dptr tokens, int N, int C);
    int (*crossentropy_fwd)(void *state, wf_dptr losses, wf_dptr lse, wf_dptr logits, wf_dptr targets, int N,
                            int V);
    int (*crossentropy_bwd)(void *state, wf_dptr logits, wf_dptr lse, wf_dptr targets, int N, int V,
                            float dloss);
    int (*sumsq)(void *state, wf_dptr x, size_t n, double *out);
    int (*first_nonfinite)(void *state, wf_dptr x, size_t n, size_t *index);
    int (*loss_sum)(void *state, wf_dptr losses, wf_dptr targets, size_t n, double *sum, size_t *n_valid);
    int (*add)(void *state, wf_dptr y, wf_dptr a, wf_dptr b, size_t n);
    int (*axpby)(void *state, wf_dptr y, wf_dptr x, float a, float b, size_t n);
    int (*cast)(void *state, wf_dptr dst, wf_dptr src, size_t n);
    int (*adamw)(void *state, wf_dptr p, wf_dptr g, wf_dptr m, wf_dptr v, const wf_adamw_span *ranges,
                 int n_ranges, size_t total, wf_adamw_coef k);
} wf_backend_ops;

typedef const wf_backend_ops *(*wf_backend_ops_fn)(void);

struct wf_backend {
    const wf_backend_ops *ops;
    void *state;
    int shared; /* wf_backend_cpu's: never closed */
};

/* The backends compiled into libweft. */
const wf_backend_ops *wf__backend_cpu_ops(void);
const wf_backend_ops *wf__backend_ref_ops(void);

/* Makes `ops` openable by its name (tests plant backends so); at most a
 * few. WF_ERR_INVALID for a wrong ABI or a full list. */
wf_status wf__backend_register(const wf_backend_ops *ops);

/* The host-memory calls the cpu and ref backends share (backend.c). */
int wf__backend_host_alloc(void *state, size_t bytes, void **out);
void wf__backend_host_free(void *state, void *p);
int wf__backend_host_copy(void *state, void *dst, const void *src, size_t bytes);
int wf__backend_host_fill(void *state, void *dst, int byte, size_t bytes);
int wf__backend_host_sync(void *state);
int wf__backend_host_mem_info(void *state, size_t *free_bytes, size_t *total_bytes);
wf_backend_mark wf__backend_host_mark(void *state);
double wf__backend_host_mark_seconds(void *state, wf_backend_mark a, wf_backend_mark b);

#endif
