/* The CUDA emulator (cuda_emu.h has what it does and why): the fiber
 * scheduler, the warp exchange, and device memory with red zones. */
#include "cuda/emu/cuda_emu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN_ 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN_ 1
#endif
#endif
#ifdef EMU_ASAN_
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

wf_emu_thread_view *wf_emu_cur;

/* ------------------------------------------------------------ messages */

static char message_[1024];
static cudaError_t pending_ = cudaSuccess; /* for the next cudaGetLastError */

static void fail_(cudaError_t e, const char *fmt, ...) {
    if (pending_ != cudaSuccess) return; /* keep the first failure */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message_, sizeof message_, fmt, ap);
    va_end(ap);
    pending_ = e;
}

const char *wf_emu_last_message(void) { return message_[0] ? message_ : "no error"; }

/* ------------------------------------------------------------ schedules */

enum sched_kind_ { SCHED_RR, SCHED_FWD, SCHED_REV, SCHED_SHUFFLE };
static int sched_read_;
static sched_kind_ sched_ = SCHED_FWD;
static uint64_t sched_seed_ = 1;
static char sched_name_[48] = "fwd";

int wf_emu_set_schedule(const char *name) {
    sched_read_ = 1;
    if (strcmp(name, "rr") == 0) sched_ = SCHED_RR;
    else if (strcmp(name, "fwd") == 0) sched_ = SCHED_FWD;
    else if (strcmp(name, "rev") == 0) sched_ = SCHED_REV;
    else if (strncmp(name, "shuffle", 7) == 0 && (name[7] == '\0' || name[7] == ':')) {
        sched_ = SCHED_SHUFFLE;
        sched_seed_ = name[7] == ':' ? strtoull(name + 8, NULL, 10) : 1;
    } else
        return -1;
    snprintf(sched_name_, sizeof sched_name_, "%s", name);
    return 0;
}

const char *wf_emu_schedule(void) { return sched_name_; }

static void read_schedule_env_(void) {
    if (sched_read_) return;
    sched_read_ = 1;
    const char *e = getenv("WF_CUDAEMU_SCHEDULE");
    if (e && *e && wf_emu_set_schedule(e) != 0)
        fprintf(stderr, "cudaemu: WF_CUDAEMU_SCHEDULE=%s is not a schedule (rr, fwd, rev, shuffle[:SEED]); "
                        "using fwd\n", e);
}

static uint64_t splitmix_(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* --------------------------------------------------------------- fibers */

enum fstate_ { F_RUN, F_WARP, F_BLOCK, F_DONE };

struct fiber_ {
    ucontext_t uc;
    wf_emu_thread_view view;
    fstate_ state;
    int warp_phase; /* which of a wrapper's two warp barriers it waits at */
};

#define STACK_BYTES_ ((size_t)256 * 1024)
#define MAX_THREADS_ 1024

struct block_ {
    std::vector<fiber_> f;
    std::vector<int> order; /* thread indices in the schedule's order */
    int n, n_warps;
    ucontext_t main_uc;
    int running;              /* index of the running fiber */
    unsigned char *shared;
    size_t shared_bytes;
    wf_emu_body body;
    void *closure;
    /* the warp exchange: one slot per thread */
    uint32_t slot[MAX_THREADS_];
#ifdef EMU_ASAN_
    void *fake_stack;
#endif
};

static block_ *blk_;
static unsigned char *stacks_; /* MAX_THREADS_ stacks, mapped once */

static void fiber_entry_(void) {
#ifdef EMU_ASAN_
    __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
    blk_->body(blk_->closure);
    blk_->f[blk_->running].state = F_DONE;
#ifdef EMU_ASAN_
    __sanitizer_start_switch_fiber(NULL, NULL, 0); /* this fiber ends */
#endif
    /* uc_link returns to the scheduler */
}

/* From the running fiber back to the scheduler. */
static void yield_(void) {
    fiber_ *me = &blk_->f[blk_->running];
#ifdef EMU_ASAN_
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, NULL, 0);
    swapcontext(&me->uc, &blk_->main_uc);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    swapcontext(&me->uc, &blk_->main_uc);
#endif
    wf_emu_cur = &me->view;
}

void __syncthreads(void) {
    blk_->f[blk_->running].state = F_BLOCK;
    yield_();
}

/* Waits at the warp barrier `phase` of the running thread's warp. */
static void warp_barrier_(int phase) {
    fiber_ *me = &blk_->f[blk_->running];
    me->state = F_WARP;
    me->warp_phase = phase;
    yield_();
}

