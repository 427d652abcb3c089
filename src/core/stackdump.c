/* Stack dumps of a process that hangs (weft/stackdump.h; the file:
 * docs/formats/hang-dump.md; the user's view: docs/cluster.md).
 *
 * Two parts. The capture takes every thread's return addresses: one
 * real-time signal per thread (tgkill), whose handler fills a slot of a
 * static table and marks it done with an atomic store; the thread that
 * captures waits for the answers, then reads /proc for the threads that
 * did not answer. The dumper is a thread that waits on a pipe (SIGQUIT's
 * handler writes a byte to it: write(2) is async-signal-safe), on requests
 * from other threads (a mutex and a condition variable) and on the
 * silence clock, and takes each dump: capture, symbolize
 * (stackdump_sym.c), the sections other modules registered, one file
 * written atomically, one log line.
 *
 * The only state a signal handler touches is the slot table, the signal
 * number and the pipe's write end: atomics and values set before the
 * handlers are installed. Everything else is under `g.mu` (the dumper's
 * state), `g_capture_mu` (one capture at a time) or `g_sec_mu` (the
 * sections). This file deliberately does not stop the process's threads
 * (ptrace cannot attach to its own process) or walk other processes.
 */
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "core/stackdump_impl.h"
#include "weft/fileio.h"
#include "weft/log.h"
#include "weft/stackdump.h"
#include "weft/thread.h"

#define SD_MAX_THREADS 512
#define SD_MAX_FRAMES 64
#define SD_MAX_SECTIONS 16
#define SD_ANSWER_S 2.0 /* how long the capture waits for the threads' answers */

/* ---- the slot table: the signal handler's only memory ---- */

enum { SLOT_FREE = 0, SLOT_REQUESTED, SLOT_RUNNING, SLOT_DONE, SLOT_ABANDONED };

typedef struct {
    atomic_int state; /* SLOT_*: REQUESTED -> RUNNING (handler) -> DONE (handler), or -> ABANDONED */
    atomic_int tid;
    int n;            /* frames in pc, written by the handler before DONE */
    uintptr_t ip;     /* the interrupted instruction (0: unknown) */
    void *pc[SD_MAX_FRAMES];
} sd_slot;

static sd_slot g_slots[SD_MAX_THREADS];
static atomic_int g_nslots;       /* slots the handler looks at */
static atomic_int g_quit_fd = -1; /* the pipe's write end while SIGQUIT dumps, else -1 */
static atomic_int g_sig;          /* the real-time signal, set once before its handler is installed */
static int g_pipe[2] = {-1, -1};  /* the dumper's wake-up pipe, made once, never closed */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_init_error[256];    /* empty when the one-time setup worked */
static pthread_mutex_t g_capture_mu = PTHREAD_MUTEX_INITIALIZER;

static uintptr_t interrupted_ip(void *ucv) {
#if defined(__x86_64__)
    return (uintptr_t)((ucontext_t *)ucv)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    return (uintptr_t)((ucontext_t *)ucv)->uc_mcontext.pc;
#else
    (void)ucv;
    return 0;
#endif
}

/* The real-time signal's handler: only this thread's slot, atomics and
 * backtrace() (see the header for what that costs in safety). */
static void on_stack_signal(int sig, siginfo_t *si, void *ucv) {
    (void)sig;
    int saved = errno;
    if (si && si->si_code == SI_TKILL && si->si_pid == getpid()) {
        int me = (int)gettid();
        int n = atomic_load_explicit(&g_nslots, memory_order_acquire);
        for (int i = 0; i < n; i++) {
            sd_slot *s = &g_slots[i];
            if (atomic_load_explicit(&s->tid, memory_order_relaxed) != me) continue;
            int expect = SLOT_REQUESTED;
            if (!atomic_compare_exchange_strong(&s->state, &expect, SLOT_RUNNING)) continue;
            s->ip = ucv ? interrupted_ip(ucv) : 0;
            s->n = backtrace(s->pc, SD_MAX_FRAMES);
            atomic_store_explicit(&s->state, SLOT_DONE, memory_order_release);
            break;
        }
    }
    errno = saved;
}

