/* Arena: a list of chunks, each bump-allocated. A block never spans two
 * chunks; a request larger than the chunk size gets a chunk of its own.
 * Memory is zeroed when handed out, so planned buffers start from a known
 * state (and reproducible runs do not depend on stale bytes). */
#include "weft/buf.h"
#include "weft/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *base;
    size_t size;
    size_t used;
} arena_chunk;

struct wf_arena {
    arena_chunk *chunks;
    size_t n_chunks, cap_chunks;
    size_t cur;          /* index of the chunk being bumped */
    size_t chunk_bytes;
    wf_arena_stats st;
    wf_arena_mem mem; /* alloc NULL: host memory */
    int plan_only;    /* wf_arena_create_plan: chunks are addresses, not memory */
    uintptr_t next;   /* plan_only: the next chunk's address */
};

wf_status wf_arena_create(wf_arena **out, size_t chunk_bytes) {
    wf_arena *a = calloc(1, sizeof *a);
    if (!a) return wf_error(WF_ERR_NOMEM, "arena: cannot allocate its header");
    a->chunk_bytes = chunk_bytes ? chunk_bytes : (size_t)64 << 20;
    *out = a;
    return WF_OK;
}

wf_status wf_arena_create_mem(wf_arena **out, size_t chunk_bytes, const wf_arena_mem *mem) {
    WF_TRY(wf_arena_create(out, chunk_bytes));
    (*out)->mem = *mem;
    return WF_OK;
}

/* A plan's chunks start where no process maps memory: above the 47-bit
 * user address space of x86-64 (non-canonical: any access faults) and
 * high in others', so that a stray write fails loudly. */
#define PLAN_BASE ((uintptr_t)1 << (sizeof(uintptr_t) > 4 ? 47 : 31))

wf_status wf_arena_create_plan(wf_arena **out, size_t chunk_bytes) {
    WF_TRY(wf_arena_create(out, chunk_bytes ? chunk_bytes : (size_t)1 << (sizeof(size_t) > 4 ? 44 : 28)));
    (*out)->plan_only = 1;
    (*out)->next = PLAN_BASE;
    return WF_OK;
}

int wf_arena_plan_only(const wf_arena *a) { return a && a->plan_only; }

void wf_arena_destroy(wf_arena *a) {
    if (!a) return;
    for (size_t i = 0; i < a->n_chunks && !a->plan_only; i++) {
        if (a->mem.alloc)
            a->mem.free(a->mem.ctx, a->chunks[i].base);
        else
            free(a->chunks[i].base);
    }
    free(a->chunks);
    free(a);
}

static int arena_add_chunk(wf_arena *a, size_t min_bytes) {
    if (WF_GROW(a->chunks, a->cap_chunks, a->n_chunks + 1, 8) != WF_OK) return -1;
    size_t size = min_bytes > a->chunk_bytes ? min_bytes : a->chunk_bytes;
    size = (size + 4095) & ~(size_t)4095;
    void *p = NULL;
    if (a->plan_only) {
        if (size > UINTPTR_MAX - a->next) return -1;
        p = (void *)a->next;
        a->next += size;
    } else if (a->mem.alloc) {
        if (!(p = a->mem.alloc(a->mem.ctx, size))) return -1;
    } else if (posix_memalign(&p, 4096, size) != 0) {
        return -1;
    }
    /* Insert right after the current chunk so that later, smaller requests
     * keep using the partly filled chunks in order. */
    size_t at = a->n_chunks ? a->cur + 1 : 0;
    memmove(&a->chunks[at + 1], &a->chunks[at], (a->n_chunks - at) * sizeof *a->chunks);
    a->chunks[at] = (arena_chunk){p, size, 0};
    a->n_chunks++;
    a->cur = at;
    a->st.reserved += size;
    return 0;
}

void *wf_arena_alloc(wf_arena *a, size_t bytes, size_t align) {
    if (align == 0) align = 64;
    if ((align & (align - 1)) != 0 || align > 4096) {
        wf_error(WF_ERR_INVALID, "arena: alignment %zu is not a power of two <= 4096", align);
        return NULL;
    }
    if (bytes == 0) bytes = 1;
    for (;;) {
        if (a->n_chunks) {
            arena_chunk *c = &a->chunks[a->cur];
            size_t off = (c->used + align - 1) & ~(align - 1);
            if (off <= c->size && bytes <= c->size - off) {
                void *p = c->base + off;
                size_t grew = off + bytes - c->used;
                c->used = off + bytes;
                a->st.in_use += grew;
                if (a->st.in_use > a->st.peak) a->st.peak = a->st.in_use;
                a->st.n_allocs++;
                if (a->plan_only)
                    ; /* nothing to clear */
                else if (a->mem.alloc)
                    a->mem.zero(a->mem.ctx, p, bytes);
                else
                    memset(p, 0, bytes);
                return p;
            }
            /* Move to the next reserved chunk if there is one (after a
             * reset or release), else reserve a new one. */
            if (a->cur + 1 < a->n_chunks && a->chunks[a->cur + 1].size >= bytes + align) {
                a->cur++;
                continue;
            }
        }
        if (arena_add_chunk(a, bytes + align) != 0) {
            wf_error(WF_ERR_NOMEM, "arena: out of memory allocating %zu bytes (%zu reserved)",
                     bytes, a->st.reserved);
            return NULL;
        }
    }
}

wf_arena_mark wf_arena_get_mark(const wf_arena *a) {
    wf_arena_mark m = {a->cur, a->n_chunks ? a->chunks[a->cur].used : 0, a->st.in_use};
    return m;
}

void wf_arena_release(wf_arena *a, wf_arena_mark m) {
    if (!a->n_chunks) return;
    for (size_t i = m.chunk + 1; i < a->n_chunks; i++) a->chunks[i].used = 0;
    a->chunks[m.chunk].used = m.offset;
    a->cur = m.chunk;
    a->st.in_use = m.in_use;
}

void wf_arena_reset(wf_arena *a) {
    for (size_t i = 0; i < a->n_chunks; i++) a->chunks[i].used = 0;
    a->cur = 0;
    a->st.in_use = 0;
}

wf_arena_stats wf_arena_get_stats(const wf_arena *a) { return a->st; }