static uint32_t exchange_(uint32_t v, int lane_mask) {
    int t = blk_->running, lane = t % 32;
    blk_->slot[t] = v;
    warp_barrier_(0);
    int src = (t - lane) + (lane ^ (lane_mask & 31));
    uint32_t r = src < blk_->n ? blk_->slot[src] : v;
    warp_barrier_(1); /* nobody overwrites a slot before all have read */
    return r;
}

float wf_shfl_xor(float v, int lane_mask) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u = exchange_(u, lane_mask);
    memcpy(&v, &u, 4);
    return v;
}

int wf_shfl_xor_int(int v, int lane_mask) { return (int)exchange_((uint32_t)v, lane_mask); }

unsigned wf_ballot(int predicate) {
    int t = blk_->running, w0 = t - t % 32;
    blk_->slot[t] = predicate != 0;
    warp_barrier_(0);
    unsigned r = 0;
    for (int i = w0; i < w0 + 32 && i < blk_->n; i++)
        if (blk_->f[i].state != F_DONE && blk_->slot[i]) r |= 1u << (i - w0);
    warp_barrier_(1);
    return r;
}

void *wf_emu_shared(void) { return blk_->shared; }

/* Releases a warp whose live threads all wait at the same warp barrier;
 * returns 1 if it did. */
static int release_warp_(int w) {
    int lo = w * 32, hi = lo + 32 < blk_->n ? lo + 32 : blk_->n, waiting = 0, phase = -1;
    for (int i = lo; i < hi; i++) {
        fiber_ *f = &blk_->f[i];
        if (f->state == F_DONE) continue;
        if (f->state != F_WARP) return 0;
        if (phase >= 0 && f->warp_phase != phase) return 0;
        phase = f->warp_phase;
        waiting++;
    }
    if (!waiting) return 0;
    for (int i = lo; i < hi; i++)
        if (blk_->f[i].state == F_WARP) blk_->f[i].state = F_RUN;
    return 1;
}

/* The next thread to run, or -1 if none can. */
static int pick_(int *cursor) {
    int n = blk_->n;
    if (sched_ == SCHED_RR) {
        for (int k = 0; k < n; k++) {
            int i = (*cursor + k) % n;
            if (blk_->f[i].state == F_RUN) {
                *cursor = (i + 1) % n;
                return i;
            }
        }
        return -1;
    }
    for (int k = 0; k < n; k++) /* order is warp by warp */
        if (blk_->f[blk_->order[k]].state == F_RUN) return blk_->order[k];
    return -1;
}

static void make_order_(block_ *b, uint64_t *seed) {
    int nw = b->n_warps;
    std::vector<int> warps(nw);
    for (int w = 0; w < nw; w++) warps[w] = sched_ == SCHED_REV ? nw - 1 - w : w;
    if (sched_ == SCHED_SHUFFLE)
        for (int w = nw - 1; w > 0; w--) {
            int j = (int)(splitmix_(seed) % (uint64_t)(w + 1));
            int t = warps[w];
            warps[w] = warps[j], warps[j] = t;
        }
    b->order.clear();
    for (int k = 0; k < nw; k++) {
        int lo = warps[k] * 32, hi = lo + 32 < b->n ? lo + 32 : b->n;
        std::vector<int> lanes;
        for (int i = lo; i < hi; i++) lanes.push_back(sched_ == SCHED_REV ? hi - 1 - (i - lo) : i);
        if (sched_ == SCHED_SHUFFLE)
            for (int i = (int)lanes.size() - 1; i > 0; i--) {
                int j = (int)(splitmix_(seed) % (uint64_t)(i + 1));
                int t = lanes[i];
                lanes[i] = lanes[j], lanes[j] = t;
            }
        for (int i : lanes) b->order.push_back(i);
    }
}

/* --------------------------------------------------------------- memory */

#define RZ_BYTES_ ((size_t)4096) /* red zone on each side; keeps 4096 alignment */
#define RZ_BYTE_ 0xa5

struct alloc_ {
    unsigned char *base; /* the mapping: red zone, block, red zone */
    size_t bytes;
    int serial;
};
static std::vector<alloc_> allocs_;
static int serial_;
static size_t in_use_;

static size_t tail_rz_(size_t bytes) { return RZ_BYTES_ + ((4096 - bytes % 4096) % 4096); }