static void on_sigquit(int sig) {
    (void)sig;
    int saved = errno;
    int fd = atomic_load(&g_quit_fd);
    if (fd >= 0) {
        char c = 'Q';
        ssize_t w = write(fd, &c, 1); /* a full pipe already holds a wake-up */
        (void)w;
    }
    errno = saved;
}

/* Once per process: a free real-time signal and its handler, the pipe,
 * and libgcc's unwinder loaded (backtrace's first call loads it, which a
 * signal handler must not do). */
static void init_once(void) {
    void *warm[4];
    (void)backtrace(warm, 4);
    if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(g_init_error, sizeof g_init_error, "cannot make a pipe: %s", strerror(errno));
        return;
    }
    /* SIGRTMIN and the next ones are the likeliest to be taken by
     * libraries; the first one with the default disposition from
     * SIGRTMIN + 4 on is used. */
    for (int s = SIGRTMIN + 4; s <= SIGRTMAX; s++) {
        struct sigaction old;
        if (sigaction(s, NULL, &old) != 0) continue;
        if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_stack_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        g_sig = s;
        if (sigaction(s, &sa, NULL) == 0) return;
    }
    g_sig = 0;
    snprintf(g_init_error, sizeof g_init_error, "no free real-time signal for the stack capture (SIGRTMIN+4..SIGRTMAX)");
}

static wf_status ensure_init(void) {
    pthread_once(&g_once, init_once);
    if (g_init_error[0]) return wf_error(WF_ERR_INTERNAL, "stack dump: %s", g_init_error);
    return WF_OK;
}

/* ---- capture ---- */

typedef struct {
    int tid;
    char name[32];
    char state;          /* from /proc: R, S, D, T, ... ('?' unknown) */
    int self;            /* the capturing thread */
    int has_stack;       /* pc holds its stack: from the handler, or unwound from /proc */
    int unwound;         /* ... unwound from /proc's registers (has_stack is set too) */
    int moved;           /* ... and the thread left its system call meanwhile */
    int n;
    uintptr_t pc[SD_MAX_FRAMES + 1];
    int exact0;          /* pc[0] is an interrupted instruction, not a return address */
    char why[160];       /* why there is no stack */
    char wchan[64];
    char syscall[160];   /* /proc's syscall line */
    uintptr_t sys_pc, sys_sp; /* its user-space address and stack pointer */
} sd_thread;

typedef struct {
    sd_thread *t;
    int n;       /* listed */
    int missed;  /* more threads than SD_MAX_THREADS */
    wf__sym *sym; /* the modules now: unwinds and symbolizes */
} sd_capture;

static int read_small(const char *path, char *out, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, out, cap - 1);
    close(fd);
    if (n < 0) return -1;
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) out[--n] = '\0';
    return (int)n;
}

static void task_file(int tid, const char *what, char *out, size_t cap) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", tid, what);
    if (read_small(path, out, cap) < 0) out[0] = '\0';
}

static char task_state(int tid) {
    char buf[512];
    task_file(tid, "stat", buf, sizeof buf);
    const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    return p && p[1] == ' ' && p[2] ? p[2] : '?';
}

/* Whether `tid` blocks the capture signal (SigBlk of its status). */
static int task_blocks_signal(int tid) {
    char buf[2048];
    task_file(tid, "status", buf, sizeof buf);
    const char *p = strstr(buf, "SigBlk:");
    if (!p || g_sig <= 0) return 0;
    unsigned long long mask = strtoull(p + 7, NULL, 16);
    return g_sig <= 64 && ((mask >> (g_sig - 1)) & 1ull);
}

