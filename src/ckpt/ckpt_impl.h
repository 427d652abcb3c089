/* Internals of the checkpoint module shared by its files and its unit
 * tests: the layout plan (which rank writes which rows of which tensor, at
 * which offset of its data file) and the storage steps of a save (data
 * file, manifest, commit). The single-process writer runs them for rank 0;
 * tests run them for several simulated ranks to write a multi-rank
 * checkpoint from one process. */
#ifndef WEFT_CKPT_IMPL_H
#define WEFT_CKPT_IMPL_H

#include <jansson.h>
#include <stdint.h>

#include "weft/ckpt.h"

#define WF_CKPT_DATA_MAGIC "WEFTCKPT"
#define WF_CKPT_HEADER_BYTES 64 /* data file header; pieces start here */
#define WF_CKPT_ALIGN 64        /* every piece starts at a multiple of this */

/* One piece: a box of a tensor whose elements are contiguous in the
 * tensor's row-major order (a row range with whole other dims, or a part
 * of a sharded range), written by `rank` at `offset` of its data file. */
typedef struct {
    size_t tensor;
    int rank;
    int64_t row_begin, row_end;       /* the box's extent along dim 0 */
    int64_t elem_begin, elem_end;     /* the same box as flat elements of the tensor */
    int64_t src;                      /* its first element's index in the tensor's `data` */
    int64_t off[WF_CKPT_MAX_DIMS], size[WF_CKPT_MAX_DIMS]; /* the box, as the manifest says it */
    uint64_t offset, length; /* bytes */
} wf_ckpt_piece;

typedef struct {
    wf_ckpt_tensor *tensors; /* copies, with owned names */
    size_t n_tensors;
    int world_size;
    wf_ckpt_piece *pieces;   /* by rank, then tensor order */
    size_t n_pieces;
    size_t *rank_first;      /* (world_size + 1): pieces of rank r are [rank_first[r], rank_first[r+1]) */
    uint64_t *rank_bytes;    /* (world_size): size of each rank's data file */
} wf_ckpt_plan;

/* Rows [*begin, *end) of a dim-0 extent `rows` that rank r of w holds. */
void wf__ckpt_rows_of(int64_t rows, int r, int w, int64_t *begin, int64_t *end);

/* The flat element range [begin, end) (non-empty) of a tensor of shape
 * `shape` (ndim dims), cut into boxes whose elements are contiguous in
 * row-major order: a partial first row, whole rows and a partial last row
 * at each level, at most 2 * ndim - 1. Writes up to that many boxes to
 * off/size (may be NULL to count) and returns how many. */
int wf__ckpt_range_boxes(const int64_t *shape, int ndim, int64_t begin, int64_t end,
                        int64_t (*off)[WF_CKPT_MAX_DIMS], int64_t (*size)[WF_CKPT_MAX_DIMS]);

wf_status wf__ckpt_plan_make(wf_ckpt_plan *p, const wf_ckpt_tensor *t, size_t n, int world_size);
void wf__ckpt_plan_free(wf_ckpt_plan *p);

/* "data-%05d-of-%05d.bin" */
void wf__ckpt_data_name(char *buf, size_t n, int rank, int world_size);

/* The temporary directory a save of `dir` writes into, malloc'd. */
char *wf__ckpt_tmp_path(const char *dir);

/* Copies rank r's data file image (header, pieces, zero padding) into
 * `image` (rank_bytes[r] bytes, zeroed by the caller once). */
wf_status wf__ckpt_stage(const wf_ckpt_plan *p, int rank, uint64_t step, unsigned char *image);

/* Writes rank r's data file into `tmp_dir`, from `image` when non-NULL
 * (made by wf__ckpt_stage) or else from the tensors, fsyncs it, and stores
 * each of its pieces' checksum at sums[piece index]. */
wf_status wf__ckpt_write_data(const wf_ckpt_plan *p, int rank, const char *tmp_dir, uint64_t step,
                             const unsigned char *image, uint64_t *sums);

/* Writes and fsyncs tmp_dir/manifest.json: the plan, the checksums of every
 * piece (sums, by piece index) and the state (a JSON object, or NULL). */
wf_status wf__ckpt_write_manifest(const wf_ckpt_plan *p, const char *tmp_dir, uint64_t step,
                                 const json_t *state, const uint64_t *sums);

/* fsyncs tmp_dir, renames it to `dir` (moving an existing `dir` aside and
 * deleting it after), fsyncs the parent. */
wf_status wf__ckpt_commit(const char *tmp_dir, const char *dir);

/* The JSON object behind a wf_ckpt_meta (borrowed). */
const json_t *wf__ckpt_meta_json(const wf_ckpt_meta *m);

#endif