/* 0 if both red zones of a are intact, else writes where in *off. */
static int rz_broken_(const alloc_ &a, long long *off) {
#ifdef EMU_ASAN_
    ASAN_UNPOISON_MEMORY_REGION(a.base, RZ_BYTES_);
    ASAN_UNPOISON_MEMORY_REGION(a.base + RZ_BYTES_ + a.bytes, tail_rz_(a.bytes));
#endif
    int bad = 0;
    for (size_t i = 0; i < RZ_BYTES_ && !bad; i++)
        if (a.base[i] != RZ_BYTE_) *off = (long long)i - (long long)RZ_BYTES_, bad = 1;
    const unsigned char *t = a.base + RZ_BYTES_ + a.bytes;
    for (size_t i = 0; i < tail_rz_(a.bytes) && !bad; i++)
        if (t[i] != RZ_BYTE_) *off = (long long)(a.bytes + i), bad = 1;
#ifdef EMU_ASAN_
    ASAN_POISON_MEMORY_REGION(a.base, RZ_BYTES_);
    ASAN_POISON_MEMORY_REGION(a.base + RZ_BYTES_ + a.bytes, tail_rz_(a.bytes));
#endif
    return bad;
}

/* Restores a's red zones once their breach is reported, so that the next
 * launch reports only its own. */
static void rz_rearm_(const alloc_ &a) {
#ifdef EMU_ASAN_
    ASAN_UNPOISON_MEMORY_REGION(a.base, RZ_BYTES_);
    ASAN_UNPOISON_MEMORY_REGION(a.base + RZ_BYTES_ + a.bytes, tail_rz_(a.bytes));
#endif
    memset(a.base, RZ_BYTE_, RZ_BYTES_);
    memset(a.base + RZ_BYTES_ + a.bytes, RZ_BYTE_, tail_rz_(a.bytes));
#ifdef EMU_ASAN_
    ASAN_POISON_MEMORY_REGION(a.base, RZ_BYTES_);
    ASAN_POISON_MEMORY_REGION(a.base + RZ_BYTES_ + a.bytes, tail_rz_(a.bytes));
#endif
}

static int check_allocs_(const char *when) {
    for (const alloc_ &a : allocs_) {
        long long off = 0;
        if (rz_broken_(a, &off)) {
            rz_rearm_(a);
            fail_(cudaErrorLaunchFailure,
                  "%s wrote outside device allocation #%d (%zu bytes): at byte offset %lld", when, a.serial,
                  a.bytes, off);
            return -1;
        }
    }
    return 0;
}

/* The host fence (WF_CUDAEMU_FENCE=1, a test mode): outside the emulator's
 * own calls (launches, copies, fills, the emulated gemm) every block's
 * pages are PROT_NONE, so host code that reads or writes device memory
 * directly, which a GPU would not allow, dies at that access instead of
 * working because emulated device memory is host memory. */
static int fence_on_ = -1; /* -1: not read yet */
static int fence_depth_;

static size_t fence_span_(const alloc_ &a) { return (a.bytes + 4095) / 4096 * 4096; }

static int fence_enabled_(void) {
    if (fence_on_ < 0) {
        const char *v = getenv("WF_CUDAEMU_FENCE");
        fence_on_ = v && *v && strcmp(v, "0") != 0;
    }
    return fence_on_;
}

static void fence_set_(const alloc_ &a, int prot) {
    if (a.bytes) mprotect(a.base + RZ_BYTES_, fence_span_(a), prot);
}

void wf_emu_fence_open(void) {
    if (!fence_enabled_()) return;
    if (fence_depth_++ == 0)
        for (const alloc_ &a : allocs_) fence_set_(a, PROT_READ | PROT_WRITE);
}

void wf_emu_fence_close(void) {
    if (!fence_enabled_()) return;
    if (--fence_depth_ == 0)
        for (const alloc_ &a : allocs_) fence_set_(a, PROT_NONE);
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = NULL;
    size_t total = RZ_BYTES_ + bytes + tail_rz_(bytes);
    void *m = NULL;
    if (posix_memalign(&m, 4096, total) != 0) {
        fail_(cudaErrorMemoryAllocation, "cudaMalloc: %zu bytes: out of host memory", bytes);
        return cudaErrorMemoryAllocation;
    }
    unsigned char *base = (unsigned char *)m;
    memset(base, RZ_BYTE_, RZ_BYTES_);
    memset(base + RZ_BYTES_, 0xff, bytes); /* poison: NaN as float */
    memset(base + RZ_BYTES_ + bytes, RZ_BYTE_, tail_rz_(bytes));
#ifdef EMU_ASAN_
    ASAN_POISON_MEMORY_REGION(base, RZ_BYTES_);
    ASAN_POISON_MEMORY_REGION(base + RZ_BYTES_ + bytes, tail_rz_(bytes));
#endif
    allocs_.push_back(alloc_{base, bytes, ++serial_});
    in_use_ += bytes;
    *p = base + RZ_BYTES_;
    if (fence_enabled_() && fence_depth_ == 0) fence_set_(allocs_.back(), PROT_NONE);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    for (size_t i = 0; i < allocs_.size(); i++) {
        if (allocs_[i].base + RZ_BYTES_ != p) continue;
        alloc_ a = allocs_[i];
        if (fence_enabled_()) fence_set_(a, PROT_READ | PROT_WRITE); /* back to the heap as it was given */
        long long off = 0;
        cudaError_t r = cudaSuccess;
        if (rz_broken_(a, &off)) {
            fail_(cudaErrorLaunchFailure, "cudaFree: device allocation #%d (%zu bytes) was written outside, at "
                                          "byte offset %lld", a.serial, a.bytes, off);
            r = cudaErrorLaunchFailure;
        }
#ifdef EMU_ASAN_
        ASAN_UNPOISON_MEMORY_REGION(a.base, RZ_BYTES_ + a.bytes + tail_rz_(a.bytes));
#endif
        free(a.base);
        in_use_ -= a.bytes;
        allocs_.erase(allocs_.begin() + (long)i);
        return r;
    }
    fail_(cudaErrorInvalidValue, "cudaFree: %p is not a device allocation", p);
    return cudaErrorInvalidValue;
}