/* What /proc says of a thread that did not answer. */
static void describe_silent(sd_thread *t) {
    task_file(t->tid, "wchan", t->wchan, sizeof t->wchan);
    if (strcmp(t->wchan, "0") == 0) t->wchan[0] = '\0';
    task_file(t->tid, "syscall", t->syscall, sizeof t->syscall);
    /* "NR a1 a2 a3 a4 a5 a6 SP PC", "-1 SP PC" outside a call, "running". */
    const char *last = strrchr(t->syscall, ' ');
    if (last && strncmp(last + 1, "0x", 2) == 0) {
        t->sys_pc = (uintptr_t)strtoull(last + 1, NULL, 16);
        const char *before = last;
        while (before > t->syscall && before[-1] != ' ') before--;
        if (strncmp(before, "0x", 2) == 0) t->sys_sp = (uintptr_t)strtoull(before, NULL, 16);
    }
    if (task_blocks_signal(t->tid))
        snprintf(t->why, sizeof t->why, "the thread blocks the capture signal (%d)", g_sig);
    else if (t->state == 'D')
        snprintf(t->why, sizeof t->why, "no answer in %.0f s: uninterruptible sleep in the kernel (state D)",
                 SD_ANSWER_S);
    else
        snprintf(t->why, sizeof t->why, "no answer to the capture signal in %.0f s (state %c)", SD_ANSWER_S,
                 t->state);
}

/* Frames of an answered slot: from the interrupted instruction on (the
 * handler's and the kernel trampoline's frames dropped). */
static void take_frames(sd_thread *t, const sd_slot *s) {
    int n = s->n < 0 ? 0 : s->n, from = -1;
    for (int i = 0; i < n && s->ip; i++)
        if ((uintptr_t)s->pc[i] == s->ip) {
            from = i;
            break;
        }
    t->n = 0;
    if (from >= 0) {
        for (int i = from; i < n; i++) t->pc[t->n++] = (uintptr_t)s->pc[i];
        t->exact0 = 1;
    } else {
        /* The interrupted address was not among the unwound ones (a
         * sanitizer's runtime ran the handler later, from its own code):
         * the handler's own frame goes, the rest stays. */
        if (s->ip) t->pc[t->n++] = s->ip;
        for (int i = 1; i < n; i++) t->pc[t->n++] = (uintptr_t)s->pc[i];
        t->exact0 = s->ip != 0;
    }
    t->has_stack = 1;
}

/* A thread that did not answer, unwound from the stack pointer and
 * address of its system call (stackdump_sym.c); it must stay in the call
 * meanwhile, which /proc, read again, tells. */
static void unwind_silent(sd_thread *t, wf__sym *sym) {
    if (!t->sys_pc) return;
    uintptr_t pcs[SD_MAX_FRAMES];
    int n = wf__stackdump_sym_unwind(sym, t->tid, t->sys_pc, t->sys_sp, pcs, SD_MAX_FRAMES);
    if (n < 1) return;
    char again[sizeof t->syscall];
    task_file(t->tid, "syscall", again, sizeof again);
    memcpy(t->pc, pcs, (size_t)n * sizeof *pcs);
    t->n = n;
    t->exact0 = 1;
    t->has_stack = t->unwound = 1;
    t->moved = strcmp(again, t->syscall) != 0;
}

static void list_tasks(sd_capture *c) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        if (c->n == SD_MAX_THREADS) {
            c->missed++;
            continue;
        }
        sd_thread *t = &c->t[c->n++];
        memset(t, 0, sizeof *t);
        t->tid = atoi(e->d_name);
    }
    closedir(d);
}

