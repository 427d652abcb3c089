/* weft: checkpoints (docs/formats/checkpoint.md, docs/checkpoints.md).
 *
 * A checkpoint is a directory `step-NNNNNNN/` holding `manifest.json` and
 * one data file per writing rank. The manifest has the format version, the
 * step, the state a resume needs (config, model config, optimizer step,
 * loader cursor, seeds: a small key/value store, wf_ckpt_meta) and the
 * tensor table: each tensor by name, dtype and GLOBAL shape, cut into pieces
 * (a box of the tensor: offsets and sizes per dimension) each stored in one
 * data file at an offset, with a length and an XXH3-64 checksum.
 *
 * Writing: with W writing ranks, every replicated tensor is split along
 * dim 0 into W near-equal row ranges and rank r writes range r of every
 * tensor, so that replicated state (parameters, AdamW moments under data
 * parallelism) costs each rank 1/W of the I/O, as PyTorch's distributed
 * checkpoint does; a sharded tensor (ZeRO-1's moments: each rank holds a
 * different element range) is written by each rank for the range it
 * holds. Reading: any row range or flat element range of a tensor can be
 * read whatever W and the layout were, so a checkpoint saved by W ranks
 * loads on any other number (resharding), sharded or not.
 *
 * Saves are atomic: everything is written into `.tmp-step-NNNNNNN.<pid>`
 * beside the final directory, fsynced, renamed into place, and the parent
 * directory fsynced. A crash leaves the previous checkpoints intact and at
 * worst a `.tmp-*` directory, which is never taken for a checkpoint and is
 * removed by wf_ckpt_cleanup. Asynchronous saves copy the state into a
 * staging buffer (allocated once) and return; a writer thread does the I/O.
 *
 * A multi-rank save is collective over a communicator (dist.h). Sync, it
 * writes and commits before it returns. Async, it stages this rank's part
 * and returns; the writer thread writes this rank's data file and never
 * calls the communicator; the commit (checksums gathered, rank 0 writes the
 * manifest and renames) is a collective the caller's thread runs later,
 * when every rank's write is done (wf_ckpt_writer_busy, _commit).
 * This module does not: compress, or write to object stores.
 */
#ifndef WEFT_CKPT_H
#define WEFT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "weft/comm.h"
#include "weft/model.h"
#include "weft/status.h"

#define WF_CKPT_FORMAT_VERSION 1
#define WF_CKPT_MAX_DIMS 4
#define WF_CKPT_MANIFEST "manifest.json"

/* One tensor of the state as this process holds it, fp32, row-major. A
 * save reads `data`; a load writes it.
 *
 * Replicated (shard_size 0, the default): every rank holds the whole
 * tensor, `data` has prod(shape) floats, and with W writing ranks rank r
 * writes its row range.
 *
 * Sharded (shard_size > 0; ZeRO-1's optimizer state): the tensor is the
 * elements [shard_base, shard_base + prod(shape)) of a flat buffer of
 * which rank r holds elements [r * shard_size, (r + 1) * shard_size), so
 * every rank holds a different contiguous element range of the tensor
 * (wf_ckpt_tensor_range; possibly empty), and `data` points at the first
 * element of that range. Each rank writes exactly its range: up to
 * 2 * ndim - 1 boxes (a partial first row, whole rows, a partial last row,
 * recursively for more dimensions). The W writing ranks must cover the
 * tensor: W * shard_size >= shard_base + prod(shape). */
typedef struct {
    const char *name;
    int ndim;                          /* 1..WF_CKPT_MAX_DIMS */
    int64_t shape[WF_CKPT_MAX_DIMS];   /* global shape */
    float *data;                       /* replicated: prod(shape) floats; sharded: this rank's range */
    int64_t shard_size;                /* 0: replicated; > 0: elements per rank of the sharded buffer */
    int64_t shard_base;                /* sharded: the tensor's first element in that buffer */
    wf_backend *be;                    /* where data is: NULL host memory, else this backend's memory
                                          (saved through wf_backend_download, loaded through upload) */
} wf_ckpt_tensor;

/* The elements [*begin, *end) of tensor `t` (flat, row-major) that `rank`
 * holds: the whole tensor when replicated; when sharded, its part of the
 * rank's shard (begin == end when it holds none). */
