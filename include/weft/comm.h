/* weft: the distributed layer. A communicator over the ranks of a
 * data-parallel job, the bucketed gradient reducer of DDP, the ZeRO-1
 * partition of the flat parameter buffer, and the collective watchdog.
 *
 * Backends. Without a launcher weft is one process and uses the
 * single-process backend: no MPI library is loaded or needed. Under
 * `mpirun`/`mpiexec`/`srun` the communicator loads an MPI backend, a shared
 * object built per MPI implementation (libweft-mpi-openmpi.so,
 * libweft-mpi-mpich.so) that weft opens with dlopen, so that the weft binary
 * itself never links libmpi. Which one is chosen and where it is searched:
 * wf_comm_create below and docs/distributed.md.
 *
 * Threads. A communicator is used by one thread at a time (MPI is
 * initialised at MPI_THREAD_SERIALIZED); its watchdog thread only reads
 * clocks and the flight recorder and never calls MPI.
 *
 * Collectives must be issued in the same order on every rank, as MPI
 * requires. Every call takes a `tag` (may be NULL) that names it in the
 * flight recorder and in the watchdog's report ("grad bucket 3/8", "agree").
 *
 * Sub-communicators (wf_comm_split) and the device mesh (wf_mesh) give
 * each parallelism axis its own communicator; point-to-point messages
 * (wf_comm_send/recv) carry a pipeline's activations. This module does
 * not do: the parallelism itself (the trainer's), or GPU buffers.
 */
#ifndef WEFT_COMM_H
#define WEFT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "weft/status.h"

typedef struct wf_comm wf_comm;

typedef enum {
    WF_COMM_SUM = 0,
    WF_COMM_AVG, /* sum / world size (floating point only) */
    WF_COMM_MAX,
    WF_COMM_MIN,
    WF_COMM_BOR  /* bitwise or (integers only) */
} wf_comm_op;

/* Called by the watchdog, on its own thread, instead of its default action
 * (log the report and _exit): for tests. `report` is the text it would log. */
typedef void (*wf_comm_timeout_fn)(void *ctx, const char *report);

typedef struct {
    /* Backend: NULL or "auto" decides from the environment (see
     * wf_comm_create); "single", "openmpi", "mpich", or a path to a backend
     * shared object. The WEFT_DIST_BACKEND environment variable, when set,
     * takes the place of "auto". */
    const char *backend;
    /* Watchdog: a collective that blocks longer than timeout_first_s while
     * the step (wf_comm_set_step) is below first_steps, or timeout_s after,
     * ends the process (see "Watchdog" below). <= 0 disables that phase's
     * timeout; both <= 0 start no watchdog thread. */
    double timeout_first_s;  /* default 600 */
    double timeout_s;        /* default 300 */
    int64_t first_steps;     /* default 2: steps 0 and 1 get timeout_first_s */
    /* The option the timeout's report tells the user to raise, for each
     * phase, as the caller's user knows it (weft train:
     * "dist.timeout_first_s" and "dist.timeout_s"; weft doctor:
     * "--timeout"). NULL: "timeout_first_s" and "timeout_s", these
     * fields' names. Copied (up to 63 bytes). */
    const char *timeout_first_name;
    const char *timeout_name;
    int recorder_size;       /* flight recorder entries, default 64 (>= 4) */
    int timeout_exit_code;   /* the process's exit status on a timeout, default 3 */
    /* When set, the watchdog also writes its report to the file
     * report_dir/watchdog-rank<r>.txt (the folder must exist). */
    const char *report_dir;
    /* Tests only: replaces the default timeout action. */
    wf_comm_timeout_fn on_timeout;
    void *on_timeout_ctx;
} wf_comm_options;

wf_comm_options wf_comm_options_default(void);

/* What wf_comm_create would pick: "single", "openmpi", "mpich" or a path
 * (from opts->backend, else WEFT_DIST_BACKEND, else the launcher's
 * environment variables). Never NULL; the string is static or opts'. */
const char *wf_comm_detect_backend(const wf_comm_options *opts);