static void sleep_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Every thread's stack into c->t (malloc'd; capture_free). */
static wf_status capture(sd_capture *c) {
    memset(c, 0, sizeof *c);
    c->t = calloc(SD_MAX_THREADS, sizeof *c->t);
    if (!c->t) return wf_error(WF_ERR_NOMEM, "stack dump: out of memory for %d threads", SD_MAX_THREADS);
    list_tasks(c);
    int me = (int)gettid();
    int slot_of[SD_MAX_THREADS];

    /* Hand out slots; one still RUNNING from an earlier capture whose
     * thread answered too late is left to it. */
    atomic_store_explicit(&g_nslots, 0, memory_order_release);
    int used = 0;
    for (int i = 0; i < c->n; i++) slot_of[i] = -1;
    for (int i = 0; i < c->n; i++) {
        if (c->t[i].tid == me) continue;
        while (used < SD_MAX_THREADS && atomic_load(&g_slots[used].state) == SLOT_RUNNING) used++;
        if (used == SD_MAX_THREADS) break;
        sd_slot *s = &g_slots[used];
        atomic_store(&s->tid, c->t[i].tid);
        s->n = 0;
        s->ip = 0;
        atomic_store(&s->state, SLOT_REQUESTED);
        slot_of[i] = used++;
    }
    atomic_store_explicit(&g_nslots, used, memory_order_release);

    int pid = (int)getpid();
    for (int i = 0; i < c->n; i++) {
        sd_thread *t = &c->t[i];
        t->state = task_state(t->tid);
        task_file(t->tid, "comm", t->name, sizeof t->name);
        if (t->tid == me) {
            void *pc[SD_MAX_FRAMES];
            int n = backtrace(pc, SD_MAX_FRAMES);
            for (int k = 1; k < n; k++) t->pc[t->n++] = (uintptr_t)pc[k]; /* without capture() itself */
            t->self = t->has_stack = 1;
            continue;
        }
        if (slot_of[i] < 0) {
            snprintf(t->why, sizeof t->why, "no free slot in the capture table");
            continue;
        }
        if (task_blocks_signal(t->tid)) {
            /* It would never answer: no need to wait for it. */
            atomic_store(&g_slots[slot_of[i]].state, SLOT_ABANDONED);
            describe_silent(t);
            continue;
        }
        if (tgkill(pid, t->tid, g_sig) != 0) {
            atomic_store(&g_slots[slot_of[i]].state, SLOT_ABANDONED);
            snprintf(t->why, sizeof t->why, "the thread exited during the capture");
            t->state = 'X';
        }
    }

    /* The answers: a thread in user code or an interruptible wait answers
     * in microseconds; wait for the slow ones up to SD_ANSWER_S. */
    double deadline = wf_time_now() + SD_ANSWER_S;
    for (;;) {
        int pending = 0;
        for (int s = 0; s < used; s++) {
            int st = atomic_load_explicit(&g_slots[s].state, memory_order_acquire);
            pending += st == SLOT_REQUESTED || st == SLOT_RUNNING;
        }
        if (!pending || wf_time_now() > deadline) break;
        sleep_ms(1);
    }
    c->sym = wf__stackdump_sym_open();
    for (int i = 0; i < c->n; i++) {
        sd_thread *t = &c->t[i];
        if (t->why[0] && t->state != 'X') unwind_silent(t, c->sym); /* blocks the signal */
        if (slot_of[i] < 0 || t->why[0]) continue;
        sd_slot *s = &g_slots[slot_of[i]];
        int expect = SLOT_REQUESTED;
        if (atomic_compare_exchange_strong(&s->state, &expect, SLOT_ABANDONED)) {
            describe_silent(t);
            unwind_silent(t, c->sym);
            continue;
        }
        /* RUNNING: the handler started, let it finish its backtrace. */
        for (int k = 0; k < 500 && atomic_load_explicit(&s->state, memory_order_acquire) == SLOT_RUNNING; k++)
            sleep_ms(1);
        if (atomic_load_explicit(&s->state, memory_order_acquire) == SLOT_DONE) {
            take_frames(t, s);
        } else {
            describe_silent(t);
            unwind_silent(t, c->sym);
        }
    }
    return WF_OK;
}

static void capture_free(sd_capture *c) {
    free(c->t);
    c->t = NULL;
    wf__stackdump_sym_close(c->sym);
    c->sym = NULL;
}

/* "threads: N, S with a stack (U of them unwound from /proc)". */
static void threads_line(const sd_capture *c, wf_buf *out) {
    int with = 0, unwound = 0;
    for (int i = 0; i < c->n; i++) {
        with += c->t[i].has_stack;
        unwound += c->t[i].unwound;
    }
    wf_buf_printf(out, "threads: %d, %d with a stack (%d of them unwound from /proc)", c->n + c->missed, with,
                  unwound);
    if (c->missed) wf_buf_printf(out, "; %d more not listed: at most %d are", c->missed, SD_MAX_THREADS);
    wf_buf_puts(out, "\n");
}