/* Device memory must be a whole range inside one allocation. */
static int in_device_(const void *p, size_t bytes) {
    const unsigned char *q = (const unsigned char *)p;
    for (const alloc_ &a : allocs_)
        if (q >= a.base + RZ_BYTES_ && q + bytes <= a.base + RZ_BYTES_ + a.bytes) return 1;
    return 0;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    (void)s;
    int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (bytes && ((dst_dev && !in_device_(dst, bytes)) || (src_dev && !in_device_(src, bytes)))) {
        fail_(cudaErrorInvalidValue, "cudaMemcpyAsync: %zu bytes %s %p to %p: not inside one device allocation",
              bytes, "from", src, dst);
        return cudaErrorInvalidValue;
    }
    wf_emu_fence_open();
    if (bytes) memmove(dst, src, bytes);
    wf_emu_fence_close();
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s) {
    (void)s;
    if (bytes && !in_device_(dst, bytes)) {
        fail_(cudaErrorInvalidValue, "cudaMemsetAsync: %zu bytes at %p: not inside one device allocation", bytes,
              dst);
        return cudaErrorInvalidValue;
    }
    wf_emu_fence_open();
    if (bytes) memset(dst, value, bytes);
    wf_emu_fence_close();
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }

struct wf_emu_stream {
    int unused;
};
cudaError_t cudaStreamCreate(cudaStream_t *s) {
    *s = new wf_emu_stream();
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    (void)s;
    return pending_;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = pending_;
    pending_ = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES), all = sysconf(_SC_PHYS_PAGES);
    *free_bytes = page > 0 && avail > 0 ? (size_t)avail * (size_t)page : 0;
    *total_bytes = page > 0 && all > 0 ? (size_t)all * (size_t)page : 0;
    return cudaSuccess;
}

struct wf_emu_event {
    double t;
};
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = new wf_emu_event();
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    (void)s;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    (void)e;
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}

/* ------------------------------------------------------------- launches */

#define SHARED_RZ_ 256

static const char *state_name_(fstate_ s) {
    return s == F_WARP ? "a warp shuffle" : s == F_BLOCK ? "__syncthreads" : s == F_DONE ? "exit" : "running";
}