void wf_ckpt_tensor_range(const wf_ckpt_tensor *t, int rank, int64_t *begin, int64_t *end);

/* Scalar state saved with the tensors: keys are "name" or "section.name"
 * (stored nested in the manifest's "state" object), values unsigned
 * integers (at most INT64_MAX), doubles (round-trip exact) or strings. */
typedef struct wf_ckpt_meta wf_ckpt_meta;
wf_ckpt_meta *wf_ckpt_meta_create(void); /* NULL when out of memory */
void wf_ckpt_meta_destroy(wf_ckpt_meta *m); /* accepts NULL */
wf_status wf_ckpt_meta_set_u64(wf_ckpt_meta *m, const char *key, uint64_t v);
wf_status wf_ckpt_meta_set_f64(wf_ckpt_meta *m, const char *key, double v);
wf_status wf_ckpt_meta_set_str(wf_ckpt_meta *m, const char *key, const char *v);
/* Stores every field of `c` under "model.*" (with the resolved ffn width). */
wf_status wf_ckpt_meta_set_model_config(wf_ckpt_meta *m, const wf_model_config *c);

/* ---- writing ---- */

typedef struct {
    int rank, world_size; /* this process writes rank `rank`'s part of every tensor */
    int async;            /* 1: wf_ckpt_save copies into a staging buffer and a thread writes */
    int keep_last;        /* after each save, keep only the newest keep_last checkpoints of the
                             parent directory (0: keep all) ... */
    uint64_t keep_every;  /* ... plus those whose step is a multiple of keep_every (0: none) */
} wf_ckpt_writer_opts;

/* What one save cost. */
typedef struct {
    uint64_t step;
    uint64_t bytes;          /* data bytes this rank wrote */
    double blocked_seconds;  /* the caller's time in wf_ckpt_save (waiting for the previous
                                save, copying into the staging buffer; sync: all of it) */
    double copy_seconds;     /* of which copying into the staging buffer (async) */
    double write_seconds;    /* writing, fsyncs, manifest and rename (async with several ranks:
                                this rank's data file only, on the writer thread) */
    double commit_seconds;   /* async with several ranks: the collective commit on the caller's
                                thread (gather, manifest, rename; in blocked_seconds too) */
    int pruned;              /* older checkpoints removed after it */
    wf_status status;        /* the save's result (async saves report it late) */
    char error[1024];        /* why it failed ("" when it did not), the message the failing
                                call (or, with several ranks, the failing rank) gave */
} wf_ckpt_save_stats;

typedef struct wf_ckpt_writer wf_ckpt_writer;

/* Plans the layout of the state `tensors` (n of them; names unique; the
 * array and the names are copied, the data pointers must stay valid for
 * the writer's life) and, in async mode, allocates the staging buffer (this
 * rank's bytes) and starts the writer thread. */
wf_status wf_ckpt_writer_create(wf_ckpt_writer **out, const wf_ckpt_tensor *tensors, size_t n,
                                const wf_ckpt_writer_opts *opts);
/* The writer of rank opts->rank of opts->world_size > 1 ranks (the ranks of
 * `comm`, which must outlive the writer). wf_ckpt_save is then collective:
 * every rank writes its data file, rank 0 gathers the pieces' checksums,
 * writes the manifest and commits once every data file is on disk, and
 * prunes; every rank returns the same status (a rank that did not fail
 * names the first that did). Sync (opts->async 0): all of it inside
 * wf_ckpt_save. Async: wf_ckpt_save stages and returns, the writer thread
 * writes this rank's data file, and the commit runs later on the caller's
 * thread, collectively: in wf_ckpt_writer_commit (once no rank is busy),
 * or else in the next wf_ckpt_save or in wf_ckpt_writer_wait. With
 * world_size 1 it is wf_ckpt_writer_create. */
wf_status wf_ckpt_writer_create_ranks(wf_ckpt_writer **out, const wf_ckpt_tensor *tensors, size_t n,
                                      const wf_ckpt_writer_opts *opts, wf_comm *comm);