/* The "threads" part of a dump. */
static void format_threads(const sd_capture *c, wf_buf *out) {
    threads_line(c, out);
    wf__sym *sym = c->sym;
    int pid = (int)getpid();
    for (int i = 0; i < c->n; i++) {
        const sd_thread *t = &c->t[i];
        wf_buf_printf(out, "\n-- thread %d \"%s\" state %c%s%s\n", t->tid, t->name, t->state,
                      t->tid == pid ? " main" : "", t->self ? " dumper" : "");
        int frame = 0;
        if (t->why[0]) {
            wf_buf_printf(out, "   no answer to the signal: %s\n", t->why);
            if (t->wchan[0]) wf_buf_printf(out, "   kernel wait: %s\n", t->wchan);
            if (t->syscall[0]) wf_buf_printf(out, "   system call: %s\n", t->syscall);
            if (t->unwound)
                wf_buf_printf(out, "   unwound from the system call's stack pointer and address%s:\n",
                              t->moved ? " (the thread left the call meanwhile: frames may be wrong)" : "");
        }
        for (int k = 0; k < t->n; k++)
            wf__stackdump_sym_frame(sym, t->pc[k], k == 0 && t->exact0, "   ", &frame, out);
    }
}

wf_status wf_stackdump_threads(wf_buf *out) {
    WF_TRY(ensure_init());
    pthread_mutex_lock(&g_capture_mu);
    sd_capture c;
    wf_status s = capture(&c);
    if (s == WF_OK) format_threads(&c, out);
    capture_free(&c);
    pthread_mutex_unlock(&g_capture_mu);
    if (s == WF_OK && out->failed) s = wf_error(WF_ERR_NOMEM, "stack dump: out of memory for the text");
    return s;
}

/* ---- sections ---- */

typedef struct {
    int id; /* 0: free */
    char name[48];
    wf_stackdump_section_fn fn;
    void *ctx;
} sd_section;

static pthread_mutex_t g_sec_mu = PTHREAD_MUTEX_INITIALIZER;
static sd_section g_sections[SD_MAX_SECTIONS];
static int g_next_section = 1;

int wf_stackdump_add_section(const char *name, wf_stackdump_section_fn fn, void *ctx) {
    int id = 0;
    pthread_mutex_lock(&g_sec_mu);
    for (int i = 0; i < SD_MAX_SECTIONS; i++) {
        if (g_sections[i].id) continue;
        g_sections[i].id = id = g_next_section++;
        snprintf(g_sections[i].name, sizeof g_sections[i].name, "%s", name ? name : "?");
        g_sections[i].fn = fn;
        g_sections[i].ctx = ctx;
        break;
    }
    pthread_mutex_unlock(&g_sec_mu);
    return id;
}

void wf_stackdump_remove_section(int handle) {
    if (!handle) return;
    pthread_mutex_lock(&g_sec_mu); /* a dump calls sections under it: this waits for it */
    for (int i = 0; i < SD_MAX_SECTIONS; i++)
        if (g_sections[i].id == handle) memset(&g_sections[i], 0, sizeof g_sections[i]);
    pthread_mutex_unlock(&g_sec_mu);
}

static void format_sections(wf_buf *out) {
    pthread_mutex_lock(&g_sec_mu);
    for (int i = 0; i < SD_MAX_SECTIONS; i++) {
        if (!g_sections[i].id) continue;
        wf_buf_printf(out, "\n== %s ==\n", g_sections[i].name);
        g_sections[i].fn(g_sections[i].ctx, out);
    }
    pthread_mutex_unlock(&g_sec_mu);
}

/* ---- the dumper ---- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* requests done, the dumper stopped */
    int running, stopping;
    pthread_t thread;
    wf_stackdump_options o;  /* dir and silence_key point into the copies below */
    char dir[4096], silence_key[64];
    struct sigaction old_quit;
    int quit_installed;
    double t_start;
    /* progress */
    int64_t steps;
    int has_steps, silence_fired;
    double t_progress;
    /* one request at a time */
    uint64_t req_gen, done_gen;
    char req_reason[8192];
    wf_status done_status;
    char done_path[4200], done_msg[512];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void header(wf_buf *out, const char *reason, const sd_capture *c) {
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    char when[64] = "?";
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    wf_buf_puts(out, "weft stack dump, version 1\n");
    /* The reason may hold several lines: each goes on its own "reason:". */
    for (const char *p = reason; *p;) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        if (len) wf_buf_printf(out, "reason: %.*s\n", len, p);
        p += len + (nl ? 1 : 0);
    }
    double now_m = wf_time_now();
    pthread_mutex_lock(&g.mu);
    int rank = g.o.rank, world = g.o.world, has = g.has_steps;
    int64_t steps = g.steps;
    double ago = now_m - g.t_progress, up = now_m - g.t_start;
    pthread_mutex_unlock(&g.mu);
    wf_buf_printf(out, "rank: %d of %d\nhost: %s\npid: %d\ntime: %s\nrunning for: %.1f s\n", rank, world, host,
                  (int)getpid(), when, up);
    if (has) wf_buf_printf(out, "steps completed: %lld, the last %.1f s ago\n", (long long)steps, ago);
    else wf_buf_printf(out, "steps completed: none yet in this process (%.1f s since the dumper started)\n", ago);
    threads_line(c, out);
}