/* Creates the communicator of this process (once per process).
 *
 * "auto" picks, from the environment:
 *   OMPI_COMM_WORLD_SIZE set             -> openmpi (Open MPI's mpirun)
 *   PMI_RANK / PMI_SIZE set              -> mpich   (MPICH's Hydra mpiexec)
 *   SLURM_STEP_NUM_TASKS set (srun)      -> PMIX_RANK set: openmpi, else mpich
 *   nothing                              -> single
 * The MPI backend "NAME" is the file libweft-mpi-NAME.so, searched in
 * $WEFT_DIST_LIB_DIR, the executable's folder, its parent and grandparent
 * (build/tests/tools/x finds build/), and ../lib/weft from the executable.
 * A launcher detected but no backend loadable is an error that names every
 * place tried and what to do. Sets the log's rank prefix
 * (wf_log_set_rank). Destroy with wf_comm_destroy, which finalizes MPI. */
wf_status wf_comm_create(wf_comm **out, const wf_comm_options *opts);
void wf_comm_destroy(wf_comm *c); /* accepts NULL; calls MPI_Finalize */

int wf_comm_rank(const wf_comm *c);
int wf_comm_size(const wf_comm *c);
int wf_comm_local_rank(const wf_comm *c); /* rank within this node */
/* "single", "openmpi" or "mpich"; and the MPI library's version line. */
const char *wf_comm_backend(const wf_comm *c);
const char *wf_comm_library_version(const wf_comm *c);
/* The file the MPI backend was loaded from (libweft-mpi-NAME.so), or ""
 * for the single-process backend. */
const char *wf_comm_backend_path(const wf_comm *c);

/* Ends every rank of the job now with `code` (MPI_Abort; exit() in the
 * single-process backend). For main() only, when a rank must leave while
 * others may be blocked in a collective. Does not return. */
void wf_comm_abort(wf_comm *c, int code) __attribute__((noreturn));

/* The training step the watchdog and the flight recorder attribute
 * collectives to; also chooses the watchdog's timeout. Call it at the
 * start of every step. */
void wf_comm_set_step(wf_comm *c, int64_t step);

/* --- Blocking collectives. Counts are in elements. ------------------- */

/* In place: buf (n) becomes the op over ranks. op: SUM, AVG, MAX, MIN.
 * Open MPI and MPICH give every rank bitwise the same result (tested at
 * 1, 2 and 4 ranks; the MPI standard recommends but does not promise it):
 * DDP's replicas stay identical only because of it. wf_comm_check_replicas
 * verifies it on real data. */
wf_status wf_comm_all_reduce(wf_comm *c, float *buf, size_t n, wf_comm_op op, const char *tag);
wf_status wf_comm_all_reduce_f64(wf_comm *c, double *buf, size_t n, wf_comm_op op,
                                 const char *tag);
/* Integers; op: SUM, MAX, MIN, BOR (no AVG). */
wf_status wf_comm_all_reduce_i32(wf_comm *c, int32_t *buf, size_t n, wf_comm_op op,
                                 const char *tag);

/* Reduce-scatter: `send` holds sum(counts) floats laid out as rank 0's
 * part, rank 1's part, ...; `recv` (counts[rank]) gets the op over ranks
 * of this rank's part. counts has wf_comm_size entries, any of them may be
 * 0. `recv` must not overlap `send`. op: SUM or AVG. */
wf_status wf_comm_reduce_scatter(wf_comm *c, const float *send, float *recv, const size_t *counts,
                                 wf_comm_op op, const char *tag);

/* All-gather in place: buf holds sum(counts) floats; this rank's part
 * (counts[rank] floats at offset sum(counts[0..rank))) is sent, the others
 * are overwritten with the other ranks' parts. */
wf_status wf_comm_all_gather(wf_comm *c, float *buf, const size_t *counts, const char *tag);

/* Gathers `bytes` bytes from every rank into out (world size x bytes, in
 * rank order) on every rank: per-rank checksums, sizes or names. `mine`
 * must not overlap out. bytes <= 2^31-1. */
wf_status wf_comm_all_gather_bytes(wf_comm *c, const void *mine, void *out, size_t bytes,
                                   const char *tag);

/* Checks that `bytes` bytes of buf are the same on every rank (a hash of
 * rank 0's, broadcast, compared, counted): WF_ERR_INTERNAL on every rank
 * if not, naming `what`, how many ranks differ and the first of them.
 * Collective. For DDP's parameters, e.g. before a checkpoint. */
wf_status wf_comm_check_replicas(wf_comm *c, const void *buf, size_t bytes, const char *what);