/* Waits for a save in flight (its error, if any, is lost: call
 * wf_ckpt_writer_wait first to see it), stops the thread, frees. Accepts NULL.
 * Async with several ranks it waits for this rank's write only and never
 * commits (it is not collective): a save staged but not committed is lost,
 * its `.tmp-*` folder left for wf_ckpt_cleanup; call wf_ckpt_writer_wait on
 * every rank first to commit it. */
void wf_ckpt_writer_destroy(wf_ckpt_writer *w);

/* Saves the state as it is now, with `step` and `meta`, into the checkpoint
 * directory `dir` (e.g. RUN/checkpoints/step-0000100; its parent must
 * exist). An existing `dir` is replaced atomically. Sync: returns when the
 * checkpoint is on disk. Async: first waits for the previous save (two saves
 * never overlap and the staging buffer is never overwritten while it is
 * being written), copies the tensors and meta, and returns; the state may
 * then change. A previous async save's failure is returned here. `stats`
 * (may be NULL) gets what is known on return.
 * Several ranks: collective, every rank at the same step with the same
 * `dir` and `step`; the manifest holds rank 0's `meta`. Async, a previous
 * save not committed yet is committed first (after this rank's write of it
 * is done), and its failure returned on every rank without staging the new
 * one. */
wf_status wf_ckpt_save(wf_ckpt_writer *w, const char *dir, uint64_t step, const wf_ckpt_meta *meta,
                       wf_ckpt_save_stats *stats);

/* Waits until no save is in flight. Returns the status of the last save;
 * `stats` (may be NULL) gets its figures. Returns WF_OK at once when there
 * was none. Async with several ranks: collective (every rank calls it at
 * the same point): commits a save still pending, as wf_ckpt_writer_commit;
 * call it before the end of training so that the last save is committed. */
wf_status wf_ckpt_writer_wait(wf_ckpt_writer *w, wf_ckpt_save_stats *stats);

/* Does not block: 1 while this rank's asynchronous write is running, else
 * 0 (always 0 for a sync writer). With several ranks the caller ORs it
 * over ranks once a step (a "busy" bit in the trainer's wf_comm_agree word) and
 * commits when no rank is busy. */
int wf_ckpt_writer_busy(wf_ckpt_writer *w);

/* 1 when an asynchronous save of several ranks was staged and is not
 * committed yet (the same on every rank: saves and commits are
 * collective); else 0. */
int wf_ckpt_writer_pending(const wf_ckpt_writer *w);

/* Async with several ranks: collective. Commits the pending save: waits for
 * this rank's write (at once when the ranks agreed that none is busy), the
 * ranks agree that every data file was written, rank 0 gathers the
 * checksums, writes the manifest, renames the folder into place and
 * prunes; every rank returns the same status. A rank whose write failed
 * makes every rank return its error, naming the rank and the file; nothing
 * is committed and the earlier checkpoints are intact. `stats` (may be
 * NULL) gets the save's figures (`pruned`: rank 0's count), and
 * wf_ckpt_writer_poll reports it too. A no-op returning WF_OK, with
 * `stats` untouched, when nothing is pending (on every rank alike), in
 * sync mode and with one rank. */
wf_status wf_ckpt_writer_commit(wf_ckpt_writer *w, wf_ckpt_save_stats *stats);

/* Does not block: 1 when a save completed (several ranks, async: was
 * committed) since the last poll, wait or save, with its figures (and
 * status) in *stats; else 0. */
int wf_ckpt_writer_poll(wf_ckpt_writer *w, wf_ckpt_save_stats *stats);

/* Bytes of the staging buffer (0 in sync mode). */
size_t wf_ckpt_writer_staging_bytes(const wf_ckpt_writer *w);

/* What one save adds to the checkpoint filesystem, over all ranks: the
 * data files' bytes plus a bound on the manifest's (*bytes), and the
 * files and folders it creates (*files: a data file per rank, the
 * manifest, the folder). For a free-space check before a save. */
void wf_ckpt_writer_save_need(const wf_ckpt_writer *w, uint64_t *bytes, uint64_t *files);

/* ---- reading ---- */

typedef struct wf_ckpt wf_ckpt;

/* Opens the checkpoint directory `dir`: parses and validates the manifest
 * (every piece inside its file, the pieces of each tensor tiling its shape
 * exactly) and checks that every data file is there, with the size the
 * manifest says and a header that matches. Checksums are checked as pieces
 * are read (wf_ckpt_read_rows) or all at once (wf_ckpt_verify). */