/* One dump: capture, text, file, log line. On the dumper thread. */
static wf_status dump(const char *reason, int warn, char *path, size_t path_size) {
    char file[WF_PATH_MAX], dir[WF_PATH_MAX];
    pthread_mutex_lock(&g.mu);
    wf_status ps = wf_path_joinf(file, sizeof file, g.dir, "rank-%05d.txt", g.o.rank);
    if (ps == WF_OK) ps = wf_path_join(dir, sizeof dir, NULL, g.dir, NULL);
    pthread_mutex_unlock(&g.mu);
    if (ps != WF_OK) return ps;
    if (path && path_size) snprintf(path, path_size, "%s", file);

    pthread_mutex_lock(&g_capture_mu);
    sd_capture c;
    wf_status s = capture(&c);
    wf_buf text = {0};
    if (s == WF_OK) {
        header(&text, reason, &c);
        format_sections(&text);
        wf_buf_puts(&text, "\n== threads ==\n");
        format_threads(&c, &text);
    }
    int nthreads = c.n + c.missed, with = 0;
    for (int i = 0; i < c.n && c.t; i++) with += c.t[i].has_stack;
    capture_free(&c);
    pthread_mutex_unlock(&g_capture_mu);
    if (s == WF_OK && text.failed) s = wf_error(WF_ERR_NOMEM, "stack dump: out of memory for the text");
    if (s == WF_OK) s = wf_mkdirs(dir);
    if (s == WF_OK) s = wf_file_write_atomic(file, text.data, text.len);
    wf_buf_free(&text);
    /* The reason's first line, cut at 200 bytes, in the log line. */
    char first[208];
    const char *nl = strchr(reason, '\n');
    int len = nl ? (int)(nl - reason) : (int)strlen(reason);
    snprintf(first, sizeof first, "%.*s%s", len > 200 ? 197 : len, reason, len > 200 ? "..." : "");
    if (s != WF_OK) {
        WF_WARN("stack dump: could not write %s: %s; reason: %s", file, wf_error_msg(), first);
    } else if (warn) {
        WF_WARN("stack dump: wrote %s (%d threads, %d with a stack); reason: %s", file, nthreads, with, first);
    } else {
        WF_INFO("stack dump: wrote %s (%d threads, %d with a stack); reason: %s", file, nthreads, with, first);
    }
    return s;
}

static int wake(char what) {
    ssize_t w = write(g_pipe[1], &what, 1);
    return w == 1 || (w < 0 && errno == EAGAIN) ? 0 : -1; /* a full pipe is awake already */
}

