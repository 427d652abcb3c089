/* weft: status codes and error messages.
 *
 * Every fallible library call returns a wf_status: WF_OK (0) on success, a
 * negative code otherwise. The code says what kind of failure it was; the
 * message (wf_error_msg) says what, where and what to do. Messages are kept
 * per thread, so a loader thread and the main thread do not overwrite each
 * other's. Library code never exits; only main() decides that.
 */
#ifndef WEFT_STATUS_H
#define WEFT_STATUS_H

/* X(name, value, short description) */
#define WF_STATUS_MAP(X)                                             \
    X(WF_OK, 0, "success")                                           \
    X(WF_ERR_INVALID, -1, "invalid argument")                        \
    X(WF_ERR_IO, -2, "input/output error")                           \
    X(WF_ERR_NOMEM, -3, "out of memory")                             \
    X(WF_ERR_FORMAT, -4, "malformed file")                           \
    X(WF_ERR_CONFIG, -5, "configuration error")                      \
    X(WF_ERR_NOTFOUND, -6, "not found")                              \
    X(WF_ERR_CHECKSUM, -7, "checksum mismatch")                      \
    X(WF_ERR_UNSUPPORTED, -8, "unsupported")                         \
    X(WF_ERR_EMPTY, -9, "empty input")                               \
    X(WF_ERR_RANGE, -10, "value out of range")                       \
    X(WF_ERR_INTERNAL, -11, "internal error")

typedef enum {
#define WF_STATUS_ENUM_(name, value, desc) name = value,
    WF_STATUS_MAP(WF_STATUS_ENUM_)
#undef WF_STATUS_ENUM_
} wf_status;

/* Short fixed description of a code ("malformed file"). Never NULL. */
const char *wf_status_str(wf_status s);

/* Records `fmt` as this thread's error message and returns `s`, so that
 * library code can write `return wf_error(WF_ERR_IO, "%s: %s", path, ...)`. */
wf_status wf_error(wf_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepends context to this thread's message ("loading shard x: " + old). */
wf_status wf_error_wrap(wf_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* This thread's last error message; "" if none was set. */
const char *wf_error_msg(void);

/* Forgets this thread's message. */
void wf_error_clear(void);

/* Evaluates a wf_status expression and returns it from the enclosing
 * function if it is an error. */
#define WF_TRY(expr)                          \
    do {                                      \
        wf_status wf_try_s_ = (expr);         \
        if (wf_try_s_ != WF_OK) return wf_try_s_; \
    } while (0)

#endif
