/* Stack dumps (weft/stackdump.h): every thread's stack with the names of
 * the functions it is in (static ones too, from the symbol table) and
 * their source lines; a thread that blocks the capture signal reported
 * from /proc; the dumper's requests, sections, SIGQUIT (the process goes
 * on) and its silence dump, once per stall. The end-to-end tests of the
 * trainer's dumps are in tests/py/test_hang_dump.py. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "weft/buf.h"
#include "weft/fileio.h"
#include "weft/stackdump.h"
#include "weft/thread.h"

/* AddressSanitizer's read interceptor finds its caller through its frame
 * pointer, a register /proc does not show: a walk from /proc's stack
 * pointer and address ends there (a limit weft/stackdump.h states). */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

/* ---- threads to be found in a dump ---- */

static int g_fds[2];
static atomic_int g_spin_stop;
static atomic_int g_started;

/* Reads one byte; always inlined, so a dump shows it as an inlined frame. */
__attribute__((always_inline)) static inline void inlined_read_for_test(int fd) {
    char c;
    while (read(fd, &c, 1) < 0) {
    }
}

/* Blocks in read(2) on a pipe until a byte arrives. */
__attribute__((noinline)) static void blocked_in_read_for_test(int fd) {
    atomic_fetch_add(&g_started, 1);
    inlined_read_for_test(fd);
    __asm__ volatile("" ::: "memory"); /* not a tail call: the frame stays */
}

static void *reader_main(void *arg) {
    (void)arg;
    blocked_in_read_for_test(g_fds[0]);
    return NULL;
}

/* Computes until told to stop. */
__attribute__((noinline)) static void spinning_for_test(void) {
    volatile unsigned x = 1;
    atomic_fetch_add(&g_started, 1);
    while (!atomic_load(&g_spin_stop)) x = x * 1664525u + 1013904223u;
    __asm__ volatile("" ::: "memory");
}

static void *spinner_main(void *arg) {
    (void)arg;
    spinning_for_test();
    return NULL;
}

/* Blocks every signal, then reads: the capture signal cannot reach it. */
static atomic_int g_deaf_tid;
static void *deaf_main(void *arg) {
    (void)arg;
    atomic_store(&g_deaf_tid, (int)gettid());
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    blocked_in_read_for_test(g_fds[0]);
    return NULL;
}

static void wait_started(int n) {
    while (atomic_load(&g_started) < n) usleep(1000);
    usleep(20000); /* into the read itself */
}

static void release_readers(int n) {
    for (int i = 0; i < n; i++) WF_CHECK_EQ(write(g_fds[1], "x", 1), 1);
}

/* Whether every thread listed has a stack: "threads: N, N with a stack". */
static int all_have_stacks(const char *text) {
    const char *p = strstr(text, "threads: ");
    int n = -1, with = -2;
    return p && sscanf(p, "threads: %d, %d with a stack", &n, &with) == 2 && n == with && n > 0;
}

/* The thread block of `text` that contains `needle`. */
static const char *block_with(const char *text, const char *needle) {
    const char *hit = strstr(text, needle);
    if (!hit) return NULL;
    const char *b = text, *p;
    while ((p = strstr(b + 1, "\n-- thread ")) && p < hit) b = p;
    return b;
}