static void *dumper_main(void *arg) {
    (void)arg;
    for (;;) {
        /* How long until the silence dump is due (-1: not armed). */
        pthread_mutex_lock(&g.mu);
        int timeout_ms = -1;
        if (g.o.silence_s > 0 && !g.silence_fired) {
            double left = g.t_progress + g.o.silence_s - wf_time_now();
            timeout_ms = left <= 0 ? 0 : left > 3600 ? 3600000 : (int)(left * 1000) + 1;
        }
        pthread_mutex_unlock(&g.mu);
        struct pollfd p = {.fd = g_pipe[0], .events = POLLIN};
        (void)poll(&p, 1, timeout_ms); /* EINTR (a signal landed here) just loops */

        int quit = 0;
        char buf[64];
        ssize_t n;
        while ((n = read(g_pipe[0], buf, sizeof buf)) > 0)
            for (ssize_t i = 0; i < n; i++) quit |= buf[i] == 'Q';

        pthread_mutex_lock(&g.mu);
        int stop = g.stopping;
        pthread_mutex_unlock(&g.mu);
        if (stop) break;

        if (quit)
            dump("SIGQUIT: a dump was asked for; the process goes on", 0, NULL, 0);

        pthread_mutex_lock(&g.mu);
        if (g.req_gen > g.done_gen) {
            uint64_t gen = g.req_gen;
            char *reason = strdup(g.req_reason);
            pthread_mutex_unlock(&g.mu);
            char path[4200] = "";
            wf_status s = reason ? dump(reason, 0, path, sizeof path)
                                 : wf_error(WF_ERR_NOMEM, "stack dump: out of memory");
            free(reason);
            pthread_mutex_lock(&g.mu);
            g.done_gen = gen;
            g.done_status = s;
            snprintf(g.done_path, sizeof g.done_path, "%s", path);
            snprintf(g.done_msg, sizeof g.done_msg, "%s", s == WF_OK ? "" : wf_error_msg());
            pthread_cond_broadcast(&g.cv);
        }
        double silent = wf_time_now() - g.t_progress;
        int due = g.o.silence_s > 0 && !g.silence_fired && silent >= g.o.silence_s;
        if (due) g.silence_fired = 1;
        int has = g.has_steps;
        int64_t steps = g.steps;
        double limit = g.o.silence_s;
        char key[64];
        snprintf(key, sizeof key, "%s", g.silence_key[0] ? g.silence_key : "the silence limit");
        pthread_mutex_unlock(&g.mu);
        if (due) {
            char reason[512];
            if (has)
                snprintf(reason, sizeof reason,
                         "no step completed for %.1f s since step %lld (%s = %g s); the process goes on, and "
                         "dumps again only after its next step",
                         silent, (long long)steps, key, limit);
            else
                snprintf(reason, sizeof reason,
                         "no step completed for %.1f s since the start (%s = %g s); the process goes on, and "
                         "dumps again only after its next step",
                         silent, key, limit);
            dump(reason, 1, NULL, 0);
        }
        wf_error_clear();
    }
    return NULL;
}

int wf_stackdump_signal(void) {
    /* Set up by any earlier call of this module, not by this one: the
     * loader's and the checkpoint writer's threads ask, and a process
     * that never dumps keeps all its signals. */
    return atomic_load(&g_sig);
}

int wf_stackdump_running(void) {
    pthread_mutex_lock(&g.mu);
    int r = g.running && !g.stopping;
    pthread_mutex_unlock(&g.mu);
    return r;
}

wf_status wf_stackdump_start(const wf_stackdump_options *o) {
    if (!o || !o->dir || !*o->dir) return wf_error(WF_ERR_INVALID, "stack dump: no folder for the dumps");
    if (strlen(o->dir) >= sizeof g.dir - 32)
        return wf_error(WF_ERR_INVALID, "stack dump: the folder's path is too long (%zu bytes)", strlen(o->dir));
    WF_TRY(ensure_init());
    pthread_mutex_lock(&g.mu);
    if (g.running) {
        pthread_mutex_unlock(&g.mu);
        return wf_error(WF_ERR_INVALID, "stack dump: a dumper runs already in this process");
    }
    static int cv_made;
    if (!cv_made) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&g.cv, &ca);
        pthread_condattr_destroy(&ca);
        cv_made = 1;
    }
    g.o = *o;
    snprintf(g.dir, sizeof g.dir, "%s", o->dir);
    snprintf(g.silence_key, sizeof g.silence_key, "%s", o->silence_key ? o->silence_key : "");
    g.o.dir = g.dir;
    g.o.silence_key = g.silence_key;
    if (g.o.world < 1) g.o.world = 1;
    g.t_start = g.t_progress = wf_time_now();
    g.has_steps = g.silence_fired = 0;
    g.steps = 0;
    g.req_gen = g.done_gen = 0;
    g.stopping = 0;
    char drain[64];
    while (read(g_pipe[0], drain, sizeof drain) > 0) {
    }
    if (pthread_create(&g.thread, NULL, dumper_main, NULL) != 0) {
        pthread_mutex_unlock(&g.mu);
        return wf_error(WF_ERR_INTERNAL, "stack dump: cannot start the dumper thread");
    }
    pthread_setname_np(g.thread, "weft-stackdump");
    g.running = 1;
    g.quit_installed = 0;
    if (o->sigquit) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigquit;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        atomic_store(&g_quit_fd, g_pipe[1]);
        g.quit_installed = sigaction(SIGQUIT, &sa, &g.old_quit) == 0;
    }
    pthread_mutex_unlock(&g.mu);
    return WF_OK;
}