/* Copies `bytes` bytes of buf on `root` to every rank's buf. */
wf_status wf_comm_broadcast(wf_comm *c, void *buf, size_t bytes, int root, const char *tag);

wf_status wf_comm_barrier(wf_comm *c, const char *tag);

/* --- Non-blocking all-reduce. ------------------------------------------
 * A request is a caller-owned handle; at most WF_COMM_MAX_REQUESTS may be
 * outstanding. The buffer must not be touched until the request completed
 * (wait, or a test that reported done). MPI progresses a non-blocking
 * collective only inside MPI calls: call wf_comm_test (or wf_comm_progress)
 * now and then while computing, or the work happens in the final wait. */
#define WF_COMM_MAX_REQUESTS 256
typedef struct {
    int slot;     /* -1: no request (already completed or never started) */
    uint64_t seq; /* its number in the flight recorder */
} wf_comm_request;

wf_status wf_comm_iall_reduce(wf_comm *c, float *buf, size_t n, wf_comm_op op, const char *tag,
                              wf_comm_request *req);
/* Non-blocking reduce-scatter: as wf_comm_reduce_scatter (counts may be
 * 0 for any rank, including this one; op SUM or AVG), completed by test or
 * wait like an all-reduce. `counts` is copied: the caller may reuse it at
 * once; `send` and `recv` must stay untouched until completion. */
wf_status wf_comm_ireduce_scatter(wf_comm *c, const float *send, float *recv, const size_t *counts,
                                  wf_comm_op op, const char *tag, wf_comm_request *req);
/* Non-blocking all-gather in place: as wf_comm_all_gather (buf holds
 * sum(counts) floats, this rank's part at its offset is sent, the others
 * are overwritten), completed by test or wait like the others (watchdog,
 * flight recorder, trace spans `iall_gather` / `wait iall_gather`); FSDP's
 * parameter prefetch. `counts` is copied; `buf` must stay untouched until
 * completion. */
wf_status wf_comm_iall_gather(wf_comm *c, float *buf, const size_t *counts, const char *tag,
                              wf_comm_request *req);
/* *done = 1 once complete (then req->slot is -1 and the buffer holds the
 * result, averaged for AVG). */
wf_status wf_comm_test(wf_comm *c, wf_comm_request *req, int *done);
/* Blocks until complete (watched by the watchdog). A request with slot -1
 * returns at once. */
wf_status wf_comm_wait(wf_comm *c, wf_comm_request *req);
/* Tests every outstanding request once: drives MPI's progress. */
wf_status wf_comm_progress(wf_comm *c);

/* --- Sub-communicators. -------------------------------------------------
 * Collective over `c`: the ranks that pass the same color (>= 0) form a
 * new communicator, ranked by key, then by their rank in `c`; named
 * `axis` (1 to 15 characters: "tp", "dp", "pp"), which every collective
 * on it carries in the flight recorder and the watchdog's report
 * ("all_reduce[tp]") and its errors name with the world rank. It shares
 * c's backend, watchdog and step; it has its own request slots. Destroy
 * it with wf_comm_destroy before `c`. WF_ERR_UNSUPPORTED for a backend
 * built without sub-communicators. */
wf_status wf_comm_split(wf_comm *c, int color, int key, const char *axis, wf_comm **out);
/* The axis name of a communicator made by wf_comm_split; "" for the world. */
const char *wf_comm_axis(const wf_comm *c);

/* --- Point-to-point messages. -------------------------------------------
 * `bytes` bytes to or from rank `peer` (another rank of `c`), matched by
 * `msg_tag` (0 .. WF_COMM_MAX_MSG_TAG) and by order between one pair of
 * ranks, as MPI matches them. Non-blocking forms complete by
 * wf_comm_test/wait like the collectives (request slots, flight recorder
 * entries "send to 3" / "recv from 1" with `tag`, the watchdog while
 * waiting). A send's buffer must stay untouched until it completes. */
#define WF_COMM_MAX_MSG_TAG 32767
wf_status wf_comm_isend(wf_comm *c, const void *buf, size_t bytes, int peer, int msg_tag, const char *tag,
                        wf_comm_request *req);
wf_status wf_comm_irecv(wf_comm *c, void *buf, size_t bytes, int peer, int msg_tag, const char *tag,
                        wf_comm_request *req);