WF_TEST(stackdump_names_every_threads_functions_and_lines) {
    WF_CHECK_EQ(pipe(g_fds), 0);
    pthread_t r, s;
    pthread_create(&r, NULL, reader_main, NULL);
    pthread_create(&s, NULL, spinner_main, NULL);
    wait_started(2);
    wf_buf b = {0};
    WF_CHECK_OK(wf_stackdump_threads(&b));
    atomic_store(&g_spin_stop, 1);
    release_readers(1);
    pthread_join(r, NULL);
    pthread_join(s, NULL);
    const char *t = b.data;
    /* Every thread has a stack: from the signal's handler, or (a sanitizer's
     * runtime holds the signal back until read returns) unwound from the
     * read's registers in /proc. */
    WF_CHECK_TRUE(all_have_stacks(t));
    /* static functions by name, their file and line, the module */
    WF_CHECK_TRUE(strstr(t, " blocked_in_read_for_test+0x") != NULL);
    WF_CHECK_TRUE(strstr(t, " spinning_for_test") != NULL);
    WF_CHECK_TRUE(strstr(t, "test_stackdump.c:") != NULL);
    WF_CHECK_TRUE(strstr(t, "(test_stackdump)") != NULL);
    /* the reader is interrupted inside the read, called from the function */
    const char *rb = block_with(t, "blocked_in_read_for_test");
    WF_CHECK_TRUE(rb != NULL);
    const char *in_read = strstr(rb, " read");
    WF_CHECK_TRUE(in_read != NULL && in_read < strstr(rb, "blocked_in_read_for_test"));
    WF_CHECK_TRUE(strstr(rb, "reader_main") != NULL);
    /* the function inlined at the call, then the one it is inlined into,
     * at the same address */
    const char *inl = strstr(rb, " inlined_read_for_test [inlined] at ");
    WF_CHECK_TRUE(inl != NULL && inl > in_read && inl < strstr(rb, "blocked_in_read_for_test"));
    WF_CHECK_TRUE(strstr(inl, "test_stackdump.c:") < strstr(rb, "blocked_in_read_for_test"));
    /* the capturing thread is the main one here, and says so */
    WF_CHECK_TRUE(strstr(t, " main dumper\n") != NULL);
    WF_CHECK_TRUE(strstr(block_with(t, " main dumper\n"), "stackdump_names_every_threads") != NULL);
    wf_buf_free(&b);
}

WF_TEST(stackdump_thread_that_blocks_the_signal_is_read_from_proc) {
    WF_CHECK_EQ(pipe(g_fds), 0);
    pthread_t d;
    pthread_create(&d, NULL, deaf_main, NULL);
    wait_started(1);
    wf_buf b = {0};
    WF_CHECK_OK(wf_stackdump_threads(&b));
    release_readers(1);
    pthread_join(d, NULL);
    const char *t = b.data;
    WF_CHECK_TRUE(all_have_stacks(t));
    char head[64];
    snprintf(head, sizeof head, "\n-- thread %d ", atomic_load(&g_deaf_tid));
    const char *db = strstr(t, head);
    WF_CHECK_TRUE(db != NULL);
    const char *why = "\n   no answer to the signal: the thread blocks the capture signal";
    WF_CHECK_TRUE(strncmp(strchr(db + 1, '\n'), why, strlen(why)) == 0);
    /* /proc's system call (read is number 0 on x86-64), then the stack
     * unwound from its stack pointer and address: the read, the function
     * that calls it, the thread's start */
#if defined(__x86_64__)
    WF_CHECK_TRUE(strstr(db, "\n   system call: 0 0x") != NULL);
#endif
    const char *uw = strstr(db, "\n   unwound from the system call's stack pointer and address:\n   #0  0x");
    WF_CHECK_TRUE(uw != NULL);
    const char *f0 = strstr(uw, "#0  0x"), *f0_end = strchr(f0, '\n');
    WF_CHECK_TRUE(strstr(f0, " read") != NULL && strstr(f0, " read") < f0_end); /* frame 0: in read */
#ifndef TEST_ASAN
    const char *fn = strstr(uw, " blocked_in_read_for_test+0x");
    WF_CHECK_TRUE(fn != NULL && strstr(uw, " read") < fn);
    WF_CHECK_TRUE(strstr(fn, " deaf_main+0x") != NULL);
#endif
    wf_buf_free(&b);
}

/* ---- the dumper ---- */

static char *wait_for_file(const char *path, double seconds) {
    double until = wf_time_now() + seconds;
    while (wf_time_now() < until) {
        char *data;
        size_t len;
        if (wf_path_exists(path) && wf_file_read(path, &data, &len) == WF_OK) return data;
        usleep(20000);
    }
    return NULL;
}

static void section_for_test(void *ctx, wf_buf *out) {
    wf_buf_printf(out, "the test's state: %d\n", *(int *)ctx);
}

