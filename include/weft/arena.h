/* weft: arena allocator with counters.
 *
 * An arena hands out aligned blocks from large chunks and frees them all at
 * once (wf_arena_reset or wf_arena_destroy). It is how weft plans memory:
 * size everything, allocate once, carve tensors out of it. The counters
 * (in use, reserved, peak) are what the metrics report.
 *
 * Not thread-safe: one arena belongs to one thread at a time.
 */
#ifndef WEFT_ARENA_H
#define WEFT_ARENA_H

#include <stddef.h>

#include "weft/status.h"

typedef struct wf_arena wf_arena;

typedef struct {
    size_t in_use;    /* bytes handed out and not yet released by a reset */
    size_t reserved;  /* bytes obtained from the system (sum of chunk sizes) */
    size_t peak;      /* highest in_use seen since creation */
    size_t n_allocs;  /* number of wf_arena_alloc calls since creation */
} wf_arena_stats;

/* Creates an arena that takes memory from the system in chunks of at least
 * `chunk_bytes` (0 picks 64 MiB). Free with wf_arena_destroy. */
wf_status wf_arena_create(wf_arena **out, size_t chunk_bytes);
void wf_arena_destroy(wf_arena *a); /* accepts NULL */

/* Where an arena's chunks come from when they are not host memory (a
 * backend's blocks: wf_backend_arena_mem in weft/backend.h). alloc returns
 * a 4096-aligned block of `bytes` or NULL; zero clears bytes of a block
 * (blocks are handed out zeroed, as host chunks are). */
typedef struct {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    void (*zero)(void *ctx, void *p, size_t bytes);
    void *ctx;
} wf_arena_mem;
/* wf_arena_create with chunks from `mem` (copied). */
wf_status wf_arena_create_mem(wf_arena **out, size_t chunk_bytes, const wf_arena_mem *mem);

/* A plan-only arena: it hands out addresses and counts in_use, reserved
 * and peak exactly as an arena of one chunk of `chunk_bytes` (0: one
 * chunk as large as any plan) would, but allocates nothing: its blocks
 * are addresses no process maps, never to be read or written. `weft plan`
 * runs the trainer's own allocation code on one (docs/distributed.md,
 * "Planning memory"). Code that would write into a block at setup asks
 * wf_arena_plan_only first. */
wf_status wf_arena_create_plan(wf_arena **out, size_t chunk_bytes);
int wf_arena_plan_only(const wf_arena *a); /* 1 for an arena of wf_arena_create_plan */

/* Returns `bytes` of zeroed memory aligned to `align` (a power of two, at
 * most 4096; 0 means 64), or NULL with an error message when the system has
 * no more memory. The memory lives until the next reset or destroy. */
void *wf_arena_alloc(wf_arena *a, size_t bytes, size_t align);

/* A position to return to: everything allocated after the mark is released
 * by wf_arena_release (the chunks stay reserved for reuse). */
typedef struct { size_t chunk; size_t offset; size_t in_use; } wf_arena_mark;
wf_arena_mark wf_arena_get_mark(const wf_arena *a);
void wf_arena_release(wf_arena *a, wf_arena_mark m);

/* Releases everything; keeps the chunks reserved. */
void wf_arena_reset(wf_arena *a);

wf_arena_stats wf_arena_get_stats(const wf_arena *a);

#endif
