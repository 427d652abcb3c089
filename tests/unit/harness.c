/* The unit-test runner behind harness.h. */
#include "harness.h"

#include <ftw.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    const char *name;
    wf_test_fn fn;
} test_entry;

static test_entry tests_[512];
static int n_tests_;
static char tmpdir_[512];

void wf_test_register(const char *name, wf_test_fn fn) {
    if (n_tests_ < (int)(sizeof tests_ / sizeof *tests_)) tests_[n_tests_++] = (test_entry){name, fn};
}

void wf_test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: FAILED: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    _exit(1);
}

const char *wf_test_tmpdir(void) {
    if (!tmpdir_[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir_, sizeof tmpdir_, "%s/weft-test-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(tmpdir_)) wf_test_fail(__FILE__, __LINE__, "mkdtemp failed");
    }
    return tmpdir_;
}

const char *wf_test_path(const char *name) {
    static char buf[16][1024];
    static unsigned k;
    char *p = buf[k++ % 16];
    if ((size_t)snprintf(p, sizeof buf[0], "%s/%s", wf_test_tmpdir(), name) >= sizeof buf[0])
        wf_test_fail(__FILE__, __LINE__, "path too long: %s/%s", wf_test_tmpdir(), name);
    return p;
}

void wf_test_write_file(const char *path, const void *data, size_t len) {
    FILE *fp = fopen(path, "wb");
    if (!fp) wf_test_fail(__FILE__, __LINE__, "cannot create %s", path);
    if (len && fwrite(data, 1, len, fp) != len) wf_test_fail(__FILE__, __LINE__, "cannot write %s", path);
    fclose(fp);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static int run_one(const test_entry *t) {
    t->fn();
    if (tmpdir_[0]) nftw(tmpdir_, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < n_tests_; i++) printf("%s\n", tests_[i].name);
        return 0;
    }
    if (argc == 2) {
        for (int i = 0; i < n_tests_; i++)
            if (strcmp(argv[1], tests_[i].name) == 0) return run_one(&tests_[i]);
        fprintf(stderr, "no test named '%s'\n", argv[1]);
        return 2;
    }
    int passed = 0, failed = 0;
    for (int i = 0; i < n_tests_; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) _exit(run_one(&tests_[i]));
        int st = 0;
        waitpid(pid, &st, 0);
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        printf("%s %s\n", ok ? "ok  " : "FAIL", tests_[i].name);
        if (ok) passed++;
        else failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