WF_TEST(stackdump_request_writes_reason_sections_and_stacks) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/hang", wf_test_tmpdir());
    wf_stackdump_options o = {.dir = dir, .rank = 3, .world = 4};
    WF_CHECK_ERR(wf_stackdump_request("x", 1, path, sizeof path), WF_ERR_INVALID, "no dumper runs");
    WF_CHECK_OK(wf_stackdump_start(&o));
    WF_CHECK_TRUE(wf_stackdump_running());
    WF_CHECK_ERR(wf_stackdump_start(&o), WF_ERR_INVALID, "runs already");
    int state = 42;
    int h = wf_stackdump_add_section("test section", section_for_test, &state);
    WF_CHECK_TRUE(h > 0);
    wf_stackdump_progress(7);
    WF_CHECK_OK(wf_stackdump_request("asked by the test\nsecond line", 60, path, sizeof path));
    char want[1200];
    snprintf(want, sizeof want, "%s/rank-00003.txt", dir);
    WF_CHECK_STREQ(path, want);
    char *t;
    size_t len;
    WF_CHECK_OK(wf_file_read(path, &t, &len));
    WF_CHECK_TRUE(strncmp(t, "weft stack dump, version 1\nreason: asked by the test\nreason: second line\n"
                             "rank: 3 of 4\n", 71) == 0);
    WF_CHECK_TRUE(strstr(t, "\nsteps completed: 7, the last ") != NULL);
    WF_CHECK_TRUE(strstr(t, "\n== test section ==\nthe test's state: 42\n") != NULL);
    WF_CHECK_TRUE(strstr(t, "\n== threads ==\nthreads: ") != NULL);
    /* the requesting thread waits in the request; the dumper takes it */
    WF_CHECK_TRUE(strstr(block_with(t, "wf_stackdump_request"), " main\n") != NULL);
    WF_CHECK_TRUE(strstr(t, "\"weft-stackdump\" state R dumper\n") != NULL);
    free(t);
    wf_stackdump_remove_section(h);
    WF_CHECK_OK(wf_stackdump_request("again", 60, path, sizeof path));
    WF_CHECK_OK(wf_file_read(path, &t, &len));
    WF_CHECK_TRUE(strstr(t, "test section") == NULL);
    free(t);
    wf_stackdump_stop();
    WF_CHECK_TRUE(!wf_stackdump_running());
    WF_CHECK_ERR(wf_stackdump_request("x", 1, path, sizeof path), WF_ERR_INVALID, "no dumper runs");
}

WF_TEST(stackdump_sigquit_dumps_and_the_process_goes_on) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/hang", wf_test_tmpdir());
    snprintf(path, sizeof path, "%s/rank-00000.txt", dir);
    /* What SIGQUIT was before (a background job of a shell starts with it
     * ignored): the dumper must put back exactly that. */
    struct sigaction before;
    sigaction(SIGQUIT, NULL, &before);
    wf_stackdump_options o = {.dir = dir, .world = 1, .sigquit = 1};
    WF_CHECK_OK(wf_stackdump_start(&o));
    raise(SIGQUIT);
    char *t = wait_for_file(path, 60);
    WF_CHECK_TRUE(t != NULL);
    WF_CHECK_TRUE(strstr(t, "reason: SIGQUIT") != NULL);
    free(t);
    wf_stackdump_stop();
    /* SIGQUIT's disposition is what it was again */
    struct sigaction sa;
    sigaction(SIGQUIT, NULL, &sa);
    WF_CHECK_TRUE(sa.sa_handler == before.sa_handler);
}

WF_TEST(stackdump_silence_dumps_once_per_stall) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/hang", wf_test_tmpdir());
    snprintf(path, sizeof path, "%s/rank-00000.txt", dir);
    wf_stackdump_options o = {.dir = dir, .world = 1, .silence_s = 0.2, .silence_key = "test.silence_s"};
    WF_CHECK_OK(wf_stackdump_start(&o));
    wf_stackdump_progress(5);
    char *t = wait_for_file(path, 60);
    WF_CHECK_TRUE(t != NULL);
    WF_CHECK_TRUE(strstr(t, "reason: no step completed for ") != NULL);
    WF_CHECK_TRUE(strstr(t, " since step 5 (test.silence_s = 0.2 s)") != NULL);
    free(t);
    /* Once per stall: nothing more while no step completes. */
    WF_CHECK_EQ(unlink(path), 0);
    usleep(1000000);
    WF_CHECK_TRUE(!wf_path_exists(path));
    /* A step re-arms it. */
    wf_stackdump_progress(6);
    t = wait_for_file(path, 60);
    WF_CHECK_TRUE(t != NULL && strstr(t, " since step 6 ") != NULL);
    free(t);
    wf_stackdump_stop();
}

WF_TEST(stackdump_start_refuses_no_folder) {
    wf_stackdump_options o = {.world = 1};
    WF_CHECK_ERR(wf_stackdump_start(&o), WF_ERR_INVALID, "no folder");
    WF_CHECK_TRUE(!wf_stackdump_running());
}