/* Runs one block; 0, or -1 after fail_. */
static int run_block_(block_ *b, const char *kernel, dim3 grid, dim3 block, dim3 bidx, uint64_t *seed) {
    memset(b->shared, 0xff, b->shared_bytes);
    memset(b->shared + b->shared_bytes, RZ_BYTE_, SHARED_RZ_);
    make_order_(b, seed);
    for (int i = 0; i < b->n; i++) {
        fiber_ *f = &b->f[i];
        f->view.block_idx = bidx;
        f->view.block_dim = block;
        f->view.grid_dim = grid;
        f->view.thread_idx = dim3((unsigned)i % block.x, (unsigned)i / block.x % block.y,
                                  (unsigned)i / (block.x * block.y));
        f->state = F_RUN;
        f->warp_phase = 0;
        getcontext(&f->uc);
        f->uc.uc_stack.ss_sp = stacks_ + (size_t)i * STACK_BYTES_;
        f->uc.uc_stack.ss_size = STACK_BYTES_;
        f->uc.uc_link = &b->main_uc;
        makecontext(&f->uc, fiber_entry_, 0);
    }
    int cursor = 0;
    for (;;) {
        int i = pick_(&cursor);
        if (i < 0) {
            int live = 0, at_block = 0, released = 0;
            for (int k = 0; k < b->n; k++) {
                live += b->f[k].state != F_DONE;
                at_block += b->f[k].state == F_BLOCK;
            }
            if (!live) break;
            for (int w = 0; w < b->n_warps; w++) released |= release_warp_(w);
            if (released) continue;
            if (at_block == live) {
                for (int k = 0; k < b->n; k++)
                    if (b->f[k].state == F_BLOCK) b->f[k].state = F_RUN;
                continue;
            }
            int a = -1, c = -1;
            for (int k = 0; k < b->n; k++) {
                if (b->f[k].state == F_BLOCK && a < 0) a = k;
                if (b->f[k].state == F_WARP && c < 0) c = k;
            }
            fail_(cudaErrorLaunchFailure,
                  "kernel %s, block (%u,%u,%u): deadlock: thread %d waits at %s while thread %d waits at %s",
                  kernel, bidx.x, bidx.y, bidx.z, a, state_name_(b->f[a < 0 ? 0 : a].state), c,
                  state_name_(b->f[c < 0 ? 0 : c].state));
            return -1;
        }
        /* warp-serial schedules release a warp barrier as soon as it is full */
        b->running = i;
        wf_emu_cur = &b->f[i].view;
#ifdef EMU_ASAN_
        __sanitizer_start_switch_fiber(&b->fake_stack, stacks_ + (size_t)i * STACK_BYTES_, STACK_BYTES_);
        swapcontext(&b->main_uc, &b->f[i].uc);
        __sanitizer_finish_switch_fiber(b->fake_stack, NULL, NULL);
#else
        swapcontext(&b->main_uc, &b->f[i].uc);
#endif
        if (b->f[i].state == F_WARP) release_warp_(i / 32);
    }
    for (int k = 0; k < SHARED_RZ_; k++)
        if (b->shared[b->shared_bytes + (size_t)k] != RZ_BYTE_) {
            fail_(cudaErrorLaunchFailure, "kernel %s, block (%u,%u,%u): wrote past its %zu bytes of shared memory "
                                          "(at byte %zu)", kernel, bidx.x, bidx.y, bidx.z, b->shared_bytes,
                  b->shared_bytes + (size_t)k);
            return -1;
        }
    return 0;
}

void wf_emu_launch_raw(const char *kernel, dim3 grid, dim3 block, size_t shared_bytes, wf_emu_body body,
                       void *closure) {
    read_schedule_env_();
    size_t n = (size_t)block.x * block.y * block.z;
    if (n == 0 || n > MAX_THREADS_ || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
        grid.z > 65535) {
        fail_(cudaErrorInvalidValue, "kernel %s: invalid launch: grid (%u,%u,%u), block (%u,%u,%u)", kernel, grid.x,
              grid.y, grid.z, block.x, block.y, block.z);
        return;
    }
    if (shared_bytes > 227 * 1024) {
        fail_(cudaErrorInvalidValue, "kernel %s: %zu bytes of shared memory, more than the 227 KiB of sm_90",
              kernel, shared_bytes);
        return;
    }
    if (!stacks_) {
        void *m = mmap(NULL, STACK_BYTES_ * MAX_THREADS_, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            fail_(cudaErrorMemoryAllocation, "kernel %s: cannot map the fibers' stacks", kernel);
            return;
        }
        stacks_ = (unsigned char *)m;
    }
    block_ *b = new block_();
    b->n = (int)n;
    b->n_warps = (int)((n + 31) / 32);
    b->f.resize(n);
    b->shared_bytes = shared_bytes;
    b->shared = (unsigned char *)malloc(shared_bytes + SHARED_RZ_);
    b->body = body;
    b->closure = closure;
    block_ *saved = blk_;
    wf_emu_thread_view *saved_cur = wf_emu_cur;
    blk_ = b;
    uint64_t seed = sched_seed_;
    wf_emu_fence_open();
    int rc = b->shared ? 0 : -1;
    if (rc) fail_(cudaErrorMemoryAllocation, "kernel %s: no memory for its shared memory", kernel);
    for (unsigned z = 0; z < grid.z && !rc; z++)
        for (unsigned y = 0; y < grid.y && !rc; y++)
            for (unsigned x = 0; x < grid.x && !rc; x++) rc = run_block_(b, kernel, grid, block, dim3(x, y, z), &seed);
    blk_ = saved;
    wf_emu_cur = saved_cur;
    free(b->shared);
    delete b;
    if (!rc) {
        char when[160];
        snprintf(when, sizeof when, "kernel %s", kernel);
        check_allocs_(when);
    }
    wf_emu_fence_close();
}