/* Blocking: isend or irecv, then wait. */
wf_status wf_comm_send(wf_comm *c, const void *buf, size_t bytes, int peer, int msg_tag, const char *tag);
wf_status wf_comm_recv(wf_comm *c, void *buf, size_t bytes, int peer, int msg_tag, const char *tag);

/* --- The device mesh. ---------------------------------------------------
 * The world's ranks laid out as an n-dimensional grid with named axes,
 * outermost first ({"pp", "dp", "tp"}): world rank = row-major index of
 * the coordinates, so the innermost axis's groups are consecutive ranks
 * (one node on a cluster). Each axis gets a sub-communicator of the ranks
 * that share every other coordinate. */
#define WF_MESH_MAX_AXES 4
typedef struct wf_mesh wf_mesh;
/* Collective over `world`. Refused (WF_ERR_CONFIG, naming the sizes) when
 * the product of `sizes` is not the world size, or a size is < 1;
 * WF_ERR_INVALID for a repeated or empty name, or n_axes outside
 * 1 .. WF_MESH_MAX_AXES. Names are copied. */
wf_status wf_mesh_create(wf_comm *world, int n_axes, const char *const *names, const int *sizes, wf_mesh **out);
void wf_mesh_destroy(wf_mesh *m); /* accepts NULL; destroys the axes' communicators */
/* The axis `name`'s communicator, its size, and this rank's coordinate on
 * it; NULL, 0 and -1 for a name the mesh lacks. */
wf_comm *wf_mesh_comm(const wf_mesh *m, const char *name);
int wf_mesh_size(const wf_mesh *m, const char *name);
int wf_mesh_coord(const wf_mesh *m, const char *name);
/* The world rank at `coords` (n_axes of them, outermost first); -1 if any
 * is out of range. */
int wf_mesh_rank_at(const wf_mesh *m, const int *coords);

/* --- Rank agreement. ----------------------------------------------------
 * Each rank passes its own word of flags; all get the OR over ranks, so
 * that what one rank saw (a file, a signal, an error) makes every rank take
 * the same decision at the same step. One small all-reduce. The meaning of
 * the bits is the caller's: the communicator knows no training words (the
 * trainer's are in src/train/train_impl.h; docs/distributed.md shows the
 * step-loop pattern). */
wf_status wf_comm_agree(wf_comm *c, uint32_t *flags, const char *tag);

/* --- Flight recorder. ---------------------------------------------------
 * The last recorder_size collectives: number, kind, tag, step, bytes,
 * times and state. Writes them, newest last, as text lines to `out` (cap
 * bytes, always NUL-terminated); returns the length it needed. */
size_t wf_comm_recorder_dump(wf_comm *c, char *out, size_t cap);
/* Collectives completed so far (all kinds). */
uint64_t wf_comm_completed(const wf_comm *c);

/* --- DDP: the bucketed gradient reducer. --------------------------------
 * The gradients of all tensors live in one float buffer. Buckets of about
 * bucket_bytes are planned over the tensors in reverse order (backward
 * produces the last layers' gradients first); each bucket is a contiguous
 * span of the buffer. When the backward pass reports (wf_reducer_ready)
 * that every tensor of a bucket has its final gradient, the bucket's
 * non-blocking all-reduce (AVG, or SUM: wf_reducer_set_op) starts, while
 * backward goes on. Buckets
 * always start in bucket order, so every rank issues the same collectives
 * in the same order whatever order tensors become ready in. */
typedef struct {
    size_t offset; /* in floats from the start of the gradient buffer */
    size_t numel;
} wf_comm_span;

typedef struct wf_reducer wf_reducer;

/* Plans buckets over `tensors` (n_tensors spans sorted by offset, not
 * overlapping) of `grads`. A tensor is never split; a bucket closes once it
 * holds >= bucket_bytes (the last one may be smaller). `c` and `grads` must
 * outlive the reducer. */
wf_status wf_reducer_create(wf_reducer **out, wf_comm *c, float *grads,
                            const wf_comm_span *tensors, int n_tensors, size_t bucket_bytes);
void wf_reducer_destroy(wf_reducer *r); /* accepts NULL */