void wf_stackdump_stop(void) {
    pthread_mutex_lock(&g.mu);
    if (!g.running || g.stopping) {
        pthread_mutex_unlock(&g.mu);
        return;
    }
    g.stopping = 1;
    if (g.quit_installed) sigaction(SIGQUIT, &g.old_quit, NULL);
    g.quit_installed = 0;
    atomic_store(&g_quit_fd, -1);
    pthread_mutex_unlock(&g.mu);
    (void)wake('S');
    pthread_join(g.thread, NULL);
    pthread_mutex_lock(&g.mu);
    g.running = 0;
    g.stopping = 0;
    pthread_cond_broadcast(&g.cv); /* requests still waiting give up */
    pthread_mutex_unlock(&g.mu);
}

void wf_stackdump_progress(int64_t steps) {
    double now = wf_time_now();
    pthread_mutex_lock(&g.mu);
    g.steps = steps;
    g.has_steps = 1;
    g.t_progress = now;
    /* After a silence dump the dumper sleeps without a deadline: wake it
     * to arm the next one (once per stall, so rarely). Otherwise the
     * deadline only moved later and it wakes in time by itself. */
    int rearm = g.running && g.silence_fired;
    g.silence_fired = 0;
    pthread_mutex_unlock(&g.mu);
    if (rearm) (void)wake('P');
}

static void deadline_of(struct timespec *ts, double wait_s) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    double t = (double)ts->tv_sec + ts->tv_nsec * 1e-9 + (wait_s > 0 ? wait_s : 0);
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
}

wf_status wf_stackdump_request(const char *reason, double wait_s, char *path, size_t path_size) {
    if (path && path_size) path[0] = '\0';
    struct timespec until;
    deadline_of(&until, wait_s);
    pthread_mutex_lock(&g.mu);
    if (!g.running || g.stopping) {
        pthread_mutex_unlock(&g.mu);
        return wf_error(WF_ERR_INVALID, "stack dump: no dumper runs (wf_stackdump_start)");
    }
    if (pthread_equal(pthread_self(), g.thread)) {
        pthread_mutex_unlock(&g.mu);
        return wf_error(WF_ERR_INVALID, "stack dump: the dumper thread cannot request a dump");
    }
    /* Another thread's request goes first. */
    int rc = 0;
    while (g.running && !g.stopping && g.req_gen > g.done_gen && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&g.cv, &g.mu, &until);
    if (!g.running || g.stopping || g.req_gen > g.done_gen) {
        pthread_mutex_unlock(&g.mu);
        return wf_error(WF_ERR_IO, "stack dump: another dump did not finish in %.0f s", wait_s);
    }
    snprintf(g.req_reason, sizeof g.req_reason, "%s", reason ? reason : "requested");
    uint64_t mine = ++g.req_gen;
    (void)wake('R');
    rc = 0;
    while (g.running && !g.stopping && g.done_gen < mine && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&g.cv, &g.mu, &until);
    wf_status s;
    if (g.done_gen >= mine) {
        s = g.done_status == WF_OK ? WF_OK : wf_error(g.done_status, "%s", g.done_msg);
        if (path && path_size) snprintf(path, path_size, "%s", g.done_path);
    } else if (!g.running || g.stopping) {
        s = wf_error(WF_ERR_IO, "stack dump: the dumper stopped before the dump");
    } else {
        s = wf_error(WF_ERR_IO, "stack dump: not done after %.0f s (it goes on, and says when it is written)",
                     wait_s);
    }
    pthread_mutex_unlock(&g.mu);
    return s;
}
