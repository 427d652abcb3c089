/* weft's unit-test harness. A test binary holds many WF_TEST functions;
 * `bin --list` prints their names, `bin NAME` runs one, `bin` runs them all,
 * each in its own forked process, and prints `N passed, N failed`. pytest
 * (tests/py/test_unit.py) runs every test of every binary as its own case.
 * A failed check prints where and why and exits the test's process. */
#ifndef WEFT_TESTS_HARNESS_H
#define WEFT_TESTS_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/status.h"

typedef void (*wf_test_fn)(void);
void wf_test_register(const char *name, wf_test_fn fn);
void wf_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
/* A fresh empty directory for this test (removed when the test passes). */
const char *wf_test_tmpdir(void);
/* "TMPDIR/name" in that directory, in one of 16 buffers used in turn: valid
 * until 16 more calls. */
const char *wf_test_path(const char *name);
/* Writes `len` bytes to `path`; fails the test on error. */
void wf_test_write_file(const char *path, const void *data, size_t len);

#define WF_TEST(name)                                                        \
    static void name(void);                                                  \
    __attribute__((constructor)) static void wf_test_reg_##name(void) {      \
        wf_test_register(#name, name);                                       \
    }                                                                        \
    static void name(void)

#define WF_CHECK_TRUE(cond)                                                  \
    do {                                                                     \
        if (!(cond)) wf_test_fail(__FILE__, __LINE__, "expected: %s", #cond); \
    } while (0)

#define WF_CHECK_OK(expr)                                                      \
    do {                                                                       \
        wf_status s_ = (expr);                                                 \
        if (s_ != WF_OK)                                                       \
            wf_test_fail(__FILE__, __LINE__, "%s returned %s: %s", #expr,      \
                         wf_status_str(s_), wf_error_msg());                   \
    } while (0)

/* Expects `expr` to fail with `status` and a message containing `needle`. */
#define WF_CHECK_ERR(expr, status, needle)                                     \
    do {                                                                       \
        wf_status s_ = (expr);                                                 \
        if (s_ != (status))                                                    \
            wf_test_fail(__FILE__, __LINE__, "%s returned %s, expected %s (%s)", \
                         #expr, wf_status_str(s_), wf_status_str(status),      \
                         wf_error_msg());                                      \
        if (!strstr(wf_error_msg(), (needle)))                                 \
            wf_test_fail(__FILE__, __LINE__, "message '%s' lacks '%s'",         \
                         wf_error_msg(), (needle));                            \
    } while (0)

#define WF_CHECK_EQ(a, b)                                                      \
    do {                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                    \
        if (a_ != b_)                                                          \
            wf_test_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", \
                         #a, a_, #b, b_);                                      \
    } while (0)

#define WF_CHECK_STREQ(a, b)                                                   \
    do {                                                                       \
        const char *a_ = (a), *b_ = (b);                                       \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                 \
            wf_test_fail(__FILE__, __LINE__, "%s == \"%s\", expected \"%s\"",   \
                         #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)");          \
    } while (0)

#define WF_CHECK_NEAR(a, b, tol)                                               \
    do {                                                                       \
        double a_ = (a), b_ = (b);                                             \
        if (!(a_ - b_ <= (tol) && b_ - a_ <= (tol)))                           \
            wf_test_fail(__FILE__, __LINE__, "%s == %.9g, expected %.9g +- %g", \
                         #a, a_, b_, (double)(tol));                           \
    } while (0)

#endif
