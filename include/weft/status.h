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
 * library code can write `return wf_error(WF_ERR_IO, "%s: %s", path, ...)`.
 * A message longer than WF_ERROR_MSG_CAP - 1 bytes loses the middle of its
 * longest word (a path, almost always) to "...", so that the reason after
 * a long path is kept; wf_error_wrap does the same. */
wf_status wf_error(wf_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepends context to this thread's message ("loading shard x: " + old). */
wf_status wf_error_wrap(wf_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* This thread's last error message; "" if none was set. */
const char *wf_error_msg(void);

/* Forgets this thread's message. */
void wf_error_clear(void);

/* The first error of a sequence of calls, kept across the cleanup that
 * follows it. Cleanup on a failure path (removing a temporary folder,
 * waiting for a thread, closing a file) may itself fail and record its own
 * message; the caller's error is the first one, so it must survive (as
 * libuv's uv__free keeps errno). Usage:
 *
 *     wf_error_keep k = WF_ERROR_KEEP_INIT;
 *     wf_error_keep_note(&k, s);          // after each call that may fail
 *     cleanup(...);                       // may overwrite the message
 *     return wf_error_keep_restore(&k);   // the first error, its message back
 */
#define WF_ERROR_MSG_CAP 1024
typedef struct {
    wf_status status;            /* the first error noted; WF_OK if none */
    char msg[WF_ERROR_MSG_CAP];  /* its message, as it was when noted */
} wf_error_keep;
#define WF_ERROR_KEEP_INIT {WF_OK, {0}}

/* Notes `s`: if it is an error and none was noted before, keeps it and this
 * thread's current message. Returns `s`. */
wf_status wf_error_keep_note(wf_error_keep *k, wf_status s);

/* Makes the kept message this thread's message again (when an error was
 * kept) and returns the kept status (WF_OK if none). */
wf_status wf_error_keep_restore(const wf_error_keep *k);

/* Logs, at debug level, that `s` (an error) was forwarded from `expr` at
 * file:line, with this thread's message; returns `s`. WF_TRY calls it, so
 * that WEFT_LOG=debug shows the path an error took (as zstd's
 * FORWARD_IF_ERROR does). The message itself is not changed. */
wf_status wf_error_forward(wf_status s, const char *file, int line, const char *expr);

/* Evaluates a wf_status expression and returns it from the enclosing
 * function if it is an error, logging where it was forwarded from at debug
 * level. */
#define WF_TRY(expr)                                                        \
    do {                                                                    \
        wf_status wf_try_s_ = (expr);                                       \
        if (wf_try_s_ != WF_OK)                                             \
            return wf_error_forward(wf_try_s_, __FILE__, __LINE__, #expr);  \
    } while (0)

/* An invariant whose failure would silently corrupt training (the order of
 * the gradient buckets, the tiling of a checkpoint's plan). Always on, in
 * release builds too (unlike assert), and never exits: when `cond` is false
 * the enclosing function (which returns wf_status) returns
 * WF_ERR_INTERNAL with a message naming the invariant, the file and line,
 * and the formatted details. `cond` must have no side effects. */
#define WF_CHECK(cond, ...)                                                 \
    do {                                                                    \
        if (!(cond)) return wf_check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__); \
    } while (0)

/* WF_CHECK's failure path: records "internal error at file:line: invariant
 * `cond` does not hold: <details>" and returns WF_ERR_INTERNAL. */
wf_status wf_check_failed(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