/* The buckets' reduction: WF_COMM_AVG (the default: finish leaves the mean
 * over ranks) or WF_COMM_SUM (the sum, for gradients the caller has already
 * scaled by 1 / world size, as PyTorch DDP and weft's trainer do: that
 * saves AVG's pass over every bucket after its transfer; for a world size
 * that is a power of two the result has AVG's bits). Any other op is
 * WF_ERR_INVALID, as is a change while buckets of a step are in flight. */
wf_status wf_reducer_set_op(wf_reducer *r, wf_comm_op op);

int wf_reducer_num_buckets(const wf_reducer *r);
/* Bucket b's span of the gradient buffer and its tensors [first, last]. */
wf_comm_span wf_reducer_bucket(const wf_reducer *r, int b, int *first_tensor, int *last_tensor);
/* The bucket tensor i belongs to. */
int wf_reducer_bucket_of(const wf_reducer *r, int tensor);

/* Tensor i's gradient is final for this step. Starts every bucket that is
 * now complete and whose predecessors have started, and tests the requests
 * in flight (MPI progress). Marking a tensor twice in a step is an error. */
wf_status wf_reducer_ready(wf_reducer *r, int tensor);
/* Starts the buckets not started yet (tensors never marked ready count as
 * ready), waits for all, and resets for the next step. After it the
 * gradient buffer holds the average over ranks (the sum with SUM). Call it on every rank every
 * step, also after a failed backward, so that collectives stay matched. */
wf_status wf_reducer_finish(wf_reducer *r);
/* Buckets started by ready() (not by finish()) in the last finished step:
 * how much of the reduction was overlapped with backward. */
int wf_reducer_overlapped(const wf_reducer *r);

/* --- ZeRO-1: optimizer state sharded over ranks. ------------------------
 * The flat parameter buffer of n floats is split into `world` contiguous
 * shards of shard_size floats (ceil(n / world) rounded up to `align`
 * floats); the last shards are shorter or empty, so no buffer needs
 * padding. A step: the reduce-scatter of the gradient into this rank's
 * shard (wf_comm_reduce_scatter after the backward, or bucket by bucket
 * during it: wf_reducer_set_shards), the optimizer updates params[offset, offset + count)
 * with its shard of the state, wf_comm_all_gather(params). */
typedef struct {
    size_t n, shard_size, align;
    int world;
    size_t *counts;  /* (world) floats per rank */
    size_t *offsets; /* (world) first float of each rank's shard */
} wf_zero1_plan;

/* The reducer (above) in ZeRO-1's mode: each bucket is reduce-scattered instead of all-reduced.
 * Rank r's part of bucket [a, b) is [a, b) and the shard [offsets[r],
 * offsets[r] + counts[r]) of plan `p` (possibly empty); this rank's part
 * lands in `shard` (counts[rank] floats, not inside the gradient buffer)
 * at offset max(a, offsets[rank]) - offsets[rank]. After finish `shard`
 * holds this rank's shard of the reduced gradient; the gradient buffer is
 * only read. `p` must cover the gradient buffer's tensors and may be freed
 * after this call. Call before any bucket of a step started. */
wf_status wf_reducer_set_shards(wf_reducer *r, const wf_zero1_plan *p, int rank,
                                float *shard);

/* align: floats, >= 1 (16 keeps every shard on its own cache lines). */
wf_status wf_zero1_plan_init(wf_zero1_plan *p, size_t n, int world, size_t align);
void wf_zero1_plan_deinit(wf_zero1_plan *p); /* accepts a zeroed plan */

/* Bytes of optimizer state (state_floats_per_param floats per parameter,
 * 2 for AdamW) plus the gradient shard on one rank, unsharded and with
 * ZeRO-1, and what ZeRO-1 saves (unsharded - sharded; the sharded figure
 * counts the gradient shard buffer ZeRO-1 adds). */
typedef struct {
    size_t unsharded_bytes, sharded_bytes, saved_bytes;
} wf_zero1_memory;
wf_zero1_memory wf_zero1_plan_memory(const wf_zero1_plan *p, int rank, int state_floats_per_param);

/* Global L2 norm of a sharded gradient: sqrt of the sum over ranks of the
 * sum of squares (double, wf_kern_sumsq's fixed blocks) of each rank's shard
 * (count floats). Collective. With one rank it equals wf_grad_norm of the
 * same gradient bit for bit. */
wf_status wf_zero1_grad_norm(wf_comm *c, const float *shard, size_t count, double *norm);

#endif