wf_status wf_ckpt_open(wf_ckpt **out, const char *dir);
void wf_ckpt_close(wf_ckpt *c); /* accepts NULL */

const char *wf_ckpt_path(const wf_ckpt *c); /* the directory */
uint64_t wf_ckpt_step(const wf_ckpt *c);
int wf_ckpt_world_size(const wf_ckpt *c);   /* writing ranks */
uint64_t wf_ckpt_data_bytes(const wf_ckpt *c);

typedef struct {
    const char *name;
    const char *dtype;        /* "F32" */
    int ndim;
    int64_t shape[WF_CKPT_MAX_DIMS];
    int n_pieces;
} wf_ckpt_tensor_desc;
size_t wf_ckpt_num_tensors(const wf_ckpt *c);
void wf_ckpt_tensor_at(const wf_ckpt *c, size_t i, wf_ckpt_tensor_desc *out);
/* Index of tensor `name`, or -1. */
long wf_ckpt_find(const wf_ckpt *c, const char *name);

/* Scalar state. A missing key or a value of another type is
 * WF_ERR_FORMAT naming the key and the manifest. Strings belong to `c`. */
wf_status wf_ckpt_get_u64(const wf_ckpt *c, const char *key, uint64_t *v);
wf_status wf_ckpt_get_f64(const wf_ckpt *c, const char *key, double *v);
wf_status wf_ckpt_get_str(const wf_ckpt *c, const char *key, const char **v);
/* The model config stored by wf_ckpt_meta_set_model_config. */
wf_status wf_ckpt_get_model_config(const wf_ckpt *c, wf_model_config *out);

/* Reads rows [row_begin, row_end) along dim 0 of tensor `name` (the full
 * extent of the other dimensions) into `dst`, from whichever pieces hold
 * them: this is how a different number of ranks loads a checkpoint. Each
 * piece read is checked against its checksum once. Errors name the data
 * file, the tensor and the byte range. */
wf_status wf_ckpt_read_rows(wf_ckpt *c, const char *name, int64_t row_begin, int64_t row_end, float *dst);

/* Reads the elements [begin, end) of tensor `name`, flattened row-major,
 * into `dst` (end - begin floats), from whichever pieces hold them: how a
 * rank loads its shard of sharded state whatever layout wrote it. Checks
 * and errors as wf_ckpt_read_rows. */
wf_status wf_ckpt_read_range(wf_ckpt *c, const char *name, int64_t begin, int64_t end, float *dst);

/* Tensor `name` in place, without a copy: when one piece holds the whole
 * tensor (every tensor of a checkpoint that one rank wrote), *data points
 * at its prod(shape) floats, row-major, inside the read-only mapping of the
 * data file, valid while `c` is open. The piece's checksum is checked
 * first (once, as wf_ckpt_read_rows does). When the tensor is cut into
 * several pieces (written by several ranks), or its piece cannot be used in
 * place (not 4-byte aligned, or a big-endian host), *data is NULL and WF_OK
 * is returned: read it with wf_ckpt_read_range instead. WF_ERR_NOTFOUND for
 * an unknown name; checksum errors as wf_ckpt_read_rows. */
wf_status wf_ckpt_view(wf_ckpt *c, const char *name, const float **data);

/* Loads every tensor of `tensors` as the process of rank `rank` holds
 * them (replicated: whole; sharded: the rank's range, wf_ckpt_tensor_range)
 * from the checkpoint, whatever number of ranks and layout wrote it. The
 * checkpoint must hold exactly these names with these global shapes; a
 * difference is WF_ERR_CONFIG naming the tensor. */
wf_status wf_ckpt_load_rank(wf_ckpt *c, const wf_ckpt_tensor *tensors, size_t n, int rank);
/* wf_ckpt_load_rank for rank 0 (the tensors of one process). */
wf_status wf_ckpt_load(wf_ckpt *c, const wf_ckpt_tensor *tensors, size_t n);

/* Checks every piece's checksum. `report` (may be NULL) is called with a
 * message for each bad piece; returns WF_ERR_CHECKSUM (message: the first
 * problem) if any. */
wf_status wf_ckpt_verify(wf_ckpt *c, void (*report)(void *ctx, const char *problem), void *ctx);

/* The manifest text as stored (valid while `c` is open). */
const char *wf_ckpt_manifest_text(const wf_ckpt *c);

/* ---- a directory of checkpoints (RUN/checkpoints) ---- */

/* "root/step-%07llu" into buf (n bytes). */
void wf_ckpt_step_dir(char *buf, size_t n, const char *root, uint64_t step);

/* The steps of the committed checkpoint directories of `root` (names
 * step-<digits>), ascending, in a malloc'd array (caller frees); a missing
 * root is an empty list. */
wf_status wf_ckpt_list(const char *root, uint64_t **steps, size_t *n);

/* Removes what interrupted saves and deletions left in `root` (.tmp-* and
 * .trash-* directories). *removed (may be NULL) gets how many. */
wf_status wf_ckpt_cleanup(const char *root, int *removed);

/* Removes committed checkpoints beyond the newest `keep_last` (0: none
 * removed), except those whose step is a multiple of keep_every (> 0).
 * A checkpoint is renamed away before it is deleted, so a half-deleted one
 * is never seen as a checkpoint. */
wf_status wf_ckpt_prune(const char *root, int keep_last, uint64_t keep_every, int *removed);

/* Opens the newest checkpoint of `root` that opens and verifies, trying
 * older ones after a failure and saying so (WF_WARN: which one, why, which
 * is used instead). *out is NULL with WF_OK when there is none. */
wf_status wf_ckpt_open_latest(const char *root, wf_ckpt **out);

/* Loads the parameters of `m` (tensors named as the model's) from `c`;
 * the model's shapes must match. The optimizer state is left out. */
wf_status wf_ckpt_load_model(wf_ckpt *c, wf_model *m);

/* What a user names on the command line: a checkpoint directory (has
 * manifest.json) is opened as it is; a run directory (has checkpoints/) or
 * a directory of checkpoints gives its newest valid checkpoint (falling
 * back as wf_ckpt_open_latest does). WF_ERR_NOTFOUND says what was
 * looked for. */
wf_status wf_ckpt_open_path(wf_ckpt **out, const char *path);

/* ---- Hugging Face interop (src/ckpt/hf.c) ---- */

/* Writes `m` to `out_dir` in the Hugging Face Llama layout: model.safetensors
 * (F32, or BF16 with bf16 = 1; weft's config kept in __metadata__) and
 * config.json (LlamaForCausalLM). `tokenizer` (may be NULL) is copied to
 * out_dir/tokenizer.json. */
wf_status wf_hf_export(const wf_model *m, const char *out_dir, int bf16, const char *tokenizer);

/* The architecture of a Hugging Face Llama model: `path` is its directory
 * (config.json: hidden_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads, intermediate_size, vocab_size,
 * max_position_embeddings, rms_norm_eps, rope_theta, tie_word_embeddings,
 * initializer_range, with LlamaConfig's defaults for absent ones), or a
 * model.safetensors that weft wrote (its recorded config; also a directory
 * without config.json). What weft cannot represent is WF_ERR_UNSUPPORTED
 * naming the key: rope_scaling, sliding_window / use_sliding_window,
 * attention_bias, mlp_bias, another hidden_act or model_type, a head_dim
 * that does not split hidden_size. `source` (may be NULL) gets the file the
 * architecture came from. */
wf_status wf_hf_read_config(const char *path, wf_model_config *out, char *source, size_t source_size);

/* Initialises the parameters of `m` from a Hugging Face Llama model:
 * `path` is a .safetensors file or a directory with model.safetensors and,
 * if present, config.json, whose sizes must match the model's config.
 * Every tensor of the model must be there with its shape, and nothing
 * else; errors name the file, the tensor or the config field. */
wf_status wf_hf_import(wf_model *m, const char *path);
/* The same checks (once), but only `count` ranges of the model's flat
 * parameter order are read: values [first[i], first[i] + n[i]) into dst[i]
 * (n[i] floats; `m`'s own parameter buffer is not used). dist.shard = fsdp
 * reads each rank's pieces so, never the whole model. */
wf_status wf_hf_import_ranges(const wf_model *m, const char *path, int count, const size_t *first, const size_t *n,
                              float *const *dst);

#endif
